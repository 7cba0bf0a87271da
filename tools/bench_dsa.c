/*
 * bench_dsa - what DeepSeek Sparse Attention's lightning indexer costs a
 * decode step at a given context without prefilling all of it: the KV
 * cache of a deepseek32 / glm-dsa model is filled with the rows of a real
 * 256-token prefill, repeated, then decode steps run at
 * positions ctx, ctx + 1, ... (experts in-process; -r repeats, sparse and
 * dense interleaved, the fastest of each kept; process CPU time, which a
 * loaded machine disturbs less than wall time). Per context it prints
 * the step time, the same with top_k raised past the context (every row
 * dense: latent attention over all positions, the indexer's scoring and
 * choice skipped), and the indexer alone (its projections, scores over
 * every position and top-k choice, all layers, timed on the same state).
 *
 *   bench_dsa MODEL [--ctx 256,4096] [--steps 16] [-r 3] [-t THREADS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/forward_impl.h"
#include "coordinator/moe_exec.h"
#include "core/error.h"
#include "core/threadpool.h"

#define MAX_CTX 8
#define PREFILL 256 /* tokens really evaluated to fill a context */

typedef struct opts {
    const char *model;
    int ctx[MAX_CTX], n_ctx, steps, threads, repeat;
} opts;

/* Process CPU time: what the threads computed, whatever else loads the machine. */
static double s_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double s_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int s_parse(int argc, char **argv, opts *o) {
    const char *list = "256,4096";
    *o = (opts){.steps = 16, .threads = 0, .repeat = 3};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ctx") && i + 1 < argc)
            list = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            o->steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            o->repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            o->threads = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !o->model)
            o->model = argv[i];
        else
            return -1;
    }
    for (const char *p = list; *p && o->n_ctx < MAX_CTX; p += strcspn(p, ","), p += *p == ',')
        o->ctx[o->n_ctx++] = atoi(p);
    return o->model && o->steps > 0 && o->repeat > 0 && o->n_ctx > 0 ? 0 : -1;
}

/* The first n positions: a real prefill of PREFILL tokens, its rows
 * repeated after it (the values a prefill writes, so attention's
 * probabilities and the indexer's scores look like a real context's). */
static int s_fill(forward_state *s, kv_cache *kv, int n) {
    const int k = n < PREFILL ? n : PREFILL, V = s->m->hp.n_vocab;
    int32_t ids[PREFILL];
    for (int i = 0; i < k; i++) ids[i] = (int32_t)((i * 7919 + 3) % V);
    int rc = forward_eval(s, kv, ids, k, 0, NULL, 0);
    for (int l = 0; l < kv->n_layer && rc == 0; l++)
        for (int p = k; p < n; p++) kv_cache_store(kv, l, p, 1, kv_cache_k(kv, l, p % k), NULL);
    return rc;
}

typedef struct timing {
    double step_ms, indexer_ms; /* process CPU time per decode step / of the indexer in one */
    double step_wall_ms;
} timing;

/* steps decode steps from position ctx (rewriting the same rows each
 * time), then the indexer alone, as many times; top_k: the indexer's k for
 * this run. The minimum of each figure over earlier runs is kept in *best. */
static int s_steps(forward_state *s, kv_cache *kv, int top_k, int ctx, int steps, float *logits, timing *best) {
    model *m = (model *)s->m;
    const int saved = m->hp.idx_top_k;
    int rc = 0;
    int32_t id = 17;
    m->hp.idx_top_k = top_k;
    double w0 = s_now(), c0 = s_cpu();
    for (int i = 0; i < steps && rc == 0; i++) rc = forward_eval(s, kv, &id, 1, ctx + i, logits, 0);
    const double step_ms = (s_cpu() - c0) * 1e3 / steps, wall_ms = (s_now() - w0) * 1e3 / steps;
    const fwd_rows rows = {.kv = kv, .pos = ctx + steps - 1};
    c0 = s_cpu();
    for (int i = 0; i < steps && rc == 0; i++)
        for (int il = 0; il < m->hp.n_layer && rc == 0; il++)
            if ((rc = forward_dsa_index(s, &m->layers[il], 1)) == 0)
                rc = forward_dsa_select(s, &m->layers[il], &rows, il, 1);
    const double idx_ms = (s_cpu() - c0) * 1e3 / steps;
    m->hp.idx_top_k = saved;
    if (best->step_ms == 0 || step_ms < best->step_ms) best->step_ms = step_ms;
    if (best->indexer_ms == 0 || idx_ms < best->indexer_ms) best->indexer_ms = idx_ms;
    if (best->step_wall_ms == 0 || wall_ms < best->step_wall_ms) best->step_wall_ms = wall_ms;
    return rc;
}

