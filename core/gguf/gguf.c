/*
 * gguf.c - GGUF v2/v3 reader: map the file, validate every byte the
 * accessors will later trust, index keys and tensors. See gguf.h, and
 * docs/gguf.md for the list of messages.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 * n_kv x (string key, u32 type, value), n_tensors x (string name, u32 n_dims,
 * u64 ne[n_dims], u32 type, u64 offset), zero padding to the alignment, then
 * the tensor data; a tensor's offset is relative to the data section.
 * A string is u64 length + bytes; an array is u32 element type + u64 count +
 * elements. v1 used 32-bit counts and is refused.
 */
#include "core/gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file_io.h"
#include "core/gguf/gguf_internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader maps little-endian files directly: little-endian hosts only"
#endif

/* Smallest possible encodings, to bound counts by what the file can hold:
 * a key is a u64 length, >= 1 byte of name, a u32 type and >= 1 byte of
 * value; a tensor info is a u64 length, >= 1 byte of name, u32 n_dims,
 * >= one u64 dim, u32 type, u64 offset. */
#define MIN_KV_BYTES 14
#define MIN_TINFO_BYTES 33

typedef struct gguf_kv {
    gguf_str key;
    gguf_type type;
    const uint8_t *raw; /* the value type field; raw_len bytes encode the value */
    size_t raw_len;
    const uint8_t *value; /* scalar or string: the value; array: first element */
    gguf_type elem_type;  /* arrays only */
    uint64_t n;           /* arrays only: element count */
    const uint8_t **strs; /* string arrays: each element's length field (O(1) lookup) */
} gguf_kv;

/* An open GGUF file: a read-only mapping (or a caller's buffer) plus the
 * indexes built at open time. Nothing here points outside base..base+size. */
struct gguf_file {
    char *name; /* path, or "<memory>", for messages */
    const uint8_t *base;
    size_t size;
    int mapped; /* 1: base is our mmap, unmapped on close */
    uint32_t version;
    size_t alignment;
    size_t data_offset;
    int64_t n_kv;
    gguf_kv *kvs;
    gguf_name_index kv_index;
    int64_t n_tensors;
    coli_tensor *tensors;
    gguf_str *tnames;  /* tensor names as they lie in the file */
    uint64_t *offsets; /* tensor data offsets, relative to data_offset */
    char *names;       /* one allocation: every tensor name, NUL-terminated */
    gguf_name_index tensor_index;
};

/* Parse position plus the thing being read, e.g. "tensor 'x'", for messages. */
typedef struct cursor {
    gguf_file *f;
    size_t pos;
    char what[160];
} cursor;

// ----------------------------------------------------------------------------
// small helpers

/* A bounded, printable copy of a name taken from the file: messages stay on
 * one line whatever bytes a hostile file puts in its names. */
