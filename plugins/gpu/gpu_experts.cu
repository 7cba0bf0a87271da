/*
 * gpu_experts.cu - the cuda / hip expert plugin: one source, two vendors.
 *
 * nvcc compiles it as CUDA (libcoli-cuda.so), hipcc -x hip as HIP
 * (libcoli-hip.so). Vendor differences live in gpu_compat.h only; this file
 * uses CUDA runtime names and syntax both compilers accept.
 *
 * What it does: each expert's three matrices are uploaded once, as stored
 * in the file (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
 * Q2_K..Q6_K, IQ4_XS, MXFP4, TQ1_0, TQ2_0, the IQ1/IQ2/IQ3 grid types, each
 * matrix its own type: quantized weights stay
 * quantized in device memory and are decoded inside the kernels), into one
 * device allocation, within a byte budget, with the expert's F32 biases
 * when it has them. A run call copies the batch's rows in, computes every
 * group's
 *
 *     out = W_down · act(W_gate · x + b_gate, W_up · x + b_up) + b_down
 *
 * (act: SiLU gate times up, gpt-oss's SWIGLU_OAI or kimi-k3's SITU, see
 * gpu_act in gpu_math.h) on one stream and copies the groups' rows back.
 * The per-element math (gpu_math.h) is the CPU kernels' math, tested on the
 * host.
 *
 * The kernels and their launch geometry are in gpu_kernels.cuh.
 */
#include "core/expert_table.h"
#include "plugins/gpu/gpu_compat.h"
#include "plugins/gpu/gpu_math.h"
#include "plugins/gpu/gpu_host.h"
#include "plugins/gpu/gpu_kernels.cuh"
#include "plugins/plugin_abi.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if GPU_HOST_GRIDS != GPU_GRID_TABLES
#error "gpu_host.c's grid list and gpu_blocks_iq.h's gpu_grids disagree"
#endif

#define GPU_TAG 0x67707521u
#define GPU_DEAD_TAG 0xdeadbeefu
#define ERR_STATUS_DEVICE (-7) /* COLI_EDEVICE */
#define ERR_STATUS_NOMEM (-5)  /* COLI_ENOMEM */
#define ERR_STATUS_INVAL (-1)  /* COLI_EINVAL */
#define ERR_STATUS_UNSUP (-4)  /* COLI_EUNSUPPORTED */

// ----------------------------------------------------------------------------
// device state

#define GPU_PARTS 6 /* gate, up, down, then the gate, up and down biases */

typedef struct gpu_expert {
    int32_t layer, expert;
    int64_t n_embd, n_ff;
    int type[3];           /* gate, up, down */
    int act;               /* MOE_ACT_* (gpu_act) */
    float alpha, limit;    /* its parameters */
    unsigned char *base;   /* one device allocation holds the matrices and biases */
    size_t off[GPU_PARTS]; /* offsets of the parts in it */
    const float *bias[3];  /* gate, up, down biases in it; NULL: none */
    uint64_t bytes;        /* size of that allocation: what the budget counts */
} gpu_expert;

/* Structure of one open device (one worker process drives it from one thread) */
struct moe_device {
    uint32_t tag; /* GPU_TAG while open */
    int index;    /* vendor ordinal */
    char name[64];
    uint64_t mem_total, budget;
    cudaStream_t stream;
    cudaEvent_t ev[4];    /* before H2D, after H2D, after kernels, after D2H */
    expert_table experts; /* (layer, expert) -> gpu_expert */
    gpu_faults faults;
    int launch_fault;       /* 1 while an injected launch failure is pending */
    unsigned char *scratch; /* run buffers, grown on demand, never shrunk */
    size_t scratch_bytes;
    float *x, *out, *g, *u; /* views into scratch for the current run */
    unsigned char *prep;
    unsigned char *grids; /* the IQ codebooks (gpu_blocks_iq.h), uploaded at open */
    moe_stats stats;      /* calls, rows, times (resident_* kept here too) */
};

