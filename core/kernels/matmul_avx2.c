/*
 * matmul_avx2.c - AVX2 + FMA + F16C kernels, compiled per function
 * (COLI_TARGET_AVX2) and called only when the CPU has them.
 *
 * Register tiles: a kernel computes RM weight rows x RN tokens at once, so
 * each weight block loaded (and, for Q4_0, unpacked) serves RN tokens and
 * each input block serves RM rows. One accumulator of 8 lanes per (row,
 * token) pair; the pair's operations are the same in every tile shape, so
 * edge tiles (fewer rows or tokens) give the very same bits.
 *
 * Quantized blocks use llama.cpp's AVX2 integer dot: |w| * sign(x, w) with
 * maddubs (pairs of int8 products, no overflow: 2*128*127 < 32768), madd
 * with ones to 8 int32 lanes; the lanes of 4 rows are folded by two hadds
 * into each row's exact integer sums over elements 0..15 and 16..31, then
 * converted and accumulated scaled by d_w * d_x, 4 rows per instruction.
 * Q4_0 gets the same int32 lanes as nibbles * x - 8 * x (see s_block_dot).
 * Where the CPU has AVX-VNNI or AVX512-VNNI, vpdpbusd makes those lanes in
 * one instruction instead of maddubs + madd (+ sub): the same integers, so
 * the same bits (matmul_qtile.h). Which of them runs is the kernel
 * table's choice (matmul_dispatch.c, by the CPU's features).
 */
#include <string.h>

#include "core/cpu_features.h" /* COLI_X86, COLI_TARGET_* */
#include "core/kernels/matmul_impl.h"
#include "core/quant/quant.h"

#if COLI_X86
#include <immintrin.h>

#define AVX2 COLI_TARGET_AVX2
#define ALWAYS static inline __attribute__((always_inline))

/* tile sizes (rows x tokens); see tools/bench_matmul.c */
#ifndef F_RM
#define F_RM 4
#endif
#ifndef F_RN
#define F_RN 3
#endif
#ifndef Q_RM
#define Q_RM 4
#endif
#ifndef Q_RN
#define Q_RN 4
#endif

// ----------------------------------------------------------------------------
// input preparation

AVX2 void mm_avx2_round_rows(coli_dtype wtype, const float *x, int64_t n_tok, int64_t n_in, float *xf,
                             int64_t xf_stride) {
    for (int64_t t = 0; t < n_tok; t++) {
        const float *src = x + t * n_in;
        float *dst = xf + t * xf_stride;
        int64_t i = 0;
        if (wtype == COLI_F16) {
            for (; i + 8 <= n_in; i += 8) {
                __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
                _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
            }
            for (; i < n_in; i++) dst[i] = coli_fp16_to_fp32(coli_fp32_to_fp16(src[i]));
        } else {
            for (; i < n_in; i++) dst[i] = coli_bf16_to_fp32(coli_fp32_to_bf16(src[i]));
        }
    }
}

/* llama.cpp's quantize_row_q8_0 AVX2 branch, written out as separate
 * values and scales. */
AVX2 static void s_quantize_block(const float *x, int8_t *q, float *d) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    __m256 m = _mm256_andnot_ps(sign, v0);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v1));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v2));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v3));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    *d = coli_fp16_to_fp32(coli_fp32_to_fp16(amax / 127.0f));
    const __m256 mul = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    enum {
        mode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC
    }; /* a constant expression, as clang requires */
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, mul), mode));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, mul), mode));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, mul), mode));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, mul), mode));
    i0 = _mm256_packs_epi32(i0, i1);
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    /* the packs work per 128-bit lane; put the bytes back in order */
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, i0);
}

AVX2 void mm_avx2_quantize_rows(const float *x, int64_t n_tok, int64_t n_in, int8_t *xq, float *xd) {
    const int64_t nb = n_in / COLI_QK;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t b = 0; b < nb; b++)
            s_quantize_block(x + t * n_in + b * COLI_QK, xq + t * n_in + b * COLI_QK, xd + t * nb + b);
}

// ----------------------------------------------------------------------------
// helpers

