/* heat.c - expert selection counts and the heat file; see heat.h. */
#include "coordinator/heat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file_io.h"

#define HEAT_MAGIC "COLIHEAT"
#define HEAT_HEADER 24
#define HEAT_FLAG_PAIRS 1u

size_t heat_n_pairs(int n_expert) { return n_expert > 1 ? (size_t)n_expert * (size_t)(n_expert - 1) / 2 : 0; }

size_t heat_pair_index(int n_expert, int a, int b) {
    if (a > b) {
        int t = a;
        a = b;
        b = t;
    }
    /* row a holds pairs (a, a+1..n-1); rows before it hold sum_{i<a} (n-1-i) */
    return (size_t)a * (size_t)(2 * n_expert - a - 1) / 2 + (size_t)(b - a - 1);
}

int heat_init(heat_table *h, int n_layer, int n_expert) {
    memset(h, 0, sizeof *h);
    if (n_layer < 1 || n_layer > HEAT_MAX_LAYERS || n_expert < 1 || n_expert > HEAT_MAX_EXPERTS)
        return coli_fail(COLI_EINVAL, "heat: %d layers x %d experts out of range (1..%d x 1..%d)", n_layer, n_expert,
                         HEAT_MAX_LAYERS, HEAT_MAX_EXPERTS);
    h->n_layer = n_layer;
    h->n_expert = n_expert;
    h->rows = calloc((size_t)n_layer, sizeof *h->rows);
    h->count = calloc((size_t)n_layer * (size_t)n_expert, sizeof *h->count);
    if (n_expert <= HEAT_PAIR_MAX_EXPERTS && n_expert > 1)
        h->pair = calloc((size_t)n_layer * heat_n_pairs(n_expert), sizeof *h->pair);
    if (!h->rows || !h->count || (n_expert <= HEAT_PAIR_MAX_EXPERTS && n_expert > 1 && !h->pair)) {
        heat_free(h);
        return coli_fail(COLI_ENOMEM, "heat: out of memory for %d x %d counts", n_layer, n_expert);
    }
    return 0;
}

void heat_free(heat_table *h) {
    if (!h) return;
    free(h->rows);
    free(h->count);
    free(h->pair);
    memset(h, 0, sizeof *h);
}

void heat_add(heat_table *h, int layer, int64_t n_tok, int k, const int32_t *sel) {
    if (!h->count || layer < 0 || layer >= h->n_layer) return;
    const int X = h->n_expert;
    uint64_t *count = h->count + (size_t)layer * (size_t)X;
    uint64_t *pair = h->pair ? h->pair + (size_t)layer * heat_n_pairs(X) : NULL;
    for (int64_t t = 0; t < n_tok; t++) {
        const int32_t *s = sel + (size_t)t * (size_t)k;
        h->rows[layer]++;
        for (int a = 0; a < k; a++) {
            if (s[a] < 0 || s[a] >= X) continue;
            count[s[a]]++;
            for (int b = a + 1; pair && b < k; b++)
                if (s[b] >= 0 && s[b] < X && s[b] != s[a]) pair[heat_pair_index(X, s[a], s[b])]++;
        }
    }
}

int heat_merge(heat_table *dst, const heat_table *src) {
    if (dst->n_layer != src->n_layer || dst->n_expert != src->n_expert)
        return coli_fail(COLI_EINVAL, "heat: %d x %d counts cannot be added to %d x %d", src->n_layer, src->n_expert,
                         dst->n_layer, dst->n_expert);
    for (int l = 0; l < dst->n_layer; l++) dst->rows[l] += src->rows[l];
    for (size_t i = 0; i < (size_t)dst->n_layer * (size_t)dst->n_expert; i++) dst->count[i] += src->count[i];
    if (dst->pair && src->pair)
        for (size_t i = 0; i < (size_t)dst->n_layer * heat_n_pairs(dst->n_expert); i++) dst->pair[i] += src->pair[i];
    return 0;
}

uint64_t heat_total(const heat_table *h) {
    uint64_t t = 0;
    for (size_t i = 0; h->count && i < (size_t)h->n_layer * (size_t)h->n_expert; i++) t += h->count[i];
    return t;
}

// ---------------------------------------------------------------------------
// the file

static uint64_t s_fnv1a(const unsigned char *p, size_t n) {
    uint64_t x = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) x = (x ^ p[i]) * 1099511628211ULL;
    return x;
}

static void s_put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void s_put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t s_get32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t s_get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Bytes of a file of that shape, checksum included. */
static size_t s_file_bytes(int n_layer, int n_expert, int pairs) {
    size_t words = (size_t)n_layer + (size_t)n_layer * (size_t)n_expert + 1;
    if (pairs) words += (size_t)n_layer * heat_n_pairs(n_expert);
    return HEAT_HEADER + words * 8;
}

/* Counts in the order the file stores them (rows, count, pair). */
static void s_words(const heat_table *h, uint64_t **arr, size_t *len) {
    arr[0] = h->rows, len[0] = (size_t)h->n_layer;
    arr[1] = h->count, len[1] = (size_t)h->n_layer * (size_t)h->n_expert;
    arr[2] = h->pair, len[2] = h->pair ? (size_t)h->n_layer * heat_n_pairs(h->n_expert) : 0;
}

