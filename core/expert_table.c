/* expert_table.c - (layer, expert) -> pointer, open addressing; see expert_table.h. */
#include "core/expert_table.h"

#include <stdlib.h>
#include <string.h>

#include "colibri.h"

uint64_t expert_key(int32_t layer, int32_t expert) {
    if (layer < 0 || expert < 0) return 0; /* no key: never in a table */
    return (((uint64_t)(uint32_t)layer << 32) | (uint32_t)expert) + 1;
}

void expert_unkey(uint64_t k, int32_t *layer, int32_t *expert) {
    *layer = (int32_t)(uint32_t)((k - 1) >> 32);
    *expert = (int32_t)(uint32_t)(k - 1);
}

/* Fibonacci hashing, high bits: the low bits of the product depend only on
 * the expert, which would put every layer of one expert in one run. */
static size_t s_home(uint64_t k, size_t cap) { return (size_t)((k * 0x9E3779B97F4A7C15ULL) >> 32) & (cap - 1); }

/* The slot holding k, or the empty slot where it would go (cap > 0). */
static size_t s_find(const expert_table *t, uint64_t k) {
    size_t i = s_home(k, t->cap);
    while (t->keys[i] && t->keys[i] != k) i = (i + 1) & (t->cap - 1);
    return i;
}

int expert_table_has(const expert_table *t, uint64_t k) { return k && t->cap && t->keys[s_find(t, k)] == k; }

void *expert_table_get(const expert_table *t, uint64_t k) {
    if (!k || !t->cap) return NULL;
    size_t i = s_find(t, k);
    return t->keys[i] == k ? t->vals[i] : NULL;
}

static int s_grow(expert_table *t) {
    const size_t cap = t->cap ? t->cap * 2 : 64;
    expert_table g = {calloc(cap, sizeof(uint64_t)), calloc(cap, sizeof(void *)), cap, t->n};
    if (!g.keys || !g.vals) {
        free(g.keys);
        free(g.vals);
        return COLI_ENOMEM;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->keys[i]) continue;
        size_t j = s_find(&g, t->keys[i]);
        g.keys[j] = t->keys[i];
        g.vals[j] = t->vals[i];
    }
    free(t->keys);
    free(t->vals);
    *t = g;
    return 0;
}

int expert_table_put(expert_table *t, uint64_t k, void *val) {
    if (!k) return COLI_EINVAL;
    if ((t->n + 1) * 2 > t->cap && !expert_table_has(t, k) && s_grow(t)) return COLI_ENOMEM;
    size_t i = s_find(t, k);
    if (!t->keys[i]) {
        t->keys[i] = k;
        t->n++;
    }
    t->vals[i] = val;
    return 0;
}

int expert_table_remove(expert_table *t, uint64_t k, void **val) {
    if (!expert_table_has(t, k)) return 0;
    size_t hole = s_find(t, k);
    if (val) *val = t->vals[hole];
    t->keys[hole] = 0;
    t->vals[hole] = NULL;
    t->n--;
    for (size_t i = (hole + 1) & (t->cap - 1); t->keys[i]; i = (i + 1) & (t->cap - 1)) {
        size_t home = s_home(t->keys[i], t->cap);
        /* an entry whose home lies in (hole, i], cyclically, must stay */
        int stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (stays) continue;
        t->keys[hole] = t->keys[i];
        t->vals[hole] = t->vals[i];
        t->keys[i] = 0;
        t->vals[i] = NULL;
        hole = i;
    }
    return 1;
}

void expert_table_free(expert_table *t, void (*fn)(void *val, void *arg), void *arg) {
    for (size_t i = 0; fn && i < t->cap; i++)
        if (t->keys[i]) fn(t->vals[i], arg);
    free(t->keys);
    free(t->vals);
    memset(t, 0, sizeof *t);
}
