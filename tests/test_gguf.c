/*
 * test_gguf.c - the GGUF reader and writer: values of every type read back,
 * writer output read back, a byte-identical round trip of a shipped model,
 * and hand-made hostile files, each refused with its own message.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "colibri.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "tests/gguf_bytes.h"

/* ---- helpers ------------------------------------------------------------------ */

/* Open a copy of b in an exact-size heap buffer, so that the sanitizer build
 * catches any read one byte past the end. The copy is leaked into *keep. */
static int open_exact(const gguf_bytes *b, size_t n, gguf_file **f, void **keep) {
    *keep = malloc(n ? n : 1);
    cr_assert_not_null(*keep);
    if (n) memcpy(*keep, b->p, n);
    return gguf_open_memory(*keep, n, f);
}

/* b must be refused with code, and a one-line message naming the buffer
 * and containing every given fragment. */
static void expect_refused_n(const gguf_bytes *b, size_t n, int code, const char *const *frags) {
    gguf_file *f = NULL;
    void *buf;
    cr_assert(!b->oom);
    int rc = open_exact(b, n, &f, &buf);
    const char *msg = coli_last_error();
    cr_assert_eq(rc, code, "rc %d (%s), expected %s; message: %s", rc, coli_status_str(rc), coli_status_str(code), msg);
    cr_assert_null(f);
    cr_assert(strstr(msg, "<memory>") == msg, "message does not name the file: %s", msg);
    cr_assert_null(strchr(msg, '\n'), "message is not one line: %s", msg);
    for (int i = 0; frags[i]; i++) cr_assert_not_null(strstr(msg, frags[i]), "message '%s' lacks '%s'", msg, frags[i]);
    free(buf);
}

#define EXPECT_REFUSED(b, code, ...) expect_refused_n((b), (b)->n, (code), (const char *const[]){__VA_ARGS__, NULL})

static char *temp_path(void) {
    static char path[64];
    strcpy(path, "/tmp/test_gguf_XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    return path;
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    cr_assert_eq(fwrite(p, 1, n, fp), n);
    cr_assert_eq(fclose(fp), 0);
}

static void *read_file(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp, "cannot read %s", path);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    void *p = malloc(*n ? *n : 1);
    cr_assert_eq(fread(p, 1, *n, fp), *n);
    fclose(fp);
    return p;
}

/* A file with one tensor and no keys: header, info, padding, data. */
static void one_tensor(gguf_bytes *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                       uint64_t offset, size_t data_bytes) {
    gb_header(b, 3, 1, 0);
    gb_tinfo(b, name, n_dims, ne, type, offset);
    gb_pad(b, 32);
    gb_zeros(b, data_bytes);
}

/* ---- reading every value type ------------------------------------------------- */

/* The scalar keys of the all-types file. */
static void check_scalar_types(const gguf_file *f) {
    uint32_t u;
    int64_t s;
    float x;
    int flag;
    gguf_str str;
    cr_assert_eq(gguf_n_kv(f), 28);
    cr_assert_eq(gguf_get_u32(f, "t.u8", &u), 0);
    cr_assert_eq(u, 200);
    cr_assert_eq(gguf_get_i64(f, "t.i8", &s), 0);
    cr_assert_eq(s, -100);
    cr_assert_eq(gguf_get_u32(f, "t.u16", &u), 0);
    cr_assert_eq(u, 60000);
    cr_assert_eq(gguf_get_i64(f, "t.i16", &s), 0);
    cr_assert_eq(s, -30000);
    cr_assert_eq(gguf_get_u32(f, "t.u32", &u), 0);
    cr_assert_eq(u, 4000000000u);
    cr_assert_eq(gguf_get_i64(f, "t.i32", &s), 0);
    cr_assert_eq(s, -2000000000);
    cr_assert_eq(gguf_get_f32(f, "t.f32", &x), 0);
    cr_assert_eq(x, 1.5f);
    cr_assert_eq(gguf_get_bool(f, "t.bool", &flag), 0);
    cr_assert_eq(flag, 1);
    cr_assert_eq(gguf_get_str(f, "t.str", &str), 0);
    cr_assert_eq(str.len, 6);
    cr_assert(memcmp(str.ptr, "h\xc3\xa9llo", 6) == 0);
    cr_assert_eq(gguf_get_i64(f, "t.u64", &s), 0);
    cr_assert_eq(s, (1ll << 40) + 7);
    cr_assert_eq(gguf_get_i64(f, "t.i64", &s), 0);
    cr_assert_eq(s, -(1ll << 40));
    cr_assert_eq(gguf_get_f32(f, "t.f64", &x), 0);
    cr_assert_eq(x, 2.25f);
    cr_assert_eq(gguf_kv_type(f, gguf_find_key(f, "t.i16")), GGUF_INT16);
    cr_assert_eq(gguf_alignment(f), 32);
}

