/*
 * scheduler.c - the worker executor (moe_exec_workers_new): per MoE layer,
 * send every worker its (token, expert) rows before reading any reply,
 * compute in-process whatever nobody else can take, gather with a
 * deadline, and send what failed to a CPU worker or compute it here.
 *
 * Outputs land in y[t][s] by pair index; the forward pass combines them in
 * slot order, and the cpu kernels' rows do not depend on the batch they are
 * in (core/matmul.h), so the answer is bit-identical whichever path
 * computed which pair. Placement decides speed, never the answer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/forward.h"
#include "coordinator/sched_internal.h"
#include "coordinator/xdna_lane.h"
#include "error.h"
#include "expert_ffn.h"

enum { PAIR_DONE = -2, PAIR_PENDING = -3, PAIR_INPROC = -1 };

uint64_t sched_env_ms(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    return *end ? dflt : (uint64_t)x;
}

// ---------------------------------------------------------------------------
void sched_rows_done(sched *s, worker_link *w, const void *out)
{
    const size_t E = (size_t)s->n_embd;
    for (int64_t r = 0; r < w->n_rows; r++) {
        int64_t p = w->row_pair[r];
        memcpy(s->cur_y + (size_t)p * E, (const char *)out + (size_t)r * E * sizeof(float),
               E * sizeof(float));
        s->pair_target[p] = PAIR_DONE;
        s->pending--;
    }
}

void sched_rows_lost(sched *s, worker_link *w)
{
    for (int64_t r = 0; r < w->n_rows; r++)
        if (s->pair_target[w->row_pair[r]] == w->id)
            s->pair_target[w->row_pair[r]] = PAIR_PENDING;
    w->req_id = 0;
    s->excluded[w->id] = 1;
}

// ---------------------------------------------------------------------------
//  An up CPU worker that has not failed in this layer and did not refuse the
//  expert at Place (refused_mask), the least loaded.
static int s_fallback_worker(sched *s, const int64_t *load, uint64_t refused_mask)
{
    int best = -1;
    for (int i = 0; i < s->n_w; i++)
        if (s->w[i].is_cpu && s->w[i].state == LINK_UP && !s->excluded[i] &&
            !(refused_mask >> i & 1) && (best < 0 || load[i] < load[best]))
            best = i;
    return best;
}

static int s_reserve_rows(sched *s, worker_link *w, size_t rows)
{
    if (rows <= w->cap_rows) return 0;
    size_t cap = w->cap_rows ? w->cap_rows : 16;
    while (cap < rows) cap *= 2;
    int64_t *rp = realloc(w->row_pair, cap * sizeof *rp);
    if (rp) w->row_pair = rp;
    float *x = realloc(w->x, cap * (size_t)s->n_embd * sizeof(float));
    if (x) w->x = x;
    if (!rp || !x)
        return coli_fail(COLI_ENOMEM, "worker %d: buffers for %zu rows", w->id, rows);
    w->cap_rows = cap;
    return 0;
}

static const int32_t *s_sort_ids;
static int s_cmp_pair(const void *a, const void *b)
{
    int64_t p = *(const int64_t *)a, q = *(const int64_t *)b;
    int32_t e = s_sort_ids[p], f = s_sort_ids[q];
    if (e != f) return e < f ? -1 : 1;
    return (p > q) - (p < q);
}

//  Give each pending pair a target; collect each worker's rows sorted by expert.
static int s_assign(sched *s, int layer, int64_t n_pairs, unsigned char *allow_load)
{
    int64_t load[SCHED_MAX_WORKERS] = {0};
    for (int i = 0; i < s->n_w; i++) s->w[i].n_rows = 0;
    for (int64_t p = 0; p < n_pairs; p++) {
        if (s->pair_target[p] != PAIR_PENDING) continue;
        size_t slot = (size_t)layer * (size_t)s->n_expert + (size_t)s->cur_ids[p];
        int o = s->owner[slot];
        int t = o;
        if (o < 0 || s->w[o].state != LINK_UP || s->excluded[o]) {
            t = s_fallback_worker(s, load, s->refused_by[slot]);
            if (t >= 0) allow_load[t] = 1;
            if (o >= 0) s->w[o].rerouted_rows++;
        }
        s->pair_target[p] = t;
        if (t < 0) continue;
        worker_link *w = &s->w[t];
        int rc = s_reserve_rows(s, w, (size_t)w->n_rows + 1);
        if (rc) return rc;
        w->row_pair[w->n_rows++] = p;
        load[t]++;
    }
    s_sort_ids = s->cur_ids;
    for (int i = 0; i < s->n_w; i++)
        if (s->w[i].n_rows > 1)
            qsort(s->w[i].row_pair, (size_t)s->w[i].n_rows, sizeof(int64_t), s_cmp_pair);
    return 0;
}

//  Gather the rows and send; a worker we cannot reach loses its rows.
static void s_send_all(sched *s, int layer, const float *x, int k, const unsigned char *allow_load)
{
    const size_t E = (size_t)s->n_embd;
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        if (!w->n_rows) continue;
        int finite = 1;
        for (int64_t r = 0; r < w->n_rows; r++) {
            const float *src = x + (size_t)(w->row_pair[r] / k) * E;
            memcpy(w->x + (size_t)r * E, src, E * sizeof(float));
        }
        for (size_t j = 0; finite && j < (size_t)w->n_rows * E; j++)
            finite = isfinite(w->x[j]);
        w->x_finite = finite;
        if (link_send_batch(s, w, layer, allow_load[i]) == 0)
            continue;
        int unreachable = errno == EHOSTUNREACH;
        w->req_id = 1; /* so that the rows are handed back */
        if (unreachable) {
            sup_worker_lost(s, w, "crash", 1);
        } else {
            stats_fallback(s, w, "error");
            sched_rows_lost(s, w);
        }
        s->excluded[i] = 1;
    }
}

