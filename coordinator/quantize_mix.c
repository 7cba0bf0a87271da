/*
 * quantize_mix.c - per-tensor types of llama.cpp's quantization presets; see
 * quantize_mix.h. The rules are llama_tensor_get_type's (llama.cpp c392e50)
 * for the presets below, with no importance matrix:
 *
 *  - output.weight (token_embd.weight when the model has no output): Q8_0
 *    if its rows do not fit the base type's block (or arch falcon), else
 *    Q6_K unless the base is Q8_0; --output-type overrides.
 *  - attn_v / attn_k with exactly 8 experts: Q8_0 (llama.cpp tests
 *    n_expert == 8 at that commit; later versions say >= 8).
 *  - the table s_rules below for attn_v, ffn_down, attn_output, attn_qkv:
 *    the first row whose preset matches and whose conditions all hold.
 *  - a 70B llama (80 layers, GQA, not 8 experts) gets attn_v Q5_K instead of
 *    Q3_K/Q4_K.
 *  - a type whose block does not divide the row length falls back (header).
 *
 * and, from llama.cpp de3ff815 (the presets c392e50 did not have):
 *  - MXFP4_MOE: expert tensors (ne[2] > 1) MXFP4, every other weight and
 *    output.weight Q8_0 (token_embd.weight too, unless overridden).
 *  - TQ1_0 / TQ2_0: token_embd.weight Q4_K; otherwise the rules above.
 */
#include "coordinator/quantize_mix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* llama_ftype values (llama.h) */
enum {
    FT_F32 = 0,
    FT_F16 = 1,
    FT_Q4_0 = 2,
    FT_Q4_1 = 3,
    FT_Q8_0 = 7,
    FT_Q5_0 = 8,
    FT_Q5_1 = 9,
    FT_Q2_K = 10,
    FT_Q3_K_S = 11,
    FT_Q3_K_M = 12,
    FT_Q3_K_L = 13,
    FT_Q4_K_S = 14,
    FT_Q4_K_M = 15,
    FT_Q5_K_S = 16,
    FT_Q5_K_M = 17,
    FT_Q6_K = 18,
    FT_IQ2_XXS = 19,
    FT_IQ2_XS = 20,
    FT_Q2_K_S = 21,
    FT_IQ3_XXS = 23,
    FT_IQ1_S = 24,
    FT_IQ3_S = 26,
    FT_IQ3_M = 27,
    FT_IQ4_NL = 25,
    FT_IQ2_S = 28,
    FT_IQ2_M = 29,
    FT_IQ4_XS = 30,
    FT_IQ1_M = 31,
    FT_BF16 = 32,
    FT_TQ1_0 = 36,
    FT_TQ2_0 = 37,
    FT_MXFP4_MOE = 38,
};

static const quant_preset s_presets[] = {
    {"F32", FT_F32, COLI_F32},
    {"F16", FT_F16, COLI_F16},
    {"BF16", FT_BF16, COLI_BF16},
    {"Q8_0", FT_Q8_0, COLI_Q8_0},
    {"Q4_0", FT_Q4_0, COLI_Q4_0},
    {"Q4_1", FT_Q4_1, COLI_Q4_1},
    {"Q5_0", FT_Q5_0, COLI_Q5_0},
    {"Q5_1", FT_Q5_1, COLI_Q5_1},
    {"IQ4_NL", FT_IQ4_NL, COLI_IQ4_NL},
    {"IQ4_XS", FT_IQ4_XS, COLI_IQ4_XS},
    {"Q2_K", FT_Q2_K, COLI_Q2_K},
    {"Q2_K_S", FT_Q2_K_S, COLI_Q2_K},
    {"Q3_K_S", FT_Q3_K_S, COLI_Q3_K},
    {"Q3_K_M", FT_Q3_K_M, COLI_Q3_K},
    {"Q3_K_L", FT_Q3_K_L, COLI_Q3_K},
    {"Q4_K_S", FT_Q4_K_S, COLI_Q4_K},
    {"Q4_K_M", FT_Q4_K_M, COLI_Q4_K},
    {"Q5_K_S", FT_Q5_K_S, COLI_Q5_K},
    {"Q5_K_M", FT_Q5_K_M, COLI_Q5_K},
    {"Q6_K", FT_Q6_K, COLI_Q6_K},
    {"TQ1_0", FT_TQ1_0, COLI_TQ1_0},
    {"TQ2_0", FT_TQ2_0, COLI_TQ2_0},
    {"MXFP4_MOE", FT_MXFP4_MOE, COLI_MXFP4},
    /* with an importance matrix only (quantize.c checks) */
    {"IQ1_S", FT_IQ1_S, COLI_IQ1_S},
    {"IQ1_M", FT_IQ1_M, COLI_IQ1_M},
    {"IQ2_XXS", FT_IQ2_XXS, COLI_IQ2_XXS},
    {"IQ2_XS", FT_IQ2_XS, COLI_IQ2_XS},
    {"IQ2_S", FT_IQ2_S, COLI_IQ2_XS}, /* sic: llama_ftype_get_default_type */
    {"IQ2_M", FT_IQ2_M, COLI_IQ2_S},
    {"IQ3_XXS", FT_IQ3_XXS, COLI_IQ3_XXS},
    {"IQ3_S", FT_IQ3_S, COLI_IQ3_S},
    {"IQ3_M", FT_IQ3_M, COLI_IQ3_S},
    /* ours: llama-quantize has no plain MXFP4 preset */
    {"MXFP4", FT_MXFP4_MOE, COLI_MXFP4},
    /* llama-quantize's aliases */
    {"Q3_K", FT_Q3_K_M, COLI_Q3_K},
    {"Q4_K", FT_Q4_K_M, COLI_Q4_K},
    {"Q5_K", FT_Q5_K_M, COLI_Q5_K},
};
#define N_PRESETS (sizeof s_presets / sizeof s_presets[0])

