/*
 * matmul.c - y = W x: input preparation and row chunking over the pool;
 * see matmul.h and matmul_impl.h for the plan. The kernels come from one
 * table (matmul_dispatch.c), read once per op; the input is prepared here,
 * once, and the kernels below are only called, never call back.
 */
#include "core/kernels/matmul.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/kernels/matmul_dispatch.h"

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

static size_t s_round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Float rows of the prepared F16/BF16 input are this many floats apart. */
static int64_t s_float_stride(int64_t n_in) { return (int64_t)s_round_up((size_t)n_in, 16); }

/* Quantized input: n_tok rows of n_in int8 values (rounded up to 64 bytes),
 * then the block scales as floats. */
static size_t s_quant_values_bytes(int64_t n_in, int64_t n_tok) { return s_round_up((size_t)n_tok * (size_t)n_in, 64); }

size_t coli_matmul_scratch_bytes(coli_dtype wtype, int64_t n_in, int64_t n_tok) {
    if (n_in <= 0 || n_tok <= 0 || !coli_dtype_valid((uint32_t)wtype)) return 0;
    const mm_kernel *k = mm_kernel_for(wtype);
    switch (k->input) {
    case MM_IN_ROUNDED: return (size_t)n_tok * (size_t)s_float_stride(n_in) * sizeof(float);
    case MM_IN_Q8_0:
        return s_quant_values_bytes(n_in, n_tok) + (size_t)n_tok * (size_t)(n_in / COLI_QK) * sizeof(float);
    case MM_IN_BLOCKS: return (size_t)n_tok * mm_vecdot_row_stride(k->blocks, n_in);
    default: return 0;
    }
}

/* Step 1 of the plan: fill job->xf, xq/xd or xa from x the way k says,
 * using buf (of coli_matmul_scratch_bytes for the job's shape; unused for
 * F32). */
static void s_prepare_input(mm_job *job, const mm_kernel *k, uint8_t *buf, const float *x) {
    const int64_t n_tok = job->n_tok, n_in = job->n_in;
    switch (k->input) {
    case MM_IN_F32:
        job->xf = x;
        job->xf_stride = n_in;
        return;
    case MM_IN_ROUNDED:
        job->xf = (float *)buf;
        job->xf_stride = s_float_stride(n_in);
        k->round(job->wtype, x, n_tok, n_in, (float *)buf, job->xf_stride);
        return;
    case MM_IN_BLOCKS:
        job->xa = buf;
        job->xa_stride = mm_vecdot_row_stride(k->blocks, n_in);
        mm_vecdot_prepare(k->blocks, x, n_tok, n_in, buf, job->xa_stride);
        return;
    case MM_IN_Q8_0: {
        int8_t *xq = (int8_t *)buf;
        float *xd = (float *)(buf + s_quant_values_bytes(n_in, n_tok));
        k->quantize(x, n_tok, n_in, xq, xd);
        job->xq = xq;
        job->xd = xd;
        return;
    }
    }
}

/* Rows per chunk: enough that a chunk's weights stay cache-sized, few
 * enough that every thread gets several chunks of the job's total_rows
 * (the other core may be busy). Always a multiple of 8, so the kernels'
 * row tiles never straddle chunks except at the end (which does not matter
 * for the results anyway). */
static int64_t s_choose_chunk(int64_t total_rows, size_t w_stride, int nth) {
    int64_t by_cache = (int64_t)((96 * 1024) / (w_stride ? w_stride : 1));
    int64_t by_balance = (total_rows + (int64_t)nth * 4 - 1) / ((int64_t)nth * 4);
    int64_t c = by_cache < by_balance ? by_cache : by_balance;
    c = (c + 7) / 8 * 8;
    return c < 8 ? 8 : c;
}

/* Up to COLI_MATMUL_MANY_MAX matmuls as one pool job: chunk c belongs to
 * the first job whose chunk_end exceeds c. */
typedef struct mm_many {
    mm_job *jobs;
    int n;
    int64_t chunk_end[COLI_MATMUL_MANY_MAX];
    atomic_llong next_chunk;
} mm_many;

static void s_many_worker(void *arg, int ith, int nth) {
    (void)ith;
    (void)nth;
    mm_many *m = arg;
    int i = 0;
    int64_t begin = 0;
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&m->next_chunk, 1, memory_order_relaxed);
        while (i < m->n && c >= m->chunk_end[i]) begin = m->chunk_end[i++];
        if (i >= m->n) break;
        const mm_job *j = &m->jobs[i];
        int64_t r0 = (c - begin) * j->chunk_rows;
        int64_t r1 = r0 + j->chunk_rows < j->n_out ? r0 + j->chunk_rows : j->n_out;
        j->rows(j, r0, r1);
    }
}

