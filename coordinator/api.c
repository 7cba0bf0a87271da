/*
 * api.c - include/colibri.h on top of the single-process engine: model.c
 * (weights), tokenizer.c, forward.c (+ kv_cache.c), sampler.c and a
 * moe_exec for the routed experts: contexts, evaluation, the prefix
 * cache, continuous batching, generation. Loading a model, its info, stats
 * and heat are api_model.c's (the handles: api_impl.h);
 * coli_quantize_file lives in quantize.c.
 *
 * Threading: a model owns one compute pool and one expert executor; its
 * contexts share them, so calls on contexts of the same model must not
 * overlap in time (use one model per thread otherwise).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "colibri.h"
#include "coordinator/batch.h"
#include "coordinator/forward.h"
#include "coordinator/imatrix.h"
#include "coordinator/kv_cache.h"
#include "coordinator/model.h"
#include "coordinator/prefix_cache.h"
#include "coordinator/moe_exec.h"
#include "coordinator/route_obs.h"
#include "coordinator/sampler.h"
#include "core/clock.h"
#include "core/prefault.h"
#include "core/settings.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/threadpool.h"
#include "core/tokenizer/tokenizer.h"

#include "coordinator/api_impl.h"

// ---------------------------------------------------------------------------
// tokens

int coli_tokenize(const coli_model *cm, const char *text, size_t len, int add_special, int parse_special, int32_t *ids,
                  int cap, int *n_out) {
    if (!cm || !n_out || (!text && len) || cap < 0 || (!ids && cap > 0))
        return coli_fail(COLI_EINVAL, "coli_tokenize: NULL model/text/ids/n_out or negative cap");
    return coli_tokenizer_encode(cm->tok, text ? text : "", len, add_special, parse_special, ids, cap, n_out);
}

int coli_tokenize_plain(const coli_model *cm, const char *text, size_t len, int add_special,
                        const coli_text_span *plain, int n_plain, int32_t *ids, int cap, int *n_out) {
    if (!cm || !n_out || (!text && len) || cap < 0 || (!ids && cap > 0))
        return coli_fail(COLI_EINVAL, "coli_tokenize_plain: NULL model/text/ids/n_out or negative cap");
    return coli_tokenizer_encode_plain(cm->tok, text ? text : "", len, add_special, plain, n_plain, ids, cap, n_out);
}

int coli_token_to_bytes(const coli_model *cm, int32_t id, const char **bytes, size_t *len) {
    if (!cm || !bytes || !len) return coli_fail(COLI_EINVAL, "coli_token_to_bytes: NULL argument");
    return coli_tokenizer_bytes(cm->tok, id, bytes, len);
}

const char *coli_token_text(const coli_model *cm, int32_t id) { return cm ? coli_tokenizer_text(cm->tok, id) : NULL; }

int coli_token_is_eog(const coli_model *cm, int32_t id) { return cm ? coli_tokenizer_is_eog(cm->tok, id) : 0; }

// ---------------------------------------------------------------------------
// contexts and the forward pass

void coli_context_default_params(coli_context_params *p) {
    if (p) memset(p, 0, sizeof *p);
}

int coli_context_new(coli_model *cm, const coli_context_params *p, coli_context **out) {
    if (!out) return coli_fail(COLI_EINVAL, "coli_context_new: out is NULL");
    *out = NULL;
    if (!cm) return coli_fail(COLI_EINVAL, "coli_context_new: model is NULL");
    if (!cm->m)
        return coli_fail(COLI_EINVAL, "coli_context_new: %s was loaded vocab_only (no weights to run)", cm->name);
    int n_ctx = p && p->n_ctx ? p->n_ctx : cm->n_ctx;
    if (n_ctx < 1 || n_ctx > cm->n_ctx)
        return coli_fail(COLI_EINVAL, "coli_context_new: n_ctx %d: expected 1..%d (the model's context)", n_ctx,
                         cm->n_ctx);
    const model_hparams *hp = &cm->m->hp;
    coli_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return coli_fail(COLI_ENOMEM, "coli_context_new: out of memory");
    ctx->model = cm;
    kv_shape shape;
    model_kv_shape(cm->m, cm->kv_f16, &shape);
    int rc = kv_cache_init_shape(&ctx->kv, &shape, n_ctx);
    if (rc == 0) {
        const int max_batch = n_ctx < FORWARD_MAX_BATCH ? n_ctx : FORWARD_MAX_BATCH;
        rc = forward_state_init(&ctx->fs, cm->m, cm->moe, cm->pool, max_batch, n_ctx);
    }
    ctx->route = (route_obs){.sink = &cm->route, .moe = cm->moe, .ctx_id = cm->route.next_ctx++};
    if (rc == 0 && cm->moe) {
        ctx->fs.route_hook = route_obs_hook;
        ctx->fs.route_user = &ctx->route;
    }
    if (rc == 0 && !(ctx->logits = malloc((size_t)hp->n_vocab * sizeof(float))))
        rc = coli_fail(COLI_ENOMEM, "coli_context_new: out of memory for logits");
    if (rc < 0) {
        coli_context_free(&ctx);
        return rc;
    }
    if (cm->verbose) {
        const size_t per = kv_cache_bytes_per_token(&ctx->kv);
        fprintf(stderr, "colibri: KV cache %s%s: %zu bytes per position, %.1f MiB for %d positions",
                cm->kv_f16 ? "F16" : "F32", hp->mla_absorbed ? " (MLA latent)" : "", per,
                (double)per * n_ctx / 1048576.0, n_ctx);
        if (ctx->kv.n_rec)
            fprintf(stderr, ", + %.2f MiB of recurrent state (%d layers)", kv_cache_rec_bytes(&ctx->kv) / 1048576.0,
                    ctx->kv.n_rec);
        fputc('\n', stderr);
    }
    *out = ctx;
    return 0;
}

void coli_context_free(coli_context **pctx) {
    if (!pctx || !*pctx) return;
    coli_context *ctx = *pctx;
    kv_cache_free(&ctx->kv);
    forward_state_free(&ctx->fs);
    free(ctx->logits);
    free(ctx->text);
    free(ctx);
    *pctx = NULL;
}

void coli_context_reset(coli_context *ctx) {
    if (ctx) ctx->pos = 0; /* old cache rows are overwritten before they are read again */
}

