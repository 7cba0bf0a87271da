/* settings.c - the COLI_* environment, read once; see settings.h. */
#include "core/settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ; /* the process's environment: read here only */

/* An unsigned decimal; unset, empty or anything else gives dflt. */
static uint64_t s_num(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    return *end ? dflt : (uint64_t)x;
}

static void s_str(const char *name, char *out, size_t n) {
    const char *v = getenv(name);
    snprintf(out, n, "%s", v ? v : "");
}

/* A non-zero integer (sign allowed, no blanks, no text) is on; anything else off. */
static int s_nonzero_int(const char *name) {
    const char *v = getenv(name);
    if (!v || !(*v == '-' || *v == '+' || (*v >= '0' && *v <= '9'))) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    return !errno && *end == '\0' && x != 0;
}

/* coli serve's variables (docs/api.md). */
static void s_serve(coli_settings *out) {
    out->api_key = getenv("COLI_API_KEY");
    if (out->api_key && !*out->api_key) out->api_key = NULL;
    out->heat_save_s = s_num("COLI_HEAT_SAVE_S", 60);
    if (out->heat_save_s == 0) out->heat_save_s = 60;
    if (out->heat_save_s > INT_MAX / 1000) out->heat_save_s = INT_MAX / 1000; /* its milliseconds are an int */
    out->serve_delay_ms = s_num("COLI_SERVE_DELAY_MS", 0);
    if (out->serve_delay_ms > INT_MAX) out->serve_delay_ms = INT_MAX;
}

void coli_settings_from_env(coli_settings *out) {
    memset(out, 0, sizeof *out);
    out->layer_deadline_ms = s_num("COLI_LAYER_DEADLINE_MS", 2000);
    out->deadline_per_row_us = s_num("COLI_DEADLINE_PER_ROW_US", 1000);
    out->worker_start_ms = s_num("COLI_WORKER_START_MS", 30000);
    out->hang_kill_ms = s_num("COLI_HANG_KILL_MS", 10000);
    out->restart_backoff_ms = s_num("COLI_RESTART_BACKOFF_MS", 100);
    out->fail_window_ms = s_num("COLI_WORKER_FAIL_WINDOW_MS", 60000);
    out->max_failures = s_num("COLI_WORKER_MAX_FAILURES", 3);
    out->reprobe_ms = s_num("COLI_WORKER_REPROBE_MS", 60000);
    out->heartbeat_ms = s_num("COLI_HEARTBEAT_MS", 200);
    out->heartbeat_miss = s_num("COLI_HEARTBEAT_MISS", 10);
    out->cache_prefetch = s_num("COLI_CACHE_PREFETCH", 1);
    out->cache_margin_pct = s_num("COLI_CACHE_MARGIN_PCT", 25);
    out->probe_timeout_ms = s_num("COLI_PROBE_TIMEOUT_MS", 10000);
    out->prefault = s_num("COLI_PREFAULT", 1);
    out->disk_direct = s_num("COLI_DISK_DIRECT", 1);
    out->disk_prefetch = s_num("COLI_DISK_PREFETCH", 0);
    out->disk_auto = s_num("COLI_DISK_AUTO", 1);
    out->shm_spin_us = s_num("COLI_SHM_SPIN_US", 50);
    s_str("COLI_DATA_PATH", out->data_path_text, sizeof out->data_path_text);
    const char *dp = out->data_path_text;
    out->data_path = !*dp || !strcmp(dp, "shm") ? COLI_DATA_PATH_SHM
                     : !strcmp(dp, "zmq")       ? COLI_DATA_PATH_ZMQ
                                                : COLI_DATA_PATH_INVALID;
    s_str("COLI_WORKER", out->worker_bin, sizeof out->worker_bin);
    s_str("COLI_BUILD", out->build_dir, sizeof out->build_dir);
    s_str("COLI_KEYS", out->keys_dir, sizeof out->keys_dir);
    s_str("COLI_PLUGIN_DIR", out->plugin_dir, sizeof out->plugin_dir);
    s_str("TMPDIR", out->tmp_dir, sizeof out->tmp_dir);
    out->xdna = s_nonzero_int("COLI_XDNA");
    s_str("COLI_XDNA_PACKAGE", out->xdna_package, sizeof out->xdna_package);
    uint64_t xdna_ms = s_num("COLI_XDNA_TIMEOUT_MS", 0);
    out->xdna_timeout_ms = xdna_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)xdna_ms;
    s_str("COLI_XDNA", out->xdna_text, sizeof out->xdna_text);
    s_serve(out);
    const char *ign = getenv("COLI_PLACE_IGNORE_BUDGET");
    out->place_ignore_budget = ign && !strcmp(ign, "1");
    s_str("COLI_FAULT", out->fault, sizeof out->fault);
    s_str("COLI_PLUGIN_FAULT", out->plugin_fault, sizeof out->plugin_fault);
    s_str("COLI_FUZZ_VOCAB", out->fuzz_vocab, sizeof out->fuzz_vocab);
    out->bench_rounds = s_num("BENCH_ROUNDS", 0);
}

void coli_settings_load(coli_settings *out, const coli_model_params *p) {
    coli_settings_from_env(out);
    if (!p) return;
    if (p->worker_path && *p->worker_path) snprintf(out->worker_bin, sizeof out->worker_bin, "%s", p->worker_path);
    if (p->keys_dir && *p->keys_dir) snprintf(out->keys_dir, sizeof out->keys_dir, "%s", p->keys_dir);
    if (p->xdna) out->xdna = 1; /* --xdna: the lane is opt-in, this or the variable turns it on */
}

char **coli_settings_worker_env(const coli_settings *set) {
    static char xdna_on[] = "COLI_XDNA=1";
    const int put = set->xdna && !s_nonzero_int("COLI_XDNA"); /* what the worker would not read itself */
    size_t n = 0;
    while (environ[n]) n++;
    char **env = malloc((n + 2) * sizeof *env);
    if (!env) return NULL;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!put || strncmp(environ[i], "COLI_XDNA=", 10) != 0) env[m++] = environ[i];
    if (put) env[m++] = xdna_on;
    env[m] = NULL;
    return env;
}

int coli_exe_dir(char *out, size_t n) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    out[0] = 0;
    if (len <= 0) return -1;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(out, n, "%s", exe);
    return 0;
}
