/*
 * threadpool.c - persistent compute threads; see threadpool.h.
 *
 * A job is announced by bumping a generation counter. Workers spin on it
 * for a short while (a decode step issues jobs back to back, and waking a
 * sleeping thread costs tens of microseconds), then sleep on a condition
 * variable so an idle pool costs no CPU. The caller runs share 0 itself,
 * then waits for the others the same way: spin, then sleep.
 *
 * A claimed job (coli_pool_run_claimed) is one whose fn takes its work from
 * a shared counter, so it does not matter which threads run it. The caller
 * closes it when its own fn returns (the work is all taken) and waits only
 * for the threads that joined it by then; a thread that was not running (the
 * cores are shared with other processes, or with other pools) never joins.
 * Joining is a Dekker handshake on two sequentially consistent atomics: a
 * thread counts itself in `joined`, then checks that the job is still open;
 * the caller closes it, then waits for `joined` to drain. Either the caller
 * sees the thread counted, or the thread sees the job closed.
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* ~20-50 us of spinning before sleeping: long enough to catch the next
 * matmul of a decode step, short enough not to steal a busy core */
#define SPIN_ROUNDS 2048
#define MAX_THREADS 512

/* The pool that started the latest job in this process. A worker of any
 * other pool stops spinning and sleeps at once: in-process, the forward
 * pass's pool and the cpu plugin's pool take turns on the same cores, and a
 * thread spinning for the idle pool would steal a core from the busy one. */
static _Atomic(struct coli_pool *) s_active;

/* A job word: the job's number times 2, plus 1 for a claimed job. */
#define JOB_CLAIMED 1u

struct coli_pool {
    int n;              /* threads including the caller */
    pthread_t *threads; /* n - 1 workers */
    coli_pool_fn fn;    /* the current job */
    void *arg;
    atomic_uint generation;   /* the current job's word, bumped by 2 per job */
    atomic_int n_done;        /* workers finished with the current job (a job that is not claimed) */
    atomic_uint open_job;     /* the claimed job threads may still join (its word), 0 once closed */
    atomic_int joined;        /* threads inside a claimed job, or checking whether they may enter */
    atomic_int stop;          /* set by destroy */
    pthread_mutex_t mutex;    /* guards sleeping on the two conditions */
    pthread_cond_t job_cond;  /* workers sleep here waiting for a job */
    pthread_cond_t done_cond; /* the caller sleeps here waiting for workers */
};

typedef struct worker_arg {
    coli_pool *pool;
    int ith;
} worker_arg;

static unsigned s_wait_for_job(coli_pool *p, unsigned seen) {
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        unsigned g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen) return g;
        if (atomic_load_explicit(&s_active, memory_order_relaxed) != p) break;
        CPU_RELAX();
    }
    pthread_mutex_lock(&p->mutex);
    unsigned g;
    while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen)
        pthread_cond_wait(&p->job_cond, &p->mutex);
    pthread_mutex_unlock(&p->mutex);
    return g;
}

/* Join claimed job `job` if it is still open: run it, then leave. */
static void s_join_claimed(coli_pool *p, unsigned job, int ith) {
    atomic_fetch_add(&p->joined, 1); /* seq_cst: the handshake's first half */
    if (atomic_load(&p->open_job) == job) p->fn(p->arg, ith, p->n);
    if (atomic_fetch_sub_explicit(&p->joined, 1, memory_order_acq_rel) == 1) {
        pthread_mutex_lock(&p->mutex); /* the caller may be asleep waiting for the last one */
        pthread_cond_signal(&p->done_cond);
        pthread_mutex_unlock(&p->mutex);
    }
}

static void *s_worker_main(void *varg) {
    worker_arg wa = *(worker_arg *)varg;
    free(varg);
    coli_pool *p = wa.pool;
    unsigned seen = 0;
    for (;;) {
        seen = s_wait_for_job(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        if (seen & JOB_CLAIMED) { /* it may be over, even replaced: s_join_claimed checks */
            s_join_claimed(p, seen, wa.ith);
            continue;
        }
        p->fn(p->arg, wa.ith, p->n);
        if (atomic_fetch_add_explicit(&p->n_done, 1, memory_order_acq_rel) + 1 == p->n - 1) {
            /* last one: wake the caller if it went to sleep */
            pthread_mutex_lock(&p->mutex);
            pthread_cond_signal(&p->done_cond);
            pthread_mutex_unlock(&p->mutex);
        }
    }
    return NULL;
}

/* Publish the next job (claimed: its word odd) and wake the sleepers. */
static unsigned s_announce(coli_pool *p, unsigned claimed) {
    pthread_mutex_lock(&p->mutex);
    unsigned job = ((atomic_load_explicit(&p->generation, memory_order_relaxed) >> 1) + 1) << 1 | claimed;
    if (job >> 1 == 0) job = 2u | claimed; /* after wrapping: never 0 or 1, which mean "closed" to open_job */
    if (claimed) atomic_store(&p->open_job, job);
    atomic_store_explicit(&p->generation, job, memory_order_release);
    pthread_cond_broadcast(&p->job_cond);
    pthread_mutex_unlock(&p->mutex);
    return job;
}

/* The cores this process may run on: its affinity mask (taskset, a cpuset
 * cgroup: a remote host given 4 of 16 cores), else the cores online. More
 * threads than that only take turns on the same cores. */
static int s_online_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) n = CPU_COUNT(&set);
    return n < 1 ? 1 : (n > MAX_THREADS ? MAX_THREADS : (int)n);
}

