/*
 * scheduler.c - the worker executor (moe_exec_workers_new): per MoE layer,
 * send every worker its (token, expert) rows before reading any reply,
 * compute in-process whatever nobody else can take, gather with a
 * deadline, and send what failed to a CPU worker or compute it here.
 *
 * Outputs land in y[t][s] by pair index; the forward pass combines them in
 * slot order, and the cpu kernels' rows do not depend on the batch they are
 * in (core/kernels/matmul.h), so the answer is bit-identical whichever path
 * computed which pair. Placement decides speed, never the answer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "coordinator/sched/sched_internal.h"
#include "core/error.h"
#include "core/kernels/expert_ffn.h"
#include "core/threadpool.h"

enum {
    PAIR_DONE = -2,
    PAIR_PENDING = -3,
    PAIR_INPROC = -1
};

// ---------------------------------------------------------------------------
void sched_rows_done(sched *s, worker_link *w, const void *out) {
    const size_t E = (size_t)s->model.n_embd;
    stats_latency(&w->stats.lat, (double)(coli_now_ns() - w->req.sent_ns) / 1e9);
    w->stats.batches++;
    w->stats.rows += (uint64_t)w->req.n_rows;
    for (int64_t r = 0; r < w->req.n_rows; r++) {
        int64_t p = w->req.row_pair[r];
        memcpy(s->call.y + (size_t)p * E, (const char *)out + (size_t)r * E * sizeof(float), E * sizeof(float));
        s->call.pair_target[p] = PAIR_DONE;
        s->call.done_by[p] = (int16_t)w->id;
        s->call.pending--;
    }
    w->req.id = 0;
    stats_batch_outcome(&w->stats, 1);
    sup_batch_ok(s, w);
}

void sched_rows_lost(sched *s, worker_link *w) {
    for (int64_t r = 0; r < w->req.n_rows; r++)
        if (s->call.pair_target[w->req.row_pair[r]] == w->id) s->call.pair_target[w->req.row_pair[r]] = PAIR_PENDING;
    w->req.id = 0;
    s->call.excluded[w->id] = 1;
}

void sched_outcome(sched *s, worker_link *w, link_outcome o, const char *reason, const char *why) {
    switch (o) {
    case LINK_LOST: sup_worker_lost(s, w, reason, 1); return;
    case LINK_GARBAGE:
        if (w->state == LINK_QUARANTINED || w->state == LINK_DOWN || w->state == LINK_FAILED)
            return; /* out of service already: counted when it left */
        if (s->verbose) fprintf(stderr, "colibri: worker %d (%s) quarantined: %s\n", w->id, w->device, why);
        stats_fallback(s, w, reason);
        if (w->req.id) sched_rows_lost(s, w);
        link_set_state(w, LINK_QUARANTINED, why);
        sup_kill(s, w);
        host_on_lost(s, w); /* for good: a remote host's experts move */
        return;
    case LINK_REFUSED: {
        /* a FAILED hello's worker exits by itself; a refused Place or handshake is ended here */
        int end_it = w->state == LINK_PLACING || (w->tcp.on && !w->tcp.handshaked);
        stats_fallback(s, w, reason);
        link_set_state(w, LINK_FAILED, why);
        fprintf(stderr, "colibri: worker %d (%s): %s; its experts go to the CPU path\n", w->id, w->device, why);
        if (end_it) sup_kill(s, w);
        host_on_lost(s, w);
        return;
    }
    case LINK_BATCH_FAILED:
        if (s->verbose && why) fprintf(stderr, "colibri: worker %d (%s): %s\n", w->id, w->device, why);
        stats_fallback(s, w, reason);
        stats_batch_outcome(&w->stats, 0);
        sched_rows_lost(s, w);
        return;
    case LINK_EXPERT_REFUSED: stats_fallback(s, w, reason); return;
    }
}

/* Take what the workers sent, then act on deaths and due restarts. */
static void s_poll(sched *s, int timeout_ms) {
    link_poll(s, timeout_ms);
    sup_tick(s);
}

// ---------------------------------------------------------------------------
//  An up CPU worker that has not failed in this layer and did not refuse the
//  expert at Place (refused_mask), the least loaded.
static int s_fallback_worker(sched *s, const int64_t *load, uint64_t refused_mask) {
    int best = -1;
    for (int i = 0; i < s->n_w; i++)
        if (s->w[i].is_cpu && !s->w[i].cache && s->w[i].state == LINK_UP && !s->call.excluded[i] &&
            !(refused_mask >> i & 1) && (best < 0 || load[i] < load[best]))
            best = i;
    return best;
}

