/*
 * matmul_qtile.h - the Q8_0 / Q4_0 register tiles of matmul_avx2.c, written
 * once and compiled once per integer dot instruction: matmul_avx2.c
 * includes this file several times (no include guard on purpose), each
 * time defining
 *   QT_TARGET            the function attribute of the instruction set,
 *   QT_SUFFIX            appended to every name defined here,
 *   QT_DPBUSD(acc, u, s) acc plus the int32 lanes of sum(u * s) over each
 *                        4 bytes, u unsigned and s signed bytes.
 * AVX2 has no such instruction (maddubs then madd with ones); AVX-VNNI and
 * AVX512-VNNI have vpdpbusd, one instruction instead of three per row and
 * block. The lanes are the same exact integers either way (maddubs cannot
 * saturate here: |w| <= 127 after Q8_0's rounding, Q4_0 nibbles < 16), so
 * every variant gives the same bits: the choice depends on the CPU only,
 * never on the batch or the thread (matmul.h's contract).
 *
 * Needs (from matmul_avx2.c): mm_job, tile_fn, s_rows_quant, s_load_wq,
 * s_load_wd4, s_fold4, s_prefetch_ahead, PF_*, s_qtile_rows, s_qtile_store, Q_RM, Q_RN.
 */
#define QT_CAT2(a, b) a##_##b
#define QT_CAT(a, b) QT_CAT2(a, b)
#define QT_NAME(n) QT_CAT(n, QT_SUFFIX)

/* The 8 int32 lanes of sum(w * x) over the block, lane i summing elements
 * 4i..4i+3. Q8_0: |w| * sign(x, w), llama.cpp's trick for a signed x signed
 * product. Q4_0: q * x - 8 * x, starting from neg_xc = the lanes of -8 * x:
 * the same integers exactly, with no sign fix-ups per row. */
QT_TARGET ALWAYS __m256i QT_NAME(s_block_dot)(__m256i wq, __m256i aw, __m256i xv, __m256i neg_xc, coli_dtype T) {
    if (T == COLI_Q8_0) return QT_DPBUSD(_mm256_setzero_si256(), aw, _mm256_sign_epi8(xv, wq));
    return QT_DPBUSD(neg_xc, wq, xv);
}

/* Rows r..r+RM-1 x tokens t..t+RN-1, prefetching the pf way (PF_*). */
QT_TARGET ALWAYS void QT_NAME(s_quant_tile)(const mm_job *j, int64_t r, int64_t t, const int pf, const int RM,
                                            const int RN, const coli_dtype T) {
    const int64_t nb = j->n_in / COLI_QK;
    const size_t bb = T == COLI_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
    const uint8_t *w[4];
    const int8_t *xq[4];
    const float *xd[4];
    s_qtile_rows(j, r, t, RM, RN, w, xq, xd);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int b = 0; b < RN; b++) acc[b] = _mm256_setzero_ps();
    /* The first token tile of a token block streams these weight rows from
     * memory (decode, and the few rows of a batched decode step, have only
     * that one; later tiles of a prefill find them in cache): fetch the
     * rows ahead (s_prefetch_ahead) while this block computes. The hardware
     * prefetchers barely help with four streams (docs/benchmarks.md). */
    for (int64_t k = 0; k < nb; k++) {
        __m256i wq[4], aw[4];
        s_prefetch_ahead(j, w[0], k, bb, 1, RM, pf);
        const __m128 dw = s_load_wd4(w, (size_t)k * bb, RM);
#pragma GCC unroll 4
        for (int a = 0; a < RM; a++) {
            wq[a] = s_load_wq(w[a] + (size_t)k * bb, T);
            aw[a] = T == COLI_Q8_0 ? _mm256_sign_epi8(wq[a], wq[a]) : wq[a];
        }
#pragma GCC unroll 4
        for (int b = 0; b < RN; b++) {
            const __m256i xv = _mm256_load_si256((const __m256i *)(xq[b] + k * COLI_QK));
            /* d_w * d_x of each row: the same single-precision products as one at a time */
            const __m128 s4 = _mm_mul_ps(dw, _mm_set1_ps(xd[b][k]));
            const __m256i zero = _mm256_setzero_si256();
            const __m256i neg_xc =
                T == COLI_Q4_0 ? _mm256_sub_epi32(zero, QT_DPBUSD(zero, _mm256_set1_epi8(8), xv)) : zero;
            __m256i d[4];
#pragma GCC unroll 4
            for (int a = 0; a < RM; a++) d[a] = QT_NAME(s_block_dot)(wq[a], aw[a], xv, neg_xc, T);
            acc[b] = _mm256_fmadd_ps(s_fold4(d, RM), _mm256_set_m128(s4, s4), acc[b]);
        }
    }
    s_qtile_store(j, r, t, acc, RM, RN);
}

#define QT_TILE(T, A, B)                                                                                 \
    QT_TARGET static void QT_NAME(s_qt_##T##_##A##_##B)(const mm_job *j, int64_t r, int64_t t, int pf) { \
        QT_NAME(s_quant_tile)(j, r, t, pf, A, B, COLI_##T);                                              \
    }
#define QT_ROW(T, A) QT_TILE(T, A, 1) QT_TILE(T, A, 2) QT_TILE(T, A, 3) QT_TILE(T, A, 4)
#define QT_TYPE(T) QT_ROW(T, 1) QT_ROW(T, 2) QT_ROW(T, 3) QT_ROW(T, 4)
#define QT_ALL_TILES QT_TYPE(Q8_0) QT_TYPE(Q4_0)
QT_ALL_TILES

#define QT_TROW(T, A)                                                                          \
    {                                                                                          \
        QT_NAME(s_qt_##T##_##A##_1), QT_NAME(s_qt_##T##_##A##_2), QT_NAME(s_qt_##T##_##A##_3), \
            QT_NAME(s_qt_##T##_##A##_4)                                                        \
    }
static const tile_fn QT_NAME(s_q8_0)[4][4] = {QT_TROW(Q8_0, 1), QT_TROW(Q8_0, 2), QT_TROW(Q8_0, 3), QT_TROW(Q8_0, 4)};
static const tile_fn QT_NAME(s_q4_0)[4][4] = {QT_TROW(Q4_0, 1), QT_TROW(Q4_0, 2), QT_TROW(Q4_0, 3), QT_TROW(Q4_0, 4)};

static void QT_NAME(s_rows_q8_0)(const mm_job *j, int64_t r0, int64_t r1) { s_rows_quant(j, r0, r1, QT_NAME(s_q8_0)); }
static void QT_NAME(s_rows_q4_0)(const mm_job *j, int64_t r0, int64_t r1) { s_rows_quant(j, r0, r1, QT_NAME(s_q4_0)); }

#undef QT_TILE
#undef QT_ROW
#undef QT_ALL_TILES
#undef QT_TYPE
#undef QT_TROW
#undef QT_NAME
#undef QT_CAT
#undef QT_CAT2
#undef QT_TARGET
#undef QT_SUFFIX
#undef QT_DPBUSD
