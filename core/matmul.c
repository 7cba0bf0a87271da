/*
 * matmul.c - y = W x: input preparation, row chunking over the pool, and
 * the choice between the AVX2 and portable kernels; see matmul.h and
 * matmul_impl.h for the plan, matmul_avx2.c / matmul_portable.c for the
 * kernels themselves.
 */
#include "matmul.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_features.h"
#include "error.h"
#include "matmul_impl.h"

static atomic_int s_force_portable;

void coli_matmul_force_portable(int on) { atomic_store(&s_force_portable, on != 0); }

static int use_avx2(void) { return !atomic_load(&s_force_portable) && coli_cpu_avx2(); }

const char *coli_matmul_impl(void) { return use_avx2() ? "avx2" : "portable"; }

void coli_scratch_free(coli_scratch *s) {
    if (!s) return;
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

/* Grows by 1/4 more than asked, so a batch that is a little larger than the
 * last one does not reallocate every time. */
void *coli_scratch_reserve(coli_scratch *s, size_t bytes) {
    if (bytes == 0) bytes = 64;
    if (s->cap >= bytes && s->buf) return s->buf;
    size_t cap = bytes + bytes / 4;
    cap = (cap + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, cap) != 0) return NULL;
    free(s->buf);
    s->buf = p;
    s->cap = cap;
    return p;
}

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Float rows of the prepared F16/BF16 input are this many floats apart. */
static int64_t float_stride(int64_t n_in) { return (int64_t)round_up((size_t)n_in, 16); }

/* Quantized input: n_tok rows of n_in int8 values (rounded up to 64 bytes),
 * then the block scales as floats. */
static size_t quant_values_bytes(int64_t n_in, int64_t n_tok) {
    return round_up((size_t)n_tok * (size_t)n_in, 64);
}

size_t coli_matmul_scratch_bytes(coli_dtype wtype, int64_t n_in, int64_t n_tok) {
    if (n_in <= 0 || n_tok <= 0) return 0;
    switch (wtype) {
    case COLI_F16:
    case COLI_BF16:
        return (size_t)n_tok * (size_t)float_stride(n_in) * sizeof(float);
    case COLI_Q8_0:
    case COLI_Q4_0:
        return quant_values_bytes(n_in, n_tok) +
               (size_t)n_tok * (size_t)(n_in / COLI_QK) * sizeof(float);
    default:
        return 0;
    }
}

/* Step 1 of the plan: fill job->xf or job->xq/xd from x. */
static int prepare_input(mm_job *job, coli_scratch *scratch, const float *x, int avx2) {
    const int64_t n_tok = job->n_tok, n_in = job->n_in;
    if (job->wtype == COLI_F32) {
        job->xf = x;
        job->xf_stride = n_in;
        return 0;
    }
    uint8_t *buf = coli_scratch_reserve(scratch, coli_matmul_scratch_bytes(job->wtype, n_in, n_tok));
    if (!buf) return coli_fail(COLI_ENOMEM, "matmul: no memory for a %lld x %lld input",
                               (long long)n_tok, (long long)n_in);
    if (job->wtype == COLI_F16 || job->wtype == COLI_BF16) {
        job->xf = (float *)buf;
        job->xf_stride = float_stride(n_in);
        if (avx2) mm_avx2_round_rows(job->wtype, x, n_tok, n_in, (float *)buf, job->xf_stride);
        else      mm_portable_round_rows(job->wtype, x, n_tok, n_in, (float *)buf, job->xf_stride);
        return 0;
    }
    int8_t *xq = (int8_t *)buf;
    float *xd = (float *)(buf + quant_values_bytes(n_in, n_tok));
    if (avx2) mm_avx2_quantize_rows(x, n_tok, n_in, xq, xd);
    else      mm_portable_quantize_rows(x, n_tok, n_in, xq, xd);
    job->xq = xq;
    job->xd = xd;
    return 0;
}

