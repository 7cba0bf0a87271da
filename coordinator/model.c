/*
 * model.c - read hyper-parameters from GGUF metadata and validate every
 * tensor the forward pass will touch; see model.h.
 */
#include "coordinator/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

/* Weight types the matmul kernels take; norms and biases must be F32. */
#define MASK_F32    (1u << COLI_F32)
#define MASK_MATRIX coli_dtype_weight_mask()

/* Sane upper bounds; a file past them is hostile or not a model we run. */
#define MAX_LAYERS  4096
#define MAX_EXPERTS 4096
#define MAX_WIDTH   (1 << 20)

// ---------------------------------------------------------------------------
// metadata

/* "<arch>.<suffix>" into buf. */
static const char *s_key(const model_hparams *hp, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", hp->arch_name, suffix);
    return buf;
}

/* A positive integer key that must be present and at most max. */
static int s_req_int(const gguf_file *f, const model_hparams *hp, const char *suffix,
                     int64_t max, int64_t *out) {
    char key[128];
    s_key(hp, suffix, key, sizeof key);
    int rc = gguf_get_i64(f, key, out);
    if (rc < 0) return rc;
    if (*out <= 0 || *out > max)
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %lld: expected 1..%lld",
                         key, (long long)*out, (long long)max);
    return 0;
}

/* An optional integer key: def when absent. */
static int s_opt_int(const gguf_file *f, const model_hparams *hp, const char *suffix,
                     int64_t def, int64_t max, int64_t *out) {
    char key[128];
    if (gguf_find_key(f, s_key(hp, suffix, key, sizeof key)) < 0) { *out = def; return 0; }
    int rc = gguf_get_i64(f, key, out);
    if (rc < 0) return rc;
    if (*out < 0 || *out > max)
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %lld: expected 0..%lld",
                         key, (long long)*out, (long long)max);
    return 0;
}

static int s_read_arch(const gguf_file *f, model_hparams *hp) {
    gguf_str s;
    int rc = gguf_get_str(f, "general.architecture", &s);
    if (rc < 0) return rc;
    static const struct { const char *name; model_arch arch; } known[] = {
        {"llama", ARCH_LLAMA}, {"olmoe", ARCH_OLMOE}, {"qwen2moe", ARCH_QWEN2MOE},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (s.len == strlen(known[i].name) && memcmp(s.ptr, known[i].name, s.len) == 0) {
            hp->arch = known[i].arch;
            snprintf(hp->arch_name, sizeof hp->arch_name, "%s", known[i].name);
            return 0;
        }
    }
    return coli_fail(COLI_EUNSUPPORTED,
                     "general.architecture '%.*s': unknown architecture (supported: llama, olmoe, qwen2moe)",
                     (int)(s.len > 64 ? 64 : s.len), s.ptr);
}

/* Rope variants other than plain theta scaling would change the math. */
static int s_check_rope_scaling(const gguf_file *f, const model_hparams *hp) {
    char key[128];
    gguf_str s;
    if (gguf_find_key(f, s_key(hp, "rope.scaling.type", key, sizeof key)) < 0) return 0;
    if (gguf_get_str(f, key, &s) < 0) return COLI_EFORMAT;
    if (s.len == 4 && memcmp(s.ptr, "none", 4) == 0) return 0;
    return coli_fail(COLI_EUNSUPPORTED, "metadata '%s' = '%.*s': rope scaling is not supported",
                     key, (int)(s.len > 32 ? 32 : s.len), s.ptr);
}

