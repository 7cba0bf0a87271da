/*
 * worker_mem.c - what a worker tells about its memory (heartbeat fields
 * rss_bytes, model_rss_bytes, cgroup_bytes) and how it gives back the pages
 * of an expert it no longer holds.
 *
 * Why the model's share is its own figure: a worker maps the whole file and
 * should fault in only its own experts (docs/scheduler.md, "Remote hosts");
 * VmRSS adds the program and its libraries, the cgroup adds the page cache
 * it read. Sampled at most once a second: /proc/self/smaps costs a few
 * hundred microseconds, a heartbeat goes out every 200 ms.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
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

void worker_mem_fill(worker *w, Coli__Heartbeat *h) {
    uint64_t now = coli_now_ns();
    if (!w->loop.mem_at_ns || now - w->loop.mem_at_ns >= 1000000000ULL) {
        w->loop.mem_at_ns = now;
        w->loop.rss_bytes = s_kb_lines("/proc/self/status", "VmRSS:", 0, 0);
        w->loop.model_rss_bytes = 0;
        if (w->hold.model) {
            uintptr_t lo = (uintptr_t)gguf_base(w->hold.model);
            w->loop.model_rss_bytes = s_kb_lines("/proc/self/smaps", "Rss:", lo, lo + gguf_size(w->hold.model));
        }
        w->loop.cgroup_bytes = s_cgroup_bytes();
    }
    h->rss_bytes = w->loop.rss_bytes;
    h->model_rss_bytes = w->loop.model_rss_bytes;
    h->cgroup_bytes = w->loop.cgroup_bytes;
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