/* Rows per chunk: enough that a chunk's weights stay cache-sized, few
 * enough that every thread gets several chunks (the other core may be busy).
 * Always a multiple of 8, so the kernels' row tiles never straddle chunks
 * except at the end (which does not matter for the results anyway). */
static int64_t choose_chunk(int64_t n_out, size_t w_stride, int nth) {
    int64_t by_cache = (int64_t)((96 * 1024) / (w_stride ? w_stride : 1));
    int64_t by_balance = (n_out + (int64_t)nth * 4 - 1) / ((int64_t)nth * 4);
    int64_t c = by_cache < by_balance ? by_cache : by_balance;
    c = (c + 7) / 8 * 8;
    return c < 8 ? 8 : c;
}

static void matmul_worker(void *arg, int ith, int nth) {
    (void)ith; (void)nth;
    mm_job *job = arg;
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&job->next_chunk, 1, memory_order_relaxed);
        int64_t r0 = c * job->chunk_rows;
        if (r0 >= job->n_out) break;
        int64_t r1 = r0 + job->chunk_rows < job->n_out ? r0 + job->chunk_rows : job->n_out;
        job->rows(job, r0, r1);
    }
}

static int check_args(const void *W, coli_dtype wtype, int64_t n_in, int64_t n_out,
                      const float *x, int64_t n_tok, const float *y) {
    if (!coli_dtype_valid((uint32_t)wtype))
        return coli_fail(COLI_EUNSUPPORTED, "matmul: weight type %s not supported",
                         coli_dtype_name((uint32_t)wtype));
    if (n_in <= 0 || n_out < 0 || n_tok < 0)
        return coli_fail(COLI_EINVAL, "matmul: bad shape n_in %lld, n_out %lld, n_tok %lld",
                         (long long)n_in, (long long)n_out, (long long)n_tok);
    if (n_in % coli_dtype_block_elems(wtype) != 0)
        return coli_fail(COLI_EINVAL, "matmul: n_in %lld is not a multiple of %lld for %s",
                         (long long)n_in, (long long)coli_dtype_block_elems(wtype),
                         coli_dtype_name(wtype));
    if (n_tok > 0 && n_out > 0 && (!W || !x || !y))
        return coli_fail(COLI_EINVAL, "matmul: NULL weight, input or output");
    if ((uint64_t)n_tok > ((uint64_t)1 << 40) / (uint64_t)n_in)
        return coli_fail(COLI_EINVAL, "matmul: input of %lld x %lld too large",
                         (long long)n_tok, (long long)n_in);
    return 0;
}

int coli_matmul(coli_pool *pool, coli_scratch *scratch,
                const void *W, coli_dtype wtype, int64_t n_in, int64_t n_out,
                const float *x, int64_t n_tok, float *y) {
    int rc = check_args(W, wtype, n_in, n_out, x, n_tok, y);
    if (rc) return rc;
    if (n_tok == 0 || n_out == 0) return 0;

    coli_scratch local = {0};
    coli_scratch *s = scratch ? scratch : &local;
    const int avx2 = use_avx2();
    mm_job job;
    memset(&job, 0, sizeof job);
    job.W = W;
    job.wtype = wtype;
    job.w_stride = coli_row_bytes(wtype, n_in);
    job.n_in = n_in;
    job.n_out = n_out;
    job.n_tok = n_tok;
    job.y = y;
    job.rows = avx2 ? mm_avx2_rows(wtype) : mm_portable_rows(wtype);
    rc = prepare_input(&job, s, x, avx2);
    if (rc == 0) {
        int nth = pool ? coli_pool_size(pool) : 1;
        job.chunk_rows = choose_chunk(n_out, job.w_stride, nth);
        job.token_block = 64;
        atomic_init(&job.next_chunk, 0);
        coli_pool_run(nth > 1 ? pool : NULL, matmul_worker, &job);
    }
    if (s == &local) coli_scratch_free(&local);
    return rc;
}
