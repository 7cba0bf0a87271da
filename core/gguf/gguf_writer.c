/*
 * gguf_writer.c - write GGUF v3 files; see gguf.h.
 *
 * The output is exactly the GGUF layout llama.cpp writes, so that a file
 * rebuilt from the same keys and tensors is byte-identical: "GGUF", u32 3,
 * u64 n_tensors, u64 n_kv, the keys in the order set, the tensor infos in
 * the order added (offsets relative to the data section, each tensor's data
 * padded to the alignment), zero padding to the alignment, then the data.
 *
 * Setting a key that is already set removes the old entry and appends the
 * new one at the end, like llama.cpp's gguf_set_val_*; llama-quantize relies
 * on that when it overwrites general.file_type after copying every key.
 */
#include "core/gguf/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/gguf/gguf_internal.h"
#include "core/file_io.h"

/* One key: its name and its encoded value (u32 type field + value bytes). */
typedef struct wkv {
    char *key;
    uint8_t *blob;
    size_t blob_len;
} wkv;

typedef struct wtensor {
    char *name;
    coli_dtype type;
    int n_dims;
    int64_t ne[COLI_MAX_DIMS];
    const void *data; /* the caller's, until gguf_writer_write returns */
    size_t nbytes;
    gguf_tensor_fill fill; /* instead of data: produces it at write time */
    void *fill_ctx;
} wtensor;

struct gguf_writer {
    wkv *kvs;
    int64_t n_kv, cap_kv;
    wtensor *tensors;
    int64_t n_tensors, cap_tensors;
    gguf_name_index tensor_index; /* duplicate names, O(1) per add */
    uint32_t alignment;
};

gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (gguf_index_init(&w->tensor_index, 8) != 0) {
        free(w);
        return NULL;
    }
    return w;
}

void gguf_writer_free(gguf_writer **wp) {
    if (!wp || !*wp) return;
    gguf_writer *w = *wp;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].blob);
    }
    for (int64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->kvs);
    free(w->tensors);
    gguf_index_free(&w->tensor_index);
    free(w);
    *wp = NULL;
}

// ----------------------------------------------------------------------------
// metadata

/* A blob that starts with the u32 value type; the value follows. */
static uint8_t *s_blob(uint32_t type, size_t value_len, size_t *blob_len) {
    uint8_t *b = malloc(4 + value_len);
    if (b) memcpy(b, &type, 4);
    *blob_len = 4 + value_len;
    return b;
}

/* general.alignment decides the data layout: accept only a sane UINT32. */
static int s_check_alignment_key(gguf_writer *w, const uint8_t *blob, size_t len) {
    uint32_t type, a;
    memcpy(&type, blob, 4);
    if (type != GGUF_UINT32 || len != 8)
        return coli_fail(COLI_EINVAL, "gguf writer: %s must be a UINT32, not %s", GGUF_ALIGNMENT_KEY,
                         gguf_type_name(type));
    memcpy(&a, blob + 4, 4);
    if (!gguf_alignment_valid(a))
        return coli_fail(COLI_EINVAL, "gguf writer: bad %s %u (must be a power of two from 1 to %d)",
                         GGUF_ALIGNMENT_KEY, a, GGUF_MAX_ALIGNMENT);
    w->alignment = a;
    return 0;
}

/* Take ownership of blob and store it under key (moved to the end if the
 * key was set before). blob == NULL means its allocation failed. */
static int s_put(gguf_writer *w, const char *key, size_t key_len, uint8_t *blob, size_t blob_len) {
    int rc = 0;
    int shown = key_len < 100 ? (int)key_len : 100; /* key need not be NUL-terminated */
    if (!blob) return coli_fail(COLI_ENOMEM, "gguf writer: out of memory for key '%.*s'", shown, key ? key : "");
    if (key_len == 0 || key_len > GGUF_MAX_KEY_LEN || memchr(key, '\0', key_len))
        rc = coli_fail(COLI_EINVAL, "gguf writer: bad key name '%.*s' (1 to %d bytes, no NUL)", shown, key ? key : "",
                       GGUF_MAX_KEY_LEN);
    else if (key_len == strlen(GGUF_ALIGNMENT_KEY) && memcmp(key, GGUF_ALIGNMENT_KEY, key_len) == 0)
        rc = s_check_alignment_key(w, blob, blob_len);
    if (rc == 0 && w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *kvs = realloc(w->kvs, (size_t)cap * sizeof *kvs);
        if (!kvs)
            rc = coli_fail(COLI_ENOMEM, "gguf writer: out of memory for %lld keys", (long long)cap);
        else {
            w->kvs = kvs;
            w->cap_kv = cap;
        }
    }
    char *name = rc == 0 ? strndup(key, key_len) : NULL;
    if (rc == 0 && !name) rc = coli_fail(COLI_ENOMEM, "gguf writer: out of memory for key '%.*s'", shown, key);
    if (rc) {
        free(blob);
        return rc;
    }
    for (int64_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, name) != 0) continue;
        free(w->kvs[i].key);
        free(w->kvs[i].blob);
        memmove(&w->kvs[i], &w->kvs[i + 1], (size_t)(w->n_kv - i - 1) * sizeof *w->kvs);
        w->n_kv--;
        break;
    }
    w->kvs[w->n_kv++] = (wkv){name, blob, blob_len};
    return 0;
}