int coli_context_pos(const coli_context *ctx) { return ctx ? ctx->pos : 0; }

/* Take (take 1) or give back the compute lock of one part of an
 * evaluation: b's, else the context's own, if any. */
static void s_part_lock(const coli_context *ctx, decode_batch *b, int take) {
    if (b)
        take ? decode_batch_lock(b) : decode_batch_unlock(b);
    else if (ctx->lock)
        (take ? ctx->lock : ctx->unlock)(ctx->lock_user);
}

/* A prefill of several tokens over recurrent layers stops at each multiple
 * of snap_every and keeps the state there for the prefix cache; a
 * one-token evaluation is a decode step, whose state a cold prefill would
 * compute in another order (the chunked form), so it keeps none. Each part
 * runs under b's lock (or the context's compute lock) and the copy is made
 * after it is released: a copy of the recurrent states (tens of MiB at real
 * sizes) never holds the others up (docs/api.md, Concurrency). */
static int s_eval(coli_context *ctx, const int32_t *ids, int n, float *logits, int logits_all, decode_batch *b) {
    const int every = n > 1 && ctx->kv.n_rec ? ctx->snap_every : 0, n_vocab = ctx->model->m->hp.n_vocab;
    for (int done = 0; done < n;) {
        int part = n - done;
        if (every && (ctx->pos / every + 1) * every < ctx->pos + part) part = (ctx->pos / every + 1) * every - ctx->pos;
        float *out = logits && (logits_all || done + part == n) ? logits : NULL;
        if (out && logits_all) out += (size_t)done * (size_t)n_vocab;
        s_part_lock(ctx, b, 1);
        int rc = forward_eval(&ctx->fs, &ctx->kv, ids + done, part, ctx->pos, out, logits_all);
        s_part_lock(ctx, b, 0);
        if (rc < 0) return rc;
        ctx->pos += part;
        done += part;
        if (every && ctx->pos % every == 0) kv_cache_snapshot(&ctx->kv, ctx->pos);
    }
    return 0;
}

