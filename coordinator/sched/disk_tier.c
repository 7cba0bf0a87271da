/*
 * disk_tier.c - the in-process expert executor with a RAM budget
 * (`--devices inproc@ram=SIZE`, docs/scheduler.md "Tiers"): experts live on
 * disk and in a RAM expert cache of SIZE bytes; the coordinator's mapping of
 * the file is never read for an expert, so a model larger than memory runs
 * without the page cache thrashing (a memory cgroup counts that cache).
 *
 * The cache's policy is the live cache's (expert_cache.c: LFU with decay,
 * hysteresis, the heat seed): a routed pair of a resident expert is a hit;
 * a miss reads the expert from disk - one read per expert per layer call
 * however many rows want it: its gate, up and down slices, one pread each,
 * O_DIRECT where the file system allows (disk_read.c) - and the policy
 * decides whether it stays (into free room, or in place of a colder one).
 * What does not stay is freed after the layer. While a layer computes, the
 * next layer's likely experts (expert_predict.c) are read by the reader
 * threads. Experts are computed by expert_ffn_many, as the cpu plugin does,
 * so the answer is byte-identical to the mapped in-process executor.
 *
 * Memory: the budget, plus during one layer call the experts it reads that
 * do not stay and the victims it evicted (freed after the call).
 */
#include <pthread.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/moe_exec.h"
#include "coordinator/sched/disk_read.h"
#include "coordinator/sched/expert_cache.h"
#include "coordinator/sched/expert_predict.h"
#include "coordinator/sched/sched_internal.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "core/kernels/expert_ffn.h"
#include "core/settings.h"
#include "core/strbuf.h"
#include "core/threadpool.h"

#define DT_READERS 4 /* reader threads: a few reads in flight keep a disk busy */
/* at most this many guesses read at once: a read the compute then needs
 * finds a reader free and shares the disk with few guesses */
#define DT_GUESS_READERS 2
#define DT_SPARE_MAX 16 /* at most this many spare buffers kept (dt->n_spare_cap: k of them) */

/* A FIFO of slots to read (capacity: every slot). */
typedef struct dt_ring {
    int64_t *slot;
    size_t head, len;
} dt_ring;

enum {
    IO_NONE = 0,   /* no buffer */
    IO_QUEUED = 1, /* buffer allocated, read queued or running */
    IO_READY = 2,  /* bytes in the buffer */
    IO_FAILED = 3  /* the read failed: buffer allocated, bytes not valid */
};

typedef struct dt_layer {
    expert_weights tmpl; /* expert 0's shape and types (pointers unused) */
    uint64_t off[3];     /* file offset of expert 0's gate, up, down */
    size_t len[3];       /* bytes of one expert's gate, up, down */
} dt_layer;

/* One phase's layer calls (prompt: several tokens; decode: one), timed on
 * the compute thread: blocked on reads, in the experts' compute, in all
 * (the rest: grouping, the policy). Needed reads: the reads whose expert a
 * row of the call routed to (a miss, or a prefetch that guessed right);
 * every other read (a guess no row took) is waste. */
typedef struct dt_phase {
    uint64_t calls, needed_reads, needed_bytes, wait_ns, compute_ns, call_ns;
} dt_phase;

typedef struct disk_tier {
    moe_exec base; /* first: a moe_exec* is a disk_tier* */
    int n_layer, n_expert;
    int64_t n_embd;
    dt_layer *layers;
    expert_cache *ec;
    expert_predictor pred;
    disk_file file;
    coli_pool *pool, *own_pool;
    coli_scratch scratch;
    /* per slot (layer * n_expert + expert) */
    void **buf;
    const void *(*part)[3];
    unsigned char *io; /* IO_* under mu */
    int64_t *victims;  /* evicted this call, freed after it */
    int n_victims;
    int64_t spec[2][64]; /* speculative reads: [cur] started this call, [!cur] the previous call's */
    int n_spec[2], cur;
    /* buffers of reads no longer wanted, kept for the next reads of the same
     * size: freeing one (munmap) and faulting in a new one cost the compute
     * thread ~1 ms each, several times per layer call */
    void *spare[DT_SPARE_MAX];
    size_t spare_len[DT_SPARE_MAX];
    int n_spare, n_spare_cap;
    int64_t late[64]; /* speculative reads still in flight when their call ended: freed later */
    int n_late;
    /* reader threads */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    /* reads to make: [0] what this call's rows need (and the initial set),
     * [1] guesses for the next layer, read only while no read of [0] is
     * queued or running, so that a guess never takes the disk from a read the
     * compute waits for; a guess no row took is dropped while still queued */
    dt_ring q[2];
    int busy_now, busy_ahead;     /* reads of q[0], of q[1] running */
    uint64_t busy_since, busy_ns; /* time with a read running (the disk busy for the tier) */
    int stop, n_readers;
    int prefetch; /* COLI_DISK_PREFETCH */
    pthread_t readers[DT_READERS];
    int read_rc; /* first read error, reported by the next layer call */
    /* a layer call's grouping */
    size_t cap_rows;
    float *xg, *yg;
    int64_t *order, *start;
    uint64_t *rows_by_expert;
    uint64_t layer_calls, rows, transient_reads, speculative_reads, cancelled_reads;
    unsigned char *fresh; /* (slots) read since a row last routed to it */
    dt_phase ph[2];       /* [0] prompt calls, [1] decode calls */
    int decode;           /* the current call's phase */
} disk_tier;