AVX2 ALWAYS float s_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX2 ALWAYS __m256 s_load_w8(const uint8_t *row, int64_t k, coli_dtype t) {
    if (t == COLI_F32) return _mm256_loadu_ps((const float *)row + k);
    __m128i h = _mm_loadu_si128((const __m128i *)(row + 2 * k));
    if (t == COLI_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float s_load_w1(const uint8_t *row, int64_t k, coli_dtype t) {
    if (t == COLI_F32) {
        float f;
        memcpy(&f, row + 4 * k, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, row + 2 * k, 2);
    return t == COLI_F16 ? coli_fp16_to_fp32(h) : coli_bf16_to_fp32(h);
}

AVX2 ALWAYS float s_fma1(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// ----------------------------------------------------------------------------
// float weights (F32, F16, BF16): RM x RN tile

AVX2 ALWAYS void s_prefetch_ahead(const mm_job *j, const uint8_t *w0, int64_t k, const size_t bb, const int blocks,
                                  const int RM, int pf);

/* pf: as the quantized tiles (s_prefetch_ahead), one call per 32 values
 * (a 64-byte line of each F16 / BF16 row, two of an F32 one): a decode
 * streams its float rows from memory, and 4 rows side by side are more
 * streams than the hardware prefetchers follow. */
AVX2 ALWAYS void s_float_tile(const mm_job *j, int64_t r, int64_t t, const int RM, const int RN, const coli_dtype T,
                              int pf) {
    const size_t esize = T == COLI_F32 ? 4 : 2;
    const int64_t n = j->n_in, n8 = n & ~(int64_t)7;
    const uint8_t *w[4];
    const float *x[4];
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int a = 0; a < RM; a++) w[a] = j->W + (size_t)(r + a) * j->w_stride;
#pragma GCC unroll 4
    for (int b = 0; b < RN; b++) x[b] = j->xf + (t + b) * j->xf_stride;
#pragma GCC unroll 4
    for (int a = 0; a < RM; a++)
#pragma GCC unroll 4
        for (int b = 0; b < RN; b++) acc[a][b] = _mm256_setzero_ps();
    for (int64_t k = 0; k < n8; k += 8) {
        __m256 wv[4];
        if ((k & 31) == 0) s_prefetch_ahead(j, w[0], k / 32, 32 * esize, 1, RM, pf);
#pragma GCC unroll 4
        for (int a = 0; a < RM; a++) wv[a] = s_load_w8(w[a], k, T);
#pragma GCC unroll 4
        for (int b = 0; b < RN; b++) {
            const __m256 xv = _mm256_loadu_ps(x[b] + k);
#pragma GCC unroll 4
            for (int a = 0; a < RM; a++) acc[a][b] = _mm256_fmadd_ps(wv[a], xv, acc[a][b]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < RM; a++)
#pragma GCC unroll 4
        for (int b = 0; b < RN; b++) {
            float s = s_hsum8(acc[a][b]);
            for (int64_t k = n8; k < n; k++) s = s_fma1(s_load_w1(w[a], k, T), x[b][k], s);
            j->y[(t + b) * j->n_out + r + a] = s;
        }
}

// ----------------------------------------------------------------------------
// quantized weights (Q8_0, Q4_0) with Q8_0 input: RM x RN tile

/* Q8_0: the signed values. Q4_0: the unsigned nibbles q in [0, 16) (the
 * value is q - 8; the tile subtracts 8 * x once per input block instead of
 * per weight block, see s_quant_tile). Byte j = element j (low nibble) and
 * j+16 (high nibble): the 16 bytes broadcast to both halves (a load, no
 * shuffle), the upper half shifted by 4, then masked. */
AVX2 ALWAYS __m256i s_load_wq(const uint8_t *blk, coli_dtype T) {
    if (T == COLI_Q8_0) return _mm256_loadu_si256((const __m256i *)(blk + 2));
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + 2)));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0f));
}

/* The fp16 scales of block k of the RM rows as 4 floats (lanes past RM: 0),
 * converted by one vcvtph2ps instead of one per row. */
AVX2 ALWAYS __m128 s_load_wd4(const uint8_t *const *w, size_t off, const int RM) {
    uint16_t h[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
    for (int a = 0; a < RM; a++) memcpy(&h[a], w[a] + off, 2);
    return _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, (short)h[3], (short)h[2], (short)h[1], (short)h[0]));
}