/* Every key and tensor of the all-types file. */
static void check_all_types(const gguf_file *f) {
    check_scalar_types(f);
    gguf_str str;
    static const struct {
        const char *key;
        gguf_type t;
        size_t esz;
    } arrs[] = {
        {"a.u8", GGUF_UINT8, 1},   {"a.i8", GGUF_INT8, 1},   {"a.u16", GGUF_UINT16, 2}, {"a.i16", GGUF_INT16, 2},
        {"a.u32", GGUF_UINT32, 4}, {"a.i32", GGUF_INT32, 4}, {"a.u64", GGUF_UINT64, 8}, {"a.i64", GGUF_INT64, 8},
    };
    for (size_t k = 0; k < sizeof arrs / sizeof arrs[0]; k++) {
        gguf_type et;
        uint64_t n;
        const void *data;
        cr_assert_eq(gguf_get_arr(f, arrs[k].key, &et, &n, &data), 0, "%s", arrs[k].key);
        cr_assert_eq(et, arrs[k].t);
        cr_assert_eq(n, 3);
        for (int i = 0; i < 3; i++) {
            uint64_t v = 0;
            memcpy(&v, (const uint8_t *)data + i * arrs[k].esz, arrs[k].esz);
            cr_assert_eq(v, (uint64_t)i + 1, "%s[%d]", arrs[k].key, i);
        }
    }
    gguf_type et;
    uint64_t n;
    const void *data;
    cr_assert_eq(gguf_get_arr(f, "a.f32", &et, &n, &data), 0);
    cr_assert_eq(((const float *)data)[2], 3.0f); /* the all-types file keeps f32 elements 4-aligned */
    cr_assert_eq(gguf_get_arr(f, "a.f64", &et, &n, &data), 0);
    double d;
    memcpy(&d, (const uint8_t *)data + 8, 8);
    cr_assert_eq(d, 2.0);
    cr_assert_eq(gguf_get_arr(f, "a.bool", &et, &n, &data), 0);
    cr_assert(memcmp(data, "\1\0\1", 3) == 0);
    cr_assert_eq(gguf_get_arr(f, "a.empty", &et, &n, &data), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(gguf_get_arr(f, "a.str", &et, &n, &data), 0);
    cr_assert_eq(et, GGUF_STRING);
    cr_assert_eq(n, 3);
    cr_assert_eq(gguf_arr_str(f, "a.str", 2, &str), 0);
    cr_assert(str.len == 3 && memcmp(str.ptr, "xyz", 3) == 0);
    cr_assert_eq(gguf_arr_str(f, "a.str", 1, &str), 0);
    cr_assert_eq(str.len, 0);
    cr_assert_eq(gguf_get_arr(f, "a.nested", &et, &n, &data), 0);
    cr_assert(et == GGUF_ARRAY && n == 2);
    cr_assert_eq(gguf_get_arr(f, "a.nested3", &et, &n, &data), 0);
    cr_assert(et == GGUF_ARRAY && n == 2);

    cr_assert_eq(gguf_n_tensors(f), 2);
    const coli_tensor *t = gguf_find_tensor(f, "blk.0.q8");
    cr_assert_not_null(t);
    cr_assert_str_eq(t->name, "blk.0.q8");
    cr_assert(t->type == COLI_Q8_0 && t->n_dims == 2 && t->ne[0] == 32 && t->ne[1] == 2 && t->ne[2] == 1);
    cr_assert_eq(t->nbytes, 68);
    cr_assert_eq(((const uint8_t *)t->data)[67], (uint8_t)(67 * 7 + 1));
    cr_assert_eq(gguf_tensor_offset(f, 1), gguf_data_offset(f) + 32);
    cr_assert_eq((const uint8_t *)t->data - (const uint8_t *)gguf_base(f), (ptrdiff_t)gguf_tensor_offset(f, 1));
    t = gguf_tensor(f, 0);
    cr_assert_eq(((const float *)t->data)[3], 1.5f);
    cr_assert_null(gguf_find_tensor(f, "blk.0"));
    cr_assert_null(gguf_tensor(f, 2));
    cr_assert_eq(gguf_data_offset(f) % 32, 0);
}

Test(gguf_read, every_value_type_v3_and_v2) {
    for (uint32_t version = 2; version <= 3; version++) {
        gguf_bytes b = {0};
        gguf_file *f = NULL;
        void *buf;
        gb_all_types(&b, version);
        cr_assert_eq(open_exact(&b, b.n, &f, &buf), 0, "%s", coli_last_error());
        cr_assert_eq(gguf_version(f), version);
        check_all_types(f);
        cr_assert_geq(gb_walk(f), 0);
        gguf_close(&f);
        cr_assert_null(f);
        free(buf);
        gb_free(&b);
    }
}

Test(gguf_read, getters_refuse_missing_wrong_type_and_range) {
    gguf_bytes b = {0};
    gguf_file *f = NULL;
    void *buf;
    uint32_t u;
    int64_t s;
    float x;
    int flag;
    gguf_str str;
    gb_all_types(&b, 3);
    cr_assert_eq(open_exact(&b, b.n, &f, &buf), 0);
    cr_assert_eq(gguf_get_u32(f, "nope", &u), COLI_EFORMAT);
    cr_assert_str_eq(coli_last_error(), "<memory>: missing metadata key 'nope'");
    cr_assert_eq(gguf_get_u32(f, "t.i8", &u), COLI_EFORMAT);
    cr_assert_not_null(strstr(coli_last_error(), "value -100 out of range for u32"));
    cr_assert_eq(gguf_get_u32(f, "t.u64", &u), COLI_EFORMAT);
    cr_assert_not_null(strstr(coli_last_error(), "out of range for u32"));
    cr_assert_eq(gguf_get_u32(f, "t.str", &u), COLI_EFORMAT);
    cr_assert_not_null(strstr(coli_last_error(), "'t.str' has type STRING, expected an integer"));
    cr_assert_eq(gguf_get_i64(f, "t.f32", &s), COLI_EFORMAT);
    cr_assert_eq(gguf_get_f32(f, "t.u32", &x), COLI_EFORMAT);
    cr_assert_eq(gguf_get_bool(f, "t.u8", &flag), COLI_EFORMAT);
    cr_assert_eq(gguf_get_str(f, "a.str", &str), COLI_EFORMAT);
    cr_assert_not_null(strstr(coli_last_error(), "has type ARRAY, expected STRING"));
    cr_assert_eq(gguf_arr_str(f, "a.str", 3, &str), COLI_ERANGE);
    cr_assert_not_null(strstr(coli_last_error(), "index 3 out of range (3 strings)"));
    cr_assert_eq(gguf_arr_str(f, "a.u32", 0, &str), COLI_EFORMAT);
    cr_assert_eq(gguf_find_key(f, "t.u"), -1);
    cr_assert_null(gguf_key_name(f, 99).ptr);
    gguf_close(&f);
    gguf_close(&f); /* NULL is fine */
    free(buf);
    gb_free(&b);
}

/* ---- the writer --------------------------------------------------------------- */

Test(gguf_write, read_back_every_setter_and_type) {
    char *path = temp_path();
    gguf_writer *w = gguf_writer_new();
    cr_assert_not_null(w);
    static const char *const strs[] = {"<s>", "", "\xe2\x96\x81hi"};
    static const int16_t i16s[] = {-1, 2, -3};
    static const double f64s[] = {0.5, -1e300};
    float f32[64], f32b[4] = {1, 2, 3, 4};
    uint16_t f16[64];
    uint8_t q8[2 * 34], q4[3 * 2 * 18];
    for (int i = 0; i < 64; i++) {
        f32[i] = (float)i;
        f16[i] = (uint16_t)(i * 3);
    }
    for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)i;
    for (size_t i = 0; i < sizeof q4; i++) q4[i] = (uint8_t)(255 - i);
    cr_assert_eq(gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    cr_assert_eq(gguf_writer_set_u32(w, "x.u32", 7), 0);
    cr_assert_eq(gguf_writer_set_i32(w, "x.i32", -7), 0);
    cr_assert_eq(gguf_writer_set_f32(w, "x.f32", 0.25f), 0);
    cr_assert_eq(gguf_writer_set_bool(w, "x.bool", 5), 0);
    cr_assert_eq(gguf_writer_set_arr_str(w, "x.strs", strs, 3), 0);
    cr_assert_eq(gguf_writer_set_arr(w, "x.i16", GGUF_INT16, i16s, 3), 0);
    cr_assert_eq(gguf_writer_set_arr(w, "x.f64", GGUF_FLOAT64, f64s, 2), 0);
    cr_assert_eq(gguf_writer_set_u32(w, "x.u32", 8), 0); /* re-set: moves to the end, like llama.cpp */
    const int64_t ne_f32[] = {64}, ne_f32b[] = {2, 2}, ne_q8[] = {32, 2}, ne_q4[] = {64, 1, 3};
    cr_assert_eq(gguf_writer_add_tensor(w, "a", COLI_F32, 1, ne_f32, f32, sizeof f32), 0);
    cr_assert_eq(gguf_writer_add_tensor(w, "b", COLI_F16, 1, ne_f32, f16, sizeof f16), 0);
    cr_assert_eq(gguf_writer_add_tensor(w, "c", COLI_BF16, 1, ne_f32, f16, sizeof f16), 0);
    cr_assert_eq(gguf_writer_add_tensor(w, "d", COLI_Q8_0, 2, ne_q8, q8, sizeof q8), 0);
    cr_assert_eq(gguf_writer_add_tensor(w, "e.q4", COLI_Q4_0, 3, ne_q4, q4, sizeof q4), 0);
    cr_assert_eq(gguf_writer_add_tensor(w, "f", COLI_F32, 2, ne_f32b, f32b, sizeof f32b), 0);
    cr_assert_eq(gguf_writer_write(w, path), 0, "%s", coli_last_error());
    gguf_writer_free(&w);
    cr_assert_null(w);

    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(path, &f), 0, "%s", coli_last_error());
    cr_assert_eq(gguf_version(f), 3);
    cr_assert_eq(gguf_size(f) % 32, 0);
    cr_assert_eq(gguf_n_kv(f), 8);
    gguf_str k = gguf_key_name(f, 7);
    cr_assert(k.len == 5 && memcmp(k.ptr, "x.u32", 5) == 0, "re-set key not last");
    cr_assert_eq(gguf_find_key(f, "general.alignment"), -1); /* not written unless set */
    uint32_t u;
    int64_t s;
    float x;
    int flag;
    gguf_str str;
    cr_assert(gguf_get_u32(f, "x.u32", &u) == 0 && u == 8);
    cr_assert(gguf_get_i64(f, "x.i32", &s) == 0 && s == -7);
    cr_assert(gguf_get_f32(f, "x.f32", &x) == 0 && x == 0.25f);
    cr_assert(gguf_get_bool(f, "x.bool", &flag) == 0 && flag == 1);
    cr_assert(gguf_get_str(f, "general.architecture", &str) == 0 && str.len == 5);
    cr_assert(gguf_arr_str(f, "x.strs", 2, &str) == 0 && str.len == 5 && memcmp(str.ptr, strs[2], 5) == 0);
    gguf_type et;
    uint64_t n;
    const void *data;
    cr_assert(gguf_get_arr(f, "x.i16", &et, &n, &data) == 0 && et == GGUF_INT16 && n == 3);
    cr_assert(memcmp(data, i16s, sizeof i16s) == 0);
    cr_assert(gguf_get_arr(f, "x.f64", &et, &n, &data) == 0 && memcmp(data, f64s, sizeof f64s) == 0);

    cr_assert_eq(gguf_n_tensors(f), 6);
    const void *want[] = {f32, f16, f16, q8, q4, f32b};
    const size_t sizes[] = {sizeof f32, sizeof f16, sizeof f16, sizeof q8, sizeof q4, sizeof f32b};
    for (int i = 0; i < 6; i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        cr_assert_eq(t->nbytes, sizes[i], "tensor %d", i);
        cr_assert(memcmp(t->data, want[i], sizes[i]) == 0, "tensor %d data", i);
        cr_assert_eq(gguf_tensor_offset(f, i) % 32, 0);
    }
    const coli_tensor *q = gguf_find_tensor(f, "e.q4");
    cr_assert(q && q->type == COLI_Q4_0 && q->n_dims == 3 && q->ne[2] == 3 && q->ne[3] == 1);
    cr_assert_eq(gguf_find_tensor(f, "c")->type, COLI_BF16);
    gguf_close(&f);
    unlink(path);
}