static void s_printable(char *buf, size_t cap, const char *s, uint64_t len) {
    size_t n = 0, max = cap > 4 ? cap - 4 : 0;
    for (uint64_t i = 0; i < len && n < max; i++) {
        unsigned char ch = (unsigned char)s[i];
        buf[n++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (len > max && cap > 4) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
}

static void s_describe(cursor *c, const char *kind, gguf_str name) {
    char printable[100];
    s_printable(printable, sizeof printable, name.ptr, name.len);
    snprintf(c->what, sizeof c->what, "%s '%s'", kind, printable);
}

static gguf_str s_kv_name(const void *ctx, int64_t i) { return ((const gguf_file *)ctx)->kvs[i].key; }

static gguf_str s_tensor_name(const void *ctx, int64_t i) { return ((const gguf_file *)ctx)->tnames[i]; }

static size_t s_remaining(const cursor *c) { return c->f->size - c->pos; }

static int s_read(cursor *c, void *out, size_t n, const char *field) {
    if (n > s_remaining(c))
        return coli_fail(COLI_EFORMAT, "%s: truncated header: %s%s%s needs %zu bytes at offset %zu, file has %zu",
                         c->f->name, c->what, c->what[0] ? " " : "", field, n, c->pos, c->f->size);
    memcpy(out, c->f->base + c->pos, n);
    c->pos += n;
    return 0;
}

static int s_u32(cursor *c, uint32_t *v, const char *field) { return s_read(c, v, 4, field); }
static int s_u64(cursor *c, uint64_t *v, const char *field) { return s_read(c, v, 8, field); }

static int s_string(cursor *c, const char *field, gguf_str *out) {
    uint64_t len = 0;
    int rc = s_u64(c, &len, field);
    if (rc) return rc;
    if (len > s_remaining(c))
        return coli_fail(COLI_EFORMAT, "%s: %s: %s string length %llu past end of file (offset %zu, file size %zu)",
                         c->f->name, c->what, field, (unsigned long long)len, c->pos, c->f->size);
    out->ptr = (const char *)c->f->base + c->pos;
    out->len = len;
    c->pos += len;
    return 0;
}

/* Names end up in C strings and messages: refuse empty, huge, or NUL-carrying ones. */
static int s_check_name(cursor *c, gguf_str name, uint64_t max_len) {
    if (name.len == 0) return coli_fail(COLI_EFORMAT, "%s: %s: empty name", c->f->name, c->what);
    if (name.len > max_len)
        return coli_fail(COLI_EFORMAT, "%s: %s: name length %llu > %llu", c->f->name, c->what,
                         (unsigned long long)name.len, (unsigned long long)max_len);
    if (memchr(name.ptr, '\0', name.len))
        return coli_fail(COLI_EFORMAT, "%s: %s: name contains a NUL byte", c->f->name, c->what);
    return 0;
}

static int s_check_bools(cursor *c, const uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1) return coli_fail(COLI_EFORMAT, "%s: %s: bool value %u is not 0 or 1", c->f->name, c->what, p[i]);
    return 0;
}

// ----------------------------------------------------------------------------
// metadata values

static int s_parse_array(cursor *c, int depth, gguf_kv *kv);

/* Validate and step over one value of type t; depth is the array nesting
 * of the value's container (0 for a top-level scalar). */
static int s_parse_value(cursor *c, uint32_t t, int depth) {
    size_t size = gguf_type_size(t);
    if (size) {
        if (size > s_remaining(c)) {
            uint8_t scratch[8];
            return s_read(c, scratch, size, "value");
        }
        int rc = t == GGUF_BOOL ? s_check_bools(c, c->f->base + c->pos, 1) : 0;
        c->pos += size;
        return rc;
    }
    if (t == GGUF_STRING) {
        gguf_str s;
        return s_string(c, "value", &s);
    }
    if (t == GGUF_ARRAY) return s_parse_array(c, depth + 1, NULL);
    return coli_fail(COLI_EFORMAT, "%s: %s: bad value type %u", c->f->name, c->what, t);
}

/* Fixed-size elements: one bounds check for the whole array. */
static int s_skip_packed(cursor *c, uint32_t et, uint64_t n) {
    size_t esz = gguf_type_size(et);
    if (n > UINT64_MAX / esz)
        return coli_fail(COLI_EFORMAT, "%s: %s: array of %llu %s elements: byte size overflows", c->f->name, c->what,
                         (unsigned long long)n, gguf_type_name(et));
    if (n * esz > s_remaining(c))
        return coli_fail(COLI_EFORMAT,
                         "%s: %s: array of %llu %s elements (%llu bytes) past end of file "
                         "(offset %zu, file size %zu)",
                         c->f->name, c->what, (unsigned long long)n, gguf_type_name(et), (unsigned long long)(n * esz),
                         c->pos, c->f->size);
    int rc = et == GGUF_BOOL ? s_check_bools(c, c->f->base + c->pos, n) : 0;
    c->pos += (size_t)(n * esz);
    return rc;
}

/* An array at c->pos (after its key's type field). kv is set for top-level
 * arrays only: they record their shape and, for strings, the element index. */
static int s_parse_array(cursor *c, int depth, gguf_kv *kv) {
    uint32_t et;
    uint64_t n;
    int rc;
    if (depth > GGUF_MAX_DEPTH)
        return coli_fail(COLI_EFORMAT, "%s: %s: arrays nested deeper than %d levels", c->f->name, c->what,
                         GGUF_MAX_DEPTH);
    if ((rc = s_u32(c, &et, "array element type")) || (rc = s_u64(c, &n, "array length"))) return rc;
    if (et > GGUF_FLOAT64) return coli_fail(COLI_EFORMAT, "%s: %s: bad array element type %u", c->f->name, c->what, et);
    if (kv) {
        kv->elem_type = (gguf_type)et;
        kv->n = n;
        kv->value = c->f->base + c->pos;
    }
    if (gguf_type_size(et)) return s_skip_packed(c, et, n);

    /* strings take >= 8 bytes each, nested arrays >= 12: refuse counts the
     * rest of the file cannot hold before allocating or looping */
    uint64_t min_elem = et == GGUF_STRING ? 8 : 12;
    if (n > s_remaining(c) / min_elem)
        return coli_fail(COLI_EFORMAT,
                         "%s: %s: array of %llu %s elements past end of file "
                         "(offset %zu, file size %zu)",
                         c->f->name, c->what, (unsigned long long)n, gguf_type_name(et), c->pos, c->f->size);
    if (kv && et == GGUF_STRING && n > 0) {
        kv->strs = malloc((size_t)n * sizeof *kv->strs);
        if (!kv->strs)
            return coli_fail(COLI_ENOMEM, "%s: %s: out of memory indexing %llu strings", c->f->name, c->what,
                             (unsigned long long)n);
    }
    for (uint64_t i = 0; i < n; i++) {
        if (kv && kv->strs) kv->strs[i] = c->f->base + c->pos;
        if ((rc = s_parse_value(c, et, depth))) return rc;
    }
    return 0;
}

static int s_parse_kv(cursor *c, int64_t i) {
    gguf_file *f = c->f;
    gguf_kv *kv = &f->kvs[i];
    uint32_t type;
    int rc;
    snprintf(c->what, sizeof c->what, "metadata key #%lld", (long long)i);
    if ((rc = s_string(c, "name", &kv->key)) || (rc = s_check_name(c, kv->key, GGUF_MAX_KEY_LEN))) return rc;
    s_describe(c, "metadata key", kv->key);
    int64_t dup = gguf_index_add(&f->kv_index, i, s_kv_name, f);
    if (dup >= 0)
        return coli_fail(COLI_EFORMAT, "%s: duplicate %s (entries #%lld and #%lld)", f->name, c->what, (long long)dup,
                         (long long)i);
    size_t start = c->pos;
    if ((rc = s_u32(c, &type, "value type"))) return rc;
    kv->type = (gguf_type)type;
    kv->raw = f->base + start;
    if (type == GGUF_ARRAY) {
        rc = s_parse_array(c, 1, kv);
    } else {
        kv->value = f->base + c->pos;
        rc = s_parse_value(c, type, 0);
    }
    kv->raw_len = c->pos - start;
    return rc;
}

// ----------------------------------------------------------------------------
// header

static int s_check_count(gguf_file *f, const char *what, uint64_t n, size_t room, size_t min_bytes) {
    if (n > room / min_bytes)
        return coli_fail(COLI_EFORMAT, "%s: %s %llu is more than a file of %zu bytes can hold", f->name, what,
                         (unsigned long long)n, f->size);
    if (n > GGUF_MAX_COUNT)
        return coli_fail(COLI_EFORMAT, "%s: %s %llu exceeds the limit of %d", f->name, what, (unsigned long long)n,
                         GGUF_MAX_COUNT);
    return 0;
}

static int s_parse_header(cursor *c, uint64_t *n_tensors, uint64_t *n_kv) {
    gguf_file *f = c->f;
    char magic[4];
    int rc;
    if (f->size == 0) return coli_fail(COLI_EFORMAT, "%s: empty file (0 bytes)", f->name);
    if ((rc = s_read(c, magic, 4, "magic"))) return rc;
    if (memcmp(magic, "GGUF", 4) != 0)
        return coli_fail(COLI_EFORMAT, "%s: bad magic %02x %02x %02x %02x (expected \"GGUF\"): not a GGUF file",
                         f->name, (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2], (uint8_t)magic[3]);
    if ((rc = s_u32(c, &f->version, "version"))) return rc;
    if (f->version != 2 && f->version != 3)
        return coli_fail(COLI_EUNSUPPORTED, "%s: GGUF version %u is not supported (only 2 and 3)%s", f->name,
                         f->version, (f->version & 0xffff) == 0 && f->version ? " (a big-endian file?)" : "");
    if ((rc = s_u64(c, n_tensors, "n_tensors")) || (rc = s_u64(c, n_kv, "n_kv"))) return rc;
    size_t room = s_remaining(c);
    if ((rc = s_check_count(f, "n_kv", *n_kv, room, MIN_KV_BYTES)) ||
        (rc = s_check_count(f, "n_tensors", *n_tensors, room, MIN_TINFO_BYTES)))
        return rc;
    if (*n_kv * MIN_KV_BYTES + *n_tensors * MIN_TINFO_BYTES > room)
        return coli_fail(COLI_EFORMAT, "%s: n_kv %llu and n_tensors %llu are more than a file of %zu bytes can hold",
                         f->name, (unsigned long long)*n_kv, (unsigned long long)*n_tensors, f->size);
    return 0;
}

static int s_read_alignment(gguf_file *f) {
    int64_t i = gguf_find_key(f, GGUF_ALIGNMENT_KEY);
    uint32_t a;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (i < 0) return 0;
    if (f->kvs[i].type != GGUF_UINT32)
        return coli_fail(COLI_EFORMAT, "%s: bad %s: type %s, expected UINT32", f->name, GGUF_ALIGNMENT_KEY,
                         gguf_type_name(f->kvs[i].type));
    memcpy(&a, f->kvs[i].value, 4);
    if (!gguf_alignment_valid(a))
        return coli_fail(COLI_EFORMAT, "%s: bad %s %u (must be a power of two from 1 to %d)", f->name,
                         GGUF_ALIGNMENT_KEY, a, GGUF_MAX_ALIGNMENT);
    f->alignment = a;
    return 0;
}

// ----------------------------------------------------------------------------
// tensor infos

/* GGML's type ids, so an unsupported tensor is named the way llama.cpp names it. */
static const char *s_ggml_type_name(uint32_t t) {
    static const char *const names[] = {
        [0] = "F32",     [1] = "F16",    [2] = "Q4_0",     [3] = "Q4_1",    [6] = "Q5_0",     [7] = "Q5_1",
        [8] = "Q8_0",    [9] = "Q8_1",   [10] = "Q2_K",    [11] = "Q3_K",   [12] = "Q4_K",    [13] = "Q5_K",
        [14] = "Q6_K",   [15] = "Q8_K",  [16] = "IQ2_XXS", [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S",
        [20] = "IQ4_NL", [21] = "IQ3_S", [22] = "IQ2_S",   [23] = "IQ4_XS", [24] = "I8",      [25] = "I16",
        [26] = "I32",    [27] = "I64",   [28] = "F64",     [29] = "IQ1_M",  [30] = "BF16",    [34] = "TQ1_0",
        [35] = "TQ2_0",  [39] = "MXFP4",
    };
    if (t < sizeof names / sizeof names[0] && names[t]) return names[t];
    return "unknown";
}

/* Shape and type of tensor t (raw dims from the file): element count and
 * byte size must fit int64, rows must hold whole blocks. */
static int s_check_shape(cursor *c, coli_tensor *t, uint32_t n_dims, const uint64_t *ne, uint32_t type) {
    const char *fn = c->f->name;
    int64_t nelems = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0) return coli_fail(COLI_EFORMAT, "%s: %s: dim %u is 0 (every dim must be >= 1)", fn, c->what, d);
        if (ne[d] > INT64_MAX)
            return coli_fail(COLI_EFORMAT, "%s: %s: dim %u = %llu does not fit int64", fn, c->what, d,
                             (unsigned long long)ne[d]);
        if (__builtin_mul_overflow(nelems, (int64_t)ne[d], &nelems))
            return coli_fail(COLI_EFORMAT, "%s: %s: product of dims overflows int64 at dim %u", fn, c->what, d);
        t->ne[d] = (int64_t)ne[d];
    }
    for (uint32_t d = n_dims; d < COLI_MAX_DIMS; d++) t->ne[d] = 1;
    t->n_dims = (int)n_dims;
    /* (Q8_1 and Q8_K are activation formats: ggml never stores weights in
     * them; I32 holds integer tables, which only their reader uses) */
    if (!coli_dtype_valid(type) && type != COLI_I32)
        return coli_fail(COLI_EUNSUPPORTED,
                         "%s: %s: tensor type %s (%u) is not supported "
                         "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, "
                         "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ1_0, TQ2_0, MXFP4, IQ2_XXS, IQ3_XXS, IQ2_XS, IQ3_S, "
                         "IQ2_S, IQ1_S, IQ1_M)",
                         fn, c->what, s_ggml_type_name(type), type);
    t->type = (coli_dtype)type;
    int64_t blk = coli_dtype_block_elems(t->type);
    if (t->ne[0] % blk != 0)
        return coli_fail(COLI_EFORMAT, "%s: %s: row length ne[0] = %lld is not a multiple of the %s block size %lld",
                         fn, c->what, (long long)t->ne[0], coli_dtype_name(type), (long long)blk);
    uint64_t row_bytes, nbytes;
    if (__builtin_mul_overflow((uint64_t)(t->ne[0] / blk), (uint64_t)coli_dtype_block_bytes(t->type), &row_bytes) ||
        __builtin_mul_overflow(row_bytes, (uint64_t)(nelems / t->ne[0]), &nbytes) || nbytes > SIZE_MAX)
        return coli_fail(COLI_EFORMAT, "%s: %s: data size overflows", fn, c->what);
    t->nbytes = (size_t)nbytes;
    return 0;
}

