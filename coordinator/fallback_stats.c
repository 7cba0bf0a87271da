/*
 * fallback_stats.c - what the scheduler tells the user: fallbacks by device
 * and reason, per-worker latency, resident experts. The JSON field names
 * are a contract (serving builds /metrics from them; docs/scheduler.md).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/sched_internal.h"
#include "error.h"

/* Upper bounds of the latency histogram, seconds (Prometheus style). */
static const double s_le[SCHED_N_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                             0.025,  0.05,    0.1,    0.25,  0.5,   1.0};

void stats_fallback(sched *s, const worker_link *w, const char *reason)
{
    s->fallbacks_total++;
    for (int i = 0; i < s->n_fb; i++)
        if (!strcmp(s->fb[i].device, w->device) && !strcmp(s->fb[i].reason, reason)) {
            s->fb[i].count++;
            return;
        }
    if (s->n_fb == SCHED_MAX_FALLBACK_KINDS)
        return; /* still in fallbacks_total */
    fallback_count *f = &s->fb[s->n_fb++];
    snprintf(f->device, sizeof f->device, "%s", w->device);
    snprintf(f->reason, sizeof f->reason, "%s", reason);
    f->count = 1;
}

void stats_latency(lat_stats *l, double seconds)
{
    l->ring[l->n % SCHED_LAT_RING] = seconds;
    l->n++;
    l->sum += seconds;
    for (int i = 0; i < SCHED_N_BUCKETS; i++)
        if (seconds <= s_le[i]) {
            l->buckets[i]++;
            break;
        }
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

//  Percentile q (0..1) of the recent samples, in milliseconds.
static double s_pct_ms(const lat_stats *l, double q)
{
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
typedef struct sbuf { char *s; size_t len, cap; int failed; } sbuf;

static void s_put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_put(sbuf *b, const char *fmt, ...)
{
    while (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) { b->failed = 1; return; }
        if (b->s && b->len + (size_t)n < b->cap) { b->len += (size_t)n; return; }
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap <= b->len + (size_t)n) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) { b->failed = 1; return; }
        b->s = p;
        b->cap = cap;
    }
}

//  A JSON string body: quotes, backslashes and control characters escaped.
static void s_put_str(sbuf *b, const char *v)
{
    s_put(b, "\"");
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\') s_put(b, "\\%c", *p);
        else if (*p < 0x20) s_put(b, "\\u%04x", *p);
        else s_put(b, "%c", *p);
    }
    s_put(b, "\"");
}

static int s_done(sbuf *b, char **out)
{
    if (b->failed || !b->s) {
        free(b->s);
        return coli_fail(COLI_ENOMEM, "scheduler stats: out of memory");
    }
    *out = b->s;
    return 0;
}

//  Status as the stats schema names it: up | failed | down | quarantined.
static const char *s_status(const worker_link *w)
{
    switch (w->state) {
    case LINK_UP: return "up";
    case LINK_FAILED: return "failed";
    case LINK_QUARANTINED: return "quarantined";
    default: return "down";
    }
}

static void s_worker_json(sbuf *b, const sched *s, const worker_link *w)
{
    s_put(b, "{\"id\":%d,\"device\":", w->id);
    s_put_str(b, w->device);
    s_put(b, ",\"plugin\":");
    s_put_str(b, w->dev.plugin);
    s_put(b, ",\"endpoint\":");
    s_put_str(b, w->remote ? w->dev.endpoint : s->endpoint);
    s_put(b, ",\"status\":\"%s\",\"state\":\"%s\",\"reason\":", s_status(w), link_state_name(w->state));
    s_put_str(b, w->reason);
    s_put(b, ",\"data_path\":\"%s\",\"ring_replies\":%llu", w->ring.base ? "shm" : "zmq",
          (unsigned long long)w->ring_replies);
    s_put(b, ",\"pid\":%d,\"generation\":%u,\"device_name\":", (int)w->pid, w->gen);
    s_put_str(b, w->device_name);
    int up = w->state == LINK_UP;
    s_put(b, ",\"refused_experts\":%llu", (unsigned long long)w->refused_experts);
    s_put(b, ",\"owned_experts\":%llu,\"resident_experts\":%llu,\"resident_bytes\":%llu,"
          "\"batches\":%llu,\"rows\":%llu,\"rerouted_rows\":%llu,\"restarts\":%llu,\"heartbeats\":%llu,"
          "\"batch_latency_p50_ms\":%.6f,\"batch_latency_p99_ms\":%.6f,",
          (unsigned long long)w->owned_experts, (unsigned long long)(up ? w->resident_experts : 0),
          (unsigned long long)(up ? w->resident_bytes : 0), (unsigned long long)w->batches,
          (unsigned long long)w->rows, (unsigned long long)w->rerouted_rows,
          (unsigned long long)w->restarts, (unsigned long long)w->heartbeats,
          s_pct_ms(&w->lat, 0.5), s_pct_ms(&w->lat, 0.99));
    s_put(b, "\"batch_latency_buckets\":{\"le\":[");
    for (int i = 0; i < SCHED_N_BUCKETS; i++) s_put(b, "%s%g", i ? "," : "", s_le[i]);
    s_put(b, "],\"counts\":[");
    uint64_t cum = 0;
    for (int i = 0; i < SCHED_N_BUCKETS; i++) {
        cum += w->lat.buckets[i];
        s_put(b, "%s%llu", i ? "," : "", (unsigned long long)cum);
    }
    s_put(b, "],\"count\":%llu,\"sum\":%.9f}}", (unsigned long long)w->lat.n, w->lat.sum);
}