static int s_set_scalar(gguf_writer *w, const char *key, gguf_type type, const void *v) {
    size_t size = gguf_type_size(type), len;
    uint8_t *b = s_blob(type, size, &len);
    if (b) memcpy(b + 4, v, size);
    return s_put(w, key, key ? strlen(key) : 0, b, len);
}

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) { return s_set_scalar(w, key, GGUF_UINT32, &v); }
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) { return s_set_scalar(w, key, GGUF_INT32, &v); }
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v) { return s_set_scalar(w, key, GGUF_FLOAT32, &v); }

int gguf_writer_set_bool(gguf_writer *w, const char *key, int v) {
    uint8_t b = v != 0;
    return s_set_scalar(w, key, GGUF_BOOL, &b);
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    if (!v) return coli_fail(COLI_EINVAL, "gguf writer: key '%.100s': NULL string", key ? key : "");
    uint64_t n = strlen(v);
    size_t len;
    uint8_t *b = s_blob(GGUF_STRING, 8 + n, &len);
    if (b) {
        memcpy(b + 4, &n, 8);
        memcpy(b + 12, v, n);
    }
    return s_put(w, key, key ? strlen(key) : 0, b, len);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    size_t total = 12; /* element type + count */
    for (uint64_t i = 0; i < n; i++) {
        if (!v[i])
            return coli_fail(COLI_EINVAL, "gguf writer: key '%.100s': string %llu is NULL", key ? key : "",
                             (unsigned long long)i);
        total += 8 + strlen(v[i]);
    }
    size_t len;
    uint8_t *b = s_blob(GGUF_ARRAY, total, &len);
    if (b) {
        uint32_t et = GGUF_STRING;
        uint8_t *p = b + 4;
        memcpy(p, &et, 4);
        memcpy(p + 4, &n, 8);
        p += 12;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t sl = strlen(v[i]);
            memcpy(p, &sl, 8);
            memcpy(p + 8, v[i], sl);
            p += 8 + sl;
        }
    }
    return s_put(w, key, key ? strlen(key) : 0, b, len);
}

int gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *data, uint64_t n) {
    const char *k = key ? key : "";
    size_t esz = gguf_type_size(elem_type);
    if (esz == 0)
        return coli_fail(COLI_EINVAL,
                         "gguf writer: key '%.100s': array element type %s is not fixed-size "
                         "(use gguf_writer_set_arr_str or gguf_writer_copy_kv)",
                         k, gguf_type_name(elem_type));
    if (n > (SIZE_MAX - 12) / esz)
        return coli_fail(COLI_EINVAL, "gguf writer: key '%.100s': array of %llu elements is too large", k,
                         (unsigned long long)n);
    if (n > 0 && !data) return coli_fail(COLI_EINVAL, "gguf writer: key '%.100s': NULL array data", k);
    for (uint64_t i = 0; elem_type == GGUF_BOOL && i < n; i++)
        if (((const uint8_t *)data)[i] > 1)
            return coli_fail(COLI_EINVAL, "gguf writer: key '%.100s': bool element %llu is %u, not 0 or 1", k,
                             (unsigned long long)i, ((const uint8_t *)data)[i]);
    size_t len;
    uint8_t *b = s_blob(GGUF_ARRAY, 12 + (size_t)n * esz, &len);
    if (b) {
        uint32_t et = elem_type;
        memcpy(b + 4, &et, 4);
        memcpy(b + 8, &n, 8);
        if (n) memcpy(b + 16, data, (size_t)n * esz);
    }
    return s_put(w, key, key ? strlen(key) : 0, b, len);
}

int gguf_writer_copy_kv(gguf_writer *w, const gguf_file *src, int64_t i) {
    size_t raw_len;
    const uint8_t *raw = gguf_kv_raw(src, i, &raw_len);
    if (!raw)
        return coli_fail(COLI_EINVAL, "gguf writer: copy_kv: key index %lld out of range (source has %lld keys)",
                         (long long)i, (long long)gguf_n_kv(src));
    gguf_str key = gguf_key_name(src, i);
    uint8_t *b = malloc(raw_len);
    if (b) memcpy(b, raw, raw_len);
    return s_put(w, key.ptr, (size_t)key.len, b, raw_len);
}

