/*
 * gguf_bytes.h - build GGUF files byte by byte, valid or hostile, in
 * memory. Used by tests/test_gguf.c and the fuzzer's seed generator
 * (tools/fuzz/gguf_seeds.c), so no binary test files are committed.
 *
 *   gguf_bytes b = {0};
 *   gb_header(&b, 3, 1, 1);                 // version, n_tensors, n_kv
 *   gb_kv_u32(&b, "general.alignment", 32);
 *   gb_tinfo(&b, "w", 2, (uint64_t[]){32, 2}, 8, 0);  // Q8_0 at offset 0
 *   gb_pad(&b, 32);
 *   gb_zeros(&b, 68);
 *   ... b.p, b.n ...
 *   gb_free(&b);
 *
 * An allocation failure sets b.oom and turns later calls into no-ops.
 */
#ifndef COLI_TESTS_GGUF_BYTES_H
#define COLI_TESTS_GGUF_BYTES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf/gguf.h"

typedef struct gguf_bytes {
    uint8_t *p;
    size_t n, cap;
    int oom;
} gguf_bytes;

static inline void gb_raw(gguf_bytes *b, const void *src, size_t len) {
    if (b->oom) return;
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (len) memcpy(b->p + b->n, src, len);
    b->n += len;
}

static inline void gb_free(gguf_bytes *b) {
    free(b->p);
    *b = (gguf_bytes){0};
}

static inline void gb_u8(gguf_bytes *b, uint8_t v) { gb_raw(b, &v, 1); }
static inline void gb_u16(gguf_bytes *b, uint16_t v) { gb_raw(b, &v, 2); }
static inline void gb_u32(gguf_bytes *b, uint32_t v) { gb_raw(b, &v, 4); }
static inline void gb_u64(gguf_bytes *b, uint64_t v) { gb_raw(b, &v, 8); }
static inline void gb_f32(gguf_bytes *b, float v) { gb_raw(b, &v, 4); }
static inline void gb_f64(gguf_bytes *b, double v) { gb_raw(b, &v, 8); }

static inline void gb_zeros(gguf_bytes *b, size_t n) {
    static const uint8_t z[64];
    for (size_t k; n > 0; n -= k) {
        k = n < sizeof z ? n : sizeof z;
        gb_raw(b, z, k);
    }
}

/* GGUF string: u64 length + bytes. */
static inline void gb_str(gguf_bytes *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_raw(b, s, strlen(s));
}

