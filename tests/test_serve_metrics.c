/*
 * test_serve_metrics.c - /health and /metrics of `coli serve` tell the
 * truth: after a run with an injected worker crash (COLI_FAULT, see
 * docs/scheduler.md) the scrape passes `promtool check metrics` and shows
 * the fallback with its reason; a worker that failed to load makes /health
 * say "degraded"; counters follow the requests.
 */
#include <cjson/cJSON.h>

#include "tests/serve_util.h"
#include "tests/stderr_capture.h"

TestSuite(serve_metrics, .init = stderr_quiet);

/* The value of the first sample line that starts with series (name + labels). */
static double s_sample(const char *scrape, const char *series) {
    size_t n = strlen(series);
    for (const char *l = scrape; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, series, n) == 0 && l[n] == ' ') return atof(l + n + 1);
    return -1;
}

/* promtool check metrics on text: its exit status; skipped without promtool. */
static int s_promtool(const char *text, char *out, size_t cap) {
    if (system("command -v promtool >/dev/null 2>&1") != 0)
        cr_skip_test("promtool missing: make test installs it (Debian package prometheus)");
    char path[] = "/tmp/coli-metrics-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
    int rc = cli_shell(cmd, out, cap);
    unlink(path);
    return rc;
}

Test(serve_metrics, crash_fallback_shows_and_passes_promtool) {
    char model[4096];
    const char *extra[] = {"--devices", "cpu:2", NULL};
    setenv("COLI_FAULT", "crash@layer=1@worker=0:after=2", 1);
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    unsetenv("COLI_FAULT");
    http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":16,\"seed\":5}");
    cr_assert_eq(r.status, 200, "the crash must not fail the request: %s", r.raw);
    su_free(&r);
    /* The crashed worker is restarted after its back-off, also while the server is idle
     * (the monitor thread keeps the executor's housekeeping going): wait for "ok". */
    double until = su_now() + 10;
    int ok = 0;
    while (!ok && su_now() < until) {
        r = su_get(p.port, "/health");
        ok = r.body && strstr(r.body, "\"status\":\"ok\"") != NULL;
        su_free(&r);
        if (!ok) usleep(100000);
    }
    cr_expect(ok, "the crashed worker did not come back within 10 s");
    r = su_get(p.port, "/metrics");
    cr_assert_eq(r.status, 200);
    cr_expect(strstr(r.raw, "text/plain; version=0.0.4") != NULL, "%s", r.raw);
    char out[8192];
    cr_expect_eq(s_promtool(r.body, out, sizeof out), 0, "promtool check metrics: %s\n--- scrape:\n%s", out, r.body);
    cr_expect_eq(s_sample(r.body, "colibri_fallbacks_total{device=\"cpu:0\",reason=\"crash\"}"), 1, "%s", r.body);
    cr_expect_eq(s_sample(r.body, "colibri_worker_restarts_total{worker=\"0\",device=\"cpu:0\",plugin=\"cpu\"}"), 1,
                 "%s", r.body);
    cr_expect_gt(s_sample(r.body, "colibri_worker_batches_total{worker=\"1\",device=\"cpu:1\",plugin=\"cpu\"}"), 0,
                 "%s", r.body);
    cr_expect_gt(s_sample(r.body, "colibri_worker_resident_experts{worker=\"1\",device=\"cpu:1\",plugin=\"cpu\"}"), 0,
                 "%s", r.body);
    cr_expect_gt(s_sample(r.body, "colibri_worker_resident_bytes{worker=\"1\",device=\"cpu:1\",plugin=\"cpu\"}"), 0,
                 "%s", r.body);
    cr_expect_gt(
        s_sample(r.body, "colibri_worker_batch_latency_seconds_count{worker=\"1\",device=\"cpu:1\",plugin=\"cpu\"}"), 0,
        "%s", r.body);
    /* hosts as a memory tier: what each worker holds and uses, the experts moved (none here) */
    cr_expect_gt(s_sample(r.body, "colibri_worker_owned_bytes{worker=\"1\",device=\"cpu:1\",plugin=\"cpu\"}"), 0, "%s",
                 r.body);
    cr_expect_gt(s_sample(r.body, "colibri_worker_rss_bytes{worker=\"1\",device=\"cpu:1\",plugin=\"cpu\"}"), 0, "%s",
                 r.body);
    cr_expect_eq(s_sample(r.body, "colibri_worker_guest_experts{worker=\"1\",device=\"cpu:1\",plugin=\"cpu\"}"), 0,
                 "%s", r.body);
    cr_expect_eq(s_sample(r.body, "colibri_expert_moves_total{to=\"host\"}"), 0, "%s", r.body);
    cr_expect_eq(s_sample(r.body, "colibri_hosts_lost_total"), 0, "%s", r.body);
    cr_expect_gt(s_sample(r.body, "colibri_layer_dispatch_p50_seconds"), 0, "%s", r.body);
    cr_expect_eq(s_sample(r.body, "colibri_generated_tokens_total"), 16, "%s", r.body);
    cr_expect_eq(s_sample(r.body, "colibri_time_to_first_token_seconds_count"), 1, "%s", r.body);
    cr_expect_eq(s_sample(r.body, "colibri_time_per_output_token_seconds_count"), 15, "%s", r.body);
    cr_expect_eq(s_sample(r.body, "colibri_requests_total{endpoint=\"/v1/completions\",code=\"200\"}"), 1, "%s",
                 r.body);
    cr_expect_eq(s_sample(r.body, "colibri_queue_depth"), 0, "%s", r.body);
    cr_expect_eq(s_sample(r.body, "colibri_model_ready"), 1, "%s", r.body);
    su_free(&r);
    /* /health reports the fallback count; the restarted worker is up again */
    r = su_get(p.port, "/health");
    cr_expect_eq(r.status, 200, "%s", r.raw);
    cJSON *h = cJSON_Parse(r.body);
    cr_expect_eq(cJSON_GetObjectItem(h, "fallbacks_total")->valuedouble, 1, "%s", r.body);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(h, "workers")), 2, "%s", r.body);
    cJSON_Delete(h);
    su_free(&r);
    cr_expect_eq(su_stop(&p), 0);
}

