/*
 * expert_ffn.c - one gated FFN expert; see expert_ffn.h.
 */
#include "core/kernels/expert_ffn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

expert_part_bytes expert_parts_bytes(const expert_weights *w) {
    return (expert_part_bytes){coli_row_bytes(w->gate_type, w->n_embd) * (size_t)w->n_ff,
                               coli_row_bytes(w->up_type, w->n_embd) * (size_t)w->n_ff,
                               coli_row_bytes(w->down_type, w->n_ff) * (size_t)w->n_embd};
}

size_t expert_weights_bytes(const expert_weights *w) {
    const expert_part_bytes b = expert_parts_bytes(w);
    return b.gate + b.up + b.down;
}

// ----------------------------------------------------------------------------
// slicing a 3-D expert tensor

/* The tensor blk.<layer>.ffn_<part>_exps.weight, checked to be a 3-D
 * expert stack of a type the kernels compute. */
static int s_find_exps(const gguf_file *f, int layer, const char *part, const coli_tensor **out) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.weight", layer, part);
    const coli_tensor *t = gguf_find_tensor(f, name);
    if (!t) return coli_fail(COLI_EFORMAT, "tensor '%s': missing", name);
    if (t->n_dims != 3)
        return coli_fail(COLI_EFORMAT, "tensor '%s': %d dims, expected 3 (n_in, n_out, n_expert)", name, t->n_dims);
    if (!coli_dtype_valid((uint32_t)t->type))
        return coli_fail(COLI_EUNSUPPORTED, "tensor '%s': type %s not supported", name,
                         coli_dtype_name((uint32_t)t->type));
    if (t->ne[0] % coli_dtype_block_elems(t->type) != 0)
        return coli_fail(COLI_EFORMAT, "tensor '%s': row of %lld not a multiple of %lld for %s", name,
                         (long long)t->ne[0], (long long)coli_dtype_block_elems(t->type), coli_dtype_name(t->type));
    *out = t;
    return 0;
}

/* Pointer to expert e's (rows, row_len) matrix inside t. */
static const void *s_expert_slice(const coli_tensor *t, int expert) {
    size_t bytes = coli_row_bytes(t->type, t->ne[0]) * (size_t)t->ne[1];
    return (const uint8_t *)t->data + (size_t)expert * bytes;
}

int expert_layer_present(const gguf_file *f, int layer) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", layer);
    return f && layer >= 0 && gguf_find_tensor(f, name) != NULL;
}

/* 1 for a deepseek4 file (its experts take the clamped SwiGLU). */
static int s_is_ds4(const gguf_file *f) {
    static const char ds4[] = "deepseek4";
    gguf_str a;
    if (!f || gguf_find_key(f, "general.architecture") < 0 || gguf_get_str(f, "general.architecture", &a) < 0) return 0;
    return a.len == sizeof ds4 - 1 && memcmp(a.ptr, ds4, a.len) == 0;
}

expert_act expert_act_of_gguf(const gguf_file *f) {
    static const char oai[] = "gpt-oss", kimi[] = "kimi-k3";
    gguf_str a;
    if (!f || gguf_find_key(f, "general.architecture") < 0 || gguf_get_str(f, "general.architecture", &a) < 0)
        return EXPERT_ACT_SILU;
    if (a.len == sizeof kimi - 1 && memcmp(a.ptr, kimi, a.len) == 0) return EXPERT_ACT_SITU;
    return a.len == sizeof oai - 1 && memcmp(a.ptr, oai, a.len) == 0 ? EXPERT_ACT_SWIGLU_OAI : EXPERT_ACT_SILU;
}

/* "kimi-k3.activation.<suffix>", an F32 that must be present. */
static int s_situ_key(const gguf_file *f, const char *suffix, float *out) {
    char key[96];
    snprintf(key, sizeof key, "kimi-k3.activation.%s", suffix);
    if (gguf_find_key(f, key) < 0) return coli_fail(COLI_EFORMAT, "metadata '%s' missing (the situ activation)", key);
    return gguf_get_f32(f, key, out);
}