static int s_reserve_rows(sched *s, worker_link *w, size_t rows) {
    if (rows <= w->req.cap_rows) return 0;
    size_t cap = w->req.cap_rows ? w->req.cap_rows : 16;
    while (cap < rows) cap *= 2;
    int64_t *rp = realloc(w->req.row_pair, cap * sizeof *rp);
    if (rp) w->req.row_pair = rp;
    float *x = realloc(w->req.x, cap * (size_t)s->model.n_embd * sizeof(float));
    if (x) w->req.x = x;
    if (!rp || !x) return coli_fail(COLI_ENOMEM, "worker %d: buffers for %zu rows", w->id, rows);
    w->req.cap_rows = cap;
    return 0;
}

/* w's rows (in pair order) regrouped by expert, pair order within an expert. */
static int s_group_rows(sched *s, worker_link *w) {
    if ((size_t)w->req.n_rows > s->call.cap_grouped) {
        int64_t *g = realloc(s->call.grouped, w->req.cap_rows * sizeof *g);
        if (!g) return coli_fail(COLI_ENOMEM, "scheduler: %lld rows", (long long)w->req.n_rows);
        s->call.grouped = g;
        s->call.cap_grouped = w->req.cap_rows;
    }
    moe_group_by_expert(s->call.ids, w->req.row_pair, w->req.n_rows, s->model.n_expert, s->call.group_start,
                        s->call.grouped);
    memcpy(w->req.row_pair, s->call.grouped, (size_t)w->req.n_rows * sizeof *w->req.row_pair);
    return 0;
}

/* Give each pending pair a target (a cache worker holding its expert, else
 * its owner, else a CPU worker or in-process); collect each worker's rows
 * sorted by expert. first: the layer's first round (cache counters follow it). */
static int s_assign(sched *s, int layer, int64_t n_pairs, unsigned char *allow_load, int first) {
    int64_t load[SCHED_MAX_WORKERS] = {0};
    for (int i = 0; i < s->n_w; i++) s->w[i].req.n_rows = 0;
    for (int64_t p = 0; p < n_pairs; p++) {
        if (s->call.pair_target[p] != PAIR_PENDING) continue;
        size_t slot = (size_t)layer * (size_t)s->model.n_expert + (size_t)s->call.ids[p];
        int o = s->place.owner[slot];
        int t = cache_route(s, slot, first);
        if (t >= 0)
            o = t;
        else
            t = o;
        if (o < 0 || s->w[o].state != LINK_UP || s->call.excluded[o]) {
            t = s_fallback_worker(s, load, s->place.refused_by[slot]);
            if (t >= 0) allow_load[t] = 1;
            if (o >= 0) s->w[o].stats.rerouted_rows++;
        }
        s->call.pair_target[p] = t;
        if (t < 0) continue;
        worker_link *w = &s->w[t];
        int rc = s_reserve_rows(s, w, (size_t)w->req.n_rows + 1);
        if (rc) return rc;
        w->req.row_pair[w->req.n_rows++] = p;
        load[t]++;
    }
    for (int i = 0; i < s->n_w; i++) {
        int rc = s->w[i].req.n_rows > 1 ? s_group_rows(s, &s->w[i]) : 0;
        if (rc) return rc;
    }
    return 0;
}

/* Gather the rows and send; a worker we cannot reach loses its rows. */
static void s_send_all(sched *s, int layer, const float *x, int k, const unsigned char *allow_load) {
    const size_t E = (size_t)s->model.n_embd;
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        if (!w->req.n_rows) continue;
        int finite = 1;
        for (int64_t r = 0; r < w->req.n_rows; r++) {
            const float *src = x + (size_t)(w->req.row_pair[r] / k) * E;
            memcpy(w->req.x + (size_t)r * E, src, E * sizeof(float));
        }
        for (size_t j = 0; finite && j < (size_t)w->req.n_rows * E; j++) finite = isfinite(w->req.x[j]);
        w->req.x_finite = finite;
        link_sent sent = link_send_batch(s, w, layer, allow_load[i]);
        if (sent == LINK_SENT) continue;
        w->req.id = 1; /* so that the rows are handed back */
        if (sent == LINK_UNREACHABLE)
            sup_worker_lost(s, w, "crash", 1);
        else
            sched_outcome(s, w, LINK_BATCH_FAILED, "error", NULL);
        s->call.excluded[i] = 1;
    }
}

