/*
 * bench_matmul - speed of coli_matmul on one expert-sized matrix
 * (2816 rows of 1024 values: bench-mixtral's gate/up; down has the same
 * size) for every weight type, for n_tok = 1 (decode) and 64 (prefill).
 *
 *   bench_matmul [--threads N] [--portable] [--hot] [--seconds S] [--rows R] [--cols C]
 *                [--types Q4_K,Q6_K,...]   (default: every weight type)
 *                [--tokens 1,2,4,64]       (default 1,64; up to 8 tokens stream the weights
 *                                           from memory like decode, more reuse one copy)
 *                [--tiles avx2,avxvnni,avx512vnni,avx512 [--rounds K]]
 *
 * --tiles compares the Q8_0 / Q4_0 tile flavours side by side: K rounds,
 * each timing every flavour once in turn on the same weights, then the
 * median per flavour (a noisy shared machine moves all of them alike).
 * Q4_K / Q5_K / Q6_K / IQ4_XS / MXFP4 take part too: their dot products are 512-bit under
 * "avx512" and AVX2 under the other flavours (MM_SKIP_AVX512).
 *
 * Decode rotates through enough copies of the matrix to exceed the caches,
 * so GB/s is memory bandwidth. "model tok/s" is what bench-mixtral would
 * reach if its 8 layers x 2 experts x 3 matrices were all the work.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/cpu_features.h"
#include "core/kernels/matmul.h"
#include "core/kernels/matmul_dispatch.h"
#include "core/quant/quant.h"
#include "tests/quant_util.h"

static double s_clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float s_frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

typedef struct bench_cfg {
    int threads, portable, hot, rounds;
    double seconds;
    int tile_skip[8], n_tiles; /* --tiles: mm_skip_vnni masks */
    int64_t toks[8];           /* --tokens: n_tok of each case (default 1, 64) */
    int n_toks;
    const char *tile_name[8];
    int64_t rows, cols;
    coli_dtype types[32];
    int n_types;
} bench_cfg;

/* copies of a rows x cols matrix of type t, together at least 512 MiB
 * (or one copy for prefill, where the matrix is reused across tokens) */
static uint8_t *s_make_weights(const bench_cfg *c, coli_dtype t, int copies, size_t *row_bytes) {
    *row_bytes = coli_row_bytes(t, c->cols);
    size_t mat = *row_bytes * (size_t)c->rows;
    uint8_t *w = malloc(mat * (size_t)copies);
    float *row = malloc((size_t)c->cols * sizeof(float));
    if (!w || !row) {
        free(w);
        free(row);
        return NULL;
    }
    unsigned seed = 7;
    /* types core cannot quantize: random blocks with sane scales (the
     * speed does not depend on the values) */
    const int random_blocks = coli_dtype_block_elems(t) > 1 && t != COLI_Q8_0 && t != COLI_Q4_0;
    for (int64_t r = 0; r < c->rows; r++) {
        if (random_blocks) {
            qu_random_blocks(t, w + (size_t)r * *row_bytes, c->cols / coli_dtype_block_elems(t), &seed);
            continue;
        }
        for (int64_t k = 0; k < c->cols; k++) row[k] = 0.03f * s_frand(&seed);
        coli_quantize_row(t, row, w + (size_t)r * *row_bytes, c->cols);
    }
    for (int i = 1; i < copies; i++) memcpy(w + (size_t)i * mat, w, mat);
    free(row);
    return w;
}

/* Seconds per call of coli_matmul on w (copies of the matrix, taken in
 * turn), timed for c->seconds; *cpu: CPU seconds per call per thread. */