static inline void gb_header(gguf_bytes *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_raw(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

/* Key name + value type; the caller appends the value. */
static inline void gb_key(gguf_bytes *b, const char *key, uint32_t type) {
    gb_str(b, key);
    gb_u32(b, type);
}

static inline void gb_kv_u32(gguf_bytes *b, const char *key, uint32_t v) {
    gb_key(b, key, 4);
    gb_u32(b, v);
}
static inline void gb_kv_str(gguf_bytes *b, const char *key, const char *v) {
    gb_key(b, key, 8);
    gb_str(b, v);
}

/* Array head: element type + count; the caller appends the elements. */
static inline void gb_arr(gguf_bytes *b, uint32_t elem_type, uint64_t n) {
    gb_u32(b, elem_type);
    gb_u64(b, n);
}

static inline void gb_tinfo(gguf_bytes *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                            uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

static inline void gb_pad(gguf_bytes *b, size_t align) { gb_zeros(b, (align - b->n % align) % align); }

/* Overwrite 4 or 8 bytes at a known offset (hostile variants of a valid file). */
static inline void gb_patch_u32(gguf_bytes *b, size_t at, uint32_t v) {
    if (at + 4 <= b->n) memcpy(b->p + at, &v, 4);
}
static inline void gb_patch_u64(gguf_bytes *b, size_t at, uint64_t v) {
    if (at + 8 <= b->n) memcpy(b->p + at, &v, 8);
}

/* ---- a valid file with every value type, nested arrays and two tensors ----
 * Laid out exactly as gguf_writer writes it (alignment 32, each tensor
 * padded), so copying it through the writer must reproduce it byte for byte. */
static inline void gb_all_types(gguf_bytes *b, uint32_t version) {
    uint64_t n_kv = 0;
    gb_header(b, version, 2, 0);
    gb_key(b, "t.u8", 0);
    gb_u8(b, 200);
    n_kv++;
    gb_key(b, "t.i8", 1);
    gb_u8(b, (uint8_t)(int8_t)-100);
    n_kv++;
    gb_key(b, "t.u16", 2);
    gb_u16(b, 60000);
    n_kv++;
    gb_key(b, "t.i16", 3);
    gb_u16(b, (uint16_t)(int16_t)-30000);
    n_kv++;
    gb_key(b, "t.u32", 4);
    gb_u32(b, 4000000000u);
    n_kv++;
    gb_key(b, "t.i32", 5);
    gb_u32(b, (uint32_t)(int32_t)-2000000000);
    n_kv++;
    gb_key(b, "t.f32", 6);
    gb_f32(b, 1.5f);
    n_kv++;
    gb_key(b, "t.bool", 7);
    gb_u8(b, 1);
    n_kv++;
    gb_kv_str(b, "t.str", "h\xc3\xa9llo");
    n_kv++;
    gb_key(b, "t.u64", 10);
    gb_u64(b, (1ull << 40) + 7);
    n_kv++;
    gb_key(b, "t.i64", 11);
    gb_u64(b, (uint64_t) - (1ll << 40));
    n_kv++;
    gb_key(b, "t.f64", 12);
    gb_f64(b, 2.25);
    n_kv++;
    gb_kv_u32(b, "general.alignment", 32);
    n_kv++;
    /* arrays of every fixed-size type: elements 1, 2, 3 (bool: 1, 0, 1) */
    static const char *const arr_keys[] = {
        "a.u8", "a.i8", "a.u16", "a.i16", "a.u32", "a.i32", "a.f32", "a.bool", NULL, NULL, "a.u64", "a.i64", "a.f64",
    };
    for (uint32_t t = 0; t <= 12; t++) {
        if (!arr_keys[t]) continue;
        gb_key(b, arr_keys[t], 9);
        gb_arr(b, t, 3);
        for (int i = 1; i <= 3; i++) {
            switch (t) {
            case 0:
            case 1: gb_u8(b, (uint8_t)i); break;
            case 7: gb_u8(b, (uint8_t)(i != 2)); break;
            case 2:
            case 3: gb_u16(b, (uint16_t)i); break;
            case 4:
            case 5: gb_u32(b, (uint32_t)i); break;
            case 6: gb_f32(b, (float)i); break;
            case 10:
            case 11: gb_u64(b, (uint64_t)i); break;
            default: gb_f64(b, (double)i); break;
            }
        }
        n_kv++;
    }
    gb_key(b, "a.str", 9);
    gb_arr(b, 8, 3);
    gb_str(b, "a");
    gb_str(b, "");
    gb_str(b, "xyz");
    n_kv++;
    gb_key(b, "a.empty", 9);
    gb_arr(b, 4, 0);
    n_kv++;
    /* [[1, 2], [3]] as UINT32 */
    gb_key(b, "a.nested", 9);
    gb_arr(b, 9, 2);
    gb_arr(b, 4, 2);
    gb_u32(b, 1);
    gb_u32(b, 2);
    gb_arr(b, 4, 1);
    gb_u32(b, 3);
    n_kv++;
    /* [[["x", "yy"]], []] : three levels, strings at the bottom */
    gb_key(b, "a.nested3", 9);
    gb_arr(b, 9, 2);
    gb_arr(b, 9, 1);
    gb_arr(b, 8, 2);
    gb_str(b, "x");
    gb_str(b, "yy");
    gb_arr(b, 9, 0);
    n_kv++;
    gb_patch_u64(b, 16, n_kv);

    gb_tinfo(b, "t.f32", 1, (const uint64_t[]){4}, 0, 0);         /* 16 bytes, padded to 32 */
    gb_tinfo(b, "blk.0.q8", 2, (const uint64_t[]){32, 2}, 8, 32); /* 68 bytes */
    gb_pad(b, 32);
    for (int i = 0; i < 4; i++) gb_f32(b, (float)i * 0.5f);
    gb_pad(b, 32);
    for (int i = 0; i < 68; i++) gb_u8(b, (uint8_t)(i * 7 + 1));
    gb_pad(b, 32);
}

/* ---- walk an open file through every accessor ----
 * Touches every key (typed getter by name), array element, string and
 * tensor byte range end. Returns a checksum >= 0, or -1 if an accessor
 * disagrees with the index (find_key / find_tensor not giving back i). */
static inline int64_t gb_walk(const gguf_file *f) {
    uint64_t sum = gguf_version(f) + gguf_alignment(f) + gguf_data_offset(f);
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_str k = gguf_key_name(f, i);
        char *key = malloc(k.len + 1);
        if (!key) return -1;
        memcpy(key, k.ptr, k.len);
        key[k.len] = '\0';
        if (gguf_find_key(f, key) != i) {
            free(key);
            return -1;
        }
        uint32_t u;
        int64_t s64;
        float x;
        int flag;
        gguf_str str;
        gguf_type et;
        uint64_t n;
        const void *data;
        switch (gguf_kv_type(f, i)) {
        case GGUF_FLOAT32:
        case GGUF_FLOAT64:
            if (gguf_get_f32(f, key, &x) == 0) sum += (uint64_t)(x != 0);
            break;
        case GGUF_BOOL:
            if (gguf_get_bool(f, key, &flag) == 0) sum += (uint64_t)flag;
            break;
        case GGUF_STRING:
            if (gguf_get_str(f, key, &str) == 0) sum += str.len + (str.len ? (uint8_t)str.ptr[str.len - 1] : 0);
            break;
        case GGUF_ARRAY:
            if (gguf_get_arr(f, key, &et, &n, &data) != 0) {
                free(key);
                return -1;
            }
            if (et == GGUF_STRING) {
                for (uint64_t j = 0; j < n; j++)
                    if (gguf_arr_str(f, key, j, &str) == 0) sum += str.len + (str.len ? (uint8_t)str.ptr[0] : 0);
            } else if (et != GGUF_ARRAY && n > 0) {
                sum += ((const uint8_t *)data)[0] + n;
            }
            break;
        default:
            if (gguf_get_u32(f, key, &u) == 0) sum += u;
            if (gguf_get_i64(f, key, &s64) == 0) sum += (uint64_t)s64;
            break;
        }
        free(key);
    }
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        if (!t || gguf_find_tensor(f, t->name) != t) return -1;
        const uint8_t *d = t->data;
        sum += (uint64_t)t->n_dims + (uint64_t)t->ne[0] + gguf_tensor_offset(f, i) + d[0] + d[t->nbytes - 1];
    }
    return (int64_t)(sum & INT64_MAX);
}

#endif
