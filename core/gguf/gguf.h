/*
 * gguf.h - read GGUF v2/v3 files through mmap, and write them.
 *
 * The reader maps the file read-only and validates everything before the
 * first accessor call can see it: every count, length, offset and shape is
 * checked against the file size and sane limits. A file that passes
 * gguf_open can be walked with the accessors below without further bounds
 * checks. Weights are never copied: tensor views point into the mapping.
 *
 * Checks done here (each has its own one-line message, see docs/gguf.md):
 * wrong magic, unsupported version, truncated header, string or array
 * length past end of file, bad metadata value type, nesting too deep,
 * tensor data past end of file, misaligned data offset, bad alignment,
 * n_dims > 4, zero or negative dim, product of dims overflowing, unknown
 * tensor type, row length not a multiple of the block size, duplicate
 * tensor name, duplicate key, overlapping tensors.
 * Checks that need to know the model (missing tensor, shape vs metadata,
 * unknown architecture) belong to the model loader.
 */
#ifndef COLI_CORE_GGUF_H
#define COLI_CORE_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/tensor.h"

typedef enum gguf_type {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
} gguf_type;

/* A string inside the mapping: not NUL-terminated. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_file gguf_file;

/* Map and validate path. Returns 0 and *out, or a negative coli_status with
 * the message in coli_last_error() (which names the file). */
int gguf_open(const char *path, gguf_file **out);
/* Validate a buffer already in memory (fuzzing, tests). The buffer must
 * outlive the gguf_file; it is not copied. */
int gguf_open_memory(const void *data, size_t size, gguf_file **out);
void gguf_close(gguf_file **f);

uint32_t gguf_version(const gguf_file *f);
const void *gguf_base(const gguf_file *f);   /* start of the mapping */
size_t gguf_size(const gguf_file *f);        /* bytes in the file */
size_t gguf_data_offset(const gguf_file *f); /* start of the tensor data section */
size_t gguf_alignment(const gguf_file *f);

// ----------------------------------------------------------------------------
// metadata
int64_t gguf_n_kv(const gguf_file *f);
int64_t gguf_find_key(const gguf_file *f, const char *key); /* index or -1 */
gguf_str gguf_key_name(const gguf_file *f, int64_t i);
gguf_type gguf_kv_type(const gguf_file *f, int64_t i);

/* Typed getters by key. Integer getters accept any integer type whose value
 * fits; gguf_get_f32 accepts FLOAT32/FLOAT64. Return 0, COLI_EFORMAT if the
 * key is missing ("missing metadata key 'x'") or has the wrong type / an
 * out-of-range value. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out);
int gguf_get_bool(const gguf_file *f, const char *key, int *out);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);

/* Arrays. gguf_get_arr gives the element type and count. For fixed-size
 * element types *data points at the packed little-endian elements. For
 * string arrays use gguf_arr_str (O(1): the reader indexes them). Nested
 * arrays are validated but only their count is exposed. */
int gguf_get_arr(const gguf_file *f, const char *key, gguf_type *elem_type, uint64_t *n, const void **data);
int gguf_arr_str(const gguf_file *f, const char *key, uint64_t i, gguf_str *out);

// ----------------------------------------------------------------------------
// tensors
int64_t gguf_n_tensors(const gguf_file *f);
const coli_tensor *gguf_tensor(const gguf_file *f, int64_t i);
const coli_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* NULL if absent */
/* Offset of a tensor's data from the start of the file. */
size_t gguf_tensor_offset(const gguf_file *f, int64_t i);

/* ---- writer ----
 * Builds a GGUF v3 file in memory order: metadata in the order set, tensors
 * in the order added, data aligned to 32 bytes. Tensor data is referenced,
 * not copied, until gguf_writer_write returns. */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer **w);
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, int v);
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
/* elem_type: a fixed-size type; data holds n packed elements. */
int gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *data, uint64_t n);
/* Copy key i of src (any type, arrays included) verbatim. */
int gguf_writer_copy_kv(gguf_writer *w, const gguf_file *src, int64_t i);
int gguf_writer_add_tensor(gguf_writer *w, const char *name, coli_dtype type, int n_dims, const int64_t *ne,
                           const void *data, size_t nbytes);
/* A tensor whose data is produced while the file is written, so a writer of
 * a model larger than memory holds one tensor's slice at a time: fill writes
 * exactly nbytes to fp (the writer checks) and returns 0 or a coli_status. */
typedef int (*gguf_tensor_fill)(void *ctx, FILE *fp);
int gguf_writer_add_tensor_fill(gguf_writer *w, const char *name, coli_dtype type, int n_dims, const int64_t *ne,
                                size_t nbytes, gguf_tensor_fill fill, void *ctx);
/* The file, whole or not at all (core/file_io.h: a temporary renamed into
 * place; an existing path is replaced, never truncated). 0 or COLI_EIO. */
int gguf_writer_write(gguf_writer *w, const char *path);

#endif