// ----------------------------------------------------------------------------
// tensors

static gguf_str s_wtensor_name(const void *ctx, int64_t i) {
    const char *name = ((const gguf_writer *)ctx)->tensors[i].name;
    return (gguf_str){name, strlen(name)};
}

/* Room for one more tensor, in the array and in the name index. */
static int s_grow_tensors(gguf_writer *w) {
    if (w->n_tensors < w->cap_tensors) return 0;
    int64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
    wtensor *t = realloc(w->tensors, (size_t)cap * sizeof *t);
    if (!t) return coli_fail(COLI_ENOMEM, "gguf writer: out of memory for %lld tensors", (long long)cap);
    w->tensors = t;
    w->cap_tensors = cap;
    gguf_index_free(&w->tensor_index);
    int rc = gguf_index_init(&w->tensor_index, cap);
    for (int64_t i = 0; rc == 0 && i < w->n_tensors; i++) gguf_index_add(&w->tensor_index, i, s_wtensor_name, w);
    return rc;
}

/* Expected byte size of a tensor; 0 and an error if the shape is invalid. */
static int s_tensor_bytes(const char *name, coli_dtype type, int n_dims, const int64_t *ne, size_t *out) {
    if (!coli_dtype_valid((uint32_t)type) && type != COLI_I32) /* I32: integer tables, copied as they are */
        return coli_fail(COLI_EINVAL, "gguf writer: tensor '%s': unsupported type %s", name, coli_dtype_name(type));
    if (n_dims < 1 || n_dims > COLI_MAX_DIMS)
        return coli_fail(COLI_EINVAL, "gguf writer: tensor '%s': n_dims %d (must be 1 to 4)", name, n_dims);
    int64_t nelems = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 1)
            return coli_fail(COLI_EINVAL, "gguf writer: tensor '%s': dim %d is %lld (must be >= 1)", name, d,
                             (long long)ne[d]);
        if (__builtin_mul_overflow(nelems, ne[d], &nelems))
            return coli_fail(COLI_EINVAL, "gguf writer: tensor '%s': product of dims overflows int64", name);
    }
    int64_t blk = coli_dtype_block_elems(type);
    if (ne[0] % blk != 0)
        return coli_fail(COLI_EINVAL,
                         "gguf writer: tensor '%s': row length %lld is not a multiple of the %s "
                         "block size %lld",
                         name, (long long)ne[0], coli_dtype_name(type), (long long)blk);
    uint64_t bytes;
    if (__builtin_mul_overflow((uint64_t)coli_row_bytes(type, ne[0]), (uint64_t)(nelems / ne[0]), &bytes) ||
        bytes > SIZE_MAX)
        return coli_fail(COLI_EINVAL, "gguf writer: tensor '%s': data size overflows", name);
    *out = (size_t)bytes;
    return 0;
}

