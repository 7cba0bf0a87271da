/*
 * fallback_stats.c - what the scheduler tells the user: fallbacks by device
 * and reason, per-worker latency, resident experts. The JSON field names
 * are a contract (serving builds /metrics from them; docs/scheduler.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/sched/sched_internal.h"
#include "core/error.h"
#include "core/strbuf.h"

/* Upper bounds of the latency histogram, seconds (Prometheus style). */
static const double s_le[SCHED_N_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                             0.025,  0.05,    0.1,    0.25,  0.5,    1.0};

void stats_fallback(sched *s, const worker_link *w, const char *reason) {
    s->stats.fallbacks_total++;
    for (int i = 0; i < s->stats.n_fb; i++)
        if (!strcmp(s->stats.fb[i].device, w->device) && !strcmp(s->stats.fb[i].reason, reason)) {
            s->stats.fb[i].count++;
            return;
        }
    if (s->stats.n_fb == SCHED_MAX_FALLBACK_KINDS) return; /* still in fallbacks_total */
    fallback_count *f = &s->stats.fb[s->stats.n_fb++];
    snprintf(f->device, sizeof f->device, "%s", w->device);
    snprintf(f->reason, sizeof f->reason, "%s", reason);
    f->count = 1;
}

void stats_latency(lat_stats *l, double seconds) {
    l->ring[l->n % SCHED_LAT_RING] = seconds;
    l->n++;
    l->sum += seconds;
    for (int i = 0; i < SCHED_N_BUCKETS; i++)
        if (seconds <= s_le[i]) {
            l->buckets[i]++;
            break;
        }
}

void stats_batch_outcome(link_stats *st, int ok) {
    st->recent_failed = (st->recent_failed << 1) | (ok ? 0u : 1u);
    if (st->recent_n < SCHED_RECENT_BATCHES) st->recent_n++;
}

static int s_recent_failures(const link_stats *st) {
    int n = 0;
    for (int i = 0; i < st->recent_n; i++) n += (int)(st->recent_failed >> i & 1u);
    return n;
}

static int s_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Percentile q (0..1) of the recent samples, in milliseconds. */
static double s_pct_ms(const lat_stats *l, double q) {
    size_t n = l->n < SCHED_LAT_RING ? (size_t)l->n : SCHED_LAT_RING;
    if (!n) return 0;
    double *v = malloc(n * sizeof *v);
    if (!v) return 0;
    memcpy(v, l->ring, n * sizeof *v);
    qsort(v, n, sizeof *v, s_cmp_double);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    double r = v[i] * 1e3;
    free(v);
    return r;
}

// ---------------------------------------------------------------------------
//  A JSON string body: quotes, backslashes and control characters escaped.
static void s_put_str(coli_strbuf *b, const char *v) {
    coli_strbuf_appendf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\')
            coli_strbuf_appendf(b, "\\%c", *p);
        else if (*p < 0x20)
            coli_strbuf_appendf(b, "\\u%04x", *p);
        else
            coli_strbuf_appendf(b, "%c", *p);
    }
    coli_strbuf_appendf(b, "\"");
}

static int s_done(coli_strbuf *b, char **out) {
    if (b->failed || !b->s) {
        free(b->s);
        return coli_fail(COLI_ENOMEM, "scheduler stats: out of memory");
    }
    *out = b->s;
    return 0;
}

/* Status as the stats schema names it: up | failed | down | quarantined. */
static const char *s_status(const worker_link *w) {
    switch (w->state) {
    case LINK_UP: return "up";
    case LINK_FAILED: return "failed";
    case LINK_QUARANTINED: return "quarantined";
    default: return "down";
    }
}

/* Experts w computes for another host's sake (host_tier.c): owned, not its home. */
static uint64_t s_guests(const sched *s, const worker_link *w, uint64_t *bytes) {
    uint64_t n = 0;
    *bytes = 0;
    for (size_t k = 0; s->place.home && k < (size_t)s->model.n_layer * (size_t)s->model.n_expert; k++)
        if (s->place.owner[k] == w->id && s->place.home[k] != w->id) {
            n++;
            *bytes += s->model.expert_bytes[k / (size_t)s->model.n_expert];
        }
    return n;
}

/* Its memory: the budget, what it is given, its heartbeat's own figures (worker_mem.c). */
static void s_memory_json(coli_strbuf *b, const sched *s, const worker_link *w) {
    uint64_t guest_bytes, guests = s_guests(s, w, &guest_bytes);
    coli_strbuf_appendf(b,
                        ",\"budget_bytes\":%llu,\"owned_bytes\":%llu,\"guest_experts\":%llu,\"guest_bytes\":%llu,"
                        "\"rss_bytes\":%llu,\"model_rss_bytes\":%llu,\"cgroup_bytes\":%llu",
                        (unsigned long long)w->dev.budget, (unsigned long long)w->place.owned_bytes,
                        (unsigned long long)guests, (unsigned long long)guest_bytes,
                        (unsigned long long)w->stats.rss_bytes, (unsigned long long)w->stats.model_rss_bytes,
                        (unsigned long long)w->stats.cgroup_bytes);
}