const quant_preset *quant_preset_find(const char *name) {
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(name, s_presets[i].name) == 0) return &s_presets[i];
    return NULL;
}

const char *quant_preset_names(void) {
    return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q2_K_S, Q3_K_S, Q3_K_M, "
           "Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, TQ1_0, TQ2_0, MXFP4_MOE, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS "
           "(the "
           "last four with --imatrix; aliases Q3_K, Q4_K, Q5_K = "
           "the _M presets, MXFP4 = MXFP4_MOE)";
}

// ----------------------------------------------------------------------------
// the rule table

typedef enum tensor_role {
    ROLE_OTHER,
    ROLE_ATTN_V,
    ROLE_ATTN_K,
    ROLE_FFN_DOWN,
    ROLE_ATTN_OUT,
    ROLE_ATTN_QKV,
    ROLE_ATTN_Q,
    ROLE_ATTN_KV_B
} tensor_role;

/* Facts about one tensor; a rule holds when all the facts it names hold. */
enum {
    C_FALCON = 1 << 0,
    C_NOT_FALCON = 1 << 1,
    C_GQA4 = 1 << 2,   /* n_head / n_head_kv >= 4 */
    C_WV_LT2 = 1 << 3, /* fewer than 2 attn_v seen before this one */
    C_WV_LT4 = 1 << 4,
    C_WV_MORE = 1 << 5, /* use_more_bits(i_attn_v, n_attn_v) */
    C_L_LT16 = 1 << 6,  /* layer < n_layer / 16 */
    C_L_LT8 = 1 << 7,   /* layer < n_layer / 8 */
    C_L_MORE = 1 << 8,  /* use_more_bits(layer, n_layer) */
    C_EXP8 = 1 << 9,
    C_NOT_EXP8 = 1 << 10, /* exactly 8 experts, or not */
};

