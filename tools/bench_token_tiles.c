/*
 * bench_token_tiles - what one more token costs a matmul that already
 * unpacks its weights: coli_matmul on one expert-sized matrix (2816 rows of
 * 1024 values, bench-mixtral's gate/up) for n_tok = 1, 2, ... tokens, one
 * thread, the matrix cache-resident (--reps calls on the same copy), so the
 * figures are the kernels' arithmetic, not memory. A batched decode step
 * (coordinator/batch.c) gives each matrix a handful of rows; cost(n) / n is
 * then what a token pays, and cost(1) / (cost(n) / n) the most that batching
 * can gain on a compute-bound machine.
 *
 *   bench_token_tiles [--type Q4_0] [--tokens 1,2,3,4,8] [--reps R]
 *
 * Under `valgrind --tool=callgrind --toggle-collect=coli_matmul` the
 * instruction counts per call and token are exact and load-independent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/kernels/matmul.h"
#include "core/quant/quant.h"
#include "tests/quant_util.h"

#define MAX_TOK 16

static double s_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct opts {
    coli_dtype type;
    int tokens[MAX_TOK], n_tokens, reps;
} opts;

static int s_parse(int argc, char **argv, opts *o) {
    const char *list = "1,2,3,4,5,8";
    o->type = COLI_Q4_0;
    o->reps = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--type") && i + 1 < argc) {
            if (coli_dtype_from_name(argv[++i], &o->type) != 0 || coli_dtype_block_elems(o->type) < 32)
                return fprintf(stderr, "--type %s: not a quantized weight type\n", argv[i]), 2;
        } else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
            list = argv[++i];
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            o->reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_token_tiles [--type Q4_0] [--tokens 1,2,3,4,8] [--reps R]\n");
            return 2;
        }
    }
    for (const char *s = list; *s && o->n_tokens < MAX_TOK;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > MAX_TOK) return fprintf(stderr, "--tokens: 1..%d each\n", MAX_TOK), 2;
        o->tokens[o->n_tokens++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return o->reps > 0 && o->n_tokens > 0 ? 0 : 2;
}

int main(int argc, char **argv) {
    opts o = {0};
    if (s_parse(argc, argv, &o)) return 2;
    const int64_t n_in = 1024, n_out = 2816;
    const size_t row = coli_row_bytes(o.type, n_in);
    uint8_t *W = malloc(row * (size_t)n_out);
    float *x = malloc((size_t)MAX_TOK * (size_t)n_in * sizeof(float));
    float *y = malloc((size_t)MAX_TOK * (size_t)n_out * sizeof(float));
    if (!W || !x || !y) return fprintf(stderr, "out of memory\n"), 1;
    unsigned seed = 7;
    qu_random_blocks(o.type, W, n_out * (n_in / coli_dtype_block_elems(o.type)), &seed);
    for (int64_t i = 0; i < MAX_TOK * n_in; i++) x[i] = (float)(qu_next(&seed) & 0xffff) / 32768.0f - 1.0f;
    coli_scratch scratch = {0};
    printf("%s %lld x %lld, 1 thread, %d calls each (cache-resident)\n", coli_dtype_name(o.type), (long long)n_out,
           (long long)n_in, o.reps);
    printf("| tokens | CPU us per call | per token | x (1 token / per token) |\n|---|---|---|---|\n");
    double one = 0;
    for (int k = 0; k < o.n_tokens; k++) {
        const int n = o.tokens[k];
        if (coli_matmul(NULL, &scratch, W, o.type, n_in, n_out, x, n, y) != 0) /* warm-up */
            return fprintf(stderr, "%s\n", coli_last_error()), 1;
        const double t0 = s_cpu_s();
        for (int r = 0; r < o.reps; r++) coli_matmul(NULL, &scratch, W, o.type, n_in, n_out, x, n, y);
        const double us = (s_cpu_s() - t0) * 1e6 / o.reps;
        if (k == 0) one = us / n;
        printf("| %d | %.1f | %.1f | %.2f |\n", n, us, us / n, one / (us / n));
    }
    coli_scratch_free(&scratch);
    free(W);
    free(x);
    free(y);
    return 0;
}
