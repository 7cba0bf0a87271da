/*
 * gpu_kernels.cuh - the expert FFN kernels, one source for CUDA and HIP (and
 * for the host emulation the tests run them under, see gpu_compat.h), plus
 * their launch geometry, so that the plugin and the tests launch them alike.
 * Include gpu_compat.h and gpu_math.h first.
 *
 * Kernels:
 *   k_prep       the matmul input, prepared once per activation type:
 *                rounded to fp16/bf16 (one thread per 32 values), or
 *                quantized to Q8_0 / Q8_1 blocks (one thread per 32
 *                values) or Q8_K blocks (one thread per 256).
 *   k_mm_decode  groups of 1..8 rows (decode, and the routed tail of small
 *                prefill groups): 32 threads (lanes) per output row, lane c
 *                takes the 32-value groups c, c+32, ... of the row and
 *                keeps up to 8 row sums; the weight row is read once for
 *                all rows of the group. Memory bound, as decode is.
 *   k_mm_tiled   groups of 9+ rows (prefill): 64 outputs x 64 rows per
 *                block of 256 threads, 4x4 per thread, the K dimension in
 *                steps of one 32-value group staged in shared memory,
 *                visited in the lanes' order (groups c, c+32, ... for c =
 *                0..31). Quantized weights: integer group sums (exact in
 *                F32, as |sum| < 2^24) scaled by d_w * d_x, plus the
 *                minimum terms of the types that have one, as the CPU.
 *   k_swiglu     g = silu(g) * u, in place (limit > 0: deepseek4's clamped form).
 * Both matmul kernels compute each output in the one order gpu_row_dot
 * defines (gpu_math.h), so a row's result is the same bits whichever kernel
 * serves it, whatever the group size: the determinism contract on one
 * device. Against the cpu plugin the sums run in another order: results
 * agree to float rounding, not bit for bit.
 */
#ifndef COLI_GPU_KERNELS_CUH
#define COLI_GPU_KERNELS_CUH

#define DEC_MAX_ROWS 8 /* k_mm_decode serves groups of up to this many rows */
#define DEC_OUT 4      /* output rows per k_mm_decode block (32 threads each) */
#define TILE 64        /* k_mm_tiled: TILE outputs x TILE rows per block */
#if GPU_ROW_LANES != 32
#error "k_mm_decode runs one row on 32 lanes: GPU_ROW_LANES (gpu_math.h) must be 32"
#endif

// ----------------------------------------------------------------------------
// launch geometry

#define GPU_PREP_THREADS 128
#define GPU_SWIGLU_THREADS 256
#define GPU_DECODE_THREADS (32 * DEC_OUT)
#define GPU_TILED_THREADS 256 /* 16 x 16, 4 x 4 results each */

/* One prepared input serves gate and up when their activation types
 * (gpu_act_type: F32/F16/BF16 rounding, Q8_0, Q8_1 or Q8_K) agree. */
static inline int gpu_use_decode(int64_t n_rows) { return n_rows <= DEC_MAX_ROWS; }
static inline unsigned gpu_prep_blocks(int a, int64_t n_rows, int64_t n) {
    return (unsigned)((n_rows * (n / gpu_prep_elems(a)) + GPU_PREP_THREADS - 1) / GPU_PREP_THREADS);
}
static inline unsigned gpu_swiglu_blocks(int64_t n) {
    return (unsigned)((n + GPU_SWIGLU_THREADS - 1) / GPU_SWIGLU_THREADS);
}
static inline unsigned gpu_decode_blocks(int64_t n_out) { return (unsigned)((n_out + DEC_OUT - 1) / DEC_OUT); }
static inline dim3 gpu_tiled_grid(int64_t n_out, int64_t n_rows) {
    return dim3((unsigned)((n_out + TILE - 1) / TILE), (unsigned)((n_rows + TILE - 1) / TILE));
}

// ----------------------------------------------------------------------------
// kernels

/* A: the activation type (F32, F16, BF16, Q8_0, Q8_1, Q8_K). */
template <int A> __global__ void k_prep(const float *x, int64_t n_rows, int64_t n, unsigned char *out) {
    const int e = gpu_prep_elems(A);
    const int64_t nb = n / e;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows * nb) return;
    const int64_t r = i / nb, b = i % nb;
    const float *xb = x + r * n + b * e;
    if (A == COLI_Q8_0 || A == COLI_Q8_1 || A == COLI_Q8_K) {
        gpu_quantize_act(A, xb, out + (size_t)(r * nb + b) * gpu_block_bytes(A));
        return;
    }
    float *o = (float *)out + r * n + b * e;
    for (int j = 0; j < GPU_QK; j++) o[j] = gpu_round_act(A, xb[j]);
}

