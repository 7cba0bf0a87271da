/*
 * server_metrics.c - the server's own counters and histograms, and the
 * Prometheus text format of /metrics: those, plus per-worker series built
 * from coli_model_stats_json (parsed with cJSON). Names and labels are
 * listed in docs/api.md; `promtool check metrics` accepts the output.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server.h"
#include "core/strbuf.h"

/* Upper bounds (seconds) of the latency buckets; the last bucket is +Inf. */
static const double s_le[METRICS_N_BUCKETS - 1] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                   0.25,  0.5,    1.0,   2.5,  5.0,   10.0};

static const char *s_endpoint_names[EP_COUNT] = {
    "/v1/completions", "/v1/chat/completions", "/v1/models",      "/health", "/metrics", "/tokenize", "/detokenize",
    "/props",          "/dashboard",           "/dashboard.json", "other"};

void metrics_init(server_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void metrics_destroy(server_metrics *m) { pthread_mutex_destroy(&m->mu); }

int metrics_endpoint(const char *url) {
    if (strcmp(url, "/") == 0) return EP_DASHBOARD; /* the page is the server's front door */
    for (int i = 0; i < EP_OTHER; i++)
        if (strcmp(url, s_endpoint_names[i]) == 0) return i;
    return EP_OTHER;
}

void metrics_count_request(server_metrics *m, int ep, int code) {
    if (ep < 0 || ep >= EP_COUNT) ep = EP_OTHER;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < METRICS_MAX_CODES; i++) {
        if (m->requests[ep][i].code == code || m->requests[ep][i].code == 0) {
            m->requests[ep][i].code = code;
            m->requests[ep][i].n++;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

void metrics_observe(server_metrics *m, histogram *h, double seconds) {
    int b = 0;
    while (b < METRICS_N_BUCKETS - 1 && seconds > s_le[b]) b++;
    pthread_mutex_lock(&m->mu);
    h->counts[b]++;
    h->n++;
    h->sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

void metrics_add_tokens(server_metrics *m, int prompt, int generated) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt;
    m->generated_tokens += (uint64_t)generated;
    pthread_mutex_unlock(&m->mu);
}

void metrics_count_cancelled(server_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->cancelled++;
    pthread_mutex_unlock(&m->mu);
}

// ---------------------------------------------------------------------------
// text output

static void s_header(coli_strbuf *b, const char *name, const char *type, const char *help) {
    coli_strbuf_appendf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with \, " and newlines escaped as the format requires. */
static void s_label_value(coli_strbuf *b, const char *v) {
    char tmp[256];
    size_t n = 0;
    for (; v && *v && n + 3 < sizeof tmp; v++) {
        if (*v == '\\' || *v == '"') {
            tmp[n++] = '\\';
            tmp[n++] = *v;
        } else if (*v == '\n') {
            tmp[n++] = '\\';
            tmp[n++] = 'n';
        } else
            tmp[n++] = *v;
    }
    tmp[n] = '\0';
    coli_strbuf_appendf(b, "\"%s\"", tmp);
}

static void s_histogram(coli_strbuf *b, const char *name, const histogram *h) {
    uint64_t cum = 0;
    for (int i = 0; i < METRICS_N_BUCKETS - 1; i++) {
        cum += h->counts[i];
        coli_strbuf_appendf(b, "%s_bucket{le=\"%g\"} %llu\n", name, s_le[i], (unsigned long long)cum);
    }
    coli_strbuf_appendf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9f\n%s_count %llu\n", name, (unsigned long long)h->n,
                        name, h->sum, name, (unsigned long long)h->n);
}

/* The prefix cache's and the batch's counters (all zero when off or not
 * started yet: both are set before ready and freed after the HTTP side stops). */
static void s_prefix_series(coli_strbuf *b, server *s) {
    coli_prefix_cache_stats st;
    coli_prefix_cache_get_stats(atomic_load(&s->ready) ? s->prefix : NULL, &st);
    s_header(b, "colibri_prefix_cache_hit_tokens_total", "counter", "Prompt tokens restored from the prefix cache.");
    coli_strbuf_appendf(b, "colibri_prefix_cache_hit_tokens_total %llu\n", (unsigned long long)st.hit_tokens);
    s_header(b, "colibri_prefix_cache_miss_tokens_total", "counter",
             "Prompt tokens the prefix cache did not hold (prefilled).");
    coli_strbuf_appendf(b, "colibri_prefix_cache_miss_tokens_total %llu\n", (unsigned long long)st.miss_tokens);
    s_header(b, "colibri_prefix_cache_evicted_tokens_total", "counter",
             "Token positions dropped from the prefix cache for room.");
    coli_strbuf_appendf(b, "colibri_prefix_cache_evicted_tokens_total %llu\n", (unsigned long long)st.evicted_tokens);
    s_header(b, "colibri_prefix_cache_stored_tokens_total", "counter", "Token positions added to the prefix cache.");
    coli_strbuf_appendf(b, "colibri_prefix_cache_stored_tokens_total %llu\n", (unsigned long long)st.stored_tokens);
    coli_batch_stats bs;
    coli_batch_get_stats(atomic_load(&s->ready) ? s->batch : NULL, &bs);
    s_header(b, "colibri_batch_steps_total", "counter",
             "Decode steps: forward passes over the next token of every generating request.");
    coli_strbuf_appendf(b, "colibri_batch_steps_total %llu\n", (unsigned long long)bs.steps);
    s_header(b, "colibri_batch_rows_total", "counter", "Tokens those steps evaluated (rows / steps = the mean batch).");
    coli_strbuf_appendf(b, "colibri_batch_rows_total %llu\n", (unsigned long long)bs.rows);
    s_header(b, "colibri_batch_max_rows", "gauge", "The largest decode step so far, in requests.");
    coli_strbuf_appendf(b, "colibri_batch_max_rows %d\n", bs.max_rows);
    s_header(b, "colibri_prefix_cache_bytes", "gauge", "KV bytes the prefix cache holds.");
    coli_strbuf_appendf(b, "colibri_prefix_cache_bytes %zu\n", st.bytes);
    s_header(b, "colibri_prefix_cache_max_bytes", "gauge", "The prefix cache's bound (--prefix-cache-mb); 0 = off.");
    coli_strbuf_appendf(b, "colibri_prefix_cache_max_bytes %zu\n", st.max_bytes);
}

/* The sequence state of the slots (docs/architectures.md: per token, per sequence). */
static void s_state_series(coli_strbuf *b, server *s) {
    const size_t tok = s->info.state_bytes_per_token, seq = s->info.state_bytes_per_seq;
    const int n_ctx = s->cfg.n_ctx > 0 ? s->cfg.n_ctx : s->info.n_ctx;
    s_header(b, "colibri_state_bytes_per_token", "gauge", "KV bytes one position of a sequence takes (all layers).");
    coli_strbuf_appendf(b, "colibri_state_bytes_per_token %zu\n", tok);
    s_header(b, "colibri_state_bytes_per_sequence", "gauge",
             "Recurrent-state bytes of one sequence whatever its length (hybrid models; 0 otherwise).");
    coli_strbuf_appendf(b, "colibri_state_bytes_per_sequence %zu\n", seq);
    s_header(b, "colibri_state_bytes", "gauge",
             "Sequence state the slots hold: per slot n_ctx positions, the recurrent states and their two "
             "prefix-cache snapshots.");
    coli_strbuf_appendf(b, "colibri_state_bytes %zu\n", (size_t)s->cfg.n_slots * ((size_t)n_ctx * tok + 3 * seq));
    static const char *const held[2] = {"no", "yes"};
    s_header(b, "colibri_state_copies_total", "counter",
             "Copies of sequence state (recurrent snapshots, prefix-cache rows), by whether the copying thread held "
             "the compute baton (which holds the other slots up).");
    for (int h = 0; h < 2; h++)
        coli_strbuf_appendf(b, "colibri_state_copies_total{under_baton=\"%s\"} %llu\n", held[h],
                            (unsigned long long)atomic_load(&s->state_copies[h]));
    s_header(b, "colibri_state_copy_bytes_total", "counter", "Bytes of those copies, likewise.");
    for (int h = 0; h < 2; h++)
        coli_strbuf_appendf(b, "colibri_state_copy_bytes_total{under_baton=\"%s\"} %llu\n", held[h],
                            (unsigned long long)atomic_load(&s->state_copy_bytes[h]));
}

static void s_server_series(coli_strbuf *b, server *s) {
    server_metrics m;
    pthread_mutex_lock(&s->metrics.mu);
    m = s->metrics; /* a consistent copy; the mutex inside it is not used */
    pthread_mutex_unlock(&s->metrics.mu);
    s_header(b, "colibri_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
    for (int e = 0; e < EP_COUNT; e++)
        for (int i = 0; i < METRICS_MAX_CODES && m.requests[e][i].code; i++)
            coli_strbuf_appendf(b, "colibri_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n", s_endpoint_names[e],
                                m.requests[e][i].code, (unsigned long long)m.requests[e][i].n);
    s_header(b, "colibri_prompt_tokens_total", "counter",
             "Prompt tokens of the requests (prefilled or restored from the prefix cache).");
    coli_strbuf_appendf(b, "colibri_prompt_tokens_total %llu\n", (unsigned long long)m.prompt_tokens);
    s_header(b, "colibri_generated_tokens_total", "counter", "Tokens generated.");
    coli_strbuf_appendf(b, "colibri_generated_tokens_total %llu\n", (unsigned long long)m.generated_tokens);
    s_header(b, "colibri_requests_cancelled_total", "counter", "Generations stopped because the client went away.");
    coli_strbuf_appendf(b, "colibri_requests_cancelled_total %llu\n", (unsigned long long)m.cancelled);
    s_header(b, "colibri_time_to_first_token_seconds", "histogram",
             "From request arrival to the first generated token.");
    s_histogram(b, "colibri_time_to_first_token_seconds", &m.ttft);
    s_header(b, "colibri_time_per_output_token_seconds", "histogram",
             "Time between consecutive generated tokens of a request.");
    s_histogram(b, "colibri_time_per_output_token_seconds", &m.per_token);
    s_header(b, "colibri_queue_wait_seconds", "histogram", "Time a request waited for a free slot.");
    s_histogram(b, "colibri_queue_wait_seconds", &m.queue_wait);
    int waiting = 0, active = 0;
    server_queue_gauges(s, &waiting, &active);
    s_header(b, "colibri_queue_depth", "gauge", "Answers waiting for a slot (a request of n counts n).");
    coli_strbuf_appendf(b, "colibri_queue_depth %d\n", waiting);
    s_header(b, "colibri_slots_busy", "gauge", "Slots generating now.");
    coli_strbuf_appendf(b, "colibri_slots_busy %d\n", active);
    s_header(b, "colibri_slots", "gauge", "Slots (requests generated at once, each with its own KV cache).");
    coli_strbuf_appendf(b, "colibri_slots %d\n", s->cfg.n_slots);
    s_header(b, "colibri_model_ready", "gauge", "1 once the model is loaded and its experts are placed.");
    coli_strbuf_appendf(b, "colibri_model_ready %d\n", atomic_load(&s->ready) ? 1 : 0);
    s_state_series(b, s);
    s_prefix_series(b, s);
}

// ---------------------------------------------------------------------------
// per worker, from the executor's stats JSON

static double s_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static const char *s_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : "";
}

static void s_worker_labels(coli_strbuf *b, const cJSON *w) {
    coli_strbuf_appendf(b, "{worker=\"%d\",device=", (int)s_num(w, "id"));
    s_label_value(b, s_str(w, "device"));
    coli_strbuf_appendf(b, ",plugin=");
    s_label_value(b, s_str(w, "plugin"));
    coli_strbuf_appendf(b, "}");
}

/* One series per worker for the numeric field key of each worker object. */
static void s_worker_field(coli_strbuf *b, const cJSON *workers, const char *name, const char *type, const char *help,
                           const char *key) {
    s_header(b, name, type, help);
    const cJSON *w;
    cJSON_ArrayForEach(w, workers) {
        coli_strbuf_appendf(b, "%s", name);
        s_worker_labels(b, w);
        if (key)
            coli_strbuf_appendf(b, " %.0f\n", s_num(w, key));
        else
            coli_strbuf_appendf(b, " %d\n", strcmp(s_str(w, "status"), "up") == 0);
    }
}

/* A live expert cache's counter (member key of a worker's "cache"), for the
 * workers that are caches; nothing at all when none is. */
static void s_cache_field(coli_strbuf *b, const cJSON *workers, const char *name, const char *type, const char *help,
                          const char *key) {
    const cJSON *w;
    int any = 0;
    cJSON_ArrayForEach(w, workers) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(w, "cache");
        if (!cJSON_IsObject(c)) continue;
        if (!any++) s_header(b, name, type, help);
        coli_strbuf_appendf(b, "%s", name);
        s_worker_labels(b, w);
        coli_strbuf_appendf(b, " %.0f\n", s_num(c, key));
    }
}

static void s_cache_series(coli_strbuf *b, const cJSON *workers) {
    static const char *const f[][4] = {
        {"colibri_worker_cache_budget_bytes", "gauge", "Bytes of experts the live expert cache may hold.",
         "budget_bytes"},
        {"colibri_worker_cache_hits_total", "counter", "Routed pairs the cache worker served (expert resident).",
         "hits"},
        {"colibri_worker_cache_misses_total", "counter",
         "Routed pairs that reached the cache without a resident expert (computed by the CPU tier).", "misses"},
        {"colibri_worker_cache_promotions_total", "counter", "Experts loaded into the cache and acknowledged.",
         "promotions"},
        {"colibri_worker_cache_evictions_total", "counter", "Experts evicted from the cache.", "evictions"},
        {"colibri_worker_cache_moved_bytes_total", "counter", "Bytes of experts loaded into the cache.", "bytes_moved"},
        {"colibri_worker_cache_prefetch_issued_total", "counter", "Loads started by the next-layer prediction.",
         "prefetch_issued"},
        {"colibri_worker_cache_prefetch_used_total", "counter", "Prefetched experts later routed while resident.",
         "prefetch_used"},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) s_cache_field(b, workers, f[i][0], f[i][1], f[i][2], f[i][3]);
}

static void s_worker_histograms(coli_strbuf *b, const cJSON *workers) {
    const char *name = "colibri_worker_batch_latency_seconds";
    s_header(b, name, "histogram", "Latency of expert batches per worker, send to reply.");
    const cJSON *w;
    cJSON_ArrayForEach(w, workers) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(w, "batch_latency_buckets");
        const cJSON *le = cJSON_GetObjectItemCaseSensitive(h, "le");
        const cJSON *counts = cJSON_GetObjectItemCaseSensitive(h, "counts");
        int n = cJSON_GetArraySize(le);
        if (!cJSON_IsArray(le) || !cJSON_IsArray(counts) || cJSON_GetArraySize(counts) != n) continue;
        char id[32];
        snprintf(id, sizeof id, "%d", (int)s_num(w, "id"));
        for (int i = 0; i < n; i++) {
            coli_strbuf_appendf(b, "%s_bucket{worker=\"%s\",device=", name, id);
            s_label_value(b, s_str(w, "device"));
            coli_strbuf_appendf(b, ",plugin=");
            s_label_value(b, s_str(w, "plugin"));
            coli_strbuf_appendf(b, ",le=\"%g\"} %.0f\n", cJSON_GetArrayItem(le, i)->valuedouble,
                                cJSON_GetArrayItem(counts, i)->valuedouble);
        }
        const char *suffix[3] = {"_bucket", "_sum", "_count"};
        for (int k = 0; k < 3; k++) {
            coli_strbuf_appendf(b, "%s%s", name, suffix[k]);
            coli_strbuf_appendf(b, "{worker=\"%s\",device=", id);
            s_label_value(b, s_str(w, "device"));
            coli_strbuf_appendf(b, ",plugin=");
            s_label_value(b, s_str(w, "plugin"));
            if (k == 0)
                coli_strbuf_appendf(b, ",le=\"+Inf\"} %.0f\n", s_num(h, "count"));
            else if (k == 1)
                coli_strbuf_appendf(b, "} %.9f\n", s_num(h, "sum"));
            else
                coli_strbuf_appendf(b, "} %.0f\n", s_num(h, "count"));
        }
    }
}

static void s_fallbacks(coli_strbuf *b, const cJSON *stats) {
    s_header(b, "colibri_fallbacks_total", "counter",
             "Times a device left service and its work went elsewhere, by device and reason.");
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(stats, "fallbacks")) {
        coli_strbuf_appendf(b, "colibri_fallbacks_total{device=");
        s_label_value(b, s_str(f, "device"));
        coli_strbuf_appendf(b, ",reason=");
        s_label_value(b, s_str(f, "reason"));
        coli_strbuf_appendf(b, "} %.0f\n", s_num(f, "count"));
    }
    s_header(b, "colibri_inproc_rows_total", "counter",
             "Expert rows computed in the coordinator process (no worker could take them).");
    coli_strbuf_appendf(b, "colibri_inproc_rows_total %.0f\n", s_num(stats, "inproc_rows"));
}