static double s_time_calls(const bench_cfg *c, coli_pool *pool, coli_scratch *s, coli_dtype t, int64_t n_tok,
                           const uint8_t *w, size_t mat, int copies, const float *x, float *y, double *cpu) {
    int64_t iters = 0;
    double t0 = s_clock_s(CLOCK_MONOTONIC), t1 = t0, c0 = s_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    while (t1 - t0 < c->seconds || iters < 3) {
        const uint8_t *wi = w + (size_t)(iters % copies) * mat;
        if (coli_matmul(pool, s, wi, t, c->cols, c->rows, x, n_tok, y)) {
            fprintf(stderr, "matmul: %s\n", coli_last_error());
            return -1;
        }
        iters++;
        t1 = s_clock_s(CLOCK_MONOTONIC);
    }
    /* CPU seconds per call per thread: what a call costs on an idle machine
     * (the wall clock also counts time other processes took the cores) */
    *cpu = (s_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / (double)iters / c->threads;
    return (t1 - t0) / (double)iters;
}

static void s_print_case(const bench_cfg *c, coli_dtype t, int64_t n_tok, size_t mat, double per, double cpu,
                         const char *label) {
    double gbs = (double)mat / per / 1e9;
    double gmacs = (double)c->rows * (double)c->cols * (double)n_tok / per / 1e9;
    double tok_s = (double)n_tok / per / 48.0;
    printf("%-5s n_tok=%-3lld %-11s %8.3f ms  %6.2f GB/s  %7.2f GMAC/s  model tok/s %8.1f"
           "   | cpu-time: %8.3f ms %6.2f GB/s %8.1f tok/s\n",
           coli_dtype_name(t), (long long)n_tok, label, per * 1e3, gbs, gmacs, tok_s, cpu * 1e3,
           (double)mat / cpu / 1e9, (double)n_tok / cpu / 48.0);
}

static int s_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* --tiles: rounds x flavours, interleaved; prints each flavour's median. */
static int s_compare_tiles(const bench_cfg *c, coli_pool *pool, coli_scratch *s, coli_dtype t, int64_t n_tok,
                           const uint8_t *w, size_t mat, int copies, const float *x, float *y) {
    double per[8][64], cpu[8][64], cpu_i;
    const int rounds = c->rounds < 64 ? c->rounds : 64;
    for (int r = 0; r < rounds; r++)
        for (int f = 0; f < c->n_tiles; f++) {
            mm_skip_vnni(c->tile_skip[f]);
            per[f][r] = s_time_calls(c, pool, s, t, n_tok, w, mat, copies, x, y, &cpu_i);
            cpu[f][r] = cpu_i;
            mm_skip_vnni(0);
            if (per[f][r] < 0) return 1;
        }
    for (int f = 0; f < c->n_tiles; f++) {
        qsort(per[f], (size_t)rounds, sizeof(double), s_cmp_double);
        qsort(cpu[f], (size_t)rounds, sizeof(double), s_cmp_double);
        s_print_case(c, t, n_tok, mat, per[f][rounds / 2], cpu[f][rounds / 2], c->tile_name[f]);
    }
    return 0;
}

static int s_run_case(const bench_cfg *c, coli_pool *pool, coli_scratch *s, coli_dtype t, int64_t n_tok) {
    size_t row_bytes;
    size_t mat = coli_row_bytes(t, c->cols) * (size_t)c->rows;
    int copies = n_tok <= 8 && !c->hot ? (int)((512u << 20) / mat + 1) : 1;
    uint8_t *w = s_make_weights(c, t, copies, &row_bytes);
    float *x = malloc((size_t)n_tok * (size_t)c->cols * sizeof(float));
    float *y = malloc((size_t)n_tok * (size_t)c->rows * sizeof(float));
    int rc = 1;
    if (!w || !x || !y) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    unsigned seed = 11;
    for (int64_t i = 0; i < n_tok * c->cols; i++) x[i] = s_frand(&seed);
    const int has_flavours = t == COLI_Q8_0 || t == COLI_Q4_0 || t == COLI_Q2_K || t == COLI_Q3_K || t == COLI_Q4_K ||
                             t == COLI_Q5_K || t == COLI_Q6_K || t == COLI_IQ4_XS || t == COLI_MXFP4;
    if (c->n_tiles && has_flavours) {
        rc = s_compare_tiles(c, pool, s, t, n_tok, w, mat, copies, x, y);
        goto done;
    }
    double cpu, per = s_time_calls(c, pool, s, t, n_tok, w, mat, copies, x, y, &cpu);
    if (per >= 0) s_print_case(c, t, n_tok, mat, per, cpu, "");
    rc = per < 0;
done:
    free(w);
    free(x);
    free(y);
    return rc;
}

/* "avx2,avx512" into c->tile_skip / tile_name; -1 on an unknown name or
 * one this CPU lacks. */
static int s_parse_tiles(const char *list, bench_cfg *c) {
    static const struct {
        const char *name;
        int skip;
        int (*present)(void);
    } k_tiles[] = {{"avx2", MM_SKIP_ALL_VNNI, coli_cpu_avx2},
                   {"avxvnni", MM_SKIP_ALL_VNNI & ~MM_SKIP_AVXVNNI, coli_cpu_avxvnni},
                   {"avx512vnni", MM_SKIP_ALL_VNNI & ~MM_SKIP_AVX512VNNI, coli_cpu_avx512vnni},
                   {"avx512", MM_SKIP_ALL_VNNI & ~MM_SKIP_AVX512, coli_cpu_avx512}};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    c->n_tiles = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < sizeof k_tiles / sizeof k_tiles[0] && strcmp(k_tiles[i].name, tok)) i++;
        if (i == sizeof k_tiles / sizeof k_tiles[0] || c->n_tiles == 8 || !k_tiles[i].present()) {
            fprintf(stderr, "bench_matmul: --tiles: '%s' is not a tile flavour this CPU has\n", tok);
            return -1;
        }
        c->tile_skip[c->n_tiles] = k_tiles[i].skip;
        c->tile_name[c->n_tiles++] = k_tiles[i].name;
    }
    return c->n_tiles ? 0 : -1;
}

