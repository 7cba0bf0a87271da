/*
 * test_xdna_cli.c - the NPU lane as a user meets it: `coli run --xdna`
 * without a package (PACKAGE_MISSING once, counted, the CPU run's tokens),
 * `coli serve --xdna`'s /metrics, `coli xdna check`, --xdna's conflicts, and no XRT library in the NEEDED
 * entries of any binary of the default build.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/serve_util.h"
#include "tests/xdna_test_util.h"

#define MODEL "tiny-llama-moe-f32.gguf"

static const char *s_model(void) {
    static char path[1100];
    snprintf(path, sizeof path, "%.1000s/fixtures/%s", xdna_abs_build(), MODEL);
    if (access(path, R_OK) != 0) cr_skip_test("fixture %s missing (make fixtures)", path);
    return path;
}

static const char *s_coli(void) {
    static char path[1100];
    snprintf(path, sizeof path, "%.1000s/bin/coli", xdna_abs_build());
    return path;
}

static void s_env(void) {
    xdna_env_defaults();
    unsetenv("COLI_XDNA");
}

TestSuite(xdna_cli, .init = s_env);

//  Lines of text that start with prefix and contain needle.
static int s_count_lines(const char *text, const char *prefix, const char *needle) {
    int n = 0;
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        n += !strncmp(line, prefix, strlen(prefix)) && strstr(line, needle);
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

Test(xdna_cli, run_without_package_says_package_missing_once_and_gives_the_cpu_tokens) {
    char dir[64], stats[128];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 0, s_model());
    snprintf(stats, sizeof stats, "%s/stats.json", dir);
    char *cpu[] = {(char *)s_coli(),
                   "run",
                   "-m",
                   (char *)s_model(),
                   "-p",
                   "And it came to pass",
                   "-n",
                   "12",
                   "--temp",
                   "0",
                   "--devices",
                   "cpu:1",
                   "-t",
                   "1",
                   NULL};
    char *npu[] = {(char *)s_coli(),
                   "run",
                   "-m",
                   (char *)s_model(),
                   "-p",
                   "And it came to pass",
                   "-n",
                   "12",
                   "--temp",
                   "0",
                   "--devices",
                   "cpu:1",
                   "-t",
                   "1",
                   "--xdna",
                   "--stats-json",
                   stats,
                   NULL};
    cli_result a = cli_run(cpu), b = cli_run(npu);
    cr_assert_eq(a.status, 0, "%s", a.err);
    cr_assert_eq(b.status, 0, "%s", b.err);
    cr_expect_str_eq(b.out, a.out, "same tokens as the CPU run");
    cr_expect_eq(s_count_lines(b.err, "colibri: ", "PACKAGE_MISSING"), 1, "one diagnostic line:\n%s", b.err);
    cr_expect_eq(s_count_lines(b.err, "coli-worker", "PACKAGE_MISSING"), 0, "not twice:\n%s", b.err);
    char *js = cli_slurp(stats, NULL);
    cr_assert(js, "--stats-json written");
    cr_expect(strstr(js, "{\"device\":\"xdna:0\",\"reason\":\"PACKAGE_MISSING\",\"count\":1}"), "%s", js);
    free(js);
    char *st[] = {(char *)s_coli(), "stats", stats, NULL};
    cli_result c = cli_run(st);
    cr_expect_eq(c.status, 0, "%s", c.err);
    cr_expect(strstr(c.out, "PACKAGE_MISSING"), "coli stats shows it:\n%s", c.out);
    cli_result_free(&a);
    cli_result_free(&b);
    cli_result_free(&c);
    xdna_rm_dir(dir);
}

//  A failure of every execution: said once on stderr, counted each time, the
//  CPU computes every batch (same text).
Test(xdna_cli, a_per_batch_failure_is_said_once_and_counted_each_time) {
    char dir[64], stats[128];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, s_model());
    snprintf(stats, sizeof stats, "%s/stats.json", dir);
    char *cpu[] = {(char *)s_coli(),
                   "run",
                   "-m",
                   (char *)s_model(),
                   "-p",
                   "And it came to pass",
                   "-n",
                   "8",
                   "--temp",
                   "0",
                   "--devices",
                   "cpu:1",
                   "-t",
                   "1",
                   NULL};
    char *npu[] = {(char *)s_coli(),
                   "run",
                   "-m",
                   (char *)s_model(),
                   "-p",
                   "And it came to pass",
                   "-n",
                   "8",
                   "--temp",
                   "0",
                   "--devices",
                   "cpu:1",
                   "-t",
                   "1",
                   "--xdna",
                   "--stats-json",
                   stats,
                   NULL};
    cli_result a = cli_run(cpu);
    setenv("COLI_XRT_SYNTH_FAULT", "timeout", 1);
    cli_result b = cli_run(npu);
    cr_assert_eq(b.status, 0, "%s", b.err);
    cr_expect_str_eq(b.out, a.out, "the CPU computed every batch");
    cr_expect_eq(s_count_lines(b.err, "colibri: xdna: RUN_TIMEOUT", ""), 1, "said once:\n%s", b.err);
    char *js = cli_slurp(stats, NULL);
    cr_assert(js);
    const char *key = "{\"device\":\"xdna:0\",\"reason\":\"RUN_TIMEOUT\",\"count\":";
    const char *at = strstr(js, key);
    cr_expect(at && atol(at + strlen(key)) > 1, "counted per batch: %s", js);
    free(js);
    cli_result_free(&a);
    cli_result_free(&b);
    xdna_rm_dir(dir);
}

Test(xdna_cli, stats_show_the_lane_bucket_counters) {
    char dir[64], stats[128];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, s_model());
    snprintf(stats, sizeof stats, "%s/stats.json", dir);
    char *npu[] = {(char *)s_coli(),
                   "run",
                   "-m",
                   (char *)s_model(),
                   "-p",
                   "And it came to pass",
                   "-n",
                   "4",
                   "--temp",
                   "0",
                   "--devices",
                   "cpu:1",
                   "-t",
                   "1",
                   "--xdna",
                   "--stats-json",
                   stats,
                   NULL};
    cli_result b = cli_run(npu);
    cr_assert_eq(b.status, 0, "%s", b.err);
    cr_expect(strstr(b.err, "counters: bucket_m64 "), "end-of-run summary:\n%s", b.err);
    char *st[] = {(char *)s_coli(), "stats", stats, NULL};
    cli_result c = cli_run(st);
    cr_expect_eq(c.status, 0, "%s", c.err);
    cr_expect(strstr(c.out, "plugin counters of worker 1 (xdna:0): bucket_m64 "), "%s", c.out);
    cli_result_free(&b);
    cli_result_free(&c);
    xdna_rm_dir(dir);
}

Test(xdna_cli, serve_metrics_count_the_diagnostic) {
    char dir[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 0, s_model());
    const char *extra[] = {"--devices", "cpu:1", "-t", "1", "--xdna", NULL};
    serve_proc p = su_start(s_model(), extra);
    http_resp r = su_get(p.port, "/metrics");
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(r.body, "colibri_fallbacks_total{device=\"xdna:0\",reason=\"PACKAGE_MISSING\"} 1"), "%s", r.body);
    su_free(&r);
    su_stop(&p);
    xdna_rm_dir(dir);
}

Test(xdna_cli, check_reports_each_fact_and_its_verdict) {
    char dir[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 0, s_model());
    char *argv[] = {(char *)s_coli(), "xdna", "check", "-m", (char *)s_model(), NULL};
    cli_result r = cli_run(argv);
    cr_expect_eq(r.status, 1, "not provisioned: %s", r.out);
    cr_expect(strstr(r.out, "requested: no"), "%s", r.out);
    cr_expect(strstr(r.out, "verdict: PACKAGE_MISSING"), "%s", r.out);
    cli_result_free(&r);
    xdna_sh("'%s/bin/xdna_pack' --synth '%s' '%s/xdna-package' >/dev/null", xdna_abs_build(), s_model(), dir);
    r = cli_run(argv);
    cr_expect_eq(r.status, 0, "provisioned: %s", r.out);
    cr_expect(strstr(r.out, "helper:") && strstr(r.out, "OK, ABI generation 2"), "%s", r.out);
    cr_expect(strstr(r.out, "blk.1: ffn_gate OK, ffn_up OK, ffn_down OK; M64 yes; M256 yes"), "%s", r.out);
    cli_result_free(&r);
    setenv("COLI_XRT_SYNTH_FAULT", "device", 1);
    r = cli_run(argv);
    cr_expect_eq(r.status, 1, "%s", r.out);
    cr_expect(strstr(r.out, "verdict: DEVICE_UNAVAILABLE"), "%s", r.out);
    cli_result_free(&r);
    xdna_rm_dir(dir);
}

Test(xdna_cli, xdna_conflicts_with_inproc) {
    char *argv[] = {(char *)s_coli(), "run", "-m", (char *)s_model(), "-p", "x", "-n", "1", "--inproc", "--xdna", NULL};
    cli_result r = cli_run(argv);
    cr_expect_eq(r.status, 2, "%s", r.err);
    cr_expect(strstr(r.err, "--xdna"), "%s", r.err);
    cli_result_free(&r);
}

//  readelf -d of every program and library of the default build: no XRT.
Test(xdna_cli, no_binary_of_the_default_build_needs_xrt) {
    const char *sub[] = {"bin", "lib"};
    int checked = 0;
    for (int s = 0; s < 2; s++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", xdna_abs_build(), sub[s]);
        DIR *d = opendir(path);
        cr_assert(d, "%s", path);
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.' || strstr(e->d_name, ".a")) continue;
            char cmd[1600];
            snprintf(cmd, sizeof cmd, "readelf -d '%s/%s' 2>/dev/null | grep NEEDED | grep -qi xrt", path, e->d_name);
            cr_expect_neq(system(cmd), 0, "%s/%s needs an XRT library", path, e->d_name);
            checked++;
        }
        closedir(d);
    }
    cr_expect_gt(checked, 5);
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "readelf -d '%s/lib/libcoli-xdna.so' | grep -q 'NEEDED.*libsodium'", xdna_abs_build());
    cr_expect_eq(system(cmd), 0, "the plugin takes SHA-256 from libsodium");
}