static int s_err(char *err, size_t n, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int s_err(char *err, size_t n, int code, const char *fmt, ...) {
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return code;
}

// ----------------------------------------------------------------------------
// probing

/* How many devices the runtime sees; -1 with a precise reason in why when
 * none can be used. */
static int s_count_devices(int *count, char *why, size_t n) {
    *count = 0;
    if (gpu_driver_check(why, n)) return -1;
    cudaError_t e = cudaGetDeviceCount(count);
    if (e == cudaSuccess && *count > 0) return 0;
    (void)cudaGetLastError();
    *count = 0;
    if (e == cudaErrorInsufficientDriver) {
        int drv = 0, rt = 0;
        char dv[32], rv[32];
        (void)cudaDriverGetVersion(&drv);
        (void)cudaRuntimeGetVersion(&rt);
        gpu_fmt_version(drv, dv, sizeof dv);
        gpu_fmt_version(rt, rv, sizeof rv);
        snprintf(why, n, "driver version %s older than runtime %s", dv, rv);
    } else if (e == cudaSuccess || e == cudaErrorNoDevice) {
        snprintf(why, n, "no %s device (driver loaded, %s)", COLI_GPU_RUNTIME_NAME,
                 e == cudaSuccess ? "0 devices" : cudaGetErrorName(e));
    } else {
        snprintf(why, n, "%s device count failed: %s (%s)", COLI_GPU_RUNTIME_NAME, cudaGetErrorName(e),
                 cudaGetErrorString(e));
    }
    return -1;
}

static int s_probe(int *n_devices, char *why, size_t why_len) {
    char buf[256] = "";
    int count = 0;
    s_count_devices(&count, buf, sizeof buf);
    if (n_devices) *n_devices = count;
    if (why && why_len) snprintf(why, why_len, "%s", buf);
    return 0;
}

// ----------------------------------------------------------------------------
// runtime calls with fault injection

/* An injected allocation failure asks for 4 EiB, so the runtime's own
 * out-of-memory path answers. */
static cudaError_t s_alloc(moe_device *d, void **p, size_t bytes) {
    if (gpu_faults_next(&d->faults, GPU_FAULT_ALLOC)) bytes = (size_t)1 << 62;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        (void)cudaGetLastError();
    }
    return e;
}

/* Expert upload, synchronous. An injected failure skips the copy and
 * reports what the runtime reports for a bad argument (a real bad copy
 * could leave the context unusable, which is not the path under test). */
static cudaError_t s_upload(moe_device *d, unsigned char *dst, const void *src, size_t bytes) {
    if (gpu_faults_next(&d->faults, GPU_FAULT_H2D)) return cudaErrorInvalidValue;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->stream);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e;
}

/* Threads per block for the next launch; 0 (a genuinely invalid launch
 * configuration) when an injected launch failure is due. */
static unsigned s_threads(moe_device *d, unsigned n) {
    if (!gpu_faults_next(&d->faults, GPU_FAULT_LAUNCH)) return n;
    d->launch_fault = 1;
    return 0;
}

/* After each launch: the runtime's verdict, cleared so that it does not
 * stick to the next launch. */
static int s_launched(moe_device *d, const char *what, const gpu_expert *e, char *err, size_t n) {
    const cudaError_t rc = cudaGetLastError();
    const int injected = d->launch_fault;
    d->launch_fault = 0;
    if (rc == cudaSuccess && !injected) return 0;
    return s_err(err, n, ERR_STATUS_DEVICE, "%s:%d: %s kernel for expert %d.%d failed to launch: %s%s", COLI_GPU_VENDOR,
                 d->index, what, e->layer, e->expert, rc != cudaSuccess ? cudaGetErrorString(rc) : "no runtime error",
                 injected ? " (injected fault)" : "");
}

/* Make d the calling thread's current device (the runtime keeps it per thread). */
static int s_select(moe_device *d, char *err, size_t n) {
    const cudaError_t e = cudaSetDevice(d->index);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    return s_err(err, n, ERR_STATUS_DEVICE, "%s:%d: cannot select the device: %s", COLI_GPU_VENDOR, d->index,
                 cudaGetErrorString(e));
}

// ----------------------------------------------------------------------------
// launches

template <int A> static void s_prep_t(moe_device *d, const float *x, int64_t n_rows, int64_t n, unsigned char *out) {
    k_prep<A><<<gpu_prep_blocks(A, n_rows, n), s_threads(d, GPU_PREP_THREADS), 0, d->stream>>>(x, n_rows, n, out);
}

template <int T>
static void s_matmul_t(moe_device *d, const unsigned char *W, int64_t n_in, int64_t n_out, const unsigned char *xp,
                       int64_t n_rows, float *y) {
    if (gpu_use_decode(n_rows))
        k_mm_decode<T><<<gpu_decode_blocks(n_out), s_threads(d, GPU_DECODE_THREADS), 0, d->stream>>>(W, n_in, n_out, xp,
                                                                                                     (int)n_rows, y);
    else
        k_mm_tiled<T><<<gpu_tiled_grid(n_out, n_rows), s_threads(d, GPU_TILED_THREADS), 0, d->stream>>>(W, n_in, n_out,
                                                                                                        xp, n_rows, y);
}

static void s_prep(moe_device *d, int t, const float *x, int64_t n_rows, int64_t n, unsigned char *out) {
    switch (gpu_act_type(t)) {
    case COLI_F32: s_prep_t<COLI_F32>(d, x, n_rows, n, out); break;
    case COLI_F16: s_prep_t<COLI_F16>(d, x, n_rows, n, out); break;
    case COLI_BF16: s_prep_t<COLI_BF16>(d, x, n_rows, n, out); break;
    case COLI_Q8_0: s_prep_t<COLI_Q8_0>(d, x, n_rows, n, out); break;
    case COLI_Q8_1: s_prep_t<COLI_Q8_1>(d, x, n_rows, n, out); break;
    case COLI_Q8_K: s_prep_t<COLI_Q8_K>(d, x, n_rows, n, out); break;
    }
}