//  Pairs nobody else can take: the cpu plugin, here.
static int s_run_inproc(sched *s, int layer, const float *x, int64_t n_pairs, int k)
{
    const size_t E = (size_t)s->n_embd;
    int64_t m = 0;
    for (int64_t p = 0; p < n_pairs; p++) m += s->pair_target[p] == PAIR_INPROC;
    if (!m) return 0;
    if (!s->inproc) {
        int rc = moe_exec_inproc_new(&s->cfg, &s->inproc);
        if (rc) return coli_fail_prefix(rc, "in-process fallback");
    }
    float *xin = malloc((size_t)m * E * sizeof(float)), *yout = malloc((size_t)m * E * sizeof(float));
    int32_t *ids = malloc((size_t)m * sizeof *ids);
    int64_t *pp = malloc((size_t)m * sizeof *pp);
    int rc = (!xin || !yout || !ids || !pp) ? coli_fail(COLI_ENOMEM, "in-process fallback: %lld rows", (long long)m) : 0;
    for (int64_t p = 0, j = 0; rc == 0 && p < n_pairs; p++)
        if (s->pair_target[p] == PAIR_INPROC) {
            memcpy(xin + (size_t)j * E, x + (size_t)(p / k) * E, E * sizeof(float));
            ids[j] = s->cur_ids[p];
            pp[j++] = p;
        }
    if (rc == 0)
        rc = s->inproc->run_layer(s->inproc, layer, xin, m, 1, ids, yout);
    for (int64_t j = 0; rc == 0 && j < m; j++) {
        memcpy(s->cur_y + (size_t)pp[j] * E, yout + (size_t)j * E, E * sizeof(float));
        s->pair_target[pp[j]] = PAIR_DONE;
        s->pending--;
    }
    if (rc == 0) s->inproc_rows += (uint64_t)m;
    free(xin); free(yout); free(ids); free(pp);
    return rc;
}

//  Wait for every request in flight, at most until the deadline.
static void s_gather(sched *s)
{
    int64_t max_rows = 0;
    for (int i = 0; i < s->n_w; i++)
        if (s->w[i].req_id && s->w[i].n_rows > max_rows) max_rows = s->w[i].n_rows;
    uint64_t deadline = wire_now_ns() + s->deadline_ns + s->per_row_ns * (uint64_t)max_rows;
    link_spin_rings(s); /* ring replies come within microseconds: do not sleep for them */
    for (;;) {
        int waiting = 0;
        for (int i = 0; i < s->n_w; i++) waiting += s->w[i].req_id != 0;
        if (!waiting) return;
        uint64_t now = wire_now_ns();
        if (now >= deadline) break;
        link_poll(s, (int)((deadline - now) / 1000000ULL) + 1);
    }
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        if (!w->req_id) continue;
        if (s->verbose)
            fprintf(stderr, "colibri: worker %d (%s) missed the layer deadline\n", w->id, w->device);
        stats_fallback(s, w, "timeout");
        w->hung_req_id = w->req_id;
        sched_rows_lost(s, w);
        link_set_state(w, LINK_HUNG, "missed the layer deadline");
    }
}

