/*
 * unicode.c - UTF-8 decoding, code point classes and the GPT-2 byte
 * mapping, matching llama.cpp's src/unicode.cpp (see unicode.h).
 */
#include "core/tokenizer/unicode.h"

// ---------------------------------------------------------------------------
// code point classes

unsigned coli_cpt_flags(uint32_t cpt) {
    size_t lo = 0, hi = coli_ucd_n_ranges;
    // binary search for the last range with first <= cpt
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (coli_ucd_ranges[mid].first <= cpt)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0) return 0;
    const coli_ucd_range *r = &coli_ucd_ranges[lo - 1];
    return cpt <= r->last ? r->flags : 0;
}

// ---------------------------------------------------------------------------
// UTF-8

size_t coli_utf8_len(unsigned char lead) {
    static const unsigned char lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}

static int s_is_cont(const char *s, size_t n, size_t i) { return i < n && ((unsigned char)s[i] & 0xC0) == 0x80; }

uint32_t coli_utf8_decode(const char *s, size_t n, size_t *off) {
    size_t i = *off;
    unsigned b0 = (unsigned char)s[i];
    if (!(b0 & 0x80)) {
        *off = i + 1;
        return b0;
    }
    if ((b0 & 0xE0) == 0xC0 && s_is_cont(s, n, i + 1)) {
        *off = i + 2;
        return ((b0 & 0x1Fu) << 6) | ((unsigned char)s[i + 1] & 0x3Fu);
    }
    if ((b0 & 0xF0) == 0xE0 && s_is_cont(s, n, i + 1) && s_is_cont(s, n, i + 2)) {
        *off = i + 3;
        return ((b0 & 0x0Fu) << 12) | (((unsigned char)s[i + 1] & 0x3Fu) << 6) | ((unsigned char)s[i + 2] & 0x3Fu);
    }
    if ((b0 & 0xF8) == 0xF0 && s_is_cont(s, n, i + 1) && s_is_cont(s, n, i + 2) && s_is_cont(s, n, i + 3)) {
        *off = i + 4;
        return ((b0 & 0x07u) << 18) | (((unsigned char)s[i + 1] & 0x3Fu) << 12) |
               (((unsigned char)s[i + 2] & 0x3Fu) << 6) | ((unsigned char)s[i + 3] & 0x3Fu);
    }
    // a continuation byte, 0xF8..0xFF, or a truncated sequence
    *off = i + 1;
    return 0xFFFD;
}

size_t coli_utf8_encode(uint32_t cpt, char *out) {
    if (cpt <= 0x7F) {
        out[0] = (char)cpt;
        return 1;
    }
    if (cpt <= 0x7FF) {
        out[0] = (char)(0xC0 | (cpt >> 6));
        out[1] = (char)(0x80 | (cpt & 0x3F));
        return 2;
    }
    if (cpt <= 0xFFFF) {
        out[0] = (char)(0xE0 | (cpt >> 12));
        out[1] = (char)(0x80 | ((cpt >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cpt & 0x3F));
        return 3;
    }
    if (cpt <= 0x10FFFF) {
        out[0] = (char)(0xF0 | (cpt >> 18));
        out[1] = (char)(0x80 | ((cpt >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cpt >> 6) & 0x3F));
        out[3] = (char)(0x80 | (cpt & 0x3F));
        return 4;
    }
    return 0;
}

// ---------------------------------------------------------------------------
// GPT-2 byte mapping: printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map
// to themselves, the other 68 bytes to U+0100.. in byte order.

static int s_byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t coli_gpt2_byte_to_cpt(uint8_t byte) {
    if (s_byte_is_printable(byte)) return byte;
    uint32_t n = 0; // how many non-printable bytes come before this one
    for (unsigned b = 0; b < byte; b++) n += !s_byte_is_printable(b);
    return 256 + n;
}

int coli_gpt2_cpt_to_byte(uint32_t cpt) {
    if (cpt < 256) return s_byte_is_printable(cpt) ? (int)cpt : -1;
    if (cpt >= 256 + 68) return -1;
    uint32_t n = 0;
    for (unsigned b = 0; b < 256; b++) {
        if (!s_byte_is_printable(b) && n++ == cpt - 256) return (int)b;
    }
    return -1;
}
