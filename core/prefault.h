/*
 * prefault.h - fill the page tables of a read-only file mapping ahead of
 * use, on a low-priority background thread.
 *
 * Why: the model is mapped, not read, so loading is fast; but the first
 * token that routes to an expert then faults its weights in page by page
 * (the kernel maps a few pages per fault: about 1 GB/s on the machines we
 * measured, some 4 ms for one bench-mixtral Q4_0 expert, against a 4 ms
 * token). Right after a load those are the slowest tokens of all. Filling
 * the tables in the background keeps the load fast and takes the faults off
 * the tokens: a token that comes first still faults, as before, and is
 * never slower for it.
 *
 * Switched off (COLI_PREFAULT=0, core/settings.h) or when the ranges add up
 * to more than half the memory the kernel calls available: a model larger
 * than memory must not be read whole (it would evict itself).
 */
#ifndef COLI_CORE_PREFAULT_H
#define COLI_CORE_PREFAULT_H

#include <stddef.h>

typedef struct coli_byte_range {
    const void *p;
    size_t n;
} coli_byte_range;

typedef struct coli_prefault coli_prefault;

/* Start populating ranges[0..n) in order (copied; the memory must stay
 * mapped until coli_prefault_stop). NULL when there is nothing to do, the
 * ranges do not fit (above), or no thread could start: all harmless, pages
 * then fault on first use. */
coli_prefault *coli_prefault_start(const coli_byte_range *ranges, int n);

/* Stop the thread (it checks between steps of a few MiB), join it, free
 * *p and set it NULL. Call before unmapping the ranges. NULL is a no-op. */
void coli_prefault_stop(coli_prefault **p);

/* Bytes populated so far (for tests and -v): 0 for NULL. */
size_t coli_prefault_done(const coli_prefault *p);

#endif