static int s_reserve_pairs(sched *s, int64_t n_pairs)
{
    if ((size_t)n_pairs <= s->cap_pairs) return 0;
    int64_t *t = realloc(s->pair_target, (size_t)n_pairs * sizeof *t);
    if (!t) return coli_fail(COLI_ENOMEM, "scheduler: %lld pairs", (long long)n_pairs);
    s->pair_target = t;
    s->cap_pairs = (size_t)n_pairs;
    return 0;
}

static int s_run_layer(moe_exec *self, int layer, const float *x, int64_t n_tok, int k,
                       const int32_t *ids, float *y)
{
    sched *s = (sched *)self;
    if (layer < 0 || layer >= s->n_layer)
        return coli_fail(COLI_EINVAL, "scheduler: layer %d out of range [0, %d)", layer, s->n_layer);
    if (n_tok <= 0 || k <= 0) return 0;
    const int64_t n_pairs = n_tok * k;
    for (int64_t p = 0; p < n_pairs; p++)
        if (ids[p] < 0 || ids[p] >= s->n_expert)
            return coli_fail(COLI_ERANGE, "scheduler: layer %d: expert id %d out of range [0, %d)",
                             layer, ids[p], s->n_expert);
    int rc = s_reserve_pairs(s, n_pairs);
    if (rc) return rc;
    link_poll(s, 0);
    s->cur_y = y; s->cur_ids = ids; s->cur_layer = layer;
    s->pending = n_pairs;
    for (int64_t p = 0; p < n_pairs; p++) s->pair_target[p] = PAIR_PENDING;
    memset(s->excluded, 0, (size_t)s->n_w);
    uint64_t t0 = wire_now_ns();
    int used_workers = 0;
    while (rc == 0 && s->pending > 0) {
        unsigned char allow_load[SCHED_MAX_WORKERS] = {0};
        rc = s_assign(s, layer, n_pairs, allow_load);
        if (rc) break;
        for (int i = 0; i < s->n_w; i++) used_workers |= s->w[i].n_rows > 0;
        s_send_all(s, layer, x, k, allow_load);
        rc = s_run_inproc(s, layer, x, n_pairs, k); /* overlaps with the workers */
        s_gather(s);
    }
    for (int i = 0; i < s->n_w; i++) s->w[i].req_id = 0;
    if (rc == 0 && used_workers)
        stats_latency(&s->dispatch, (double)(wire_now_ns() - t0) / 1e9);
    return rc;
}

// ---------------------------------------------------------------------------
// lifecycle

static void s_destroy(moe_exec *self)
{
    sched *s = (sched *)self;
    if (!s) return;
    if (s->router) sup_shutdown_all(s);
    for (int i = 0; i < 2; i++) /* EOF on the lifeline: any worker still there exits */
        if (s->lifeline[i] >= 0) close(s->lifeline[i]);
    if (s->router) zmq_close(s->router);
    if (s->zctx) zmq_ctx_term(s->zctx);
    if (s->dir[0]) {
        char sock[PATH_MAX + 16];
        snprintf(sock, sizeof sock, "%s/coord", s->dir);
        unlink(sock);
        rmdir(s->dir);
    }
    if (s->inproc) s->inproc->destroy(s->inproc);
    for (int i = 0; i < s->n_w; i++) {
        free(s->w[i].row_pair);
        free(s->w[i].x);
        ring_close(&s->w[i].ring);
    }
    free(s->w); free(s->owner); free(s->refused_by); free(s->expert_bytes); free(s->model_path);
    free(s->pair_target); free(s->excluded);
    free(s);
}

static void s_settings(sched *s)
{
    s->deadline_ns = sched_env_ms("COLI_LAYER_DEADLINE_MS", 2000) * 1000000ULL;
    s->per_row_ns = sched_env_ms("COLI_DEADLINE_PER_ROW_US", 1000) * 1000ULL;
    s->start_ns = sched_env_ms("COLI_WORKER_START_MS", 30000) * 1000000ULL;
    s->hang_kill_ns = sched_env_ms("COLI_HANG_KILL_MS", 10000) * 1000000ULL;
    s->backoff_ns = sched_env_ms("COLI_RESTART_BACKOFF_MS", 100) * 1000000ULL;
    s->backoff_max_ns = 5000000000ULL;
    s->fail_window_ns = sched_env_ms("COLI_WORKER_FAIL_WINDOW_MS", 60000) * 1000000ULL;
    s->max_failures = (int)sched_env_ms("COLI_WORKER_MAX_FAILURES", 3);
    s->spin_ns = ring_spin_ns();
    s->hb_ns = sched_env_ms("COLI_HEARTBEAT_MS", 200) * 1000000ULL;
    if (s->hb_ns < 10000000ULL) s->hb_ns = 10000000ULL; /* the worker's floor */
    s->hb_miss = sched_env_ms("COLI_HEARTBEAT_MISS", 10);
}

