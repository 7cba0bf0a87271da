/*
 * expert_table.h - (layer, expert) -> pointer: the one table of resident
 * experts, used by the cpu, gpu and xdna plugins and by the worker.
 *
 * Open addressing with linear probing, at most half full. A key is
 * expert_key(layer, expert): the pair packed into 64 bits plus 1, so that 0
 * marks an empty slot. Only non-negative layers and experts have a key: the
 * pair (-1, -1) would otherwise wrap to 0 and be "found" in every empty
 * slot, so key 0 is refused by every operation here. No colibri error state
 * (plain status codes): the GPU plugin links this file alone.
 */
#ifndef COLI_CORE_EXPERT_TABLE_H
#define COLI_CORE_EXPERT_TABLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* the GPU plugin's .cu source uses it */
#endif

typedef struct expert_table {
    uint64_t *keys; /* expert_key(layer, expert); 0 = an empty slot */
    void **vals;    /* the value of the key in the same slot (NULL in a set) */
    size_t cap, n;  /* cap a power of two (or 0), n <= cap / 2 */
} expert_table;

/* The key of (layer, expert); 0 (no key, never in a table) when either is negative. */
uint64_t expert_key(int32_t layer, int32_t expert);
/* The pair of a key that is not 0. */
void expert_unkey(uint64_t k, int32_t *layer, int32_t *expert);

/* 1 if k is in t. */
int expert_table_has(const expert_table *t, uint64_t k);
/* The value of k; NULL when absent. */
void *expert_table_get(const expert_table *t, uint64_t k);
/* Insert k with val, or replace its value. 0, COLI_EINVAL for key 0, or
 * COLI_ENOMEM with t unchanged. */
int expert_table_put(expert_table *t, uint64_t k, void *val);
/* Remove k: 1 with its value in *val (when val is not NULL), 0 when it was
 * absent. The run of entries after it is re-seated so every other key is
 * still found. */
int expert_table_remove(expert_table *t, uint64_t k, void **val);
/* Call fn (when not NULL) on every value, then free the table and zero it. */
void expert_table_free(expert_table *t, void (*fn)(void *val, void *arg), void *arg);

#ifdef __cplusplus
}
#endif
#endif