static int s_read_attention(const gguf_file *f, model_hparams *hp) {
    int64_t v;
    int rc;
    char key[128];
    if ((rc = s_req_int(f, hp, "attention.head_count", MAX_WIDTH, &v)) < 0) return rc;
    hp->n_head = (int)v;
    if ((rc = s_opt_int(f, hp, "attention.head_count_kv", hp->n_head, MAX_WIDTH, &v)) < 0) return rc;
    hp->n_head_kv = (int)v;
    if (hp->n_embd % hp->n_head != 0)
        return coli_fail(COLI_EFORMAT, "%s: head_count %d does not divide embedding_length %d",
                         hp->arch_name, hp->n_head, hp->n_embd);
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0)
        return coli_fail(COLI_EFORMAT, "%s: head_count_kv %d does not divide head_count %d",
                         hp->arch_name, hp->n_head_kv, hp->n_head);
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((rc = s_opt_int(f, hp, "attention.key_length", hp->head_dim, MAX_WIDTH, &v)) < 0) return rc;
    if (v != hp->head_dim)
        return coli_fail(COLI_EUNSUPPORTED, "metadata '%s' = %lld: only n_embd/n_head = %d is supported",
                         s_key(hp, "attention.key_length", key, sizeof key), (long long)v, hp->head_dim);
    if ((rc = s_opt_int(f, hp, "attention.value_length", hp->head_dim, MAX_WIDTH, &v)) < 0) return rc;
    if (v != hp->head_dim)
        return coli_fail(COLI_EUNSUPPORTED, "metadata '%s' = %lld: only n_embd/n_head = %d is supported",
                         s_key(hp, "attention.value_length", key, sizeof key), (long long)v, hp->head_dim);
    if ((rc = gguf_get_f32(f, s_key(hp, "attention.layer_norm_rms_epsilon", key, sizeof key),
                           &hp->rms_eps)) < 0) return rc;
    if (!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f))
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %g: expected a small positive number",
                         key, (double)hp->rms_eps);
    return 0;
}

static int s_read_rope(const gguf_file *f, model_hparams *hp) {
    char key[128];
    int64_t v;
    int rc;
    hp->rope_base = 10000.0f;
    if (gguf_find_key(f, s_key(hp, "rope.freq_base", key, sizeof key)) >= 0 &&
        (rc = gguf_get_f32(f, key, &hp->rope_base)) < 0) return rc;
    if (!(hp->rope_base > 0.0f))
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %g: expected > 0", key, (double)hp->rope_base);
    if ((rc = s_opt_int(f, hp, "rope.dimension_count", hp->head_dim, MAX_WIDTH, &v)) < 0) return rc;
    if (v <= 0 || v > hp->head_dim || v % 2 != 0)
        return coli_fail(COLI_EFORMAT, "metadata '%s' = %lld: expected an even number in 2..%d",
                         s_key(hp, "rope.dimension_count", key, sizeof key), (long long)v, hp->head_dim);
    hp->n_rot = (int)v;
    hp->rope_neox = hp->arch != ARCH_LLAMA;
    return s_check_rope_scaling(f, hp);
}

static int s_read_ffn(const gguf_file *f, model_hparams *hp) {
    int64_t n_ff, v;
    int rc;
    if ((rc = s_opt_int(f, hp, "expert_count", 0, MAX_EXPERTS, &v)) < 0) return rc;
    hp->n_expert = (int)v;
    if ((rc = s_opt_int(f, hp, "expert_used_count", 0, MAX_EXPERTS, &v)) < 0) return rc;
    hp->n_expert_used = (int)v;
    if (hp->n_expert == 0 && hp->arch != ARCH_LLAMA)
        return coli_fail(COLI_EFORMAT, "%s: metadata '%s.expert_count' missing or 0 (a MoE architecture)",
                         hp->arch_name, hp->arch_name);
    if (hp->n_expert > 0 && (hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert))
        return coli_fail(COLI_EFORMAT, "%s: expert_used_count %d: expected 1..expert_count %d",
                         hp->arch_name, hp->n_expert_used, hp->n_expert);
    if (hp->n_expert == 0 && hp->n_expert_used != 0)
        return coli_fail(COLI_EFORMAT, "%s: expert_used_count %d without experts",
                         hp->arch_name, hp->n_expert_used);
    if ((rc = s_req_int(f, hp, "feed_forward_length", MAX_WIDTH, &n_ff)) < 0) return rc;
    if (hp->n_expert == 0) { hp->n_ff = n_ff; return 0; }
    if ((rc = s_opt_int(f, hp, "expert_feed_forward_length", n_ff, MAX_WIDTH, &hp->n_ff_exp)) < 0)
        return rc;
    if (hp->arch == ARCH_QWEN2MOE &&
        (rc = s_opt_int(f, hp, "expert_shared_feed_forward_length", hp->n_ff_exp, MAX_WIDTH,
                        &hp->n_ff_shexp)) < 0) return rc;
    hp->renorm_topk = hp->arch == ARCH_LLAMA;
    return 0;
}

