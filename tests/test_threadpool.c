/*
 * test_threadpool.c - every thread index runs exactly once per job, for
 * many jobs in a row, and the pool's edges (NULL, one thread) behave.
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include <criterion/criterion.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "core/threadpool.h"

typedef struct count_job {
    atomic_int hits[16];
    atomic_int bad_nth;
    int want_nth;
} count_job;

static void count_fn(void *arg, int ith, int nth) {
    count_job *j = arg;
    if (nth != j->want_nth || ith < 0 || ith >= 16) {
        atomic_fetch_add(&j->bad_nth, 1);
        return;
    }
    atomic_fetch_add(&j->hits[ith], 1);
}

static void check_pool(int n) {
    coli_pool *p = coli_pool_new(n);
    cr_assert_not_null(p);
    cr_assert_eq(coli_pool_size(p), n);
    for (int rep = 0; rep < 400; rep++) {
        count_job j;
        memset(&j, 0, sizeof j);
        j.want_nth = n;
        coli_pool_run(p, count_fn, &j);
        /* run returns only after every thread finished: counts are final */
        cr_assert_eq(atomic_load(&j.bad_nth), 0, "wrong nth");
        for (int i = 0; i < 16; i++)
            cr_assert_eq(atomic_load(&j.hits[i]), i < n ? 1 : 0, "pool %d rep %d: ith %d ran %d times", n, rep, i,
                         atomic_load(&j.hits[i]));
        if (rep % 100 == 99) usleep(5000); /* let workers fall asleep, then wake them */
    }
    coli_pool_destroy(&p);
    cr_assert_null(p);
}

Test(threadpool, one_thread) { check_pool(1); }
Test(threadpool, two_threads) { check_pool(2); }
Test(threadpool, three_threads) { check_pool(3); }

Test(threadpool, null_pool_runs_on_caller) {
    count_job j;
    memset(&j, 0, sizeof j);
    j.want_nth = 1;
    coli_pool_run(NULL, count_fn, &j);
    cr_assert_eq(atomic_load(&j.hits[0]), 1);
    cr_assert_eq(coli_pool_size(NULL), 1);
}

Test(threadpool, destroy_accepts_null) {
    coli_pool *p = NULL;
    coli_pool_destroy(&p);
    coli_pool_destroy(NULL);
    p = coli_pool_new(3);
    coli_pool_destroy(&p); /* never ran a job */
    cr_assert_null(p);
}

Test(threadpool, default_size_is_online_cores) {
    coli_pool *p = coli_pool_new(0);
    cr_assert_not_null(p);
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    cr_assert_eq(coli_pool_size(p), CPU_COUNT(&set));
    coli_pool_destroy(&p);
}

/* A process allowed one core (taskset, a cpuset: a host given part of a
 * machine) gets one thread by default, not one per core online. */
Test(threadpool, default_size_follows_the_affinity_mask) {
    cpu_set_t one;
    CPU_ZERO(&one);
    cr_assert_eq(sched_getaffinity(0, sizeof one, &one), 0);
    int first = 0;
    while (!CPU_ISSET(first, &one)) first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0); /* this test's own process (criterion forks) */
    coli_pool *p = coli_pool_new(0);
    cr_assert_not_null(p);
    cr_assert_eq(coli_pool_size(p), 1);
    coli_pool_destroy(&p);
}

Test(threadpool, absurd_size_fails_with_a_reason) { cr_assert_null(coli_pool_new(100000)); }

//  A stand-down between jobs (what a worker process and a coordinator waiting
//  on workers do) sends the idle threads to sleep mid-spin; the next job
//  must still reach every thread exactly once, whether it comes at once
//  (a thread still leaving its spin) or after they slept.
Test(threadpool, stand_down_between_jobs_loses_no_thread) {
    coli_pool *p = coli_pool_new(3);
    cr_assert_not_null(p);
    for (int rep = 0; rep < 600; rep++) {
        count_job j;
        memset(&j, 0, sizeof j);
        j.want_nth = 3;
        coli_pool_run(p, count_fn, &j);
        for (int i = 0; i < 3; i++)
            cr_assert_eq(atomic_load(&j.hits[i]), 1, "rep %d: ith %d ran %d times", rep, i, atomic_load(&j.hits[i]));
        cr_assert_eq(atomic_load(&j.bad_nth), 0, "wrong nth");
        coli_pool_stand_down();
        if (rep % 3 == 1) usleep(200); /* some jobs find the threads asleep */
    }
    coli_pool_destroy(&p);
}

// ---------------------------------------------------------------------------
//  Claimed jobs (coli_pool_run_claimed): the work is taken from a counter, so
//  every item runs exactly once whichever threads join; a thread that is
//  late (here: one that sleeps inside an item) is waited for only if it
//  joined, and plain jobs in between still reach every thread exactly once.

typedef struct claim_job {
    atomic_int next;
    int n_items;
    atomic_int done[256];
    atomic_int bad_ith;
    int slow_ith; /* this thread sleeps 2 ms in its first item (-1: none) */
} claim_job;

static void claim_fn(void *arg, int ith, int nth) {
    claim_job *j = arg;
    if (ith < 0 || ith >= nth) atomic_fetch_add(&j->bad_ith, 1);
    for (int first = 1;; first = 0) {
        int i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n_items) return;
        if (first && ith == j->slow_ith) usleep(2000);
        atomic_fetch_add(&j->done[i], 1);
    }
}

static void s_check_claimed(coli_pool *p, int rep, int slow_ith) {
    claim_job j;
    memset(&j, 0, sizeof j);
    j.n_items = 1 + rep % 256;
    j.slow_ith = slow_ith;
    coli_pool_run_claimed(p, claim_fn, &j);
    /* returned: every item is done and no thread still writes to j (it lives on this stack) */
    for (int i = 0; i < j.n_items; i++)
        cr_assert_eq(atomic_load(&j.done[i]), 1, "rep %d: item %d ran %d times", rep, i, atomic_load(&j.done[i]));
    cr_assert_eq(atomic_load(&j.bad_ith), 0);
    memset(&j, 0xff, sizeof j); /* a late thread that ran on after return would now fail the next check */
}

Test(threadpool, claimed_jobs_run_every_item_once_between_plain_jobs) {
    for (int n = 1; n <= 4; n++) {
        coli_pool *p = coli_pool_new(n);
        cr_assert_not_null(p);
        for (int rep = 0; rep < 900; rep++) {
            s_check_claimed(p, rep, rep % 7 == 3 ? rep % n : -1);
            if (rep % 3 == 0) { /* a plain job in between: every thread exactly once */
                count_job c;
                memset(&c, 0, sizeof c);
                c.want_nth = n;
                coli_pool_run(p, count_fn, &c);
                for (int i = 0; i < n; i++)
                    cr_assert_eq(atomic_load(&c.hits[i]), 1, "pool %d rep %d: ith %d ran %d times", n, rep, i,
                                 atomic_load(&c.hits[i]));
            }
            if (rep % 101 == 100) usleep(3000); /* the threads fall asleep */
            if (rep % 13 == 5) coli_pool_stand_down();
        }
        coli_pool_destroy(&p);
    }
}

Test(threadpool, claimed_job_on_a_null_pool_runs_on_the_caller) {
    claim_job j;
    memset(&j, 0, sizeof j);
    j.n_items = 10;
    j.slow_ith = -1;
    coli_pool_run_claimed(NULL, claim_fn, &j);
    for (int i = 0; i < 10; i++) cr_assert_eq(atomic_load(&j.done[i]), 1);
}
