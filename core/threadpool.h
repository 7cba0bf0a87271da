/*
 * threadpool.h - a persistent pool of compute threads.
 *
 * Threads are created once; a job wakes them (spin briefly, then sleep on a
 * futex/condvar), so there is no thread creation or allocation per token.
 * The calling thread takes part as thread 0.
 */
#ifndef COLI_CORE_THREADPOOL_H
#define COLI_CORE_THREADPOOL_H

typedef struct coli_pool coli_pool;

/* fn(arg, ith, nth) runs once on each of nth threads, ith in [0, nth). */
typedef void (*coli_pool_fn)(void *arg, int ith, int nth);

/* n_threads <= 0: one per online core. NULL on failure (coli_last_error). */
coli_pool *coli_pool_new(int n_threads);
void coli_pool_destroy(coli_pool **pool);
int coli_pool_size(const coli_pool *pool);
/* Run fn on every thread of the pool and return when all are done.
 * pool may be NULL: fn(arg, 0, 1) runs on the caller. Not reentrant. */
void coli_pool_run(coli_pool *pool, coli_pool_fn fn, void *arg);
/* Run a job whose fn takes its work itself from a shared counter (so any
 * subset of the threads may do all of it): the caller runs fn, then waits
 * only for the threads that started it meanwhile; the others never run it.
 * On cores shared with other processes a descheduled thread then holds up
 * nobody, where coli_pool_run must wait for it to run its share. fn's ith is
 * still distinct per thread, but some ith may not run at all. */
void coli_pool_run_claimed(coli_pool *pool, coli_pool_fn fn, void *arg);
/* Every pool of this process stops spinning for its next job: its idle
 * threads sleep at once instead of after their spin (~40 us). Call it before
 * waiting on another process (a worker computing the experts, a coordinator
 * running attention): on a machine with as many cores as compute threads,
 * a spinner takes the core that process computes on. The next job wakes the
 * threads as usual (a futex wake instead of a spin hit). */
void coli_pool_stand_down(void);

#endif