int coli_eval(coli_context *ctx, const int32_t *ids, int n, float *logits, int logits_all) {
    if (!ctx || !ids) return coli_fail(COLI_EINVAL, "coli_eval: context or ids is NULL");
    if (n <= 0) return coli_fail(COLI_EINVAL, "coli_eval: n = %d tokens, expected > 0", n);
    return s_eval(ctx, ids, n, logits, logits_all, NULL);
}

// ---------------------------------------------------------------------------
// prefix cache

struct coli_prefix_cache {
    const coli_model *model;
    prefix_cache *pc;
    int snap_every; /* hybrid models: the prefill positions whose recurrent state a block keeps */
};

int coli_prefix_cache_new(const coli_model *cm, size_t max_bytes, int block_tokens, coli_prefix_cache **out) {
    if (!out) return coli_fail(COLI_EINVAL, "coli_prefix_cache_new: out is NULL");
    *out = NULL;
    if (!cm || !cm->m) return coli_fail(COLI_EINVAL, "coli_prefix_cache_new: no model, or a vocab_only one");
    /* the shape every context of cm gets (coli_context_new) */
    kv_shape shape;
    model_kv_shape(cm->m, cm->kv_f16, &shape);
    coli_prefix_cache *c = calloc(1, sizeof *c);
    if (!c) return coli_fail(COLI_ENOMEM, "coli_prefix_cache_new: out of memory");
    int rc = prefix_cache_new(&shape, block_tokens, max_bytes, &c->pc);
    if (rc < 0) {
        free(c);
        return rc;
    }
    c->model = cm;
    /* hybrid: snapshots where a block ends on a chunk boundary of the recurrence (exact restores) */
    c->snap_every = block_tokens;
    while (c->snap_every % FORWARD_REC_CHUNK) c->snap_every += block_tokens;
    *out = c;
    return 0;
}

void coli_prefix_cache_free(coli_prefix_cache **pc) {
    if (!pc || !*pc) return;
    prefix_cache_free(&(*pc)->pc);
    free(*pc);
    *pc = NULL;
}

int coli_context_restore_prefix(coli_context *ctx, coli_prefix_cache *pc, const int32_t *ids, int n) {
    if (!ctx || !pc || !ids || n < 1 || ctx->model != pc->model)
        return coli_fail(COLI_EINVAL, "coli_context_restore_prefix: NULL argument, n %d < 1, or another model", n);
    ctx->pos = 0;
    ctx->snap_every = pc->snap_every;
    int got = prefix_cache_restore(pc->pc, ctx->prefix_domain, &ctx->kv, ids, n, n - 1);
    if (got > 0) ctx->pos = got;
    return got;
}

int coli_context_save_prefix(coli_context *ctx, coli_prefix_cache *pc, const int32_t *ids, int n) {
    if (!ctx || !pc || (!ids && n > 0) || n < 0 || n > ctx->pos || ctx->model != pc->model)
        return coli_fail(COLI_EINVAL,
                         "coli_context_save_prefix: NULL argument, another model, or n %d outside "
                         "0..%d (the context's position)",
                         n, ctx ? ctx->pos : 0);
    return n ? prefix_cache_store(pc->pc, ctx->prefix_domain, &ctx->kv, ids, n) : 0;
}

void coli_context_set_prefix_domain(coli_context *ctx, uint64_t domain) {
    if (ctx) ctx->prefix_domain = domain;
}

void coli_prefix_cache_get_stats(coli_prefix_cache *pc, coli_prefix_cache_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!pc) return;
    prefix_cache_counters c;
    prefix_cache_get_counters(pc->pc, &c);
    *out = (coli_prefix_cache_stats){c.hit_tokens, c.miss_tokens, c.evicted_tokens, c.stored_tokens,
                                     c.bytes,      c.max_bytes,   c.n_blocks,       c.block_tokens};
}

// ---------------------------------------------------------------------------
// continuous batching

