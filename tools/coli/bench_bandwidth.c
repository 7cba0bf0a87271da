/*
 * bench_bandwidth.c - how fast this machine reads memory, the yardstick of
 * decode speed (each decode token must read its weights once).
 *
 * Like STREAM's read kernels: threads sum disjoint slices of one large
 * buffer with wide vector loads and four independent accumulators, so the
 * loop is bound by memory, not by the adds. Pages are touched before the
 * timed passes (first-touch by the thread that later reads them).
 *
 * A pass lasts from the first thread's start to the last thread's end, and
 * the figure is the buffer over the fastest such pass. (Each thread's own
 * fastest pass is not a sound measure: on a loaded machine the threads'
 * best passes may not overlap, and a slice read alone gets the whole
 * memory system, which overstated two threads by up to 2x.)
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/args.h"
#include "tools/coli/bench.h"
#include "core/clock.h"

#define BW_MAX_PASSES 16

/* Slices are handed out in 32-byte units (one AVX2 load). */
typedef struct {
    unsigned long long q[4]; /* unsigned: the sums of arbitrary bytes wrap, no overflow */
} v4i64;

typedef struct bw_sync {
    atomic_int gen, n_done, abort;
} bw_sync;

typedef struct bw_thread {
    pthread_t tid;
    bw_sync *sync;
    const v4i64 *p;
    size_t n; /* vectors in this slice */
    int passes;
    double start[BW_MAX_PASSES], end[BW_MAX_PASSES]; /* of each pass, coli_now_s() */
    unsigned long long sink;                         /* keeps the sums alive */
} bw_thread;

#if defined(__x86_64__)
#include <immintrin.h>
/* AVX2 loads with four independent accumulators (built for AVX2 only here,
 * used when the CPU has it). */
__attribute__((target("avx2"))) static unsigned long long sum_avx2(const v4i64 *p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    const __m256i *v = (const __m256i *)p;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a = _mm256_add_epi64(a, _mm256_load_si256(v + i));
        b = _mm256_add_epi64(b, _mm256_load_si256(v + i + 1));
        c = _mm256_add_epi64(c, _mm256_load_si256(v + i + 2));
        d = _mm256_add_epi64(d, _mm256_load_si256(v + i + 3));
    }
    for (; i < n; i++) a = _mm256_add_epi64(a, _mm256_load_si256(v + i));
    a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
    unsigned long long s[4];
    _mm256_storeu_si256((__m256i *)s, a);
    return s[0] + s[1] + s[2] + s[3];
}
#endif

/* Portable: 64-bit loads, eight accumulators. */
static unsigned long long s_sum_scalar(const v4i64 *p, size_t n) {
    unsigned long long a[8] = {0};
    for (size_t i = 0; i + 2 <= n; i += 2)
        for (int k = 0; k < 8; k++) a[k] += p[i + k / 4].q[k % 4];
    if (n % 2)
        for (int k = 0; k < 4; k++) a[k] += p[n - 1].q[k];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

static unsigned long long s_sum_slice(const v4i64 *p, size_t n) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) return sum_avx2(p, n);
#endif
    return s_sum_scalar(p, n);
}

unsigned long long bench_sum_bytes(const void *p, size_t bytes) { return s_sum_slice(p, bytes / sizeof(v4i64)); }

static void *s_bw_main(void *arg) {
    bw_thread *t = arg;
    memset((void *)t->p, 1, t->n * sizeof(v4i64)); /* first touch: fault the pages in */
    t->sink = s_sum_slice(t->p, t->n);             /* warm-up pass */
    atomic_fetch_add(&t->sync->n_done, 1);
    for (int k = 0; k < t->passes; k++) {
        while (atomic_load(&t->sync->gen) <= k)
            if (atomic_load(&t->sync->abort))
                return NULL;
            else
                sched_yield();
        t->start[k] = coli_now_s();
        t->sink += s_sum_slice(t->p, t->n);
        t->end[k] = coli_now_s();
        atomic_fetch_add(&t->sync->n_done, 1);
    }
    return NULL;
}

/* The fastest pass of all the threads together: first start to last end. */
static double s_fastest_pass_s(const bw_thread *th, int n, int passes) {
    double best = 1e30;
    for (int k = 0; k < passes; k++) {
        double t0 = th[0].start[k], t1 = th[0].end[k];
        for (int i = 1; i < n; i++) {
            if (th[i].start[k] < t0) t0 = th[i].start[k];
            if (th[i].end[k] > t1) t1 = th[i].end[k];
        }
        if (t1 - t0 < best) best = t1 - t0;
    }
    return best > 0 ? best : 1e-9;
}

int bench_read_bandwidth(int n_threads, int mib, int passes, double *gbs) {
    if (passes > BW_MAX_PASSES) passes = BW_MAX_PASSES;
    const size_t bytes = (size_t)mib << 20, n_vec = bytes / sizeof(v4i64);
    v4i64 *buf = NULL;
    bw_thread *th = calloc((size_t)n_threads, sizeof *th);
    if (!th || posix_memalign((void **)&buf, 4096, bytes) != 0) {
        free(th);
        fprintf(stderr, "coli: bandwidth test: cannot allocate %d MiB\n", mib);
        return CLI_FAIL;
    }
    bw_sync sync;
    atomic_init(&sync.gen, 0);
    atomic_init(&sync.n_done, 0);
    atomic_init(&sync.abort, 0);
    int started = 0, rc = 0;
    for (int i = 0; i < n_threads; i++) {
        const size_t lo = n_vec * (size_t)i / (size_t)n_threads, hi = n_vec * (size_t)(i + 1) / (size_t)n_threads;
        th[i] = (bw_thread){.sync = &sync, .p = buf + lo, .n = hi - lo, .passes = passes};
        if (pthread_create(&th[i].tid, NULL, s_bw_main, &th[i]) != 0) {
            rc = CLI_FAIL;
            break;
        }
        started++;
    }
    if (rc) {
        fprintf(stderr, "coli: bandwidth test: cannot start thread %d of %d\n", started + 1, n_threads);
        atomic_store(&sync.abort, 1);
    }
    for (int k = 0; !rc && k < passes; k++) {
        while (atomic_load(&sync.n_done) < started * (k + 1)) sched_yield();
        atomic_store(&sync.gen, k + 1);
    }
    unsigned long long sink = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(th[i].tid, NULL);
        sink += th[i].sink;
    }
    if (!rc) *gbs = (double)bytes / s_fastest_pass_s(th, started, passes) / 1e9;
    if (sink == 42) fputc(' ', stderr); /* the sums must not be optimised away */
    free(buf);
    free(th);
    return rc;
}