static void s_matmul(moe_device *d, int t, const unsigned char *W, int64_t n_in, int64_t n_out, const unsigned char *xp,
                     int64_t n_rows, float *y) {
    switch (t) {
    case COLI_F32: s_matmul_t<COLI_F32>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_F16: s_matmul_t<COLI_F16>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_BF16: s_matmul_t<COLI_BF16>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q8_0: s_matmul_t<COLI_Q8_0>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q4_0: s_matmul_t<COLI_Q4_0>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q4_1: s_matmul_t<COLI_Q4_1>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q5_0: s_matmul_t<COLI_Q5_0>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q5_1: s_matmul_t<COLI_Q5_1>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ4_NL: s_matmul_t<COLI_IQ4_NL>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q2_K: s_matmul_t<COLI_Q2_K>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q3_K: s_matmul_t<COLI_Q3_K>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q4_K: s_matmul_t<COLI_Q4_K>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q5_K: s_matmul_t<COLI_Q5_K>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_Q6_K: s_matmul_t<COLI_Q6_K>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ4_XS: s_matmul_t<COLI_IQ4_XS>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_MXFP4: s_matmul_t<COLI_MXFP4>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_TQ1_0: s_matmul_t<COLI_TQ1_0>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_TQ2_0: s_matmul_t<COLI_TQ2_0>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ2_XXS: s_matmul_t<COLI_IQ2_XXS>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ2_XS: s_matmul_t<COLI_IQ2_XS>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ2_S: s_matmul_t<COLI_IQ2_S>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ3_XXS: s_matmul_t<COLI_IQ3_XXS>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ3_S: s_matmul_t<COLI_IQ3_S>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ1_S: s_matmul_t<COLI_IQ1_S>(d, W, n_in, n_out, xp, n_rows, y); break;
    case COLI_IQ1_M: s_matmul_t<COLI_IQ1_M>(d, W, n_in, n_out, xp, n_rows, y); break;
    }
}

/* One group: x (n_rows, n_embd) on the device -> out (n_rows, n_embd). */
static int s_run_group(moe_device *d, const gpu_expert *e, const float *x, int64_t n_rows, float *out, char *err,
                       size_t n) {
    const int64_t n_embd = e->n_embd, n_ff = e->n_ff;
    const unsigned char *wg = e->base + e->off[0], *wu = e->base + e->off[1], *wd = e->base + e->off[2];
    int rc;
    s_prep(d, e->type[0], x, n_rows, n_embd, d->prep);
    if ((rc = s_launched(d, "input prep", e, err, n))) return rc;
    s_matmul(d, e->type[0], wg, n_embd, n_ff, d->prep, n_rows, d->g);
    if ((rc = s_launched(d, "gate matmul", e, err, n))) return rc;
    if (gpu_act_type(e->type[1]) != gpu_act_type(e->type[0])) {
        s_prep(d, e->type[1], x, n_rows, n_embd, d->prep);
        if ((rc = s_launched(d, "input prep", e, err, n))) return rc;
    }
    s_matmul(d, e->type[1], wu, n_embd, n_ff, d->prep, n_rows, d->u);
    if ((rc = s_launched(d, "up matmul", e, err, n))) return rc;
    const int64_t n_hidden = n_rows * n_ff;
    const gpu_act_params act = gpu_act_params_make(e->act, e->alpha, e->limit, e->bias[0], e->bias[1], n_ff);
    k_act<<<gpu_elem_blocks(n_hidden), s_threads(d, GPU_ELEM_THREADS), 0, d->stream>>>(d->g, d->u, n_hidden, act);
    if ((rc = s_launched(d, "activation", e, err, n))) return rc;
    s_prep(d, e->type[2], d->g, n_rows, n_ff, d->prep);
    if ((rc = s_launched(d, "hidden prep", e, err, n))) return rc;
    s_matmul(d, e->type[2], wd, n_ff, n_embd, d->prep, n_rows, out);
    if ((rc = s_launched(d, "down matmul", e, err, n)) || !e->bias[2]) return rc;
    k_add_bias<<<gpu_elem_blocks(n_rows * n_embd), s_threads(d, GPU_ELEM_THREADS), 0, d->stream>>>(out, e->bias[2],
                                                                                                   n_rows, n_embd);
    return s_launched(d, "down bias", e, err, n);
}

// ----------------------------------------------------------------------------
// run

