/*
 * bench_hosts.c - `coli bench`'s report per worker (per host, for remote
 * workers): where it is, how long its batches took from send to reply, how
 * many rows it served, how many bytes went each way per evaluated token
 * (counted by the coordinator where its links send and receive), and its
 * fallbacks by reason. Read from the configuration's stats JSON
 * (coli_model_stats_json, docs/scheduler.md); see bench.h.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "tools/coli/bench.h"

static double s_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *s_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double s_per(double v, double n_tokens) { return n_tokens > 0 ? v / n_tokens : 0; }

/* {"reason": count, ...} of the fallbacks counted against device; *total their sum. */
static cJSON *s_fallbacks_of(const cJSON *stats, const char *device, double *total) {
    cJSON *out = cJSON_CreateObject();
    const cJSON *f;
    *total = 0;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(stats, "fallbacks")) {
        if (strcmp(s_str(f, "device"), device) != 0) continue;
        cJSON_AddNumberToObject(out, s_str(f, "reason"), s_num(f, "count"));
        *total += s_num(f, "count");
    }
    return out;
}

static void s_add_latency(cJSON *o, const cJSON *w) {
    cJSON *lat = cJSON_AddObjectToObject(o, "dispatch_latency_ms");
    cJSON_AddNumberToObject(lat, "p50", s_num(w, "batch_latency_p50_ms"));
    cJSON_AddNumberToObject(lat, "p99", s_num(w, "batch_latency_p99_ms"));
}

/* One worker's entry of the report. */
static cJSON *s_host(const cJSON *stats, const cJSON *w, double n_tokens) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", s_num(w, "id"));
    cJSON_AddStringToObject(o, "device", s_str(w, "device"));
    cJSON_AddStringToObject(o, "address", s_str(w, "endpoint"));
    cJSON_AddStringToObject(o, "status", s_str(w, "status"));
    s_add_latency(o, w);
    double rows = s_num(w, "rows"), sent = s_num(w, "bytes_sent"), received = s_num(w, "bytes_received");
    cJSON_AddNumberToObject(o, "batches", s_num(w, "batches"));
    cJSON_AddNumberToObject(o, "rows", rows);
    cJSON_AddNumberToObject(o, "rows_per_token", s_per(rows, n_tokens));
    cJSON_AddNumberToObject(o, "bytes_sent", sent);
    cJSON_AddNumberToObject(o, "bytes_received", received);
    cJSON_AddNumberToObject(o, "bytes_sent_per_token", s_per(sent, n_tokens));
    cJSON_AddNumberToObject(o, "bytes_received_per_token", s_per(received, n_tokens));
    static const char *mem[] = {"budget_bytes", "owned_bytes", "resident_experts", "resident_bytes", "guest_experts",
                                "guest_bytes",  "rss_bytes",   "model_rss_bytes",  "cgroup_bytes"};
    for (size_t i = 0; i < sizeof mem / sizeof mem[0]; i++) cJSON_AddNumberToObject(o, mem[i], s_num(w, mem[i]));
    double total;
    cJSON_AddItemToObject(o, "fallbacks", s_fallbacks_of(stats, s_str(w, "device"), &total));
    cJSON_AddNumberToObject(o, "fallbacks_total", total);
    return o;
}

cJSON *bench_hosts_json(const char *stats_json, double n_tokens) {
    cJSON *stats = stats_json ? cJSON_Parse(stats_json) : NULL;
    const cJSON *workers = cJSON_GetObjectItemCaseSensitive(stats, "workers");
    cJSON *out = NULL;
    if (cJSON_IsArray(workers)) {
        out = cJSON_CreateArray();
        const cJSON *w;
        cJSON_ArrayForEach(w, workers) cJSON_AddItemToArray(out, s_host(stats, w, n_tokens));
    }
    cJSON_Delete(stats);
    return out;
}

/* The executor's expert_moves object (a copy, caller deletes), NULL without one. */
cJSON *bench_moves_json(const char *stats_json) {
    cJSON *stats = stats_json ? cJSON_Parse(stats_json) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(stats, "expert_moves");
    cJSON *out = cJSON_IsObject(m) ? cJSON_Duplicate(m, 1) : NULL;
    cJSON_Delete(stats);
    return out;
}

static void s_moves_print(const char *stats_json) {
    cJSON *m = bench_moves_json(stats_json);
    if (!m) return;
    printf("  expert moves: %.0f hosts lost; to hosts %.0f (%.1f MiB), to the coordinator %.0f (%.1f MiB), back home "
           "%.0f (%.1f MiB); %.1f MiB moved in all, %.3f s\n",
           s_num(m, "hosts_lost"), s_num(m, "to_hosts"), s_num(m, "to_hosts_bytes") / 1048576.0,
           s_num(m, "to_coordinator"), s_num(m, "to_coordinator_bytes") / 1048576.0, s_num(m, "returned"),
           s_num(m, "returned_bytes") / 1048576.0, s_num(m, "bytes_moved") / 1048576.0, s_num(m, "move_seconds"));
    cJSON_Delete(m);
}

void bench_hosts_print(const char *stats_json, double n_tokens) {
    cJSON *hosts = bench_hosts_json(stats_json, n_tokens);
    if (!hosts) return;
    printf("  per worker (%.0f tokens evaluated):\n", n_tokens);
    const cJSON *h;
    cJSON_ArrayForEach(h, hosts) {
        const cJSON *lat = cJSON_GetObjectItemCaseSensitive(h, "dispatch_latency_ms");
        printf("    worker %.0f %s %s (%s): dispatch p50 %.3f ms p99 %.3f ms, rows %.0f (%.2f/token), bytes/token "
               "sent %.0f received %.0f, fallbacks",
               s_num(h, "id"), s_str(h, "device"), s_str(h, "address"), s_str(h, "status"), s_num(lat, "p50"),
               s_num(lat, "p99"), s_num(h, "rows"), s_num(h, "rows_per_token"), s_num(h, "bytes_sent_per_token"),
               s_num(h, "bytes_received_per_token"));
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(h, "fallbacks");
        if (!cJSON_GetArraySize(f)) printf(" none");
        for (const cJSON *r = f ? f->child : NULL; r; r = r->next) printf(" %s %.0f", r->string, r->valuedouble);
        printf(
            "\n      memory: resident %.0f experts %.1f MiB (budget %.1f MiB, %.0f held for lost hosts); rss %.1f MiB, "
            "model %.1f MiB, cgroup %.1f MiB\n",
            s_num(h, "resident_experts"), s_num(h, "resident_bytes") / 1048576.0, s_num(h, "budget_bytes") / 1048576.0,
            s_num(h, "guest_experts"), s_num(h, "rss_bytes") / 1048576.0, s_num(h, "model_rss_bytes") / 1048576.0,
            s_num(h, "cgroup_bytes") / 1048576.0);
    }
    cJSON_Delete(hosts);
    s_moves_print(stats_json);
}
