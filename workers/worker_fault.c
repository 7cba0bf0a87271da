/*
 * worker_fault.c - the COLI_FAULT switch: make a worker fail on purpose so
 * the coordinator's failure handling can be tested with real processes.
 *
 *   COLI_FAULT=KIND[@layer=L][@worker=W][:after=N][,KIND...]
 *
 * KIND: crash | crash-during | crash-after | hang | garbage (= garbage-nan)
 *       | garbage-nan | garbage-size | garbage-id | garbage-ring | fail-load
 *       | fail-expert | fail-batch | no-act
 * A fault fires once (fail-batch: on every batch from the (N+1)-th on), on the (N+1)-th batch of layer L (any layer if no
 * @layer) on worker W (any if no @worker), and only in a worker's first
 * generation: a restarted worker is healthy. fail-load fires at start-up.
 * fail-expert counts expert loads at Place instead of batches: the (N+1)-th
 * load of a layer-L expert fails as a device allocation failure would.
 * no-act (for the whole first generation): the plugin's caps.act_mask is
 * taken as 0, as an ABI 1.3 plugin (the GPU's) reports it, so experts with
 * another activation or biases (gpt-oss) are refused at Place.
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "workers/worker.h"

static const struct {
    const char *name;
    worker_fault_kind kind;
} s_kinds[] = {
    {"crash", FAULT_CRASH},
    {"crash-during", FAULT_CRASH_DURING},
    {"crash-after", FAULT_CRASH_AFTER},
    {"hang", FAULT_HANG},
    {"garbage", FAULT_GARBAGE_NAN},
    {"garbage-nan", FAULT_GARBAGE_NAN},
    {"garbage-size", FAULT_GARBAGE_SIZE},
    {"garbage-id", FAULT_GARBAGE_ID},
    {"fail-load", FAULT_FAIL_LOAD},
    {"garbage-ring", FAULT_GARBAGE_RING},
    {"fail-expert", FAULT_FAIL_EXPERT},
    {"fail-batch", FAULT_FAIL_BATCH},
    {"no-act", FAULT_NO_ACT},
};

const char *worker_fault_name(worker_fault_kind k) {
    for (size_t i = 0; i < sizeof s_kinds / sizeof s_kinds[0]; i++)
        if (s_kinds[i].kind == k) return s_kinds[i].name;
    return "none";
}

/* "layer=3" / "worker=1" / "after=2" -> value; -1 on a bad number. */
static long s_value(const char *s, size_t n, const char *key) {
    size_t kl = strlen(key);
    if (n <= kl + 1 || strncmp(s, key, kl) != 0 || s[kl] != '=') return -2; /* not this key */
    char *end;
    long v = strtol(s + kl + 1, &end, 10);
    return (end == s + n && v >= 0) ? v : -1;
}

static int s_parse_option(const char *s, size_t n, worker_fault *f) {
    long v;
    if ((v = s_value(s, n, "layer")) != -2)
        f->layer = (int)v;
    else if ((v = s_value(s, n, "worker")) != -2)
        f->worker = (int)v;
    else if ((v = s_value(s, n, "after")) != -2)
        f->after = v;
    else
        return -1;
    return v < 0 ? -1 : 0;
}

/* One comma-separated item: KIND then @opt / :opt parts. */
static int s_parse_item(const char *s, size_t n, worker_fault *f) {
    memset(f, 0, sizeof *f);
    f->layer = -1;
    f->worker = -1;
    size_t k = strcspn(s, "@:");
    if (k > n) k = n;
    for (size_t i = 0; i < sizeof s_kinds / sizeof s_kinds[0]; i++)
        if (strlen(s_kinds[i].name) == k && strncmp(s, s_kinds[i].name, k) == 0) f->kind = s_kinds[i].kind;
    if (f->kind == FAULT_NONE) return coli_fail(COLI_EINVAL, "COLI_FAULT: unknown fault '%.*s'", (int)k, s);
    while (k < n) {
        size_t start = k + 1;
        size_t len = strcspn(s + start, "@:");
        if (start + len > n) len = n - start;
        if (s_parse_option(s + start, len, f) != 0)
            return coli_fail(COLI_EINVAL, "COLI_FAULT: bad option '%.*s'", (int)len, s + start);
        k = start + len;
    }
    return 0;
}