int heat_write(const heat_table *h, const char *path) {
    const size_t bytes = s_file_bytes(h->n_layer, h->n_expert, h->pair != NULL);
    unsigned char *buf = malloc(bytes);
    if (!buf) return coli_fail(COLI_ENOMEM, "heat file %s: out of memory", path);
    memcpy(buf, HEAT_MAGIC, 8);
    s_put32(buf + 8, HEAT_VERSION);
    s_put32(buf + 12, (uint32_t)h->n_layer);
    s_put32(buf + 16, (uint32_t)h->n_expert);
    s_put32(buf + 20, h->pair ? HEAT_FLAG_PAIRS : 0);
    uint64_t *arr[3];
    size_t len[3], at = HEAT_HEADER;
    s_words(h, arr, len);
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < len[a]; i++, at += 8) s_put64(buf + at, arr[a][i]);
    s_put64(buf + at, s_fnv1a(buf, at));
    int rc = coli_outfile_write("heat file", path, buf, bytes, 0);
    free(buf);
    return rc;
}

/* Counts no larger than what they count: each expert at most once per
 * token, each pair at most as often as either of its experts. */
static int s_check_counts(const heat_table *h, const char *path) {
    const int X = h->n_expert;
    for (int l = 0; l < h->n_layer; l++) {
        const uint64_t *c = h->count + (size_t)l * (size_t)X;
        for (int e = 0; e < X; e++)
            if (c[e] > h->rows[l])
                return coli_fail(COLI_EFORMAT, "heat file %s: layer %d expert %d chosen %llu times in %llu rows", path,
                                 l, e, (unsigned long long)c[e], (unsigned long long)h->rows[l]);
        for (int a = 0; h->pair && a < X; a++)
            for (int b = a + 1; b < X; b++) {
                uint64_t p = h->pair[(size_t)l * heat_n_pairs(X) + heat_pair_index(X, a, b)];
                if (p > c[a] || p > c[b])
                    return coli_fail(COLI_EFORMAT, "heat file %s: layer %d pair %d+%d counted more than its experts",
                                     path, l, a, b);
            }
    }
    return 0;
}

/* The header of buf (size bytes) into a fresh table of its shape. */
static int s_parse_header(const unsigned char *buf, size_t size, const char *path, heat_table *h) {
    if (size < HEAT_HEADER + 8 || memcmp(buf, HEAT_MAGIC, 8) != 0)
        return coli_fail(COLI_EFORMAT, "heat file %s: not a heat file (no COLIHEAT header)", path);
    uint32_t ver = s_get32(buf + 8), nl = s_get32(buf + 12), ne = s_get32(buf + 16), flags = s_get32(buf + 20);
    if (ver != HEAT_VERSION)
        return coli_fail(COLI_EFORMAT, "heat file %s: version %u (this build reads %d)", path, ver, HEAT_VERSION);
    if (nl < 1 || nl > HEAT_MAX_LAYERS || ne < 1 || ne > HEAT_MAX_EXPERTS)
        return coli_fail(COLI_EFORMAT, "heat file %s: %u layers x %u experts out of range", path, nl, ne);
    int want_pairs = ne <= HEAT_PAIR_MAX_EXPERTS && ne > 1;
    if ((flags & ~HEAT_FLAG_PAIRS) || (int)(flags & HEAT_FLAG_PAIRS) != want_pairs)
        return coli_fail(COLI_EFORMAT, "heat file %s: flags 0x%x do not fit %u experts", path, flags, ne);
    size_t want = s_file_bytes((int)nl, (int)ne, want_pairs);
    if (size != want)
        return coli_fail(COLI_EFORMAT, "heat file %s: %zu bytes, its header says %zu (truncated or padded)", path, size,
                         want);
    return heat_init(h, (int)nl, (int)ne);
}

static int s_parse(const unsigned char *buf, size_t size, const char *path, heat_table *h) {
    int rc = s_parse_header(buf, size, path, h);
    if (rc) return rc;
    if (s_get64(buf + size - 8) != s_fnv1a(buf, size - 8)) {
        heat_free(h);
        return coli_fail(COLI_EFORMAT, "heat file %s: checksum mismatch (damaged)", path);
    }
    uint64_t *arr[3];
    size_t len[3], at = HEAT_HEADER;
    s_words(h, arr, len);
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < len[a]; i++, at += 8) arr[a][i] = s_get64(buf + at);
    if ((rc = s_check_counts(h, path))) heat_free(h);
    return rc;
}

int heat_read(const char *path, heat_table *h) {
    memset(h, 0, sizeof *h);
    struct stat st;
    int fd = coli_open_regular(path, &st); /* a FIFO is refused, not waited on */
    if (fd < 0 && errno) return coli_fail(COLI_EIO, "heat file %s: %s", path, strerror(errno));
    if (fd < 0) return coli_fail(COLI_EFORMAT, "heat file %s: not a regular file (%s)", path, coli_file_kind(&st));
    const size_t limit =
        s_file_bytes(HEAT_MAX_LAYERS, HEAT_PAIR_MAX_EXPERTS, 1) + (size_t)HEAT_MAX_LAYERS * HEAT_MAX_EXPERTS * 8;
    if (st.st_size < 0 || (size_t)st.st_size > limit) {
        close(fd);
        return coli_fail(COLI_EFORMAT, "heat file %s: %lld bytes, more than a heat file has (%zu)", path,
                         (long long)st.st_size, limit);
    }
    size_t size = (size_t)st.st_size, got = 0;
    unsigned char *buf = malloc(size ? size : 1);
    while (buf && got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    int rc = !buf          ? coli_fail(COLI_ENOMEM, "heat file %s: out of memory", path)
             : got != size ? coli_fail(COLI_EIO, "heat file %s: short read", path)
                           : 0;
    close(fd);
    if (rc == 0) rc = s_parse(buf, size, path, h);
    free(buf);
    return rc;
}
