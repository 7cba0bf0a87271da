/*
 * test_cli_stats.c - `coli stats FILE.json`: the stats of a real run with
 * two workers, a hand-written file with fallbacks, and bad input.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli_run.h"

static char s_coli[512], s_model[512], s_dir[64];

static void setup(void) {
    cli_build_path(s_coli, sizeof s_coli, "bin/coli");
    cli_build_path(s_model, sizeof s_model, "fixtures/tiny-llama-moe-f32.gguf");
    if (!cli_file_exists(s_coli)) cr_skip_test("%s not built", s_coli);
    if (!cli_file_exists(s_model)) cr_skip_test("%s missing (make fixtures)", s_model);
    strcpy(s_dir, "/tmp/coli-stats-XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
}

static void teardown(void) {
    if (!s_dir[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_stats, .init = setup, .fini = teardown, .timeout = 60);

static void s_write(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

//  The line of out that starts with `prefix` (after spaces), or NULL.
static const char *s_line(const char *out, const char *prefix) {
    for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char *q = p;
        while (*q == ' ') q++;
        if (!strncmp(q, prefix, strlen(prefix))) return q;
    }
    return NULL;
}

Test(cli_stats, real_run_with_two_workers) {
    char stats[128];
    snprintf(stats, sizeof stats, "%s/run.json", s_dir);
    char *run[] = {s_coli,      "run",   "-m",           s_model, "-p", "Once upon a time", "-n", "4", "--temp", "0",
                   "--devices", "cpu:2", "--stats-json", stats,   NULL};
    cli_result r = cli_run(run);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cli_result_free(&r);
    char *argv[] = {s_coli, "stats", stats, NULL};
    r = cli_run(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "executor: workers (2)"), "%s", r.out);
    for (int w = 0; w < 2; w++) {
        char row[32];
        snprintf(row, sizeof row, "%d   cpu:%d    cpu    up", w, w);
        const char *line = s_line(r.out, row);
        cr_expect_not_null(line, "no row '%s' in:\n%s", row, r.out);
    }
    cr_expect(strstr(r.out, "fallbacks: 0"), "%s", r.out);
    cr_expect(s_line(r.out, "cpu:1      ") && strstr(r.out, "expert moves: 0 hosts lost"), "%s", r.out);
    cli_result_free(&r);
}

Test(cli_stats, fallbacks_by_device_and_reason) {
    char path[128];
    snprintf(path, sizeof path, "%s/fb.json", s_dir);
    s_write(path, "{\"executor\":\"workers\",\"workers\":[{\"id\":0,\"device\":\"cuda:0\",\"plugin\":\"cuda\","
                  "\"status\":\"failed\",\"reason\":\"plugin 'cuda': no device\",\"batches\":0},"
                  "{\"id\":1,\"device\":\"cpu:0\",\"plugin\":\"cpu\",\"status\":\"up\",\"data_path\":\"shm\","
                  "\"resident_experts\":8,\"batches\":42,\"restarts\":1}],"
                  "\"fallbacks\":[{\"device\":\"cuda:0\",\"reason\":\"no_device\",\"count\":1},"
                  "{\"device\":\"cpu:0\",\"reason\":\"crash\",\"count\":3}],\"fallbacks_total\":4,"
                  "\"late_replies_dropped\":2}");
    char *argv[] = {s_coli, "stats", path, NULL};
    cli_result r = cli_run(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "fallbacks: 4"), "%s", r.out);
    const char *a = s_line(r.out, "cuda:0     no_device");
    const char *b = s_line(r.out, "cpu:0      crash");
    cr_expect(a && strtol(a + 25, NULL, 10) == 1, "no_device row: %s", r.out);
    cr_expect(b && strtol(b + 25, NULL, 10) == 3, "crash row: %s", r.out);
    cr_expect(strstr(r.out, "plugin 'cuda': no device"), "the failed worker's reason: %s", r.out);
    cr_expect(strstr(r.out, "late replies 2"), "%s", r.out);
    cli_result_free(&r);
}

Test(cli_stats, bad_input_is_named) {
    char bad[128], other[128], missing[128];
    snprintf(bad, sizeof bad, "%s/bad.json", s_dir);
    snprintf(other, sizeof other, "%s/other.json", s_dir);
    snprintf(missing, sizeof missing, "%s/none.json", s_dir);
    s_write(bad, "{\"executor\": \"workers\", oops");
    s_write(other, "{\"hello\": 1}");
    const char *files[] = {bad, other, missing};
    const char *want[] = {"not JSON", "not a colibri stats file", "cannot read"};
    for (int i = 0; i < 3; i++) {
        char *argv[] = {s_coli, "stats", (char *)files[i], NULL};
        cli_result r = cli_run(argv);
        cr_expect_eq(r.status, 1, "%s", files[i]);
        cr_expect(strstr(r.err, want[i]), "%s: %s", files[i], r.err);
        cli_result_free(&r);
    }
    char *none[] = {s_coli, "stats", NULL};
    cli_result r = cli_run(none);
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "coli stats: FILE: missing"), "%s", r.err);
    cli_result_free(&r);
}
