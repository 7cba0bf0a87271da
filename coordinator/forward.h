/*
 * forward.h - the transformer forward pass over a batch of tokens.
 *
 * A forward_state holds every activation buffer for the largest batch it
 * accepts (the RunState of llama2.c), allocated once per context, so the
 * steady state (decode, one token at a time) allocates nothing. Expert
 * outputs come from a moe_exec; the combination into the residual stream
 * happens here, in top-k slot order (see moe_exec.h).
 */
#ifndef COLI_COORD_FORWARD_H
#define COLI_COORD_FORWARD_H

#include <stdint.h>

#include "coordinator/kv_cache.h"
#include "coordinator/model.h"
#include "coordinator/moe_exec.h"
#include "core/kernels/matmul.h"
#include "core/threadpool.h"

#define FORWARD_MAX_BATCH MOE_EXEC_MAX_TOKENS /* larger evals are run in chunks of this many tokens */
/* Hybrid models: the chunked recurrence of a prefill works on the chunks
 * [k C, (k + 1) C) of positions, C = FORWARD_REC_CHUNK, whatever the
 * passes; a one-token chunk is the recurrent (decode) update. */
#define FORWARD_REC_CHUNK 64

typedef struct forward_state {
    const model *m;
    moe_exec *moe;        /* routed experts (NULL for a dense model) */
    coli_pool *pool;      /* compute threads (may be NULL: caller's thread only) */
    int max_batch;        /* B: rows every buffer below has room for */
    int n_ctx;            /* positions of the KV cache this state serves */
    int n_workers;        /* threads of pool, >= 1 */
    float *h;             /* (B, n_embd) residual stream */
    float *xb;            /* (B, n_embd) normalised input of the current sub-block */
    float *q;             /* (B, q_dim) queries */
    float *k, *v;         /* (B, k_dim), (B, v_dim) keys and values of the new tokens */
    float *attn;          /* (B, attn_dim) attention output, heads concatenated */
    float *mla;           /* deepseek2: (B, n_lora_q + n_lora_kv + n_rot + n_head * (nope + v))
                             MLA intermediates (forward_mla.c); NULL otherwise */
    float *delta;         /* (B, n_embd) what a sub-block adds to h */
    float *rope;          /* (B, n_rot) cos/sin pairs of each token's position */
    float *scores;        /* (n_workers, heads per task, n_ctx) attention scores: heads per
                             task = n_head / n_head_kv, at most 8 (forward.c) */
    float *router;        /* (B, n_expert) router logits, then probabilities */
    float *choice;        /* (2 n_expert) one token's choice values and group scores (router.h) */
    int32_t *sel;         /* (B, n_expert_used) chosen experts, in slot order */
    float *sel_w;         /* (B, n_expert_used) their weights */
    float *moe_y;         /* (B, n_expert_used, n_embd) expert outputs per slot */
    float *shexp;         /* (B, n_embd) shared expert output */
    float *shexp_gate;    /* (B) shared expert gate logits */
    float *qgate;         /* hybrids: (B, 2 q_dim) attn_q's [q | gate] of each head; else NULL */
    float *gdn;           /* hybrids: the Gated DeltaNet buffers (forward_hybrid.c); else NULL */
    coli_scratch scratch; /* prepared matmul inputs */
    struct fwd_dsa *dsa;  /* sparse attention's indexer state (forward_dsa.c); NULL otherwise */
    struct fwd_ds4 *ds4;  /* deepseek4's streams and buffers (forward_ds4.c); NULL otherwise */
    /* kimi-k3 (forward_kimi.c): its residual checkpoints and latent rows, and
     * the current sub-block's input (the residual mix; NULL: h); else NULL */
    struct fwd_kimi *kimi;
    const float *res_in;
    /* Optional observer of the routing (api.c: --route-trace, heat): called after each MoE
     * layer's experts ran, with the batch's choices; sel/w as above, valid during the call. */
    void (*route_hook)(void *user, int layer, int pos0, int n_tok, int k, const int32_t *sel, const float *w);
    void *route_user;
    int pos0; /* position of the current batch's first token */
} forward_state;

/* Allocate the buffers for batches up to max_batch over an n_ctx cache.
 * pool: as many score rows as it has threads. Returns 0 or COLI_ENOMEM. */
int forward_state_init(forward_state *s, const model *m, moe_exec *moe, coli_pool *pool, int max_batch, int n_ctx);
void forward_state_free(forward_state *s);

/* Run ids[0..n) at positions pos..pos+n-1 (the KV cache must hold pos
 * positions already), in chunks of max_batch. logits: NULL, or room for
 * n_vocab floats (logits_all = 0: the last position) or n * n_vocab
 * (logits_all = 1). Returns 0, COLI_ERANGE (bad id, context full) or the
 * executor's error. */
int forward_eval(forward_state *s, kv_cache *kv, const int32_t *ids, int n, int pos, float *logits, int logits_all);

/* One token for each of n sequences in one pass (continuous batching): row
 * t is ids[t] at position pos[t] of kvs[t], which holds pos[t] positions
 * already; the caches are distinct, shaped alike and at most s->n_ctx long;
 * n <= max_batch. Matmuls and the experts run once over all rows (one
 * executor call per layer), attention per row over its own cache; a row's
 * bits are those it gets alone (core/kernels/matmul.h). logits: NULL or (n,
 * n_vocab), row t for sequence t. Returns 0, COLI_EINVAL, COLI_ERANGE or
 * the executor's error; on error the caches' rows at pos[t] may be written
 * (positions have not moved, so they are overwritten later). */
int forward_eval_rows(forward_state *s, kv_cache *const *kvs, const int *pos, const int32_t *ids, int n, float *logits);

/* Where a pass of at most most tokens from pos towards end stops: pos +
 * most, or end if nearer; with recurrent layers, at the last multiple of
 * FORWARD_REC_CHUNK within reach, or (most < FORWARD_REC_CHUNK) at the next
 * one, so that however a prompt is cut into passes (chunked prefill, prefix
 * restores) a cut falls on a chunk boundary and the state after it has the
 * bits of one long prefill. (forward_eval's passes never exceed max_batch:
 * max_batch is 512 or the whole context.) */
int forward_split(const model *m, int pos, int end, int most);

#endif
