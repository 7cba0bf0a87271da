/*
 * gen_model.c - writes small random GGUF models for the test suite.
 *
 *   gen_model --all DIR          the fixtures (`make fixtures`), see s_fixtures
 *   gen_model --arch llama|olmoe|qwen2moe [--dense] [--dim N] [--layers N]
 *             [--heads N] [--kv-heads N] [--experts N] [--top-k N] [--ffn N]
 *             [--vocab N] [--ctx N] [--seed S] [--dtype F32|F16|BF16|Q8_0|Q4_0] OUT.gguf
 *
 * Tensor names, shapes and metadata keys are those of
 * ../shared/reference/gen/make_models.py (llama.cpp-converted MoE models);
 * weights are scaled the same way (each matrix ~ N(0, gain^2/fan_in), gain 1,
 * attn_q/attn_k 1.5, router and output 2; token_embd ~ N(0,1); norms 1 +
 * 0.1 N(0,1); biases 0.1 N(0,1)) so that activations stay sane. The random
 * numbers come from our own PCG32 + Box-Muller, not numpy's, so the weights
 * differ from the reference models; the layout does not.
 *
 * The tokenizer is a small synthetic vocabulary (gen_model/gen_vocab.c):
 * SentencePiece style (scores, byte fallback) for llama/qwen2moe, GPT-2
 * byte-level BPE (merges) for olmoe.
 *
 * Output is deterministic: the same arguments give the same bytes. It is
 * streamed: each tensor's values are drawn (from the generator jumped to the
 * tensor's place in the stream) while the file is written, a slice of rows
 * at a time, so a model far larger than memory can be made; memory is the
 * vocabulary plus one slice.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "colibri.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "core/hash.h"
#include "core/quant/quant.h"
#include "core/tensor.h"
#include "tools/gen_model/gen_vocab.h"

// ----------------------------------------------------------------------------
// random numbers: PCG32 (O'Neill) + Box-Muller

typedef struct rng {
    uint64_t state, inc;
    int has_spare;
    double spare;
} rng;

static uint32_t s_rng_u32(rng *r) {
    uint64_t old = r->state;
    r->state = old * 6364136223846793005ULL + r->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((32 - rot) & 31));
}

static void s_rng_seed(rng *r, uint64_t seed) {
    r->state = 0;
    r->inc = (seed << 1u) | 1u;
    r->has_spare = 0;
    s_rng_u32(r);
    r->state += seed ^ 0x853c49e6748fea9bULL;
    s_rng_u32(r);
}

/* Uniform in (0, 1]: never 0, so log() below is finite. */
static double s_rng_uniform(rng *r) {
    uint64_t bits = ((uint64_t)s_rng_u32(r) << 32 | s_rng_u32(r)) >> 11;
    return (double)(bits + 1) * 0x1.0p-53;
}

static float s_rng_normal(rng *r) {
    if (r->has_spare) {
        r->has_spare = 0;
        return (float)r->spare;
    }
    double u1 = s_rng_uniform(r), u2 = s_rng_uniform(r);
    double mag = sqrt(-2.0 * log(u1));
    r->spare = mag * sin(2.0 * M_PI * u2);
    r->has_spare = 1;
    return (float)(mag * cos(2.0 * M_PI * u2));
}

// ----------------------------------------------------------------------------
// model configuration

typedef struct model_cfg {
    const char *arch; /* "llama", "olmoe", "qwen2moe" */
    const char *name; /* general.name */
    int dense;        /* llama only: ffn_{gate,up,down} instead of experts */
    int64_t n_embd, n_layer, n_head, n_head_kv;
    int64_t n_ff;       /* expert FFN length (dense: the FFN length) */
    int64_t n_ff_shexp; /* qwen2moe shared expert FFN length */
    int64_t n_expert, n_expert_used;
    int64_t n_vocab, n_ctx;
    float rope_theta, eps;
    uint64_t seed;
    coli_dtype dtype; /* storage type of the 2-D/3-D weights */
} model_cfg;

