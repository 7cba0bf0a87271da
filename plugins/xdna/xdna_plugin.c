/*
 * xdna_plugin.c - libcoli-xdna.so: the NPU lane as a plugin of our ABI
 * (plugins/plugin_abi.h). Pure C; XRT is reached only through the helper
 * library (xdna_helper_abi.h), loaded by absolute path beside this file.
 *
 * Five facts, each checked on its own, in this order, at open: the lane was
 * requested (COLI_XDNA a non-zero integer; `--xdna` sets it); the package is
 * present and every file's SHA-256 matches the registry (before the helper
 * loads); the helper loaded with ABI generation 2; the device and every
 * artifact opened. Then per expert at load (gates 1, 2 and 4: op qualified,
 * (K, N) and weight type as registered, the BF16 weight image prepared and
 * published only when complete) and per batch (gate 3: rows in a bucket, its
 * artifacts present). Whatever fails a gate is refused with the diagnostic's
 * name as the first word of the reason, and the coordinator computes it on the
 * CPU path and counts it under that name. Never a partial result.
 *
 * Numerics: the NPU multiplies BF16 by BF16 with F32 sums. Activations and
 * the SwiGLU product are rounded to BF16 before each GEMM; outputs are F32.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "colibri.h"
#include "core/expert_table.h"
#include "core/settings.h"
#include "plugins/plugin_abi.h"
#include "plugins/xdna/xdna_loader.h"
#include "plugins/xdna/xdna_package.h"
#include "core/quant/quant.h"
#include "core/tensor.h"

#define XDNA_DEV_TAG 0x7d9a0001u
#define XDNA_DTYPE_MASK \
    ((1u << COLI_F32) | (1u << COLI_F16) | (1u << COLI_Q4_0) | (1u << COLI_Q8_0) | (1u << COLI_BF16))
#define XDNA_MAX_BUCKET 256

static const int64_t s_buckets[2] = {64, 256};

/* One expert on the lane: a device weight per (op, bucket) that has an artifact. */
typedef struct xdna_expert {
    xdna_expert_shape shape;
    int art[XDNA_N_OPS][2]; /* artifact index, -1 = none */
    xdna_weight *w[XDNA_N_OPS][2];
    size_t bytes;  /* of the BF16 images */
    int published; /* every weight wrapped: usable */
} xdna_expert;

struct moe_device {
    uint32_t tag;
    xdna_package *pkg;
    const xdna_helper *h;
    xdna_session *sess;
    expert_table experts; /* (layer, expert) -> xdna_expert* */
    uint64_t budget;
    uint16_t *a16;  /* scratch: bucket x width BF16 */
    float *c0, *c1; /* scratch: bucket x width F32 */
    size_t scratch_elems;
    moe_stats stats;
    uint64_t runs[2], padded_rows; /* expert FFNs run per bucket, zero rows they added */
};