int coli_batch_new(coli_model *cm, int max_seqs, int n_ctx, int prefill_chunk, coli_lock_fn lock, coli_lock_fn unlock,
                   void *user, coli_batch **out) {
    if (!out) return coli_fail(COLI_EINVAL, "coli_batch_new: out is NULL");
    *out = NULL;
    if (!cm || !cm->m || prefill_chunk < 1 || n_ctx < 1 || n_ctx > cm->n_ctx)
        return coli_fail(COLI_EINVAL,
                         "coli_batch_new: no model (or vocab_only), prefill_chunk %d < 1, or n_ctx %d "
                         "outside 1..%d",
                         prefill_chunk, n_ctx, cm ? cm->n_ctx : 0);
    coli_batch *b = calloc(1, sizeof *b);
    if (!b) return coli_fail(COLI_ENOMEM, "coli_batch_new: out of memory");
    int rc = decode_batch_new(cm->m, cm->moe, cm->pool, max_seqs, n_ctx, lock, unlock, user, &b->b);
    if (rc < 0) {
        free(b);
        return rc;
    }
    b->model = cm;
    b->n_ctx = n_ctx;
    b->prefill_chunk = prefill_chunk;
    *out = b;
    return 0;
}

void coli_batch_free(coli_batch **b) {
    if (!b || !*b) return;
    decode_batch_free(&(*b)->b);
    free(*b);
    *b = NULL;
}

int coli_context_set_batch(coli_context *ctx, coli_batch *b) {
    if (!ctx || (b && (b->model != ctx->model || ctx->kv.n_ctx > b->n_ctx)))
        return coli_fail(COLI_EINVAL,
                         "coli_context_set_batch: no context, a batch of another model, or a context "
                         "longer than the batch's %d positions",
                         b ? b->n_ctx : 0);
    ctx->batch = b;
    return 0;
}

void coli_batch_get_stats(coli_batch *b, coli_batch_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!b) return;
    decode_batch_stats st;
    decode_batch_get_stats(b->b, &st);
    *out = (coli_batch_stats){st.steps, st.rows, st.max_rows, st.members};
}

/* Append id (one token) and fill ctx->logits: in the batch's next step, or alone. */
static int s_decode_one(coli_context *ctx, int32_t id) {
    if (!ctx->batch) return coli_eval(ctx, &id, 1, ctx->logits, 0);
    if (id < 0 || id >= ctx->model->m->hp.n_vocab)
        return coli_fail(COLI_ERANGE, "eval: token id %d out of range [0, %d)", id, ctx->model->m->hp.n_vocab);
    return decode_batch_step(ctx->batch->b, &ctx->kv, &ctx->pos, id, ctx->logits,
                             ctx->fs.route_hook ? &ctx->route : NULL);
}

/* A batched context's prompt: all but the last token alone, prefill_chunk
 * at a time (recurrent layers: cut where an unbatched prefill's chunks end
 * too, forward_split) under the batch's lock (recurrent snapshots taken
 * outside it: s_eval); then it joins and the last
 * token is its first step. The caller leaves the batch (also after a
 * failure) if *joined. */
static int s_batched_prompt(coli_context *ctx, const int32_t *prompt, int n, int *joined) {
    decode_batch *b = ctx->batch->b;
    for (int done = 0; done < n - 1;) {
        const int end = forward_split(ctx->model->m, ctx->pos, ctx->pos + n - 1 - done, ctx->batch->prefill_chunk);
        const int chunk = end - ctx->pos;
        int rc = s_eval(ctx, prompt + done, chunk, NULL, 0, b); /* the lock per part, snapshots without it */
        if (rc < 0) return rc;
        done += chunk;
    }
    decode_batch_join(b);
    *joined = 1;
    return s_decode_one(ctx, prompt[n - 1]);
}

/* A prompt without a batch. Recurrent layers: the last token alone too, as
 * a batched prompt's first step has it (a one-token chunk, the recurrent
 * form): the same bits batched or not. Other models: one eval (a row's bits
 * do not depend on the batch). */