/* The writer reproduces every value type and nested array verbatim: copying
 * the hand-built file key by key and tensor by tensor gives the same bytes. */
Test(gguf_write, copy_kv_reproduces_all_types_byte_for_byte) {
    gguf_bytes b = {0};
    gguf_file *f = NULL;
    void *buf;
    gb_all_types(&b, 3);
    cr_assert_eq(open_exact(&b, b.n, &f, &buf), 0);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) cr_assert_eq(gguf_writer_copy_kv(w, f, i), 0);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), 0);
    }
    cr_assert_eq(gguf_writer_copy_kv(w, f, gguf_n_kv(f)), COLI_EINVAL);
    char *path = temp_path();
    cr_assert_eq(gguf_writer_write(w, path), 0, "%s", coli_last_error());
    size_t n;
    void *out = read_file(path, &n);
    cr_assert_eq(n, b.n);
    cr_assert(memcmp(out, b.p, n) == 0, "writer output differs from the hand-built file");
    free(out);
    unlink(path);
    gguf_writer_free(&w);
    gguf_close(&f);
    free(buf);
    gb_free(&b);
}

Test(gguf_write, honours_general_alignment_and_refuses_bad_input) {
    gguf_writer *w = gguf_writer_new();
    float v[3] = {1, 2, 3};
    const int64_t ne[] = {3}, ne33[] = {33}, ne0[] = {0};
    uint8_t q[34 * 2];
    cr_assert_eq(gguf_writer_set_u32(w, "general.alignment", 48), COLI_EINVAL);
    cr_assert_not_null(strstr(coli_last_error(), "power of two"));
    cr_assert_eq(gguf_writer_set_i32(w, "general.alignment", 64), COLI_EINVAL);
    cr_assert_eq(gguf_writer_set_u32(w, "general.alignment", 64), 0);
    cr_assert_eq(gguf_writer_set_u32(w, "", 1), COLI_EINVAL);
    cr_assert_eq(gguf_writer_set_arr(w, "k", GGUF_STRING, v, 1), COLI_EINVAL);
    cr_assert_eq(gguf_writer_set_arr(w, "k", GGUF_BOOL, "\2", 1), COLI_EINVAL);
    cr_assert_eq(gguf_writer_add_tensor(w, "v", COLI_F32, 1, ne, v, 8), COLI_EINVAL);
    cr_assert_not_null(strstr(coli_last_error(), "shape and type need 12"));
    cr_assert_eq(gguf_writer_add_tensor(w, "q", COLI_Q8_0, 1, ne33, q, sizeof q), COLI_EINVAL);
    cr_assert_not_null(strstr(coli_last_error(), "block size 32"));
    cr_assert_eq(gguf_writer_add_tensor(w, "z", COLI_F32, 1, ne0, v, 0), COLI_EINVAL);
    cr_assert_eq(gguf_writer_add_tensor(w, "v", (coli_dtype)12, 1, ne, v, 12), COLI_EINVAL);
    cr_assert_eq(gguf_writer_add_tensor(w, "v", COLI_F32, 1, ne, v, sizeof v), 0);
    cr_assert_eq(gguf_writer_add_tensor(w, "v", COLI_F32, 1, ne, v, sizeof v), COLI_EINVAL);
    cr_assert_not_null(strstr(coli_last_error(), "duplicate tensor name 'v'"));
    cr_assert_eq(gguf_writer_add_tensor(w, "w", COLI_F32, 1, ne, v, sizeof v), 0);
    cr_assert_eq(gguf_writer_write(w, "/nonexistent-dir/x.gguf"), COLI_EIO);
    cr_assert_not_null(strstr(coli_last_error(), "/nonexistent-dir/x.gguf: cannot create"));
    char *path = temp_path();
    cr_assert_eq(gguf_writer_write(w, path), 0);
    gguf_writer_free(&w);
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(path, &f), 0, "%s", coli_last_error());
    cr_assert_eq(gguf_alignment(f), 64);
    cr_assert_eq(gguf_data_offset(f) % 64, 0);
    cr_assert_eq(gguf_tensor_offset(f, 1) - gguf_tensor_offset(f, 0), 64);
    cr_assert_eq(gguf_size(f) % 64, 0);
    gguf_close(&f);
    unlink(path);
}