static int s_fail(char *err, size_t err_len, int rc, xdna_diag d, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int s_fail(char *err, size_t err_len, int rc, xdna_diag d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    xdna_vwhy(d, "xdna: ", err, err_len, fmt, ap);
    va_end(ap);
    return rc;
}

static double s_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---------------------------------------------------------------------------
// open / close

static int s_xdna_probe(int *n_devices, char *why, size_t why_len) {
    /* the facts are checked in order at open; probing would load the helper first */
    if (n_devices) *n_devices = 1;
    if (why && why_len) why[0] = '\0';
    return 0;
}

static void s_free_expert(void *val, void *arg) {
    moe_device *d = arg;
    xdna_expert *e = val;
    for (int op = 0; op < XDNA_N_OPS; op++)
        for (int b = 0; b < 2; b++)
            if (e->w[op][b]) d->h->release_weight(d->sess, &e->w[op][b]);
    free(e);
}

static void s_xdna_close(moe_device **dev) {
    if (!dev || !*dev) return;
    moe_device *d = *dev;
    expert_table_free(&d->experts, s_free_expert, d);
    if (d->sess) d->h->shutdown(&d->sess);
    free(d->pkg);
    free(d->a16);
    free(d->c0);
    free(d->c1);
    d->tag = 0;
    free(d);
    *dev = NULL; /* the helper stays loaded: its verdict is the process's */
}

static int s_xdna_open(const moe_open_opts *opts, moe_device **out, char *err, size_t err_len) {
    if (!out || !opts) return s_fail(err, err_len, COLI_EINVAL, XDNA_HELPER_BAD_ARGUMENT, "open: NULL argument");
    *out = NULL;
    coli_settings set; /* the plugin's moment: its worker's environment, read once at open */
    coli_settings_from_env(&set);
    if (!set.xdna)
        return s_fail(err, err_len, COLI_EDEVICE, XDNA_NOT_REQUESTED,
                      "the NPU lane is off (--xdna or COLI_XDNA=1 "
                      "turns it on)");
    char dir[PATH_MAX], pkg_dir[PATH_MAX + 32], why[640];
    if (xdna_plugin_dir(dir, sizeof dir) != 0)
        return s_fail(err, err_len, COLI_EDEVICE, XDNA_HELPER_UNAVAILABLE, "cannot locate the plugin's directory");
    moe_device *d = calloc(1, sizeof *d);
    if (d) d->pkg = malloc(sizeof *d->pkg);
    if (!d || !d->pkg) {
        if (d) free(d);
        return s_fail(err, err_len, COLI_ENOMEM, XDNA_HELPER_BAD_ARGUMENT, "open: out of memory");
    }
    d->tag = XDNA_DEV_TAG;
    d->budget = opts->memory_budget;
    xdna_package_default_dir(set.xdna_package, dir, pkg_dir, sizeof pkg_dir);
    /* the package gate runs before the helper loads */
    xdna_diag v = xdna_package_load(pkg_dir, d->pkg, why, sizeof why);
    if (v == XDNA_OK) v = xdna_helper_load(dir, &d->h, why, sizeof why);
    if (v == XDNA_OK)
        v = xdna_session_open(d->h, d->pkg, opts->device_index, set.xdna_timeout_ms, &d->sess, why, sizeof why);
    if (v != XDNA_OK) {
        snprintf(err, err_len, "%s", why);
        s_xdna_close(&d);
        return COLI_EDEVICE;
    }
    fprintf(stderr,
            "colibri: xdna: experimental NPU lane on (%d artifacts from %s); it computes in BF16, "
            "so its outputs differ slightly from the CPU path\n",
            d->pkg->n, pkg_dir);
    *out = d;
    return 0;
}

static int s_xdna_get_caps(moe_device *d, moe_caps *caps) {
    if (!d || d->tag != XDNA_DEV_TAG || !caps) return COLI_EINVAL;
    memset(caps, 0, sizeof *caps);
    caps->dtype_mask = XDNA_DTYPE_MASK;
    caps->max_rows = XDNA_MAX_BUCKET;
    caps->memory_budget = d->budget;
    snprintf(caps->device_name, sizeof caps->device_name, "AMD XDNA NPU (%d artifacts)", d->pkg->n);
    return 0;
}

// ---------------------------------------------------------------------------
// experts: gates 1, 2 and 4 at load

/* rows x k BF16 image of the GGUF matrix src (rows of k values of type t),
 * page aligned; NULL when out of memory. */
static uint16_t *s_bf16_image(const void *src, coli_dtype t, int64_t rows, int64_t k) {
    size_t bytes = (size_t)rows * (size_t)k * sizeof(uint16_t);
    void *img = NULL;
    float *row = malloc((size_t)k * sizeof *row);
    if (!row || posix_memalign(&img, 4096, bytes ? bytes : 1) != 0) {
        free(row);
        return NULL;
    }
    uint16_t *o = img;
    const size_t row_bytes = coli_row_bytes(t, k);
    for (int64_t r = 0; r < rows; r++) {
        coli_dequantize_row(t, (const char *)src + (size_t)r * row_bytes, row, k);
        for (int64_t i = 0; i < k; i++) o[(size_t)r * (size_t)k + (size_t)i] = coli_fp32_to_bf16(row[i]);
    }
    free(row);
    return o;
}

/* Convert and wrap every (op, bucket) weight of x; on failure nothing is kept. */
static int s_prepare(moe_device *d, const moe_expert_desc *e, xdna_expert *x, char *err, size_t err_len) {
    const void *src[XDNA_N_OPS] = {e->gate, e->up, e->down};
    for (int op = 0; op < XDNA_N_OPS; op++) {
        const int64_t rows = op == XDNA_OP_DOWN ? e->n_embd : e->n_ff, k = op == XDNA_OP_DOWN ? e->n_ff : e->n_embd;
        uint16_t *img = s_bf16_image(src[op], (coli_dtype)x->shape.types[op], rows, k);
        if (!img)
            return s_fail(err, err_len, COLI_ENOMEM, XDNA_IMAGE_FAILED, "expert %d/%d: no memory for the %s image",
                          e->layer, e->expert, xdna_op_name((xdna_op)op));
        x->bytes += (size_t)rows * (size_t)k * sizeof(uint16_t);
        for (int b = 0; b < 2; b++) {
            if (x->art[op][b] < 0) continue;
            int st = d->h->wrap_weight(d->sess, x->art[op][b], img, (size_t)(rows * k), &x->w[op][b]);
            if (st != XDNA_SUCCESS) {
                free(img);
                return s_fail(err, err_len, COLI_EDEVICE, xdna_helper_diag(st), "expert %d/%d %s: %s", e->layer,
                              e->expert, xdna_op_name((xdna_op)op), d->h->last_error());
            }
        }
        free(img); /* the device buffers hold the image now */
    }
    return 0;
}

static int s_check_desc(const moe_expert_desc *e, char *err, size_t err_len) {
    const int32_t types[3] = {e->gate_type, e->up_type, e->down_type};
    const size_t bytes[3] = {e->gate_bytes, e->up_bytes, e->down_bytes};
    const void *ptrs[3] = {e->gate, e->up, e->down};
    if (e->n_embd <= 0 || e->n_ff <= 0)
        return s_fail(err, err_len, COLI_EINVAL, XDNA_HELPER_BAD_ARGUMENT, "expert %d/%d: bad shape", e->layer,
                      e->expert);
    if (!expert_key(e->layer, e->expert)) /* no key in the table */
        return s_fail(err, err_len, COLI_EINVAL, XDNA_HELPER_BAD_ARGUMENT, "expert %d/%d: a negative layer or expert",
                      e->layer, e->expert);
    for (int i = 0; i < 3; i++) {
        if (types[i] < 0 || types[i] >= 32 || !(XDNA_DTYPE_MASK >> types[i] & 1u))
            return s_fail(err, err_len, COLI_EUNSUPPORTED, XDNA_DECLINED_DTYPE, "expert %d/%d: weight type %s",
                          e->layer, e->expert, coli_dtype_name((uint32_t)types[i]));
        const int64_t k = i < 2 ? e->n_embd : e->n_ff, rows = i < 2 ? e->n_ff : e->n_embd;
        if (k % coli_dtype_block_elems((coli_dtype)types[i]) || !ptrs[i] ||
            bytes[i] != coli_row_bytes((coli_dtype)types[i], k) * (size_t)rows)
            return s_fail(err, err_len, COLI_EINVAL, XDNA_HELPER_BAD_ARGUMENT,
                          "expert %d/%d: matrix %d is %zu "
                          "bytes, not its shape's",
                          e->layer, e->expert, i, bytes[i]);
    }
    return 0;
}

static int s_xdna_load_expert(moe_device *d, const moe_expert_desc *e, char *err, size_t err_len) {
    if (!d || d->tag != XDNA_DEV_TAG || !e)
        return s_fail(err, err_len, COLI_EINVAL, XDNA_HELPER_BAD_ARGUMENT, "load_expert: NULL or closed device");
    int rc = s_check_desc(e, err, err_len);
    if (rc) {
        d->stats.failed_loads++;
        return rc;
    }
    if (expert_table_has(&d->experts, expert_key(e->layer, e->expert))) return 0; /* held already */
    xdna_expert *x = calloc(1, sizeof *x);
    if (!x) return s_fail(err, err_len, COLI_ENOMEM, XDNA_IMAGE_FAILED, "out of memory");
    x->shape = (xdna_expert_shape){e->n_embd, e->n_ff, {e->gate_type, e->up_type, e->down_type}};
    int any_bucket = 0;
    for (int op = 0; rc == 0 && op < XDNA_N_OPS; op++) {
        xdna_diag g = xdna_gate_op(d->pkg, &x->shape, (xdna_op)op, err, err_len);
        if (g != XDNA_OK) rc = COLI_EUNSUPPORTED;
    }
    for (int b = 0; rc == 0 && b < 2; b++) {
        int all = 1;
        for (int op = 0; op < XDNA_N_OPS; op++)
            all &= (x->art[op][b] = xdna_find_artifact(d->pkg, &x->shape, (xdna_op)op, s_buckets[b])) >= 0;
        any_bucket |= all;
    }
    if (rc == 0 && !any_bucket)
        rc = s_fail(err, err_len, COLI_EUNSUPPORTED, XDNA_DECLINED_BUCKET,
                    "expert %d/%d: no bucket has all three "
                    "ops",
                    e->layer, e->expert);
    if (rc == 0) rc = s_prepare(d, e, x, err, err_len);
    if (rc == 0 && d->budget && d->stats.resident_bytes + x->bytes > d->budget)
        rc = s_fail(err, err_len, COLI_ENOMEM, XDNA_IMAGE_FAILED, "expert %d/%d: the budget is full", e->layer,
                    e->expert);
    if (rc == 0 && expert_table_put(&d->experts, expert_key(e->layer, e->expert), x) != 0)
        rc = s_fail(err, err_len, COLI_ENOMEM, XDNA_IMAGE_FAILED, "out of memory");
    if (rc != 0) {
        s_free_expert(x, d);
        d->stats.failed_loads++;
        return rc;
    }
    x->published = 1; /* complete: only now may a batch use it */
    d->stats.resident_experts++;
    d->stats.resident_bytes += x->bytes;
    return 0;
}

// ---------------------------------------------------------------------------
// run: gate 3 per batch, then the FFN of each group on the NPU

static int s_reserve(moe_device *d, size_t elems) {
    if (elems <= d->scratch_elems) return 0;
    uint16_t *a = realloc(d->a16, elems * sizeof *a);
    if (a) d->a16 = a;
    float *c0 = realloc(d->c0, elems * sizeof *c0);
    if (c0) d->c0 = c0;
    float *c1 = realloc(d->c1, elems * sizeof *c1);
    if (c1) d->c1 = c1;
    if (!a || !c0 || !c1) return COLI_ENOMEM;
    d->scratch_elems = elems;
    return 0;
}

/* c = a16 . W^T for (op, bucket b) of x; the helper's failure as a diagnostic. */
static int s_gemm(moe_device *d, xdna_expert *x, int op, int b, float *c, char *err, size_t err_len) {
    int st = d->h->execute(d->sess, x->w[op][b], d->a16, c);
    if (st != XDNA_SUCCESS)
        return s_fail(err, err_len, COLI_EDEVICE, xdna_helper_diag(st), "%s: %s", xdna_op_name((xdna_op)op),
                      d->h->last_error());
    return 0;
}

static int s_finite(const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return 0;
    return 1;
}

/* out (n x E) = expert x (x (n x E)) through bucket b: gate and up GEMMs,
 * SwiGLU in F32 rounded to BF16, down GEMM. Rows n..M-1 are zeros. */
static int s_ffn(moe_device *d, xdna_expert *x, int b, const float *in, int64_t n, int check, float *out, char *err,
                 size_t err_len) {
    const int64_t M = s_buckets[b], E = x->shape.n_embd, F = x->shape.n_ff;
    memset(d->a16, 0, (size_t)(M * E) * sizeof *d->a16);
    for (int64_t i = 0; i < n * E; i++) d->a16[i] = coli_fp32_to_bf16(in[i]);
    int rc = s_gemm(d, x, XDNA_OP_GATE, b, d->c0, err, err_len);
    if (rc == 0) rc = s_gemm(d, x, XDNA_OP_UP, b, d->c1, err, err_len);
    if (rc) return rc;
    if (check && (!s_finite(d->c0, (size_t)(n * F)) || !s_finite(d->c1, (size_t)(n * F))))
        return s_fail(err, err_len, COLI_EDEVICE, XDNA_NAN_OUTPUT, "gate/up output not finite for finite input");
    memset(d->a16, 0, (size_t)(M * F) * sizeof *d->a16);
    for (int64_t i = 0; i < n * F; i++) {
        const float g = d->c0[i];
        d->a16[i] = coli_fp32_to_bf16(g / (1.0f + expf(-g)) * d->c1[i]);
    }
    rc = s_gemm(d, x, XDNA_OP_DOWN, b, d->c0, err, err_len);
    if (rc) return rc;
    if (check && !s_finite(d->c0, (size_t)(n * E)))
        return s_fail(err, err_len, COLI_EDEVICE, XDNA_NAN_OUTPUT, "down output not finite for finite input");
    memcpy(out, d->c0, (size_t)(n * E) * sizeof *out);
    d->runs[b]++;
    d->padded_rows += (uint64_t)(M - n);
    return 0;
}

/* Gate 3 for every group before anything runs (and gate 4: published). */
static int s_gate_batch(moe_device *d, const moe_batch_group *groups, int32_t n_groups, int64_t n_rows_total,
                        int64_t n_embd, char *err, size_t err_len) {
    for (int32_t i = 0; i < n_groups; i++) {
        const moe_batch_group *g = &groups[i];
        if (g->n_rows < 0 || g->row_begin < 0 || g->row_begin > n_rows_total || g->n_rows > n_rows_total - g->row_begin)
            return s_fail(err, err_len, COLI_EINVAL, XDNA_HELPER_BAD_ARGUMENT, "group %d outside the batch", i);
        const xdna_expert *x = expert_table_get(&d->experts, expert_key(g->layer, g->expert));
        if (!x || !x->published || x->shape.n_embd != n_embd)
            return s_fail(err, err_len, COLI_EINVAL, XDNA_IMAGE_FAILED, "expert %d/%d has no prepared weight image",
                          g->layer, g->expert);
        const int64_t bucket = xdna_bucket_of(g->n_rows);
        if (g->n_rows > 0 && bucket == 0)
            return s_fail(err, err_len, COLI_EUNSUPPORTED, XDNA_DECLINED_ROWS,
                          "expert %d/%d: %lld rows, the "
                          "largest bucket is %d",
                          g->layer, g->expert, (long long)g->n_rows, XDNA_MAX_BUCKET);
        const int b = bucket == 256;
        if (g->n_rows > 0 && (!x->w[XDNA_OP_GATE][b] || !x->w[XDNA_OP_UP][b] || !x->w[XDNA_OP_DOWN][b]))
            return s_fail(err, err_len, COLI_EUNSUPPORTED, XDNA_DECLINED_BUCKET, "expert %d/%d: no M%lld artifact",
                          g->layer, g->expert, (long long)bucket);
    }
    return 0;
}

/* A batch the lane did not compute goes to the CPU path and is counted there;
 * say the first of each reason on stderr too (the rest only count). */
static void s_say_once(const char *err) {
    static unsigned char said[XDNA_DIAG_COUNT];
    for (int k = 1; k < XDNA_DIAG_COUNT; k++) {
        const char *name = xdna_diag_name((xdna_diag)k);
        const size_t len = strlen(name);
        if (strncmp(err, name, len) || err[len] != ':') continue;
        if (!said[k])
            fprintf(stderr,
                    "colibri: xdna: %s; the CPU path computes it (further %s counted, not "
                    "printed)\n",
                    err, name);
        said[k] = 1;
        return;
    }
}

static int s_xdna_run(moe_device *d, const moe_batch_group *groups, int32_t n_groups, const float *x,
                      int64_t n_rows_total, int64_t n_embd, float *out, char *err, size_t err_len) {
    if (!d || d->tag != XDNA_DEV_TAG)
        return s_fail(err, err_len, COLI_EINVAL, XDNA_HELPER_BAD_ARGUMENT, "run: NULL or closed device");
    if (n_groups < 0 || (n_groups > 0 && !groups) || n_rows_total < 0 || n_embd <= 0 ||
        (n_rows_total > 0 && (!x || !out)))
        return s_fail(err, err_len, COLI_EINVAL, XDNA_HELPER_BAD_ARGUMENT, "run: bad arguments");
    int rc = s_gate_batch(d, groups, n_groups, n_rows_total, n_embd, err, err_len);
    if (rc) {
        s_say_once(err);
        return rc;
    }
    double t0 = s_now();
    const int check = s_finite(x, (size_t)(n_rows_total * n_embd));
    for (int32_t i = 0; rc == 0 && i < n_groups; i++) {
        const moe_batch_group *g = &groups[i];
        if (g->n_rows == 0) continue;
        xdna_expert *e = expert_table_get(&d->experts, expert_key(g->layer, g->expert));
        const int b = xdna_bucket_of(g->n_rows) == 256;
        const int64_t width = e->shape.n_ff > e->shape.n_embd ? e->shape.n_ff : e->shape.n_embd;
        if (s_reserve(d, (size_t)(s_buckets[b] * width)) != 0)
            return s_fail(err, err_len, COLI_ENOMEM, XDNA_IMAGE_FAILED, "run: out of memory");
        const size_t off = (size_t)g->row_begin * (size_t)n_embd;
        rc = s_ffn(d, e, b, x + off, g->n_rows, check, out + off, err, err_len);
        d->stats.rows += (uint64_t)g->n_rows;
    }
    d->stats.calls++;
    d->stats.kernel_seconds += s_now() - t0;
    if (rc) s_say_once(err);
    return rc;
}

static int s_xdna_get_stats(moe_device *d, moe_stats *stats) {
    if (!d || d->tag != XDNA_DEV_TAG || !stats) return COLI_EINVAL;
    *stats = d->stats;
    return 0;
}

/* What stats show per bucket: expert FFNs run through M64 / M256 artifacts,
 * and the zero rows that padding added. */
static int s_xdna_get_counters(moe_device *d, moe_counter *out, int cap) {
    if (!d || d->tag != XDNA_DEV_TAG || !out || cap < 3) return 0;
    const char *names[3] = {"bucket_m64", "bucket_m256", "padded_rows"};
    const uint64_t values[3] = {d->runs[0], d->runs[1], d->padded_rows};
    for (int i = 0; i < 3; i++) {
        snprintf(out[i].name, sizeof out[i].name, "%s", names[i]);
        out[i].value = values[i];
    }
    return 3;
}

static const struct moe_plugin s_xdna_plugin = {
    .abi_major = MOE_PLUGIN_ABI_MAJOR,
    .abi_minor = MOE_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(struct moe_plugin),
    .name = "xdna",
    .probe = s_xdna_probe,
    .open = s_xdna_open,
    .get_caps = s_xdna_get_caps,
    .load_expert = s_xdna_load_expert,
    .run = s_xdna_run,
    .get_stats = s_xdna_get_stats,
    .close = s_xdna_close,
    .get_counters = s_xdna_get_counters,
};

const struct moe_plugin *moe_plugin_get(void) { return &s_xdna_plugin; }