Test(serve_metrics, worker_that_cannot_load_makes_health_degraded) {
    char model[4096];
    const char *extra[] = {"--devices", "cpu:2", NULL};
    setenv("COLI_FAULT", "fail-load@worker=1", 1);
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    unsetenv("COLI_FAULT");
    http_resp r = su_get(p.port, "/health");
    cr_expect_eq(r.status, 200, "the model serves on fallback: %s", r.raw);
    cJSON *h = cJSON_Parse(r.body);
    cr_assert_not_null(h, "%s", r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(h, "status")->valuestring, "degraded", "%s", r.body);
    cJSON *w1 = cJSON_GetArrayItem(cJSON_GetObjectItem(h, "workers"), 1);
    cr_expect_str_neq(cJSON_GetObjectItem(w1, "status")->valuestring, "up", "%s", r.body);
    cJSON_Delete(h);
    su_free(&r);
    r = su_post(p.port, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":3}");
    cr_expect_eq(r.status, 200, "%s", r.raw);
    su_free(&r);
    r = su_get(p.port, "/metrics");
    char out[8192];
    cr_expect_eq(s_promtool(r.body, out, sizeof out), 0, "promtool: %s", out);
    cr_expect_eq(s_sample(r.body, "colibri_worker_up{worker=\"1\",device=\"cpu:1\",plugin=\"cpu\"}"), 0, "%s", r.body);
    cr_expect_eq(s_sample(r.body, "colibri_worker_up{worker=\"0\",device=\"cpu:0\",plugin=\"cpu\"}"), 1, "%s", r.body);
    cr_expect_eq(s_sample(r.body, "colibri_fallbacks_total{device=\"cpu:1\",reason=\"plugin_load\"}"), 1, "%s", r.body);
    su_free(&r);
    su_stop(&p);
    char *err = stderr_captured();
    cr_expect(strstr(err, "worker 1 (cpu:1): plugin 'cpu': init failed: fault injection fail-load"), "%s", err);
    free(err);
}

//  A live expert cache's counters (docs/scheduler.md): hits + misses = the
//  routed pairs that reached it, hits = the rows its worker computed.
Test(serve_metrics, expert_cache_counters_show_and_pass_promtool) {
    char model[4096];
    const char *extra[] = {"--devices", "cpu:1@1@cache=25%,cpu:1@1", NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"seed\":5}");
    cr_assert_eq(r.status, 200, "%s", r.raw);
    su_free(&r);
    r = su_get(p.port, "/metrics");
    char out[8192];
    cr_expect_eq(s_promtool(r.body, out, sizeof out), 0, "promtool: %s", out);
    const char *w0 = "{worker=\"0\",device=\"cpu:0\",plugin=\"cpu\"}";
    char name[160];
    snprintf(name, sizeof name, "colibri_worker_cache_hits_total%s", w0);
    double hits = s_sample(r.body, name);
    snprintf(name, sizeof name, "colibri_worker_cache_misses_total%s", w0);
    double misses = s_sample(r.body, name);
    snprintf(name, sizeof name, "colibri_worker_rows_total%s", w0);
    double rows = s_sample(r.body, name);
    snprintf(name, sizeof name, "colibri_worker_cache_budget_bytes%s", w0);
    cr_expect_gt(s_sample(r.body, name), 0, "%s", r.body);
    cr_expect_gt(misses, 0, "%s", r.body);
    cr_expect_eq(hits, rows, "%s", r.body);
    cr_expect(strstr(r.body, "colibri_worker_cache_promotions_total{worker=\"0\"") != NULL, "%s", r.body);
    cr_expect(strstr(r.body, "colibri_worker_cache_hits_total{worker=\"1\"") == NULL, "worker 1 is no cache");
    su_free(&r);
    su_stop(&p);
}