static const struct mix_rule {
    tensor_role role;
    uint32_t ftype;
    unsigned cond;
    coli_dtype type;
} s_rules[] = {
    {ROLE_ATTN_V, FT_Q2_K, C_GQA4, COLI_Q4_K},
    {ROLE_ATTN_V, FT_Q2_K, 0, COLI_Q3_K},
    {ROLE_ATTN_V, FT_Q2_K_S, C_GQA4, COLI_Q4_K},
    {ROLE_ATTN_V, FT_Q3_K_M, C_WV_LT2, COLI_Q5_K},
    {ROLE_ATTN_V, FT_Q3_K_M, 0, COLI_Q4_K},
    {ROLE_ATTN_V, FT_Q3_K_L, 0, COLI_Q5_K},
    {ROLE_ATTN_V, FT_IQ4_NL, C_GQA4, COLI_Q5_K},
    {ROLE_ATTN_V, FT_IQ4_XS, C_GQA4, COLI_Q5_K},
    {ROLE_ATTN_V, FT_Q4_K_M, C_WV_MORE, COLI_Q6_K},
    {ROLE_ATTN_V, FT_Q5_K_M, C_WV_MORE, COLI_Q6_K},
    {ROLE_ATTN_V, FT_Q4_K_S, C_WV_LT4, COLI_Q5_K},

    {ROLE_FFN_DOWN, FT_Q2_K, 0, COLI_Q3_K},
    {ROLE_FFN_DOWN, FT_Q2_K_S, C_L_LT8, COLI_Q4_K},
    {ROLE_FFN_DOWN, FT_Q3_K_M, C_L_LT16, COLI_Q5_K},
    {ROLE_FFN_DOWN, FT_Q3_K_M, C_NOT_FALCON, COLI_Q4_K},
    {ROLE_FFN_DOWN, FT_Q3_K_M, C_L_MORE, COLI_Q4_K},
    {ROLE_FFN_DOWN, FT_Q3_K_M, 0, COLI_Q3_K},
    {ROLE_FFN_DOWN, FT_Q3_K_L, C_FALCON, COLI_Q4_K},
    {ROLE_FFN_DOWN, FT_Q3_K_L, 0, COLI_Q5_K},
    {ROLE_FFN_DOWN, FT_Q4_K_M, C_FALCON | C_L_LT16, COLI_Q6_K},
    {ROLE_FFN_DOWN, FT_Q4_K_M, C_FALCON | C_L_MORE, COLI_Q5_K},
    {ROLE_FFN_DOWN, FT_Q4_K_M, C_FALCON, COLI_Q4_K},
    {ROLE_FFN_DOWN, FT_Q4_K_M, C_L_MORE, COLI_Q6_K},
    {ROLE_FFN_DOWN, FT_IQ4_NL, C_L_LT8, COLI_Q5_K},
    {ROLE_FFN_DOWN, FT_IQ4_XS, C_L_LT8, COLI_Q5_K},
    {ROLE_FFN_DOWN, FT_Q5_K_M, C_L_MORE, COLI_Q6_K},
    {ROLE_FFN_DOWN, FT_Q4_K_S, C_NOT_FALCON | C_L_LT8, COLI_Q5_K},

    {ROLE_ATTN_OUT, FT_Q2_K, C_NOT_FALCON | C_EXP8, COLI_Q5_K},
    {ROLE_ATTN_OUT, FT_Q3_K_S, C_NOT_FALCON | C_EXP8, COLI_Q5_K},
    {ROLE_ATTN_OUT, FT_Q3_K_M, C_NOT_FALCON | C_EXP8, COLI_Q5_K},
    {ROLE_ATTN_OUT, FT_IQ4_NL, C_NOT_FALCON | C_EXP8, COLI_Q5_K},
    {ROLE_ATTN_OUT, FT_Q4_K_S, C_NOT_FALCON | C_EXP8, COLI_Q5_K},
    {ROLE_ATTN_OUT, FT_Q4_K_M, C_NOT_FALCON | C_EXP8, COLI_Q5_K},
    {ROLE_ATTN_OUT, FT_IQ4_XS, C_NOT_FALCON | C_EXP8, COLI_Q5_K},
    {ROLE_ATTN_OUT, FT_Q2_K, C_NOT_FALCON | C_NOT_EXP8, COLI_Q3_K},
    {ROLE_ATTN_OUT, FT_Q3_K_M, C_NOT_FALCON | C_NOT_EXP8, COLI_Q4_K},
    {ROLE_ATTN_OUT, FT_Q3_K_L, C_NOT_FALCON | C_NOT_EXP8, COLI_Q5_K},
    {ROLE_ATTN_OUT, FT_Q3_K_L, C_FALCON, COLI_Q4_K},

    /* de3ff815's IQ3_XXS with an importance matrix */
    {ROLE_ATTN_V, FT_IQ3_XXS, C_GQA4, COLI_Q4_K},
    {ROLE_ATTN_V, FT_IQ3_XXS, 0, COLI_IQ3_XXS},
    {ROLE_ATTN_K, FT_IQ3_XXS, 0, COLI_IQ2_S},
    {ROLE_ATTN_Q, FT_IQ3_XXS, 0, COLI_IQ2_S},
    {ROLE_ATTN_OUT, FT_IQ3_XXS, C_NOT_FALCON | C_EXP8, COLI_Q5_K},
    {ROLE_ATTN_OUT, FT_IQ3_XXS, C_NOT_FALCON | C_NOT_EXP8, COLI_IQ3_S},
    {ROLE_ATTN_QKV, FT_IQ3_XXS, C_GQA4, COLI_Q4_K},
    /* de3ff815's IQ3_S and IQ3_M */
    {ROLE_ATTN_V, FT_IQ3_S, C_GQA4, COLI_Q4_K},
    {ROLE_ATTN_QKV, FT_IQ3_S, C_GQA4, COLI_Q4_K},
    {ROLE_ATTN_V, FT_IQ3_M, 0, COLI_Q4_K},
    {ROLE_ATTN_QKV, FT_IQ3_M, 0, COLI_Q4_K},
    {ROLE_FFN_DOWN, FT_IQ3_M, C_L_LT8, COLI_Q4_K},
    {ROLE_FFN_DOWN, FT_IQ3_M, C_EXP8 | C_L_MORE, COLI_Q4_K},
    {ROLE_ATTN_OUT, FT_IQ3_S, C_NOT_FALCON | C_EXP8, COLI_Q5_K},
    {ROLE_ATTN_OUT, FT_IQ3_M, C_NOT_FALCON | C_EXP8, COLI_Q5_K},
    {ROLE_ATTN_OUT, FT_IQ3_M, C_NOT_FALCON | C_NOT_EXP8, COLI_Q4_K},

    {ROLE_ATTN_QKV, FT_Q3_K_M, 0, COLI_Q4_K},
    {ROLE_ATTN_QKV, FT_Q3_K_L, 0, COLI_Q4_K},
    {ROLE_ATTN_QKV, FT_Q4_K_M, 0, COLI_Q5_K},
    {ROLE_ATTN_QKV, FT_Q5_K_M, 0, COLI_Q6_K},
};
#define N_RULES (sizeof s_rules / sizeof s_rules[0])

