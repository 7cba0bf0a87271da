/*
 * gguf_internal.h - what the GGUF reader (gguf.c) and writer
 * (gguf_writer.c) share: format constants, the value type table, a name
 * hash index and raw access to a key's encoded value. Not for other modules.
 */
#ifndef COLI_CORE_GGUF_INTERNAL_H
#define COLI_CORE_GGUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/gguf/gguf.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ALIGNMENT 65536 /* a larger general.alignment is refused */
#define GGUF_MAX_DEPTH 8         /* array nesting: a top-level array is depth 1 */
#define GGUF_MAX_KEY_LEN 65535   /* the GGUF spec's limit on key names */
#define GGUF_MAX_NAME_LEN 1023   /* tensor names */
#define GGUF_MAX_COUNT (1 << 20) /* n_kv and n_tensors */
#define GGUF_ALIGNMENT_KEY "general.alignment"

/* Bytes of one value of a fixed-size type; 0 for STRING, ARRAY, unknown. */
size_t gguf_type_size(uint32_t t);
/* "UINT8", ..., "FLOAT64", "type 13" for unknown (thread-local buffer). */
const char *gguf_type_name(uint32_t t);
/* 1 if a is a power of two in [1, GGUF_MAX_ALIGNMENT]. */
int gguf_alignment_valid(uint64_t a);

/* The encoded value of key i as it lies in the file: from its value type
 * field to the end of the value (arrays with all their elements). */
const uint8_t *gguf_kv_raw(const gguf_file *f, int64_t i, size_t *len);

// ----------------------------------------------------------------------------
// name index: open addressing over names that live elsewhere
typedef gguf_str (*gguf_name_at)(const void *ctx, int64_t i);

typedef struct gguf_name_index {
    int64_t *slots; /* entry index + 1; 0 = empty */
    uint64_t mask;  /* slot count - 1 (a power of two) */
} gguf_name_index;

/* Room for n names at load factor <= 1/2. 0 or COLI_ENOMEM. */
int gguf_index_init(gguf_name_index *ix, int64_t n);
void gguf_index_free(gguf_name_index *ix);
/* Index of the entry named (s, len), or -1. */
int64_t gguf_index_find(const gguf_name_index *ix, const char *s, uint64_t len, gguf_name_at name_at, const void *ctx);
/* Add entry i under its name. Returns -1 if added, or the index of an
 * entry that already has that name (then nothing is added). */
int64_t gguf_index_add(gguf_name_index *ix, int64_t i, gguf_name_at name_at, const void *ctx);

#endif
