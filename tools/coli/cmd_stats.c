/*
 * cmd_stats.c - `coli stats FILE.json`: print a --stats-json file (the
 * schema of docs/scheduler.md, "Stats") as tables: one row per worker, then
 * the fallbacks by device and reason, then the dropped-message counters.
 * The live form (`--url` of a running `coli serve`) is its /metrics page.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/args.h"
#include "tools/coli/commands.h"

/* Whole file, NUL-terminated; NULL with errno set on failure. */
static char *s_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *b = cap < ((size_t)64 << 20) ? realloc(buf, cap * 2) : NULL;
            if (!b) {
                free(buf);
                buf = NULL;
                errno = EFBIG;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

static double s_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *s_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : "-";
}

static void s_workers(const cJSON *ws) {
    printf("%-3s %-8s %-6s %-12s %-4s %7s %9s %9s %10s %9s %9s %8s %6s  %s\n", "id", "device", "plugin", "status",
           "path", "experts", "MiB", "batches", "rows", "p50 ms", "p99 ms", "restarts", "beats", "reason");
    const cJSON *w;
    cJSON_ArrayForEach(w, ws) {
        const char *reason = s_str(w, "reason");
        printf("%-3.0f %-8s %-6s %-12s %-4s %7.0f %9.1f %9.0f %10.0f %9.3f %9.3f %8.0f %6.0f  %s\n", s_num(w, "id"),
               s_str(w, "device"), s_str(w, "plugin"), s_str(w, "status"), s_str(w, "data_path"),
               s_num(w, "resident_experts"), s_num(w, "resident_bytes") / 1048576.0, s_num(w, "batches"),
               s_num(w, "rows"), s_num(w, "batch_latency_p50_ms"), s_num(w, "batch_latency_p99_ms"),
               s_num(w, "restarts"), s_num(w, "heartbeats"), strcmp(reason, "-") && *reason ? reason : "");
    }
}

static void s_fallbacks(const cJSON *root) {
    const cJSON *fb = cJSON_GetObjectItemCaseSensitive(root, "fallbacks");
    printf("\nfallbacks: %.0f\n", s_num(root, "fallbacks_total"));
    if (cJSON_GetArraySize(fb) == 0) return;
    printf("  %-10s %-14s %6s\n", "device", "reason", "count");
    const cJSON *f;
    cJSON_ArrayForEach(f, fb)
        printf("  %-10s %-14s %6.0f\n", s_str(f, "device"), s_str(f, "reason"), s_num(f, "count"));
}

/* Each worker's plugin counters (e.g. the xdna lane's buckets), if any. */
static void s_counters(const cJSON *ws) {
    const cJSON *w;
    cJSON_ArrayForEach(w, ws) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(w, "counters"), *v;
        if (!cJSON_IsObject(c) || !c->child) continue;
        printf("\nplugin counters of worker %.0f (%s):", s_num(w, "id"), s_str(w, "device"));
        cJSON_ArrayForEach(v, c) printf(" %s %.0f", v->string, cJSON_IsNumber(v) ? v->valuedouble : 0.0);
        printf("\n");
    }
}

/* Live expert caches (docs/scheduler.md, "Live expert cache"), if any. */
static void s_caches(const cJSON *ws) {
    const cJSON *w;
    int any = 0;
    cJSON_ArrayForEach(w, ws) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(w, "cache");
        if (!cJSON_IsObject(c)) continue;
        if (!any++)
            printf("\nlive expert caches:\n  %-8s %9s %9s %9s %8s %10s %9s %9s %9s %9s\n", "device", "budget MiB",
                   "hits", "misses", "hit %", "promotions", "evictions", "moved MiB", "prefetch", "used");
        printf("  %-8s %9.1f %9.0f %9.0f %8.1f %10.0f %9.0f %9.1f %9.0f %9.0f\n", s_str(w, "device"),
               s_num(c, "budget_bytes") / 1048576.0, s_num(c, "hits"), s_num(c, "misses"), 100 * s_num(c, "hit_rate"),
               s_num(c, "promotions"), s_num(c, "evictions"), s_num(c, "bytes_moved") / 1048576.0,
               s_num(c, "prefetch_issued"), s_num(c, "prefetch_used"));
    }
}

/* Remote hosts as a memory tier (docs/scheduler.md): each worker's memory, the experts moved. */
static void s_hosts(const cJSON *root, const cJSON *ws) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "expert_moves"), *w;
    if (!cJSON_IsObject(m)) return;
    printf("\nmemory (MiB):\n%-10s %8s %8s %6s %8s %8s %8s\n", "device", "budget", "owned", "guests", "rss", "model",
           "cgroup");
    cJSON_ArrayForEach(w, ws) {
        printf("%-10s %8.1f %8.1f %6.0f %8.1f %8.1f %8.1f\n", s_str(w, "device"), s_num(w, "budget_bytes") / 1048576.0,
               s_num(w, "owned_bytes") / 1048576.0, s_num(w, "guest_experts"), s_num(w, "rss_bytes") / 1048576.0,
               s_num(w, "model_rss_bytes") / 1048576.0, s_num(w, "cgroup_bytes") / 1048576.0);
    }
    printf(
        "expert moves: %.0f hosts lost; to hosts %.0f (%.1f MiB), to the coordinator %.0f (%.1f MiB), back home %.0f "
        "(%.1f MiB); %.3f s moving\n",
        s_num(m, "hosts_lost"), s_num(m, "to_hosts"), s_num(m, "to_hosts_bytes") / 1048576.0,
        s_num(m, "to_coordinator"), s_num(m, "to_coordinator_bytes") / 1048576.0, s_num(m, "returned"),
        s_num(m, "returned_bytes") / 1048576.0, s_num(m, "move_seconds"));
}

