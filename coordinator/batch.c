/* batch.c - see batch.h. */
#include "coordinator/batch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* One member's token of a step; lives on the member's stack until done. */
typedef struct batch_entry {
    kv_cache *kv;
    int *pos;
    int32_t id;
    float *logits;
    route_obs *route; /* NULL: not observed */
    int rc, done;
} batch_entry;

struct decode_batch {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a step done, a member left or joined */
    forward_state fs;  /* buffers for max_seqs rows */
    int max_seqs, n_vocab;
    decode_lock_fn lock, unlock;
    void *user;
    int members, running;
    batch_entry **pending, **taken; /* (max_seqs) submitted / being evaluated */
    int n_pending;
    kv_cache **kvs; /* (max_seqs) the step's rows */
    int *pos;
    int32_t *ids;
    float *logits; /* (max_seqs, n_vocab) */
    char err[256]; /* the last failed step's message */
    decode_batch_stats st;
};

/* b->fs's route hook: the step's row t belongs to taken[t]'s sequence, at
 * pos[t]; each member's observer gets its own row, with the pass's pair
 * indices for the devices (the taken entries stay put while the step runs). */
static void s_route_rows(void *user, int layer, int pos0, int n_tok, int k, const int32_t *sel, const float *w) {
    (void)pos0; /* rows of different sequences: each has its own position */
    decode_batch *b = user;
    for (int t = 0; t < n_tok; t++) {
        route_obs *o = b->taken[t]->route;
        const size_t at = (size_t)t * (size_t)k;
        if (o) route_obs_rows(o, layer, b->pos[t], 1, t, k, sel + at, w + at);
    }
}

/* The per-sequence arrays, freed by both the failed constructor and the destructor. */
static void s_free_arrays(decode_batch *b) {
    free(b->pending);
    free(b->taken);
    free(b->kvs);
    free(b->pos);
    free(b->ids);
    free(b->logits);
}

int decode_batch_new(const model *m, moe_exec *moe, coli_pool *pool, int max_seqs, int n_ctx, decode_lock_fn lock,
                     decode_lock_fn unlock, void *user, decode_batch **out) {
    *out = NULL;
    if (max_seqs < 1 || n_ctx < 1 || !lock != !unlock)
        return coli_fail(COLI_EINVAL,
                         "batch: %d sequences of %d positions (expected >= 1), lock and unlock both or neither",
                         max_seqs, n_ctx);
    decode_batch *b = calloc(1, sizeof *b);
    if (!b) return coli_fail(COLI_ENOMEM, "batch: out of memory");
    const size_t S = (size_t)max_seqs;
    b->max_seqs = max_seqs;
    b->n_vocab = m->hp.n_vocab;
    b->lock = lock;
    b->unlock = unlock;
    b->user = user;
    b->pending = malloc(S * sizeof *b->pending);
    b->taken = malloc(S * sizeof *b->taken);
    b->kvs = malloc(S * sizeof *b->kvs);
    b->pos = malloc(S * sizeof *b->pos);
    b->ids = malloc(S * sizeof *b->ids);
    b->logits = malloc(S * (size_t)b->n_vocab * sizeof(float));
    int rc = 0;
    if (!b->pending || !b->taken || !b->kvs || !b->pos || !b->ids || !b->logits)
        rc = coli_fail(COLI_ENOMEM, "batch: out of memory for %d sequences", max_seqs);
    if (rc == 0) rc = forward_state_init(&b->fs, m, moe, pool, max_seqs, n_ctx);
    if (rc < 0) {
        s_free_arrays(b);
        free(b);
        return rc;
    }
    b->fs.route_hook = s_route_rows;
    b->fs.route_user = b;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    *out = b;
    return 0;
}

void decode_batch_free(decode_batch **pb) {
    if (!pb || !*pb) return;
    decode_batch *b = *pb;
    forward_state_free(&b->fs);
    s_free_arrays(b);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
    *pb = NULL;
}

void decode_batch_lock(decode_batch *b) {
    if (b->lock) b->lock(b->user);
}
void decode_batch_unlock(decode_batch *b) {
    if (b->unlock) b->unlock(b->user);
}

void decode_batch_join(decode_batch *b) {
    pthread_mutex_lock(&b->mu);
    while (b->members >= b->max_seqs) pthread_cond_wait(&b->cv, &b->mu);
    b->members++;
    b->st.members = b->members;
    pthread_mutex_unlock(&b->mu);
}

void decode_batch_leave(decode_batch *b) {
    pthread_mutex_lock(&b->mu);
    b->members--;
    b->st.members = b->members;
    pthread_cond_broadcast(&b->cv); /* the others may be complete now; a joiner may fit */
    pthread_mutex_unlock(&b->mu);
}

/* Evaluate the taken entries (b->mu held on entry and on return, released
 * while computing), hand each its logits and position, wake everyone. */
static void s_run_step(decode_batch *b, int n) {
    pthread_mutex_unlock(&b->mu);
    for (int t = 0; t < n; t++) {
        b->kvs[t] = b->taken[t]->kv;
        b->pos[t] = *b->taken[t]->pos;
        b->ids[t] = b->taken[t]->id;
    }
    decode_batch_lock(b);
    int rc = forward_eval_rows(&b->fs, b->kvs, b->pos, b->ids, n, b->logits);
    decode_batch_unlock(b);
    if (rc < 0) snprintf(b->err, sizeof b->err, "%s", coli_last_error());
    for (int t = 0; t < n && rc == 0; t++) {
        memcpy(b->taken[t]->logits, b->logits + (size_t)t * (size_t)b->n_vocab, (size_t)b->n_vocab * sizeof(float));
        (*b->taken[t]->pos)++;
    }
    pthread_mutex_lock(&b->mu);
    for (int t = 0; t < n; t++) {
        b->taken[t]->rc = rc;
        b->taken[t]->done = 1;
    }
    b->st.steps++;
    b->st.rows += (uint64_t)n;
    if (n > b->st.max_rows) b->st.max_rows = n;
    b->running = 0;
    pthread_cond_broadcast(&b->cv);
}

int decode_batch_step(decode_batch *b, kv_cache *kv, int *pos, int32_t id, float *logits, route_obs *route) {
    batch_entry e = {kv, pos, id, logits, route, 0, 0};
    char err[sizeof b->err];
    pthread_mutex_lock(&b->mu);
    b->pending[b->n_pending++] = &e; /* members <= max_seqs, each with one entry at most */
    while (!e.done) {
        if (!b->running && b->n_pending > 0 && b->n_pending >= b->members) {
            /* every member has its token in: this thread runs the step */
            const int n = b->n_pending;
            memcpy(b->taken, b->pending, (size_t)n * sizeof *b->taken);
            b->n_pending = 0;
            b->running = 1;
            s_run_step(b, n);
        } else {
            pthread_cond_wait(&b->cv, &b->mu);
        }
    }
    /* no later step can finish before this member submits again: err is this step's */
    if (e.rc < 0) memcpy(err, b->err, sizeof err);
    pthread_mutex_unlock(&b->mu);
    return e.rc < 0 ? coli_fail(e.rc, "%s", err) : 0;
}

void decode_batch_get_stats(decode_batch *b, decode_batch_stats *out) {
    pthread_mutex_lock(&b->mu);
    *out = b->st;
    pthread_mutex_unlock(&b->mu);
}
