/* tensor.c - element type table; see tensor.h. */
#include "tensor.h"

#include <stdio.h>
#include <string.h>

int coli_dtype_valid(uint32_t t) {
    return t == COLI_F32 || t == COLI_F16 || t == COLI_Q4_0 || t == COLI_Q8_0 || t == COLI_BF16;
}

/* The names users and files spell, one table for both directions. */
static const struct { const char *name; coli_dtype t; } s_dtypes[] = {
    {"F32", COLI_F32}, {"F16", COLI_F16}, {"BF16", COLI_BF16},
    {"Q8_0", COLI_Q8_0}, {"Q4_0", COLI_Q4_0},
};
#define N_DTYPES (sizeof s_dtypes / sizeof s_dtypes[0])

const char *coli_dtype_name(uint32_t t) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (s_dtypes[i].t == t) return s_dtypes[i].name;
    /* e.g. GGML's Q4_K is type 12: name the number so the user can look it up */
    static _Thread_local char buf[32];
    snprintf(buf, sizeof buf, "type %u", t);
    return buf;
}

int coli_dtype_from_name(const char *s, coli_dtype *out) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strcmp(s, s_dtypes[i].name) == 0) { *out = s_dtypes[i].t; return 0; }
    return -1;
}

int64_t coli_dtype_block_elems(coli_dtype t) {
    return (t == COLI_Q8_0 || t == COLI_Q4_0) ? COLI_QK : 1;
}

size_t coli_dtype_block_bytes(coli_dtype t) {
    switch (t) {
    case COLI_F32:  return 4;
    case COLI_F16:  return 2;
    case COLI_BF16: return 2;
    case COLI_Q8_0: return 2 + COLI_QK;
    case COLI_Q4_0: return 2 + COLI_QK / 2;
    }
    return 0;
}

size_t coli_row_bytes(coli_dtype t, int64_t n) {
    return (size_t)(n / coli_dtype_block_elems(t)) * coli_dtype_block_bytes(t);
}

int64_t coli_tensor_nelems(const coli_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= t->ne[i];
    return n;
}