/* Hosts as a memory tier (docs/scheduler.md): each worker's memory, what it
 * holds for a lost host, the experts moved and the layer dispatch latency. */
static void s_host_series(coli_strbuf *b, const cJSON *stats, const cJSON *workers) {
    s_worker_field(b, workers, "colibri_worker_budget_bytes", "gauge",
                   "Bytes of experts the worker may hold (its --devices budget; 0 = unlimited).", "budget_bytes");
    s_worker_field(b, workers, "colibri_worker_owned_bytes", "gauge", "Bytes of the experts placed on the worker.",
                   "owned_bytes");
    s_worker_field(b, workers, "colibri_worker_guest_experts", "gauge",
                   "Experts the worker computes for a host that is lost.", "guest_experts");
    s_worker_field(b, workers, "colibri_worker_rss_bytes", "gauge", "The worker process's resident set (VmRSS).",
                   "rss_bytes");
    s_worker_field(b, workers, "colibri_worker_model_rss_bytes", "gauge",
                   "Bytes of the mapped model file resident in the worker process.", "model_rss_bytes");
    s_worker_field(b, workers, "colibri_worker_cgroup_bytes", "gauge",
                   "Memory usage of the worker's memory cgroup (0: in none).", "cgroup_bytes");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(stats, "expert_moves");
    if (!cJSON_IsObject(m)) return;
    s_header(b, "colibri_hosts_lost_total", "counter", "Remote hosts lost while holding experts.");
    coli_strbuf_appendf(b, "colibri_hosts_lost_total %.0f\n", s_num(m, "hosts_lost"));
    static const char *to[3] = {"host", "coordinator", "home"};
    static const char *n[3] = {"to_hosts", "to_coordinator", "returned"};
    static const char *nb[3] = {"to_hosts_bytes", "to_coordinator_bytes", "returned_bytes"};
    s_header(b, "colibri_expert_moves_total", "counter",
             "Experts moved: to another host with room, to the coordinator, back to their home host.");
    for (int i = 0; i < 3; i++)
        coli_strbuf_appendf(b, "colibri_expert_moves_total{to=\"%s\"} %.0f\n", to[i], s_num(m, n[i]));
    s_header(b, "colibri_expert_moved_bytes_total", "counter", "Bytes of the experts moved, by destination.");
    for (int i = 0; i < 3; i++)
        coli_strbuf_appendf(b, "colibri_expert_moved_bytes_total{to=\"%s\"} %.0f\n", to[i], s_num(m, nb[i]));
    s_header(b, "colibri_expert_move_seconds_total", "counter",
             "Time from a host's loss to the last ack of its moves.");
    coli_strbuf_appendf(b, "colibri_expert_move_seconds_total %.6f\n", s_num(m, "move_seconds"));
    s_header(b, "colibri_layer_dispatch_p50_seconds", "gauge",
             "Median time of one MoE layer's dispatch to the workers (send to last reply), recent layers.");
    coli_strbuf_appendf(b, "colibri_layer_dispatch_p50_seconds %.6f\n", s_num(stats, "dispatch_latency_p50_ms") / 1e3);
    s_header(b, "colibri_layer_dispatch_p99_seconds", "gauge", "The same, 99th percentile.");
    coli_strbuf_appendf(b, "colibri_layer_dispatch_p99_seconds %.6f\n", s_num(stats, "dispatch_latency_p99_ms") / 1e3);
}