/* Which prepared input an op reads (mm_kernel's input_kind). */
static int s_input_kind(coli_dtype t) { return mm_kernel_for(t)->input_kind; }

static int s_op_active(const coli_matmul_op *o) { return o->n_tok > 0 && o->n_out > 0; }

/* src[i]: the op whose prepared input op i reads (i itself: its own), -1
 * for an op with nothing to compute. */
static void s_find_shared_inputs(const coli_matmul_op *ops, int n, int *src) {
    for (int i = 0; i < n; i++) {
        src[i] = s_op_active(&ops[i]) ? i : -1;
        for (int k = 0; k < i && src[i] == i; k++)
            if (src[k] == k && ops[k].x == ops[i].x && ops[k].n_in == ops[i].n_in && ops[k].n_tok == ops[i].n_tok &&
                s_input_kind(ops[k].wtype) == s_input_kind(ops[i].wtype))
                src[i] = k;
    }
}

static size_t s_op_input_bytes(const coli_matmul_op *o) {
    return s_round_up(coli_matmul_scratch_bytes(o->wtype, o->n_in, o->n_tok), 64);
}

static size_t s_group_scratch_bytes(const coli_matmul_op *ops, int n, const int *src) {
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        if (src[i] == i) bytes += s_op_input_bytes(&ops[i]);
    return bytes;
}

size_t coli_matmul_many_scratch_bytes(const coli_matmul_op *ops, int n_ops) {
    size_t most = 0;
    for (int g = 0; g < n_ops; g += COLI_MATMUL_MANY_MAX) {
        int n = n_ops - g < COLI_MATMUL_MANY_MAX ? n_ops - g : COLI_MATMUL_MANY_MAX;
        int src[COLI_MATMUL_MANY_MAX];
        s_find_shared_inputs(ops + g, n, src);
        size_t b = s_group_scratch_bytes(ops + g, n, src);
        if (b > most) most = b;
    }
    return most;
}

/* The job of op o, its input prepared into buf or taken from shared. */
static void s_init_job(mm_job *j, const coli_matmul_op *o, uint8_t *buf, const mm_job *shared) {
    const mm_kernel *k = mm_kernel_for(o->wtype);
    memset(j, 0, sizeof *j);
    j->W = o->W;
    j->wtype = o->wtype;
    j->w_stride = coli_row_bytes(o->wtype, o->n_in);
    j->n_in = o->n_in;
    j->n_out = o->n_out;
    j->n_tok = o->n_tok;
    j->y = o->y;
    j->rows = k->rows;
    j->dot = k->dot;
    j->dot_tokens = k->dot_tokens;
    j->iq_decode = k->iq_decode;
    j->iq_dots = k->iq_dots;
    j->iq_k = k->blocks ? k->blocks->iq_k : 0;
    j->token_block = 64;
    if (!shared) {
        s_prepare_input(j, k, buf, o->x);
        return;
    }
    j->xf = shared->xf;
    j->xf_stride = shared->xf_stride;
    j->xq = shared->xq;
    j->xd = shared->xd;
    j->xa = shared->xa;
    j->xa_stride = shared->xa_stride;
}

/* Multiply-adds below which the calling thread does the job alone (a MoE
 * router: 8 rows): waking the pool costs more than the work. */
#define MM_MIN_PARALLEL_MACS (1 << 16)

static int s_is_tiny(const coli_matmul_op *ops, int n, const int *src) {
    int64_t macs = 0;
    for (int i = 0; i < n && macs < MM_MIN_PARALLEL_MACS; i++) {
        if (src[i] < 0) continue;
        const int64_t per_row = ops[i].n_in * ops[i].n_tok; /* <= 2^40 (s_check_args) */
        if (per_row >= MM_MIN_PARALLEL_MACS || ops[i].n_out >= MM_MIN_PARALLEL_MACS) return 0;
        macs += per_row * ops[i].n_out;
    }
    return macs < MM_MIN_PARALLEL_MACS;
}

/* n <= COLI_MATMUL_MANY_MAX checked ops: prepare the inputs on the calling
 * thread, then one pool job over all their rows. */