static int s_add_tensor(gguf_writer *w, const char *name, coli_dtype type, int n_dims, const int64_t *ne,
                        const void *data, size_t nbytes, gguf_tensor_fill fill, void *ctx) {
    size_t expect = 0;
    int rc;
    if (!name || !name[0] || strlen(name) > GGUF_MAX_NAME_LEN)
        return coli_fail(COLI_EINVAL, "gguf writer: bad tensor name '%.100s' (1 to %d bytes)", name ? name : "",
                         GGUF_MAX_NAME_LEN);
    if ((rc = s_tensor_bytes(name, type, n_dims, ne, &expect))) return rc;
    if (nbytes != expect)
        return coli_fail(COLI_EINVAL, "gguf writer: tensor '%s': %zu bytes of data, shape and type need %zu", name,
                         nbytes, expect);
    if (!data && !fill) return coli_fail(COLI_EINVAL, "gguf writer: tensor '%s': NULL data", name);
    if (gguf_index_find(&w->tensor_index, name, strlen(name), s_wtensor_name, w) >= 0)
        return coli_fail(COLI_EINVAL, "gguf writer: duplicate tensor name '%s'", name);
    if ((rc = s_grow_tensors(w))) return rc;
    wtensor *t = &w->tensors[w->n_tensors];
    *t = (wtensor){.name = strdup(name),
                   .type = type,
                   .n_dims = n_dims,
                   .data = data,
                   .nbytes = nbytes,
                   .fill = fill,
                   .fill_ctx = ctx};
    if (!t->name) return coli_fail(COLI_ENOMEM, "gguf writer: out of memory for tensor '%s'", name);
    for (int d = 0; d < COLI_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    gguf_index_add(&w->tensor_index, w->n_tensors++, s_wtensor_name, w);
    return 0;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, coli_dtype type, int n_dims, const int64_t *ne,
                           const void *data, size_t nbytes) {
    return s_add_tensor(w, name, type, n_dims, ne, data, nbytes, NULL, NULL);
}

int gguf_writer_add_tensor_fill(gguf_writer *w, const char *name, coli_dtype type, int n_dims, const int64_t *ne,
                                size_t nbytes, gguf_tensor_fill fill, void *ctx) {
    if (!fill) return coli_fail(COLI_EINVAL, "gguf writer: tensor '%s': NULL fill function", name ? name : "");
    return s_add_tensor(w, name, type, n_dims, ne, NULL, nbytes, fill, ctx);
}

// ----------------------------------------------------------------------------
// output

static size_t s_pad(size_t n, size_t a) { return (a - n % a) % a; }

static void s_put_str(FILE *fp, const char *s, uint64_t len) {
    fwrite(&len, 8, 1, fp);
    fwrite(s, 1, len, fp);
}

static void s_put_zeros(FILE *fp, size_t n) {
    static const uint8_t zeros[256];
    for (size_t k; n > 0; n -= k) {
        k = n < sizeof zeros ? n : sizeof zeros;
        fwrite(zeros, 1, k, fp);
    }
}

/* Header, keys and tensor infos; returns the bytes written. Errors are
 * collected by ferror() at the end. */
static size_t s_write_header(gguf_writer *w, FILE *fp) {
    uint32_t version = 3;
    uint64_t n_tensors = (uint64_t)w->n_tensors, n_kv = (uint64_t)w->n_kv, offset = 0;
    size_t pos = 4 + 4 + 8 + 8;
    fwrite("GGUF", 1, 4, fp);
    fwrite(&version, 4, 1, fp);
    fwrite(&n_tensors, 8, 1, fp);
    fwrite(&n_kv, 8, 1, fp);
    for (int64_t i = 0; i < w->n_kv; i++) {
        uint64_t klen = strlen(w->kvs[i].key);
        s_put_str(fp, w->kvs[i].key, klen);
        fwrite(w->kvs[i].blob, 1, w->kvs[i].blob_len, fp);
        pos += 8 + (size_t)klen + w->kvs[i].blob_len;
    }
    for (int64_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        uint64_t nlen = strlen(t->name);
        uint32_t n_dims = (uint32_t)t->n_dims, type = (uint32_t)t->type;
        s_put_str(fp, t->name, nlen);
        fwrite(&n_dims, 4, 1, fp);
        fwrite(t->ne, 8, n_dims, fp);
        fwrite(&type, 4, 1, fp);
        fwrite(&offset, 8, 1, fp);
        pos += 8 + (size_t)nlen + 4 + 8 * (size_t)n_dims + 4 + 8;
        offset += t->nbytes + s_pad(t->nbytes, w->alignment);
    }
    return pos;
}

/* One tensor's data: the caller's bytes, or what its fill function writes
 * (which must be exactly nbytes: the offsets in the header say so). */
static int s_write_data(const wtensor *t, FILE *fp) {
    if (!t->fill) {
        fwrite(t->data, 1, t->nbytes, fp);
        return 0;
    }
    off_t start = ftello(fp);
    int rc = t->fill(t->fill_ctx, fp);
    off_t written = ftello(fp) - start;
    if (!rc && !ferror(fp) && written != (off_t)t->nbytes)
        rc = coli_fail(COLI_EINTERNAL, "gguf writer: tensor '%s': fill wrote %lld bytes, shape and type need %zu",
                       t->name, (long long)written, t->nbytes);
    return rc;
}

int gguf_writer_write(gguf_writer *w, const char *path) {
    /* a temporary renamed into place: a failed write leaves no half model,
     * and an existing file (perhaps the mapped input) is never truncated */
    coli_outfile out;
    int rc = coli_outfile_open(&out, "output", path, 0);
    if (rc) return rc;
    FILE *fp = out.fp;
    setvbuf(fp, NULL, _IOFBF, 1 << 20);
    size_t header = s_write_header(w, fp);
    s_put_zeros(fp, s_pad(header, w->alignment));
    for (int64_t i = 0; i < w->n_tensors && !ferror(fp) && !rc; i++) {
        rc = s_write_data(&w->tensors[i], fp);
        s_put_zeros(fp, s_pad(w->tensors[i].nbytes, w->alignment));
    }
    if (rc) {
        coli_outfile_discard(&out);
        return rc;
    }
    return coli_outfile_commit(&out);
}
