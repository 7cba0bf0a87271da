/*
 * gguf_edit.h - a copy of a GGUF file with one thing changed: a key set,
 * cut or left out, a tensor left out, its dims swapped or one row short.
 * The tests' way of making a broken model from a good one (test_hybrid's
 * refusals, test_model_mutations' hostile files). Static functions: include
 * from one test file each.
 */
#ifndef COLI_TESTS_GGUF_EDIT_H
#define COLI_TESTS_GGUF_EDIT_H

#include <stdio.h>
#include <string.h>

#include "core/gguf/gguf.h"

/* What gguf_edit_write changes (NULL / 0: nothing). */
typedef struct gguf_edit {
    const char *set_key; /* set to v: a u32, or an F32 when f32 (in place, or added when absent) */
    double v;
    int f32;
    const char *cut_key;                /* this array cut to its first element */
    const char *drop_key, *drop_tensor; /* left out */
    const char *swap;                   /* this tensor's first two dims swapped */
    const char *shrink;                 /* this tensor's outermost dim one less, its data cut to match */
} gguf_edit;

static inline int gguf_edit_is(gguf_str k, const char *name) {
    return name && k.len == strlen(name) && !memcmp(k.ptr, name, k.len);
}

static inline int gguf_edit_set(gguf_writer *w, const gguf_edit *e) {
    return e->f32 ? gguf_writer_set_f32(w, e->set_key, (float)e->v)
                  : gguf_writer_set_u32(w, e->set_key, (uint32_t)e->v);
}

/* The array key `name` of f cut to its first element, into w. */
static inline int gguf_edit_cut(gguf_writer *w, const gguf_file *f, const char *name) {
    gguf_type at;
    uint64_t n = 0;
    const void *data = NULL;
    int rc = gguf_get_arr(f, name, &at, &n, &data);
    if (rc || at != GGUF_STRING) return rc ? rc : gguf_writer_set_arr(w, name, at, data, 1);
    gguf_str s0;
    if ((rc = gguf_arr_str(f, name, 0, &s0))) return rc;
    char one[512];
    snprintf(one, sizeof one, "%.*s", (int)(s0.len < 500 ? s0.len : 500), s0.ptr);
    const char *strs[1] = {one};
    return gguf_writer_set_arr_str(w, name, strs, 1);
}

/* f with e applied, written to dst: 0 or the writer's error. */
static inline int gguf_edit_write(const gguf_file *f, const char *dst, const gguf_edit *e) {
    gguf_writer *w = gguf_writer_new();
    int rc = w ? 0 : -1, set_done = !e->set_key;
    for (int64_t i = 0; i < gguf_n_kv(f) && rc == 0; i++) {
        gguf_str k = gguf_key_name(f, i);
        if (gguf_edit_is(k, e->drop_key)) continue;
        if (gguf_edit_is(k, e->set_key))
            rc = gguf_edit_set(w, e), set_done = 1;
        else if (gguf_edit_is(k, e->cut_key))
            rc = gguf_edit_cut(w, f, e->cut_key);
        else
            rc = gguf_writer_copy_kv(w, f, i);
    }
    if (rc == 0 && !set_done) rc = gguf_edit_set(w, e);
    for (int64_t i = 0; i < gguf_n_tensors(f) && rc == 0; i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        if (e->drop_tensor && !strcmp(t->name, e->drop_tensor)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        size_t nbytes = t->nbytes;
        if (e->swap && !strcmp(t->name, e->swap)) ne[0] = t->ne[1], ne[1] = t->ne[0];
        if (e->shrink && !strcmp(t->name, e->shrink)) {
            const int d = t->n_dims - 1;
            nbytes -= nbytes / (size_t)ne[d];
            ne[d]--;
        }
        rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, t->data, nbytes);
    }
    if (rc == 0) rc = gguf_writer_write(w, dst);
    gguf_writer_free(&w);
    return rc;
}

#endif