int worker_fault_parse(const char *spec, worker_fault *out, int cap) {
    int n = 0;
    while (spec && *spec) {
        size_t len = strcspn(spec, ",");
        if (len > 0) {
            if (n == cap) return coli_fail(COLI_EINVAL, "COLI_FAULT: more than %d faults", cap);
            int rc = s_parse_item(spec, len, &out[n]);
            if (rc != 0) return rc;
            n++;
        }
        spec += len + (spec[len] == ',');
    }
    return n;
}

/* The first unfired fault of the wanted class for (worker, layer), counted. */
static worker_fault *s_match(worker_fault *f, int n, int worker_id, int layer, int loads) {
    for (int i = 0; i < n; i++) {
        worker_fault *x = &f[i];
        if (x->fired || x->kind == FAULT_FAIL_LOAD || x->kind == FAULT_NO_ACT ||
            (x->kind == FAULT_FAIL_EXPERT) != loads)
            continue;
        if ((x->layer >= 0 && x->layer != layer) || (x->worker >= 0 && x->worker != worker_id)) continue;
        if (x->seen++ < x->after) continue;
        x->fired = x->kind != FAULT_FAIL_BATCH; /* a worker that keeps failing, not one that failed */
        return x;
    }
    return NULL;
}

int worker_faults_init(worker *w) {
    int n = worker_fault_parse(w->set.fault, w->faults.f, WORKER_MAX_FAULTS);
    if (n < 0) return n;
    w->faults.n = n;
    return 0;
}

/* 1 when a start-up fault of kind k names this worker (first generation only). */
static int s_startup_fault(const worker *w, worker_fault_kind k) {
    for (int i = 0; i < w->faults.n; i++)
        if (w->faults.f[i].kind == k && w->link.generation == 0 &&
            (w->faults.f[i].worker < 0 || w->faults.f[i].worker == w->link.worker_id))
            return 1;
    return 0;
}

int worker_fault_fail_load(const worker *w) { return s_startup_fault(w, FAULT_FAIL_LOAD); }

int worker_fault_no_act(const worker *w) { return s_startup_fault(w, FAULT_NO_ACT); }

/* The fault of the wanted class for a batch or load of layer, counted; none
 * after the first generation (a restarted worker is healthy). */
static worker_fault *s_strike(worker *w, int layer, int loads) {
    return w->link.generation == 0 ? s_match(w->faults.f, w->faults.n, w->link.worker_id, layer, loads) : NULL;
}

worker_fault *worker_fault_before_load(worker *w, int layer) { return s_strike(w, layer, 1); }

worker_fault *worker_fault_before_batch(worker *w, int layer) {
    worker_fault *f = s_strike(w, layer, 0);
    if (f && f->kind == FAULT_CRASH) raise(SIGKILL);
    if (f && f->kind == FAULT_HANG) raise(SIGSTOP);
    return f;
}

int worker_fault_reply(worker *w, worker_fault *f, uint64_t id, const Coli__ExpertBatch *b, float *out, uint64_t ns) {
    int64_t n = b->n_rows;
    switch (f->kind) {
    case FAULT_GARBAGE_NAN: out[0] = NAN; break;
    case FAULT_GARBAGE_SIZE: n = n - 1; break;
    case FAULT_GARBAGE_ID: id += 1000003; break;
    case FAULT_CRASH_DURING: raise(SIGKILL); break;
    case FAULT_GARBAGE_RING: worker_send_garbage_frame(w); return 0;
    case FAULT_FAIL_BATCH: return worker_send_result(w, id, b, 0, "COLI_FAULT fail-batch", NULL, 0, ns);
    default: {
        int rc = worker_send_result(w, id, b, 1, "", out, b->n_rows, ns);
        if (f->kind == FAULT_CRASH_AFTER) raise(SIGKILL);
        return rc;
    }
    }
    worker_send_result(w, id, b, 1, "", out, n, 0);
    return 0;
}