//  COLI_DATA_PATH=shm (default) | zmq: how batches reach local workers.
static int s_data_path(sched *s)
{
    const char *v = getenv("COLI_DATA_PATH");
    if (v && *v && strcmp(v, "shm") && strcmp(v, "zmq"))
        return coli_fail(COLI_EINVAL, "COLI_DATA_PATH '%s': want shm or zmq", v);
    s->use_rings = ring_wanted();
    /* the largest batch the forward pass sends: every (token, slot) pair of a chunk */
    s->ring_rows = (int64_t)FORWARD_MAX_BATCH * (s->cfg.n_expert_used > 0 ? s->cfg.n_expert_used : 1);
    return 0;
}

//  Size of one expert per layer, the file's identity, buffers.
static int s_model_facts(sched *s, const moe_exec_config *cfg)
{
    s->n_layer = cfg->n_layer;
    s->n_expert = cfg->n_expert;
    s->n_embd = cfg->n_embd;
    s->expert_bytes = calloc((size_t)cfg->n_layer, sizeof *s->expert_bytes);
    s->owner = malloc((size_t)cfg->n_layer * (size_t)cfg->n_expert * sizeof *s->owner);
    s->refused_by = calloc((size_t)cfg->n_layer * (size_t)cfg->n_expert, sizeof *s->refused_by);
    s->model_path = strdup(cfg->model_path);
    if (!s->expert_bytes || !s->owner || !s->refused_by || !s->model_path)
        return coli_fail(COLI_ENOMEM, "scheduler: out of memory");
    for (int l = 0; l < cfg->n_layer; l++) {
        expert_weights ew;
        int rc = expert_weights_from_gguf(cfg->gguf, l, 0, &ew);
        if (rc) return rc;
        s->expert_bytes[l] = expert_weights_bytes(&ew);
    }
    wire_model_identity(cfg->gguf, &s->model_size, &s->model_hash);
    s->cfg = *cfg;
    s->cfg.model_path = s->model_path;
    s->cfg.devices = NULL;
    return 0;
}

//  ROUTER bound to ipc://<private dir>/coord; the workers' lifeline pipe
//  (both ends close-on-exec: sup_spawn lets each worker keep the read end).
static int s_transport(sched *s)
{
    if (pipe2(s->lifeline, O_CLOEXEC) != 0) {
        s->lifeline[0] = s->lifeline[1] = -1;
        return coli_fail(COLI_EIO, "scheduler: lifeline pipe: %s", strerror(errno));
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(s->dir, sizeof s->dir, "%s/coli-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(s->dir)) {
        int e = errno;
        s->dir[0] = 0;
        return coli_fail(COLI_EIO, "scheduler: private directory in %s: %s", tmp ? tmp : "/tmp", strerror(e));
    }
    snprintf(s->endpoint, sizeof s->endpoint, "ipc://%s/coord", s->dir);
    s->zctx = zmq_ctx_new();
    s->router = s->zctx ? zmq_socket(s->zctx, ZMQ_ROUTER) : NULL;
    if (!s->router)
        return coli_fail(COLI_EIO, "scheduler: zmq socket: %s", zmq_strerror(errno));
    int rc = wire_socket_setup(s->router, 1);
    if (rc) return rc;
    if (zmq_bind(s->router, s->endpoint) != 0)
        return coli_fail(COLI_EIO, "scheduler: bind %s: %s", s->endpoint, zmq_strerror(errno));
    return 0;
}

static int s_make_workers(sched *s, const device_spec *devs, int n)
{
    s->w = calloc((size_t)n, sizeof *s->w);
    s->excluded = calloc((size_t)n, 1);
    if (!s->w || !s->excluded) return coli_fail(COLI_ENOMEM, "scheduler: out of memory");
    s->n_w = n;
    int n_cpu = 0;
    for (int i = 0; i < n; i++) n_cpu += !strcmp(devs[i].plugin, "cpu");
    long cores = s->cfg.n_threads > 0 ? s->cfg.n_threads : sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 0; i < n; i++) {
        worker_link *w = &s->w[i];
        w->id = i;
        w->dev = devs[i];
        w->pidfd = -1;
        w->is_cpu = !strcmp(devs[i].plugin, "cpu");
        snprintf(w->device, sizeof w->device, "%.15s:%d", devs[i].plugin, devs[i].index);
        w->n_threads = w->is_cpu ? (int)(cores / (n_cpu ? n_cpu : 1)) : 1;
        if (w->n_threads < 1) w->n_threads = 1;
        int rc = sup_spawn(s, w);
        if (rc) return rc;
    }
    return 0;
}