/* Pairs nobody else can take: the cpu plugin, here. */
static int s_run_inproc(sched *s, int layer, const float *x, int64_t n_pairs, int k) {
    const size_t E = (size_t)s->model.n_embd;
    int64_t m = 0;
    for (int64_t p = 0; p < n_pairs; p++) m += s->call.pair_target[p] == PAIR_INPROC;
    if (!m) return 0;
    if (!s->inproc) {
        int rc = moe_exec_inproc_new(&s->cfg, &s->inproc);
        if (rc) return coli_fail_prefix(rc, "in-process fallback");
    }
    float *xin = malloc((size_t)m * E * sizeof(float)), *yout = malloc((size_t)m * E * sizeof(float));
    int32_t *ids = malloc((size_t)m * sizeof *ids);
    int64_t *pp = malloc((size_t)m * sizeof *pp);
    int rc =
        (!xin || !yout || !ids || !pp) ? coli_fail(COLI_ENOMEM, "in-process fallback: %lld rows", (long long)m) : 0;
    for (int64_t p = 0, j = 0; rc == 0 && p < n_pairs; p++)
        if (s->call.pair_target[p] == PAIR_INPROC) {
            memcpy(xin + (size_t)j * E, x + (size_t)(p / k) * E, E * sizeof(float));
            ids[j] = s->call.ids[p];
            pp[j++] = p;
        }
    if (rc == 0) rc = s->inproc->run_layer(s->inproc, layer, xin, m, 1, ids, yout);
    for (int64_t j = 0; rc == 0 && j < m; j++) {
        memcpy(s->call.y + (size_t)pp[j] * E, yout + (size_t)j * E, E * sizeof(float));
        s->call.pair_target[pp[j]] = PAIR_DONE;
        s->call.done_by[pp[j]] = -1;
        s->call.pending--;
    }
    if (rc == 0) s->stats.inproc_rows += (uint64_t)m;
    free(xin);
    free(yout);
    free(ids);
    free(pp);
    return rc;
}

/* Wait for every request in flight, at most until the deadline. */
static void s_gather(sched *s) {
    int64_t max_rows = 0, in_flight = 0;
    for (int i = 0; i < s->n_w; i++) {
        if (s->w[i].req.id && s->w[i].req.n_rows > max_rows) max_rows = s->w[i].req.n_rows;
        in_flight += s->w[i].req.id != 0;
    }
    if (in_flight) coli_pool_stand_down(); /* our idle compute threads must not spin on the workers' cores */
    uint64_t deadline = coli_now_ns() + s->lim.deadline_ns + s->lim.per_row_ns * (uint64_t)max_rows;
    link_spin_rings(s); /* ring replies come within microseconds: do not sleep for them */
    for (;;) {
        int waiting = 0;
        for (int i = 0; i < s->n_w; i++) waiting += s->w[i].req.id != 0;
        if (!waiting) return;
        uint64_t now = coli_now_ns();
        if (now >= deadline) break;
        s_poll(s, (int)((deadline - now) / 1000000ULL) + 1);
    }
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        if (!w->req.id) continue;
        if (s->verbose) fprintf(stderr, "colibri: worker %d (%s) missed the layer deadline\n", w->id, w->device);
        stats_fallback(s, w, "timeout");
        w->req.hung_id = w->req.id;
        sched_rows_lost(s, w);
        link_set_state(w, LINK_HUNG, "missed the layer deadline");
    }
}

/* The caller's side work (a shared expert: moe_exec.side), at most once per
 * layer, while the workers compute; counted when some request is in flight. */
static void s_side(sched *s) {
    void (*fn)(void *) = s->base.side;
    if (!fn) return;
    s->base.side = NULL; /* once: a second round (a worker failed) must not run it again */
    for (int i = 0; i < s->n_w; i++)
        if (s->w[i].req.id) {
            s->stats.side_overlapped++;
            break;
        }
    uint64_t t0 = coli_now_ns();
    fn(s->base.side_arg);
    s->call.side_ns = coli_now_ns() - t0;
}