static int s_read_hparams(const gguf_file *f, model_hparams *hp) {
    int64_t v;
    int rc;
    memset(hp, 0, sizeof *hp);
    if ((rc = s_read_arch(f, hp)) < 0) return rc;
    if ((rc = s_req_int(f, hp, "block_count", MAX_LAYERS, &v)) < 0) return rc;
    hp->n_layer = (int)v;
    if ((rc = s_req_int(f, hp, "embedding_length", MAX_WIDTH, &v)) < 0) return rc;
    hp->n_embd = (int)v;
    if ((rc = s_req_int(f, hp, "context_length", 1 << 24, &v)) < 0) return rc;
    hp->n_ctx_train = (int)v;
    if ((rc = s_read_attention(f, hp)) < 0) return rc;
    if ((rc = s_read_rope(f, hp)) < 0) return rc;
    return s_read_ffn(f, hp);
}

// ---------------------------------------------------------------------------
// tensors

/* Find name and check its dims (ne[i] for i < n_dims) and type. optional:
 * a missing tensor gives *out = NULL instead of an error. */
static int s_tensor(const gguf_file *f, const char *name, int n_dims, const int64_t *ne,
                    uint32_t type_mask, int optional, const coli_tensor **out) {
    const coli_tensor *t = gguf_find_tensor(f, name);
    *out = NULL;
    if (!t) {
        if (optional) return 0;
        return coli_fail(COLI_EFORMAT, "missing required tensor '%s'", name);
    }
    int same = t->n_dims == n_dims;
    for (int i = 0; same && i < n_dims; i++) same = t->ne[i] == ne[i];
    if (!same) {
        char want[96], got[96];
        int a = 0, b = 0;
        for (int i = 0; i < n_dims; i++)
            a += snprintf(want + a, sizeof want - (size_t)a, "%s%lld", i ? ", " : "", (long long)ne[i]);
        for (int i = 0; i < t->n_dims; i++)
            b += snprintf(got + b, sizeof got - (size_t)b, "%s%lld", i ? ", " : "", (long long)t->ne[i]);
        return coli_fail(COLI_EFORMAT, "tensor '%s': shape [%s] disagrees with the metadata, expected [%s]",
                         name, got, want);
    }
    if (!(type_mask & (1u << t->type)))
        return coli_fail(COLI_EUNSUPPORTED, "tensor '%s': dtype %s is not supported here%s",
                         name, coli_dtype_name(t->type), type_mask == MASK_F32 ? " (expected F32)" : "");
    *out = t;
    return 0;
}

/* blk.<il>.<suffix> with the expected shape. */
static int s_blk(const gguf_file *f, int il, const char *suffix, int n_dims,
                 int64_t ne0, int64_t ne1, int64_t ne2, uint32_t mask, int optional,
                 const coli_tensor **out) {
    char name[128];
    const int64_t ne[3] = {ne0, ne1, ne2};
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    return s_tensor(f, name, n_dims, ne, mask, optional, out);
}

static void s_ffn_view(const coli_tensor *g, const coli_tensor *u, const coli_tensor *d,
                       int64_t n_embd, int64_t n_ff, expert_weights *out) {
    out->gate = g->data;  out->gate_type = g->type;
    out->up = u->data;    out->up_type = u->type;
    out->down = d->data;  out->down_type = d->type;
    out->n_embd = n_embd; out->n_ff = n_ff;
}