/* Defaults per architecture: tiny, fast, and shaped like the real families
 * (olmoe has n_head_kv = n_head; qwen2moe a shared expert twice as wide). */
static int s_cfg_defaults(model_cfg *c, const char *arch) {
    memset(c, 0, sizeof *c);
    c->n_embd = 64;
    c->n_layer = 2;
    c->n_head = 4;
    c->n_head_kv = 2;
    c->n_ff = 128;
    c->n_expert = 4;
    c->n_expert_used = 2;
    c->n_vocab = 1024;
    c->n_ctx = 256;
    c->rope_theta = 1e6f;
    c->eps = 1e-5f;
    c->seed = 1;
    c->dtype = COLI_F32;
    if (strcmp(arch, "llama") == 0) {
        c->arch = "llama";
    } else if (strcmp(arch, "olmoe") == 0) {
        c->arch = "olmoe";
        c->n_head_kv = 4;
        c->n_ff = 64;
        c->n_expert = 8;
        c->n_expert_used = 4;
        c->rope_theta = 1e4f;
        c->seed = 3;
    } else if (strcmp(arch, "qwen2moe") == 0) {
        c->arch = "qwen2moe";
        c->n_ff = 64;
        c->eps = 1e-6f;
        c->seed = 4;
    } else {
        return coli_fail(COLI_EINVAL, "--arch: unknown architecture '%s' (llama, olmoe, qwen2moe)", arch);
    }
    c->n_ff_shexp = 2 * c->n_ff;
    c->name = c->arch;
    return 0;
}

static int s_cfg_check(const model_cfg *c) {
    if (c->dense && strcmp(c->arch, "llama") != 0)
        return coli_fail(COLI_EINVAL, "--dense: only arch llama has a dense layout");
    if (c->n_embd % 32 || c->n_ff % 32 || c->n_ff_shexp % 32)
        return coli_fail(COLI_EINVAL, "--dim/--ffn: must be multiples of 32 (quantization blocks)");
    if (c->n_embd % c->n_head || (c->n_embd / c->n_head) % 2)
        return coli_fail(COLI_EINVAL, "--heads: dim %lld is not a multiple of 2*heads (%lld)", (long long)c->n_embd,
                         (long long)c->n_head);
    if (c->n_head % c->n_head_kv)
        return coli_fail(COLI_EINVAL, "--kv-heads: %lld does not divide heads %lld", (long long)c->n_head_kv,
                         (long long)c->n_head);
    if (strcmp(c->arch, "olmoe") == 0 && c->n_head_kv != c->n_head)
        return coli_fail(COLI_EINVAL, "--kv-heads: olmoe needs kv-heads = heads (%lld)", (long long)c->n_head);
    if (!c->dense && (c->n_expert_used < 1 || c->n_expert_used > c->n_expert))
        return coli_fail(COLI_EINVAL, "--top-k: %lld is not in 1..experts (%lld)", (long long)c->n_expert_used,
                         (long long)c->n_expert);
    if (c->n_vocab < 300 || c->n_vocab > 65536)
        return coli_fail(COLI_EINVAL, "--vocab: %lld is not in 300..65536", (long long)c->n_vocab);
    return 0;
}

// ----------------------------------------------------------------------------
// weights

/* One tensor, planned but not generated: its values are drawn only while the
 * file is written (s_fill_tensor), so memory stays one slice of rows. */
typedef struct gen_tensor {
    char name[64];
    int n_dims;
    int64_t ne[3];   /* GGML order: ne[0] innermost */
    char kind;       /* 'm' matrix, 'e' embedding, 'n' norm, 'b' bias */
    float scale;     /* standard deviation of the draws */
    int64_t first;   /* index of its first value in the stream of normals */
    coli_dtype type; /* stored type */
    size_t nbytes;
    const rng *base; /* the generator right after seeding */
} gen_tensor;