int expert_weights_act_of_gguf(const gguf_file *f, expert_weights *w) {
    const expert_act act = expert_act_of_gguf(f);
    int rc;
    expert_weights_set_act(w, act);
    if (act != EXPERT_ACT_SITU) return 0;
    if ((rc = s_situ_key(f, "situ_beta", &w->alpha)) < 0 || (rc = s_situ_key(f, "situ_linear_beta", &w->limit)) < 0)
        return rc;
    if (!(w->alpha > 0.0f) || !isfinite(w->alpha) || !isfinite(w->limit))
        return coli_fail(COLI_EFORMAT, "metadata 'kimi-k3.activation.situ_beta' = %g: expected a positive number",
                         (double)w->alpha);
    return 0;
}

void expert_weights_set_act(expert_weights *w, expert_act act) {
    w->act = act;
    w->alpha = act == EXPERT_ACT_SWIGLU_OAI ? EXPERT_OAI_ALPHA : 0.0f;
    w->limit = act == EXPERT_ACT_SWIGLU_OAI ? EXPERT_OAI_LIMIT : 0.0f;
}

int expert_weights_ds4_clamp(const gguf_file *f, const char *key, int layer, expert_weights *w) {
    char name[96];
    gguf_type et;
    uint64_t n;
    const void *data;
    float v = 0.0f;
    snprintf(name, sizeof name, "deepseek4.%s", key);
    const int64_t id = gguf_find_key(f, name);
    if (id >= 0 && gguf_kv_type(f, id) != GGUF_ARRAY) {
        if (gguf_get_f32(f, name, &v) < 0) return COLI_EFORMAT;
    } else if (id >= 0) {
        if (gguf_get_arr(f, name, &et, &n, &data) < 0) return COLI_EFORMAT;
        if (et != GGUF_FLOAT32 || n <= (uint64_t)layer)
            return coli_fail(COLI_EFORMAT, "metadata '%s': expected a FLOAT32 array with an entry for block %d", name,
                             layer);
        memcpy(&v, (const char *)data + 4 * (size_t)layer, sizeof v);
    }
    if (!(v >= 0.0f) || !isfinite(v))
        return coli_fail(COLI_EFORMAT, "metadata '%s': block %d: limit %g, expected >= 0", name, layer, (double)v);
    expert_weights_set_act(w, v > 1e-6f ? EXPERT_ACT_SWIGLU_CLAMP : EXPERT_ACT_SILU);
    w->limit = v > 1e-6f ? v : 0.0f;
    return 0;
}

/* Expert e's row of the optional bias blk.<layer>.ffn_<part>_exps.bias,
 * (n, n_expert) F32; NULL when absent. */
static int s_exps_bias(const gguf_file *f, int layer, const char *part, int64_t n, int64_t n_expert, int expert,
                       const float **out) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.bias", layer, part);
    const coli_tensor *t = gguf_find_tensor(f, name);
    *out = NULL;
    if (!t) return 0;
    if (t->type != COLI_F32 || t->n_dims != 2 || t->ne[0] != n || t->ne[1] != n_expert)
        return coli_fail(COLI_EFORMAT, "tensor '%s': %s {%lld, %lld}, expected F32 {%lld, %lld}", name,
                         coli_dtype_name(t->type), (long long)t->ne[0], (long long)(t->n_dims > 1 ? t->ne[1] : 1),
                         (long long)n, (long long)n_expert);
    *out = (const float *)t->data + (size_t)expert * (size_t)n;
    return 0;
}