static int s_parse_tensor_info(cursor *c, int64_t i) {
    gguf_file *f = c->f;
    uint32_t n_dims, type;
    uint64_t ne[COLI_MAX_DIMS];
    int rc;
    snprintf(c->what, sizeof c->what, "tensor #%lld", (long long)i);
    if ((rc = s_string(c, "name", &f->tnames[i])) || (rc = s_check_name(c, f->tnames[i], GGUF_MAX_NAME_LEN))) return rc;
    s_describe(c, "tensor", f->tnames[i]);
    int64_t dup = gguf_index_add(&f->tensor_index, i, s_tensor_name, f);
    if (dup >= 0)
        return coli_fail(COLI_EFORMAT, "%s: duplicate tensor name: %s (tensors #%lld and #%lld)", f->name, c->what,
                         (long long)dup, (long long)i);
    if ((rc = s_u32(c, &n_dims, "n_dims"))) return rc;
    if (n_dims == 0 || n_dims > COLI_MAX_DIMS)
        return coli_fail(COLI_EFORMAT, "%s: %s: n_dims %u %s", f->name, c->what, n_dims,
                         n_dims ? "> 4" : "(must be 1 to 4)");
    for (uint32_t d = 0; d < n_dims; d++)
        if ((rc = s_u64(c, &ne[d], "ne"))) return rc;
    if ((rc = s_u32(c, &type, "type")) || (rc = s_u64(c, &f->offsets[i], "data offset"))) return rc;
    return s_check_shape(c, &f->tensors[i], n_dims, ne, type);
}