static int s_run_group(coli_pool *pool, coli_scratch *scratch, const coli_matmul_op *ops, int n) {
    int src[COLI_MATMUL_MANY_MAX], job_of[COLI_MATMUL_MANY_MAX];
    mm_job jobs[COLI_MATMUL_MANY_MAX];
    mm_many m = {.jobs = jobs, .n = 0};
    s_find_shared_inputs(ops, n, src);
    const size_t bytes = s_group_scratch_bytes(ops, n, src);
    uint8_t *buf = bytes ? coli_scratch_reserve(scratch, bytes) : NULL;
    if (bytes && !buf) return coli_fail(COLI_ENOMEM, "matmul: no memory for %zu bytes of inputs", bytes);
    const int nth = pool ? coli_pool_size(pool) : 1;
    int64_t total_rows = 0, chunks = 0;
    for (int i = 0; i < n; i++) total_rows += src[i] >= 0 ? ops[i].n_out : 0;
    for (int i = 0; i < n; i++) {
        if (src[i] < 0) continue;
        mm_job *j = &jobs[m.n];
        s_init_job(j, &ops[i], buf, src[i] == i ? NULL : &jobs[job_of[src[i]]]);
        if (src[i] == i) buf += s_op_input_bytes(&ops[i]);
        j->chunk_rows = s_choose_chunk(total_rows, j->w_stride, nth);
        chunks += (j->n_out + j->chunk_rows - 1) / j->chunk_rows;
        m.chunk_end[m.n] = chunks;
        job_of[i] = m.n++;
    }
    if (m.n == 0) return 0;
    atomic_init(&m.next_chunk, 0);
    /* chunks are taken from next_chunk: a thread that is not running when the rest is done is not waited for */
    coli_pool_run_claimed(nth > 1 && !s_is_tiny(ops, n, src) ? pool : NULL, s_many_worker, &m);
    return 0;
}

static int s_check_args(const void *W, coli_dtype wtype, int64_t n_in, int64_t n_out, const float *x, int64_t n_tok,
                        const float *y) {
    if (!coli_dtype_valid((uint32_t)wtype))
        return coli_fail(COLI_EUNSUPPORTED, "matmul: weight type %s not supported", coli_dtype_name((uint32_t)wtype));
    if (n_in <= 0 || n_out < 0 || n_tok < 0)
        return coli_fail(COLI_EINVAL, "matmul: bad shape n_in %lld, n_out %lld, n_tok %lld", (long long)n_in,
                         (long long)n_out, (long long)n_tok);
    if (n_in % coli_dtype_block_elems(wtype) != 0)
        return coli_fail(COLI_EINVAL, "matmul: n_in %lld is not a multiple of %lld for %s", (long long)n_in,
                         (long long)coli_dtype_block_elems(wtype), coli_dtype_name(wtype));
    if (n_tok > 0 && n_out > 0 && (!W || !x || !y))
        return coli_fail(COLI_EINVAL, "matmul: NULL weight, input or output");
    if ((uint64_t)n_tok > ((uint64_t)1 << 40) / (uint64_t)n_in)
        return coli_fail(COLI_EINVAL, "matmul: input of %lld x %lld too large", (long long)n_tok, (long long)n_in);
    return 0;
}

static coli_matmul_observer s_observer;
static void *s_observer_user;

void coli_matmul_set_observer(coli_matmul_observer fn, void *user) {
    s_observer_user = user;
    s_observer = fn;
}

static int s_run_ops(coli_pool *pool, coli_scratch *scratch, const coli_matmul_op *ops, int n_ops) {
    if (s_observer)
        for (int i = 0; i < n_ops; i++) s_observer(s_observer_user, &ops[i]);
    coli_scratch local = {0};
    coli_scratch *s = scratch ? scratch : &local;
    int rc = 0;
    for (int g = 0; g < n_ops && rc == 0; g += COLI_MATMUL_MANY_MAX) {
        int n = n_ops - g < COLI_MATMUL_MANY_MAX ? n_ops - g : COLI_MATMUL_MANY_MAX;
        rc = s_run_group(pool, s, ops + g, n);
    }
    if (s == &local) coli_scratch_free(&local);
    return rc;
}

int coli_matmul(coli_pool *pool, coli_scratch *scratch, const void *W, coli_dtype wtype, int64_t n_in, int64_t n_out,
                const float *x, int64_t n_tok, float *y) {
    int rc = s_check_args(W, wtype, n_in, n_out, x, n_tok, y);
    if (rc) return rc;
    const coli_matmul_op op = {W, wtype, n_in, n_out, x, n_tok, y};
    return s_run_ops(pool, scratch, &op, 1);
}

int coli_matmul_many(coli_pool *pool, coli_scratch *scratch, const coli_matmul_op *ops, int n_ops) {
    if (n_ops < 0 || (n_ops > 0 && !ops))
        return coli_fail(COLI_EINVAL, "matmul: %d ops%s", n_ops, ops ? "" : " (NULL list)");
    for (int i = 0; i < n_ops; i++) {
        const coli_matmul_op *o = &ops[i];
        int rc = s_check_args(o->W, o->wtype, o->n_in, o->n_out, o->x, o->n_tok, o->y);
        if (rc) return coli_fail_prefix(rc, "op %d of %d", i, n_ops);
    }
    return s_run_ops(pool, scratch, ops, n_ops);
}