/* llama.cpp's use_more_bits: the first and last eighth of the layers and
 * every third one between. */
static int s_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static tensor_role s_role(const char *name) {
    /* the order of llama.cpp's else-if chain (substring tests) */
    if (strstr(name, "attn_v.weight")) return ROLE_ATTN_V;
    if (strstr(name, "attn_k.weight")) return ROLE_ATTN_K;
    if (strstr(name, "ffn_down")) return ROLE_FFN_DOWN;
    if (strstr(name, "attn_output.weight")) return ROLE_ATTN_OUT;
    if (strstr(name, "attn_qkv.weight")) return ROLE_ATTN_QKV;
    if (strstr(name, "attn_q.weight")) return ROLE_ATTN_Q;
    if (strstr(name, "attn_kv_b.weight")) return ROLE_ATTN_KV_B;
    return ROLE_OTHER;
}

/* Layer of a ffn_down tensor: from its name in MoE models (experts are not
 * consecutive in every file), else the running count, as llama.cpp. */
static int s_ffn_layer(const quant_mix *m, const char *name) {
    int layer;
    if (m->n_expert > 1 && sscanf(name, "blk.%d.", &layer) == 1) return layer;
    return m->i_ffn_down;
}

static unsigned s_facts(const quant_mix *m, tensor_role role, const char *name) {
    unsigned f = m->falcon ? C_FALCON : C_NOT_FALCON;
    f |= m->n_expert == 8 ? C_EXP8 : C_NOT_EXP8;
    if (m->n_gqa >= 4) f |= C_GQA4;
    if (m->i_attn_v < 2) f |= C_WV_LT2;
    if (m->i_attn_v < 4) f |= C_WV_LT4;
    if (s_more_bits(m->i_attn_v, m->n_attn_v)) f |= C_WV_MORE;
    if (role == ROLE_FFN_DOWN) {
        const int l = s_ffn_layer(m, name), n = (int)m->n_layer;
        if (l < n / 16) f |= C_L_LT16;
        if (l < n / 8) f |= C_L_LT8;
        if (s_more_bits(l, n)) f |= C_L_MORE;
    }
    return f;
}