/* Give every tensor a NUL-terminated name, all in one allocation. */
static int s_copy_names(gguf_file *f) {
    size_t total = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) total += (size_t)f->tnames[i].len + 1;
    f->names = malloc(total ? total : 1);
    if (!f->names) return coli_fail(COLI_ENOMEM, "%s: out of memory for %zu bytes of tensor names", f->name, total);
    char *p = f->names;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        memcpy(p, f->tnames[i].ptr, f->tnames[i].len);
        p[f->tnames[i].len] = '\0';
        f->tensors[i].name = p;
        p += f->tnames[i].len + 1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// tensor data

typedef struct span {
    uint64_t offset;
    size_t nbytes;
    int64_t index;
} span;

static int s_span_cmp(const void *a, const void *b) {
    uint64_t x = ((const span *)a)->offset, y = ((const span *)b)->offset;
    return (x > y) - (x < y);
}

static int s_check_overlaps(gguf_file *f) {
    if (f->n_tensors < 2) return 0;
    span *s = malloc((size_t)f->n_tensors * sizeof *s);
    if (!s) return coli_fail(COLI_ENOMEM, "%s: out of memory sorting %lld tensors", f->name, (long long)f->n_tensors);
    for (int64_t i = 0; i < f->n_tensors; i++) s[i] = (span){f->offsets[i], f->tensors[i].nbytes, i};
    qsort(s, (size_t)f->n_tensors, sizeof *s, s_span_cmp);
    int rc = 0;
    for (int64_t i = 1; i < f->n_tensors && rc == 0; i++) {
        if (s[i - 1].offset + s[i - 1].nbytes <= s[i].offset) continue;
        char a[100], b[100];
        s_printable(a, sizeof a, f->tensors[s[i - 1].index].name, f->tnames[s[i - 1].index].len);
        s_printable(b, sizeof b, f->tensors[s[i].index].name, f->tnames[s[i].index].len);
        rc = coli_fail(
            COLI_EFORMAT, "%s: tensors '%s' and '%s' overlap (data at offset %llu, %zu bytes, and at offset %llu)",
            f->name, a, b, (unsigned long long)s[i - 1].offset, s[i - 1].nbytes, (unsigned long long)s[i].offset);
    }
    free(s);
    return rc;
}

