/*
 * expert_ffn.c - one gated FFN expert; see expert_ffn.h.
 */
#include "expert_ffn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

size_t expert_weights_bytes(const expert_weights *w) {
    return coli_row_bytes(w->gate_type, w->n_embd) * (size_t)w->n_ff +
           coli_row_bytes(w->up_type, w->n_embd) * (size_t)w->n_ff +
           coli_row_bytes(w->down_type, w->n_ff) * (size_t)w->n_embd;
}

/* ---- slicing a 3-D expert tensor --------------------------------------- */

/* The tensor blk.<layer>.ffn_<part>_exps.weight, checked to be a 3-D
 * expert stack of a type the kernels compute. */
static int find_exps(const gguf_file *f, int layer, const char *part, const coli_tensor **out) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.weight", layer, part);
    const coli_tensor *t = gguf_find_tensor(f, name);
    if (!t) return coli_fail(COLI_EFORMAT, "tensor '%s': missing", name);
    if (t->n_dims != 3)
        return coli_fail(COLI_EFORMAT, "tensor '%s': %d dims, expected 3 (n_in, n_out, n_expert)",
                         name, t->n_dims);
    if (!coli_dtype_valid((uint32_t)t->type))
        return coli_fail(COLI_EUNSUPPORTED, "tensor '%s': type %s not supported", name,
                         coli_dtype_name((uint32_t)t->type));
    if (t->ne[0] % coli_dtype_block_elems(t->type) != 0)
        return coli_fail(COLI_EFORMAT, "tensor '%s': row of %lld not a multiple of %lld for %s",
                         name, (long long)t->ne[0], (long long)coli_dtype_block_elems(t->type),
                         coli_dtype_name(t->type));
    *out = t;
    return 0;
}

/* Pointer to expert e's (rows, row_len) matrix inside t. */
static const void *expert_slice(const coli_tensor *t, int expert) {
    size_t bytes = coli_row_bytes(t->type, t->ne[0]) * (size_t)t->ne[1];
    return (const uint8_t *)t->data + (size_t)expert * bytes;
}

int expert_weights_from_gguf(const gguf_file *f, int layer, int expert, expert_weights *out) {
    const coli_tensor *g, *u, *d;
    int rc;
    if (!f || !out) return coli_fail(COLI_EINVAL, "expert weights: NULL file or output");
    if (layer < 0) return coli_fail(COLI_EINVAL, "expert weights: layer %d < 0", layer);
    if ((rc = find_exps(f, layer, "gate", &g)) || (rc = find_exps(f, layer, "up", &u)) ||
        (rc = find_exps(f, layer, "down", &d)))
        return rc;
    const int64_t n_embd = g->ne[0], n_ff = g->ne[1], n_expert = g->ne[2];
    if (u->ne[0] != n_embd || u->ne[1] != n_ff || u->ne[2] != n_expert)
        return coli_fail(COLI_EFORMAT, "tensor '%s': shape {%lld, %lld, %lld} differs from gate's "
                         "{%lld, %lld, %lld}", u->name, (long long)u->ne[0], (long long)u->ne[1],
                         (long long)u->ne[2], (long long)n_embd, (long long)n_ff, (long long)n_expert);
    if (d->ne[0] != n_ff || d->ne[1] != n_embd || d->ne[2] != n_expert)
        return coli_fail(COLI_EFORMAT, "tensor '%s': shape {%lld, %lld, %lld}, expected "
                         "{n_ff %lld, n_embd %lld, n_expert %lld}", d->name, (long long)d->ne[0],
                         (long long)d->ne[1], (long long)d->ne[2], (long long)n_ff,
                         (long long)n_embd, (long long)n_expert);
    if (expert < 0 || expert >= n_expert)
        return coli_fail(COLI_ERANGE, "tensor '%s': expert %d out of range [0, %lld)",
                         g->name, expert, (long long)n_expert);
    memset(out, 0, sizeof *out);
    out->gate = expert_slice(g, expert);
    out->up = expert_slice(u, expert);
    out->down = expert_slice(d, expert);
    out->gate_type = g->type;
    out->up_type = u->type;
    out->down_type = d->type;
    out->n_embd = n_embd;
    out->n_ff = n_ff;
    return 0;
}

/* ---- the FFN ------------------------------------------------------------ */

/* g[i] = silu(g[i]) * u[i], silu(x) = x / (1 + e^-x), in F32 */
static void swiglu(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* One scratch holds everything, reused across calls (no malloc in steady
 * state): [g (n_rows, n_ff) | u (n_rows, n_ff) | the matmuls' input area].
 * The matmuls get a view of the tail sized for the largest of the three,
 * so they never reallocate it. */
int expert_ffn(coli_pool *pool, coli_scratch *scratch, const expert_weights *w,
               const float *x, int64_t n_rows, float *out) {
    if (!w || n_rows < 0 || (n_rows > 0 && (!x || !out)))
        return coli_fail(COLI_EINVAL, "expert ffn: NULL weights/input/output or negative rows");
    if (n_rows == 0) return 0;
    if (w->n_embd <= 0 || w->n_ff <= 0)
        return coli_fail(COLI_EINVAL, "expert ffn: bad shape n_embd %lld, n_ff %lld",
                         (long long)w->n_embd, (long long)w->n_ff);
    const size_t n_hidden = (size_t)n_rows * (size_t)w->n_ff;
    const size_t hidden_bytes = (2 * n_hidden * sizeof(float) + 63) & ~(size_t)63;
    const size_t mm_bytes = max_size(
        max_size(coli_matmul_scratch_bytes(w->gate_type, w->n_embd, n_rows),
                 coli_matmul_scratch_bytes(w->up_type, w->n_embd, n_rows)),
        coli_matmul_scratch_bytes(w->down_type, w->n_ff, n_rows));
    coli_scratch local = {0};
    coli_scratch *s = scratch ? scratch : &local;
    uint8_t *base = coli_scratch_reserve(s, hidden_bytes + mm_bytes);
    if (!base)
        return coli_fail(COLI_ENOMEM, "expert ffn: no memory for %lld rows x %lld hidden",
                         (long long)n_rows, (long long)w->n_ff);
    float *g = (float *)base, *u = g + n_hidden;
    coli_scratch mm = {base + hidden_bytes, mm_bytes};
    int rc;
    if ((rc = coli_matmul(pool, &mm, w->gate, w->gate_type, w->n_embd, w->n_ff, x, n_rows, g)) ||
        (rc = coli_matmul(pool, &mm, w->up, w->up_type, w->n_embd, w->n_ff, x, n_rows, u)))
        goto done;
    swiglu(g, u, (int64_t)n_hidden);
    rc = coli_matmul(pool, &mm, w->down, w->down_type, w->n_ff, w->n_embd, g, n_rows, out);
done:
    if (s == &local) coli_scratch_free(&local);
    return rc ? coli_fail_prefix(rc, "expert ffn") : 0;
}