//  Poll until no worker is in state st (or, for STARTING, without a hello).
static void s_wait_while(sched *s, link_state st)
{
    for (;;) {
        int waiting = 0;
        for (int i = 0; i < s->n_w; i++)
            waiting += s->w[i].state == st && !(st == LINK_STARTING && s->w[i].hello_ok);
        if (!waiting) return;
        link_poll(s, 50); /* start_timeout in sup_tick ends every wait */
    }
}

//  Bytes of experts worker w may be given: its --devices budget, else for a
//  device plugin the budget its hello reported (free memory less a reserve);
//  cpu workers map the file, so without a budget they take any share.
//  COLI_PLACE_IGNORE_BUDGET=1 (tests) sends experts regardless, so that the
//  plugin's own refusal at load time is exercised.
static uint64_t s_place_budget(const worker_link *w)
{
    const char *ign = getenv("COLI_PLACE_IGNORE_BUDGET");
    if (ign && !strcmp(ign, "1")) return 0;
    if (w->dev.budget) return w->dev.budget;
    return w->is_cpu ? 0 : w->caps_budget;
}

static int s_place(sched *s)
{
    uint64_t budget[SCHED_MAX_WORKERS];
    int usable[SCHED_MAX_WORKERS];
    for (int i = 0; i < s->n_w; i++) {
        budget[i] = s_place_budget(&s->w[i]);
        usable[i] = s->w[i].state == LINK_STARTING && s->w[i].hello_ok;
    }
    placement_in in = {s->n_layer, s->n_expert, s->expert_bytes, s->n_w, budget, usable};
    int rc = placement_plan(&in, s->owner);
    if (rc) return rc;
    s->started = 1;
    for (int i = 0; i < s->n_w; i++)
        if (usable[i] && link_send_place(s, &s->w[i]) != 0)
            sup_worker_lost(s, &s->w[i], "crash", 1);
    s_wait_while(s, LINK_PLACING);
    return 0;
}

int moe_exec_workers_new(const moe_exec_config *cfg, moe_exec **out)
{
    *out = NULL;
    if (!cfg || !cfg->gguf || !cfg->model_path || cfg->n_layer <= 0 || cfg->n_expert <= 0 || cfg->n_embd <= 0)
        return coli_fail(COLI_EINVAL, "scheduler: config needs a model file, layers, experts and n_embd");
    device_spec devs[SCHED_MAX_WORKERS];
    int n = 0, inproc = 0;
    int rc = sched_parse_devices(cfg->devices, devs, SCHED_MAX_WORKERS, &n, &inproc);
    if (rc) return rc;
    if (inproc) return moe_exec_inproc_new(cfg, out);
    sched *s = calloc(1, sizeof *s);
    if (!s) return coli_fail(COLI_ENOMEM, "scheduler: out of memory");
    s->base = (moe_exec){s_run_layer, stats_json, stats_text, s_destroy};
    s->lifeline[0] = s->lifeline[1] = -1;
    s->verbose = cfg->verbose;
    s_settings(s);
    if ((rc = s_model_facts(s, cfg)) || (rc = s_data_path(s)) || (rc = sup_find_worker_bin(s)) ||
        (rc = sched_expand_auto(s->worker_bin, devs, SCHED_MAX_WORKERS, &n, s->verbose)) ||
        (rc = sched_xdna_optin(devs, SCHED_MAX_WORKERS, &n)) ||
        (rc = remote_preflight(devs, n)) ||
        (rc = s_transport(s)) ||
        (rc = s_make_workers(s, devs, n)))
        goto fail;
    s_wait_while(s, LINK_STARTING);
    if ((rc = s_place(s))) goto fail;
    *out = &s->base;
    return 0;
fail:
    s_destroy(&s->base);
    return rc;
}
