/*
 * bench_batch.c - `coli bench --batch 1,2,4,8`: continuous-batching decode
 * without HTTP. For each level N, N contexts generate greedily on their own
 * threads through one coli_batch (coli serve's path minus the server), so
 * every step is one forward pass over N rows. Reports the step time, the
 * aggregate tok/s and its ratio to the first level; repeats run the levels
 * interleaved so a noisy machine slows them alike.
 */
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "core/clock.h"
#include "tools/coli/bench.h"
#include "tools/coli/args.h"
#include "tools/coli/commands.h"

#define BATCH_MAX_SEQS 64

typedef struct batch_seq {
    coli_context *ctx;
    coli_sampling_params sp;
    int32_t prompt;
    int rc;
    coli_gen_stats st;
} batch_seq;

static void *s_seq_main(void *arg) {
    batch_seq *q = arg;
    q->rc = coli_generate(q->ctx, &q->prompt, 1, &q->sp, NULL, NULL, &q->st);
    return NULL;
}

/* Distinct experts per (step, MoE layer), from the route callbacks: the
 * events of one step arrive layer by layer, each layer's rows in turn, on
 * the thread running the step; a new group starts when the layer changes or
 * a sequence comes again. Needs n_expert <= 64 (else nothing is counted). */
typedef struct union_tally {
    pthread_mutex_t mu;
    int layer;
    uint64_t experts, seqs;   /* the open group's experts and sequences (bits) */
    uint64_t groups, in_sets; /* closed groups, the sum of their distinct experts */
} union_tally;

typedef struct seq_route {
    union_tally *t;
    int index; /* the sequence's bit */
} seq_route;

static void s_close_group(union_tally *t) {
    if (t->seqs) t->groups++, t->in_sets += (uint64_t)__builtin_popcountll(t->experts);
    t->experts = t->seqs = 0;
}

static void s_on_route(void *user, const coli_route_event *ev) {
    const seq_route *r = user;
    union_tally *t = r->t;
    pthread_mutex_lock(&t->mu);
    if (ev->layer != t->layer || (t->seqs >> r->index & 1)) s_close_group(t);
    t->layer = ev->layer;
    t->seqs |= 1ull << r->index;
    for (int j = 0; j < ev->k; j++)
        if (ev->experts[j] >= 0 && ev->experts[j] < 64) t->experts |= 1ull << ev->experts[j];
    pthread_mutex_unlock(&t->mu);
}

/* The batch's compute lock: the bench holds it while a level's sequences
 * join, so that every step after the first has all of them. */
static void s_lock(void *user) { pthread_mutex_lock(user); }
static void s_unlock(void *user) { pthread_mutex_unlock(user); }

/* CPU seconds (user + system) this process has used so far: on a shared
 * machine a steadier measure of work than the wall clock (in-process
 * experts only: a worker's time is its own process's). */
static double s_cpu_s(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) * 1e-6;
}

/* One level: n contexts of b decode n_decode tokens each, together. The
 * wall and CPU time (s), steps and rows of the run in *wall, *cpu, *steps,
 * *rows. */