int expert_weights_from_gguf(const gguf_file *f, int layer, int expert, expert_weights *out) {
    const coli_tensor *g, *u, *d;
    int rc;
    if (!f || !out) return coli_fail(COLI_EINVAL, "expert weights: NULL file or output");
    if (layer < 0) return coli_fail(COLI_EINVAL, "expert weights: layer %d < 0", layer);
    if ((rc = s_find_exps(f, layer, "gate", &g)) || (rc = s_find_exps(f, layer, "up", &u)) ||
        (rc = s_find_exps(f, layer, "down", &d)))
        return rc;
    const int64_t n_embd = g->ne[0], n_ff = g->ne[1], n_expert = g->ne[2];
    if (u->ne[0] != n_embd || u->ne[1] != n_ff || u->ne[2] != n_expert)
        return coli_fail(COLI_EFORMAT,
                         "tensor '%s': shape {%lld, %lld, %lld} differs from gate's "
                         "{%lld, %lld, %lld}",
                         u->name, (long long)u->ne[0], (long long)u->ne[1], (long long)u->ne[2], (long long)n_embd,
                         (long long)n_ff, (long long)n_expert);
    if (d->ne[0] != n_ff || d->ne[1] != n_embd || d->ne[2] != n_expert)
        return coli_fail(COLI_EFORMAT,
                         "tensor '%s': shape {%lld, %lld, %lld}, expected "
                         "{n_ff %lld, n_embd %lld, n_expert %lld}",
                         d->name, (long long)d->ne[0], (long long)d->ne[1], (long long)d->ne[2], (long long)n_ff,
                         (long long)n_embd, (long long)n_expert);
    if (expert < 0 || expert >= n_expert)
        return coli_fail(COLI_ERANGE, "tensor '%s': expert %d out of range [0, %lld)", g->name, expert,
                         (long long)n_expert);
    memset(out, 0, sizeof *out);
    if ((rc = s_exps_bias(f, layer, "gate", n_ff, n_expert, expert, &out->gate_bias)) ||
        (rc = s_exps_bias(f, layer, "up", n_ff, n_expert, expert, &out->up_bias)) ||
        (rc = s_exps_bias(f, layer, "down", n_embd, n_expert, expert, &out->down_bias)))
        return rc;
    out->gate = s_expert_slice(g, expert);
    out->up = s_expert_slice(u, expert);
    out->down = s_expert_slice(d, expert);
    out->gate_type = g->type;
    out->up_type = u->type;
    out->down_type = d->type;
    out->n_embd = n_embd;
    out->n_ff = n_ff;
    if (s_is_ds4(f)) return expert_weights_ds4_clamp(f, "swiglu_clamp_exp", layer, out);
    return expert_weights_act_of_gguf(f, out);
}

// ----------------------------------------------------------------------------
// the FFN

/* g[i] = silu(g[i]) * u[i], silu(x) = x / (1 + e^-x), in F32 */
static void s_swiglu(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* g, u += the gate and up biases over flat hidden values k0..k1 of rows of
 * n_ff (ggml adds them to the matmul outputs, before the activation). */
static void s_add_gu_bias(const expert_weights *w, float *g, float *u, int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; k++) {
        if (w->gate_bias) g[k] += w->gate_bias[k % w->n_ff];
        if (w->up_bias) u[k] += w->up_bias[k % w->n_ff];
    }
}

/* gpt-oss over flat hidden values k0..k1: ggml_swiglu_oai's float
 * operations in its order. */
static void s_swiglu_oai(const expert_weights *w, float *g, const float *u, int64_t k0, int64_t k1) {
    const float alpha = w->alpha, limit = w->limit;
    for (int64_t k = k0; k < k1; k++) {
        const float gk = g[k], uk = u[k];
        const float x = gk < limit ? gk : limit;
        const float y = uk < -limit ? -limit : (uk > limit ? limit : uk);
        g[k] = x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
    }
}

/* deepseek4 (ggml_swiglu_clamp): g = min(g, limit), u = clamp(u, ±limit),
 * g / (1 + exp(-g)) * u in place over [k0, k1). */
static void s_swiglu_clamp(float limit, float *g, const float *u, int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; k++) {
        const float x = g[k] < limit ? g[k] : limit;
        const float y = u[k] < -limit ? -limit : (u[k] > limit ? limit : u[k]);
        g[k] = x / (1.0f + expf(-x)) * y;
    }
}

/* kimi-k3 over flat hidden values k0..k1: llama.cpp's situ as ggml's ops
 * (scale, tanh, scale; times sigmoid; the up branch likewise). */
static void s_situ(const expert_weights *w, float *g, const float *u, int64_t k0, int64_t k1) {
    const float beta = w->alpha, lin = w->limit, ib = 1.0f / beta, il = lin > 0.0f ? 1.0f / lin : 0.0f;
    for (int64_t k = k0; k < k1; k++) {
        const float gk = g[k], a = tanhf(gk * ib) * beta * (1.0f / (1.0f + expf(-gk)));
        g[k] = a * (lin > 0.0f ? tanhf(u[k] * il) * lin : u[k]);
    }
}