/* Block k of rows r..r+RM against token t: the block dots of the RM rows
 * (8 int32 lanes each, zeros past RM) folded by two hadds into one vector
 * whose lanes a and a+4 are row a's integer sums over elements 0..15 and
 * 16..31 (exact), converted and scaled by d_w * d_x of their row at once:
 * one convert and one FMA per 4 rows instead of 4 each. Row a's lanes see
 * the same operations in every tile shape. */
AVX2 ALWAYS __m256 s_fold4(const __m256i *d, const int RM) {
    const __m256i z = _mm256_setzero_si256();
    const __m256i d01 = _mm256_hadd_epi32(d[0], RM > 1 ? d[1] : z);
    const __m256i d23 = RM > 2 ? _mm256_hadd_epi32(d[2], RM > 3 ? d[3] : z) : z;
    return _mm256_cvtepi32_ps(_mm256_hadd_epi32(d01, d23));
}

/* Where a Q8_0 / Q4_0 tile reads: its RM weight rows w, its RN tokens'
 * quantized values xq and block scales xd. */
AVX2 ALWAYS void s_qtile_rows(const mm_job *j, int64_t r, int64_t t, const int RM, const int RN, const uint8_t **w,
                              const int8_t **xq, const float **xd) {
    const int64_t nb = j->n_in / COLI_QK;
#pragma GCC unroll 4
    for (int a = 0; a < RM; a++) w[a] = j->W + (size_t)(r + a) * j->w_stride;
#pragma GCC unroll 4
    for (int b = 0; b < RN; b++) {
        xq[b] = j->xq + (t + b) * j->n_in;
        xd[b] = j->xd + (t + b) * nb;
    }
}

/* A tile's results: token b's accumulator holds row a's sums over
 * elements 0..15 in lane a and over 16..31 in lane a + 4. */
AVX2 ALWAYS void s_qtile_store(const mm_job *j, int64_t r, int64_t t, const __m256 *acc, const int RM, const int RN) {
#pragma GCC unroll 4
    for (int b = 0; b < RN; b++) {
        const __m128 sum = _mm_add_ps(_mm256_castps256_ps128(acc[b]), _mm256_extractf128_ps(acc[b], 1));
        float out[4];
        _mm_storeu_ps(out, sum);
#pragma GCC unroll 4
        for (int a = 0; a < RM; a++) j->y[(t + b) * j->n_out + r + a] = out[a];
    }
}

/* How a quantized tile fetches the weight rows ahead (s_rows_quant decides
 * per chunk, s_rows_tiled per token tile): not at all (the later token tiles of a prefill
 * find the rows in cache), T0, or non-temporal where a job reads its rows
 * once (MM_READ_ONCE_TOKENS; Q8_0 / Q4_0 decode read 5-10% faster than
 * with T0, tools/bench_matmul.c; a prefill keeps T0: its token tiles stream
 * the activations through L1 and would evict a non-temporal row before its
 * last token tile, 64 tokens: 2-3% slower); PF_ROWS: along the rows, not in
 * address order (s_prefetch_ahead). The tests per line are predictable
 * branches: a loop compiled per mode was no faster (weights hot or
 * streamed) and took the sanitizer build of this file from 30 s to 3.5 min. */
enum {
    PF_NONE = 0,
    PF_T0 = 1,
    PF_NTA = 2,
    PF_ROWS = 4
};

/* What a tile of RM rows from w0 fetches at block k (bb bytes a block,
 * `blocks` blocks a step; bb, blocks and RM constants), the pf way:
 *  - in address order: the bytes of the tile two tiles on (its rows are
 *    contiguous), RM blocks' worth a block: every line they touch;
 *  - PF_ROWS (rows longer than MM_PREFETCH_LINEAR_MAX): each row's line
 *    MM_PREFETCH_ROW_BYTES further on, which past the row's end is that
 *    offset in the row the tile ahead reads in its place (RM rows on, not
 *    the next: a tile reads its rows side by side). The offset stays below
 *    two rows (rows are longer than MM_PREFETCH_ROW_BYTES). */
