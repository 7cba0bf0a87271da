/*
 * prefault.c - background population of read-only mappings; see prefault.h.
 *
 * MADV_POPULATE_READ (Linux 5.14) fills the tables of a range in one call
 * without copying anything; older kernels get one read per page, which
 * faults the same pages in. Either way the work goes in steps of
 * PREFAULT_STEP so that a stop request waits for one step at most, and the
 * thread runs at the lowest priority (nice 19, its own) so that it only
 * takes time the compute threads leave.
 */
#define _GNU_SOURCE
#include "core/prefault.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

#define PREFAULT_STEP ((size_t)4 << 20)

struct coli_prefault {
    pthread_t thread;
    coli_byte_range *ranges;
    int n;
    atomic_int stop;
    atomic_size_t done;
};

/* MemAvailable from /proc/meminfo in bytes; 0 when unknown. */
static size_t s_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[128];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    return (size_t)kib * 1024;
}

/* One step: the kernel's populate, or a read of one byte per page. */
static void s_populate(const unsigned char *p, size_t n, int *use_madvise) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const uintptr_t start = (uintptr_t)p & ~(uintptr_t)(page - 1);
    if (*use_madvise && madvise((void *)start, (uintptr_t)p + n - start, MADV_POPULATE_READ) == 0) return;
    if (*use_madvise && errno != EINVAL) return; /* e.g. ENOMEM on an unmapped hole: leave it to the faults */
    *use_madvise = 0;                            /* a kernel before 5.14 */
    volatile unsigned char sink = 0;
    for (uintptr_t a = start < (uintptr_t)p ? start + page : start; a < (uintptr_t)p + n; a += page)
        sink ^= *(const volatile unsigned char *)a;
    (void)sink;
}

static void *s_prefault_main(void *arg) {
    coli_prefault *pf = arg;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19); /* this thread only (Linux) */
    int use_madvise = 1;
    for (int r = 0; r < pf->n; r++)
        for (size_t off = 0; off < pf->ranges[r].n; off += PREFAULT_STEP) {
            if (atomic_load_explicit(&pf->stop, memory_order_relaxed)) return NULL;
            const size_t n = pf->ranges[r].n - off < PREFAULT_STEP ? pf->ranges[r].n - off : PREFAULT_STEP;
            s_populate((const unsigned char *)pf->ranges[r].p + off, n, &use_madvise);
            atomic_fetch_add_explicit(&pf->done, n, memory_order_relaxed);
        }
    return NULL;
}

coli_prefault *coli_prefault_start(const coli_byte_range *ranges, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += ranges[i].n;
    if (n <= 0 || total == 0 || total > s_mem_available() / 2) return NULL;
    coli_prefault *pf = calloc(1, sizeof *pf);
    if (!pf || !(pf->ranges = malloc((size_t)n * sizeof *ranges))) {
        free(pf);
        return NULL;
    }
    memcpy(pf->ranges, ranges, (size_t)n * sizeof *ranges);
    pf->n = n;
    atomic_init(&pf->stop, 0);
    atomic_init(&pf->done, 0);
    if (pthread_create(&pf->thread, NULL, s_prefault_main, pf) != 0) {
        free(pf->ranges);
        free(pf);
        return NULL;
    }
    return pf;
}

void coli_prefault_stop(coli_prefault **p) {
    if (!p || !*p) return;
    atomic_store_explicit(&(*p)->stop, 1, memory_order_relaxed);
    pthread_join((*p)->thread, NULL);
    free((*p)->ranges);
    free(*p);
    *p = NULL;
}

size_t coli_prefault_done(const coli_prefault *p) {
    return p ? atomic_load_explicit(&((coli_prefault *)p)->done, memory_order_relaxed) : 0;
}
