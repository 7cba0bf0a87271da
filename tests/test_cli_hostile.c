/*
 * test_cli_hostile.c - bin/coli against inputs and outputs that are not what
 * they seem: a FIFO or a device where a model or prompt file belongs (must
 * not hang, must not eat memory), a --stats-json path that cannot be written
 * and a stdout that fails (exit 1 with the reason, never a silent 0), device
 * lists that cannot work (refused at once), and a chat message that does not
 * fit the context (forgotten without a leak, checked by valgrind).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/cli_run.h"

static char s_coli[512], s_model[512], s_dir[64];

static void setup(void) {
    cli_build_path(s_coli, sizeof s_coli, "bin/coli");
    cli_build_path(s_model, sizeof s_model, "fixtures/tiny-llama-moe-f32.gguf");
    if (!cli_file_exists(s_coli)) cr_skip_test("%s not built", s_coli);
    if (!cli_file_exists(s_model)) cr_skip_test("%s missing (make fixtures)", s_model);
    strcpy(s_dir, "/tmp/coli-clih-XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_hostile, .init = setup, .fini = teardown, .timeout = 180);

/* Run `timeout 20 ARGV...` (a hang shows as status 124) and check status and stderr. */
static void expect_exit(char *const argv[], int status, const char *in_stderr) {
    char *full[32] = {"/usr/bin/timeout", "20"};
    int n = 2;
    for (int i = 0; argv[i] && n < 31; i++) full[n++] = argv[i];
    full[n] = NULL;
    cli_result r = cli_run(full);
    cr_expect_eq(r.status, status, "%s %s %s: exit %d (124: it hung), stderr: %s", argv[1], argv[2], argv[3], r.status,
                 r.err);
    cr_expect(strstr(r.err, in_stderr) != NULL, "%s %s %s: stderr lacks '%s': %s", argv[1], argv[2], argv[3], in_stderr,
              r.err);
    cli_result_free(&r);
}

Test(cli_hostile, fifo_and_devices_are_refused_without_hanging) {
    char fifo[128], big[128], out[128];
    snprintf(fifo, sizeof fifo, "%s/fifo", s_dir);
    snprintf(big, sizeof big, "%s/big.txt", s_dir);
    snprintf(out, sizeof out, "%s/out.gguf", s_dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    const char *fifo_msg = "not a regular file (a FIFO)";
    expect_exit((char *[]){s_coli, "run", "-m", fifo, "-p", "hi", "--inproc", NULL}, 1, fifo_msg);
    expect_exit((char *[]){s_coli, "plan", "-m", fifo, NULL}, 1, fifo_msg);
    expect_exit((char *[]){s_coli, "chat", "-m", fifo, "--inproc", NULL}, 1, fifo_msg);
    expect_exit((char *[]){s_coli, "quantize", fifo, out, "Q4_0", NULL}, 1, fifo_msg);
    expect_exit((char *[]){s_coli, "tokenize", "-m", fifo, "-p", "hi", NULL}, 1, fifo_msg);
    expect_exit((char *[]){s_coli, "run", "-m", s_model, "-f", fifo, "--inproc", NULL}, 1, fifo_msg);
    expect_exit((char *[]){s_coli, "run", "-m", s_model, "-f", "/dev/zero", "--inproc", NULL}, 1,
                "not a regular file (a character device)");
    /* a regular prompt file past the cap (sparse: costs no disk) is refused before it is read */
    FILE *f = fopen(big, "w");
    cr_assert_not_null(f);
    cr_assert_eq(ftruncate(fileno(f), (off_t)300 << 20), 0);
    fclose(f);
    expect_exit((char *[]){s_coli, "run", "-m", s_model, "-f", big, "--inproc", NULL}, 1, "more than the limit");
}

Test(cli_hostile, unwritable_stats_json_and_failing_stdout_exit_1) {
    char path[160];
    snprintf(path, sizeof path, "%s/no-such-dir/stats.json", s_dir);
    expect_exit((char *[]){s_coli, "run", "-m", s_model, "-p", "hi", "-n", "2", "--inproc", "--stats-json", path, NULL},
                1, "--stats-json");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s run -m %s -p hi -n 4 --inproc > /dev/full", s_coli, s_model);
    expect_exit((char *[]){"/bin/sh", "-c", cmd, NULL}, 1, "coli: stdout:");
    snprintf(cmd, sizeof cmd, "%s --help > /dev/full", s_coli);
    expect_exit((char *[]){"/bin/sh", "-c", cmd, NULL}, 1, "coli: stdout:");
    /* a writable path still works and holds the stats */
    snprintf(path, sizeof path, "%s/stats.json", s_dir);
    expect_exit((char *[]){s_coli, "run", "-m", s_model, "-p", "hi", "-n", "2", "--inproc", "--stats-json", path, NULL},
                0, "");
    size_t len = 0;
    char *json = cli_slurp(path, &len);
    cr_expect(json && len > 2 && json[0] == '{', "stats file: %s", json ? json : "(missing)");
    free(json);
}

Test(cli_hostile, device_lists_that_cannot_work_are_refused_at_once) {
    static const struct {
        const char *devices, *why;
    } cases[] = {
        {"cpu:1,,cpu:1", "empty item"},
        {"cpu:1,", "empty item"},
        {",cpu:1", "empty item"},
        {"remote:tcp://256.1.1.1:1", "not an IPv4 address"},
        {"remote:tcp://1.2.3:5555", "not an IPv4 address"},
        {"remote:tcp://127.0.0.1:65536", "not in 1..65535"},
        {"remote:tcp://127.0.0.1:0", "not in 1..65535"},
        {"remote:tcp://127.0.0.1:99999999999999999999", "not in 1..65535"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        /* a usage error (exit 2), found before anything loads */
        expect_exit((char *[]){s_coli, "plan", "-m", s_model, "--devices", (char *)cases[i].devices, NULL}, 2,
                    cases[i].why);
        expect_exit((char *[]){s_coli, "run", "-m", s_model, "-p", "hi", "-n", "1", "--devices",
                               (char *)cases[i].devices, NULL},
                    2, cases[i].why);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        cr_expect_lt(s, 10.0, "--devices %s took %.1f s to be refused", cases[i].devices, s);
    }
    /* what is valid stays valid */
    expect_exit((char *[]){s_coli, "plan", "-m", s_model, "--devices", "cpu:1,remote:tcp://127.0.0.1:5555", NULL}, 0,
                "");
}

Test(cli_hostile, chat_forgets_a_message_that_does_not_fit_without_a_leak) {
    if (!cli_file_exists("/usr/bin/valgrind")) cr_skip_test("valgrind missing (apt-get install valgrind)");
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd,
             "printf 'this message is far too long for a context of sixteen tokens, so it cannot be answered\\n"
             "and neither can this one, which is also much longer than sixteen tokens of context\\n/quit\\n' | "
             "valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 "
             "%s chat -m %s --inproc --ctx 16 -t 1 -n 2 2>&1",
             s_coli, s_model);
    int rc = cli_shell(cmd, out, sizeof out);
    cr_expect(strstr(out, "fills the context") != NULL, "chat did not refuse the long message: %s", out);
    cr_expect_eq(rc, 0, "valgrind found a leak (exit 99) or chat failed: %s", out);
}