/* Check the batch and find each group's expert; n_max: largest group. */
static int s_check_batch(moe_device *d, const moe_batch_group *groups, int32_t n_groups, int64_t n_rows_total,
                         int64_t n_embd, const gpu_expert **ex, int64_t *n_max, int64_t *ff_max, char *err, size_t n) {
    *n_max = 0;
    *ff_max = 0;
    for (int32_t i = 0; i < n_groups; i++) {
        const moe_batch_group *g = &groups[i];
        if (g->n_rows < 0 || g->row_begin < 0 || g->row_begin > n_rows_total - g->n_rows)
            return s_err(err, n, ERR_STATUS_INVAL,
                         "%s:%d: group %d rows [%lld, +%lld) outside the "
                         "batch of %lld rows",
                         COLI_GPU_VENDOR, d->index, (int)i, (long long)g->row_begin, (long long)g->n_rows,
                         (long long)n_rows_total);
        ex[i] = (const gpu_expert *)expert_table_get(&d->experts, expert_key(g->layer, g->expert));
        if (!ex[i])
            return s_err(err, n, ERR_STATUS_INVAL, "%s:%d: expert %d.%d is not resident", COLI_GPU_VENDOR, d->index,
                         g->layer, g->expert);
        if (ex[i]->n_embd != n_embd)
            return s_err(err, n, ERR_STATUS_INVAL, "%s:%d: expert %d.%d has n_embd %lld, batch has %lld",
                         COLI_GPU_VENDOR, d->index, g->layer, g->expert, (long long)ex[i]->n_embd, (long long)n_embd);
        if (g->n_rows > *n_max) *n_max = g->n_rows;
        if (ex[i]->n_ff > *ff_max) *ff_max = ex[i]->n_ff;
    }
    return 0;
}

/* Lay the run buffers out in scratch, growing it when too small:
 * x | out (whole batch), prep | g | u (largest group). */
static int s_scratch(moe_device *d, int64_t n_rows_total, int64_t n_embd, int64_t n_max, int64_t ff_max, char *err,
                     size_t n) {
    const uint64_t io = gpu_align_up((uint64_t)n_rows_total * (uint64_t)n_embd * sizeof(float));
    const int64_t wide = ff_max > n_embd ? ff_max : n_embd;
    const uint64_t prep = gpu_align_up((uint64_t)n_max * (uint64_t)wide * sizeof(float));
    const uint64_t hid = gpu_align_up((uint64_t)n_max * (uint64_t)ff_max * sizeof(float));
    const uint64_t need = 2 * io + prep + 2 * hid;
    if (need > d->scratch_bytes) {
        (void)cudaFree(d->scratch);
        d->scratch = NULL;
        d->scratch_bytes = 0;
        void *p = NULL;
        const cudaError_t e = s_alloc(d, &p, (size_t)need);
        if (e != cudaSuccess) {
            char b[32];
            return s_err(err, n, ERR_STATUS_NOMEM, "%s:%d: scratch of %s for %lld rows: %s", COLI_GPU_VENDOR, d->index,
                         gpu_fmt_bytes(b, sizeof b, need), (long long)n_rows_total, cudaGetErrorString(e));
        }
        d->scratch = (unsigned char *)p;
        d->scratch_bytes = (size_t)need;
    }
    d->x = (float *)d->scratch;
    d->out = (float *)(d->scratch + io);
    d->prep = d->scratch + 2 * io;
    d->g = (float *)(d->scratch + 2 * io + prep);
    d->u = (float *)(d->scratch + 2 * io + prep + hid);
    return 0;
}

/* Copy in, every group's kernels, copy the groups' rows out; all on the
 * stream, events between the phases for the stats. */