Test(serve_metrics, disk_tier_counters_show_and_pass_promtool) {
    char model[4096];
    const char *extra[] = {"--devices", "inproc@ram=20K", NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"seed\":5}");
    cr_assert_eq(r.status, 200, "%s", r.raw);
    su_free(&r);
    r = su_get(p.port, "/metrics");
    char out[8192];
    cr_expect_eq(s_promtool(r.body, out, sizeof out), 0, "promtool: %s", out);
    cr_expect_gt(s_sample(r.body, "colibri_disk_tier_reads_total"), 0, "%s", r.body);
    cr_expect_gt(s_sample(r.body, "colibri_disk_tier_read_bytes_total"), 0, "%s", r.body);
    cr_expect_gt(s_sample(r.body, "colibri_disk_tier_misses_total"), 0, "%s", r.body);
    cr_expect_eq(s_sample(r.body, "colibri_disk_tier_budget_bytes"), 20480, "%s", r.body);
    cr_expect_geq(s_sample(r.body, "colibri_disk_tier_read_latency_seconds{quantile=\"0.99\"}"), 0, "%s", r.body);
    su_free(&r);
    su_stop(&p);
}

Test(serve_metrics, healthy_run_says_ok) {
    char model[4096];
    serve_proc p = su_start(su_model(model, sizeof model), NULL);
    http_resp r = su_get(p.port, "/health");
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(r.body, "\"status\":\"ok\"") != NULL, "%s", r.body);
    su_free(&r);
    su_stop(&p);
}

Test(serve_metrics, inproc_executor_reports_ok_without_workers) {
    char model[4096];
    const char *extra[] = {"--inproc", NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    http_resp r = su_get(p.port, "/health");
    cJSON *h = cJSON_Parse(r.body);
    cr_assert_not_null(h, "%s", r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(h, "status")->valuestring, "ok", "%s", r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(h, "executor")->valuestring, "inproc", "%s", r.body);
    cr_expect(cJSON_IsArray(cJSON_GetObjectItem(h, "fallbacks")), "%s", r.body);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(h, "workers")), 0, "%s", r.body);
    cJSON_Delete(h);
    su_free(&r);
    r = su_get(p.port, "/metrics");
    char out[8192];
    cr_expect_eq(s_promtool(r.body, out, sizeof out), 0, "promtool: %s", out);
    cr_expect(strstr(r.body, "colibri_executor_info{executor=\"inproc\"} 1\n") != NULL, "%s", r.body);
    su_free(&r);
    su_stop(&p);
}

Test(serve_metrics, worker_whose_batches_mostly_fail_makes_health_degraded) {
    char model[4096];
    const char *extra[] = {"--devices", "cpu:1", NULL};
    setenv("COLI_FAULT", "fail-batch@worker=0", 1); /* up, answers every batch with an error */
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    unsetenv("COLI_FAULT");
    http_resp r = su_post(p.port, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":4}");
    cr_expect_eq(r.status, 200, "the model serves on fallback: %s", r.raw);
    su_free(&r);
    r = su_get(p.port, "/health");
    cJSON *h = cJSON_Parse(r.body);
    cr_assert_not_null(h, "%s", r.body);
    cJSON *w0 = cJSON_GetArrayItem(cJSON_GetObjectItem(h, "workers"), 0);
    cr_expect_str_eq(cJSON_GetObjectItem(w0, "status")->valuestring, "up", "%s", r.body);
    cr_expect_str_eq(cJSON_GetObjectItem(h, "status")->valuestring, "degraded", "%s", r.body);
    const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(h, "reason"));
    cr_expect(why && strstr(why, "worker 0 (cpu:0)") && strstr(why, "batches failed"), "reason: %s", r.body);
    cJSON_Delete(h);
    su_free(&r);
    su_stop(&p);
}
