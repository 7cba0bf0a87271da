/* gguf_common.c - value type table and the name hash index shared by the
 * GGUF reader and writer; see gguf_internal.h. */
#include "core/gguf/gguf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/hash.h"

size_t gguf_type_size(uint32_t t) {
    switch (t) {
    case GGUF_UINT8:
    case GGUF_INT8:
    case GGUF_BOOL: return 1;
    case GGUF_UINT16:
    case GGUF_INT16: return 2;
    case GGUF_UINT32:
    case GGUF_INT32:
    case GGUF_FLOAT32: return 4;
    case GGUF_UINT64:
    case GGUF_INT64:
    case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

const char *gguf_type_name(uint32_t t) {
    static const char *const names[] = {
        "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",   "FLOAT32",
        "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64",
    };
    static _Thread_local char buf[24];
    if (t < sizeof names / sizeof names[0]) return names[t];
    snprintf(buf, sizeof buf, "type %u", t);
    return buf;
}

int gguf_alignment_valid(uint64_t a) { return a >= 1 && a <= GGUF_MAX_ALIGNMENT && (a & (a - 1)) == 0; }

// ----------------------------------------------------------------------------
// name index

int gguf_index_init(gguf_name_index *ix, int64_t n) {
    uint64_t slots = 16;
    while (slots < (uint64_t)n * 2) slots *= 2;
    ix->slots = calloc(slots, sizeof *ix->slots);
    ix->mask = slots - 1;
    if (!ix->slots)
        return coli_fail(COLI_ENOMEM, "gguf: out of memory for a name index of %llu slots", (unsigned long long)slots);
    return 0;
}

void gguf_index_free(gguf_name_index *ix) {
    free(ix->slots);
    ix->slots = NULL;
    ix->mask = 0;
}

/* Slot holding (s, len), or the empty slot where it would go. */
static uint64_t s_probe(const gguf_name_index *ix, const char *s, uint64_t len, gguf_name_at name_at, const void *ctx) {
    uint64_t slot = coli_fnv1a(s, (size_t)len, COLI_FNV1A_SEED) & ix->mask;
    for (;;) {
        int64_t e = ix->slots[slot];
        if (e == 0) return slot;
        gguf_str other = name_at(ctx, e - 1);
        if (other.len == len && memcmp(other.ptr, s, len) == 0) return slot;
        slot = (slot + 1) & ix->mask;
    }
}

int64_t gguf_index_find(const gguf_name_index *ix, const char *s, uint64_t len, gguf_name_at name_at, const void *ctx) {
    if (!ix->slots) return -1;
    return ix->slots[s_probe(ix, s, len, name_at, ctx)] - 1;
}

int64_t gguf_index_add(gguf_name_index *ix, int64_t i, gguf_name_at name_at, const void *ctx) {
    gguf_str name = name_at(ctx, i);
    uint64_t slot = s_probe(ix, name.ptr, name.len, name_at, ctx);
    if (ix->slots[slot] != 0) return ix->slots[slot] - 1;
    ix->slots[slot] = i + 1;
    return -1;
}
