/*
 * expert_set.c - the worker's set of resident (layer, expert) pairs: open
 * addressing with linear probing, keys + 1 (0 = empty), at most half full.
 * Only non-negative layers and experts have a key: the pair (-1, -1) would
 * otherwise wrap to 0 and be "found" in every empty slot, so a key of 0 is
 * refused by every operation here.
 */
#include <stdlib.h>

#include "core/error.h"
#include "workers/worker.h"

uint64_t expert_set_key(int layer, int expert) {
    if (layer < 0 || expert < 0) return 0; /* no key: never in a set */
    return (((uint64_t)(uint32_t)layer << 32) | (uint32_t)expert) + 1;
}

void expert_set_unkey(uint64_t k, int *layer, int *expert) {
    *layer = (int)(uint32_t)((k - 1) >> 32);
    *expert = (int)(uint32_t)(k - 1);
}

static size_t s_home(uint64_t k, size_t cap) { return (size_t)(k * 0x9E3779B97F4A7C15ULL) & (cap - 1); }

int expert_set_has(const expert_set *s, uint64_t k) {
    if (!s->cap || !k) return 0;
    for (size_t i = s_home(k, s->cap);; i = (i + 1) & (s->cap - 1)) {
        if (s->keys[i] == k) return 1;
        if (!s->keys[i]) return 0;
    }
}

int expert_set_add(expert_set *s, uint64_t k) {
    if (!k) return coli_fail(COLI_EINVAL, "worker: expert set: a negative layer or expert has no key");
    if ((s->n + 1) * 2 > s->cap) {
        expert_set g = {calloc(s->cap ? s->cap * 2 : 64, sizeof(uint64_t)), s->cap ? s->cap * 2 : 64, 0};
        if (!g.keys) return coli_fail(COLI_ENOMEM, "worker: expert set");
        for (size_t i = 0; i < s->cap; i++)
            if (s->keys[i]) expert_set_add(&g, s->keys[i]);
        free(s->keys);
        *s = g;
    }
    size_t i = s_home(k, s->cap);
    while (s->keys[i] && s->keys[i] != k) i = (i + 1) & (s->cap - 1);
    if (!s->keys[i]) {
        s->keys[i] = k;
        s->n++;
    }
    return 0;
}

int expert_set_remove(expert_set *s, uint64_t k) {
    if (!s->cap || !k) return 0;
    size_t hole = s_home(k, s->cap);
    while (s->keys[hole] != k) {
        if (!s->keys[hole]) return 0;
        hole = (hole + 1) & (s->cap - 1);
    }
    s->keys[hole] = 0;
    s->n--;
    for (size_t i = (hole + 1) & (s->cap - 1); s->keys[i]; i = (i + 1) & (s->cap - 1)) {
        size_t home = s_home(s->keys[i], s->cap);
        /* an entry whose home lies in (hole, i], cyclically, must stay */
        int stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (stays) continue;
        s->keys[hole] = s->keys[i];
        s->keys[i] = 0;
        hole = i;
    }
    return 1;
}