typedef struct gen_weights {
    gen_tensor *t;
    int n, cap;
    int64_t n_normals; /* normals drawn by the tensors planned so far */
    rng base;
} gen_weights;

/* The make_models.py rule: 2-D/3-D *.weight tensors take the file's type;
 * 1-D tensors, norms and routers (ffn_gate_inp) stay F32. */
static coli_dtype s_stored_type(const char *name, int n_dims, coli_dtype dtype) {
    size_t len = strlen(name);
    int is_weight = len >= 6 && strcmp(name + len - 6, "weight") == 0;
    if (!is_weight || n_dims < 2 || strstr(name, "_norm.weight") || strstr(name, "ffn_gate_inp.weight"))
        return COLI_F32;
    return dtype;
}

/* Advance the PCG32 state by delta steps in O(log delta) (Brown's LCG jump). */
static void s_rng_advance(rng *r, uint64_t delta) {
    uint64_t mult = 6364136223846793005ULL, plus = r->inc, acc_mult = 1, acc_plus = 0;
    for (; delta > 0; delta >>= 1) {
        if (delta & 1) {
            acc_mult *= mult;
            acc_plus = acc_plus * mult + plus;
        }
        plus = (mult + 1) * plus;
        mult *= mult;
    }
    r->state = acc_mult * r->state + acc_plus;
}

/* The generator positioned at normal number k of the stream: pair k/2 of
 * Box-Muller takes four u32 draws; an odd k starts on the pair's spare. */
static void s_rng_at(rng *r, const rng *base, int64_t k) {
    *r = *base;
    s_rng_advance(r, 4 * (uint64_t)(k / 2));
    if (k % 2) s_rng_normal(r);
}

/* kind: 'm' matrix (gain/sqrt(ne[0])), 'e' embedding N(0,1), 'n' norm, 'b' bias. */
static int s_gen_add(gen_weights *g, const char *name, char kind, float gain, int n_dims, int64_t ne0, int64_t ne1,
                     int64_t ne2) {
    if (g->n >= g->cap) return coli_fail(COLI_EINTERNAL, "gen_model: tensor table full at '%s'", name);
    gen_tensor *t = &g->t[g->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->kind = kind;
    t->scale = kind == 'm' ? gain / sqrtf((float)ne0) : kind == 'e' ? 1.0f : 0.1f;
    t->first = g->n_normals;
    t->base = &g->base;
    g->n_normals += ne0 * ne1 * ne2;
    return 0;
}

/* Rows per slice: about 1 M values (4 MiB), at least one row. */
#define FILL_VALUES (1 << 20)

/* gguf_tensor_fill: draw the tensor's values slice by slice, convert each
 * row to the stored type and write it. */
static int s_fill_tensor(void *ctx, FILE *fp) {
    const gen_tensor *t = ctx;
    int64_t rows = t->ne[1] * t->ne[2], ne0 = t->ne[0];
    int64_t per = FILL_VALUES / ne0 > 0 ? FILL_VALUES / ne0 : 1;
    size_t row_bytes = coli_row_bytes(t->type, ne0);
    float *vals = malloc((size_t)(per * ne0) * sizeof *vals);
    char *out = t->type == COLI_F32 ? (char *)vals : malloc((size_t)per * row_bytes);
    if (!vals || !out) {
        free(vals);
        return coli_fail(COLI_ENOMEM, "tensor '%s': out of memory", t->name);
    }
    rng r;
    s_rng_at(&r, t->base, t->first);
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
        int64_t nr = rows - r0 < per ? rows - r0 : per;
        for (int64_t i = 0; i < nr * ne0; i++) {
            float x = s_rng_normal(&r) * t->scale;
            vals[i] = t->kind == 'n' ? 1.0f + x : x;
        }
        for (int64_t k = 0; k < nr && t->type != COLI_F32; k++)
            coli_quantize_row(t->type, vals + k * ne0, out + (size_t)k * row_bytes, ne0);
        fwrite(out, row_bytes, (size_t)nr, fp);
    }
    if (out != (char *)vals) free(out);
    free(vals);
    return 0;
}