static size_t s_slots(const disk_tier *dt) { return (size_t)dt->n_layer * (size_t)dt->n_expert; }

// ---------------------------------------------------------------------------
// reads

/* A slot's IO_* state: the reader threads change it, so loads are atomic
 * (the bytes it announces are read only after s_wait, under the lock). */
static int s_io(const disk_tier *dt, size_t slot) { return __atomic_load_n(&dt->io[slot], __ATOMIC_ACQUIRE); }

/* The three ranges of slot's expert in the file. */
static void s_ranges(const disk_tier *dt, size_t slot, disk_range r[3]) {
    const dt_layer *L = &dt->layers[slot / (size_t)dt->n_expert];
    const uint64_t e = slot % (size_t)dt->n_expert;
    for (int p = 0; p < 3; p++) r[p] = (disk_range){L->off[p] + e * L->len[p], L->len[p]};
}

static void s_push(dt_ring *q, size_t cap, size_t slot) { q->slot[(q->head + q->len++) % cap] = (int64_t)slot; }

static size_t s_pop(dt_ring *q, size_t cap) {
    size_t slot = (size_t)q->slot[q->head];
    q->head = (q->head + 1) % cap;
    q->len--;
    return slot;
}

static void *s_reader(void *arg) {
    disk_tier *dt = arg;
    pthread_mutex_lock(&dt->mu);
    for (;;) {
        while (!dt->stop && !dt->q[0].len && !(dt->q[1].len && !dt->busy_now && dt->busy_ahead < DT_GUESS_READERS))
            pthread_cond_wait(&dt->cv_work, &dt->mu);
        if (dt->stop) break;
        const int now = dt->q[0].len > 0;
        size_t slot = s_pop(&dt->q[now ? 0 : 1], s_slots(dt));
        if (!dt->busy_now && !dt->busy_ahead) dt->busy_since = coli_now_ns();
        dt->busy_now += now;
        dt->busy_ahead += !now;
        pthread_mutex_unlock(&dt->mu);
        disk_range r[3];
        s_ranges(dt, slot, r);
        int rc = disk_read_ranges(&dt->file, r, 3, dt->buf[slot], dt->part[slot]);
        pthread_mutex_lock(&dt->mu);
        __atomic_store_n(&dt->io[slot], rc ? IO_FAILED : IO_READY, __ATOMIC_RELEASE);
        if (rc && !dt->read_rc) dt->read_rc = rc;
        dt->busy_now -= now;
        dt->busy_ahead -= !now;
        if (!dt->busy_now && !dt->busy_ahead) dt->busy_ns += coli_now_ns() - dt->busy_since;
        if (!dt->busy_now && dt->q[1].len) pthread_cond_broadcast(&dt->cv_work); /* the guesses' turn */
        pthread_cond_broadcast(&dt->cv_done);
    }
    pthread_mutex_unlock(&dt->mu);
    return NULL;
}

static size_t s_buf_len(const disk_tier *dt, size_t slot) {
    disk_range r[3];
    s_ranges(dt, slot, r);
    return disk_buffer_bytes(&dt->file, r, 3);
}

/* A buffer for slot's read: a spare of its size, else a new one. */
static void *s_buf_get(disk_tier *dt, size_t slot) {
    const size_t len = s_buf_len(dt, slot);
    for (int i = 0; i < dt->n_spare; i++)
        if (dt->spare_len[i] == len) {
            void *p = dt->spare[i];
            dt->spare[i] = dt->spare[--dt->n_spare], dt->spare_len[i] = dt->spare_len[dt->n_spare];
            return p;
        }
    return disk_alloc(&dt->file, len);
}

/* Slot's buffer is no longer wanted: kept as a spare while there is room. */
static void s_buf_put(disk_tier *dt, size_t slot) {
    void *p = dt->buf[slot];
    dt->buf[slot] = NULL;
    if (p && dt->n_spare < dt->n_spare_cap) {
        dt->spare_len[dt->n_spare] = s_buf_len(dt, slot);
        dt->spare[dt->n_spare++] = p;
        return;
    }
    free(p);
}

/* Give slot a buffer and queue its read (nothing when it has one); ahead:
 * a guess for the next layer (q[1]). */
static int s_queue(disk_tier *dt, size_t slot, int ahead) {
    if (s_io(dt, slot) != IO_NONE) return 0; /* only this thread sets IO_NONE: no lock needed to see it */
    dt->buf[slot] = s_buf_get(dt, slot);
    if (!dt->buf[slot])
        return coli_fail(COLI_ENOMEM, "disk tier: no memory for layer %zu expert %zu", slot / (size_t)dt->n_expert,
                         slot % (size_t)dt->n_expert);
    pthread_mutex_lock(&dt->mu);
    __atomic_store_n(&dt->io[slot], IO_QUEUED, __ATOMIC_RELEASE);
    dt->fresh[slot] = 1;
    s_push(&dt->q[ahead != 0], s_slots(dt), slot);
    pthread_cond_signal(&dt->cv_work);
    pthread_mutex_unlock(&dt->mu);
    return 0;
}

