/* tensor.c - element type table; see tensor.h. */
#include "tensor.h"

#include <string.h>

int coli_dtype_valid(uint32_t t) {
    return t == COLI_F32 || t == COLI_F16 || t == COLI_Q4_0 || t == COLI_Q8_0 || t == COLI_BF16;
}

const char *coli_dtype_name(uint32_t t) {
    switch (t) {
    case COLI_F32:  return "F32";
    case COLI_F16:  return "F16";
    case COLI_Q4_0: return "Q4_0";
    case COLI_Q8_0: return "Q8_0";
    case COLI_BF16: return "BF16";
    default: {
        static _Thread_local char buf[32];
        /* e.g. GGML's Q4_K is type 12: name the number so the user can look it up */
        int n = 0;
        char tmp[16];
        do { tmp[n++] = (char)('0' + t % 10); t /= 10; } while (t && n < 15);
        memcpy(buf, "type ", 5);
        for (int i = 0; i < n; i++) buf[5 + i] = tmp[n - 1 - i];
        buf[5 + n] = '\0';
        return buf;
    }
    }
}

int coli_dtype_from_name(const char *s, coli_dtype *out) {
    static const struct { const char *name; coli_dtype t; } table[] = {
        {"F32", COLI_F32}, {"F16", COLI_F16}, {"BF16", COLI_BF16},
        {"Q8_0", COLI_Q8_0}, {"Q4_0", COLI_Q4_0},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(s, table[i].name) == 0) { *out = table[i].t; return 0; }
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