static int s_gen_layer_attn(gen_weights *g, const model_cfg *c, int il) {
    char n[64];
    int64_t E = c->n_embd, nkv = E / c->n_head * c->n_head_kv;
    int rc = 0;
#define ADD(suffix, kind, gain, nd, a, b, x) \
    (snprintf(n, sizeof n, "blk.%d.%s", il, suffix), rc = rc ? rc : s_gen_add(g, n, kind, gain, nd, a, b, x))
    ADD("attn_norm.weight", 'n', 0, 1, E, 1, 1);
    ADD("attn_q.weight", 'm', 1.5f, 2, E, E, 1);
    ADD("attn_k.weight", 'm', 1.5f, 2, E, nkv, 1);
    ADD("attn_v.weight", 'm', 1.0f, 2, E, nkv, 1);
    ADD("attn_output.weight", 'm', 1.0f, 2, E, E, 1);
    if (strcmp(c->arch, "qwen2moe") == 0) {
        ADD("attn_q.bias", 'b', 0, 1, E, 1, 1);
        ADD("attn_k.bias", 'b', 0, 1, nkv, 1, 1);
        ADD("attn_v.bias", 'b', 0, 1, nkv, 1, 1);
    }
    if (strcmp(c->arch, "olmoe") == 0) {
        ADD("attn_q_norm.weight", 'n', 0, 1, E, 1, 1);
        ADD("attn_k_norm.weight", 'n', 0, 1, nkv, 1, 1);
    }
    return rc;
}

static int s_gen_layer_ffn(gen_weights *g, const model_cfg *c, int il) {
    char n[64];
    int64_t E = c->n_embd, F = c->n_ff, X = c->n_expert, S = c->n_ff_shexp;
    int rc = 0;
    ADD("ffn_norm.weight", 'n', 0, 1, E, 1, 1);
    if (c->dense) {
        ADD("ffn_gate.weight", 'm', 1.0f, 2, E, F, 1);
        ADD("ffn_up.weight", 'm', 1.0f, 2, E, F, 1);
        ADD("ffn_down.weight", 'm', 1.0f, 2, F, E, 1);
        return rc;
    }
    ADD("ffn_gate_inp.weight", 'm', 2.0f, 2, E, X, 1);  /* router (n_expert, n_embd) */
    ADD("ffn_gate_exps.weight", 'm', 1.0f, 3, E, F, X); /* (n_expert, n_ff, n_embd) */
    ADD("ffn_up_exps.weight", 'm', 1.0f, 3, E, F, X);
    ADD("ffn_down_exps.weight", 'm', 1.0f, 3, F, E, X); /* (n_expert, n_embd, n_ff) */
    if (strcmp(c->arch, "qwen2moe") == 0) {
        ADD("ffn_gate_inp_shexp.weight", 'm', 1.0f, 1, E, 1, 1); /* shared-expert gate (n_embd) */
        ADD("ffn_gate_shexp.weight", 'm', 1.0f, 2, E, S, 1);
        ADD("ffn_up_shexp.weight", 'm', 1.0f, 2, E, S, 1);
        ADD("ffn_down_shexp.weight", 'm', 1.0f, 2, S, E, 1);
    }
#undef ADD
    return rc;
}

/* Plan every tensor in make_models.py's order (the order of the draws
 * defines the model) with its stored type and size; nothing is drawn yet. */