/* Wait until slot's read is over; a LOADING slot becomes RESIDENT. 0 or the read's error. */
static int s_wait(disk_tier *dt, size_t slot) {
    pthread_mutex_lock(&dt->mu);
    if (s_io(dt, slot) == IO_QUEUED) {
        const uint64_t t0 = coli_now_ns();
        while (s_io(dt, slot) == IO_QUEUED) pthread_cond_wait(&dt->cv_done, &dt->mu);
        dt->ph[dt->decode].wait_ns += coli_now_ns() - t0;
    }
    int io = s_io(dt, slot), rc = dt->read_rc;
    pthread_mutex_unlock(&dt->mu);
    if (io == IO_FAILED) return rc ? rc : coli_fail(COLI_EIO, "disk tier: a read failed");
    if (io == IO_READY && dt->ec->state[slot] == EC_LOADING) ec_loaded(dt->ec, slot, 1);
    return 0;
}

/* Free slot's buffer unless the cache holds it or a read is in flight. */
static void s_release(disk_tier *dt, size_t slot) {
    if (dt->ec->state[slot] != EC_NONE || s_io(dt, slot) == IO_NONE) return;
    pthread_mutex_lock(&dt->mu);
    int busy = s_io(dt, slot) == IO_QUEUED;
    pthread_mutex_unlock(&dt->mu);
    if (busy) return;
    s_buf_put(dt, slot);
    __atomic_store_n(&dt->io[slot], IO_NONE, __ATOMIC_RELEASE);
}

// ---------------------------------------------------------------------------
// the cache's decisions

/* Carry out ec_decide's actions: victims are freed after the call (this
 * layer may still compute with one), the chosen slots are read. */
static int s_apply(disk_tier *dt, const ec_action *act, int n, int ahead) {
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (act[i].victim >= 0) dt->victims[dt->n_victims++] = act[i].victim;
        rc = s_queue(dt, (size_t)act[i].slot, ahead);
    }
    return rc;
}

/* Candidates hottest first (insertion sort: a layer misses few distinct experts). */
static void s_sort_by_score(const expert_cache *ec, int64_t *c, int n) {
    for (int i = 1; i < n; i++) {
        int64_t v = c[i];
        int j = i;
        for (; j > 0 && ec->score[c[j - 1]] < ec->score[v]; j--) c[j] = c[j - 1];
        c[j] = v;
    }
}

/* The guessed reads of this layer's experts still waiting in q[1]: those a
 * row routed to are needed now (to q[0]); the others (the prefetch guessed
 * wrong) are dropped before they take the disk, a cache admission of one
 * undone. */
static void s_sort_guesses(disk_tier *dt, int layer) {
    const size_t n = s_slots(dt), first = (size_t)layer * (size_t)dt->n_expert;
    dt_ring *q = &dt->q[1];
    size_t kept = 0;
    pthread_mutex_lock(&dt->mu);
    for (size_t i = 0; i < q->len; i++) {
        const size_t slot = (size_t)q->slot[(q->head + i) % n];
        const int e = (int)(slot - first);
        const int here = slot >= first && slot < first + (size_t)dt->n_expert;
        if (here && dt->start[e + 1] > dt->start[e]) {
            s_push(&dt->q[0], n, slot);
            continue;
        }
        if (here) {
            __atomic_store_n(&dt->io[slot], IO_NONE, __ATOMIC_RELEASE);
            s_buf_put(dt, slot);
            ec_unload(dt->ec, slot);
            dt->fresh[slot] = 0;
            dt->cancelled_reads++;
            continue;
        }
        q->slot[(q->head + kept++) % n] = (int64_t)slot;
    }
    q->len = kept;
    if (dt->q[0].len) pthread_cond_broadcast(&dt->cv_work);
    pthread_mutex_unlock(&dt->mu);
}

/* Touch every routed pair of the layer's experts (hits and misses as the
 * live cache counts them), let the policy admit the misses, and queue one
 * read for each expert the layer needs that is not in RAM. A prefetch the
 * cache admitted is a hit even while its read is in flight: s_compute
 * waits for its bytes, computing the others meanwhile. */
/* A row of this call routed to slot: a read of it not yet used was needed. */
static void s_use(disk_tier *dt, size_t slot) {
    if (!dt->fresh[slot]) return;
    dt->fresh[slot] = 0;
    dt->ph[dt->decode].needed_reads++;
    dt->ph[dt->decode].needed_bytes += dt->ec->expert_bytes[slot / (size_t)dt->n_expert];
}