/* Place the data section after the header and every tensor inside it. */
static int s_place_data(gguf_file *f, size_t header_end) {
    size_t a = f->alignment;
    f->data_offset = (header_end + a - 1) / a * a;
    size_t room = f->data_offset <= f->size ? f->size - f->data_offset : 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        coli_tensor *t = &f->tensors[i];
        uint64_t off = f->offsets[i];
        char name[100];
        s_printable(name, sizeof name, t->name, f->tnames[i].len);
        if (off % a != 0)
            return coli_fail(COLI_EFORMAT, "%s: tensor '%s': data offset %llu is not a multiple of the alignment %zu",
                             f->name, name, (unsigned long long)off, a);
        if (off > room || t->nbytes > room - off)
            return coli_fail(COLI_EFORMAT,
                             "%s: tensor '%s': data (%zu bytes at offset %llu) past end of file "
                             "(data section holds %zu bytes)",
                             f->name, name, t->nbytes, (unsigned long long)off, room);
        t->data = f->base + f->data_offset + off;
    }
    if (f->data_offset > f->size) f->data_offset = f->size; /* no tensors: the padding may be cut off */
    return s_check_overlaps(f);
}

// ----------------------------------------------------------------------------
// open / close

static int s_alloc_tables(gguf_file *f) {
    f->kvs = calloc((size_t)f->n_kv + 1, sizeof *f->kvs);
    f->tensors = calloc((size_t)f->n_tensors + 1, sizeof *f->tensors);
    f->tnames = calloc((size_t)f->n_tensors + 1, sizeof *f->tnames);
    f->offsets = calloc((size_t)f->n_tensors + 1, sizeof *f->offsets);
    if (!f->kvs || !f->tensors || !f->tnames || !f->offsets)
        return coli_fail(COLI_ENOMEM, "%s: out of memory for %lld keys and %lld tensors", f->name, (long long)f->n_kv,
                         (long long)f->n_tensors);
    int rc = gguf_index_init(&f->kv_index, f->n_kv);
    return rc ? rc : gguf_index_init(&f->tensor_index, f->n_tensors);
}

