/* strbuf.c - see strbuf.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/strbuf.h"

void coli_strbuf_appendf(coli_strbuf *b, const char *fmt, ...) {
    while (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        // too small (or nothing yet): grow to fit, doubling, then format again
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap <= b->len + (size_t)n) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}