static int s_gen_all(gen_weights *g, const model_cfg *c) {
    memset(g, 0, sizeof *g);
    g->cap = 3 + (int)c->n_layer * 20;
    g->t = calloc((size_t)g->cap, sizeof *g->t);
    if (!g->t) return coli_fail(COLI_ENOMEM, "gen_model: out of memory");
    s_rng_seed(&g->base, c->seed);
    int rc = s_gen_add(g, "token_embd.weight", 'e', 0, 2, c->n_embd, c->n_vocab, 1);
    if (!rc) rc = s_gen_add(g, "output_norm.weight", 'n', 0, 1, c->n_embd, 1, 1);
    if (!rc) rc = s_gen_add(g, "output.weight", 'm', 2.0f, 2, c->n_embd, c->n_vocab, 1);
    for (int il = 0; il < c->n_layer && !rc; il++) {
        rc = s_gen_layer_attn(g, c, il);
        if (!rc) rc = s_gen_layer_ffn(g, c, il);
    }
    for (int i = 0; i < g->n && !rc; i++) {
        gen_tensor *t = &g->t[i];
        t->type = s_stored_type(t->name, t->n_dims, c->dtype);
        t->nbytes = coli_row_bytes(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2]);
    }
    return rc;
}

static void s_gen_free(gen_weights *g) {
    free(g->t);
    memset(g, 0, sizeof *g);
}

/* Sort key of non-F32 files (as llama-quantize writes them): non-layer
 * tensors first, then by layer index, then by name. */
static int s_tensor_order(const void *pa, const void *pb) {
    const gen_tensor *a = *(const gen_tensor *const *)pa, *b = *(const gen_tensor *const *)pb;
    int la = -1, lb = -1;
    sscanf(a->name, "blk.%d.", &la);
    sscanf(b->name, "blk.%d.", &lb);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a->name, b->name);
}

// ----------------------------------------------------------------------------
// the file

/* general.file_type of a file whose weights are mostly of type t (llama.cpp's
 * LLAMA_FTYPE values). */
static uint32_t s_file_type_of(coli_dtype t) {
    switch (t) {
    case COLI_F16: return 1;
    case COLI_Q4_0: return 2;
    case COLI_Q8_0: return 7;
    case COLI_BF16: return 32;
    default: return 0;
    }
}

static int s_write_hparams(gguf_writer *w, const model_cfg *c) {
    char k[96];
    int rc = 0;
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", c->arch, suffix), k)
#define U32(suffix, v) (rc = rc ? rc : gguf_writer_set_u32(w, KEY(suffix), (uint32_t)(v)))
    U32("context_length", c->n_ctx);
    U32("embedding_length", c->n_embd);
    U32("block_count", c->n_layer);
    U32("feed_forward_length", strcmp(c->arch, "qwen2moe") == 0 ? c->n_ff_shexp : c->n_ff);
    U32("attention.head_count", c->n_head);
    U32("attention.head_count_kv", c->n_head_kv);
    if (!rc) rc = gguf_writer_set_f32(w, KEY("rope.freq_base"), c->rope_theta);
    U32("rope.dimension_count", c->n_embd / c->n_head);
    if (!rc) rc = gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->eps);
    if (!c->dense) {
        U32("expert_count", c->n_expert);
        U32("expert_used_count", c->n_expert_used);
    }
    if (strcmp(c->arch, "qwen2moe") == 0) {
        U32("expert_feed_forward_length", c->n_ff);
        U32("expert_shared_feed_forward_length", c->n_ff_shexp);
    }
    U32("vocab_size", c->n_vocab);
#undef U32
#undef KEY
    return rc;
}

static int s_write_tensors(gguf_writer *w, const model_cfg *c, gen_weights *g) {
    gen_tensor **order = malloc((size_t)g->n * sizeof *order);
    if (!order) return coli_fail(COLI_ENOMEM, "gen_model: out of memory");
    for (int i = 0; i < g->n; i++) order[i] = &g->t[i];
    if (c->dtype != COLI_F32) qsort(order, (size_t)g->n, sizeof *order, s_tensor_order);
    int rc = 0;
    for (int i = 0; i < g->n && !rc; i++) {
        gen_tensor *t = order[i];
        rc = gguf_writer_add_tensor_fill(w, t->name, t->type, t->n_dims, t->ne, t->nbytes, s_fill_tensor, order[i]);
    }
    free(order);
    return rc;
}