/* The preset's choice for a tensor that is not output/token_embd. */
static coli_dtype s_table_type(quant_mix *m, const coli_tensor *t) {
    const tensor_role role = s_role(t->name);
    coli_dtype type = m->preset->base;
    const unsigned facts = s_facts(m, role, t->name);
    for (size_t i = 0; i < N_RULES; i++) {
        const struct mix_rule *r = &s_rules[i];
        if (r->role == role && r->ftype == m->preset->ftype && (r->cond & facts) == r->cond) {
            type = r->type;
            break;
        }
    }
    if (role == ROLE_ATTN_V) {
        if (m->is_70b && (type == COLI_Q3_K || type == COLI_Q4_K)) type = COLI_Q5_K;
        if (m->n_expert == 8) type = COLI_Q8_0; /* "bumping this to Q8_0 trades just ~128MB" */
        m->i_attn_v++;
    } else if (role == ROLE_ATTN_K && m->n_expert == 8) {
        type = COLI_Q8_0;
    } else if (role == ROLE_FFN_DOWN) {
        m->i_ffn_down++;
    }
    return type;
}

/* de3ff815's 2-bit and 1-bit IQ presets (IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S,
 * IQ1_M; llama_tensor_get_type_impl's branch for them): attention value
 * tensors Q4_K with GQA >= 4 or 4+ experts, else Q2_K (IQ3_S for IQ2_S);
 * attn_k Q4_K with 8 experts; the first n_layer / 8 ffn_down tensors (in file
 * order, shared experts counted) Q2_K (IQ3_S); attn_output Q5_K with 8
 * experts, else IQ2_XXS for the 1-bit presets, IQ3_S for IQ2_S. */
static coli_dtype s_lowbit_type(quant_mix *m, const coli_tensor *t) {
    const tensor_role role = s_role(t->name);
    const uint32_t ft = m->preset->ftype;
    const int two_s = ft == FT_IQ2_S || ft == FT_IQ2_M;
    const coli_dtype small = two_s ? COLI_IQ3_S : COLI_Q2_K;
    coli_dtype type = m->preset->base;
    if (role == ROLE_ATTN_V || role == ROLE_ATTN_QKV || role == ROLE_ATTN_KV_B) {
        type = m->n_gqa >= 4 || m->n_expert >= 4 ? COLI_Q4_K : small;
        m->i_attn_v++;
    } else if (role == ROLE_ATTN_K && m->n_expert == 8) {
        type = COLI_Q4_K;
    } else if (role == ROLE_FFN_DOWN) {
        if (m->i_ffn_down < (int)m->n_layer / 8) type = small;
        m->i_ffn_down++;
    } else if (role == ROLE_ATTN_OUT) {
        if (m->n_expert == 8)
            type = COLI_Q5_K;
        else if (ft == FT_IQ1_S || ft == FT_IQ1_M)
            type = COLI_IQ2_XXS;
        else if (two_s)
            type = COLI_IQ3_S;
    }
    return type;
}

static int s_lowbit(uint32_t ft) {
    return ft == FT_IQ2_XXS || ft == FT_IQ2_XS || ft == FT_IQ1_S || ft == FT_IQ2_S || ft == FT_IQ2_M || ft == FT_IQ1_M;
}

static int s_fits(coli_dtype type, int64_t n_in) { return n_in % coli_dtype_block_elems(type) == 0; }

/* llama.cpp's fallback for a row length the block does not divide. */
static int s_fallback(const coli_tensor *t, coli_dtype type, coli_dtype *out) {
    coli_dtype fb;
    switch (type) {
    case COLI_Q2_K:
    case COLI_Q3_K:
    case COLI_IQ4_XS:
    case COLI_IQ2_XXS:
    case COLI_IQ2_XS:
    case COLI_IQ2_S:
    case COLI_IQ3_XXS:
    case COLI_IQ3_S:
    case COLI_IQ1_S:
    case COLI_IQ1_M: fb = COLI_IQ4_NL; break;
    case COLI_Q4_K: fb = COLI_Q5_0; break;
    case COLI_Q5_K: fb = COLI_Q5_1; break;
    case COLI_Q6_K: fb = COLI_Q8_0; break;
    case COLI_TQ1_0:
    case COLI_TQ2_0: fb = COLI_Q4_0; break;
    case COLI_MXFP4: fb = COLI_F16; break; /* already a 32-value block: nothing smaller */
    default:
        return coli_fail(COLI_EUNSUPPORTED, "tensor '%s': row length %lld is not a multiple of %lld, cannot be %s",
                         t->name, (long long)t->ne[0], (long long)coli_dtype_block_elems(type), coli_dtype_name(type));
    }
    *out = s_fits(fb, t->ne[0]) ? fb : COLI_F16;
    return 0;
}

static int s_is_output(const quant_mix *m, const char *name) {
    return strcmp(name, "output.weight") == 0 || (!m->has_output && strcmp(name, "token_embd.weight") == 0);
}

