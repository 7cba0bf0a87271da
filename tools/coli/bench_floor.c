/*
 * bench_floor.c - the machine's own token-latency floor (coli bench
 * --floor): how steady a decode-shaped load is on this machine with no
 * model at all, measured beside the model's tokens.
 *
 * Why: the latency target (p99/p50 of decode tokens) mixes the engine's
 * tail with the machine's. On a small VM the second can dominate (another
 * guest's memory traffic, a vCPU descheduled by the host, one core shared
 * with system tasks), and no change to the engine moves it. A "token" here
 * is what a decode token is to the pool: n_jobs pool jobs back to back on
 * the same threads, together reading bytes_per_token of a buffer larger
 * than the caches (the weights a token reads), slices handed out
 * dynamically as the matmuls hand out rows. Its p99/p50 is the best the
 * engine's tokens can show on this machine at that moment.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"
#include "core/threadpool.h"
#include "tools/coli/args.h"
#include "tools/coli/bench.h"

#define FLOOR_SLICE (64 * 1024) /* bytes per claim, like a matmul chunk */
#define FLOOR_MIN_BUFFER ((size_t)256 << 20)

typedef struct floor_job {
    const unsigned char *base;
    size_t bytes; /* this job's share */
    atomic_size_t next;
    atomic_ullong sum; /* keeps the reads alive (wrapping) */
} floor_job;

static void s_floor_worker(void *arg, int ith, int nth) {
    (void)ith;
    (void)nth;
    floor_job *j = arg;
    unsigned long long s = 0;
    for (;;) {
        size_t off = atomic_fetch_add_explicit(&j->next, FLOOR_SLICE, memory_order_relaxed);
        if (off >= j->bytes) break;
        size_t n = j->bytes - off < FLOOR_SLICE ? j->bytes - off : FLOOR_SLICE;
        s += bench_sum_bytes(j->base + off, n);
    }
    atomic_fetch_add_explicit(&j->sum, s, memory_order_relaxed);
}

struct bench_floor {
    coli_pool *pool;
    unsigned char *buf;
    size_t buf_bytes, bytes_per_token, pos;
    int n_jobs;
    unsigned long long sink;
};

bench_floor *bench_floor_new(int n_threads, size_t bytes_per_token, int n_jobs) {
    bench_floor *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->bytes_per_token = bytes_per_token < FLOOR_SLICE ? FLOOR_SLICE : bytes_per_token;
    f->buf_bytes = f->bytes_per_token > FLOOR_MIN_BUFFER ? f->bytes_per_token : FLOOR_MIN_BUFFER;
    f->buf_bytes = (f->buf_bytes + 63) & ~(size_t)63;
    f->n_jobs = n_jobs < 1 ? 1 : n_jobs;
    f->pool = coli_pool_new(n_threads);
    if (!f->pool || posix_memalign((void **)&f->buf, 64, f->buf_bytes) != 0) {
        fprintf(stderr, "coli: bench --floor: cannot allocate %.0f MiB and %d threads\n",
                (double)f->buf_bytes / (1 << 20), n_threads);
        bench_floor_free(f);
        return NULL;
    }
    for (size_t i = 0; i < f->buf_bytes; i += 4096) f->buf[i] = (unsigned char)i; /* fault the pages in */
    return f;
}

void bench_floor_free(bench_floor *f) {
    if (!f) return;
    coli_pool_destroy(&f->pool);
    free(f->buf);
    free(f);
}

/* One token: n_jobs jobs over the next bytes_per_token of the buffer
 * (wrapping), so consecutive tokens read memory, not the caches. */
static void s_floor_token(bench_floor *f) {
    const size_t per_job = f->bytes_per_token / (size_t)f->n_jobs & ~(size_t)31;
    for (int k = 0; k < f->n_jobs; k++) {
        if (f->pos + per_job > f->buf_bytes) f->pos = 0;
        floor_job j = {.base = f->buf + f->pos, .bytes = per_job};
        atomic_init(&j.next, 0);
        atomic_init(&j.sum, 0);
        coli_pool_run(f->pool, s_floor_worker, &j);
        f->sink += atomic_load(&j.sum);
        f->pos += per_job;
    }
}

void bench_floor_run(bench_floor *f, int n_tokens, double *lat_s) {
    s_floor_token(f); /* warm-up: wakes the threads, as the model's first token does */
    for (int t = 0; t < n_tokens; t++) {
        const double t0 = coli_now_s();
        s_floor_token(f);
        lat_s[t] = coli_now_s() - t0;
    }
}