/* A fill tensor writes n floats 1..n (n from its context). */
static int fill_count(void *ctx, FILE *fp) {
    int n = *(const int *)ctx;
    for (int i = 1; i <= n; i++) {
        float x = (float)i;
        fwrite(&x, 4, 1, fp);
    }
    return 0;
}

/* Tensors filled at write time land where the header says, and a fill that
 * writes the wrong byte count fails the write and leaves no file. */
Test(gguf_write, fill_tensors_are_written_in_place_and_checked) {
    gguf_writer *w = gguf_writer_new();
    float v[3] = {7, 8, 9};
    const int64_t ne[] = {3};
    int three = 3, two = 2;
    cr_assert_eq(gguf_writer_add_tensor_fill(w, "f", COLI_F32, 1, ne, 12, NULL, NULL), COLI_EINVAL);
    cr_assert_eq(gguf_writer_add_tensor(w, "a", COLI_F32, 1, ne, v, sizeof v), 0);
    cr_assert_eq(gguf_writer_add_tensor_fill(w, "f", COLI_F32, 1, ne, 12, fill_count, &three), 0);
    char *path = temp_path();
    cr_assert_eq(gguf_writer_write(w, path), 0, "%s", coli_last_error());
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(path, &f), 0, "%s", coli_last_error());
    const float *a = gguf_find_tensor(f, "a")->data, *b = gguf_find_tensor(f, "f")->data;
    cr_expect(a[0] == 7 && a[2] == 9 && b[0] == 1 && b[1] == 2 && b[2] == 3);
    gguf_close(&f);
    unlink(path);
    cr_assert_eq(gguf_writer_add_tensor_fill(w, "g", COLI_F32, 1, ne, 12, fill_count, &two), 0);
    cr_assert_eq(gguf_writer_write(w, path), COLI_EINTERNAL);
    cr_expect_not_null(strstr(coli_last_error(), "tensor 'g': fill wrote 8 bytes"), "%s", coli_last_error());
    cr_expect_neq(access(path, F_OK), 0, "a failed write leaves no file");
    gguf_writer_free(&w);
}