static int s_write_model(const model_cfg *c, const char *path) {
    int rc = s_cfg_check(c);
    if (rc) return rc;
    gen_vocab v;
    gen_weights g;
    memset(&g, 0, sizeof g);
    gguf_writer *w = NULL;
    rc = gen_vocab_build(&v, c->n_vocab, strcmp(c->arch, "olmoe") == 0);
    if (!rc) rc = s_gen_all(&g, c);
    if (!rc && !(w = gguf_writer_new())) rc = coli_fail(COLI_ENOMEM, "gen_model: out of memory");
    if (!rc) rc = gguf_writer_set_str(w, "general.architecture", c->arch);
    if (!rc) rc = gguf_writer_set_str(w, "general.name", c->name);
    if (!rc && c->dtype == COLI_F32) rc = gguf_writer_set_u32(w, "general.file_type", 0);
    if (!rc) rc = s_write_hparams(w, c);
    if (!rc) rc = gen_vocab_write(w, &v);
    if (!rc && c->dtype != COLI_F32) {
        rc = gguf_writer_set_u32(w, "general.quantization_version", 2);
        if (!rc) rc = gguf_writer_set_u32(w, "general.file_type", s_file_type_of(c->dtype));
    }
    if (!rc) rc = s_write_tensors(w, c, &g);
    if (!rc) rc = gguf_writer_write(w, path);
    gguf_writer_free(&w);
    s_gen_free(&g);
    gen_vocab_free(&v);
    return rc;
}

// ----------------------------------------------------------------------------
// command line

/* The fixtures of the test suite (make fixtures). */
static int s_write_fixtures(const char *dir) {
    static const struct {
        const char *file, *arch;
        int dense;
        coli_dtype dtype;
        uint64_t seed;
    } fx[] = {
        {"tiny-llama-moe-f32.gguf", "llama", 0, COLI_F32, 1},   {"tiny-llama-moe-f16.gguf", "llama", 0, COLI_F16, 1},
        {"tiny-llama-moe-q8_0.gguf", "llama", 0, COLI_Q8_0, 1}, {"tiny-llama-moe-q4_0.gguf", "llama", 0, COLI_Q4_0, 1},
        {"tiny-llama-dense-f32.gguf", "llama", 1, COLI_F32, 2}, {"tiny-olmoe-f32.gguf", "olmoe", 0, COLI_F32, 3},
        {"tiny-qwen2moe-f32.gguf", "qwen2moe", 0, COLI_F32, 4},
    };
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return coli_fail(COLI_EIO, "%s: cannot create directory: %s", dir, strerror(errno));
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        model_cfg c;
        char path[4096], name[64];
        int rc = s_cfg_defaults(&c, fx[i].arch);
        snprintf(name, sizeof name, "%.*s", (int)(strlen(fx[i].file) - 5), fx[i].file);
        c.name = name;
        c.dense = fx[i].dense;
        c.dtype = fx[i].dtype;
        c.seed = fx[i].seed;
        snprintf(path, sizeof path, "%s/%s", dir, fx[i].file);
        if (!rc) rc = s_write_model(&c, path);
        if (rc) return rc;
        printf("gen_model: wrote %s\n", path);
    }
    return 0;
}

static void s_usage(FILE *f) {
    fprintf(f, "usage: gen_model --all DIR\n"
               "       gen_model --arch llama|olmoe|qwen2moe [options] OUT.gguf\n"
               "Writes small random GGUF models (deterministic: same arguments, same bytes).\n"
               "  --all DIR       the test fixtures: tiny-llama-moe-{f32,f16,q8_0,q4_0}, tiny-llama-dense-f32,\n"
               "                  tiny-olmoe-f32, tiny-qwen2moe-f32 (.gguf)\n"
               "  --dense         llama only: dense FFN instead of experts\n"
               "  --dim N --layers N --heads N --kv-heads N --experts N --top-k N\n"
               "  --ffn N         expert FFN length (dense: FFN length; qwen2moe shared expert: 2N)\n"
               "  --vocab N       vocabulary size (300..65536)   --ctx N   context length\n"
               "  --seed S        random seed                    --dtype F32|F16|BF16|Q8_0|Q4_0\n");
}