int quant_mix_type(quant_mix *m, const coli_tensor *t, coli_dtype *out) {
    const coli_dtype base = m->preset->base;
    const int quantized = coli_dtype_block_elems(base) > 1;
    coli_dtype type = base;
    if (!m->pure && quantized) {
        const int mxfp4_moe = m->preset->ftype == FT_MXFP4_MOE;
        const int token_embd = strcmp(t->name, "token_embd.weight") == 0;
        if (s_is_output(m, t->name)) {
            if (m->output_type >= 0)
                type = (coli_dtype)m->output_type;
            else if (mxfp4_moe || m->falcon || !s_fits(base, t->ne[0]))
                type = COLI_Q8_0;
            else if (s_lowbit(m->preset->ftype) || m->preset->ftype == FT_IQ3_XXS)
                type = COLI_Q5_K;
            else if (base != COLI_Q8_0)
                type = COLI_Q6_K;
        } else if (token_embd && m->token_embd_type >= 0) {
            type = (coli_dtype)m->token_embd_type;
        } else if (mxfp4_moe) {
            type = t->ne[2] > 1 ? COLI_MXFP4 : COLI_Q8_0; /* experts, everything else */
        } else if (token_embd) {
            if (base == COLI_TQ1_0 || base == COLI_TQ2_0) type = COLI_Q4_K;
            if (s_lowbit(m->preset->ftype))
                type = m->preset->ftype == FT_IQ2_S || m->preset->ftype == FT_IQ2_M ? COLI_IQ3_S : COLI_Q2_K;
            if (m->preset->ftype == FT_IQ3_XXS) type = COLI_IQ3_S;
        } else if (s_lowbit(m->preset->ftype)) {
            type = s_lowbit_type(m, t);
        } else {
            type = s_table_type(m, t);
        }
        if (!s_fits(type, t->ne[0])) {
            int rc = s_fallback(t, type, &type);
            if (rc < 0) return rc;
        }
    }
    /* the overrides win over everything, also over --pure (llama-quantize) */
    if (m->token_embd_type >= 0 && strcmp(t->name, "token_embd.weight") == 0) type = (coli_dtype)m->token_embd_type;
    if (m->output_type >= 0 && strcmp(t->name, "output.weight") == 0) type = (coli_dtype)m->output_type;
    *out = type;
    return 0;
}

// ----------------------------------------------------------------------------
// model facts

/* "<arch>.<suffix>" as u32, or dflt when absent or not an integer. */
static uint32_t s_arch_u32(const gguf_file *f, const char *arch, const char *suffix, uint32_t dflt) {
    char key[256];
    uint32_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_find_key(f, key) < 0 || gguf_kv_type(f, gguf_find_key(f, key)) == GGUF_ARRAY) return dflt;
    return gguf_get_u32(f, key, &v) == 0 ? v : dflt;
}

int quant_mix_init(quant_mix *m, const gguf_file *f, const quant_preset *p, int pure, int output_type,
                   int token_embd_type) {
    memset(m, 0, sizeof *m);
    m->preset = p;
    m->pure = pure;
    m->output_type = output_type;
    m->token_embd_type = token_embd_type;
    char arch[128] = "";
    gguf_str s;
    if (gguf_find_key(f, "general.architecture") >= 0 && gguf_get_str(f, "general.architecture", &s) == 0)
        snprintf(arch, sizeof arch, "%.*s", (int)(s.len < 127 ? s.len : 127), s.ptr);
    m->n_layer = s_arch_u32(f, arch, "block_count", 0);
    m->n_expert = s_arch_u32(f, arch, "expert_count", 0);
    const uint32_t n_head = s_arch_u32(f, arch, "attention.head_count", 0);
    const uint32_t n_head_kv = s_arch_u32(f, arch, "attention.head_count_kv", n_head);
    m->n_gqa = n_head_kv ? n_head / n_head_kv : 0;
    m->falcon = strcmp(arch, "falcon") == 0;
    /* llama.cpp's LLM_TYPE_70B: a llama with 80 layers and GQA, not 8 experts */
    m->is_70b = strcmp(arch, "llama") == 0 && m->n_expert != 8 && m->n_layer == 80 && n_head != n_head_kv;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const char *name = gguf_tensor(f, i)->name;
        if (strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight"))
            m->n_attn_v++;
        if (strcmp(name, "output.weight") == 0) m->has_output = 1;
    }
    return 0;
}
