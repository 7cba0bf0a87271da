/* tensor.c - element type table; see tensor.h. */
#include "core/tensor.h"

#include <stdio.h>
#include <string.h>

/* One row per type: the name users and files spell, the block shape, and
 * whether weights of that type are computed on every path yet (valid). */
static const struct s_dtype_info {
    coli_dtype t;
    const char *name;
    int64_t block_elems;
    size_t block_bytes;
    int valid;
} s_dtypes[] = {
    {COLI_F32, "F32", 1, 4, 1},
    {COLI_F16, "F16", 1, 2, 1},
    {COLI_BF16, "BF16", 1, 2, 1},
    {COLI_Q8_0, "Q8_0", COLI_QK, 34, 1},
    {COLI_Q4_0, "Q4_0", COLI_QK, 18, 1},
    {COLI_Q4_1, "Q4_1", COLI_QK, 20, 1},
    {COLI_Q5_0, "Q5_0", COLI_QK, 22, 1},
    {COLI_Q5_1, "Q5_1", COLI_QK, 24, 1},
    {COLI_Q8_1, "Q8_1", COLI_QK, 36, 0},
    {COLI_IQ4_NL, "IQ4_NL", COLI_QK, 18, 1},
    {COLI_Q2_K, "Q2_K", COLI_QK_K, 84, 1},
    {COLI_Q3_K, "Q3_K", COLI_QK_K, 110, 1},
    {COLI_Q4_K, "Q4_K", COLI_QK_K, 144, 1},
    {COLI_Q5_K, "Q5_K", COLI_QK_K, 176, 1},
    {COLI_Q6_K, "Q6_K", COLI_QK_K, 210, 1},
    {COLI_Q8_K, "Q8_K", COLI_QK_K, 292, 0},
    {COLI_IQ4_XS, "IQ4_XS", COLI_QK_K, 136, 1},
    {COLI_IQ2_XXS, "IQ2_XXS", COLI_QK_K, 66, 1},
    {COLI_IQ3_XXS, "IQ3_XXS", COLI_QK_K, 98, 1},
    {COLI_IQ1_M, "IQ1_M", COLI_QK_K, 56, 1},
    {COLI_IQ1_S, "IQ1_S", COLI_QK_K, 50, 1},
    {COLI_IQ2_S, "IQ2_S", COLI_QK_K, 82, 1},
    {COLI_IQ3_S, "IQ3_S", COLI_QK_K, 110, 1},
    {COLI_IQ2_XS, "IQ2_XS", COLI_QK_K, 74, 1},
    {COLI_TQ1_0, "TQ1_0", COLI_QK_K, 54, 1},
    {COLI_TQ2_0, "TQ2_0", COLI_QK_K, 66, 1},
    {COLI_MXFP4, "MXFP4", COLI_QK, 17, 1},
    {COLI_I32, "I32", 1, 4, 0},
};
#define N_DTYPES (sizeof s_dtypes / sizeof s_dtypes[0])

static const struct s_dtype_info *s_dtype_info(uint32_t t) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if ((uint32_t)s_dtypes[i].t == t) return &s_dtypes[i];
    return NULL;
}

int coli_dtype_valid(uint32_t t) {
    const struct s_dtype_info *d = s_dtype_info(t);
    return d && d->valid;
}

uint64_t coli_dtype_weight_mask(void) {
    uint64_t mask = 0;
    for (size_t i = 0; i < N_DTYPES; i++)
        if (s_dtypes[i].valid) mask |= (uint64_t)1 << s_dtypes[i].t;
    return mask;
}

int coli_dtype_known(uint32_t t) { return s_dtype_info(t) != NULL; }

const char *coli_dtype_name(uint32_t t) {
    const struct s_dtype_info *d = s_dtype_info(t);
    if (d) return d->name;
    /* e.g. GGML's IQ2_XXS is type 16: name the number so the user can look it up */
    static _Thread_local char buf[32];
    snprintf(buf, sizeof buf, "type %u", t);
    return buf;
}

int coli_dtype_from_name(const char *s, coli_dtype *out) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strcmp(s, s_dtypes[i].name) == 0) {
            *out = s_dtypes[i].t;
            return 0;
        }
    return -1;
}

int64_t coli_dtype_block_elems(coli_dtype t) {
    const struct s_dtype_info *d = s_dtype_info(t);
    return d ? d->block_elems : 0;
}

size_t coli_dtype_block_bytes(coli_dtype t) {
    const struct s_dtype_info *d = s_dtype_info(t);
    return d ? d->block_bytes : 0;
}

size_t coli_row_bytes(coli_dtype t, int64_t n) {
    int64_t be = coli_dtype_block_elems(t);
    return be ? (size_t)(n / be) * coli_dtype_block_bytes(t) : 0;
}

int64_t coli_tensor_nelems(const coli_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= t->ne[i];
    return n;
}