/* Many tensors: the writer's name index grows and still finds duplicates. */
Test(gguf_write, many_tensors_and_duplicate_detection) {
    gguf_writer *w = gguf_writer_new();
    float v = 1;
    const int64_t ne[] = {1};
    char name[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "t.%d", i);
        cr_assert_eq(gguf_writer_add_tensor(w, name, COLI_F32, 1, ne, &v, 4), 0);
    }
    cr_assert_eq(gguf_writer_add_tensor(w, "t.0", COLI_F32, 1, ne, &v, 4), COLI_EINVAL);
    cr_assert_eq(gguf_writer_add_tensor(w, "t.999", COLI_F32, 1, ne, &v, 4), COLI_EINVAL);
    gguf_writer_free(&w);
}

/* ---- byte-identical round trip of a shipped model -------------------------------- */

Test(gguf_write, round_trip_shipped_q8_0_model_is_byte_identical) {
    const char *shared = getenv("COLI_SHARED") ? getenv("COLI_SHARED") : "../shared";
    char src[512];
    struct stat st;
    snprintf(src, sizeof src, "%s/reference/models/tiny-mixtral-q8_0.gguf", shared);
    if (stat(src, &st) != 0) cr_skip_test("../shared not found: %s missing", src);
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(src, &f), 0, "%s", coli_last_error());
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) cr_assert_eq(gguf_writer_copy_kv(w, f, i), 0);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), 0, "%s",
                     coli_last_error());
    }
    char *path = temp_path();
    cr_assert_eq(gguf_writer_write(w, path), 0, "%s", coli_last_error());
    size_t n;
    void *out = read_file(path, &n);
    cr_assert_eq(n, gguf_size(f));
    cr_assert(memcmp(out, gguf_base(f), n) == 0, "round trip of %s is not byte-identical", src);
    free(out);
    unlink(path);
    gguf_writer_free(&w);
    gguf_close(&f);
}

/* ---- hostile files: each is refused with its own message ----------------------------- */

Test(gguf_hostile, empty_file) {
    gguf_bytes b = {0};
    EXPECT_REFUSED(&b, COLI_EFORMAT, "empty file (0 bytes)");
    char *path = temp_path(); /* and through gguf_open: the message names the path */
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(path, &f), COLI_EFORMAT);
    cr_assert_null(f);
    cr_assert(strstr(coli_last_error(), path) == coli_last_error(), "%s", coli_last_error());
    cr_assert_not_null(strstr(coli_last_error(), "empty file"));
    unlink(path);
}

Test(gguf_hostile, wrong_magic_through_a_real_file) {
    gguf_bytes b = {0};
    gb_raw(&b, "GGML", 4);
    gb_u32(&b, 3);
    gb_zeros(&b, 16);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "bad magic 47 47 4d 4c", "not a GGUF file");
    char *path = temp_path();
    write_file(path, b.p, b.n);
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(path, &f), COLI_EFORMAT);
    char want[128];
    snprintf(want, sizeof want, "%s: bad magic 47 47 4d 4c (expected \"GGUF\"): not a GGUF file", path);
    cr_assert_str_eq(coli_last_error(), want);
    unlink(path);
    gb_free(&b);
}

Test(gguf_hostile, missing_file_and_directory) {
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open("/nonexistent/model.gguf", &f), COLI_EIO);
    cr_assert_not_null(strstr(coli_last_error(), "cannot open '/nonexistent/model.gguf'"));
    cr_assert_eq(gguf_open("/tmp", &f), COLI_EIO);
    cr_assert_not_null(strstr(coli_last_error(), "a directory"));
    cr_assert_null(f);
}

Test(gguf_hostile, version_1_and_4_refused) {
    gguf_bytes b = {0};
    gb_header(&b, 1, 0, 0);
    EXPECT_REFUSED(&b, COLI_EUNSUPPORTED, "GGUF version 1 is not supported (only 2 and 3)");
    gb_patch_u32(&b, 4, 4);
    EXPECT_REFUSED(&b, COLI_EUNSUPPORTED, "GGUF version 4 is not supported");
    gb_patch_u32(&b, 4, 0x03000000u);
    EXPECT_REFUSED(&b, COLI_EUNSUPPORTED, "a big-endian file?");
    gb_free(&b);
}

/* Every prefix of a valid file must be refused cleanly (or accepted, once
 * all tensor data is there); the sanitizer build checks for overreads. */