static int s_reserve_pairs(sched *s, int64_t n_pairs) {
    if ((size_t)n_pairs <= s->call.cap_pairs) return 0;
    int64_t *t = realloc(s->call.pair_target, (size_t)n_pairs * sizeof *t);
    if (t) s->call.pair_target = t;
    int16_t *by = realloc(s->call.done_by, (size_t)n_pairs * sizeof *by);
    if (by) s->call.done_by = by;
    if (!t || !by) return coli_fail(COLI_ENOMEM, "scheduler: %lld pairs", (long long)n_pairs);
    s->call.cap_pairs = (size_t)n_pairs;
    return 0;
}

static int s_run_layer(moe_exec *self, int layer, const float *x, int64_t n_tok, int k, const int32_t *ids, float *y) {
    sched *s = (sched *)self;
    if (layer < 0 || layer >= s->model.n_layer)
        return coli_fail(COLI_EINVAL, "scheduler: layer %d out of range [0, %d)", layer, s->model.n_layer);
    if (n_tok <= 0 || k <= 0) return 0;
    const int64_t n_pairs = n_tok * k;
    for (int64_t p = 0; p < n_pairs; p++)
        if (ids[p] < 0 || ids[p] >= s->model.n_expert)
            return coli_fail(COLI_ERANGE, "scheduler: layer %d: expert id %d out of range [0, %d)", layer, ids[p],
                             s->model.n_expert);
    int rc = s_reserve_pairs(s, n_pairs);
    if (rc) return rc;
    host_tier_count(s, layer, ids, n_pairs); /* what a lost host's experts are ordered by */
    s_poll(s, 0);
    s->call.y = y;
    s->call.ids = ids;
    s->call.layer = layer;
    s->call.pending = n_pairs;
    for (int64_t p = 0; p < n_pairs; p++) s->call.pair_target[p] = PAIR_PENDING;
    memset(s->call.excluded, 0, (size_t)s->n_w);
    s->call.side_ns = 0;
    uint64_t t0 = coli_now_ns();
    cache_prefetch(s, layer, x, n_tok); /* the next layer's loads overlap with this one */
    int used_workers = 0, first = 1;
    while (rc == 0 && s->call.pending > 0) {
        unsigned char allow_load[SCHED_MAX_WORKERS] = {0};
        rc = s_assign(s, layer, n_pairs, allow_load, first);
        first = 0;
        if (rc) break;
        for (int i = 0; i < s->n_w; i++) used_workers |= s->w[i].req.n_rows > 0;
        s_send_all(s, layer, x, k, allow_load);
        rc = s_run_inproc(s, layer, x, n_pairs, k); /* overlaps with the workers */
        s_side(s);                                  /* so does the caller's own work, once */
        s_gather(s);
    }
    for (int i = 0; i < s->n_w; i++) s->w[i].req.id = 0;
    cache_after_layer(s, n_tok); /* nothing in flight: evictions may leave routing now */
    if (rc == 0 && used_workers) /* the experts' time: the caller's side work is its own */
        stats_latency(&s->stats.dispatch, (double)(coli_now_ns() - t0 - s->call.side_ns) / 1e9);
    return rc;
}

// ---------------------------------------------------------------------------
// stats: states brought up to date first, then formatted (fallback_stats.c)

static int s_stats_json(moe_exec *self, char **json) {
    s_poll((sched *)self, 0);
    return stats_json((const sched *)self, json);
}

static int s_stats_text(moe_exec *self, char **text) {
    s_poll((sched *)self, 0);
    return stats_text((const sched *)self, text);
}

/* Who computed pair p of the last layer (route traces). */
static const char *s_pair_device(moe_exec *self, int64_t p) {
    const sched *s = (const sched *)self;
    if (p < 0 || (size_t)p >= s->call.cap_pairs || s->call.done_by[p] < 0) return "inproc";
    return s->w[s->call.done_by[p]].device;
}

/* Nobody holds it at start: the coordinator (or a CPU worker loading it on demand) computes it. */
static int s_computes_here(moe_exec *self, int layer, int expert) {
    const sched *s = (const sched *)self;
    return s->place.owner[(size_t)layer * (size_t)s->model.n_expert + (size_t)expert] < 0;
}

// ---------------------------------------------------------------------------
// lifecycle