static void s_worker_json(coli_strbuf *b, const sched *s, const worker_link *w) {
    coli_strbuf_appendf(b, "{\"id\":%d,\"device\":", w->id);
    s_put_str(b, w->device);
    coli_strbuf_appendf(b, ",\"plugin\":");
    s_put_str(b, w->dev.plugin);
    coli_strbuf_appendf(b, ",\"endpoint\":");
    s_put_str(b, w->tcp.on ? w->dev.endpoint : s->net.endpoint);
    coli_strbuf_appendf(b, ",\"status\":\"%s\",\"state\":\"%s\",\"reason\":", s_status(w), link_state_name(w->state));
    s_put_str(b, w->reason);
    coli_strbuf_appendf(b, ",\"data_path\":\"%s\",\"ring_replies\":%llu", w->shm.ring.base ? "shm" : "zmq",
                        (unsigned long long)w->shm.replies);
    coli_strbuf_appendf(b, ",\"pid\":%d,\"generation\":%u,\"device_name\":", (int)w->proc.pid, w->proc.gen);
    s_put_str(b, w->place.device_name);
    int up = w->state == LINK_UP;
    coli_strbuf_appendf(b, ",\"refused_experts\":%llu", (unsigned long long)w->place.refused_experts);
    coli_strbuf_appendf(b,
                        ",\"owned_experts\":%llu,\"resident_experts\":%llu,\"resident_bytes\":%llu,"
                        "\"batches\":%llu,\"rows\":%llu,\"rerouted_rows\":%llu,\"restarts\":%llu,\"heartbeats\":%llu,"
                        "\"batch_latency_p50_ms\":%.6f,\"batch_latency_p99_ms\":%.6f,",
                        (unsigned long long)w->place.owned_experts,
                        (unsigned long long)(up ? w->place.resident_experts : 0),
                        (unsigned long long)(up ? w->place.resident_bytes : 0), (unsigned long long)w->stats.batches,
                        (unsigned long long)w->stats.rows, (unsigned long long)w->stats.rerouted_rows,
                        (unsigned long long)w->proc.restarts, (unsigned long long)w->stats.heartbeats,
                        s_pct_ms(&w->stats.lat, 0.5), s_pct_ms(&w->stats.lat, 0.99));
    coli_strbuf_appendf(b, "\"recent_batches\":%d,\"recent_failed_batches\":%d,", w->stats.recent_n,
                        s_recent_failures(&w->stats));
    coli_strbuf_appendf(
        b, "\"bytes_sent\":%llu,\"bytes_received\":%llu,\"messages_sent\":%llu,\"messages_received\":%llu,",
        (unsigned long long)w->stats.bytes_sent, (unsigned long long)w->stats.bytes_received,
        (unsigned long long)w->stats.messages_sent, (unsigned long long)w->stats.messages_received);
    coli_strbuf_appendf(b, "\"batch_latency_buckets\":{\"le\":[");
    for (int i = 0; i < SCHED_N_BUCKETS; i++) coli_strbuf_appendf(b, "%s%g", i ? "," : "", s_le[i]);
    coli_strbuf_appendf(b, "],\"counts\":[");
    uint64_t cum = 0;
    for (int i = 0; i < SCHED_N_BUCKETS; i++) {
        cum += w->stats.lat.buckets[i];
        coli_strbuf_appendf(b, "%s%llu", i ? "," : "", (unsigned long long)cum);
    }
    coli_strbuf_appendf(b, "],\"count\":%llu,\"sum\":%.9f},\"counters\":{", (unsigned long long)w->stats.lat.n,
                        w->stats.lat.sum);
    for (int i = 0; i < w->stats.n_counters; i++) /* names checked on arrival: [a-z0-9_] */
        coli_strbuf_appendf(b, "%s\"%s\":%llu", i ? "," : "", w->stats.counter_name[i],
                            (unsigned long long)w->stats.counter_value[i]);
    coli_strbuf_appendf(b, "}");
    s_memory_json(b, s, w);
    cache_stats_json(w, b); /* a live expert cache's counters (cache_link.c) */
    coli_strbuf_appendf(b, "}");
}

