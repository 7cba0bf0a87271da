/*
 * test_server_lib.c - the server as a library (tools/coli/server/server.h,
 * libcoli-server.a): every piece of its state lives in its server object, so
 * two servers run in one process, each on its own port over its own model
 * with its own options, and stop and free cleanly. (When the HTTP side and
 * the connection registry were file statics, the second server_run took
 * over the first one's daemon and registry.)
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "tests/serve_util.h"
#include "tools/coli/server/server.h"
#include "tests/stderr_capture.h"

TestSuite(server_lib, .init = stderr_quiet);

/* A fixture model with its experts in this process (no worker to start or reap). */
static coli_model *s_load(const char *fixture, char *path, size_t cap) {
    cli_build_path(path, cap, fixture);
    if (!cli_file_exists(path)) cr_skip_test("%s missing: run make fixtures (make test does)", path);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    mp.n_threads = 1;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(path, &mp, &m), 0, "%s: %s", path, coli_last_error());
    return m;
}

/* A server on any free loopback port named alias, started over m. */
static server *s_start(server_config *cfg, const char *alias, coli_model *m, const char *path) {
    cfg->port = 0;
    cfg->alias = alias;
    cfg->n_slots = 1;
    cfg->max_connections = 64;
    cfg->shutdown_grace_s = 5;
    cfg->prefix_cache_bytes = 0;
    char err[256];
    cr_assert_eq(conns_plan(cfg, err, sizeof err), 0, "%s", err);
    server *s = server_new(cfg);
    cr_assert_not_null(s);
    cr_assert_eq(server_run(s, m, path), 0, "server %s did not start", alias);
    cr_assert_gt(server_port(s), 0);
    return s;
}

/* GET path on port: its status, and the string field of the JSON body (NULL if none) into out. */
static int s_get_field(int port, const char *path, const char *field, char *out, size_t cap) {
    http_resp r = su_get(port, path);
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
    snprintf(out, cap, "%s", cJSON_IsString(v) ? v->valuestring : "");
    cJSON_Delete(j);
    int status = r.status;
    su_free(&r);
    return status;
}

/* A short greedy completion on port: 200 and the model it names, else the status. */
static int s_complete(int port, char *model, size_t cap, int *cors) {
    http_resp r = su_post(port, "/v1/completions", "{\"prompt\":\"Hello\",\"max_tokens\":3,\"temperature\":0}");
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "model");
    snprintf(model, cap, "%s", cJSON_IsString(v) ? v->valuestring : "");
    cr_expect(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "choices")), "no choices: %s", r.raw ? r.raw : "");
    *cors = r.raw && strstr(r.raw, "Access-Control-Allow-Origin: https://b.example") != NULL;
    cJSON_Delete(j);
    int status = r.status;
    su_free(&r);
    return status;
}

Test(server_lib, two_servers_in_one_process_each_with_its_model_and_options) {
    char path_a[4096], path_b[4096], got[128];
    coli_model *ma = s_load("fixtures/tiny-llama-moe-f32.gguf", path_a, sizeof path_a);
    coli_model *mb = s_load("fixtures/tiny-qwen2moe-f32.gguf", path_b, sizeof path_b);
    server_config ca, cb;
    server_config_defaults(&ca);
    server_config_defaults(&cb);
    cb.cors_origin = "https://b.example"; /* an option only b has: on b's replies only */
    server *a = s_start(&ca, "alpha", ma, path_a), *b = s_start(&cb, "beta", mb, path_b);
    int pa = server_port(a), pb = server_port(b), cors = 0;
    cr_assert_neq(pa, pb);

    cr_expect_eq(s_get_field(pa, "/health", "model", got, sizeof got), 200);
    cr_expect_str_eq(got, "alpha");
    cr_expect_eq(s_get_field(pb, "/health", "model", got, sizeof got), 200);
    cr_expect_str_eq(got, "beta");
    cr_expect_eq(s_complete(pa, got, sizeof got, &cors), 200);
    cr_expect_str_eq(got, "alpha");
    cr_expect_not(cors, "a's reply has b's CORS header");
    cr_expect_eq(s_complete(pb, got, sizeof got, &cors), 200);
    cr_expect_str_eq(got, "beta");
    cr_expect(cors, "b's reply lacks its CORS header");

    /* a stopped, b still serves */
    server_stop(a);
    int fd = su_connect(pa);
    cr_expect_lt(fd, 0, "a still accepts connections after server_stop");
    if (fd >= 0) close(fd);
    cr_expect_eq(s_get_field(pb, "/health", "status", got, sizeof got), 200);
    cr_expect_str_eq(got, "ok");
    server_free(a);
    server_free(b);
    coli_model_free(&ma);
    coli_model_free(&mb);
}

/* server_stop and server_free at any point: before listening, twice. */
Test(server_lib, stop_and_free_before_start_and_twice) {
    server_config cfg;
    server_config_defaults(&cfg);
    server *s = server_new(&cfg);
    cr_assert_not_null(s);
    cr_expect_eq(server_port(s), 0);
    server_stop(s);
    server_stop(s);
    server_free(s);
    server_free(NULL);
}