static int s_parse(gguf_file *f) {
    cursor c = {.f = f};
    uint64_t n_tensors, n_kv;
    int rc;
    if ((rc = s_parse_header(&c, &n_tensors, &n_kv))) return rc;
    f->n_kv = (int64_t)n_kv;
    f->n_tensors = (int64_t)n_tensors;
    if ((rc = s_alloc_tables(f))) return rc;
    for (int64_t i = 0; i < f->n_kv; i++)
        if ((rc = s_parse_kv(&c, i))) return rc;
    if ((rc = s_read_alignment(f))) return rc;
    for (int64_t i = 0; i < f->n_tensors; i++)
        if ((rc = s_parse_tensor_info(&c, i))) return rc;
    if ((rc = s_copy_names(f))) return rc;
    return s_place_data(f, c.pos);
}

static gguf_file *s_new(const char *name) {
    gguf_file *f = calloc(1, sizeof *f);
    if (f && !(f->name = strdup(name))) {
        free(f);
        f = NULL;
    }
    return f;
}

int gguf_open_memory(const void *data, size_t size, gguf_file **out) {
    *out = NULL;
    gguf_file *f = s_new("<memory>");
    if (!f) return coli_fail(COLI_ENOMEM, "<memory>: out of memory opening a GGUF buffer");
    f->base = data;
    f->size = data ? size : 0;
    int rc = s_parse(f);
    if (rc) {
        gguf_close(&f);
        return rc;
    }
    *out = f;
    return 0;
}

int gguf_open(const char *path, gguf_file **out) {
    struct stat st;
    *out = NULL;
    int fd = coli_open_regular(path, &st); /* a FIFO is refused, not waited on */
    if (fd < 0 && errno) return coli_fail(COLI_EIO, "cannot open '%s': %s", path, strerror(errno));
    if (fd < 0) return coli_fail(COLI_EIO, "cannot open '%s': not a regular file (%s)", path, coli_file_kind(&st));
    gguf_file *f = s_new(path);
    if (!f) {
        close(fd);
        return coli_fail(COLI_ENOMEM, "%s: out of memory", path);
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int rc = coli_fail(COLI_EIO, "cannot map '%s' (%zu bytes): %s", path, f->size, strerror(errno));
            close(fd);
            gguf_close(&f);
            return rc;
        }
        f->base = p;
        f->mapped = 1;
    }
    close(fd); /* the mapping keeps the file alive */
    int rc = s_parse(f);
    if (rc) {
        gguf_close(&f);
        return rc;
    }
    *out = f;
    return 0;
}