static void s_destroy(moe_exec *self) {
    sched *s = (sched *)self;
    if (!s) return;
    if (s->net.router) sup_shutdown_all(s);
    for (int i = 0; i < 2; i++) /* EOF on the lifeline: any worker still there exits */
        if (s->net.lifeline[i] >= 0) close(s->net.lifeline[i]);
    if (s->net.router) zmq_close(s->net.router);
    if (s->net.zctx) zmq_ctx_term(s->net.zctx);
    if (s->net.dir[0]) {
        char sock[PATH_MAX + 16];
        snprintf(sock, sizeof sock, "%s/coord", s->net.dir);
        unlink(sock);
        rmdir(s->net.dir);
    }
    if (s->inproc) s->inproc->destroy(s->inproc);
    if (s->w) cache_free(s);
    for (int i = 0; i < s->n_w; i++) {
        free(s->w[i].req.row_pair);
        free(s->w[i].req.x);
        ring_close(&s->w[i].shm.ring);
    }
    free(s->w);
    free(s->place.owner);
    free(s->place.refused_by);
    free(s->model.need);
    free(s->place.home);
    free(s->place.moving);
    free(s->place.heat);
    free(s->model.expert_bytes);
    free(s->model.path);
    free(s->call.pair_target);
    free(s->call.done_by);
    free(s->call.excluded);
    free(s->call.group_start);
    free(s->call.grouped);
    free(s);
}

/* The settings read at load (cfg->settings), in the units used here. */
static void s_settings(sched *s, const moe_exec_config *cfg) {
    s->set = *cfg->settings;
    const coli_settings *st = &s->set;
    s->lim.deadline_ns = st->layer_deadline_ms * 1000000ULL;
    s->lim.per_row_ns = st->deadline_per_row_us * 1000ULL;
    s->lim.start_ns = st->worker_start_ms * 1000000ULL;
    s->lim.hang_kill_ns = st->hang_kill_ms * 1000000ULL;
    s->lim.backoff_ns = st->restart_backoff_ms * 1000000ULL;
    s->lim.backoff_max_ns = 5000000000ULL;
    s->lim.fail_window_ns = st->fail_window_ms * 1000000ULL;
    s->lim.max_failures = (int)st->max_failures;
    s->lim.reprobe_ns = st->reprobe_ms * 1000000ULL;
    s->lim.spin_ns = st->shm_spin_us * 1000ULL;
    s->lim.hb_ns = st->heartbeat_ms * 1000000ULL;
    if (s->lim.hb_ns < 10000000ULL) s->lim.hb_ns = 10000000ULL; /* the worker's floor */
    s->lim.hb_miss = st->heartbeat_miss;
}

/* COLI_DATA_PATH=shm (default) | zmq: how batches reach local workers. */
static int s_data_path(sched *s) {
    if (s->set.data_path == COLI_DATA_PATH_INVALID)
        return coli_fail(COLI_EINVAL, "COLI_DATA_PATH '%s': want shm or zmq", s->set.data_path_text);
    s->lim.use_rings = s->set.data_path == COLI_DATA_PATH_SHM;
    /* the largest batch the forward pass sends: every (token, slot) pair of a chunk */
    s->lim.ring_rows = (int64_t)MOE_EXEC_MAX_TOKENS * (s->cfg.n_expert_used > 0 ? s->cfg.n_expert_used : 1);
    return 0;
}

/* Size of one expert per layer, the file's identity, buffers. */
static int s_model_facts(sched *s, const moe_exec_config *cfg) {
    s->model.n_layer = cfg->n_layer;
    s->model.n_expert = cfg->n_expert;
    s->model.n_embd = cfg->n_embd;
    s->model.expert_bytes = calloc((size_t)cfg->n_layer, sizeof *s->model.expert_bytes);
    s->place.owner = malloc((size_t)cfg->n_layer * (size_t)cfg->n_expert * sizeof *s->place.owner);
    s->place.refused_by = calloc((size_t)cfg->n_layer * (size_t)cfg->n_expert, sizeof *s->place.refused_by);
    s->model.need = calloc((size_t)cfg->n_layer, sizeof *s->model.need);
    s->call.group_start = malloc(((size_t)cfg->n_expert + 1) * sizeof *s->call.group_start);
    s->model.path = strdup(cfg->model_path);
    if (!s->model.expert_bytes || !s->place.owner || !s->place.refused_by || !s->call.group_start || !s->model.path ||
        !s->model.need)
        return coli_fail(COLI_ENOMEM, "scheduler: out of memory");
    int rc_home = host_tier_init(s);
    if (rc_home) return rc_home;
    for (int l = 0; l < cfg->n_layer; l++) {
        expert_weights ew;
        if (!expert_layer_present(cfg->gguf, l)) continue; /* dense layer: 0 bytes, nothing placed */
        int rc = expert_weights_from_gguf(cfg->gguf, l, 0, &ew);
        if (rc) return rc;
        s->model.expert_bytes[l] = expert_weights_bytes(&ew);
        placement_need_of(&ew, &s->model.need[l]);
    }
    wire_model_identity(cfg->gguf, &s->model.size, &s->model.hash);
    s->cfg = *cfg;
    s->cfg.model_path = s->model.path;
    s->cfg.devices = NULL;
    s->cfg.settings = &s->set;
    return 0;
}