static int s_admit(disk_tier *dt, int layer, int64_t *miss) {
    int n_miss = 0, rc = 0;
    s_sort_guesses(dt, layer);
    for (size_t k = 0; k < s_slots(dt); k++) /* prefetches that finished: resident (evictable) from now */
        if (dt->ec->state[k] == EC_LOADING && s_io(dt, k) == IO_READY) ec_loaded(dt->ec, k, 1);
    for (int e = 0; e < dt->n_expert && !rc; e++) {
        int64_t n = dt->start[e + 1] - dt->start[e];
        size_t slot = (size_t)layer * (size_t)dt->n_expert + (size_t)e;
        if (!n) continue;
        if (dt->ec->state[slot] == EC_LOADING && s_io(dt, slot) == IO_QUEUED) ec_loaded(dt->ec, slot, 1);
        s_use(dt, slot);
        int hit = 0;
        for (int64_t r = 0; r < n; r++) hit = ec_touch(dt->ec, slot);
        if (!hit) miss[n_miss++] = (int64_t)slot;
    }
    s_sort_by_score(dt->ec, miss, n_miss);
    ec_action act[1024];
    int n_act = rc ? 0 : ec_decide(dt->ec, miss, n_miss, 0, act, 1024);
    if (!rc) rc = s_apply(dt, act, n_act, 0);
    for (int i = 0; i < n_miss && !rc; i++) { /* not admitted: read for this call only */
        dt->transient_reads += s_io(dt, miss[i]) == IO_NONE;
        rc = s_queue(dt, (size_t)miss[i], 0);
    }
    for (int i = 0; i < n_miss; i++) s_use(dt, (size_t)miss[i]);
    return rc;
}

/* The next layer's likely experts, read while this layer computes. */
static int s_prefetch(disk_tier *dt, int layer, const float *x, int64_t n_tok) {
    const int next = layer + 1;
    if (!dt->prefetch || next >= dt->n_layer || !dt->ec->expert_bytes[next]) return 0;
    int64_t cand[1024];
    int n = expert_predict(&dt->pred, next, x, n_tok, cand), m = 0;

    for (int k = 0; k < n; k++)
        if (dt->ec->state[cand[k]] == EC_NONE && s_io(dt, cand[k]) == IO_NONE) cand[m++] = cand[k];
    ec_action act[1024];
    int n_act = m ? ec_decide(dt->ec, cand, m, 1, act, 1024) : 0;
    int rc = s_apply(dt, act, n_act, 1);
    /* The likeliest the cache did not admit are read all the same, for the
     * next call only (a decode's k of them: a prompt's would be most of the layer). */
    int *ns = &dt->n_spec[dt->cur];
    for (int i = 0; i < m && !rc && *ns < dt->pred.k && *ns < 64; i++)
        if (dt->ec->state[cand[i]] == EC_NONE && s_io(dt, (size_t)cand[i]) == IO_NONE) {
            rc = s_queue(dt, (size_t)cand[i], 1);
            dt->spec[dt->cur][(*ns)++] = cand[i];
            dt->speculative_reads++;
        }
    return rc;
}

// ---------------------------------------------------------------------------
// layer calls

static int s_reserve(disk_tier *dt, size_t rows) {
    if (rows <= dt->cap_rows) return 0;
    size_t cap = dt->cap_rows ? dt->cap_rows : 16;
    while (cap < rows) cap *= 2;
    float *xg = realloc(dt->xg, cap * (size_t)dt->n_embd * sizeof(float));
    if (xg) dt->xg = xg;
    float *yg = realloc(dt->yg, cap * (size_t)dt->n_embd * sizeof(float));
    if (yg) dt->yg = yg;
    int64_t *order = realloc(dt->order, cap * sizeof(int64_t));
    if (order) dt->order = order;
    if (!xg || !yg || !order) return coli_fail(COLI_ENOMEM, "disk tier: cannot grow buffers to %zu rows", cap);
    dt->cap_rows = cap;
    return 0;
}

/* Wait until one of the experts left[0..n) has its bytes (or a read failed). */
static void s_wait_any(disk_tier *dt, int layer, const int *left, int n) {
    const uint64_t t0 = coli_now_ns();
    pthread_mutex_lock(&dt->mu);
    for (;;) {
        for (int i = 0; i < n; i++)
            if (dt->io[(size_t)layer * (size_t)dt->n_expert + (size_t)left[i]] != IO_QUEUED) goto out;
        pthread_cond_wait(&dt->cv_done, &dt->mu);
    }
out:
    pthread_mutex_unlock(&dt->mu);
    dt->ph[dt->decode].wait_ns += coli_now_ns() - t0;
}

/* Run the layer's experts over the grouped rows, those whose bytes are in
 * RAM first (the others' reads go on meanwhile), EXPERT_FFN_MANY_MAX at a
 * time. Each expert's rows are computed alone: the order changes no byte. */
static int s_compute(disk_tier *dt, int layer) {
    expert_weights w[EXPERT_FFN_MANY_MAX];
    expert_ffn_task tasks[EXPERT_FFN_MANY_MAX];
    const size_t E = (size_t)dt->n_embd;
    int left[1024], n_left = 0, rc = 0;
    for (int e = 0; e < dt->n_expert; e++)
        if (dt->start[e + 1] > dt->start[e]) left[n_left++] = e;
    while (n_left && !rc) {
        int n = 0, kept = 0;
        for (int i = 0; i < n_left; i++) {
            const int e = left[i];
            const size_t slot = (size_t)layer * (size_t)dt->n_expert + (size_t)e;
            if (n == EXPERT_FFN_MANY_MAX || s_io(dt, slot) == IO_QUEUED) {
                left[kept++] = e;
                continue;
            }
            if ((rc = s_wait(dt, slot))) return rc;
            const int64_t rows = dt->start[e + 1] - dt->start[e];
            w[n] = dt->layers[layer].tmpl;
            w[n].gate = dt->part[slot][0], w[n].up = dt->part[slot][1], w[n].down = dt->part[slot][2];
            const size_t off = (size_t)dt->start[e] * E;
            tasks[n++] = (expert_ffn_task){&w[n - 1], dt->xg + off, dt->yg + off, rows};
            dt->rows_by_expert[slot] += (uint64_t)rows;
        }
        n_left = kept;
        if (n) {
            const uint64_t t0 = coli_now_ns();
            rc = expert_ffn_many(dt->pool, &dt->scratch, tasks, n);
            dt->ph[dt->decode].compute_ns += coli_now_ns() - t0;
        } else
            s_wait_any(dt, layer, left, n_left);
    }
    return rc;
}

