/*
 * hash.h - FNV-1a over bytes: the hash of every name table here (GGUF keys
 * and tensor names, vocabulary strings, merge rules). Keys are short, and
 * hostile input can make a probe no slower than O(key length); collisions
 * only cost extra probes. SipHash-2-4 where an outsider must not be able to
 * make two inputs collide (a secret key, coli serve's prefix cache domains).
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

#define COLI_SIP_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

static inline void coli_sip_rounds(uint64_t v[4], int n) {
    for (int i = 0; i < n; i++) {
        v[0] += v[1];
        v[1] = COLI_SIP_ROTL(v[1], 13) ^ v[0];
        v[0] = COLI_SIP_ROTL(v[0], 32);
        v[2] += v[3];
        v[3] = COLI_SIP_ROTL(v[3], 16) ^ v[2];
        v[0] += v[3];
        v[3] = COLI_SIP_ROTL(v[3], 21) ^ v[0];
        v[2] += v[1];
        v[1] = COLI_SIP_ROTL(v[1], 17) ^ v[2];
        v[2] = COLI_SIP_ROTL(v[2], 32);
    }
}

/* SipHash-2-4 of n bytes at s under the 128-bit key k0, k1 (a keyed PRF: without
 * the key, inputs with a chosen hash or two that collide cannot be found). */
static inline uint64_t coli_siphash24(uint64_t k0, uint64_t k1, const void *s, size_t n) {
    const unsigned char *p = s;
    uint64_t v[4] = {k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull,
                     k1 ^ 0x7465646279746573ull};
    uint64_t m = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        m = 0;
        for (int b = 0; b < 8; b++) m |= (uint64_t)p[i + (size_t)b] << (8 * b);
        v[3] ^= m;
        coli_sip_rounds(v, 2);
        v[0] ^= m;
    }
    m = (uint64_t)(n & 0xff) << 56;
    for (int b = 0; i + (size_t)b < n; b++) m |= (uint64_t)p[i + (size_t)b] << (8 * b);
    v[3] ^= m;
    coli_sip_rounds(v, 2);
    v[0] ^= m;
    v[2] ^= 0xff;
    coli_sip_rounds(v, 4);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

#endif
