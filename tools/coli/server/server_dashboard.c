/*
 * server_dashboard.c - GET / (or /dashboard): a live page of the server, and
 * GET /dashboard.json, the numbers it polls. The page is plain HTML/CSS/JS
 * (tools/coli/server/dashboard.html) compiled into the binary as a string
 * (the Makefile turns it into $(BUILD)/gen/tools/coli/server/dashboard_html.h), so it needs
 * nothing off this machine. The JSON reuses what /metrics and /health read:
 * the server's counters, the batch and prefix-cache stats, the executor's
 * stats JSON (coli_model_stats_json, embedded as is) and the routing heat.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server.h"

static const char s_page[] =
#include "tools/coli/server/dashboard_html.h" /* generated in $(BUILD)/gen */
    ;

int handle_dashboard_page(server *s, struct MHD_Connection *c) {
    char *page = strdup(s_page);
    if (!page)
        return http_reply_error(s, c, EP_DASHBOARD, 500, "server_error", NULL, NULL, "out of memory for the page");
    return http_reply_text(c, 200, page, "text/html; charset=utf-8");
}

static double s_mean(const histogram *h) { return h->n ? h->sum / (double)h->n : 0.0; }

/* The server's own counters (a consistent copy, as /metrics takes it). */
static void s_server_numbers(cJSON *o, server *s) {
    server_metrics m;
    pthread_mutex_lock(&s->metrics.mu);
    m = s->metrics;
    pthread_mutex_unlock(&s->metrics.mu);
    uint64_t requests = 0, errors = 0;
    for (int e = 0; e < EP_COUNT; e++)
        for (int i = 0; i < METRICS_MAX_CODES && m.requests[e][i].code; i++)
            if (e == EP_COMPLETIONS || e == EP_CHAT) {
                requests += m.requests[e][i].n;
                if (m.requests[e][i].code >= 400) errors += m.requests[e][i].n;
            }
    cJSON_AddNumberToObject(o, "completions", (double)requests);
    cJSON_AddNumberToObject(o, "completion_errors", (double)errors);
    cJSON_AddNumberToObject(o, "prompt_tokens", (double)m.prompt_tokens);
    cJSON_AddNumberToObject(o, "generated_tokens", (double)m.generated_tokens);
    cJSON_AddNumberToObject(o, "cancelled", (double)m.cancelled);
    cJSON_AddNumberToObject(o, "ttft_mean_s", s_mean(&m.ttft));
    cJSON_AddNumberToObject(o, "per_token_mean_s", s_mean(&m.per_token));
    cJSON_AddNumberToObject(o, "queue_wait_mean_s", s_mean(&m.queue_wait));
    int waiting = 0, active = 0;
    server_queue_gauges(s, &waiting, &active);
    cJSON_AddNumberToObject(o, "slots", s->cfg.n_slots);
    cJSON_AddNumberToObject(o, "slots_busy", active);
    cJSON_AddNumberToObject(o, "queue_depth", waiting);
}

/* Batching and prefix-cache counters (zeros when off or before ready). */
static void s_cache_numbers(cJSON *o, server *s) {
    int ready = atomic_load(&s->ready);
    coli_batch_stats bs;
    coli_batch_get_stats(ready ? s->batch : NULL, &bs);
    cJSON *b = cJSON_AddObjectToObject(o, "batch");
    cJSON_AddBoolToObject(b, "enabled", ready && s->batch != NULL);
    cJSON_AddNumberToObject(b, "steps", (double)bs.steps);
    cJSON_AddNumberToObject(b, "rows", (double)bs.rows);
    cJSON_AddNumberToObject(b, "max_rows", bs.max_rows);
    cJSON_AddNumberToObject(b, "members", bs.members);
    coli_prefix_cache_stats ps;
    coli_prefix_cache_get_stats(ready ? s->prefix : NULL, &ps);
    cJSON *p = cJSON_AddObjectToObject(o, "prefix_cache");
    cJSON_AddNumberToObject(p, "hit_tokens", (double)ps.hit_tokens);
    cJSON_AddNumberToObject(p, "miss_tokens", (double)ps.miss_tokens);
    cJSON_AddNumberToObject(p, "evicted_tokens", (double)ps.evicted_tokens);
    cJSON_AddNumberToObject(p, "stored_tokens", (double)ps.stored_tokens);
    cJSON_AddNumberToObject(p, "bytes", (double)ps.bytes);
    cJSON_AddNumberToObject(p, "max_bytes", (double)ps.max_bytes);
}

/* "heat": {"n_layer", "n_expert", "counts": [[per expert] per layer]}, or null
 * when the model counts none (serve without --heat). Read under the baton:
 * the forward passes add to the counts. */
static void s_heat(cJSON *o, server *s) {
    int nl = 0, ne = 0;
    uint64_t *counts = NULL;
    baton_acquire(s);
    int rc = coli_model_heat_counts(s->model, NULL, 0, &nl, &ne);
    size_t n = (size_t)nl * (size_t)ne;
    if (rc == 0 && n && (counts = malloc(n * sizeof *counts)))
        rc = coli_model_heat_counts(s->model, counts, n, &nl, &ne);
    baton_release(s);
    if (rc != 0 || !counts) {
        free(counts);
        cJSON_AddNullToObject(o, "heat");
        return;
    }
    cJSON *h = cJSON_AddObjectToObject(o, "heat"), *rows = cJSON_AddArrayToObject(h, "counts");
    cJSON_AddNumberToObject(h, "n_layer", nl);
    cJSON_AddNumberToObject(h, "n_expert", ne);
    for (int l = 0; l < nl; l++) {
        cJSON *row = cJSON_CreateArray();
        for (int e = 0; e < ne; e++) cJSON_AddItemToArray(row, cJSON_CreateNumber((double)counts[(size_t)l * ne + e]));
        cJSON_AddItemToArray(rows, row);
    }
    free(counts);
}

int handle_dashboard_json(server *s, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    int ready = atomic_load(&s->ready);
    cJSON_AddStringToObject(o, "status", ready ? "ready" : atomic_load(&s->stopping) ? "stopping" : "loading");
    cJSON_AddStringToObject(o, "model", s->model_id ? s->model_id : "");
    cJSON_AddStringToObject(o, "architecture", s->info.arch);
    cJSON_AddStringToObject(o, "model_path", s->model_path ? s->model_path : "");
    cJSON_AddNumberToObject(o, "n_ctx", s->cfg.n_ctx > 0 ? s->cfg.n_ctx : s->info.n_ctx);
    s_server_numbers(o, s);
    s_cache_numbers(o, s);
    char *stats = ready ? server_stats_fresh(s) : NULL;
    cJSON *ex = stats ? cJSON_Parse(stats) : NULL;
    free(stats);
    cJSON_AddItemToObject(o, "executor", ex ? ex : cJSON_CreateNull());
    if (ready)
        s_heat(o, s);
    else
        cJSON_AddNullToObject(o, "heat");
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        return http_reply_error(s, c, EP_DASHBOARD_JSON, 500, "server_error", NULL, NULL,
                                "out of memory for /dashboard.json");
    return http_reply_json(c, 200, text);
}