AVX2 ALWAYS void s_prefetch_ahead(const mm_job *j, const uint8_t *w0, int64_t k, const size_t bb, const int blocks,
                                  const int RM, int pf) {
    if (pf == PF_NONE) return;
    const size_t ws = j->w_stride;
    const char *p = (const char *)w0 + 2 * RM * ws + (size_t)k * RM * bb;
    int rows = 1, lines = (blocks * RM * (int)bb + 63) / 64 + 1;
    if (pf & PF_ROWS) {
        const size_t off = MM_PREFETCH_ROW_BYTES + (size_t)k * bb;
        p = (const char *)w0 + off + (off >= ws ? (size_t)(RM - 1) * ws : 0);
        rows = RM;
        lines = (blocks * (int)bb + 63) / 64;
    }
#pragma GCC unroll 4
    for (int a = 0; a < rows; a++)
#pragma GCC unroll 8
        for (int l = 0; l < lines; l++) mm_prefetch_line(p + a * ws + 64 * l, pf & PF_NTA);
}

// ----------------------------------------------------------------------------
// instantiations: every tile shape up to the maximum, per type

/* Rows r..r+RM-1 x tokens t..t+RN-1; pf: PF_*. */
typedef void (*tile_fn)(const mm_job *j, int64_t r, int64_t t, int pf);

#define FT(T, A, B)                                                                        \
    AVX2 static void s_ft_##T##_##A##_##B(const mm_job *j, int64_t r, int64_t t, int pf) { \
        s_float_tile(j, r, t, A, B, COLI_##T, pf);                                         \
    }
#define ROWS_OF(M, T, A) M(T, A, 1) M(T, A, 2) M(T, A, 3) M(T, A, 4)
#define ALL_OF(M, T) ROWS_OF(M, T, 1) ROWS_OF(M, T, 2) ROWS_OF(M, T, 3) ROWS_OF(M, T, 4)
ALL_OF(FT, F32)
ALL_OF(FT, F16)
ALL_OF(FT, BF16)

#define TROW(P, T, A) \
    { P##_##T##_##A##_1, P##_##T##_##A##_2, P##_##T##_##A##_3, P##_##T##_##A##_4 }
#define TABLE(P, T) \
    { TROW(P, T, 1), TROW(P, T, 2), TROW(P, T, 3), TROW(P, T, 4) }
static const tile_fn s_f32[4][4] = TABLE(s_ft, F32);
static const tile_fn s_f16[4][4] = TABLE(s_ft, F16);
static const tile_fn s_bf16[4][4] = TABLE(s_ft, BF16);

// ----------------------------------------------------------------------------
// row loop: per block of tokens, row tiles x token tiles

/* The first two tiles of a chunk, which s_prefetch_ahead (in address order,
 * rows up to MM_PREFETCH_LINEAR_MAX) would have fetched had the chunk gone
 * on from the one before: it does not, the pool's threads take chunks in
 * turn, so the rows before r0 were another thread's and that thread's
 * prefetches went into its own core's cache. Without this the first two
 * tiles of every chunk (2 x 4 rows of a ~100 KiB chunk: 5-17%) were read
 * on demand misses; bench_matmul 1024 columns, Q4_0 0.830 -> 0.772 ms (15
 * interleaved rounds). Along the rows only the first 2 KiB of 4 rows are
 * missed: left alone. */
static void s_prefetch_chunk_start(const mm_job *j, int64_t r0, int64_t r1, int RM, int pf) {
    const int64_t end = r0 + 2 * RM < r1 ? r0 + 2 * RM : r1;
    const char *p = (const char *)j->W + (size_t)r0 * j->w_stride, *q = (const char *)j->W + (size_t)end * j->w_stride;
    for (; p < q; p += 64) mm_prefetch_line(p, pf & PF_NTA);
}

/* Rows r0..r1 for all tokens, a block of tokens at a time; the first token
 * tile of each block gets pf, the others PF_NONE (the rows are cached). */
static void s_rows_tiled(const mm_job *j, int64_t r0, int64_t r1, const tile_fn table[4][4], int RM, int RN, int pf) {
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += j->token_block) {
        int64_t t1 = t0 + j->token_block < j->n_tok ? t0 + j->token_block : j->n_tok;
        for (int64_t r = r0; r < r1; r += RM) {
            int rm = r1 - r < RM ? (int)(r1 - r) : RM;
            for (int64_t t = t0; t < t1; t += RN) {
                int rn = t1 - t < RN ? (int)(t1 - t) : RN;
                table[rm - 1][rn - 1](j, r, t, t == t0 ? pf : PF_NONE);
            }
        }
    }
}

