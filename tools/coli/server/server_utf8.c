/*
 * server_utf8.c - keeps every byte the server puts in JSON text valid UTF-8.
 * Tokens with byte fallback (<0xE2>, <0x82>, ...) hand out pieces of one
 * character in separate tokens, and a sampler at high temperature can pick
 * bytes that never form a character. JSON text must be UTF-8 (RFC 8259), so
 * a trailing incomplete sequence is held until it completes, and bytes that
 * cannot be part of a character become U+FFFD, one per maximal ill-formed
 * subpart (Unicode 15, 3.9 "U+FFFD Substitution of Maximal Subparts"), as
 * Python's and browsers' decoders do.
 */
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server.h"

static const char s_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Bytes a sequence starting with lead b needs in all (0: not a lead byte),
 * and the allowed range of its second byte (the first continuation). */
static int s_lead(unsigned char b, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) *lo = 0xA0; /* no overlongs */
        if (b == 0xED) *hi = 0x9F; /* no surrogates */
        return 3;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) *lo = 0x90; /* no overlongs */
        if (b == 0xF4) *hi = 0x8F; /* nothing above U+10FFFF */
        return 4;
    }
    return 0;
}

/* Length of the well-formed sequence at s[0..n): > 0 complete, 0 ill-formed
 * (*bad: bytes that make up the maximal ill-formed subpart), < 0 a valid
 * but incomplete prefix that ends at n. */
static int s_seq(const unsigned char *s, size_t n, int *bad) {
    unsigned char lo, hi;
    int need = s_lead(s[0], &lo, &hi);
    *bad = 1;
    if (need == 0) return 0;
    for (int k = 1; k < need; k++) {
        if ((size_t)k >= n) return -1;
        unsigned char b = s[k];
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) {
            *bad = k;
            return 0;
        }
    }
    return need;
}

size_t utf8_sanitize(const char *in, size_t n, char *out, size_t *hold) {
    const unsigned char *s = (const unsigned char *)in;
    size_t i = 0, o = 0;
    *hold = 0;
    while (i < n) {
        int bad = 0, len = s_seq(s + i, n - i, &bad);
        if (len < 0) {
            *hold = n - i; /* may still complete with the next token */
            break;
        }
        if (len == 0) {
            memcpy(out + o, s_fffd, 3);
            o += 3;
            i += (size_t)bad;
            continue;
        }
        memcpy(out + o, s + i, (size_t)len);
        o += (size_t)len;
        i += (size_t)len;
    }
    return o;
}

size_t utf8_invalid_at(const char *text, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        int bad = 0, len = s_seq(s + i, n - i, &bad);
        if (len <= 0 || s[i] == 0) return i;
        i += (size_t)len;
    }
    return n;
}

char *utf8_lossy(const char *bytes, size_t n) {
    const unsigned char *s = (const unsigned char *)bytes;
    char *out = malloc(n * 3 + 1);
    if (!out) return NULL;
    size_t i = 0, o = 0;
    while (i < n) {
        int bad = 1, len = s[i] ? s_seq(s + i, n - i, &bad) : 0;
        if (len > 0) {
            memcpy(out + o, s + i, (size_t)len);
            o += (size_t)len;
            i += (size_t)len;
            continue;
        }
        memcpy(out + o, s_fffd, 3); /* an ill-formed subpart, an incomplete tail or a NUL */
        o += 3;
        i += len < 0 ? n - i : (size_t)bad;
    }
    out[o] = '\0';
    return out;
}
