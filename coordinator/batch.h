/*
 * batch.h - continuous batching: the decode steps of several sequences
 * (contexts, each with its own KV cache and position) run as one forward
 * pass, so the experts' weights are read once per step for all of them.
 *
 * Each generating thread joins the batch, then calls decode_batch_step for
 * every token. A step runs when every member has submitted its token: the
 * last to arrive (the leader) evaluates all rows with forward_eval_rows
 * under the batch's lock (the caller's serialization of the model: coli
 * serve's baton), hands each member its logits and wakes them. A member
 * that joins waits at most one running step; one that leaves no longer
 * holds the others up. Prompts are not batched: a member prefills under the
 * same lock in chunks (decode_batch_lock), which alternate with the steps
 * of the others. A row's bits do not depend on the other rows (the
 * determinism contract), so a sequence gets the same tokens batched or
 * alone.
 */
#ifndef COLI_COORD_BATCH_H
#define COLI_COORD_BATCH_H

#include <stdint.h>

#include "coordinator/forward.h"
#include "coordinator/route_obs.h"

typedef struct decode_batch decode_batch;

typedef void (*decode_lock_fn)(void *user);

typedef struct decode_batch_stats {
    uint64_t steps; /* forward passes run */
    uint64_t rows;  /* tokens they evaluated (rows / steps: the mean batch) */
    int max_rows;   /* the largest step */
    int members;    /* sequences decoding now */
} decode_batch_stats;

/* A batch for up to max_seqs members whose KV caches hold at most n_ctx
 * positions. lock/unlock (both or neither) serialize the model's compute
 * with the caller's other calls; user is passed to them. Returns 0 with
 * *out, COLI_EINVAL or COLI_ENOMEM. */
int decode_batch_new(const model *m, moe_exec *moe, coli_pool *pool, int max_seqs, int n_ctx, decode_lock_fn lock,
                     decode_lock_fn unlock, void *user, decode_batch **out);
void decode_batch_free(decode_batch **b);

void decode_batch_join(decode_batch *b);
void decode_batch_leave(decode_batch *b);
/* The caller's lock around work outside the steps (prefill). */
void decode_batch_lock(decode_batch *b);
void decode_batch_unlock(decode_batch *b);

/* Append id at *pos of kv in the next step; logits (n_vocab) get its row.
 * route: the member's routing observer (route_obs.h), NULL: none; it sees
 * this row's choices as a one-sequence pass would show them, called on the
 * thread that runs the step (the leader), under the caller's lock.
 * Blocks until the step ran. On success *pos moved by 1. Returns 0 or the
 * step's error (set as this thread's error too). The caller is a member. */
int decode_batch_step(decode_batch *b, kv_cache *kv, int *pos, int32_t id, float *logits, route_obs *route);

void decode_batch_get_stats(decode_batch *b, decode_batch_stats *out);

#endif