Test(gguf_hostile, truncated_at_every_length) {
    gguf_bytes b = {0};
    gb_all_types(&b, 3);
    size_t data_end = b.n - 28; /* the last tensor's 68 bytes end 28 bytes before the padded end */
    for (size_t n = 0; n <= b.n; n++) {
        gguf_file *f = NULL;
        void *buf;
        coli_clear_error();
        int rc = open_exact(&b, n, &f, &buf);
        if (n < data_end) {
            cr_assert_lt(rc, 0, "prefix of %zu bytes accepted", n);
            cr_assert(strncmp(coli_last_error(), "<memory>: ", 10) == 0, "%zu: '%s'", n, coli_last_error());
        } else {
            cr_assert_eq(rc, 0, "prefix of %zu bytes: %s", n, coli_last_error());
            cr_assert_geq(gb_walk(f), 0);
        }
        gguf_close(&f);
        free(buf);
    }
    expect_refused_n(&b, 10, COLI_EFORMAT,
                     (const char *const[]){"truncated header: n_tensors needs 8 bytes at offset 8, file has 10", NULL});
    expect_refused_n(&b, 40, COLI_EFORMAT,
                     (const char *const[]){"n_kv 28 is more than a file of 40 bytes can hold", NULL});
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "general.architecture");
    EXPECT_REFUSED(&b, COLI_EFORMAT,
                   "truncated header: metadata key 'general.architecture' value type needs 4 bytes "
                   "at offset 52, file has 52");
    gb_free(&b);
}

Test(gguf_hostile, string_length_past_end_of_file) {
    gguf_bytes b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "general.name", GGUF_STRING);
    gb_u64(&b, 1000);
    gb_raw(&b, "abc", 3);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "metadata key 'general.name': value string length 1000 past end of file");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 5000);
    gb_zeros(&b, 20);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "metadata key #0: name string length 5000 past end of file");
    gb_free(&b);
}

Test(gguf_hostile, array_length_past_end_of_file) {
    gguf_bytes b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "tokenizer.ggml.scores", GGUF_ARRAY);
    gb_arr(&b, GGUF_UINT32, 1000);
    gb_zeros(&b, 12);
    EXPECT_REFUSED(&b, COLI_EFORMAT,
                   "'tokenizer.ggml.scores': array of 1000 UINT32 elements (4000 bytes) past end of file");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "tokenizer.ggml.tokens", GGUF_ARRAY);
    gb_arr(&b, GGUF_STRING, 1000000);
    gb_str(&b, "a");
    EXPECT_REFUSED(&b, COLI_EFORMAT, "array of 1000000 STRING elements past end of file");
    gb_free(&b);
}

Test(gguf_hostile, array_count_times_element_size_overflows) {
    gguf_bytes b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "k", GGUF_ARRAY);
    gb_arr(&b, GGUF_UINT64, 1ull << 62);
    gb_zeros(&b, 16);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "array of 4611686018427387904 UINT64 elements: byte size overflows");
    gb_free(&b);
}

Test(gguf_hostile, bad_value_type) {
    gguf_bytes b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "k", 13);
    gb_zeros(&b, 8);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "metadata key 'k': bad value type 13");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "k", GGUF_ARRAY);
    gb_arr(&b, 99, 1);
    gb_zeros(&b, 8);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "bad array element type 99");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "k", GGUF_BOOL);
    gb_u8(&b, 2);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "metadata key 'k': bool value 2 is not 0 or 1");
    gb_free(&b);
}

static void nested(gguf_bytes *b, int levels) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "deep", GGUF_ARRAY);
    for (int i = 1; i < levels; i++) gb_arr(b, GGUF_ARRAY, 1);
    gb_arr(b, GGUF_UINT8, 1);
    gb_u8(b, 42);
}

Test(gguf_hostile, nesting_too_deep) {
    gguf_bytes b = {0};
    gguf_file *f = NULL;
    nested(&b, 8);
    cr_assert_eq(gguf_open_memory(b.p, b.n, &f), 0, "%s", coli_last_error());
    gguf_close(&f);
    gb_free(&b);
    nested(&b, 9);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "metadata key 'deep': arrays nested deeper than 8 levels");
    gb_free(&b);
}

Test(gguf_hostile, tensor_data_past_end_of_file) {
    gguf_bytes b = {0};
    one_tensor(&b, "output.weight", 2, (const uint64_t[]){32, 2}, COLI_F32, 0, 128);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'output.weight': data (256 bytes at offset 0) past end of file");
    gb_free(&b);
    one_tensor(&b, "w", 1, (const uint64_t[]){8}, COLI_F32, UINT64_MAX - 31, 64);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'w': data (32 bytes at offset 18446744073709551584) past end of file");
    gb_free(&b);
}

Test(gguf_hostile, misaligned_data_offset) {
    gguf_bytes b = {0};
    one_tensor(&b, "w", 1, (const uint64_t[]){4}, COLI_F32, 16, 64);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'w': data offset 16 is not a multiple of the alignment 32");
    gb_free(&b);
}

Test(gguf_hostile, n_dims_5_and_0) {
    gguf_bytes b = {0};
    one_tensor(&b, "w", 5, (const uint64_t[]){1, 1, 1, 1, 1}, COLI_F32, 0, 32);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'w': n_dims 5 > 4");
    gb_free(&b);
    one_tensor(&b, "w", 0, NULL, COLI_F32, 0, 32);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'w': n_dims 0 (must be 1 to 4)");
    gb_free(&b);
}

Test(gguf_hostile, product_of_dims_overflows) {
    gguf_bytes b = {0};
    one_tensor(&b, "w", 3, (const uint64_t[]){1ull << 32, 1ull << 20, 1ull << 20}, COLI_F32, 0, 32);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'w': product of dims overflows int64 at dim 2");
    gb_free(&b);
    one_tensor(&b, "w", 2, (const uint64_t[]){4, 1ull << 63}, COLI_F32, 0, 32);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'w': dim 1 = 9223372036854775808 does not fit int64");
    gb_free(&b);
    /* the element count fits, the byte count does not */
    one_tensor(&b, "w", 2, (const uint64_t[]){1ull << 31, 1ull << 31}, COLI_F32, 0, 32);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'w': data size overflows");
    gb_free(&b);
}