/* The disk tier's counters (stats "disk_tier", --devices inproc@ram=SIZE); nothing without one. */
static void s_disk_tier_series(coli_strbuf *b, const cJSON *stats) {
    static const char *const f[][4] = {
        {"colibri_disk_tier_budget_bytes", "gauge", "Bytes of experts the disk tier's RAM cache may hold.",
         "budget_bytes"},
        {"colibri_disk_tier_used_bytes", "gauge", "Bytes of experts the disk tier's RAM cache holds.", "used_bytes"},
        {"colibri_disk_tier_hits_total", "counter", "Routed pairs whose expert was in RAM.", "hits"},
        {"colibri_disk_tier_misses_total", "counter", "Routed pairs whose expert was read from disk.", "misses"},
        {"colibri_disk_tier_reads_total", "counter", "Experts read from disk (one read per expert per layer call).",
         "disk_reads"},
        {"colibri_disk_tier_read_bytes_total", "counter", "Bytes read from disk by the disk tier.", "disk_bytes"},
        {"colibri_disk_tier_prefetch_issued_total", "counter", "Reads started by the next-layer prediction.",
         "prefetch_issued"},
        {"colibri_disk_tier_prefetch_used_total", "counter", "Prefetched experts later routed while in RAM.",
         "prefetch_used"},
    };
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(stats, "disk_tier");
    if (!cJSON_IsObject(t)) return;
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        s_header(b, f[i][0], f[i][1], f[i][2]);
        coli_strbuf_appendf(b, "%s %.0f\n", f[i][0], s_num(t, f[i][3]));
    }
    s_header(b, "colibri_disk_tier_read_latency_seconds", "summary",
             "Latency of the disk tier's expert reads (quantiles over the latest 4096).");
    coli_strbuf_appendf(b, "colibri_disk_tier_read_latency_seconds{quantile=\"0.5\"} %.6f\n",
                        s_num(t, "read_p50_us") * 1e-6);
    coli_strbuf_appendf(b, "colibri_disk_tier_read_latency_seconds{quantile=\"0.99\"} %.6f\n",
                        s_num(t, "read_p99_us") * 1e-6);
    coli_strbuf_appendf(b, "colibri_disk_tier_read_latency_seconds_sum %.6f\n", s_num(t, "read_us_sum") * 1e-6);
    coli_strbuf_appendf(b, "colibri_disk_tier_read_latency_seconds_count %.0f\n", s_num(t, "disk_reads"));
}