/* "Q4_K,Q6_K" into c->types; -1 on an unknown or non-weight name. */
static int s_parse_types(const char *list, bench_cfg *c) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    c->n_types = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        coli_dtype t;
        if (coli_dtype_from_name(tok, &t) || !coli_dtype_valid(t) || c->n_types == 32) {
            fprintf(stderr, "bench_matmul: --types: '%s' is not a weight type\n", tok);
            return -1;
        }
        c->types[c->n_types++] = t;
    }
    return c->n_types ? 0 : -1;
}

/* "1,2,4,64" into c->toks; -1 on a bad list. */
static int s_parse_tokens(const char *list, bench_cfg *c) {
    c->n_toks = 0;
    for (const char *p = list; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096 || (*end && *end != ',') || c->n_toks == 8) {
            fprintf(stderr, "bench_matmul: --tokens: '%s' must list up to 8 counts of 1..4096\n", list);
            return -1;
        }
        c->toks[c->n_toks++] = v;
        p = *end ? end + 1 : end;
    }
    return c->n_toks ? 0 : -1;
}

static int s_parse_args(int argc, char **argv, bench_cfg *c) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            c->threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--portable"))
            c->portable = 1;
        else if (!strcmp(argv[i], "--hot"))
            c->hot = 1;
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            c->seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            c->rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc)
            c->cols = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
            if (s_parse_tokens(argv[++i], c)) return 1;
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            c->rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) {
            if (s_parse_types(argv[++i], c)) return 1;
        } else if (!strcmp(argv[i], "--tiles") && i + 1 < argc) {
            if (s_parse_tiles(argv[++i], c)) return 1;
        } else {
            fprintf(stderr,
                    "usage: %s [--threads N] [--portable] [--hot] [--seconds S] [--rows R] [--cols C]"
                    " [--types T,...] [--tokens 1,64] [--tiles avx2,avxvnni,avx512vnni,avx512 [--rounds K]]\n",
                    argv[0]);
            return 1;
        }
    }
    if (c->rounds < 1 || c->rounds > 64) {
        fprintf(stderr, "bench_matmul: --rounds between 1 and 64\n");
        return 1;
    }
    if (c->rows <= 0 || c->cols <= 0 || c->cols % 32) {
        fprintf(stderr, "bench_matmul: --rows > 0 and --cols a positive multiple of 32\n");
        return 1;
    }
    for (int i = 0; i < c->n_types; i++)
        if (c->cols % coli_dtype_block_elems(c->types[i])) {
            fprintf(stderr, "bench_matmul: --cols %lld is not a multiple of %s's block\n", (long long)c->cols,
                    coli_dtype_name(c->types[i]));
            return 1;
        }
    return 0;
}

int main(int argc, char **argv) {
    bench_cfg c = {.threads = 2,
                   .portable = 0,
                   .rounds = 5,
                   .toks = {1, 64},
                   .n_toks = 2,
                   .seconds = 1.0,
                   .rows = 2816,
                   .cols = 1024,
                   .types = {COLI_F32,    COLI_F16,    COLI_BF16,  COLI_Q8_0,  COLI_Q4_0,    COLI_Q4_1,    COLI_Q5_0,
                             COLI_Q5_1,   COLI_IQ4_NL, COLI_Q2_K,  COLI_Q3_K,  COLI_Q4_K,    COLI_Q5_K,    COLI_Q6_K,
                             COLI_IQ4_XS, COLI_MXFP4,  COLI_TQ1_0, COLI_TQ2_0, COLI_IQ2_XXS, COLI_IQ3_XXS, COLI_IQ2_XS,
                             COLI_IQ3_S,  COLI_IQ2_S,  COLI_IQ1_S, COLI_IQ1_M},
                   .n_types = 25};
    if (s_parse_args(argc, argv, &c)) return 2;
    coli_matmul_force_portable(c.portable);
    coli_pool *pool = coli_pool_new(c.threads);
    if (!pool) {
        fprintf(stderr, "%s\n", coli_last_error());
        return 1;
    }
    if (c.threads <= 0) {
        fprintf(stderr, "bench_matmul: --threads >= 1\n");
        return 2;
    }
    printf("matmul %lld x %lld, %d threads, %s kernels\n", (long long)c.rows, (long long)c.cols, coli_pool_size(pool),
           coli_matmul_impl());
    coli_scratch s = {0};
    int rc = 0;
    for (int i = 0; i < c.n_types && !rc; i++)
        for (int k = 0; k < c.n_toks && !rc; k++) rc = s_run_case(&c, pool, &s, c.types[i], c.toks[k]);
    coli_scratch_free(&s);
    coli_pool_destroy(&pool);
    return rc;
}