/* The ROUTER's address. Linux: an abstract unix address ("ipc://@coli-..."),
 * which vanishes with the socket, so a SIGKILLed coordinator leaves nothing
 * in the file system; anyone on the host may connect to it, and the routing
 * id secret (worker_identity.c) is what refuses them. Elsewhere:
 * ipc://<private 0700 directory in TMPDIR>/coord, removed at destroy. */
static int s_endpoint(sched *s) {
    unsigned char r[8] = {0};
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        return coli_fail(COLI_EIO, "scheduler: getrandom: %s", strerror(errno));
    for (int i = 0; i < 8; i++) snprintf(s->net.session + 2 * i, 3, "%02x", r[i]);
#ifdef __linux__
    snprintf(s->net.endpoint, sizeof s->net.endpoint, "ipc://@coli-%d-%s", (int)getpid(), s->net.session);
    return 0;
#else
    const char *tmp = s->set.tmp_dir;
    snprintf(s->net.dir, sizeof s->net.dir, "%.4000s/coli-XXXXXX", *tmp ? tmp : "/tmp");
    if (!mkdtemp(s->net.dir)) {
        int e = errno;
        s->net.dir[0] = 0;
        return coli_fail(COLI_EIO, "scheduler: private directory in %s: %s", *tmp ? tmp : "/tmp", strerror(e));
    }
    snprintf(s->net.endpoint, sizeof s->net.endpoint, "ipc://%s/coord", s->net.dir);
    return 0;
#endif
}

/* ROUTER bound to s_endpoint; the workers' lifeline pipe
 * (both ends close-on-exec: sup_spawn lets each worker keep the read end). */
static int s_transport(sched *s) {
    if (pipe2(s->net.lifeline, O_CLOEXEC) != 0) {
        s->net.lifeline[0] = s->net.lifeline[1] = -1;
        return coli_fail(COLI_EIO, "scheduler: lifeline pipe: %s", strerror(errno));
    }
    int rc = s_endpoint(s);
    if (rc) return rc;
    s->net.zctx = zmq_ctx_new();
    s->net.router = s->net.zctx ? zmq_socket(s->net.zctx, ZMQ_ROUTER) : NULL;
    if (!s->net.router) return coli_fail(COLI_EIO, "scheduler: zmq socket: %s", zmq_strerror(errno));
    rc = wire_socket_setup(s->net.router, 1);
    if (rc) return rc;
    if (zmq_bind(s->net.router, s->net.endpoint) != 0)
        return coli_fail(COLI_EIO, "scheduler: bind %s: %s", s->net.endpoint, zmq_strerror(errno));
    return 0;
}

static int s_make_workers(sched *s, const device_spec *devs, int n) {
    s->w = calloc((size_t)n, sizeof *s->w);
    s->call.excluded = calloc((size_t)n, 1);
    if (!s->w || !s->call.excluded) return coli_fail(COLI_ENOMEM, "scheduler: out of memory");
    s->n_w = n;
    int n_cpu = 0;
    for (int i = 0; i < n; i++) n_cpu += !strcmp(devs[i].plugin, "cpu");
    long cores = s->cfg.n_threads > 0 ? s->cfg.n_threads : sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 0; i < n; i++) {
        worker_link *w = &s->w[i];
        w->id = i;
        w->dev = devs[i];
        w->proc.pidfd = -1;
        w->is_cpu = !strcmp(devs[i].plugin, "cpu");
        snprintf(w->device, sizeof w->device, "%.15s:%d", devs[i].plugin, devs[i].index);
        w->proc.n_threads =
            w->is_cpu ? (devs[i].threads > 0 ? devs[i].threads : (int)(cores / (n_cpu ? n_cpu : 1))) : 1;
        if (w->proc.n_threads < 1) w->proc.n_threads = 1;
        int rc = sup_spawn(s, w);
        if (rc) return rc;
    }
    return 0;
}

