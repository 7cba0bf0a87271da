/*
 * unicode.h - the little Unicode the tokenizers need, with llama.cpp's
 * exact semantics (src/unicode.cpp): UTF-8 decoding that turns each bad
 * byte into U+FFFD, code point classes for the GPT-2 regex, and GPT-2's
 * byte <-> printable code point mapping.
 */
#ifndef COLI_CORE_UNICODE_H
#define COLI_CORE_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Code point classes: the general category (regex \p{L}, \p{N}, \p{P},
 * \p{M}, \p{S}: at most one of them) and White_Space (\s, may come on top). */
enum {
    COLI_CPT_LETTER = 1,
    COLI_CPT_NUMBER = 2,
    COLI_CPT_PUNCT = 4,
    COLI_CPT_SPACE = 8,
    COLI_CPT_MARK = 16,
    COLI_CPT_SYMBOL = 32,
};

typedef struct coli_ucd_range {
    uint32_t first, last; /* inclusive */
    uint32_t flags;       /* COLI_CPT_* */
} coli_ucd_range;

/* Generated table (core/tokenizer/unicode_tables.c, tools/gen_unicode_tables.py). */
extern const coli_ucd_range coli_ucd_ranges[];
extern const size_t coli_ucd_n_ranges;
extern const char coli_unicode_version[];

/* COLI_CPT_* flags of a code point (0 = other: a separator that is not
 * white space, control, unassigned, or beyond U+10FFFF). */
unsigned coli_cpt_flags(uint32_t cpt);

/* Bytes of the UTF-8 sequence a lead byte announces, from its high nibble
 * alone (continuation bytes count 1), as llama.cpp's unicode_len_utf8. */
size_t coli_utf8_len(unsigned char lead);

/* Decode the code point at s[*off] (n bytes in s) and advance *off. A bad
 * sequence yields U+FFFD and advances one byte. Like llama.cpp, overlong
 * forms and surrogates are accepted, and F0..F7 leads may give values up to
 * 0x1FFFFF. */
uint32_t coli_utf8_decode(const char *s, size_t n, size_t *off);

/* Encode cpt into out (4 bytes room); returns the length, 0 if cpt > 0x10FFFF. */
size_t coli_utf8_encode(uint32_t cpt, char *out);

/* GPT-2 byte-level mapping: every byte to a printable code point, and back
 * (-1 for a code point that stands for no byte). */
uint32_t coli_gpt2_byte_to_cpt(uint8_t byte);
int coli_gpt2_cpt_to_byte(uint32_t cpt);

#endif