static void s_worker_series(coli_strbuf *b, const char *stats_json) {
    cJSON *stats = stats_json ? cJSON_Parse(stats_json) : NULL;
    const cJSON *workers = cJSON_GetObjectItemCaseSensitive(stats, "workers");
    s_header(b, "colibri_executor_info", "gauge",
             "Which executor computes the routed experts (workers, inproc, none).");
    coli_strbuf_appendf(b, "colibri_executor_info{executor=");
    s_label_value(b, stats ? s_str(stats, "executor") : "unknown");
    coli_strbuf_appendf(b, "} 1\n");
    s_worker_field(b, workers, "colibri_worker_up", "gauge", "1 if the worker is up and serving its experts.", NULL);
    s_worker_field(b, workers, "colibri_worker_restarts_total", "counter", "Times the worker process was restarted.",
                   "restarts");
    s_worker_field(b, workers, "colibri_worker_batches_total", "counter", "Expert batches the worker answered.",
                   "batches");
    s_worker_field(b, workers, "colibri_worker_rows_total", "counter", "Token rows the worker computed.", "rows");
    s_worker_field(b, workers, "colibri_worker_resident_experts", "gauge", "Experts resident on the worker's device.",
                   "resident_experts");
    s_worker_field(b, workers, "colibri_worker_resident_bytes", "gauge",
                   "Bytes of expert weights resident on the worker's device.", "resident_bytes");
    s_worker_histograms(b, workers);
    s_host_series(b, stats, workers);
    s_cache_series(b, workers);
    s_disk_tier_series(b, stats);
    s_fallbacks(b, stats);
    cJSON_Delete(stats);
}

char *metrics_render(server *s) {
    coli_strbuf b = {0};
    s_server_series(&b, s);
    char *stats = atomic_load(&s->ready) ? server_stats_fresh(s) : NULL;
    s_worker_series(&b, stats);
    free(stats);
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