static int s_run_level(coli_batch *b, pthread_mutex_t *mu, coli_context **ctxs, int n, int n_decode, int n_vocab,
                       double *wall, double *cpu, uint64_t *steps, uint64_t *rows) {
    batch_seq seqs[BATCH_MAX_SEQS];
    pthread_t th[BATCH_MAX_SEQS];
    coli_batch_stats before, after, now;
    coli_batch_get_stats(b, &before);
    for (int i = 0; i < n; i++) {
        seqs[i] = (batch_seq){.ctx = ctxs[i], .prompt = (int32_t)((1 + 7919 * i) % n_vocab)};
        coli_context_reset(ctxs[i]);
        coli_sampling_default_params(&seqs[i].sp);
        seqs[i].sp.temperature = 0;          /* greedy */
        seqs[i].sp.n_predict = n_decode - 1; /* + the prompt token: n_decode rows */
        seqs[i].sp.ignore_eos = 1;           /* every sequence runs the full length */
    }
    pthread_mutex_lock(mu);
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, s_seq_main, &seqs[i]);
    do { /* a one-token prompt: each joins at once, then waits for the lock */
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
        coli_batch_get_stats(b, &now);
    } while (now.members < n);
    const double t0 = coli_now_s(), c0 = s_cpu_s();
    pthread_mutex_unlock(mu);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    *wall = coli_now_s() - t0;
    *cpu = s_cpu_s() - c0;
    coli_batch_get_stats(b, &after);
    *steps = after.steps - before.steps;
    *rows = after.rows - before.rows;
    for (int i = 0; i < n; i++)
        if (seqs[i].rc != 0) return cli_fail();
    return 0;
}

typedef struct level_result {
    double tok_s[BENCH_BATCH_MAX_REPEAT], step_ms[BENCH_BATCH_MAX_REPEAT];
    double cpu_ms[BENCH_BATCH_MAX_REPEAT]; /* CPU ms per row (token) */
    uint64_t groups, in_sets;              /* union_tally's, over the repeats */
    uint64_t steps, rows;
} level_result;

/* Weight MB one step of level r reads per row: the dense tensors once, the
 * routed experts' share by the distinct experts per layer (k per token
 * alone); 0 when not counted. */
static double s_mb_per_row(const level_result *r, const bench_bytes *by, int k) {
    if (!r->groups || !r->rows || k <= 0) return 0;
    const double in_set = (double)r->in_sets / (double)r->groups;
    const double step = (double)(by->per_token - by->experts) + (double)by->experts * in_set / k;
    return step / ((double)r->rows / (double)r->steps) / 1e6;
}

static void s_report(const bench_batch_opts *o, level_result *res, const bench_bytes *by, int k, double load0,
                     double load1) {
    printf("coli bench --batch: %s, devices %s, %d threads, %d tokens per sequence, %d repeats\n", o->model, o->devices,
           o->n_threads, o->n_decode, o->repeat);
    printf("| rows | steps | mean rows/step | step ms | aggregate tok/s | x first | CPU ms/token | x first (CPU) "
           "| experts/layer/step | weight MB/token | x first (bytes) |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    double first = 0, first_cpu = 0, first_mb = 0;
    for (int l = 0; l < o->n_levels; l++) {
        level_result *r = &res[l];
        const double tok = bench_quantile(r->tok_s, o->repeat, 0.5), ms = bench_quantile(r->step_ms, o->repeat, 0.5);
        const double cpu = bench_quantile(r->cpu_ms, o->repeat, 0.5), mb = s_mb_per_row(r, by, k);
        if (l == 0) first = tok, first_cpu = cpu, first_mb = mb;
        printf("| %d | %llu | %.2f | %.2f | %.1f | %.2f | %.2f | %.2f | %.2f | %.1f | %.2f |\n", o->levels[l],
               (unsigned long long)r->steps, r->steps ? (double)r->rows / (double)r->steps : 0.0, ms, tok,
               first > 0 ? tok / first : 0.0, cpu, cpu > 0 ? first_cpu / cpu : 0.0,
               r->groups ? (double)r->in_sets / (double)r->groups : 0.0, mb, mb > 0 ? first_mb / mb : 0.0);
    }
    printf(
        "(medians over the repeats; CPU: this process's user + system time, not a worker's; bytes: what the\n"
        " distinct experts per step and the dense tensors weigh per row, the ratio a bandwidth-bound step allows)\n");
    if (o->gbs > 0) {
        printf("read bandwidth %.2f GB/s: a bandwidth-bound step would reach", o->gbs);
        for (int l = 0; l < o->n_levels; l++) {
            const double mb = s_mb_per_row(&res[l], by, k);
            printf("%s %.1f tok/s at %d", l ? "," : "", mb > 0 ? o->gbs * 1e3 / mb : 0.0, o->levels[l]);
        }
        printf("\n");
    }
    printf("load average %.2f before, %.2f after\n", load0, load1);
}

static double s_loadavg(void) {
    double v = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &v) != 1) v = -1;
    if (f) fclose(f);
    return v;
}