static int s_run_batch(moe_device *d, const moe_batch_group *groups, int32_t n_groups, const gpu_expert **ex,
                       const float *x, int64_t n_rows_total, int64_t n_embd, float *out, char *err, size_t n) {
    const size_t row_bytes = (size_t)n_embd * sizeof(float);
    cudaError_t e = cudaEventRecord(d->ev[0], d->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(d->x, x, (size_t)n_rows_total * row_bytes, cudaMemcpyHostToDevice, d->stream);
    if (e == cudaSuccess) e = cudaEventRecord(d->ev[1], d->stream);
    if (e != cudaSuccess)
        return s_err(err, n, ERR_STATUS_DEVICE, "%s:%d: input copy of %lld rows: %s", COLI_GPU_VENDOR, d->index,
                     (long long)n_rows_total, cudaGetErrorString(e));
    for (int32_t i = 0; i < n_groups; i++) {
        if (groups[i].n_rows == 0) continue;
        const int64_t off = groups[i].row_begin * n_embd;
        int rc = s_run_group(d, ex[i], d->x + off, groups[i].n_rows, d->out + off, err, n);
        if (rc) return rc;
    }
    e = cudaEventRecord(d->ev[2], d->stream);
    for (int32_t i = 0; i < n_groups && e == cudaSuccess; i++) {
        const int64_t off = groups[i].row_begin * n_embd;
        if (groups[i].n_rows > 0)
            e = cudaMemcpyAsync(out + off, d->out + off, (size_t)groups[i].n_rows * row_bytes, cudaMemcpyDeviceToHost,
                                d->stream);
    }
    if (e == cudaSuccess) e = cudaEventRecord(d->ev[3], d->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->stream);
    if (e != cudaSuccess)
        return s_err(err, n, ERR_STATUS_DEVICE, "%s:%d: batch of %lld rows: %s", COLI_GPU_VENDOR, d->index,
                     (long long)n_rows_total, cudaGetErrorString(e));
    float ms[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) (void)cudaEventElapsedTime(&ms[i], d->ev[i], d->ev[i + 1]);
    d->stats.h2d_seconds += ms[0] / 1e3;
    d->stats.kernel_seconds += ms[1] / 1e3;
    d->stats.d2h_seconds += ms[2] / 1e3;
    return 0;
}

static int s_run(moe_device *d, const moe_batch_group *groups, int32_t n_groups, const float *x, int64_t n_rows_total,
                 int64_t n_embd, float *out, char *err, size_t n) {
    if (!d || d->tag != GPU_TAG)
        return s_err(err, n, ERR_STATUS_INVAL, "%s: run on a closed or invalid device", COLI_GPU_VENDOR);
    if (n_groups < 0 || (n_groups > 0 && !groups) || n_rows_total < 0 || n_embd <= 0 ||
        (n_rows_total > 0 && (!x || !out)))
        return s_err(err, n, ERR_STATUS_INVAL,
                     "%s:%d: run: bad arguments (%d groups, %lld rows, "
                     "n_embd %lld)",
                     COLI_GPU_VENDOR, d->index, (int)n_groups, (long long)n_rows_total, (long long)n_embd);
    if (n_groups == 0 || n_rows_total == 0) return 0;
    const gpu_expert **ex = (const gpu_expert **)malloc((size_t)n_groups * sizeof *ex);
    if (!ex) return s_err(err, n, ERR_STATUS_NOMEM, "%s:%d: run: out of host memory", COLI_GPU_VENDOR, d->index);
    int64_t n_max = 0, ff_max = 0, rows = 0;
    int rc = s_check_batch(d, groups, n_groups, n_rows_total, n_embd, ex, &n_max, &ff_max, err, n);
    if (!rc && n_max > 0) {
        rc = s_select(d, err, n);
        if (!rc) rc = s_scratch(d, n_rows_total, n_embd, n_max, ff_max, err, n);
        if (!rc) rc = s_run_batch(d, groups, n_groups, ex, x, n_rows_total, n_embd, out, err, n);
        if (rc) {
            /* let queued work drain and clear the error so the next call starts clean */
            (void)cudaStreamSynchronize(d->stream);
            (void)cudaGetLastError();
        }
    }
    free(ex);
    if (rc) return rc;
    for (int32_t i = 0; i < n_groups; i++) rows += groups[i].n_rows;
    d->stats.calls++;
    d->stats.rows += (uint64_t)rows;
    return 0;
}

// ----------------------------------------------------------------------------
// experts

/* Shape, type and size checks of one expert; 0 or a status with err set. */
static int s_check_expert(const moe_device *d, const moe_expert_desc *e, char *err, size_t n) {
    const int types[3] = {e->gate_type, e->up_type, e->down_type};
    const char *names[3] = {"gate", "up", "down"};
    const size_t bytes[3] = {e->gate_bytes, e->up_bytes, e->down_bytes};
    const void *ptrs[3] = {e->gate, e->up, e->down};
    /* the activations of gpu_act (the worker hands no other: get_caps reports these); hostile
     * parameters are refused here rather than computed into NaNs */
    if (!gpu_act_supported(e->act))
        return s_err(err, n, ERR_STATUS_UNSUP, "%s:%d: expert %d.%d: activation %d not supported", COLI_GPU_VENDOR,
                     d->index, e->layer, e->expert, (int)e->act);
    if (!isfinite(e->act_alpha) || !isfinite(e->act_limit) || (e->act == MOE_ACT_SITU && !(e->act_alpha > 0.0f)) ||
        (e->act == MOE_ACT_SWIGLU_CLAMP && !(e->act_limit > 0.0f)))
        return s_err(err, n, ERR_STATUS_INVAL, "%s:%d: expert %d.%d: activation %d with alpha %g, limit %g",
                     COLI_GPU_VENDOR, d->index, e->layer, e->expert, (int)e->act, (double)e->act_alpha,
                     (double)e->act_limit);
    if (e->n_embd <= 0 || e->n_ff <= 0 || e->n_embd % GPU_QK || e->n_ff % GPU_QK)
        return s_err(err, n, ERR_STATUS_UNSUP,
                     "%s:%d: expert %d.%d: n_embd %lld / n_ff %lld not "
                     "positive multiples of 32",
                     COLI_GPU_VENDOR, d->index, e->layer, e->expert, (long long)e->n_embd, (long long)e->n_ff);
    for (int i = 0; i < 3; i++) {
        if (!gpu_dtype_supported(types[i]))
            return s_err(err, n, ERR_STATUS_UNSUP, "%s:%d: expert %d.%d: %s weight type %d not supported",
                         COLI_GPU_VENDOR, d->index, e->layer, e->expert, names[i], types[i]);
        const int64_t rows = i == 2 ? e->n_embd : e->n_ff, cols = i == 2 ? e->n_ff : e->n_embd;
        if (cols % gpu_block_elems(types[i]))
            return s_err(err, n, ERR_STATUS_UNSUP,
                         "%s:%d: expert %d.%d: %s rows of %lld values are not "
                         "a multiple of the %d-value blocks of weight type %d",
                         COLI_GPU_VENDOR, d->index, e->layer, e->expert, names[i], (long long)cols,
                         gpu_block_elems(types[i]), types[i]);
        const uint64_t want = (uint64_t)rows * gpu_row_bytes(types[i], cols);
        if (!ptrs[i] || bytes[i] != want)
            return s_err(err, n, ERR_STATUS_INVAL,
                         "%s:%d: expert %d.%d: %s has %llu bytes at %p, "
                         "expected %llu",
                         COLI_GPU_VENDOR, d->index, e->layer, e->expert, names[i], (unsigned long long)bytes[i],
                         ptrs[i], (unsigned long long)want);
    }
    if (!expert_key(e->layer, e->expert))
        return s_err(err, n, ERR_STATUS_INVAL, "%s:%d: expert %d.%d: a negative layer or expert", COLI_GPU_VENDOR,
                     d->index, e->layer, e->expert);
    if (expert_table_has(&d->experts, expert_key(e->layer, e->expert)))
        return s_err(err, n, ERR_STATUS_INVAL, "%s:%d: expert %d.%d is already resident", COLI_GPU_VENDOR, d->index,
                     e->layer, e->expert);
    return 0;
}

/* Allocate and fill one expert: its matrices, then its biases (absent ones
 * take no bytes, so a bias-free expert's layout is the matrices alone); on
 * failure nothing of it stays on the device. */
static int s_upload_expert(moe_device *d, const moe_expert_desc *e, gpu_expert *x, char *err, size_t n) {
    const void *src[GPU_PARTS] = {e->gate, e->up, e->down, e->gate_bias, e->up_bias, e->down_bias};
    const size_t f = sizeof(float), ff = (size_t)e->n_ff * f;
    const size_t bytes[GPU_PARTS] = {e->gate_bytes,       e->up_bytes,
                                     e->down_bytes,       e->gate_bias ? ff : 0,
                                     e->up_bias ? ff : 0, e->down_bias ? (size_t)e->n_embd * f : 0};
    const char *names[GPU_PARTS] = {"gate", "up", "down", "gate bias", "up bias", "down bias"};
    char b1[32], b2[32], b3[32];
    x->off[0] = 0;
    for (int i = 1; i < GPU_PARTS; i++) x->off[i] = x->off[i - 1] + (size_t)gpu_align_up(bytes[i - 1]);
    x->bytes = gpu_align_up(x->off[GPU_PARTS - 1] + bytes[GPU_PARTS - 1]);
    const uint64_t used = d->stats.resident_bytes;
    if (x->bytes > d->budget || used > d->budget - x->bytes)
        return s_err(err, n, ERR_STATUS_NOMEM, "%s:%d: expert %d.%d needs %s, budget %s has %s left", COLI_GPU_VENDOR,
                     d->index, e->layer, e->expert, gpu_fmt_bytes(b1, sizeof b1, x->bytes),
                     gpu_fmt_bytes(b2, sizeof b2, d->budget),
                     gpu_fmt_bytes(b3, sizeof b3, used < d->budget ? d->budget - used : 0));
    void *p = NULL;
    cudaError_t rc = s_alloc(d, &p, (size_t)x->bytes);
    if (rc != cudaSuccess)
        return s_err(err, n, ERR_STATUS_NOMEM, "%s:%d: expert %d.%d: device allocation of %s failed: %s",
                     COLI_GPU_VENDOR, d->index, e->layer, e->expert, gpu_fmt_bytes(b1, sizeof b1, x->bytes),
                     cudaGetErrorString(rc));
    x->base = (unsigned char *)p;
    for (int i = 0; i < GPU_PARTS; i++) {
        if (!bytes[i]) continue;
        rc = s_upload(d, x->base + x->off[i], src[i], bytes[i]);
        if (rc != cudaSuccess) {
            (void)cudaFree(x->base);
            x->base = NULL;
            return s_err(err, n, ERR_STATUS_DEVICE, "%s:%d: expert %d.%d: upload of %s (%s) failed: %s",
                         COLI_GPU_VENDOR, d->index, e->layer, e->expert, names[i],
                         gpu_fmt_bytes(b1, sizeof b1, bytes[i]), cudaGetErrorString(rc));
        }
    }
    for (int i = 0; i < 3; i++) x->bias[i] = bytes[3 + i] ? (const float *)(x->base + x->off[3 + i]) : NULL;
    return 0;
}

static int s_load_expert(moe_device *d, const moe_expert_desc *e, char *err, size_t n) {
    if (!d || d->tag != GPU_TAG || !e)
        return s_err(err, n, ERR_STATUS_INVAL, "%s: load_expert: closed device or NULL expert", COLI_GPU_VENDOR);
    int rc = s_check_expert(d, e, err, n);
    if (rc) {
        d->stats.failed_loads++;
        return rc;
    }
    gpu_expert *x = (gpu_expert *)calloc(1, sizeof *x);
    if (!x) {
        d->stats.failed_loads++;
        return s_err(err, n, ERR_STATUS_NOMEM, "%s:%d: expert %d.%d: out of host memory", COLI_GPU_VENDOR, d->index,
                     e->layer, e->expert);
    }
    x->layer = e->layer;
    x->expert = e->expert;
    x->n_embd = e->n_embd;
    x->n_ff = e->n_ff;
    x->type[0] = e->gate_type;
    x->type[1] = e->up_type;
    x->type[2] = e->down_type;
    x->act = e->act;
    x->alpha = e->act_alpha;
    x->limit = e->act_limit;
    rc = s_select(d, err, n);
    if (!rc) rc = s_upload_expert(d, e, x, err, n);
    if (!rc && expert_table_put(&d->experts, expert_key(e->layer, e->expert), x)) {
        (void)cudaFree(x->base);
        rc = s_err(err, n, ERR_STATUS_NOMEM, "%s:%d: expert %d.%d: out of host memory", COLI_GPU_VENDOR, d->index,
                   e->layer, e->expert);
    }
    if (rc) {
        free(x);
        d->stats.failed_loads++;
        return rc;
    }
    d->stats.resident_experts++;
    d->stats.resident_bytes += x->bytes;
    return 0;
}

/* Free one expert's device buffer; its bytes leave the budget (ABI 1.2). */
static int s_unload_expert(moe_device *d, int32_t layer, int32_t expert, char *err, size_t n) {
    if (!d || d->tag != GPU_TAG)
        return s_err(err, n, ERR_STATUS_INVAL, "%s: unload_expert: closed device", COLI_GPU_VENDOR);
    void *val = NULL;
    expert_table_remove(&d->experts, expert_key(layer, expert), &val);
    gpu_expert *x = (gpu_expert *)val;
    if (!x)
        return s_err(err, n, ERR_STATUS_INVAL, "%s:%d: unload_expert: expert %d.%d is not resident", COLI_GPU_VENDOR,
                     d->index, layer, expert);
    (void)cudaSetDevice(d->index);
    if (d->stream) (void)cudaStreamSynchronize(d->stream); /* no kernel of a finished run still reads it */
    d->stats.resident_experts--;
    d->stats.resident_bytes -= x->bytes;
    (void)cudaFree(x->base);
    (void)cudaGetLastError();
    free(x);
    return 0;
}

// ----------------------------------------------------------------------------
// open / caps / stats / close

static void s_free_expert(void *val, void *arg) {
    (void)arg;
    gpu_expert *x = (gpu_expert *)val;
    (void)cudaFree(x->base);
    free(x);
}

static void s_close(moe_device **pd) {
    if (!pd || !*pd) return;
    moe_device *d = *pd;
    (void)cudaSetDevice(d->index);
    if (d->stream) (void)cudaStreamSynchronize(d->stream);
    expert_table_free(&d->experts, s_free_expert, NULL);
    (void)cudaFree(d->scratch);
    (void)cudaFree(d->grids);
    for (int i = 0; i < 4; i++)
        if (d->ev[i]) (void)cudaEventDestroy(d->ev[i]);
    if (d->stream) (void)cudaStreamDestroy(d->stream);
    (void)cudaGetLastError();
    d->tag = GPU_DEAD_TAG;
    free(d);
    *pd = NULL;
}

/* Points this device's gpu_grid_tables at its copy of the codebooks. */
__global__ void k_set_grids(gpu_grids g) { gpu_grid_tables = g; }

/* The IQ codebooks (33 KiB) into device memory, once per device; outside
 * the expert budget and the fault counters (the reserve covers it). */
static cudaError_t s_upload_grids(moe_device *d) {
    const void *src[GPU_HOST_GRIDS];
    size_t bytes[GPU_HOST_GRIDS], off[GPU_HOST_GRIDS], total = 0;
    gpu_grid_sources(src, bytes);
    for (int i = 0; i < GPU_HOST_GRIDS; i++) off[i] = total, total += bytes[i];
    cudaError_t e = cudaMalloc((void **)&d->grids, total);
    for (int i = 0; i < GPU_HOST_GRIDS && e == cudaSuccess; i++)
        e = cudaMemcpyAsync(d->grids + off[i], src[i], bytes[i], cudaMemcpyHostToDevice, d->stream);
    if (e != cudaSuccess) return e;
    gpu_grids g;
    g.iq2xxs = (const uint64_t *)(d->grids + off[0]);
    g.iq2xs = (const uint64_t *)(d->grids + off[1]);
    g.iq2s = (const uint64_t *)(d->grids + off[2]);
    g.iq1s = (const uint64_t *)(d->grids + off[3]);
    g.iq3xxs = (const uint32_t *)(d->grids + off[4]);
    g.iq3s = (const uint32_t *)(d->grids + off[5]);
    k_set_grids<<<1, 1, 0, d->stream>>>(g);
    e = cudaGetLastError();
    return e == cudaSuccess ? cudaStreamSynchronize(d->stream) : e;
}

/* Select the device, read its name and memory, create the stream and events. */
static int s_open_device(moe_device *d, uint64_t budget, char *err, size_t n) {
    cudaDeviceProp prop;
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaSetDevice(d->index);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, d->index);
    if (e == cudaSuccess) e = cudaMemGetInfo(&free_b, &total_b);
    if (e == cudaSuccess) e = cudaStreamCreate(&d->stream);
    for (int i = 0; i < 4 && e == cudaSuccess; i++) e = cudaEventCreate(&d->ev[i]);
    if (e == cudaSuccess) e = s_upload_grids(d);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return s_err(err, n, ERR_STATUS_DEVICE, "%s:%d: cannot open: %s", COLI_GPU_VENDOR, d->index,
                     cudaGetErrorString(e));
    }
    snprintf(d->name, sizeof d->name, "%.63s", prop.name);
    d->mem_total = total_b;
    d->budget = budget ? budget : gpu_default_budget(free_b, total_b);
    return 0;
}

