/*
 * strbuf.h - a growable string written by printf formats, for text built in
 * many small pieces (metrics, stats JSON). One failure (out of memory, bad
 * format) sticks: later appends do nothing, and the writer checks once at
 * the end instead of after every piece.
 */
#ifndef COLI_CORE_STRBUF_H
#define COLI_CORE_STRBUF_H

#include <stddef.h>

typedef struct coli_strbuf {
    char *s;    /* NUL-terminated once anything was appended; owned, free() it */
    size_t len; /* bytes in s, without the NUL */
    size_t cap; /* bytes allocated at s */
    int failed; /* an append failed: s holds a prefix of the intended text */
} coli_strbuf;

/* Append printf(fmt, ...) to b, growing it; on failure set b->failed. */
void coli_strbuf_appendf(coli_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