/* Worker w holds up the load while it is in state st. Not a remote worker
 * reconnecting (generation > 0) to start: its first connection already
 * failed during this load (counted, its experts on the CPU path), and a
 * reconnect waits out the start deadline by design (a host that restarts
 * is taken the moment it listens), which would stall the load for as long
 * whenever the back-off ended before the other workers said hello. */
static int s_holds_up_load(const worker_link *w, link_state st) {
    if (w->state != st) return 0;
    if (st != LINK_STARTING) return 1;
    return !w->place.hello_ok && !(w->tcp.on && w->proc.gen > 0);
}

/* Poll until no worker holds up the load in state st. */
static void s_wait_while(sched *s, link_state st) {
    for (;;) {
        int waiting = 0;
        for (int i = 0; i < s->n_w; i++) waiting += s_holds_up_load(&s->w[i], st);
        if (!waiting) return;
        s_poll(s, 50); /* start_timeout in sup_tick ends every wait */
    }
}

/* Bytes of experts worker w may be given: its --devices budget, else for a
 * device plugin the budget its hello reported (free memory less a reserve);
 * cpu workers map the file, so without a budget they take any share.
 * COLI_PLACE_IGNORE_BUDGET=1 (tests) sends experts regardless, so that the
 * plugin's own refusal at load time is exercised. */
static uint64_t s_place_budget(const sched *s, const worker_link *w) {
    if (s->set.place_ignore_budget) return 0;
    if (w->dev.budget) return w->dev.budget;
    return w->is_cpu ? 0 : w->place.caps_budget;
}

/* The expert -> worker map: from heat and pins when the model came with
 * either (heat_place.c), else balanced by bytes (placement.c). */
static int s_plan(sched *s, const placement_in *in) {
    const uint64_t *heat = s->cfg.heat;
    uint64_t total = 0;
    for (size_t i = 0; heat && i < (size_t)in->n_layer * (size_t)in->n_expert; i++) total += heat[i];
    if (!total && !(s->cfg.pins && *s->cfg.pins)) return placement_plan(in, s->place.owner);
    const size_t n_slots = (size_t)in->n_layer * (size_t)in->n_expert;
    int32_t *pin = malloc(n_slots * sizeof *pin);
    uint64_t *zero = total ? NULL : calloc(n_slots, sizeof *zero);
    long speed[SCHED_MAX_WORKERS];
    device_spec d[SCHED_MAX_WORKERS];
    for (int i = 0; i < s->n_w; i++) d[i] = s->w[i].dev, speed[i] = sched_device_speed(&d[i], s->w[i].proc.n_threads);
    int rc = !pin || (!total && !zero) ? coli_fail(COLI_ENOMEM, "scheduler: out of memory") : 0;
    if (rc == 0) rc = sched_parse_pins(s->cfg.pins, d, s->n_w, in->n_layer, in->n_expert, pin);
    if (rc == 0) rc = placement_plan_heat(in, total ? heat : zero, speed, pin, s->place.owner);
    if (rc == 0 && s->verbose && total) {
        double share[SCHED_MAX_WORKERS + 1];
        placement_row_share(in, heat, s->place.owner, share);
        for (int i = 0; i < s->n_w; i++)
            fprintf(stderr, "colibri: heat placement: worker %d (%s) expected to serve %.1f%% of routed rows\n", i,
                    s->w[i].device, 100.0 * share[i]);
    }
    free(pin);
    free(zero);
    return rc;
}

/* able (n_w * n_layer): may worker w compute layer l's experts, by the
 * types and activations its hello reported? A worker that cannot is also
 * marked as refusing every expert of the layer, so that no fallback sends
 * it their rows either: they go to a capable CPU worker or in-process. */
static void s_able(sched *s, uint8_t *able) {
    const size_t L = (size_t)s->model.n_layer, X = (size_t)s->model.n_expert;
    for (int w = 0; w < s->n_w; w++)
        for (size_t l = 0; l < L; l++) {
            const link_place *p = &s->w[w].place;
            able[(size_t)w * L + l] = (uint8_t)placement_fits(&s->model.need[l], p->caps_types, p->caps_acts);
            for (size_t e = 0; !able[(size_t)w * L + l] && s->model.expert_bytes[l] && e < X; e++)
                s->place.refused_by[l * X + e] |= 1ULL << w;
        }
}