static int s_open(const moe_open_opts *opts, moe_device **out, char *err, size_t n) {
    if (!out) return s_err(err, n, ERR_STATUS_INVAL, "%s: open: NULL result pointer", COLI_GPU_VENDOR);
    *out = NULL;
    if (!opts) return s_err(err, n, ERR_STATUS_INVAL, "%s: open: NULL options", COLI_GPU_VENDOR);
    gpu_faults faults;
    char why[256];
    if (gpu_faults_parse(opts->fault, &faults, why, sizeof why))
        return s_err(err, n, ERR_STATUS_INVAL, "%s:%d: %s", COLI_GPU_VENDOR, opts->device_index, why);
    int count = 0;
    if (s_count_devices(&count, why, sizeof why))
        return s_err(err, n, ERR_STATUS_DEVICE, "%s:%d: %s", COLI_GPU_VENDOR, opts->device_index, why);
    if (opts->device_index < 0 || opts->device_index >= count)
        return s_err(err, n, ERR_STATUS_INVAL, "%s:%d: no such device (%d present)", COLI_GPU_VENDOR,
                     opts->device_index, count);
    moe_device *d = (moe_device *)calloc(1, sizeof *d);
    if (!d) return s_err(err, n, ERR_STATUS_NOMEM, "%s:%d: out of host memory", COLI_GPU_VENDOR, opts->device_index);
    d->tag = GPU_TAG;
    d->index = opts->device_index;
    d->faults = faults;
    int rc = s_open_device(d, opts->memory_budget, err, n);
    if (rc) {
        s_close(&d);
        return rc;
    }
    *out = d;
    return 0;
}