/* Parse a positive integer flag value; 0 or an error naming the flag. */
static int s_parse_count(const char *flag, const char *s, int64_t max, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > max)
        return coli_fail(COLI_EINVAL, "%s: '%s' is not an integer in 1..%lld", flag, s, (long long)max);
    *out = v;
    return 0;
}

static int s_parse_option(model_cfg *c, const char *flag, const char *val) {
    static const struct {
        const char *flag;
        size_t off;
        int64_t max;
    } ints[] = {
        {"--dim", offsetof(model_cfg, n_embd), 1 << 16},    {"--layers", offsetof(model_cfg, n_layer), 256},
        {"--heads", offsetof(model_cfg, n_head), 1024},     {"--kv-heads", offsetof(model_cfg, n_head_kv), 1024},
        {"--experts", offsetof(model_cfg, n_expert), 1024}, {"--top-k", offsetof(model_cfg, n_expert_used), 1024},
        {"--ffn", offsetof(model_cfg, n_ff), 1 << 20},      {"--vocab", offsetof(model_cfg, n_vocab), 65536},
        {"--ctx", offsetof(model_cfg, n_ctx), 1 << 20},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (strcmp(flag, ints[i].flag) == 0)
            return s_parse_count(flag, val, ints[i].max, (int64_t *)((char *)c + ints[i].off));
    if (strcmp(flag, "--seed") == 0) {
        char *end = NULL;
        errno = 0;
        c->seed = strtoull(val, &end, 10);
        if (errno || end == val || *end || val[0] == '-')
            return coli_fail(COLI_EINVAL, "--seed: '%s' is not a non-negative integer", val);
        return 0;
    }
    if (strcmp(flag, "--dtype") == 0) {
        if (coli_dtype_from_name(val, &c->dtype) != 0)
            return coli_fail(COLI_EINVAL, "--dtype: unknown type '%s' (F32, F16, BF16, Q8_0, Q4_0)", val);
        return 0;
    }
    return coli_fail(COLI_EINVAL, "%s: unknown flag (see gen_model --help)", flag);
}

/* gen_model --arch A [options] OUT: 0, or a coli_status (EINVAL = usage). */
static int s_run_single(int argc, char **argv) {
    const char *arch = NULL, *out = NULL;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc) arch = argv[i + 1];
    if (!arch) return coli_fail(COLI_EINVAL, "--arch: required (llama, olmoe, qwen2moe)");
    model_cfg c;
    int rc = s_cfg_defaults(&c, arch);
    int ffn_set = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--dense") == 0) {
            c.dense = 1;
            continue;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (out) return coli_fail(COLI_EINVAL, "%s: unexpected extra argument (output is %s)", a, out);
            out = a;
            continue;
        }
        if (i + 1 >= argc) return coli_fail(COLI_EINVAL, "%s: missing value", a);
        if (strcmp(a, "--arch") != 0) rc = s_parse_option(&c, a, argv[i + 1]);
        ffn_set |= strcmp(a, "--ffn") == 0;
        i++;
    }
    if (rc) return rc;
    if (!out) return coli_fail(COLI_EINVAL, "OUT.gguf: missing output file");
    if (ffn_set) c.n_ff_shexp = 2 * c.n_ff;
    return s_write_model(&c, out);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        s_usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        s_usage(stdout);
        return 0;
    }
    int rc;
    if (strcmp(argv[1], "--all") == 0) {
        if (argc != 3) {
            fprintf(stderr, "gen_model: --all: expects exactly one directory\n");
            return 2;
        }
        rc = s_write_fixtures(argv[2]);
    } else {
        rc = s_run_single(argc, argv);
    }
    if (rc) {
        fprintf(stderr, "gen_model: %s\n", coli_last_error());
        return rc == COLI_EINVAL ? 2 : 1;
    }
    return 0;
}
