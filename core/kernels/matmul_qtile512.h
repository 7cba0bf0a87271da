/*
 * matmul_qtile512.h - the Q8_0 / Q4_0 register tiles with 512-bit registers
 * (AVX-512 F/BW/DQ/VL + VNNI), included once by matmul_avx2.c.
 *
 * Why: decode and prefill of these types are bound by the integer work per
 * weight byte, not by memory (docs/benchmarks.md). One zmm vpdpbusd makes
 * the lanes of two weight blocks, so the unpack, the dots, the fold and the
 * convert of a block pair cost about what one block costs in 256 bits.
 *
 * The same bits as matmul_qtile.h, on purpose: a pair's integer lanes are
 * the exact integers the 256-bit tile makes for each block (integer adds in
 * another order are the same integers), and each block's float steps (d_w *
 * d_x product, convert, one fused multiply-add into the token's
 * accumulator) run as there, block k before block k + 1. An odd last block
 * takes the 256-bit step. So placement on a CPU with or without AVX-512
 * never changes a token (tests/test_matmul.c compares every flavour).
 *
 * Needs (from matmul_avx2.c): mm_job, tile_fn, s_rows_quant, s_load_wq,
 * s_load_wd4, s_fold4, s_prefetch_ahead, PF_*, s_qtile_rows, s_qtile_store, Q_RM, Q_RN, ALWAYS.
 */
#define W512 COLI_TARGET_AVX512

/* The quants of blocks k (low 256 bits) and k + 1 (high) of one row, each
 * half laid out as s_load_wq lays out one block. */
W512 ALWAYS __m512i s_load_wq2(const uint8_t *blk, size_t bb, coli_dtype T) {
    if (T == COLI_Q8_0) {
        const __m512i lo = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(blk + 2)));
        return _mm512_inserti64x4(lo, _mm256_loadu_si256((const __m256i *)(blk + bb + 2)), 1);
    }
    const __m512i lo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(blk + 2)));
    const __m512i v = _mm512_mask_broadcast_i32x4(lo, 0xff00, _mm_loadu_si128((const __m128i *)(blk + bb + 2)));
    return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(0x0f));
}

/* The fp16 scales of blocks k (lanes 0..3) and k + 1 (4..7) of the RM rows. */
W512 ALWAYS __m256 s_load_wd8(const uint8_t *const *w, size_t off, size_t bb, const int RM) {
    uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma GCC unroll 4
    for (int a = 0; a < RM; a++) {
        memcpy(&h[a], w[a] + off, 2);
        memcpy(&h[4 + a], w[a] + off + bb, 2);
    }
    return _mm256_cvtph_ps(_mm_set_epi16((short)h[7], (short)h[6], (short)h[5], (short)h[4], (short)h[3], (short)h[2],
                                         (short)h[1], (short)h[0]));
}

/* s_fold4 of both blocks at once (AVX-512 has no hadd): in each 256-bit
 * half, lanes a and a + 4 are row a's sums over elements 0..15 and 16..31
 * of that half's block, converted: s_fold4's integers exactly. */
W512 ALWAYS __m512 s_fold4x2(const __m512i *d, const int RM) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i d1 = RM > 1 ? d[1] : z, d2 = RM > 2 ? d[2] : z, d3 = RM > 3 ? d[3] : z;
    const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(d[0], d1), _mm512_unpackhi_epi32(d[0], d1));
    const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(d2, d3), _mm512_unpackhi_epi32(d2, d3));
    return _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23)));
}

/* Q8_0: the lanes of -128 * sum(w) of one row's block pair, the base that
 * takes back out what x + 128 adds (s_pair_dot), computed once per weight
 * load for every token of the tile. */
W512 ALWAYS __m512i s_neg128_sums(__m512i wq) {
    const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), wq);
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, 7));
}

/* One token against blocks k, k + 1 of the tile's rows: wq the rows'
 * quants, base their s_neg128_sums (Q8_0), dw16 their scales as [block k's
 * 4, again, block k + 1's 4, again]. vpdpbusd wants one unsigned operand:
 * Q8_0 makes it x + 128 (x ^ 0x80, for every signed byte) and starts
 * from -128 * sum(w); Q4_0 has it in the nibbles and starts from
 * -8 * sum(x). Either way each lane is sum(w * x) over its 4 elements,
 * exactly the 256-bit tile's integers. The scale products are the same
 * single-precision d_w * d_x, the two FMAs the same, in block order. */
W512 ALWAYS __m256 s_pair_dot(const __m512i *wq, const __m512i *base, __m512 dw16, const int8_t *xq, const float *xd,
                              __m256 acc, const int RM, const coli_dtype T) {
    const __m512i xv = _mm512_loadu_si512((const void *)xq), zero = _mm512_setzero_si512();
    const __m512 xd2 =
        _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                              _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)xd))));
    const __m512 s16 = _mm512_mul_ps(dw16, xd2);
    const __m512i xu = T == COLI_Q8_0 ? _mm512_xor_si512(xv, _mm512_set1_epi8((char)0x80)) : xv;
    const __m512i neg_xc =
        T == COLI_Q4_0 ? _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(8), xv)) : zero;
    __m512i d[4];