int stats_json(const sched *s, char **json) {
    coli_strbuf b = {0};
    coli_strbuf_appendf(&b, "{\"executor\":\"workers\",\"workers\":[");
    for (int i = 0; i < s->n_w; i++) {
        if (i) coli_strbuf_appendf(&b, ",");
        s_worker_json(&b, s, &s->w[i]);
    }
    coli_strbuf_appendf(&b, "],\"fallbacks\":[");
    for (int i = 0; i < s->stats.n_fb; i++) {
        coli_strbuf_appendf(&b, "%s{\"device\":", i ? "," : "");
        s_put_str(&b, s->stats.fb[i].device);
        coli_strbuf_appendf(&b, ",\"reason\":");
        s_put_str(&b, s->stats.fb[i].reason);
        coli_strbuf_appendf(&b, ",\"count\":%llu}", (unsigned long long)s->stats.fb[i].count);
    }
    coli_strbuf_appendf(&b,
                        "],\"fallbacks_total\":%llu,\"dispatch_latency_p50_ms\":%.6f,"
                        "\"dispatch_latency_p99_ms\":%.6f,\"dispatches\":%llu,\"inproc_rows\":%llu,"
                        "\"late_replies_dropped\":%llu,\"foreign_messages_dropped\":%llu,"
                        "\"stale_messages_dropped\":%llu,\"impostor_messages_refused\":%llu,"
                        "\"side_overlapped_layers\":%llu",
                        (unsigned long long)s->stats.fallbacks_total, s_pct_ms(&s->stats.dispatch, 0.5),
                        s_pct_ms(&s->stats.dispatch, 0.99), (unsigned long long)s->stats.dispatch.n,
                        (unsigned long long)s->stats.inproc_rows, (unsigned long long)s->stats.late_dropped,
                        (unsigned long long)s->stats.foreign_dropped, (unsigned long long)s->stats.stale_dropped,
                        (unsigned long long)s->stats.impostor_dropped, (unsigned long long)s->stats.side_overlapped);
    host_moves_json(s, &b); /* experts moved between hosts (host_tier.c) */
    coli_strbuf_appendf(&b, "}");
    return s_done(&b, json);
}

// ---------------------------------------------------------------------------
static void s_worker_text(coli_strbuf *b, const sched *s, const worker_link *w) {
    int up = w->state == LINK_UP;
    /* what the device holds now: a worker that is not up holds nothing */
    coli_strbuf_appendf(
        b, "  worker %d  %-8s plugin %-5s %-11s resident set: %llu experts (%llu bytes, %.1f MiB)", w->id, w->device,
        w->dev.plugin, s_status(w), (unsigned long long)(up ? w->place.resident_experts : 0),
        (unsigned long long)(up ? w->place.resident_bytes : 0), (double)(up ? w->place.resident_bytes : 0) / 1048576.0);
    if (w->place.refused_experts)
        coli_strbuf_appendf(b, ", %llu refused", (unsigned long long)w->place.refused_experts);
    uint64_t guest_bytes, guests = s_guests(s, w, &guest_bytes);
    if (guests) coli_strbuf_appendf(b, ", %llu held for lost hosts", (unsigned long long)guests);
    if (w->stats.rss_bytes)
        coli_strbuf_appendf(b, "  memory: rss %.1f MiB, model %.1f MiB, cgroup %.1f MiB",
                            (double)w->stats.rss_bytes / 1048576.0, (double)w->stats.model_rss_bytes / 1048576.0,
                            (double)w->stats.cgroup_bytes / 1048576.0);
    coli_strbuf_appendf(
        b, "  batches %llu  p50 %.3f ms  p99 %.3f ms  restarts %llu  fallbacks:", (unsigned long long)w->stats.batches,
        s_pct_ms(&w->stats.lat, 0.5), s_pct_ms(&w->stats.lat, 0.99), (unsigned long long)w->proc.restarts);
    int any = 0;
    for (int i = 0; i < s->stats.n_fb; i++)
        if (!strcmp(s->stats.fb[i].device, w->device)) {
            coli_strbuf_appendf(b, " %s %llu", s->stats.fb[i].reason, (unsigned long long)s->stats.fb[i].count);
            any = 1;
        }
    if (!any) coli_strbuf_appendf(b, " none");
    for (int i = 0; i < w->stats.n_counters; i++)
        coli_strbuf_appendf(b, "%s%s %llu", i ? ", " : "  counters: ", w->stats.counter_name[i],
                            (unsigned long long)w->stats.counter_value[i]);
    coli_strbuf_appendf(b, "%s%s\n", w->reason[0] ? "  (" : "", w->reason[0] ? w->reason : "");
    if (w->reason[0]) {
        b->len--;
        coli_strbuf_appendf(b, ")\n");
    }
}

int stats_text(const sched *s, char **text) {
    coli_strbuf b = {0};
    coli_strbuf_appendf(&b, "experts: %d worker%s over %s; dispatch p50 %.3f ms p99 %.3f ms; fallbacks %llu", s->n_w,
                        s->n_w == 1 ? "" : "s", s->net.endpoint, s_pct_ms(&s->stats.dispatch, 0.5),
                        s_pct_ms(&s->stats.dispatch, 0.99), (unsigned long long)s->stats.fallbacks_total);
    for (int i = 0; i < s->stats.n_fb; i++)
        coli_strbuf_appendf(&b, "%s%s %s %llu", i ? ", " : " (", s->stats.fb[i].device, s->stats.fb[i].reason,
                            (unsigned long long)s->stats.fb[i].count);
    coli_strbuf_appendf(&b, "%s; rows computed in-process %llu\n", s->stats.n_fb ? ")" : "",
                        (unsigned long long)s->stats.inproc_rows);
    for (int i = 0; i < s->n_w; i++) {
        s_worker_text(&b, s, &s->w[i]);
        cache_stats_text(&s->w[i], &b);
    }
    host_moves_text(s, &b);
    return s_done(&b, text);
}
