/*
 * api_impl.h - the objects behind include/colibri.h's handles, shared by
 * api.c (contexts, evaluation, prefix cache, batching, generation) and
 * api_model.c (loading a model, its info, stats and heat). Nothing else
 * includes it: the rest of the engine sees the parts, not these wrappers.
 */
#ifndef COLI_COORDINATOR_API_IMPL_H
#define COLI_COORDINATOR_API_IMPL_H

#include "colibri.h"
#include "coordinator/batch.h"
#include "coordinator/forward.h"
#include "coordinator/kv_cache.h"
#include "coordinator/model.h"
#include "coordinator/moe_exec.h"
#include "coordinator/route_obs.h"
#include "coordinator/sampler.h"
#include "core/prefault.h"
#include "core/threadpool.h"
#include "core/tokenizer/tokenizer.h"

struct coli_model {
    model *m;              /* mapped, validated weights; NULL when vocab_only */
    gguf_file *vocab_file; /* vocab_only: the mapping the tokenizer was read from */
    char *arch;            /* vocab_only: general.architecture ("" if absent) */
    coli_tokenizer *tok;
    moe_exec *moe;           /* routed experts; NULL for a dense model */
    coli_pool *pool;         /* compute threads for attention and dense matmuls */
    coli_prefault *prefault; /* fills the mapping's page tables after the load (core/prefault.h) */
    int n_threads;
    int kv_f16;
    int n_ctx; /* the model's context, capped by n_ctx_max */
    int verbose;
    char *stats_json_path; /* copy of the param, NULL if none */
    char *name;            /* general.name or the file name */
    char *chat_template;   /* NULL if absent */
    double load_seconds;
    route_sink route; /* heat counts and the routing trace (route_obs.h) */
    char *heat_path;  /* coli_model_params.heat_path, NULL: none */
    int heat_save;    /* write heat_path at free (not when the file there was refused) */
};

struct coli_context {
    coli_model *model;
    kv_cache kv;
    forward_state fs;
    int pos;                /* tokens in the cache */
    float *logits;          /* (n_vocab) last logits, for coli_generate */
    const sampler *gen_smp; /* coli_generate's sampler while it runs (coli_generate_logprobs) */
    char *text;             /* UTF-8 assembly buffer for the callback */
    size_t text_cap;
    route_obs route;           /* what its routing decisions feed (route_obs.h) */
    coli_batch *batch;         /* NULL: coli_generate decodes alone */
    coli_lock_fn lock, unlock; /* in no batch: each evaluation's compute (coli_context_set_compute_lock) */
    void *lock_user;
    uint64_t prefix_domain; /* the prefix cache domain of its restores and saves */
    int snap_every;         /* hybrid models: prefills keep the recurrent state at multiples of this
                               (the prefix cache's blocks, set by a restore; 0: never) */
};

struct coli_batch {
    const coli_model *model;
    decode_batch *b;
    int n_ctx, prefill_chunk;
};

#endif