void gguf_close(gguf_file **fp) {
    if (!fp || !*fp) return;
    gguf_file *f = *fp;
    if (f->mapped) munmap((void *)f->base, f->size);
    if (f->kvs)
        for (int64_t i = 0; i < f->n_kv; i++) free(f->kvs[i].strs);
    free(f->kvs);
    free(f->tensors);
    free(f->tnames);
    free(f->offsets);
    free(f->names);
    gguf_index_free(&f->kv_index);
    gguf_index_free(&f->tensor_index);
    free(f->name);
    free(f);
    *fp = NULL;
}

// ----------------------------------------------------------------------------
// file-level accessors

uint32_t gguf_version(const gguf_file *f) { return f->version; }
const void *gguf_base(const gguf_file *f) { return f->base; }
size_t gguf_size(const gguf_file *f) { return f->size; }
size_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }
size_t gguf_alignment(const gguf_file *f) { return f->alignment; }

const uint8_t *gguf_kv_raw(const gguf_file *f, int64_t i, size_t *len) {
    if (i < 0 || i >= f->n_kv) {
        *len = 0;
        return NULL;
    }
    *len = f->kvs[i].raw_len;
    return f->kvs[i].raw;
}

// ----------------------------------------------------------------------------
// metadata

int64_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }

int64_t gguf_find_key(const gguf_file *f, const char *key) {
    return gguf_index_find(&f->kv_index, key, strlen(key), s_kv_name, f);
}

gguf_str gguf_key_name(const gguf_file *f, int64_t i) {
    if (i < 0 || i >= f->n_kv) return (gguf_str){NULL, 0};
    return f->kvs[i].key;
}

gguf_type gguf_kv_type(const gguf_file *f, int64_t i) {
    if (i < 0 || i >= f->n_kv) return (gguf_type)-1;
    return f->kvs[i].type;
}

/* Key by name; *want names the expected type in the message if it differs. */
static const gguf_kv *s_kv_typed(const gguf_file *f, const char *key, int ok, const char *want, const gguf_kv *kv,
                                 int *rc) {
    *rc = 0;
    if (!kv) {
        *rc = coli_fail(COLI_EFORMAT, "%s: missing metadata key '%s'", f->name, key);
    } else if (!ok) {
        *rc = coli_fail(COLI_EFORMAT, "%s: metadata key '%s' has type %s, expected %s", f->name, key,
                        gguf_type_name(kv->type), want);
        kv = NULL;
    }
    return kv;
}

static const gguf_kv *s_kv(const gguf_file *f, const char *key) {
    int64_t i = gguf_find_key(f, key);
    return i < 0 ? NULL : &f->kvs[i];
}

/* An integer value as sign + magnitude, so every integer type compares
 * against every target range without overflow. Returns 0 if not an integer. */
static int s_int_value(const gguf_kv *kv, int *negative, uint64_t *mag) {
    int64_t s;
    uint64_t u = 0;
    *negative = 0;
    switch (kv->type) {
    case GGUF_UINT8: u = kv->value[0]; break;
    case GGUF_UINT16: {
        uint16_t v;
        memcpy(&v, kv->value, 2);
        u = v;
        break;
    }
    case GGUF_UINT32: {
        uint32_t v;
        memcpy(&v, kv->value, 4);
        u = v;
        break;
    }
    case GGUF_UINT64: memcpy(&u, kv->value, 8); break;
    case GGUF_INT8: s = (int8_t)kv->value[0]; goto sign;
    case GGUF_INT16: {
        int16_t v;
        memcpy(&v, kv->value, 2);
        s = v;
        goto sign;
    }
    case GGUF_INT32: {
        int32_t v;
        memcpy(&v, kv->value, 4);
        s = v;
        goto sign;
    }
    case GGUF_INT64: memcpy(&s, kv->value, 8); goto sign;
    default: return 0;
    }
    *mag = u;
    return 1;
sign:
    *negative = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return 1;
}