Test(gguf_hostile, unknown_tensor_type_is_named) {
    gguf_bytes b = {0};
    one_tensor(&b, "blk.0.ffn_down.weight", 2, (const uint64_t[]){256, 4}, 24, 0, 1024);
    EXPECT_REFUSED(
        &b, COLI_EUNSUPPORTED, "tensor 'blk.0.ffn_down.weight': tensor type I8 (24) is not supported",
        "supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, "
        "TQ1_0, TQ2_0, MXFP4, IQ2_XXS, IQ3_XXS, IQ2_XS, IQ3_S, IQ2_S, IQ1_S, IQ1_M)");
    gb_free(&b);
    /* Q8_K is an activation format: never a weight */
    one_tensor(&b, "w", 2, (const uint64_t[]){256, 1}, COLI_Q8_K, 0, 292);
    EXPECT_REFUSED(&b, COLI_EUNSUPPORTED, "tensor 'w': tensor type Q8_K (15) is not supported");
    gb_free(&b);
    one_tensor(&b, "w", 1, (const uint64_t[]){32}, 999, 0, 128);
    EXPECT_REFUSED(&b, COLI_EUNSUPPORTED, "tensor 'w': tensor type unknown (999) is not supported");
    gb_free(&b);
}

Test(gguf_hostile, duplicate_tensor_name) {
    gguf_bytes b = {0};
    gb_header(&b, 3, 2, 0);
    gb_tinfo(&b, "blk.0.attn_q.weight", 1, (const uint64_t[]){8}, COLI_F32, 0);
    gb_tinfo(&b, "blk.0.attn_q.weight", 1, (const uint64_t[]){8}, COLI_F32, 32);
    gb_pad(&b, 32);
    gb_zeros(&b, 64);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "duplicate tensor name: tensor 'blk.0.attn_q.weight' (tensors #0 and #1)");
    gb_free(&b);
}

Test(gguf_hostile, duplicate_key) {
    gguf_bytes b = {0};
    gb_header(&b, 3, 0, 3);
    gb_kv_u32(&b, "llama.block_count", 4);
    gb_kv_str(&b, "general.name", "x");
    gb_kv_u32(&b, "llama.block_count", 5);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "duplicate metadata key 'llama.block_count' (entries #0 and #2)");
    gb_free(&b);
}

Test(gguf_hostile, bad_key_names) {
    gguf_bytes b = {0};
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 3);
    gb_raw(&b, "a\0b", 3);
    gb_u32(&b, GGUF_UINT8);
    gb_u8(&b, 0);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "metadata key #0: name contains a NUL byte");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_u32(&b, "", 1);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "metadata key #0: empty name");
    gb_free(&b);
}

Test(gguf_hostile, zero_dim) {
    gguf_bytes b = {0};
    one_tensor(&b, "w", 2, (const uint64_t[]){8, 0}, COLI_F32, 0, 32);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'w': dim 1 is 0 (every dim must be >= 1)");
    gb_free(&b);
}

Test(gguf_hostile, quantized_row_not_a_multiple_of_the_block) {
    gguf_bytes b = {0};
    one_tensor(&b, "blk.0.ffn_up.weight", 2, (const uint64_t[]){33, 2}, COLI_Q8_0, 0, 256);
    EXPECT_REFUSED(&b, COLI_EFORMAT,
                   "tensor 'blk.0.ffn_up.weight': row length ne[0] = 33 is not a multiple of the Q8_0 block size 32");
    gb_free(&b);
    one_tensor(&b, "w", 1, (const uint64_t[]){48}, COLI_Q4_0, 0, 256);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "not a multiple of the Q4_0 block size 32");
    gb_free(&b);
}

/* The 256-value super-blocks: a row that holds whole 32-value blocks but
 * not whole super-blocks (a width legal for Q4_0, not for Q4_K) is refused
 * by the reader, before any kernel sees it. */
Test(gguf_hostile, k_quant_row_not_a_multiple_of_256) {
    static const struct {
        coli_dtype t;
        const char *name;
        uint64_t ne0;
    } cases[] = {
        {COLI_Q4_K, "Q4_K", 128},        {COLI_Q6_K, "Q6_K", 288},        {COLI_Q2_K, "Q2_K", 32},
        {COLI_Q3_K, "Q3_K", 512 + 96},   {COLI_Q5_K, "Q5_K", 255},        {COLI_IQ4_XS, "IQ4_XS", 96},
        {COLI_TQ1_0, "TQ1_0", 160},      {COLI_TQ2_0, "TQ2_0", 32},       {COLI_IQ2_XXS, "IQ2_XXS", 64},
        {COLI_IQ3_XXS, "IQ3_XXS", 128},  {COLI_IQ1_M, "IQ1_M", 256 + 64}, {COLI_IQ1_S, "IQ1_S", 256 + 64},
        {COLI_IQ2_S, "IQ2_S", 256 + 64}, {COLI_IQ3_S, "IQ3_S", 256 + 64}, {COLI_IQ2_XS, "IQ2_XS", 512 + 32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gguf_bytes b = {0};
        char want[160];
        one_tensor(&b, "blk.0.ffn_down_exps.weight", 3, (const uint64_t[]){cases[i].ne0, 4, 2}, cases[i].t, 0, 8192);
        snprintf(want, sizeof want,
                 "tensor 'blk.0.ffn_down_exps.weight': row length ne[0] = %llu is not a "
                 "multiple of the %s block size 256",
                 (unsigned long long)cases[i].ne0, cases[i].name);
        EXPECT_REFUSED(&b, COLI_EFORMAT, want);
        gb_free(&b);
    }
    /* the 32-value types of the new set keep their own block size */
    gguf_bytes b = {0};
    one_tensor(&b, "w", 2, (const uint64_t[]){48, 2}, COLI_Q5_1, 0, 256);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "row length ne[0] = 48 is not a multiple of the Q5_1 block size 32");
    gb_free(&b);
    one_tensor(&b, "w", 2, (const uint64_t[]){2880 + 16, 2}, COLI_MXFP4, 0, 256);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "row length ne[0] = 2896 is not a multiple of the MXFP4 block size 32");
    gb_free(&b);
}

