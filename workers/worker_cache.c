/*
 * worker_cache.c - a worker serving as a live expert cache
 * (docs/scheduler.md, "Live expert cache").
 *
 * A cache worker holds a copy of each resident expert in its own memory
 * (bytes really moved, as a GPU's upload would be) and computes from that
 * copy with the same kernels, so the bits are those of the mapping. Loads are
 * staged OFF the batch-serving path: the main thread validates a CacheLoad
 * and queues it; the loader thread copies the weights out of the mapping;
 * the main thread, between batches, hands the copies to the plugin (cheap:
 * the cpu plugin adopts the pointers) and acks. Evictions are immediate on
 * the main thread (the coordinator stopped routing them before it sent the
 * CacheEvict). The plugin is only ever called from the main thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/kernels/expert_ffn.h"
#include "workers/worker.h"

#define CACHE_MAX_PER_MSG 4096 /* experts one CacheLoad / CacheEvict may name */
/* A job the loader has not picked up after this long is staged by the idle
 * main thread instead (a starved loader thread on a loaded machine). */
#define CACHE_STEAL_NS 20000000ULL

typedef struct cache_job {
    uint64_t seq;
    uint64_t queued_ns; /* when the main thread queued it */
    size_t n;
    int32_t *layer, *expert;
    expert_weights *src; /* pointers into the mapping (validated on the main thread) */
    void **copy;         /* staged by the loader: one buffer per expert, NULL when malloc failed */
    struct cache_job *next;
} cache_job;

typedef struct cache_copy {
    uint64_t key;
    void *buf;
    size_t bytes;
} cache_copy;

struct worker_cache {
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cache_job *queued, *done; /* FIFO lists (queued: the loader's input; done: its output) */
    int stop;
    int bell;             /* eventfd: a job is done */
    expert_table pending; /* queued loads (main thread only) */
    cache_copy *copies;   /* the buffers the plugin computes from (main thread only): one per resident expert */
    size_t n_copies, cap_copies;
    uint64_t copy_bytes; /* their weight bytes, reported in every ack */
};

static void s_job_free(cache_job *j) {
    if (!j) return;
    for (size_t i = 0; j->copy && i < j->n; i++) free(j->copy[i]);
    free(j->layer);
    free(j->expert);
    free(j->src);
    free(j->copy);
    free(j);
}

static void s_push(cache_job **list, cache_job *j) {
    j->next = NULL;
    while (*list) list = &(*list)->next;
    *list = j;
}

/* One buffer holding gate, up and down (64-byte aligned parts); *dst points into it. */
static void *s_stage(const expert_weights *src, expert_weights *dst, size_t *bytes) {
    const expert_part_bytes b = expert_parts_bytes(src);
    const size_t gb = b.gate, ub = b.up, db = b.down;
    const size_t go = 0, uo = (gb + 63) & ~(size_t)63, dof = uo + ((ub + 63) & ~(size_t)63);
    unsigned char *buf = NULL;
    if (posix_memalign((void **)&buf, 64, dof + db + 1) != 0) return NULL;
    memcpy(buf + go, src->gate, gb);
    memcpy(buf + uo, src->up, ub);
    memcpy(buf + dof, src->down, db);
    *dst = *src;
    dst->gate = buf + go;
    dst->up = buf + uo;
    dst->down = buf + dof;
    if (bytes) *bytes = gb + ub + db;
    return buf;
}

static void s_stage_job(cache_job *j) {
    for (size_t i = 0; i < j->n; i++) {
        expert_weights copy;
        j->copy[i] = s_stage(&j->src[i], &copy, NULL);
        if (j->copy[i]) j->src[i] = copy; /* from now on: the copy */
    }
}