/* Free slot's buffer if its read is over, else note it in late: waiting
 * here for a read no row wanted would idle the compute (only when late is
 * full does it wait). A failed speculative read fails nothing. */
static void s_release_later(disk_tier *dt, size_t slot) {
    if (s_io(dt, slot) == IO_QUEUED && dt->ec->state[slot] == EC_NONE) {
        if (dt->n_late < 64) {
            dt->late[dt->n_late++] = (int64_t)slot;
            return;
        }
        (void)s_wait(dt, slot);
    }
    s_release(dt, slot);
}

/* Free what this call read but the cache does not keep, its victims, and
 * the previous call's speculative reads (their call is over). */
static void s_after_call(disk_tier *dt, int layer) {
    const int old = !dt->cur;
    int64_t late[64];
    const int n_late = dt->n_late;
    memcpy(late, dt->late, (size_t)n_late * sizeof *late);
    dt->n_late = 0;
    for (int i = 0; i < n_late; i++) s_release_later(dt, (size_t)late[i]);
    for (int i = 0; i < dt->n_spec[old]; i++) s_release_later(dt, (size_t)dt->spec[old][i]);
    dt->n_spec[old] = 0;
    dt->cur = old;
    for (int e = 0; e < dt->n_expert; e++)
        if (dt->start[e + 1] > dt->start[e]) s_release(dt, (size_t)layer * (size_t)dt->n_expert + (size_t)e);
    for (int i = 0; i < dt->n_victims; i++) { /* a victim's read may be in flight (a prefetch admitted, then evicted) */
        (void)s_wait(dt, (size_t)dt->victims[i]);
        s_release(dt, (size_t)dt->victims[i]);
    }
    dt->n_victims = 0;
}

static int s_run_layer(moe_exec *self, int layer, const float *x, int64_t n_tok, int k, const int32_t *ids, float *y) {
    disk_tier *dt = (disk_tier *)self;
    const size_t E = (size_t)dt->n_embd;
    const uint64_t t0 = coli_now_ns();
    dt->decode = n_tok == 1;
    if (layer < 0 || layer >= dt->n_layer)
        return coli_fail(COLI_EINVAL, "disk tier: layer %d out of range [0, %d)", layer, dt->n_layer);
    if (n_tok <= 0 || k <= 0) return 0;
    const int64_t n_pairs = n_tok * k;
    for (int64_t p = 0; p < n_pairs; p++)
        if (ids[p] < 0 || ids[p] >= dt->n_expert)
            return coli_fail(COLI_ERANGE, "disk tier: layer %d: expert id %d out of range [0, %d)", layer, ids[p],
                             dt->n_expert);
    int rc = s_reserve(dt, (size_t)n_pairs);
    if (rc) return rc;
    moe_group_by_expert(ids, NULL, n_pairs, dt->n_expert, dt->start, dt->order);
    ec_advance(dt->ec, (double)n_tok / (double)dt->n_layer);
    int64_t miss[1024];
    rc = s_admit(dt, layer, miss);
    if (!rc) rc = s_prefetch(dt, layer, x, n_tok);
    for (int64_t row = 0; row < n_pairs; row++)
        memcpy(dt->xg + (size_t)row * E, x + (size_t)(dt->order[row] / k) * E, E * sizeof(float));
    if (!rc) rc = s_compute(dt, layer);
    s_after_call(dt, layer);
    if (rc) return coli_fail_prefix(rc, "disk tier: layer %d", layer);
    for (int64_t row = 0; row < n_pairs; row++)
        memcpy(y + (size_t)dt->order[row] * E, dt->yg + (size_t)row * E, E * sizeof(float));
    dt->layer_calls++;
    dt->rows += (uint64_t)n_pairs;
    dt->ph[dt->decode].calls++;
    dt->ph[dt->decode].call_ns += coli_now_ns() - t0;
    return 0;
}

// ---------------------------------------------------------------------------
// stats