static int s_place(sched *s) {
    uint64_t budget[SCHED_MAX_WORKERS];
    int ready[SCHED_MAX_WORKERS], usable[SCHED_MAX_WORKERS];
    for (int i = 0; i < s->n_w; i++) {
        budget[i] = s_place_budget(s, &s->w[i]);
        ready[i] = s->w[i].state == LINK_STARTING && s->w[i].place.hello_ok;
        /* a cache worker is no home tier: its experts come and go (cache_link.c) */
        usable[i] = ready[i] && !s->w[i].dev.cache;
    }
    uint8_t *able = malloc((size_t)s->n_w * (size_t)s->model.n_layer);
    if (!able) return coli_fail(COLI_ENOMEM, "scheduler: out of memory");
    s_able(s, able);
    placement_in in = {s->model.n_layer, s->model.n_expert, s->model.expert_bytes, s->n_w, budget, usable, able};
    int rc = s_plan(s, &in);
    free(able);
    if (rc == 0) rc = cache_setup(s, s->cfg.heat);
    if (rc) return rc;
    host_tier_planned(s);
    s->place.started = 1;
    for (int i = 0; i < s->n_w; i++)
        if (ready[i] && link_send_place(s, &s->w[i]) != LINK_SENT) sup_worker_lost(s, &s->w[i], "crash", 1);
    s_wait_while(s, LINK_PLACING);
    return 0;
}

int moe_exec_workers_new(const moe_exec_config *cfg, moe_exec **out) {
    *out = NULL;
    if (!cfg || !cfg->gguf || !cfg->model_path || cfg->n_layer <= 0 || cfg->n_expert <= 0 || cfg->n_embd <= 0 ||
        !cfg->settings)
        return coli_fail(COLI_EINVAL, "scheduler: config needs a model file, layers, experts, n_embd and settings");
    device_spec devs[SCHED_MAX_WORKERS];
    sched *s = calloc(1, sizeof *s);
    if (!s) return coli_fail(COLI_ENOMEM, "scheduler: out of memory");
    s->base = (moe_exec){.run_layer = s_run_layer,
                         .stats_json = s_stats_json,
                         .stats_text = s_stats_text,
                         .destroy = s_destroy,
                         .pair_device = s_pair_device,
                         .computes_here = s_computes_here};
    s->net.lifeline[0] = s->net.lifeline[1] = -1;
    s->verbose = cfg->verbose;
    s_settings(s, cfg);
    sched_workers ws;
    int rc = sched_workers_of(&s->set, cfg->devices, devs, SCHED_MAX_WORKERS, &ws, s->verbose), n = ws.n;
    if (rc == 0 && n == 0) { /* "inproc", or auto found no accelerator (docs/scheduler.md) */
        uint64_t ram = 0;    /* "inproc@ram=SIZE", or a file larger than memory: the disk tier */
        rc = moe_exec_ram_budget(cfg->devices, cfg->gguf, &s->set, &ram);
        s_destroy(&s->base); /* (the two-host hook: a host's experts could fall back to it too) */
        return rc ? rc : ram ? moe_exec_disk_new(cfg, ram, out) : moe_exec_inproc_new(cfg, out);
    }
    if (rc == 0 && !ws.worker_bin[0]) rc = sup_find_worker_bin(&s->set, ws.worker_bin, sizeof ws.worker_bin); /* why */
    if (rc) goto fail;
    snprintf(s->net.worker_bin, sizeof s->net.worker_bin, "%s", ws.worker_bin);
    if ((rc = s_model_facts(s, cfg)) || (rc = s_data_path(s)) || (rc = remote_preflight(&s->set, devs, n))) goto fail;
    cache_budgets(s, devs, n);
    if ((rc = s_transport(s)) || (rc = s_make_workers(s, devs, n))) goto fail;
    s_wait_while(s, LINK_STARTING);
    if ((rc = s_place(s))) goto fail;
    s->cfg.heat = NULL; /* the caller's: read only while placing */
    s->cfg.pins = NULL;
    *out = &s->base;
    return 0;
fail:
    s_destroy(&s->base);
    return rc;
}