__global__ void k_swiglu(float *g, const float *u, int64_t n, float limit) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = gpu_swiglu_act(g[i], u[i], limit);
}

/* y (n_rows, n_out) = prepared x (n_rows, n_in) @ W^T, n_rows <= DEC_MAX_ROWS. */
template <int T>
__global__ void k_mm_decode(const unsigned char *W, int64_t n_in, int64_t n_out, const unsigned char *xp, int n_rows,
                            float *y) {
    __shared__ float red[DEC_OUT][DEC_MAX_ROWS][33];
    const int lane = threadIdx.x % 32, sub = threadIdx.x / 32;
    const int64_t o = (int64_t)blockIdx.x * DEC_OUT + sub;
    const size_t xstride = gpu_prep_row_bytes(T, n_in);
    float acc[DEC_MAX_ROWS];
#pragma unroll
    for (int r = 0; r < DEC_MAX_ROWS; r++) acc[r] = 0.0f;
    if (o < n_out) {
        const unsigned char *w = W + (size_t)o * gpu_row_bytes(T, n_in);
        if (gpu_dtype_is_quant(T)) {
            const int A = gpu_act_type(T);
            for (int64_t g = lane; g < n_in / GPU_QK; g += GPU_ROW_LANES) {
                int ws;
                const unsigned char *wb = gpu_group_block(T, w, g, &ws);
                int wq[GPU_QK];
#pragma unroll
                for (int j = 0; j < GPU_QK; j++) wq[j] = gpu_quant_q(T, wb, ws, j);
                const float dw = gpu_quant_d(T, wb);
                const float m0 = gpu_quant_m(T, wb, ws, 0), m1 = gpu_quant_m(T, wb, ws, 1);
#pragma unroll
                for (int r = 0; r < DEC_MAX_ROWS; r++) {
                    if (r < n_rows) { /* a guard, not a break: keeps acc[] in registers */
                        int xs;
                        const unsigned char *xb = gpu_group_block(A, xp + r * xstride, g, &xs);
                        int isum = 0;
#pragma unroll
                        for (int j = 0; j < GPU_QK; j++) isum += wq[j] * gpu_act_q(A, xb, xs, j);
                        acc[r] = gpu_group_acc(T, acc[r], (float)isum, dw, gpu_act_d(A, xb), m0, m1,
                                               gpu_act_s(A, xb, xs, 0), gpu_act_s(A, xb, xs, 1));
                    }
                }
            }
        } else {
            for (int64_t g = lane; g < n_in / GPU_QK; g += GPU_ROW_LANES) {
                float wv[GPU_QK];
#pragma unroll
                for (int j = 0; j < GPU_QK; j++) wv[j] = gpu_weight_value(T, w, g * GPU_QK + j);
#pragma unroll
                for (int r = 0; r < DEC_MAX_ROWS; r++) {
                    if (r < n_rows) {
                        const float *x = (const float *)(xp + r * xstride) + g * GPU_QK;
                        float part = 0.0f;
#pragma unroll
                        for (int j = 0; j < GPU_QK; j++) part = fmaf(wv[j], x[j], part);
                        acc[r] += part;
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < DEC_MAX_ROWS; r++) red[sub][r][lane] = acc[r];
    __syncthreads();
    if (o < n_out && lane < n_rows) {
        float s = 0.0f; /* the lanes' sums in lane order */
        for (int i = 0; i < GPU_ROW_LANES; i++) s += red[sub][lane][i];
        y[(int64_t)lane * n_out + o] = s;
    }
}

/* Per-row scales of one K step of the tiled kernel: d and the two minimum
 * terms (weights: m(half); inputs: s(half)). */
struct tile_scales {
    float d[TILE], m[TILE][2];
};

/* Stage one K step (32 values) of TILE weight rows and TILE input rows into
 * shared memory; quantized types keep q as floats (exact) plus the scales. */
template <int T>
__device__ void tile_load(const unsigned char *W, int64_t n_in, int64_t n_out, const unsigned char *xp, int64_t n_rows,
                          int64_t o0, int64_t t0, int64_t kb, float (*ws)[GPU_QK + 1], float (*xs)[GPU_QK + 1],
                          tile_scales *wsc, tile_scales *xsc) {
    const size_t wstride = gpu_row_bytes(T, n_in), xstride = gpu_prep_row_bytes(T, n_in);
    const int A = gpu_act_type(T);
    for (int idx = threadIdx.x; idx < TILE * GPU_QK; idx += blockDim.x) {
        const int row = idx / GPU_QK, k = idx % GPU_QK;
        const int64_t o = o0 + row, t = t0 + row;
        if (gpu_dtype_is_quant(T)) {
            int wsub, xsub; /* pointers only: read below when the row exists */
            const unsigned char *wb = gpu_group_block(T, W + (size_t)o * wstride, kb, &wsub);
            const unsigned char *xb = gpu_group_block(A, xp + (size_t)t * xstride, kb, &xsub);
            ws[row][k] = o < n_out ? (float)gpu_quant_q(T, wb, wsub, k) : 0.0f;
            xs[row][k] = t < n_rows ? (float)gpu_act_q(A, xb, xsub, k) : 0.0f;
            if (k < 2) { /* k = half: thread 0 of the row also takes d */
                wsc->m[row][k] = o < n_out ? gpu_quant_m(T, wb, wsub, k) : 0.0f;
                xsc->m[row][k] = t < n_rows ? gpu_act_s(A, xb, xsub, k) : 0.0f;
            }
            if (k == 0) {
                wsc->d[row] = o < n_out ? gpu_quant_d(T, wb) : 0.0f;
                xsc->d[row] = t < n_rows ? gpu_act_d(A, xb) : 0.0f;
            }
        } else {
            ws[row][k] = o < n_out ? gpu_weight_value(T, W + (size_t)o * wstride, kb * GPU_QK + k) : 0.0f;
            xs[row][k] = t < n_rows ? ((const float *)(xp + (size_t)t * xstride))[kb * GPU_QK + k] : 0.0f;
        }
    }
}

/* part += the K step's products, each thread's 4 x 4 outputs, fused in
 * element order (exact integers for quantized types). */
static __device__ inline void tile_products(const float (*ws)[GPU_QK + 1], const float (*xs)[GPU_QK + 1], int tx,
                                            int ty, float (*part)[4]) {
    for (int kk = 0; kk < GPU_QK; kk++) {
        float wv[4], xv[4];
#pragma unroll
        for (int i = 0; i < 4; i++) wv[i] = ws[ty + 16 * i][kk];
#pragma unroll
        for (int j = 0; j < 4; j++) xv[j] = xs[tx + 16 * j][kk];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) part[i][j] = fmaf(wv[i], xv[j], part[i][j]);
    }
}

template <int T>
__global__ void k_mm_tiled(const unsigned char *W, int64_t n_in, int64_t n_out, const unsigned char *xp, int64_t n_rows,
                           float *y) {
    __shared__ float ws[TILE][GPU_QK + 1], xs[TILE][GPU_QK + 1];
    __shared__ tile_scales wsc, xsc;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t o0 = (int64_t)blockIdx.x * TILE, t0 = (int64_t)blockIdx.y * TILE;
    float total[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) total[i][j] = 0.0f;
    for (int c = 0; c < GPU_ROW_LANES; c++) { /* gpu_row_dot's order: lane c's groups, then the next lane */
        float acc[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
        for (int64_t kb = c; kb < n_in / GPU_QK; kb += GPU_ROW_LANES) {
            tile_load<T>(W, n_in, n_out, xp, n_rows, o0, t0, kb, ws, xs, &wsc, &xsc);
            __syncthreads();
            float part[4][4];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) part[i][j] = 0.0f;
            tile_products(ws, xs, tx, ty, part);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int wr = ty + 16 * i, xr = tx + 16 * j;
                    acc[i][j] = gpu_dtype_is_quant(T)
                                    ? gpu_group_acc(T, acc[i][j], part[i][j], wsc.d[wr], xsc.d[xr], wsc.m[wr][0],
                                                    wsc.m[wr][1], xsc.m[xr][0], xsc.m[xr][1])
                                    : acc[i][j] + part[i][j];
                }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) total[i][j] += acc[i][j];
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t o = o0 + ty + 16 * i, t = t0 + tx + 16 * j;
            if (o < n_out && t < n_rows) y[t * n_out + o] = total[i][j];
        }
}

#endif /* COLI_GPU_KERNELS_CUH */