/* Hidden values below which the activation runs on the calling thread
 * (decode): waking the pool costs more than a few thousand expf. */
#define SWIGLU_MIN_PARALLEL (1 << 16)

typedef struct swiglu_job {
    const expert_weights *w[EXPERT_FFN_MANY_MAX];
    float *g[EXPERT_FFN_MANY_MAX];
    float *u[EXPERT_FFN_MANY_MAX];
    int64_t n[EXPERT_FFN_MANY_MAX];
    int count;
} swiglu_job;

/* Thread ith takes the ith of nth slices of every expert's hidden values
 * (elementwise, so the split does not change any result). */
static void s_swiglu_worker(void *arg, int ith, int nth) {
    const swiglu_job *j = arg;
    for (int e = 0; e < j->count; e++) {
        const int64_t a = j->n[e] * ith / nth, b = j->n[e] * (ith + 1) / nth;
        if (j->w[e]->gate_bias || j->w[e]->up_bias) s_add_gu_bias(j->w[e], j->g[e], j->u[e], a, b);
        if (j->w[e]->act == EXPERT_ACT_SWIGLU_OAI)
            s_swiglu_oai(j->w[e], j->g[e], j->u[e], a, b);
        else if (j->w[e]->act == EXPERT_ACT_SWIGLU_CLAMP)
            s_swiglu_clamp(j->w[e]->limit, j->g[e], j->u[e], a, b);
        else if (j->w[e]->act == EXPERT_ACT_SITU)
            s_situ(j->w[e], j->g[e], j->u[e], a, b);
        else
            s_swiglu(j->g[e] + a, j->u[e] + a, b - a);
    }
}

/* out += down_bias per row, after the down matmul (ggml_add_id). */
static void s_add_down_bias(const expert_ffn_task *t) {
    const float *b = t->w->down_bias;
    if (!b) return;
    for (int64_t r = 0; r < t->n_rows; r++)
        for (int64_t i = 0; i < t->w->n_embd; i++) t->out[r * t->w->n_embd + i] += b[i];
}

static int s_check_task(const expert_ffn_task *t, int i) {
    const expert_weights *w = t->w;
    if (!w || t->n_rows < 0 || (t->n_rows > 0 && (!t->x || !t->out)))
        return coli_fail(COLI_EINVAL, "expert ffn: task %d: NULL weights/input/output or negative rows", i);
    if (t->n_rows == 0) return 0;
    if (w->n_embd <= 0 || w->n_ff <= 0)
        return coli_fail(COLI_EINVAL, "expert ffn: task %d: bad shape n_embd %lld, n_ff %lld", i, (long long)w->n_embd,
                         (long long)w->n_ff);
    if (w->act != EXPERT_ACT_SILU && w->act != EXPERT_ACT_SWIGLU_OAI && w->act != EXPERT_ACT_SITU &&
        w->act != EXPERT_ACT_SWIGLU_CLAMP)
        return coli_fail(COLI_EINVAL, "expert ffn: task %d: unknown activation %d", i, (int)w->act);
    return 0;
}

static size_t s_align64(size_t v) { return (v + 63) & ~(size_t)63; }

static size_t s_hidden_bytes(const expert_ffn_task *t) {
    return s_align64((size_t)t->n_rows * (size_t)t->w->n_ff * sizeof(float));
}

/* The matmul ops of n tasks: gu = gate and up of each (2n ops), down = the
 * down of each, reading the hidden g that hid[i] points at. */
static void s_ffn_ops(const expert_ffn_task *tasks, int n, float *const *hid, coli_matmul_op *gu,
                      coli_matmul_op *down) {
    for (int i = 0; i < n; i++) {
        const expert_weights *w = tasks[i].w;
        const int64_t r = tasks[i].n_rows;
        float *g = hid ? hid[i] : NULL;
        float *u = hid ? (float *)((uint8_t *)g + s_hidden_bytes(&tasks[i])) : NULL;
        gu[2 * i] = (coli_matmul_op){w->gate, w->gate_type, w->n_embd, w->n_ff, tasks[i].x, r, g};
        gu[2 * i + 1] = (coli_matmul_op){w->up, w->up_type, w->n_embd, w->n_ff, tasks[i].x, r, u};
        down[i] = (coli_matmul_op){w->down, w->down_type, w->n_ff, w->n_embd, g, r, tasks[i].out};
    }
}