static void *s_loader(void *arg) {
    struct worker_cache *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->queued && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop) break;
        cache_job *j = c->queued;
        c->queued = j->next;
        pthread_mutex_unlock(&c->mu);
        s_stage_job(j);
        pthread_mutex_lock(&c->mu);
        s_push(&c->done, j);
        uint64_t one = 1;
        if (write(c->bell, &one, sizeof one) < 0) { /* the counter cannot overflow in practice */
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int worker_cache_enable(worker *w, char *why, size_t why_len) {
    if (w->cache) return 0;
    if (!MOE_PLUGIN_HAS(w->device.plugin, unload_expert))
        return snprintf(why, why_len, "plugin %s has no unload_expert (ABI 1.2): it cannot be a live expert cache",
                        w->device.plugin->name),
               1;
    struct worker_cache *c = calloc(1, sizeof *c);
    if (!c) return snprintf(why, why_len, "worker: out of memory for the expert cache"), 1;
    c->bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (c->bell < 0 || pthread_create(&c->thread, NULL, s_loader, c) != 0) {
        snprintf(why, why_len, "worker: expert cache loader: %s", strerror(errno));
        if (c->bell >= 0) close(c->bell);
        free(c);
        return 1;
    }
    c->started = 1;
    w->cache = c;
    return 0;
}

static int s_keep_copy(struct worker_cache *c, uint64_t key, void *buf, size_t bytes) {
    if (c->n_copies == c->cap_copies) {
        size_t cap = c->cap_copies ? c->cap_copies * 2 : 64;
        cache_copy *g = realloc(c->copies, cap * sizeof *g);
        if (!g) return coli_fail(COLI_ENOMEM, "worker: expert cache copies");
        c->copies = g;
        c->cap_copies = cap;
    }
    c->copies[c->n_copies++] = (cache_copy){key, buf, bytes};
    c->copy_bytes += bytes;
    return 0;
}

static void s_drop_copy(struct worker_cache *c, uint64_t key) {
    for (size_t i = 0; i < c->n_copies; i++)
        if (c->copies[i].key == key) {
            c->copy_bytes -= c->copies[i].bytes;
            free(c->copies[i].buf);
            c->copies[i] = c->copies[--c->n_copies];
            return;
        }
}

/* Hand a staged copy to the plugin; on refusal the copy is freed. One copy
 * per expert whatever the path: a CacheLoad staged while a Place (or a batch
 * allowed to load) made the expert resident finds it held, and its copy is
 * dropped (*kept 0) instead of stacking a second one. 0 or the plugin's code. */
static int s_adopt(worker *w, int layer, int e, const expert_weights *copy, void *buf, int *kept, char *err, size_t n) {
    *kept = 0;
    if (expert_table_has(&w->hold.resident, expert_key(layer, e))) {
        free(buf);
        return 0;
    }
    int rc = buf ? worker_hand_expert(w, layer, e, copy, err, n)
                 : (snprintf(err, n, "expert %d.%d: out of memory for its copy", layer, e), COLI_ENOMEM);
    if (rc == 0) rc = s_keep_copy(w->cache, expert_key(layer, e), buf, expert_weights_bytes(copy));
    *kept = rc == 0;
    if (rc != 0 && buf && worker_forget_expert(w, layer, e)) {
        char ignore[64];
        w->device.plugin->unload_expert(w->device.dev, layer, e, ignore, sizeof ignore);
        snprintf(err, n, "expert %d.%d: out of memory", layer, e);
    }
    if (rc != 0) free(buf);
    return rc;
}

int worker_cache_load_now(worker *w, int layer, int e, const expert_weights *src, char *err, size_t err_len) {
    expert_weights copy;
    int kept;
    void *buf = s_stage(src, &copy, NULL);
    return s_adopt(w, layer, e, &copy, buf, &kept, err, err_len);
}

// ---------------------------------------------------------------------------
//  The ack: what changed, and everything held now.
typedef struct ack_lists {
    Coli__ExpertRef *changed; /* loaded or evicted */
    size_t n_changed;
    Coli__RefusedExpert *refused;
    char (*why)[256];
    size_t n_refused;
    int evict;
    uint64_t bytes_copied;
} ack_lists;

static int s_send_ack(worker *w, uint64_t seq, const char *failed, const ack_lists *al) {
    Coli__CacheAck a = COLI__CACHE_ACK__INIT;
    a.seq = seq;
    a.status = failed ? COLI__STATUS__STATUS_FAILED : COLI__STATUS__STATUS_OK;
    a.reason = (char *)(failed ? failed : "");
    size_t n_res = w->hold.resident.n, nc = al ? al->n_changed : 0, nr = al ? al->n_refused : 0;
    Coli__ExpertRef *res = calloc(n_res + 1, sizeof *res);
    Coli__ExpertRef **rp = calloc(n_res + 1, sizeof *rp), **cp = calloc(nc + 1, sizeof *cp);
    Coli__RefusedExpert **fp = calloc(nr + 1, sizeof *fp);
    if (!res || !rp || !cp || !fp) {
        free(res), free(rp), free(cp), free(fp);
        return failed ? COLI_ENOMEM : s_send_ack(w, seq, "worker: out of memory for the cache ack", NULL);
    }
    for (size_t i = 0, k = 0; i < w->hold.resident.cap; i++)
        if (w->hold.resident.keys[i]) {
            coli__expert_ref__init(&res[k]);
            expert_unkey(w->hold.resident.keys[i], &res[k].layer, &res[k].expert);
            rp[k] = &res[k];
            k++;
        }
    for (size_t i = 0; i < nc; i++) cp[i] = &al->changed[i];
    for (size_t i = 0; i < nr; i++) fp[i] = &al->refused[i];
    a.n_resident = n_res, a.resident = rp;
    if (al && al->evict)
        a.n_evicted = nc, a.evicted = cp;
    else
        a.n_loaded = nc, a.loaded = cp;
    a.n_refused = nr, a.refused = fp;
    moe_stats st = {0};
    if (w->device.plugin->get_stats) w->device.plugin->get_stats(w->device.dev, &st);
    a.resident_bytes = st.resident_bytes;
    a.bytes_copied = al ? al->bytes_copied : 0;
    a.copies = w->cache ? w->cache->n_copies : 0;
    a.copy_bytes = w->cache ? w->cache->copy_bytes : 0;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_CACHE_ACK;
    env.cache_ack = &a;
    int rc = worker_send(w, &env, NULL, 0, 0);
    free(res), free(rp), free(cp), free(fp);
    return rc;
}

/* Is the request acceptable as a whole? Writes the reason when not. */
static int s_check_request(worker *w, const char *what, size_t n, Coli__ExpertRef **refs, char *why, size_t why_len) {
    if (!w->cache) return snprintf(why, why_len, "%s: not a cache worker (its Place did not say cache)", what), 1;
    if (!w->hold.model) return snprintf(why, why_len, "%s: before placement", what), 1;
    if (n == 0 || n > CACHE_MAX_PER_MSG)
        return snprintf(why, why_len, "%s: %zu experts (want 1..%d)", what, n, CACHE_MAX_PER_MSG), 1;
    for (size_t i = 0; i < n; i++) {
        expert_weights ew; /* an expert of the model: a negative or out-of-range pair never reaches the sets */
        if (expert_weights_from_gguf(w->hold.model, refs[i]->layer, refs[i]->expert, &ew) != 0)
            return snprintf(why, why_len, "%s: expert %d.%d: %s", what, refs[i]->layer, refs[i]->expert,
                            coli_last_error()),
                   1;
        for (size_t j = 0; j < i; j++)
            if (refs[i]->layer == refs[j]->layer && refs[i]->expert == refs[j]->expert)
                return snprintf(why, why_len, "%s: expert %d.%d named twice", what, refs[i]->layer, refs[i]->expert), 1;
    }
    return 0;
}

int worker_cache_on_load(worker *w, const Coli__Envelope *env) {
    const Coli__CacheLoad *m = env->cache_load;
    char why[256] = "";
    if (s_check_request(w, "cache load", m->n_experts, m->experts, why, sizeof why))
        return s_send_ack(w, m->seq, why, NULL);
    cache_job *j = calloc(1, sizeof *j);
    size_t n = m->n_experts;
    if (j) {
        j->layer = calloc(n, sizeof *j->layer), j->expert = calloc(n, sizeof *j->expert);
        j->src = calloc(n, sizeof *j->src), j->copy = calloc(n, sizeof *j->copy);
    }
    if (!j || !j->layer || !j->expert || !j->src || !j->copy) {
        s_job_free(j);
        return s_send_ack(w, m->seq, "cache load: worker out of memory", NULL);
    }
    j->seq = m->seq;
    j->queued_ns = coli_now_ns();
    j->n = n;
    for (size_t i = 0; i < n && !why[0]; i++) {
        int l = m->experts[i]->layer, e = m->experts[i]->expert;
        uint64_t k = expert_key(l, e);
        j->layer[i] = l, j->expert[i] = e;
        if (expert_table_has(&w->hold.resident, k) || expert_table_has(&w->cache->pending, k))
            snprintf(why, sizeof why, "cache load: expert %d.%d is already %s", l, e,
                     expert_table_has(&w->hold.resident, k) ? "resident" : "being loaded");
        else if (expert_weights_from_gguf(w->hold.model, l, e, &j->src[i]) != 0)
            snprintf(why, sizeof why, "cache load: %s", coli_last_error());
    }
    if (why[0]) {
        s_job_free(j);
        return s_send_ack(w, m->seq, why, NULL);
    }
    for (size_t i = 0; i < n; i++) expert_table_put(&w->cache->pending, expert_key(j->layer[i], j->expert[i]), NULL);
    pthread_mutex_lock(&w->cache->mu);
    s_push(&w->cache->queued, j);
    pthread_cond_signal(&w->cache->cv);
    pthread_mutex_unlock(&w->cache->mu);
    return 0;
}

/* Adopt one staged job and ack it. */
static void s_finish_job(worker *w, cache_job *j) {
    ack_lists al = {
        calloc(j->n, sizeof *al.changed), 0, calloc(j->n, sizeof *al.refused), calloc(j->n, sizeof *al.why), 0, 0, 0};
    for (size_t i = 0; i < j->n; i++) {
        int l = j->layer[i], e = j->expert[i];
        expert_table_remove(&w->cache->pending, expert_key(l, e), NULL);
        char err[256] = "";
        void *buf = j->copy[i];
        j->copy[i] = NULL; /* s_adopt keeps or frees it */
        int kept;
        int rc = s_adopt(w, l, e, &j->src[i], buf, &kept, err, sizeof err);
        if (!al.changed || !al.refused || !al.why) continue; /* out of memory: the resident list still tells */
        if (rc == 0) {
            coli__expert_ref__init(&al.changed[al.n_changed]);
            al.changed[al.n_changed].layer = l;
            al.changed[al.n_changed++].expert = e;
            if (kept) al.bytes_copied += expert_weights_bytes(&j->src[i]);
            continue;
        }
        Coli__RefusedExpert *r = &al.refused[al.n_refused];
        coli__refused_expert__init(r);
        r->layer = l, r->expert = e;
        r->kind = strstr(err, "budget") ? "budget" : rc == COLI_ENOMEM ? "alloc" : "load";
        snprintf(al.why[al.n_refused], sizeof al.why[0], "%s", err);
        r->reason = al.why[al.n_refused++];
    }
    s_send_ack(w, j->seq, NULL, &al);
    free(al.changed), free(al.refused), free(al.why);
}

int worker_cache_idle(worker *w) {
    struct worker_cache *c = w->cache;
    if (!c) return 0;
    pthread_mutex_lock(&c->mu);
    cache_job *j = c->queued;
    if (j && coli_now_ns() - j->queued_ns >= CACHE_STEAL_NS)
        c->queued = j->next;
    else
        j = NULL;
    int waiting = c->queued != NULL;
    pthread_mutex_unlock(&c->mu);
    if (!j) return waiting;
    s_stage_job(j);
    s_finish_job(w, j);
    s_job_free(j);
    return waiting;
}

void worker_cache_poll(worker *w) {
    struct worker_cache *c = w->cache;
    if (!c) return;
    uint64_t v;
    if (read(c->bell, &v, sizeof v) < 0) { /* EAGAIN: nothing new; the list is checked anyway */
    }
    pthread_mutex_lock(&c->mu);
    cache_job *list = c->done;
    c->done = NULL;
    pthread_mutex_unlock(&c->mu);
    while (list) {
        cache_job *j = list;
        list = j->next;
        s_finish_job(w, j);
        s_job_free(j);
    }
}

int worker_cache_on_evict(worker *w, const Coli__Envelope *env) {
    const Coli__CacheEvict *m = env->cache_evict;
    char why[256] = "";
    if (s_check_request(w, "cache evict", m->n_experts, m->experts, why, sizeof why))
        return s_send_ack(w, m->seq, why, NULL);
    for (size_t i = 0; i < m->n_experts && !why[0]; i++)
        if (!expert_table_has(&w->hold.resident, expert_key(m->experts[i]->layer, m->experts[i]->expert)))
            snprintf(why, sizeof why, "cache evict: expert %d.%d is not resident", m->experts[i]->layer,
                     m->experts[i]->expert);
    if (why[0]) return s_send_ack(w, m->seq, why, NULL);
    ack_lists al = {calloc(m->n_experts, sizeof *al.changed), 0, NULL, NULL, 0, 1, 0};
    if (!al.changed) return s_send_ack(w, m->seq, "cache evict: worker out of memory", NULL);
    for (size_t i = 0; i < m->n_experts; i++) {
        int l = m->experts[i]->layer, e = m->experts[i]->expert;
        char err[256];
        if (w->device.plugin->unload_expert(w->device.dev, l, e, err, sizeof err) != 0) {
            fprintf(stderr, "coli-worker %d: %s\n", w->link.worker_id, err); /* still listed as resident */
            continue;
        }
        worker_forget_expert(w, l, e);
        s_drop_copy(w->cache, expert_key(l, e));
        coli__expert_ref__init(&al.changed[al.n_changed]);
        al.changed[al.n_changed].layer = l;
        al.changed[al.n_changed++].expert = e;
    }
    int rc = s_send_ack(w, m->seq, NULL, &al);
    free(al.changed);
    return rc;
}

int worker_cache_fd(const worker *w) { return w->cache ? w->cache->bell : -1; }

void worker_cache_close(worker *w) {
    struct worker_cache *c = w->cache;
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->started) pthread_join(c->thread, NULL);
    for (cache_job *lists[2] = {c->queued, c->done}, **l = lists; l < lists + 2; l++)
        while (*l) {
            cache_job *j = *l;
            *l = j->next;
            s_job_free(j);
        }
    for (size_t i = 0; i < c->n_copies; i++) free(c->copies[i].buf);
    free(c->copies);
    expert_table_free(&c->pending, NULL, NULL);
    close(c->bell);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    w->cache = NULL;
}