#pragma GCC unroll 4
    for (int a = 0; a < RM; a++)
        d[a] = T == COLI_Q8_0 ? _mm512_dpbusd_epi32(base[a], xu, wq[a]) : _mm512_dpbusd_epi32(neg_xc, wq[a], xv);
    const __m512 f = s_fold4x2(d, RM);
    acc = _mm256_fmadd_ps(_mm512_castps512_ps256(f), _mm512_castps512_ps256(s16), acc);
    return _mm256_fmadd_ps(_mm512_extractf32x8_ps(f, 1), _mm512_extractf32x8_ps(s16, 1), acc);
}

/* The odd last block: matmul_qtile.h's step, 256 bits. */
W512 ALWAYS __m256 s_single_dot(const uint8_t *const *w, size_t off, const int8_t *xq, float xd, __m256 acc,
                                const int RM, const coli_dtype T) {
    const __m256i xv = _mm256_loadu_si256((const __m256i *)xq), zero = _mm256_setzero_si256();
    const __m128 s4 = _mm_mul_ps(s_load_wd4(w, off, RM), _mm_set1_ps(xd));
    const __m256i neg_xc =
        T == COLI_Q4_0 ? _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(8), xv)) : zero;
    __m256i d[4];
#pragma GCC unroll 4
    for (int a = 0; a < RM; a++) {
        const __m256i wq = s_load_wq(w[a] + off, T);
        d[a] = T == COLI_Q8_0 ? _mm256_dpbusd_epi32(zero, _mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv, wq))
                              : _mm256_dpbusd_epi32(neg_xc, wq, xv);
    }
    return _mm256_fmadd_ps(s_fold4(d, RM), _mm256_set_m128(s4, s4), acc);
}

/* Rows r..r+RM-1 x tokens t..t+RN-1, prefetching the pf way (PF_*). */
W512 ALWAYS void s_quant_tile512(const mm_job *j, int64_t r, int64_t t, const int pf, const int RM, const int RN,
                                 const coli_dtype T) {
    const int64_t nb = j->n_in / COLI_QK;
    const size_t bb = T == COLI_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
    const uint8_t *w[4];
    const int8_t *xq[4];
    const float *xd[4];
    s_qtile_rows(j, r, t, RM, RN, w, xq, xd);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int b = 0; b < RN; b++) acc[b] = _mm256_setzero_ps();
    /* as matmul_qtile.h: the first token tile of a token block fetches
     * its rows ahead, here two blocks' worth a step */
    int64_t k = 0;
    for (; k + 2 <= nb; k += 2) {
        s_prefetch_ahead(j, w[0], k, bb, 2, RM, pf);
        const __m512 dw8 = _mm512_castps256_ps512(s_load_wd8(w, (size_t)k * bb, bb, RM));
        const __m512 dw16 = _mm512_shuffle_f32x4(dw8, dw8, _MM_SHUFFLE(1, 1, 0, 0));
        __m512i wq[4], base[4];
#pragma GCC unroll 4
        for (int a = 0; a < RM; a++) {
            wq[a] = s_load_wq2(w[a] + (size_t)k * bb, bb, T);
            base[a] = T == COLI_Q8_0 ? s_neg128_sums(wq[a]) : _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int b = 0; b < RN; b++) acc[b] = s_pair_dot(wq, base, dw16, xq[b] + k * COLI_QK, xd[b] + k, acc[b], RM, T);
    }
    if (k < nb)
#pragma GCC unroll 4
        for (int b = 0; b < RN; b++)
            acc[b] = s_single_dot(w, (size_t)k * bb, xq[b] + k * COLI_QK, xd[b][k], acc[b], RM, T);
    s_qtile_store(j, r, t, acc, RM, RN);
}

#define Q5_TILE(T, A, B)                                                                   \
    W512 static void s_q5_##T##_##A##_##B(const mm_job *j, int64_t r, int64_t t, int pf) { \
        s_quant_tile512(j, r, t, pf, A, B, COLI_##T);                                      \
    }
ALL_OF(Q5_TILE, Q8_0)
ALL_OF(Q5_TILE, Q4_0)
static const tile_fn s_q8_0_avx512[4][4] = TABLE(s_q5, Q8_0);
static const tile_fn s_q4_0_avx512[4][4] = TABLE(s_q5, Q4_0);

static void s_rows_q8_0_avx512(const mm_job *j, int64_t r0, int64_t r1) { s_rows_quant(j, r0, r1, s_q8_0_avx512); }
static void s_rows_q4_0_avx512(const mm_job *j, int64_t r0, int64_t r1) { s_rows_quant(j, r0, r1, s_q4_0_avx512); }

#undef Q5_TILE
#undef W512