/* A file cut inside the last block of a tensor: one byte short is refused
 * (420 bytes of Q6_K: 2 rows of one 210-byte super-block), whole is read. */
Test(gguf_hostile, truncated_block_of_a_new_type) {
    gguf_bytes b = {0};
    one_tensor(&b, "output.weight", 2, (const uint64_t[]){256, 2}, COLI_Q6_K, 0, 419);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'output.weight': data (420 bytes at offset 0) past end of file");
    gb_free(&b);
    one_tensor(&b, "w", 2, (const uint64_t[]){64, 3}, COLI_Q4_1, 0, 6 * 20 - 7);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'w': data (120 bytes at offset 0) past end of file");
    gb_free(&b);
    /* MXFP4's 17-byte blocks and TQ1_0's 54-byte super-blocks */
    one_tensor(&b, "w", 3, (const uint64_t[]){64, 3, 2}, COLI_MXFP4, 0, 12 * 17 - 1);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'w': data (204 bytes at offset 0) past end of file");
    gb_free(&b);
    one_tensor(&b, "w", 2, (const uint64_t[]){512, 1}, COLI_TQ1_0, 0, 107);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensor 'w': data (108 bytes at offset 0) past end of file");
    gb_free(&b);
    gguf_file *f = NULL;
    one_tensor(&b, "output.weight", 2, (const uint64_t[]){256, 2}, COLI_Q6_K, 0, 420);
    cr_assert_eq(gguf_open_memory(b.p, b.n, &f), 0, "%s", coli_last_error());
    cr_assert_eq(gguf_tensor(f, 0)->nbytes, 420);
    gguf_close(&f);
    gb_free(&b);
}

Test(gguf_hostile, bad_alignment_value) {
    static const uint32_t bad[] = {0, 48, 1u << 17, 0x80000000u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gguf_bytes b = {0};
        char want[96];
        gb_header(&b, 3, 0, 1);
        gb_kv_u32(&b, "general.alignment", bad[i]);
        snprintf(want, sizeof want, "bad general.alignment %u (must be a power of two from 1 to 65536)", bad[i]);
        EXPECT_REFUSED(&b, COLI_EFORMAT, want);
        gb_free(&b);
    }
    gguf_bytes b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "general.alignment", GGUF_INT32);
    gb_u32(&b, 32);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "bad general.alignment: type INT32, expected UINT32");
    gb_free(&b);
}

Test(gguf_hostile, absurd_counts) {
    gguf_bytes b = {0};
    gb_header(&b, 3, 1ull << 60, 0);
    gb_zeros(&b, 64);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "n_tensors 1152921504606846976 is more than a file of 88 bytes can hold");
    gb_free(&b);
    gb_header(&b, 3, 0, UINT64_MAX);
    gb_zeros(&b, 64);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "n_kv 18446744073709551615 is more than a file of 88 bytes can hold");
    gb_free(&b);
    gb_header(&b, 3, 2, 3); /* each fits alone, both together do not */
    gb_zeros(&b, 90);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "n_kv 3 and n_tensors 2 are more than a file of 114 bytes can hold");
    gb_free(&b);
}

Test(gguf_hostile, overlapping_tensors) {
    gguf_bytes b = {0};
    gb_header(&b, 3, 2, 0);
    gb_tinfo(&b, "a", 1, (const uint64_t[]){16}, COLI_F32, 32);
    gb_tinfo(&b, "b", 1, (const uint64_t[]){16}, COLI_F32, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 128);
    EXPECT_REFUSED(&b, COLI_EFORMAT, "tensors 'b' and 'a' overlap");
    gb_free(&b);
}

/* Random corruption of a valid file: never a crash, and whatever is
 * accepted can be walked through every accessor. Deterministic. */
Test(gguf_hostile, random_mutations_never_crash) {
    gguf_bytes b = {0};
    gb_all_types(&b, 3);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    int accepted = 0;
    for (int iter = 0; iter < 3000; iter++) {
        gguf_bytes m = {0};
        gb_raw(&m, b.p, b.n);
        int flips = 1 + iter % 4;
        for (int k = 0; k < flips; k++) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            size_t at = (size_t)(state % m.n);
            if (k == 0 && iter % 3 == 0)
                gb_patch_u64(&m, at & ~(size_t)3, state >> (iter % 64));
            else
                m.p[at] ^= (uint8_t)(1u << (state >> 32) % 8);
        }
        gguf_file *f = NULL;
        void *buf;
        if (open_exact(&m, m.n, &f, &buf) == 0) {
            accepted++;
            cr_assert_geq(gb_walk(f), 0, "iteration %d", iter);
            gguf_close(&f);
        } else {
            cr_assert(strncmp(coli_last_error(), "<memory>: ", 10) == 0, "%s", coli_last_error());
        }
        free(buf);
        gb_free(&m);
    }
    cr_assert_gt(accepted, 0); /* flips in tensor data and values are harmless */
    gb_free(&b);
}