/* One scratch holds everything, reused across calls (no malloc in steady
 * state): [g_0 | u_0 | g_1 | u_1 | ... | the matmuls' input area]. The
 * matmuls get a view of the tail sized for the larger of the two steps, so
 * they never reallocate it. n <= EXPERT_FFN_MANY_MAX checked tasks. */
static int s_ffn_group(coli_pool *pool, coli_scratch *s, const expert_ffn_task *tasks, int n) {
    coli_matmul_op gu[2 * EXPERT_FFN_MANY_MAX], down[EXPERT_FFN_MANY_MAX];
    float *hid[EXPERT_FFN_MANY_MAX];
    swiglu_job sj = {.count = n};
    size_t hidden = 0, down_in = 0;
    int64_t n_hidden = 0;
    for (int i = 0; i < n; i++) {
        hidden += 2 * s_hidden_bytes(&tasks[i]);
        down_in += s_align64(coli_matmul_scratch_bytes(tasks[i].w->down_type, tasks[i].w->n_ff, tasks[i].n_rows));
        n_hidden += tasks[i].n_rows * tasks[i].w->n_ff;
    }
    s_ffn_ops(tasks, n, NULL, gu, down);
    size_t gu_in = coli_matmul_many_scratch_bytes(gu, 2 * n);
    size_t mm_bytes = gu_in > down_in ? gu_in : down_in;
    uint8_t *base = coli_scratch_reserve(s, hidden + mm_bytes);
    if (!base) return coli_fail(COLI_ENOMEM, "no memory for %lld hidden values", (long long)n_hidden);
    for (int i = 0; i < n; i++) {
        hid[i] = (float *)base;
        base += 2 * s_hidden_bytes(&tasks[i]);
    }
    s_ffn_ops(tasks, n, hid, gu, down);
    coli_scratch mm = {base, mm_bytes};
    int rc = coli_matmul_many(pool, &mm, gu, 2 * n);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        sj.w[i] = tasks[i].w;
        sj.g[i] = gu[2 * i].y;
        sj.u[i] = gu[2 * i + 1].y;
        sj.n[i] = tasks[i].n_rows * tasks[i].w->n_ff;
    }
    if (n_hidden < SWIGLU_MIN_PARALLEL)
        s_swiglu_worker(&sj, 0, 1);
    else
        coli_pool_run(pool, s_swiglu_worker, &sj);
    if ((rc = coli_matmul_many(pool, &mm, down, n))) return rc;
    for (int i = 0; i < n; i++) s_add_down_bias(&tasks[i]);
    return 0;
}

int expert_ffn_many(coli_pool *pool, coli_scratch *scratch, const expert_ffn_task *tasks, int n) {
    if (n < 0 || (n > 0 && !tasks))
        return coli_fail(COLI_EINVAL, "expert ffn: %d tasks%s", n, tasks ? "" : " (NULL list)");
    for (int i = 0; i < n; i++) {
        int rc = s_check_task(&tasks[i], i);
        if (rc) return rc;
    }
    coli_scratch local = {0};
    coli_scratch *s = scratch ? scratch : &local;
    int rc = 0;
    for (int g = 0; g < n && rc == 0;) {
        expert_ffn_task part[EXPERT_FFN_MANY_MAX];
        int k = 0;
        for (; g < n && k < EXPERT_FFN_MANY_MAX; g++)
            if (tasks[g].n_rows > 0) part[k++] = tasks[g];
        if (k) rc = s_ffn_group(pool, s, part, k);
    }
    if (s == &local) coli_scratch_free(&local);
    return rc ? coli_fail_prefix(rc, "expert ffn") : 0;
}

int expert_ffn(coli_pool *pool, coli_scratch *scratch, const expert_weights *w, const float *x, int64_t n_rows,
               float *out) {
    if (!w || n_rows < 0 || (n_rows > 0 && (!x || !out)))
        return coli_fail(COLI_EINVAL, "expert ffn: NULL weights/input/output or negative rows");
    if (n_rows == 0) return 0;
    const expert_ffn_task t = {w, x, out, n_rows};
    return expert_ffn_many(pool, scratch, &t, 1);
}