/* The tier's counters as a JSON object's members (no braces). */
static void s_counters_json(disk_tier *dt, coli_strbuf *b) {
    const ec_counters *c = &dt->ec->c;
    size_t held = 0;
    for (size_t k = 0; k < s_slots(dt); k++) held += dt->ec->state[k] == EC_RESIDENT;
    uint64_t routed = c->hits + c->misses;
    pthread_mutex_lock(&dt->file.mu);
    uint64_t reads = dt->file.reads, bytes = dt->file.bytes, direct = dt->file.direct;
    double sum_us = dt->file.lat_sum_us;
    pthread_mutex_unlock(&dt->file.mu);
    pthread_mutex_lock(&dt->mu);
    const uint64_t busy_ns = dt->busy_ns;
    pthread_mutex_unlock(&dt->mu);
    coli_strbuf_appendf(
        b,
        "\"budget_bytes\":%llu,\"used_bytes\":%llu,\"resident_experts\":%zu,\"hits\":%llu,"
        "\"misses\":%llu,\"hit_rate\":%.6f,\"promotions\":%llu,\"evictions\":%llu,"
        "\"prefetch_issued\":%llu,\"prefetch_used\":%llu,\"disk_reads\":%llu,\"disk_bytes\":%llu,"
        "\"direct_reads\":%llu,\"transient_reads\":%llu,\"speculative_reads\":%llu,\"read_p50_us\":%.0f,\"read_p99_"
        "us\":%.0f,\"read_us_sum\":%.0f,\"cancelled_reads\":%llu,\"disk_busy_ms\":%.3f",
        (unsigned long long)dt->ec->budget, (unsigned long long)dt->ec->used, held, (unsigned long long)c->hits,
        (unsigned long long)c->misses, routed ? (double)c->hits / (double)routed : 0.0,
        (unsigned long long)c->promotions, (unsigned long long)c->evictions, (unsigned long long)c->prefetch_issued,
        (unsigned long long)c->prefetch_used, (unsigned long long)reads, (unsigned long long)bytes,
        (unsigned long long)direct, (unsigned long long)dt->transient_reads, (unsigned long long)dt->speculative_reads,
        disk_latency_us(&dt->file, 0.5), disk_latency_us(&dt->file, 0.99), sum_us,
        (unsigned long long)dt->cancelled_reads, (double)busy_ns / 1e6);
    for (int d = 0; d < 2; d++) {
        const dt_phase *p = &dt->ph[d];
        coli_strbuf_appendf(b,
                            ",\"%s\":{\"layer_calls\":%llu,\"needed_reads\":%llu,\"needed_bytes\":%llu,"
                            "\"read_wait_ms\":%.3f,\"compute_ms\":%.3f,\"layer_ms\":%.3f}",
                            d ? "decode" : "prompt", (unsigned long long)p->calls, (unsigned long long)p->needed_reads,
                            (unsigned long long)p->needed_bytes, (double)p->wait_ns / 1e6, (double)p->compute_ns / 1e6,
                            (double)p->call_ns / 1e6);
    }
}

static int s_finish(coli_strbuf *b, char **out) {
    if (b->failed || !b->s) {
        free(b->s);
        return coli_fail(COLI_ENOMEM, "disk tier: stats: out of memory");
    }
    *out = b->s;
    return 0;
}

static int s_stats_json(moe_exec *self, char **json) {
    disk_tier *dt = (disk_tier *)self;
    coli_strbuf b = {0};
    coli_strbuf_appendf(&b,
                        "{\"executor\":\"inproc\",\"device\":\"cpu\",\"n_layer\":%d,\"n_expert\":%d,"
                        "\"layer_calls\":%llu,\"rows\":%llu,\"fallbacks\":0,\"disk_tier\":{",
                        dt->n_layer, dt->n_expert, (unsigned long long)dt->layer_calls, (unsigned long long)dt->rows);
    s_counters_json(dt, &b);
    coli_strbuf_appendf(&b, "},\"expert_rows\":[");
    for (int l = 0; l < dt->n_layer; l++) {
        coli_strbuf_appendf(&b, "%s[", l ? "," : "");
        for (int e = 0; e < dt->n_expert; e++)
            coli_strbuf_appendf(&b, "%s%llu", e ? "," : "",
                                (unsigned long long)dt->rows_by_expert[(size_t)l * (size_t)dt->n_expert + (size_t)e]);
        coli_strbuf_appendf(&b, "]");
    }
    coli_strbuf_appendf(&b, "]}");
    return s_finish(&b, json);
}

static int s_stats_text(moe_exec *self, char **text) {
    disk_tier *dt = (disk_tier *)self;
    const ec_counters *c = &dt->ec->c;
    const dt_phase *dec = &dt->ph[1];
    uint64_t routed = c->hits + c->misses;
    coli_strbuf b = {0};
    coli_strbuf_appendf(&b, "experts: in-process, %llu layer calls, %llu expert rows, 0 fallbacks\n",
                        (unsigned long long)dt->layer_calls, (unsigned long long)dt->rows);
    coli_strbuf_appendf(&b,
                        "    disk tier: RAM %.1f of %.1f MiB  hits %llu  misses %llu  (hit rate %.1f%%)  disk reads "
                        "%llu (%.1f MiB, %s)  read p50 %.2f ms  p99 %.2f ms  prefetch %llu issued, %llu used\n"
                        "    disk tier decode: %.1f MiB of needed reads per layer call  layers %.2f s, of it experts' "
                        "compute %.2f s, waiting for reads %.2f s\n",
                        (double)dt->ec->used / 1048576.0, (double)dt->ec->budget / 1048576.0,
                        (unsigned long long)c->hits, (unsigned long long)c->misses,
                        routed ? 100.0 * (double)c->hits / (double)routed : 0.0, (unsigned long long)dt->file.reads,
                        (double)dt->file.bytes / 1048576.0, dt->file.fd_direct >= 0 ? "O_DIRECT" : "page cache",
                        disk_latency_us(&dt->file, 0.5) / 1000.0, disk_latency_us(&dt->file, 0.99) / 1000.0,
                        (unsigned long long)c->prefetch_issued, (unsigned long long)c->prefetch_used,
                        dec->calls ? (double)dec->needed_bytes / 1048576.0 / (double)dec->calls : 0.0,
                        (double)dec->call_ns / 1e9, (double)dec->compute_ns / 1e9, (double)dec->wait_ns / 1e9);
    return s_finish(&b, text);
}