/* One context: filled once, then repeats of the sparse and the all-dense
 * run interleaved. */
static int s_context(model *m, moe_exec *ex, coli_pool *pool, int ctx, const opts *o, timing *sparse, timing *dense) {
    forward_state s;
    kv_cache kv;
    const model_hparams *hp = &m->hp;
    int rc = kv_cache_init(&kv, hp->n_layer, ctx + o->steps, model_k_dim(hp), model_v_dim(hp), hp->mla_absorbed, 0);
    if (rc < 0) return rc;
    if ((rc = forward_state_init(&s, m, ex, pool, PREFILL, ctx + o->steps)) < 0) {
        kv_cache_free(&kv);
        return rc;
    }
    float *logits = malloc((size_t)hp->n_vocab * sizeof(float));
    rc = s_fill(&s, &kv, ctx);
    for (int r = 0; r < o->repeat && rc == 0; r++)
        if ((rc = s_steps(&s, &kv, hp->idx_top_k, ctx, o->steps, logits, sparse)) == 0)
            rc = s_steps(&s, &kv, ctx + o->steps, ctx, o->steps, logits, dense); /* no row past it */
    free(logits);
    forward_state_free(&s);
    kv_cache_free(&kv);
    return rc;
}

int main(int argc, char **argv) {
    opts o;
    model *m = NULL;
    moe_exec *ex = NULL;
    if (s_parse(argc, argv, &o) < 0) {
        fprintf(stderr, "usage: bench_dsa MODEL [--ctx 256,4096] [--steps 16] [-r 3] [-t THREADS]\n");
        return 2;
    }
    if (model_open(o.model, &m) < 0 || m->hp.idx_top_k <= 0) {
        fprintf(stderr, "bench_dsa: %s\n", m ? "not a sparse-attention model" : coli_last_error());
        model_close(&m);
        return 1;
    }
    coli_pool *pool = coli_pool_new(o.threads);
    const moe_exec_config cfg = {.model_path = o.model,
                                 .gguf = m->gguf,
                                 .n_layer = m->hp.n_layer,
                                 .n_expert = m->hp.n_expert,
                                 .n_expert_used = m->hp.n_expert_used,
                                 .n_embd = m->hp.n_embd,
                                 .n_ff = m->hp.n_ff_exp,
                                 .pool = pool,
                                 .n_threads = coli_pool_size(pool)};
    int rc = pool ? moe_exec_inproc_new(&cfg, &ex) : COLI_ENOMEM;
    const int top_k = m->hp.idx_top_k;
    printf("bench_dsa: %s, %d layers, top_k %d, indexer %d x %d, %d threads, %d steps\n", o.model, m->hp.n_layer, top_k,
           m->hp.idx_n_head, m->hp.idx_head_dim, coli_pool_size(pool), o.steps);
    for (int c = 0; c < o.n_ctx && rc == 0; c++) {
        timing sparse = {0}, dense = {0};
        if ((rc = s_context(m, ex, pool, o.ctx[c], &o, &sparse, &dense)) < 0) break;
        printf("ctx %5d: step %8.2f ms cpu (%8.2f ms wall), indexer %6.2f ms cpu = %4.1f%%; every row dense: step "
               "%8.2f ms cpu (%8.2f ms wall)\n",
               o.ctx[c], sparse.step_ms, sparse.step_wall_ms, sparse.indexer_ms,
               100.0 * sparse.indexer_ms / sparse.step_ms, dense.step_ms, dense.step_wall_ms);
    }
    if (rc < 0) fprintf(stderr, "bench_dsa: %s\n", coli_last_error());
    if (ex) ex->destroy(ex);
    coli_pool_destroy(&pool);
    model_close(&m);
    return rc < 0 ? 1 : 0;
}