static int s_prompt_alone(coli_context *ctx, const int32_t *prompt, int n) {
    if (!ctx->kv.n_rec || n == 1) return coli_eval(ctx, prompt, n, ctx->logits, 0);
    int rc = coli_eval(ctx, prompt, n - 1, NULL, 0);
    return rc < 0 ? rc : coli_eval(ctx, prompt + n - 1, 1, ctx->logits, 0);
}

// ---------------------------------------------------------------------------
// generation

void coli_sampling_default_params(coli_sampling_params *p) {
    if (!p) return;
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->seed = 0;
    p->n_predict = 128;
    p->repeat_penalty = 1.0f;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->repeat_last_n = 64;
    p->min_p = 0.0f;
    p->ignore_eos = 0;
    p->logprobs = 0;
    p->top_logprobs = 0;
    p->logit_filter = NULL;
    p->logit_filter_user = NULL;
}

/* The complete UTF-8 prefix after adding token id's bytes (and, at the last
 * token, whatever incomplete tail is left) into ctx->text. */
static int s_token_text(coli_context *ctx, coli_utf8_stream *us, int32_t id, int last, size_t *len) {
    const char *bytes;
    size_t n;
    int rc = coli_tokenizer_bytes(ctx->model->tok, id, &bytes, &n);
    if (rc < 0) return rc;
    if (n + 16 > ctx->text_cap) {
        char *t = realloc(ctx->text, n + 16);
        if (!t) return coli_fail(COLI_ENOMEM, "generate: out of memory for token text");
        ctx->text = t;
        ctx->text_cap = n + 16;
    }
    *len = coli_utf8_stream_push(us, bytes, n, ctx->text);
    if (last) *len += coli_utf8_stream_flush(us, ctx->text + *len);
    return 0;
}

/* Sample, hand to cb, append to the cache - so after the call the context
 * holds the prompt and every token cb saw. Stops at n_predict, an EOG
 * token, cb's request or a full context. */
static int s_gen_loop(coli_context *ctx, sampler *smp, coli_token_cb cb, void *user, coli_gen_stats *st) {
    coli_utf8_stream us = {0};
    for (int i = 0; i < smp->p.n_predict; i++) {
        if (ctx->pos >= ctx->kv.n_ctx) break; /* no room to keep another token */
        int32_t id = sampler_sample(smp, ctx->logits);
        /* -1: the logit filter allows nothing more (a finished constraint) */
        if (id < 0 || coli_tokenizer_is_eog(ctx->model->tok, id)) {
            st->stopped_by_eog = 1;
            break;
        }
        int rc = sampler_accept(smp, id);
        if (rc < 0) return rc;
        size_t len = 0;
        rc = s_token_text(ctx, &us, id, i + 1 == smp->p.n_predict, &len);
        if (rc < 0) return rc;
        st->n_gen++;
        int stop = cb ? cb(user, id, ctx->text, len) : 0;
        if ((rc = s_decode_one(ctx, id)) < 0) return rc;
        if (stop) break;
    }
    return 0;
}

/* ignore_eos: a logit filter that forbids the end-of-generation ids, then runs the caller's. */
typedef struct eog_mask {
    int32_t *ids;
    int n;
    void (*next)(void *user, float *logits, int n_vocab);
    void *next_user;
} eog_mask;

static void s_mask_eog(void *user, float *logits, int n_vocab) {
    const eog_mask *m = user;
    for (int i = 0; i < m->n; i++) logits[m->ids[i]] = -INFINITY;
    if (m->next) m->next(m->next_user, logits, n_vocab);
}

/* sp, or a copy of it in *own whose filter also masks the EOG ids (allocated into m->ids). */
static int s_eog_params(const coli_context *ctx, const coli_sampling_params *sp, coli_sampling_params *own,
                        eog_mask *m) {
    memset(m, 0, sizeof *m);
    if (!sp || !sp->ignore_eos) return 0;
    int n_vocab = ctx->model->m->hp.n_vocab;
    for (int32_t id = 0; id < n_vocab; id++) {
        if (!coli_tokenizer_is_eog(ctx->model->tok, id)) continue;
        int32_t *t = realloc(m->ids, (size_t)(m->n + 1) * sizeof *t);
        if (!t) return coli_fail(COLI_ENOMEM, "generate: out of memory for the EOG ids");
        m->ids = t;
        m->ids[m->n++] = id;
    }
    *own = *sp;
    m->next = sp->logit_filter;
    m->next_user = sp->logit_filter_user;
    own->logit_filter = s_mask_eog;
    own->logit_filter_user = m;
    return 1;
}

