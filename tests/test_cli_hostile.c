/*
 * test_cli_hostile.c - bin/coli against inputs and outputs that are not what
 * they seem: a FIFO or a device where a model, prompt, heat file or xdna
 * registry belongs (must not hang, must not eat memory), outputs that cannot
 * be written (/dev/full, a file size limit: exit 1 with the reason, never a
 * silent 0, no partial file), a quantize output that is its input under
 * another name (refused, the model intact), device lists that cannot work
 * (refused at once), and a chat message that does not fit the context
 * (forgotten without a leak, checked by valgrind).
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
    s_dir[0] = 0; /* made by the first s_tmp: a test skipped in its body runs no teardown */
}

static void teardown(void) {
    if (!s_dir[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_hostile, .init = setup, .fini = teardown, .timeout = 180);

//  s_dir/name into buf; s_dir is made on first use.
static const char *s_tmp(char *buf, size_t cap, const char *name) {
    if (!s_dir[0]) {
        strcpy(s_dir, "/tmp/coli-clih-XXXXXX");
        cr_assert_not_null(mkdtemp(s_dir));
    }
    snprintf(buf, cap, "%s/%s", s_dir, name);
    return buf;
}

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
    s_tmp(fifo, sizeof fifo, "fifo");
    s_tmp(big, sizeof big, "big.txt");
    s_tmp(out, sizeof out, "out.gguf");
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
    s_tmp(path, sizeof path, "no-such-dir/stats.json");
    expect_exit((char *[]){s_coli, "run", "-m", s_model, "-p", "hi", "-n", "2", "--inproc", "--stats-json", path, NULL},
                1, "--stats-json");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s run -m %s -p hi -n 4 --inproc > /dev/full", s_coli, s_model);
    expect_exit((char *[]){"/bin/sh", "-c", cmd, NULL}, 1, "coli: stdout:");
    snprintf(cmd, sizeof cmd, "%s --help > /dev/full", s_coli);
    expect_exit((char *[]){"/bin/sh", "-c", cmd, NULL}, 1, "coli: stdout:");
    /* a writable path still works and holds the stats */
    s_tmp(path, sizeof path, "stats.json");
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
        {"remote:tcp://127.0.0.1:5555=20G,remote:tcp://127.0.0.2:5555=20X",
         "'remote:tcp://127.0.0.2:5555=20X': bad memory budget '20X'"},
        {"remote:tcp://127.0.0.1:5555=0", "'remote:tcp://127.0.0.1:5555=0': bad memory budget '0'"},
        {"remote:tcp://127.0.0.1:5555=", "'remote:tcp://127.0.0.1:5555=': bad memory budget ''"},
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

//  1 when s_dir holds an entry whose name contains part (a temporary left behind).
static int s_dir_has(const char *part) {
    char cmd[256], out[1024];
    snprintf(cmd, sizeof cmd, "ls -A '%s'", s_dir);
    cli_shell(cmd, out, sizeof out);
    return strstr(out, part) != NULL;
}

//  ./in.gguf, its absolute path, a symlink and a hard link are all the input:
//  each is refused (usage error naming OUT.gguf, or the output flag of run and
//  bench) and the model keeps every byte.
Test(cli_hostile, quantize_refuses_its_input_under_any_name) {
    char in[128], sym[128], hard[128], abs[4096], coli[4096], cmd[10000];
    s_tmp(in, sizeof in, "in.gguf");
    s_tmp(sym, sizeof sym, "sym.gguf");
    s_tmp(hard, sizeof hard, "hard.gguf");
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", s_model, in);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(symlink("in.gguf", sym), 0);
    cr_assert_eq(link(in, hard), 0);
    cr_assert_not_null(realpath(in, abs));
    cr_assert_not_null(realpath(s_coli, coli));
    size_t len0 = 0, len1 = 0;
    char *before = cli_slurp(in, &len0);
    cr_assert_not_null(before);
    snprintf(cmd, sizeof cmd, "cd '%s' && exec '%s' quantize in.gguf ./in.gguf Q8_0", s_dir, coli);
    char *const outs[] = {abs, sym, hard};
    expect_exit((char *[]){"/bin/sh", "-c", cmd, NULL}, 2, "is the input file");
    for (int i = 0; i < 3; i++) expect_exit((char *[]){s_coli, "quantize", in, outs[i], "Q8_0", NULL}, 2, "OUT.gguf");
    /* the other outputs of a model-using command: the model is no place for them either */
    expect_exit((char *[]){s_coli, "run", "-m", in, "-p", "hi", "-n", "1", "--inproc", "--route-trace", sym, NULL}, 2,
                "--route-trace");
    expect_exit((char *[]){s_coli, "run", "-m", in, "-p", "hi", "-n", "1", "--inproc", "--stats-json", hard, NULL}, 2,
                "--stats-json");
    expect_exit((char *[]){s_coli, "bench", "-m", in, "-p", "4", "-n", "1", "--inproc", "--json", abs, NULL}, 2,
                "--json");
    char *after = cli_slurp(in, &len1);
    cr_assert_not_null(after);
    cr_expect(len0 == len1 && memcmp(before, after, len0) == 0, "the input changed (%zu -> %zu bytes)", len0, len1);
    cr_expect(!s_dir_has(".tmp-"), "a temporary was left behind");
    free(before);
    free(after);
}

//  A write that fails part way (a file size limit: EFBIG) exits 1 naming the
//  output, leaves an existing output as it was and no temporary file.
Test(cli_hostile, a_failed_quantize_write_leaves_no_partial_file) {
    char out[128], cmd[2048];
    s_tmp(out, sizeof out, "out.gguf");
    FILE *f = fopen(out, "w");
    cr_assert_not_null(f);
    fputs("previous", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "trap '' XFSZ; ulimit -f 64; exec '%s' quantize '%s' '%s' Q8_0", s_coli, s_model, out);
    expect_exit((char *[]){"/bin/sh", "-c", cmd, NULL}, 1, "cannot write: File too large");
    char *text = cli_slurp(out, NULL);
    cr_expect(text && !strcmp(text, "previous"), "the old output was damaged: %.20s", text ? text : "(gone)");
    free(text);
    cr_expect(!s_dir_has(".tmp-"), "a temporary was left behind");
    /* without an old output: none appears */
    remove(out);
    expect_exit((char *[]){"/bin/sh", "-c", cmd, NULL}, 1, out);
    cr_expect(!cli_file_exists(out), "a partial output was left");
    cr_expect(!s_dir_has(".tmp-"), "a temporary was left behind");
}

//  A FIFO where a heat file or the xdna registry belongs: refused at once.
Test(cli_hostile, fifo_heat_file_and_xdna_registry_do_not_hang) {
    char fifo[128], pkg[128], reg[160];
    s_tmp(fifo, sizeof fifo, "heat");
    s_tmp(pkg, sizeof pkg, "pkg");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    const char *msg = "not a regular file (a FIFO)";
    expect_exit((char *[]){s_coli, "heat", fifo, NULL}, 1, msg);
    expect_exit((char *[]){s_coli, "plan", "-m", s_model, "--devices", "cpu:2", "--heat", fifo, NULL}, 1, msg);
    expect_exit((char *[]){s_coli, "run", "-m", s_model, "-p", "hi", "-n", "1", "--inproc", "--heat", fifo, NULL}, 0,
                msg);
    cr_assert_eq(mkdir(pkg, 0700), 0);
    snprintf(reg, sizeof reg, "%s/registry.txt", pkg);
    cr_assert_eq(mkfifo(reg, 0600), 0);
    expect_exit((char *[]){s_coli, "xdna", "check", "--package", pkg, NULL}, 1, "");
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "timeout 20 '%s' xdna check --package '%s'", s_coli, pkg);
    cli_shell(cmd, out, sizeof out);
    cr_expect(strstr(out, msg), "xdna check: %s", out);
}

//  Outputs that cannot be written (/dev/full: ENOSPC at the flush) exit 1
//  with one line naming the flag or file; what could be written is kept.
Test(cli_hostile, outputs_to_a_full_device_exit_1) {
    char heat[128];
    s_tmp(heat, sizeof heat, "m.heat");
    expect_exit(
        (char *[]){s_coli, "run", "-m", s_model, "-p", "hi", "-n", "2", "--inproc", "--route-trace", "/dev/full", NULL},
        1, "route trace /dev/full: cannot write: No space left on device");
    expect_exit(
        (char *[]){s_coli, "run", "-m", s_model, "-p", "hi", "-n", "2", "--inproc", "--stats-json", "/dev/full", NULL},
        1, "--stats-json /dev/full: cannot write: No space left on device");
    expect_exit((char *[]){s_coli, "bench", "-m", s_model, "-p", "4", "-n", "2", "--repeat", "1", "--inproc", "--json",
                           "/dev/full", NULL},
                1, "--json /dev/full: cannot write");
    expect_exit((char *[]){s_coli, "run", "-m", s_model, "-p", "hi", "-n", "2", "--inproc", "--heat", heat, NULL}, 0,
                "");
    expect_exit((char *[]){s_coli, "heat", heat, "--plot", "/dev/full", NULL}, 1, "--plot /dev/full: cannot write");
}