static int s_open(const bench_batch_opts *o, int max_n, pthread_mutex_t *mu, coli_model **m, coli_batch **b,
                  coli_context **ctxs, coli_model_info *info) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = o->devices;
    mp.n_threads = o->n_threads;
    mp.xdna = o->xdna;
    if (coli_model_load(o->model, &mp, m) != 0) return cli_fail();
    coli_model_get_info(*m, info);
    const int n_ctx = o->n_decode + 2;
    if (n_ctx > info->n_ctx) {
        fprintf(stderr, "coli bench: -n: %d tokens do not fit the model's context (%d)\n", o->n_decode, info->n_ctx);
        return CLI_FAIL;
    }
    if (coli_batch_new(*m, max_n, n_ctx, 64, s_lock, s_unlock, mu, b) != 0) return cli_fail();
    coli_context_params cp = {.n_ctx = n_ctx};
    for (int i = 0; i < max_n; i++)
        if (coli_context_new(*m, &cp, &ctxs[i]) != 0 || coli_context_set_batch(ctxs[i], *b) != 0) return cli_fail();
    return 0;
}

int bench_batch(const bench_batch_opts *o) {
    int max_n = 1;
    for (int l = 0; l < o->n_levels; l++)
        if (o->levels[l] > max_n) max_n = o->levels[l];
    coli_model *m = NULL;
    coli_batch *b = NULL;
    coli_context *ctxs[BATCH_MAX_SEQS] = {0};
    static level_result res[BENCH_BATCH_MAX_LEVELS];
    memset(res, 0, sizeof res);
    coli_model_info info = {0};
    bench_bytes by;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static union_tally tally = {PTHREAD_MUTEX_INITIALIZER, -1, 0, 0, 0, 0};
    seq_route routes[BATCH_MAX_SEQS];
    int rc = bench_decode_bytes(o->model, &by);
    if (!rc) rc = s_open(o, max_n, &mu, &m, &b, ctxs, &info);
    const int count = info.n_expert > 0 && info.n_expert <= 64;
    for (int i = 0; i < max_n && !rc && count; i++) {
        routes[i] = (seq_route){&tally, i};
        if (coli_set_route_callback(ctxs[i], s_on_route, &routes[i]) != 0) rc = cli_fail();
    }
    const double load0 = s_loadavg();
    for (int r = 0; r < o->repeat && !rc; r++)
        for (int l = 0; l < o->n_levels && !rc; l++) {
            double wall = 0, cpu = 0;
            uint64_t steps = 0, rows = 0;
            s_close_group(&tally);
            const uint64_t g0 = tally.groups, s0 = tally.in_sets;
            rc = s_run_level(b, &mu, ctxs, o->levels[l], o->n_decode, info.n_vocab, &wall, &cpu, &steps, &rows);
            s_close_group(&tally); /* the threads are joined: no event can race this */
            res[l].groups += tally.groups - g0;
            res[l].in_sets += tally.in_sets - s0;
            res[l].tok_s[r] = (double)rows / wall;
            res[l].cpu_ms[r] = rows ? cpu * 1e3 / (double)rows : 0;
            res[l].step_ms[r] = steps ? wall * 1e3 / (double)steps : 0;
            res[l].steps += steps;
            res[l].rows += rows;
        }
    if (!rc) s_report(o, res, &by, info.n_expert_used, load0, s_loadavg());
    for (int i = 0; i < max_n; i++) coli_context_free(&ctxs[i]);
    coli_batch_free(&b);
    coli_model_free(&m);
    return rc;
}
