/*
 * worker_mem.c - what a worker tells about its memory (heartbeat fields
 * rss_bytes, model_rss_bytes, cgroup_bytes) and how it gives back the pages
 * of an expert it no longer holds.
 *
 * Why the model's share is its own figure: a worker maps the whole file and
 * should fault in only its own experts (docs/scheduler.md, "Remote hosts");
 * VmRSS adds the program and its libraries, the cgroup adds the page cache
 * it read.
 *
 * Sampled by a thread of its own ("coli-mem"), once a second or less
 * often when one sample costs more than 2% of the wait, never by the
 * serving loop: /proc/self/smaps walks every page table entry of the mapped
 * file and computes each page's share, which takes 20-70 ms for a host with
 * 469 MiB of the file mapped (measured on the 2-core VM; it grows with the
 * pages held). Done between batches, as it was, it held up one layer of
 * every token's second while the coordinator waited on this host. A
 * heartbeat carries the latest finished sample.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/gguf/gguf.h"
#include "workers/worker.h"

/* "Key:   N kB" lines of path: the sum of N over the lines starting with key
 * (within [lo, hi) mappings for smaps when hi > 0), in bytes. */
static uint64_t s_kb_lines(const char *path, const char *key, uintptr_t lo, uintptr_t hi) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    uint64_t sum = 0;
    int inside = hi == 0;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (hi && sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a < hi && b > lo; /* a mapping's header line: is it (part of) the model? */
            continue;
        }
        unsigned long long kb;
        if (inside && !strncmp(line, key, klen) && sscanf(line + klen, " %llu", &kb) == 1) sum += kb * 1024ULL;
    }
    fclose(f);
    return sum;
}

/* One number from a file (cgroup counters), 0 when it cannot be read. */
static uint64_t s_read_u64(const char *path) {
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    if (f && fscanf(f, "%llu", &v) != 1) v = 0;
    if (f) fclose(f);
    return v;
}

/* The usage of this process's memory cgroup: v1 (memory controller line of
 * /proc/self/cgroup), else v2 (the "0::" line); 0 in none. */
static uint64_t s_cgroup_bytes(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[1024], path[1200];
    uint64_t v = 0;
    while (!v && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || !strcmp(c2 + 1, "/")) continue; /* the root: no limit of its own */
        if (!strncmp(c1 + 1, "memory:", 7))
            snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", c2 + 1);
        else if (c2 == c1 + 1)
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", c2 + 1);
        else
            continue;
        v = s_read_u64(path);
    }
    fclose(f);
    return v;
}

/* The sampler: the serving loop writes where the model is mapped and reads
 * the latest figures; the thread samples. Everything under mu. */
struct worker_mem {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    int stop, asked;
    uintptr_t lo, hi; /* the model's mapping, 0 when none */
    uint64_t rss, model_rss, cgroup;
};

/* A sample may take at most 1/50 of the sampler's time (2% of one core). */
#define SAMPLE_COST_SHARE 50

static void *s_sampler(void *arg) {
    struct worker_mem *m = arg;
    /* background work: a batch's threads go first on a busy host (nice is per thread on Linux) */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        uintptr_t lo = m->lo, hi = m->hi;
        m->asked = 0;
        pthread_mutex_unlock(&m->mu);
        /* a mapping replaced meanwhile only makes this one sample stale: smaps is read, never the pages */
        uint64_t t0 = coli_now_ns();
        uint64_t rss = s_kb_lines("/proc/self/status", "VmRSS:", 0, 0);
        uint64_t model = hi ? s_kb_lines("/proc/self/smaps", "Rss:", lo, hi) : 0, cg = s_cgroup_bytes();
        uint64_t cost = coli_now_ns() - t0;
        pthread_mutex_lock(&m->mu);
        m->rss = rss, m->model_rss = model, m->cgroup = cg;
        /* Once a second, or less often when a sample costs more than 1/SAMPLE_COST_SHARE of that:
         * the walk grows with the pages held (~25 ms for 2.4 GiB here), and a host holding
         * hundreds of GiB would otherwise spend a core on it. */
        uint64_t wait_ns = cost * SAMPLE_COST_SHARE > 1000000000ULL ? cost * SAMPLE_COST_SHARE : 1000000000ULL;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += (time_t)(wait_ns / 1000000000ULL);
        until.tv_nsec += (long)(wait_ns % 1000000000ULL);
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        while (!m->stop && !m->asked && pthread_cond_timedwait(&m->wake, &m->mu, &until) == 0) {}
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* The sampler, started on the first heartbeat; NULL when it cannot be. */
static struct worker_mem *s_mem(worker *w) {
    if (w->loop.mem) return w->loop.mem;
    struct worker_mem *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    /* the first heartbeat already tells the process's memory (cheap: no smaps); the thread adds the model's */
    m->rss = s_kb_lines("/proc/self/status", "VmRSS:", 0, 0);
    m->cgroup = s_cgroup_bytes();
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&m->thread, NULL, s_sampler, m) != 0) {
        pthread_cond_destroy(&m->wake);
        pthread_mutex_destroy(&m->mu);
        free(m);
        return NULL;
    }
    pthread_setname_np(m->thread, "coli-mem");
    return w->loop.mem = m;
}

void worker_mem_fill(worker *w, Coli__Heartbeat *h) {
    struct worker_mem *m = s_mem(w);
    if (!m) return; /* no thread: the figures stay 0 ("unknown") */
    pthread_mutex_lock(&m->mu);
    m->lo = w->hold.model ? (uintptr_t)gguf_base(w->hold.model) : 0;
    m->hi = w->hold.model ? m->lo + gguf_size(w->hold.model) : 0;
    h->rss_bytes = m->rss;
    h->model_rss_bytes = m->model_rss;
    h->cgroup_bytes = m->cgroup;
    pthread_mutex_unlock(&m->mu);
}

void worker_mem_resample(worker *w) {
    struct worker_mem *m = s_mem(w);
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->lo = w->hold.model ? (uintptr_t)gguf_base(w->hold.model) : 0;
    m->hi = w->hold.model ? m->lo + gguf_size(w->hold.model) : 0;
    m->asked = 1;
    pthread_cond_signal(&m->wake);
    pthread_mutex_unlock(&m->mu);
}

void worker_mem_close(worker *w) {
    struct worker_mem *m = w->loop.mem;
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_cond_signal(&m->wake);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL);
    pthread_cond_destroy(&m->wake);
    pthread_mutex_destroy(&m->mu);
    free(m);
    w->loop.mem = NULL;
}

void worker_mem_advise_model(const worker *w) {
    if (!w->link.listening || !w->hold.model) return;
    /* a host holds only its experts: no read-around into its neighbours, no
     * 2 MiB folio mapped for a 4 KiB need (both measured: a host holding half
     * the experts had 90% of the file resident without this) */
    void *base = (void *)gguf_base(w->hold.model);
    size_t n = gguf_size(w->hold.model);
    (void)madvise(base, n, MADV_RANDOM);
    (void)madvise(base, n, MADV_NOHUGEPAGE);
}

void worker_mem_willneed(const worker *w, const void *p, size_t n) {
    if (!w->link.listening || !n) return;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~((uintptr_t)page - 1);
    (void)madvise((void *)a, (uintptr_t)p + n - a, MADV_WILLNEED); /* one large read, not a fault per page */
}

void worker_mem_release(const void *p, size_t n) {
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t b = ((uintptr_t)p + n) & ~((uintptr_t)page - 1);
    /* whole pages inside the range only: a page shared with a neighbour that
     * stays held keeps its mapping. Failure is harmless (the pages stay). */
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}