int coli_generate(coli_context *ctx, const int32_t *prompt, int n_prompt, const coli_sampling_params *sp,
                  coli_token_cb cb, void *user, coli_gen_stats *stats) {
    coli_gen_stats st = {0};
    sampler smp;
    if (stats) *stats = st;
    if (!ctx || !prompt || n_prompt <= 0)
        return coli_fail(COLI_EINVAL, "coli_generate: context NULL or empty prompt (n_prompt %d)", n_prompt);
    coli_sampling_params own;
    eog_mask mask;
    int rc = s_eog_params(ctx, sp, &own, &mask);
    if (rc < 0) return rc;
    rc = sampler_init(&smp, rc ? &own : sp, ctx->model->m->hp.n_vocab);
    for (int i = 0; i < n_prompt && rc == 0; i++) rc = sampler_accept(&smp, prompt[i]);
    if (rc < 0) {
        sampler_free(&smp);
        free(mask.ids);
        return rc;
    }
    ctx->gen_smp = &smp;
    double t0 = coli_now_s();
    int joined = 0;
    if (ctx->batch)
        rc = s_batched_prompt(ctx, prompt, n_prompt, &joined);
    else
        rc = s_prompt_alone(ctx, prompt, n_prompt);
    st.n_prompt = n_prompt;
    st.prompt_seconds = coli_now_s() - t0;
    if (rc == 0) {
        t0 = coli_now_s();
        rc = s_gen_loop(ctx, &smp, cb, user, &st);
        st.gen_seconds = coli_now_s() - t0;
    }
    ctx->gen_smp = NULL;
    if (joined) decode_batch_leave(ctx->batch->b);
    sampler_free(&smp);
    free(mask.ids);
    if (stats) *stats = st;
    return rc;
}

int coli_generate_logprobs(const coli_context *ctx, coli_logprob *chosen, coli_logprob *top, int n_top) {
    if (!ctx || !chosen || (n_top > 0 && !top)) return coli_fail(COLI_EINVAL, "coli_generate_logprobs: NULL argument");
    const sampler *smp = ctx->gen_smp;
    if (!smp || !smp->p.logprobs)
        return coli_fail(COLI_EINVAL, "coli_generate_logprobs: no generation with logprobs is running");
    *chosen = smp->chosen;
    int n = n_top < smp->n_top ? n_top : smp->n_top;
    if (n > 0) memcpy(top, smp->top, (size_t)n * sizeof *top);
    return n < 0 ? 0 : n;
}

// ---------------------------------------------------------------------------
// routing: traces and heat (route_obs.c, heat.c)

int coli_context_set_state_copy_callback(coli_context *ctx, coli_state_copy_cb cb, void *user) {
    if (!ctx) return coli_fail(COLI_EINVAL, "coli_context_set_state_copy_callback: context is NULL");
    ctx->kv.copy_hook = cb;
    ctx->kv.copy_user = user;
    return 0;
}

int coli_context_set_compute_lock(coli_context *ctx, coli_lock_fn lock, coli_lock_fn unlock, void *user) {
    if (!ctx || !lock != !unlock)
        return coli_fail(COLI_EINVAL, "coli_context_set_compute_lock: context is NULL, or one of lock and unlock");
    ctx->lock = lock;
    ctx->unlock = unlock;
    ctx->lock_user = user;
    return 0;
}

int coli_set_route_callback(coli_context *ctx, coli_route_cb cb, void *user) {
    if (!ctx) return coli_fail(COLI_EINVAL, "coli_set_route_callback: context is NULL");
    ctx->route.cb = cb;
    ctx->route.user = user;
    return 0;
}