static int s_get_caps(moe_device *d, moe_caps *caps) {
    if (!d || d->tag != GPU_TAG || !caps) return ERR_STATUS_INVAL;
    memset(caps, 0, sizeof *caps);
    for (int t = 0; t < 32; t++)
        if (gpu_dtype_supported(t)) caps->dtype_mask |= 1u << t;
    for (int t = 32; t < 64; t++) /* ABI 1.3: TQ1_0, TQ2_0, MXFP4 */
        if (gpu_dtype_supported(t)) caps->dtype_mask_hi |= 1u << (t - 32);
    caps->act_mask = gpu_act_mask(); /* ABI 1.4: SWIGLU_OAI, SITU, biases */
    caps->max_rows = 0;              /* scratch grows with the batch */
    caps->memory_total = d->mem_total;
    caps->memory_budget = d->budget;
    snprintf(caps->device_name, sizeof caps->device_name, "%s", d->name);
    return 0;
}

static int s_get_stats(moe_device *d, moe_stats *stats) {
    if (!d || d->tag != GPU_TAG || !stats) return ERR_STATUS_INVAL;
    *stats = d->stats;
    return 0;
}

static const struct moe_plugin s_plugin = {
    MOE_PLUGIN_ABI_MAJOR,
    MOE_PLUGIN_ABI_MINOR,
    (uint32_t)sizeof(struct moe_plugin),
    COLI_GPU_VENDOR,
    s_probe,
    s_open,
    s_get_caps,
    s_load_expert,
    s_run,
    s_get_stats,
    s_close,
    NULL, /* get_counters */
    s_unload_expert,
};

extern "C" __attribute__((visibility("default"))) const struct moe_plugin *moe_plugin_get(void) { return &s_plugin; }
