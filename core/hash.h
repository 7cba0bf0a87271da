/*
 * hash.h - FNV-1a over bytes: the hash of every name table here (GGUF keys
 * and tensor names, vocabulary strings, merge rules). Keys are short, and
 * hostile input can make a probe no slower than O(key length); collisions
 * only cost extra probes.
 */
#ifndef COLI_CORE_HASH_H
#define COLI_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define COLI_FNV1A_SEED 1469598103934665603ull

/* Continue hash h over n bytes at s (start from COLI_FNV1A_SEED): chained
 * calls hash the concatenation. */
static inline uint64_t coli_fnv1a(const void *s, size_t n, uint64_t h) {
    const unsigned char *p = s;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

#endif