// ---------------------------------------------------------------------------
// lifecycle

static void s_destroy(moe_exec *self) {
    disk_tier *dt = (disk_tier *)self;
    if (!dt) return;
    pthread_mutex_lock(&dt->mu);
    dt->stop = 1;
    pthread_cond_broadcast(&dt->cv_work);
    pthread_mutex_unlock(&dt->mu);
    for (int i = 0; i < dt->n_readers; i++) pthread_join(dt->readers[i], NULL);
    for (size_t k = 0; dt->buf && k < s_slots(dt); k++) free(dt->buf[k]);
    for (int i = 0; i < dt->n_spare; i++) free(dt->spare[i]);
    pthread_mutex_destroy(&dt->mu);
    pthread_cond_destroy(&dt->cv_work);
    pthread_cond_destroy(&dt->cv_done);
    disk_close(&dt->file);
    ec_free(dt->ec);
    expert_predictor_free(&dt->pred);
    coli_scratch_free(&dt->scratch);
    coli_pool_destroy(&dt->own_pool);
    free(dt->layers);
    free(dt->buf);
    free(dt->part);
    free(dt->io);
    free(dt->victims);
    free(dt->fresh);
    free(dt->q[0].slot);
    free(dt->q[1].slot);
    free(dt->xg);
    free(dt->yg);
    free(dt->order);
    free(dt->start);
    free(dt->rows_by_expert);
    free(dt);
}

/* Each layer's expert shape and the file offsets of its three tensors. */
static int s_layout(disk_tier *dt, const gguf_file *f, uint64_t *eb) {
    const char *base = gguf_base(f);
    for (int l = 0; l < dt->n_layer; l++) {
        eb[l] = 0;
        if (!expert_layer_present(f, l)) continue; /* a dense layer: no experts */
        dt_layer *L = &dt->layers[l];
        int rc = expert_weights_from_gguf(f, l, 0, &L->tmpl);
        if (rc) return rc;
        const expert_part_bytes pb = expert_parts_bytes(&L->tmpl);
        const void *p[3] = {L->tmpl.gate, L->tmpl.up, L->tmpl.down};
        const size_t len[3] = {pb.gate, pb.up, pb.down};
        for (int i = 0; i < 3; i++) L->off[i] = (uint64_t)((const char *)p[i] - base), L->len[i] = len[i];
        eb[l] = expert_weights_bytes(&L->tmpl);
    }
    return 0;
}

static int s_alloc(disk_tier *dt) {
    const size_t n = s_slots(dt);
    dt->layers = calloc((size_t)dt->n_layer, sizeof *dt->layers);
    dt->buf = calloc(n, sizeof *dt->buf);
    dt->part = calloc(n, sizeof *dt->part);
    dt->io = calloc(n, 1);
    dt->victims = calloc(n, sizeof *dt->victims);
    dt->fresh = calloc(n, 1);
    dt->q[0].slot = calloc(n, sizeof *dt->q[0].slot);
    dt->q[1].slot = calloc(n, sizeof *dt->q[1].slot);
    dt->start = calloc((size_t)dt->n_expert + 1, sizeof *dt->start);
    dt->rows_by_expert = calloc(n, sizeof *dt->rows_by_expert);
    if (!dt->layers || !dt->buf || !dt->part || !dt->io || !dt->victims || !dt->fresh || !dt->q[0].slot ||
        !dt->q[1].slot || !dt->start || !dt->rows_by_expert)
        return coli_fail(COLI_ENOMEM, "disk tier: out of memory");
    return 0;
}

int disk_tier_parse_pins(const char *pins, int n_layer, int n_expert, int32_t *pin) {
    device_spec ram = {.plugin = "ram"}; /* the one "worker" a pin may name: the tier's RAM */
    return sched_parse_pins(pins, &ram, 1, n_layer, n_expert, pin);
}

/* The pinned experts take their room in the cache first; none is ever evicted. */
static int s_pin(disk_tier *dt, const char *pins) {
    if (!pins || !*pins) return 0;
    int32_t *pin = malloc(s_slots(dt) * sizeof *pin);
    if (!pin) return coli_fail(COLI_ENOMEM, "disk tier: out of memory");
    int rc = disk_tier_parse_pins(pins, dt->n_layer, dt->n_expert, pin);
    for (size_t k = 0; k < s_slots(dt) && !rc; k++) {
        const int l = (int)(k / (size_t)dt->n_expert), e = (int)(k % (size_t)dt->n_expert);
        if (pin[k] < 0 || ec_pin(dt->ec, k) == 0) continue;
        rc = dt->ec->expert_bytes[l]
                 ? coli_fail(COLI_EINVAL,
                             "--pin %d:%d=ram: the disk tier's RAM budget of %.1f MiB has no room left (%.1f MiB "
                             "pinned before it)",
                             l, e, (double)dt->ec->budget / 1048576.0, (double)dt->ec->used / 1048576.0)
                 : coli_fail(COLI_EINVAL, "--pin %d:%d=ram: layer %d has no experts (a dense layer)", l, e, l);
    }
    free(pin);
    return rc;
}

