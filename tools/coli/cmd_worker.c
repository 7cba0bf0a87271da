/*
 * cmd_worker.c - `coli worker ARGS...`: run the worker process (the
 * coli-worker program next to this one) with the same arguments, e.g.
 *   coli worker --plugin cuda --device 0 --listen tcp://0.0.0.0:5555
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tools/coli/args.h"
#include "tools/coli/commands.h"
#include "core/settings.h"

/* coli-worker has no --help of its own (its usage goes to stderr with status 2). */
static int s_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
    return 0;
}

int cmd_worker(int argc, char **argv) {
    if (s_wants_help(argc, argv)) {
        printf("usage: coli worker (--connect EP | --listen EP) --plugin NAME [--device I] [flags]\n"
               "Run a worker process (the coli-worker program next to coli) with these arguments; the\n"
               "coordinator starts one per device. `coli worker` alone lists coli-worker's flags.\n");
        return 0;
    }
    char exe[PATH_MAX], bin[PATH_MAX + 16];
    if (coli_exe_dir(exe, sizeof exe) != 0) {
        fprintf(stderr, "coli worker: cannot find this program's directory: %s\n", strerror(errno));
        return CLI_FAIL;
    }
    snprintf(bin, sizeof bin, "%.4000s/coli-worker", exe);
    argv[0] = bin;
    execv(bin, argv);
    fprintf(stderr, "coli worker: %s: %s\n", bin, strerror(errno));
    return CLI_FAIL;
}