int stats_json(moe_exec *self, char **json)
{
    sched *s = (sched *)self;
    link_poll(s, 0); /* fresh states */
    sbuf b = {0};
    s_put(&b, "{\"executor\":\"workers\",\"workers\":[");
    for (int i = 0; i < s->n_w; i++) {
        if (i) s_put(&b, ",");
        s_worker_json(&b, s, &s->w[i]);
    }
    s_put(&b, "],\"fallbacks\":[");
    for (int i = 0; i < s->n_fb; i++) {
        s_put(&b, "%s{\"device\":", i ? "," : "");
        s_put_str(&b, s->fb[i].device);
        s_put(&b, ",\"reason\":");
        s_put_str(&b, s->fb[i].reason);
        s_put(&b, ",\"count\":%llu}", (unsigned long long)s->fb[i].count);
    }
    s_put(&b, "],\"fallbacks_total\":%llu,\"dispatch_latency_p50_ms\":%.6f,"
          "\"dispatch_latency_p99_ms\":%.6f,\"dispatches\":%llu,\"inproc_rows\":%llu,"
          "\"late_replies_dropped\":%llu,\"foreign_messages_dropped\":%llu,"
          "\"stale_messages_dropped\":%llu}",
          (unsigned long long)s->fallbacks_total, s_pct_ms(&s->dispatch, 0.5),
          s_pct_ms(&s->dispatch, 0.99), (unsigned long long)s->dispatch.n,
          (unsigned long long)s->inproc_rows, (unsigned long long)s->late_dropped,
          (unsigned long long)s->foreign_dropped, (unsigned long long)s->stale_dropped);
    return s_done(&b, json);
}

// ---------------------------------------------------------------------------
static void s_worker_text(sbuf *b, const sched *s, const worker_link *w)
{
    int up = w->state == LINK_UP;
    /* what the device holds now: a worker that is not up holds nothing */
    s_put(b, "  worker %d  %-8s plugin %-5s %-11s resident set: %llu experts (%llu bytes, %.1f MiB)",
          w->id, w->device, w->dev.plugin, s_status(w),
          (unsigned long long)(up ? w->resident_experts : 0),
          (unsigned long long)(up ? w->resident_bytes : 0),
          (double)(up ? w->resident_bytes : 0) / 1048576.0);
    if (w->refused_experts)
        s_put(b, ", %llu refused", (unsigned long long)w->refused_experts);
    s_put(b, "  batches %llu  p50 %.3f ms  p99 %.3f ms  restarts %llu  fallbacks:",
          (unsigned long long)w->batches, s_pct_ms(&w->lat, 0.5), s_pct_ms(&w->lat, 0.99),
          (unsigned long long)w->restarts);
    int any = 0;
    for (int i = 0; i < s->n_fb; i++)
        if (!strcmp(s->fb[i].device, w->device)) {
            s_put(b, " %s %llu", s->fb[i].reason, (unsigned long long)s->fb[i].count);
            any = 1;
        }
    s_put(b, "%s%s%s\n", any ? "" : " none", w->reason[0] ? "  (" : "", w->reason[0] ? w->reason : "");
    if (w->reason[0]) { b->len--; s_put(b, ")\n"); }
}

int stats_text(moe_exec *self, char **text)
{
    sched *s = (sched *)self;
    link_poll(s, 0);
    sbuf b = {0};
    s_put(&b, "experts: %d worker%s over %s; dispatch p50 %.3f ms p99 %.3f ms; fallbacks %llu",
          s->n_w, s->n_w == 1 ? "" : "s", s->endpoint, s_pct_ms(&s->dispatch, 0.5),
          s_pct_ms(&s->dispatch, 0.99), (unsigned long long)s->fallbacks_total);
    for (int i = 0; i < s->n_fb; i++)
        s_put(&b, "%s%s %s %llu", i ? ", " : " (", s->fb[i].device, s->fb[i].reason,
              (unsigned long long)s->fb[i].count);
    s_put(&b, "%s; rows computed in-process %llu\n", s->n_fb ? ")" : "",
          (unsigned long long)s->inproc_rows);
    for (int i = 0; i < s->n_w; i++)
        s_worker_text(&b, s, &s->w[i]);
    return s_done(&b, text);
}