static int s_range_error(const gguf_file *f, const char *key, int negative, uint64_t mag, const char *target) {
    return coli_fail(COLI_EFORMAT, "%s: metadata key '%s' value %s%llu out of range for %s", f->name, key,
                     negative ? "-" : "", (unsigned long long)mag, target);
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    int rc, negative = 0;
    uint64_t mag = 0;
    const gguf_kv *kv = s_kv(f, key);
    kv = s_kv_typed(f, key, kv && s_int_value(kv, &negative, &mag), "an integer", kv, &rc);
    if (!kv) return rc;
    if (negative || mag > UINT32_MAX) return s_range_error(f, key, negative, mag, "u32");
    *out = (uint32_t)mag;
    return 0;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    int rc, negative = 0;
    uint64_t mag = 0;
    const gguf_kv *kv = s_kv(f, key);
    kv = s_kv_typed(f, key, kv && s_int_value(kv, &negative, &mag), "an integer", kv, &rc);
    if (!kv) return rc;
    if (!negative && mag > (uint64_t)INT64_MAX) return s_range_error(f, key, negative, mag, "i64");
    *out = negative ? (int64_t)(0 - mag) : (int64_t)mag;
    return 0;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    int rc;
    const gguf_kv *kv = s_kv(f, key);
    kv = s_kv_typed(f, key, kv && (kv->type == GGUF_FLOAT32 || kv->type == GGUF_FLOAT64), "FLOAT32", kv, &rc);
    if (!kv) return rc;
    if (kv->type == GGUF_FLOAT32) {
        memcpy(out, kv->value, 4);
        return 0;
    }
    double d;
    memcpy(&d, kv->value, 8);
    if (d > 3.4028234663852886e38 || d < -3.4028234663852886e38) /* FLT_MAX; inf and nan pass */
        return coli_fail(COLI_EFORMAT, "%s: metadata key '%s' value %g out of range for f32", f->name, key, d);
    *out = (float)d;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out) {
    int rc;
    const gguf_kv *kv = s_kv(f, key);
    kv = s_kv_typed(f, key, kv && kv->type == GGUF_BOOL, "BOOL", kv, &rc);
    if (!kv) return rc;
    *out = kv->value[0] != 0;
    return 0;
}

/* A string value's length field is followed by its bytes. */
static gguf_str s_str_at(const uint8_t *p) {
    gguf_str s;
    memcpy(&s.len, p, 8);
    s.ptr = (const char *)p + 8;
    return s;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    int rc;
    const gguf_kv *kv = s_kv(f, key);
    kv = s_kv_typed(f, key, kv && kv->type == GGUF_STRING, "STRING", kv, &rc);
    if (!kv) return rc;
    *out = s_str_at(kv->value);
    return 0;
}

int gguf_get_arr(const gguf_file *f, const char *key, gguf_type *elem_type, uint64_t *n, const void **data) {
    int rc;
    const gguf_kv *kv = s_kv(f, key);
    kv = s_kv_typed(f, key, kv && kv->type == GGUF_ARRAY, "ARRAY", kv, &rc);
    if (!kv) return rc;
    *elem_type = kv->elem_type;
    *n = kv->n;
    *data = kv->value;
    return 0;
}

int gguf_arr_str(const gguf_file *f, const char *key, uint64_t i, gguf_str *out) {
    int rc;
    const gguf_kv *kv = s_kv(f, key);
    kv = s_kv_typed(f, key, kv && kv->type == GGUF_ARRAY && kv->elem_type == GGUF_STRING, "ARRAY of STRING", kv, &rc);
    if (!kv) return rc;
    if (i >= kv->n)
        return coli_fail(COLI_ERANGE, "%s: metadata key '%s': index %llu out of range (%llu strings)", f->name, key,
                         (unsigned long long)i, (unsigned long long)kv->n);
    *out = s_str_at(kv->strs[i]);
    return 0;
}

// ----------------------------------------------------------------------------
// tensors

int64_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }

const coli_tensor *gguf_tensor(const gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_tensors ? &f->tensors[i] : NULL;
}

const coli_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    int64_t i = gguf_index_find(&f->tensor_index, name, strlen(name), s_tensor_name, f);
    return i < 0 ? NULL : &f->tensors[i];
}

size_t gguf_tensor_offset(const gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_tensors ? f->data_offset + (size_t)f->offsets[i] : 0;
}