static int s_load_attention(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, Q = model_q_dim(hp), KV = model_kv_dim(hp);
    int rc, bias = hp->arch == ARCH_QWEN2MOE, qk_norm = hp->arch == ARCH_OLMOE;
    if ((rc = s_blk(f, il, "attn_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->attn_norm)) < 0) return rc;
    if ((rc = s_blk(f, il, "attn_q.weight", 2, E, Q, 1, MASK_MATRIX, 0, &l->wq)) < 0) return rc;
    if ((rc = s_blk(f, il, "attn_k.weight", 2, E, KV, 1, MASK_MATRIX, 0, &l->wk)) < 0) return rc;
    if ((rc = s_blk(f, il, "attn_v.weight", 2, E, KV, 1, MASK_MATRIX, 0, &l->wv)) < 0) return rc;
    if ((rc = s_blk(f, il, "attn_output.weight", 2, Q, E, 1, MASK_MATRIX, 0, &l->wo)) < 0) return rc;
    if (bias) {
        if ((rc = s_blk(f, il, "attn_q.bias", 1, Q, 1, 1, MASK_F32, 0, &l->bq)) < 0) return rc;
        if ((rc = s_blk(f, il, "attn_k.bias", 1, KV, 1, 1, MASK_F32, 0, &l->bk)) < 0) return rc;
        if ((rc = s_blk(f, il, "attn_v.bias", 1, KV, 1, 1, MASK_F32, 0, &l->bv)) < 0) return rc;
    }
    if (qk_norm) {
        if ((rc = s_blk(f, il, "attn_q_norm.weight", 1, Q, 1, 1, MASK_F32, 0, &l->q_norm)) < 0) return rc;
        if ((rc = s_blk(f, il, "attn_k_norm.weight", 1, KV, 1, 1, MASK_F32, 0, &l->k_norm)) < 0) return rc;
    }
    return 0;
}

static int s_load_moe(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, F = hp->n_ff_exp, X = hp->n_expert;
    const coli_tensor *g, *u, *d;
    int rc;
    if ((rc = s_blk(f, il, "ffn_gate_inp.weight", 2, E, X, 1, MASK_MATRIX, 0, &l->router)) < 0) return rc;
    if ((rc = s_blk(f, il, "ffn_gate_exps.weight", 3, E, F, X, MASK_MATRIX, 0, &g)) < 0) return rc;
    if ((rc = s_blk(f, il, "ffn_up_exps.weight", 3, E, F, X, MASK_MATRIX, 0, &u)) < 0) return rc;
    if ((rc = s_blk(f, il, "ffn_down_exps.weight", 3, F, E, X, MASK_MATRIX, 0, &d)) < 0) return rc;
    if (hp->arch != ARCH_QWEN2MOE) return 0;
    const int64_t S = hp->n_ff_shexp;
    if ((rc = s_blk(f, il, "ffn_gate_inp_shexp.weight", 1, E, 1, 1, MASK_F32, 0, &l->shexp_gate)) < 0)
        return rc;
    if ((rc = s_blk(f, il, "ffn_gate_shexp.weight", 2, E, S, 1, MASK_MATRIX, 0, &g)) < 0) return rc;
    if ((rc = s_blk(f, il, "ffn_up_shexp.weight", 2, E, S, 1, MASK_MATRIX, 0, &u)) < 0) return rc;
    if ((rc = s_blk(f, il, "ffn_down_shexp.weight", 2, S, E, 1, MASK_MATRIX, 0, &d)) < 0) return rc;
    s_ffn_view(g, u, d, E, S, &l->shexp);
    return 0;
}

static int s_load_layer(const gguf_file *f, const model_hparams *hp, int il, layer_weights *l) {
    const int64_t E = hp->n_embd, F = hp->n_ff;
    const coli_tensor *g, *u, *d;
    int rc;
    if ((rc = s_load_attention(f, hp, il, l)) < 0) return rc;
    if ((rc = s_blk(f, il, "ffn_norm.weight", 1, E, 1, 1, MASK_F32, 0, &l->ffn_norm)) < 0) return rc;
    if (hp->n_expert > 0) return s_load_moe(f, hp, il, l);
    if ((rc = s_blk(f, il, "ffn_gate.weight", 2, E, F, 1, MASK_MATRIX, 0, &g)) < 0) return rc;
    if ((rc = s_blk(f, il, "ffn_up.weight", 2, E, F, 1, MASK_MATRIX, 0, &u)) < 0) return rc;
    if ((rc = s_blk(f, il, "ffn_down.weight", 2, F, E, 1, MASK_MATRIX, 0, &d)) < 0) return rc;
    s_ffn_view(g, u, d, E, F, &l->dense);
    return 0;
}

/* token_embd fixes n_vocab; the vocabulary and <arch>.vocab_size must agree. */
static int s_load_globals(const gguf_file *f, model *m) {
    model_hparams *hp = &m->hp;
    const coli_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    int rc;
    if (!te) return coli_fail(COLI_EFORMAT, "missing required tensor 'token_embd.weight'");
    if (te->n_dims != 2 || te->ne[0] != hp->n_embd || te->ne[1] > INT32_MAX)
        return coli_fail(COLI_EFORMAT, "tensor 'token_embd.weight': %d-D shape [%lld, %lld, ...] disagrees "
                         "with the metadata, expected [%d, n_vocab]",
                         te->n_dims, (long long)te->ne[0], (long long)te->ne[1], hp->n_embd);
    hp->n_vocab = (int)te->ne[1];
    const int64_t ne_vocab[2] = {hp->n_embd, hp->n_vocab}, ne_norm[1] = {hp->n_embd};
    if ((rc = s_tensor(f, "token_embd.weight", 2, ne_vocab, MASK_MATRIX, 0, &m->tok_embd)) < 0) return rc;
    if ((rc = s_tensor(f, "output_norm.weight", 1, ne_norm, MASK_F32, 0, &m->output_norm)) < 0) return rc;
    if ((rc = s_tensor(f, "output.weight", 2, ne_vocab, MASK_MATRIX, 1, &m->output)) < 0) return rc;
    if (!m->output) m->output = m->tok_embd; /* tied embeddings */
    gguf_type et;
    uint64_t n_tokens;
    const void *unused;
    if (gguf_find_key(f, "tokenizer.ggml.tokens") >= 0 &&
        gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n_tokens, &unused) == 0 &&
        n_tokens != (uint64_t)hp->n_vocab)
        return coli_fail(COLI_EFORMAT, "tokenizer.ggml.tokens has %llu entries but token_embd.weight has %d rows",
                         (unsigned long long)n_tokens, hp->n_vocab);
    return 0;
}

int64_t model_q_dim(const model_hparams *hp) { return (int64_t)hp->n_head * hp->head_dim; }
int64_t model_kv_dim(const model_hparams *hp) { return (int64_t)hp->n_head_kv * hp->head_dim; }

int model_from_gguf(gguf_file *f, model **out) {
    int rc;
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) { gguf_close(&f); return coli_fail(COLI_ENOMEM, "model: out of memory"); }
    m->gguf = f;
    if ((rc = s_read_hparams(f, &m->hp)) < 0) goto fail;
    if ((rc = s_load_globals(f, m)) < 0) goto fail;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) { rc = coli_fail(COLI_ENOMEM, "model: out of memory for %d layers", m->hp.n_layer); goto fail; }
    for (int il = 0; il < m->hp.n_layer; il++)
        if ((rc = s_load_layer(f, &m->hp, il, &m->layers[il])) < 0) goto fail;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++)
        m->n_params += coli_tensor_nelems(gguf_tensor(f, i));
    *out = m;
    return 0;
fail:
    model_close(&m);
    return rc;
}

int model_open(const char *path, model **out) {
    gguf_file *f = NULL;
    *out = NULL;
    int rc = gguf_open(path, &f);
    if (rc < 0) return rc;
    rc = model_from_gguf(f, out);
    if (rc < 0) return coli_fail_prefix(rc, "%s", path);
    return 0;
}

void model_close(model **pm) {
    if (!pm || !*pm) return;
    model *m = *pm;
    gguf_close(&m->gguf);
    free(m->layers);
    free(m);
    *pm = NULL;
}
