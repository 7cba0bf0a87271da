/*
 * test_serve_dashboard.c - coli serve's dashboard (GET /, /dashboard.json)
 * in a real browser: Debian's chromium, headless, driven by puppeteer-core
 * (tests/node/dashboard_test.mjs, installed into tests/node by npm ci on
 * first use). The page must load without console errors, show each worker,
 * and show a worker crash injected with COLI_FAULT within seconds. The JSON
 * endpoint is checked directly too. Skipped when chromium or npm is missing.
 */
#include <cjson/cJSON.h>

#include "tests/serve_util.h"

static int s_have(const char *prog) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", prog);
    return system(cmd) == 0;
}

/* npm ci into tests/node unless puppeteer-core is there; serialised by a lock file. */
static void s_install_client(void) {
    if (cli_file_exists("tests/node/node_modules/puppeteer-core/package.json")) return;
    char out[16384];
    const char *cmd = "cd tests/node && flock .install.lock npm ci --no-audit --no-fund 2>&1";
    int rc = cli_shell(cmd, out, sizeof out);
    cr_assert(rc == 0 && cli_file_exists("tests/node/node_modules/puppeteer-core/package.json"),
              "npm ci in tests/node failed (rc %d): %s", rc, out);
}

static cJSON *s_get_json(int port, const char *path) {
    http_resp r = su_get(port, path);
    cr_assert_eq(r.status, 200, "%s: %s", path, r.raw);
    cJSON *o = cJSON_Parse(r.body);
    cr_assert_not_null(o, "%s: not JSON: %s", path, r.body);
    su_free(&r);
    return o;
}

Test(serve_dashboard, json_has_workers_counters_and_heat) {
    char model[4096], heat[] = "/tmp/coli-dash-heat-XXXXXX";
    int fd = mkstemp(heat);
    cr_assert_geq(fd, 0);
    close(fd);
    unlink(heat); /* serve creates it; a missing heat file means "count from zero" */
    const char *extra[] = {"--devices", "cpu:2", "--heat", heat, NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    http_resp r = su_get(p.port, "/");
    cr_expect_eq(r.status, 200, "%s", r.raw);
    cr_expect(strstr(r.raw, "text/html") && strstr(r.body, "/dashboard.json"), "%.300s", r.raw);
    su_free(&r);
    r = su_post(p.port, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"seed\":5}");
    cr_assert_eq(r.status, 200, "%s", r.raw);
    su_free(&r);
    cJSON *d = s_get_json(p.port, "/dashboard.json");
    cr_expect_str_eq(cJSON_GetObjectItem(d, "status")->valuestring, "ready");
    cr_expect_eq(cJSON_GetObjectItem(d, "generated_tokens")->valuedouble, 8);
    cr_expect_eq(cJSON_GetObjectItem(d, "completions")->valuedouble, 1);
    const cJSON *ex = cJSON_GetObjectItem(d, "executor");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(ex, "workers")), 2);
    const cJSON *h = cJSON_GetObjectItem(d, "heat");
    cr_assert(cJSON_IsObject(h), "serve --heat: the heat must be there");
    int nl = (int)cJSON_GetObjectItem(h, "n_layer")->valuedouble,
        ne = (int)cJSON_GetObjectItem(h, "n_expert")->valuedouble;
    const cJSON *rows = cJSON_GetObjectItem(h, "counts"), *row, *n;
    cr_expect_eq(cJSON_GetArraySize(rows), nl);
    /* every routed token of every MoE layer selects k experts: each layer's sum is the same
     * multiple of the tokens routed (prompt + generated, through every layer) */
    double first = -1;
    cJSON_ArrayForEach(row, rows) {
        cr_expect_eq(cJSON_GetArraySize(row), ne);
        double sum = 0;
        cJSON_ArrayForEach(n, row) sum += n->valuedouble;
        if (first < 0) first = sum;
        cr_expect_eq(sum, first, "every layer routes the same tokens");
    }
    cr_expect_gt(first, 0, "a completion ran: the heat counted it");
    cJSON_Delete(d);
    cr_expect_eq(su_stop(&p), 0);
    unlink(heat);
}

Test(serve_dashboard, browser_shows_workers_and_injected_fallback, .timeout = 300) {
    if (!s_have("chromium")) cr_skip_test("chromium not found: make test installs it (Debian package chromium)");
    if (!s_have("npm")) cr_skip_test("npm not found: the browser test drives chromium with puppeteer-core from npm");
    cr_assert(s_have("node"), "npm is here but node is not");
    s_install_client();
    char model[4096], heat[] = "/tmp/coli-dash-heat-XXXXXX";
    int fd = mkstemp(heat);
    cr_assert_geq(fd, 0);
    close(fd);
    unlink(heat);
    const char *extra[] = {"--devices", "cpu:2", "--heat", heat, NULL};
    setenv("COLI_FAULT", "crash@layer=1@worker=0:after=2", 1);
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    unsetenv("COLI_FAULT");
    char shot[4096], cmd[8192];
    cli_build_path(shot, sizeof shot, "dashboard.png");
    snprintf(cmd, sizeof cmd,
             "node tests/node/dashboard_test.mjs \"$(command -v chromium)\" http://127.0.0.1:%d 2 %s 2>&1", p.port,
             shot);
    char out[32768];
    int rc = cli_shell(cmd, out, sizeof out);
    cr_expect_eq(rc, 0, "the dashboard checks failed:\n%s", out);
    cr_expect(strstr(out, "all checks passed") != NULL, "%s", out);
    cr_expect_eq(su_stop(&p), 0);
    unlink(heat);
}