/* The cache: the pinned experts, then the hottest that fit (from the heat),
 * all read now. */
static int s_start_cache(disk_tier *dt, const moe_exec_config *cfg, const uint64_t *eb, uint64_t ram) {
    ec_params p;
    ec_default_params(&p);
    p.max_loads = dt->n_expert; /* a miss is read anyway: keeping it costs no extra read */
    dt->ec = ec_new(dt->n_layer, dt->n_expert, eb, ram, &p);
    if (!dt->ec) return coli_fail(COLI_ENOMEM, "disk tier: out of memory");
    dt->pred = (expert_predictor){
        .gguf = cfg->gguf, .n_embd = cfg->n_embd, .n_expert = cfg->n_expert, .k = cfg->n_expert_used};
    int rc = s_pin(dt, cfg->pins);
    if (!rc) ec_seed(dt->ec, cfg->heat);
    for (size_t k = 0; k < s_slots(dt) && !rc; k++)
        if (dt->ec->state[k] == EC_LOADING) rc = s_queue(dt, k, 0);
    for (size_t k = 0; k < s_slots(dt) && !rc; k++)
        if (dt->ec->state[k] == EC_LOADING) {
            rc = s_wait(dt, k);
            dt->ec->c.promotions--; /* the initial set is no promotion (ec_placed's rule) */
        }
    dt->ph[0].wait_ns = 0; /* the initial set's reads are no layer call's wait */
    return rc;
}

static int s_start_readers(disk_tier *dt) {
    pthread_mutex_init(&dt->mu, NULL);
    pthread_cond_init(&dt->cv_work, NULL);
    pthread_cond_init(&dt->cv_done, NULL);
    for (int i = 0; i < DT_READERS; i++) {
        if (pthread_create(&dt->readers[i], NULL, s_reader, dt) != 0)
            return coli_fail(COLI_ENOMEM, "disk tier: cannot start reader thread %d", i);
        dt->n_readers++;
    }
    return 0;
}

/* The tier reads its experts from the file into its own cache, never through
 * the mapping: none of their pages is worth faulting in (moe_exec.h). */
static int s_maps_none(moe_exec *self, int layer, int expert) {
    (void)self;
    (void)layer;
    (void)expert;
    return 0;
}

int moe_exec_disk_new(const moe_exec_config *cfg, uint64_t ram_bytes, moe_exec **out) {
    *out = NULL;
    if (!cfg || !cfg->gguf || !cfg->model_path || cfg->n_layer <= 0 || cfg->n_expert <= 0 || cfg->n_embd <= 0)
        return coli_fail(COLI_EINVAL, "disk tier: config needs a model file, layers, experts and n_embd");
    if (cfg->n_expert > 1024)
        return coli_fail(COLI_EINVAL, "disk tier: %d experts per layer (at most 1024)", cfg->n_expert);
    disk_tier *dt = calloc(1, sizeof *dt);
    if (!dt) return coli_fail(COLI_ENOMEM, "disk tier: out of memory");
    dt->base = (moe_exec){.run_layer = s_run_layer,
                          .stats_json = s_stats_json,
                          .stats_text = s_stats_text,
                          .destroy = s_destroy,
                          .computes_here = s_maps_none};
    dt->n_layer = cfg->n_layer;
    dt->n_expert = cfg->n_expert;
    dt->n_embd = cfg->n_embd;
    dt->file.fd = dt->file.fd_direct = -1;
    dt->prefetch = cfg->settings && cfg->settings->disk_prefetch;
    dt->n_spare_cap = cfg->n_expert_used < DT_SPARE_MAX ? cfg->n_expert_used : DT_SPARE_MAX;
    uint64_t *eb = calloc((size_t)cfg->n_layer, sizeof *eb);
    int rc = eb ? s_alloc(dt) : coli_fail(COLI_ENOMEM, "disk tier: out of memory");
    if (!rc) rc = s_layout(dt, cfg->gguf, eb);
    if (!rc) rc = s_start_readers(dt);
    if (!rc) rc = disk_open(&dt->file, cfg->model_path, !cfg->settings || cfg->settings->disk_direct);
    dt->pool = cfg->pool;
    if (!rc && !dt->pool && !(dt->pool = dt->own_pool = coli_pool_new(cfg->n_threads)))
        rc = coli_fail(COLI_ENOMEM, "disk tier: cannot start the compute threads");
    if (!rc) rc = s_start_cache(dt, cfg, eb, ram_bytes);
    free(eb);
    /* The mapping now serves only the dense weights; a fault there must not
     * read around into the experts' bytes (read-ahead is often several MiB,
     * all of it charged to a memory cgroup): fault in what is touched only. */
    if (!rc) (void)madvise((void *)gguf_base(cfg->gguf), gguf_size(cfg->gguf), MADV_RANDOM);
    if (rc) {
        s_destroy(&dt->base);
        return rc;
    }
    *out = &dt->base;
    return 0;
}