/* The disk tier (--devices inproc@ram=SIZE, docs/scheduler.md "Tiers"), if the run had one. */
static void s_disk_tier(const cJSON *root) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "disk_tier");
    if (!cJSON_IsObject(t)) return;
    printf("disk tier: RAM %.1f of %.1f MiB, %.0f experts; hits %.0f, misses %.0f (hit rate %.1f%%); "
           "%.0f disk reads (%.1f MiB, %.0f O_DIRECT), read p50 %.2f ms, p99 %.2f ms; prefetch %.0f issued, %.0f "
           "used, %.0f speculative reads\n",
           s_num(t, "used_bytes") / 1048576.0, s_num(t, "budget_bytes") / 1048576.0, s_num(t, "resident_experts"),
           s_num(t, "hits"), s_num(t, "misses"), 100 * s_num(t, "hit_rate"), s_num(t, "disk_reads"),
           s_num(t, "disk_bytes") / 1048576.0, s_num(t, "direct_reads"), s_num(t, "read_p50_us") / 1000.0,
           s_num(t, "read_p99_us") / 1000.0, s_num(t, "prefetch_issued"), s_num(t, "prefetch_used"),
           s_num(t, "speculative_reads"));
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "decode");
    if (!cJSON_IsObject(d)) return;
    printf("disk tier decode: %.0f layer calls, %.0f needed reads (%.1f MiB); layers %.3f s, of it read wait %.3f s, "
           "compute %.3f s; %.0f guesses dropped unread, disk busy %.3f s\n",
           s_num(d, "layer_calls"), s_num(d, "needed_reads"), s_num(d, "needed_bytes") / 1048576.0,
           s_num(d, "layer_ms") / 1000.0, s_num(d, "read_wait_ms") / 1000.0, s_num(d, "compute_ms") / 1000.0,
           s_num(t, "cancelled_reads"), s_num(t, "disk_busy_ms") / 1000.0);
}

static int s_print(const char *path, const cJSON *root) {
    const char *ex = s_str(root, "executor");
    if (!strcmp(ex, "-")) {
        fprintf(stderr, "coli stats: %s: not a colibri stats file (no \"executor\")\n", path);
        return CLI_FAIL;
    }
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(root, "workers");
    if (strcmp(ex, "workers") || !cJSON_IsArray(ws)) {
        printf("executor: %s (experts computed in the coordinator; no workers, no fallbacks)\n", ex);
        s_disk_tier(root);
        return 0;
    }
    printf("executor: workers (%d); dispatch p50 %.3f ms, p99 %.3f ms over %.0f layers; "
           "rows computed in-process %.0f\n\n",
           cJSON_GetArraySize(ws), s_num(root, "dispatch_latency_p50_ms"), s_num(root, "dispatch_latency_p99_ms"),
           s_num(root, "dispatches"), s_num(root, "inproc_rows"));
    s_workers(ws);
    s_fallbacks(root);
    s_counters(ws);
    s_caches(ws);
    s_hosts(root, ws);
    printf("\ndropped messages: late replies %.0f, foreign %.0f, stale %.0f, impostor %.0f\n",
           s_num(root, "late_replies_dropped"), s_num(root, "foreign_messages_dropped"),
           s_num(root, "stale_messages_dropped"), s_num(root, "impostor_messages_refused"));
    return 0;
}

int cmd_stats(int argc, char **argv) {
    const char *url = NULL;
    arg_spec specs[] = {
        {"--url", NULL, ARG_STR, &url, 0, 0, 0, "URL", "(not here: scrape /metrics of coli serve)"},
    };
    const char *pos[1] = {NULL};
    int n_pos = 0;
    int rc = args_parse("stats", argc, argv, specs, 1, pos, 1, &n_pos);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "stats", "FILE.json",
                   "Print the stats of a run (coli run --stats-json FILE): one row per worker\n"
                   "(status, data path, resident experts, batches, latency, restarts), then the\n"
                   "fallbacks by device and reason, each worker's memory and the experts moved\n"
                   "between hosts.",
                   specs, 1);
        return 0;
    }
    if (rc) return rc;
    if (url)
        return args_error("stats", "--url",
                          "not supported by coli stats; a running coli serve shows "
                          "the same numbers at /metrics");
    if (n_pos != 1) return args_error("stats", "FILE", "missing (usage: coli stats FILE.json)");
    char *text = s_slurp(pos[0]);
    if (!text) {
        fprintf(stderr, "coli stats: %s: cannot read: %s\n", pos[0], strerror(errno));
        return CLI_FAIL;
    }
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) {
        const char *at = cJSON_GetErrorPtr();
        fprintf(stderr, "coli stats: %s: not JSON (at byte %ld)\n", pos[0],
                root ? 0L : (long)(at && at >= text ? at - text : 0));
        cJSON_Delete(root);
        free(text);
        return CLI_FAIL;
    }
    rc = s_print(pos[0], root);
    cJSON_Delete(root);
    free(text);
    return rc;
}
