/*
 * quantize_mix.h - which type each tensor gets under a llama.cpp preset
 * ("Q4_K_M", "IQ4_XS", ...): the decisions of llama.cpp's
 * llama_tensor_get_type (src/llama-quant.cpp, commit c392e50, February
 * 2025) without an importance matrix, for the presets whose types we write.
 */
#ifndef COLI_COORD_QUANTIZE_MIX_H
#define COLI_COORD_QUANTIZE_MIX_H

#include <stdint.h>

#include "core/gguf/gguf.h"
#include "core/tensor.h"

/* A preset as llama-quantize names it: its llama_ftype (written to
 * general.file_type) and its base type (what --pure gives every weight). */
typedef struct quant_preset {
    const char *name; /* "Q4_K_M" */
    uint32_t ftype;   /* LLAMA_FTYPE_MOSTLY_Q4_K_M = 15 */
    coli_dtype base;  /* COLI_Q4_K */
} quant_preset;

/* The preset called name (llama-quantize's spelling, plus its aliases Q3_K,
 * Q4_K, Q5_K for the _M presets), or NULL. */
const quant_preset *quant_preset_find(const char *name);
/* Accepted names, comma-separated, for usage messages (static string). */
const char *quant_preset_names(void);

/* Per-model state of the decisions: hyper-parameters read once from the
 * metadata, and the counters llama.cpp keeps while it walks the tensors in
 * file order (attn_v, ffn_down seen so far). */
typedef struct quant_mix {
    const quant_preset *preset;
    int pure;            /* 1: every weight the base type (--pure) */
    int output_type;     /* override for output.weight, or -1 */
    int token_embd_type; /* override for token_embd.weight, or -1 */
    int falcon, is_70b;  /* architecture facts the rules test */
    uint32_t n_layer, n_expert, n_gqa;
    int has_output;         /* the file has output.weight (else token_embd stands for it) */
    int n_attn_v, i_attn_v; /* attn_v / attn_qkv / attn_kv_b tensors: total, seen */
    int i_ffn_down;         /* ffn_down tensors seen (dense models' layer index) */
} quant_mix;

/* Fill m for the model in f: reads general.architecture, block_count,
 * head counts, expert_count and counts the attention value tensors.
 * Overrides are -1 for none. Returns 0. */
int quant_mix_init(quant_mix *m, const gguf_file *f, const quant_preset *p, int pure, int output_type,
                   int token_embd_type);

/* Type of the weight t (one that is converted at all), called once per such
 * tensor in file order. Falls back as llama.cpp does when the row length
 * does not fit the chosen block: Q2_K/Q3_K/IQ4_XS -> IQ4_NL, Q4_K -> Q5_0,
 * Q5_K -> Q5_1, Q6_K -> Q8_0, TQ1_0/TQ2_0 -> Q4_0, then F16 (MXFP4 -> F16
 * directly). Returns 0 and *out, or
 * COLI_EUNSUPPORTED when no type fits (message names the tensor). */
int quant_mix_type(quant_mix *m, const coli_tensor *t, coli_dtype *out);

#endif