/* The Q8_0 / Q4_0 tiles' rows: how they prefetch (PF_*: non-temporal for
 * a job that reads its rows once, along the rows for long ones) and, in
 * address order, the chunk's first two tiles before the first. */
static void s_rows_prefetched(const mm_job *j, int64_t r0, int64_t r1, const tile_fn table[4][4], int RM, int RN) {
    const int pf =
        (j->n_tok <= MM_READ_ONCE_TOKENS ? PF_NTA : PF_T0) | (j->w_stride > MM_PREFETCH_LINEAR_MAX ? PF_ROWS : 0);
    if (!(pf & PF_ROWS)) s_prefetch_chunk_start(j, r0, r1, RM, pf);
    s_rows_tiled(j, r0, r1, table, RM, RN, pf);
}

static void s_rows_quant(const mm_job *j, int64_t r0, int64_t r1, const tile_fn table[4][4]) {
    s_rows_prefetched(j, r0, r1, table, Q_RM, Q_RN);
}

/* The float rows prefetch as the quantized ones (s_float_tile). */
static void s_rows_f32(const mm_job *j, int64_t r0, int64_t r1) { s_rows_prefetched(j, r0, r1, s_f32, F_RM, F_RN); }
static void s_rows_f16(const mm_job *j, int64_t r0, int64_t r1) { s_rows_prefetched(j, r0, r1, s_f16, F_RM, F_RN); }
static void s_rows_bf16(const mm_job *j, int64_t r0, int64_t r1) { s_rows_prefetched(j, r0, r1, s_bf16, F_RM, F_RN); }

// ----------------------------------------------------------------------------
// quantized tiles, once per integer dot instruction (matmul_qtile.h)

#define QT_TARGET AVX2
#define QT_SUFFIX avx2
#define QT_DPBUSD(acc, u, s) \
    _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#include "core/kernels/matmul_qtile.h"

#define QT_TARGET COLI_TARGET_AVXVNNI
#define QT_SUFFIX avxvnni
#define QT_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#include "core/kernels/matmul_qtile.h"

#define QT_TARGET COLI_TARGET_AVX512VNNI
#define QT_SUFFIX avx512vnni
#define QT_DPBUSD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#include "core/kernels/matmul_qtile.h"

#include "core/kernels/matmul_qtile512.h"

/* The Q8_0 / Q4_0 rows of each integer dot, in mm_qtile_isa's order. */
static const mm_rows_fn s_quant_rows[4][2] = {
    [MM_QTILE_AVX2] = {s_rows_q8_0_avx2, s_rows_q4_0_avx2},
    [MM_QTILE_AVXVNNI] = {s_rows_q8_0_avxvnni, s_rows_q4_0_avxvnni},
    [MM_QTILE_AVX512VNNI] = {s_rows_q8_0_avx512vnni, s_rows_q4_0_avx512vnni},
    [MM_QTILE_AVX512] = {s_rows_q8_0_avx512, s_rows_q4_0_avx512},
};

mm_rows_fn mm_avx2_rows(coli_dtype wtype, mm_qtile_isa isa) {
    switch (wtype) {
    case COLI_F32: return s_rows_f32;
    case COLI_F16: return s_rows_f16;
    case COLI_BF16: return s_rows_bf16;
    case COLI_Q8_0: return s_quant_rows[isa][0];
    case COLI_Q4_0: return s_quant_rows[isa][1];
    default: break;
    }
    return s_rows_f32;
}

#else /* not x86: never called (coli_cpu_avx2() is 0, matmul_dispatch.c), present for the linker */

mm_rows_fn mm_avx2_rows(coli_dtype wtype, mm_qtile_isa isa) {
    (void)wtype;
    (void)isa;
    return NULL;
}
void mm_avx2_round_rows(coli_dtype wtype, const float *x, int64_t n_tok, int64_t n_in, float *xf, int64_t xf_stride) {
    (void)wtype, (void)x, (void)n_tok, (void)n_in, (void)xf, (void)xf_stride;
}
void mm_avx2_quantize_rows(const float *x, int64_t n_tok, int64_t n_in, int8_t *xq, float *xd) {
    (void)x, (void)n_tok, (void)n_in, (void)xq, (void)xd;
}
#endif
