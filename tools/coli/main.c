/*
 * main.c - `coli COMMAND [flags]`: dispatch to one file per command.
 *
 * The CLI is a thin user of include/colibri.h; every number it prints comes
 * from the library. Exit status: 0 success, 1 runtime error ("coli: ..."),
 * 2 usage error (one line naming the flag and the reason).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "tools/coli/args.h"
#include "colibri.h"
#include "tools/coli/commands.h"
#include "core/file_io.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

/* One line per command; worker, plan, bench, serve, chat and stats go here too. */
static const command s_commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"tokenize", cmd_tokenize, "print the token ids and pieces of a text"},
    {"logits", cmd_logits, "teacher-forced top-k logits at every position of an id list"},
    {"perplexity", cmd_perplexity, "perplexity of a model over a text file"},
    {"imatrix", cmd_imatrix, "importance matrix over a text file (llama-imatrix's file) for quantize --imatrix"},
    {"quantize", cmd_quantize, "write a copy of a model with its weights in another type"},
    {"plan", cmd_plan, "print which expert goes to which worker for --devices (--heat: hottest on the fastest)"},
    {"heat", cmd_heat, "print an expert heat file: per-layer tables, top-N share, pairs, --plot SVG"},
    {"bench", cmd_bench, "prefill/decode tok/s, token and dispatch latency, vs the read bandwidth"},
    {"worker", cmd_worker, "run a worker process (what the coordinator starts per device)"},
    {"serve", cmd_serve, "serve the model over an OpenAI-compatible HTTP API, with /health and /metrics"},
    {"chat", cmd_chat, "chat with the model in the terminal (streams, keeps the conversation)"},
    {"stats", cmd_stats, "print a --stats-json file: workers, fallbacks by device and reason"},
    {"keygen", cmd_keygen, "make CURVE key pairs for remote workers (tcp, authenticated)"},
    {"xdna", cmd_xdna, "check the experimental NPU lane: package, helper, device, gates (xdna check)"},
};
#define N_COMMANDS ((int)(sizeof s_commands / sizeof s_commands[0]))

static void s_usage(FILE *f) {
    fprintf(f, "usage: coli COMMAND [flags]   (coli COMMAND --help for its flags)\n"
               "colibri: inference for Mixture-of-Experts language models in GGUF files.\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-12s %s\n", s_commands[i].name, s_commands[i].summary);
}

/* A command's output that never reached stdout (a full disk, /dev/full, a
 * closed pipe) is a failure, not a silent success: exit 1 with the reason. */
static int s_finish_stdout(int rc) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
    fprintf(stderr, "coli: stdout: %s\n", errno ? strerror(errno) : "write error");
    return rc ? rc : CLI_FAIL;
}

static int s_main(int argc, char **argv) {
    if (argc < 2) {
        s_usage(stderr);
        return ARGS_ERROR;
    }
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0 || strcmp(name, "help") == 0) {
        s_usage(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0) {
        printf("coli (colibri API %d)\n", COLI_API_VERSION);
        return 0;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, s_commands[i].name) == 0) return s_commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "coli: %s: unknown command (see coli --help)\n", name);
    return ARGS_ERROR;
}

/* Ctrl-C, kill or a closed terminal in the middle of a write: remove the
 * temporary files (a quantize's can be GBs, hidden beside the target), then
 * die of the signal as before. */
static void s_on_fatal_signal(int sig) {
    coli_outfile_unlink_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* For the signals whose default ends the process; one that is ignored (nohup,
 * a background job) stays ignored. Commands with their own handlers (chat,
 * serve) replace these. */
static void s_install_cleanup(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = s_on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL) sigaction(sigs[i], &sa, NULL);
    }
}

int main(int argc, char **argv) {
    s_install_cleanup();
    return s_finish_stdout(s_main(argc, argv));
}