/* Stop and join the first n_started workers, free everything. */
static void s_pool_teardown(coli_pool *p, int n_started) {
    coli_pool *expected = p;
    atomic_compare_exchange_strong(&s_active, &expected, NULL);
    atomic_store_explicit(&p->stop, 1, memory_order_release);
    s_announce(p, 0);
    for (int i = 0; i < n_started; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->job_cond);
    pthread_cond_destroy(&p->done_cond);
    pthread_mutex_destroy(&p->mutex);
    free(p->threads);
    free(p);
}

coli_pool *coli_pool_new(int n_threads) {
    if (n_threads <= 0) n_threads = s_online_cores();
    if (n_threads > MAX_THREADS) {
        coli_fail(COLI_EINVAL, "thread pool: %d threads requested, at most %d", n_threads, MAX_THREADS);
        return NULL;
    }
    coli_pool *p = calloc(1, sizeof *p);
    if (!p) {
        coli_fail(COLI_ENOMEM, "thread pool: out of memory");
        return NULL;
    }
    p->n = n_threads;
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        coli_fail(COLI_ENOMEM, "thread pool: out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->job_cond, NULL);
    pthread_cond_init(&p->done_cond, NULL);
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        int rc = wa ? 0 : -1;
        if (wa) {
            *wa = (worker_arg){p, i};
            rc = pthread_create(&p->threads[i - 1], NULL, s_worker_main, wa);
            if (rc) free(wa);
        }
        if (rc) {
            s_pool_teardown(p, i - 1);
            coli_fail(COLI_ENOMEM, "thread pool: cannot start thread %d of %d", i, n_threads);
            return NULL;
        }
    }
    return p;
}

void coli_pool_destroy(coli_pool **pool) {
    if (!pool || !*pool) return;
    s_pool_teardown(*pool, (*pool)->n - 1);
    *pool = NULL;
}

int coli_pool_size(const coli_pool *pool) { return pool ? pool->n : 1; }

static void s_wait_for_workers(coli_pool *p) {
    const int want = p->n - 1;
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        if (atomic_load_explicit(&p->n_done, memory_order_acquire) == want) return;
        CPU_RELAX();
    }
    pthread_mutex_lock(&p->mutex);
    while (atomic_load_explicit(&p->n_done, memory_order_acquire) != want) pthread_cond_wait(&p->done_cond, &p->mutex);
    pthread_mutex_unlock(&p->mutex);
}

/* Until no thread is inside a claimed job or deciding whether to enter one. */
static void s_wait_for_joined(coli_pool *p) {
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        if (atomic_load(&p->joined) == 0) return;
        CPU_RELAX();
    }
    pthread_mutex_lock(&p->mutex);
    while (atomic_load(&p->joined) != 0) pthread_cond_wait(&p->done_cond, &p->mutex);
    pthread_mutex_unlock(&p->mutex);
}

void coli_pool_stand_down(void) { atomic_store_explicit(&s_active, NULL, memory_order_relaxed); }

/* Start job fn on pool (claimed or not), the caller taking part as thread 0;
 * returns when the caller's share is done. */
static void s_run_job(coli_pool *pool, coli_pool_fn fn, void *arg, unsigned claimed) {
    if (atomic_load_explicit(&s_active, memory_order_relaxed) != pool)
        atomic_store_explicit(&s_active, pool, memory_order_relaxed);
    s_wait_for_joined(pool); /* a thread still checking a closed claimed job would read fn next */
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    s_announce(pool, claimed);
    fn(arg, 0, pool->n);
}

void coli_pool_run(coli_pool *pool, coli_pool_fn fn, void *arg) {
    if (!pool || pool->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    s_run_job(pool, fn, arg, 0);
    s_wait_for_workers(pool);
}

void coli_pool_run_claimed(coli_pool *pool, coli_pool_fn fn, void *arg) {
    if (!pool || pool->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    s_run_job(pool, fn, arg, JOB_CLAIMED);
    atomic_store(&pool->open_job, 0); /* seq_cst: the handshake's second half */
    s_wait_for_joined(pool);
}
