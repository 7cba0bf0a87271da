/*
 * gptoss_util.h - the tiny gpt-oss model of the tests (tests/gen_gptoss.py,
 * generated on first use into $COLI_BUILD/ref; its MXFP4_MOE copy made by
 * coli_quantize_file), llama.cpp's records of it (tests/fixtures/gptoss/),
 * logits through the public API and metadata variants for refusal tests.
 * Header-only, for test_gptoss.c and the batching / prefix-cache / fault
 * tests that run the family too.
 */
#ifndef COLI_TESTS_GPTOSS_UTIL_H
#define COLI_TESTS_GPTOSS_UTIL_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "colibri.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "tests/ref_models.h"

#define GPTOSS_F32 "tiny-gptoss-f32.gguf"
#define GPTOSS_MXFP4 "tiny-gptoss-mxfp4_moe.gguf"
#define GPTOSS_MAX_POS 64
#define GPTOSS_TOP 10

/* One logit_dump record: the prompt and each position's top-10. */
typedef struct gptoss_ref {
    int n_pos;
    int32_t ids[GPTOSS_MAX_POS];
    int top_id[GPTOSS_MAX_POS][GPTOSS_TOP];
    double top_logit[GPTOSS_MAX_POS][GPTOSS_TOP];
    char sha256[65];
} gptoss_ref;

/* The generator's file name with its extra arguments (args: "" or
 * "--pattern N"), generated once. */
static inline void gptoss_model_gen(const char *name, const char *args, char *out, size_t cap) {
    char dir[4096], cmd[16800];
    s_require_shared();
    const char *py = s_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    int fd = s_lock_dir("ref", name, dir, sizeof dir, out, cap);
    if (!s_exists(out)) {
        snprintf(cmd, sizeof cmd, "COLI_SHARED='%s' %s tests/gen_gptoss.py '%s.tmp' %s && mv '%s.tmp' '%s'", s_shared(),
                 py, out, args, out, out);
        s_run_or_fail(cmd);
    }
    s_unlock_dir(fd);
}

/* The F32 model's path, generated once. */
static inline void gptoss_model_f32(char *out, size_t cap) { gptoss_model_gen(GPTOSS_F32, "", out, cap); }

/* The MXFP4_MOE copy (experts MXFP4, other weights Q8_0), made once. */
static inline void gptoss_model_mxfp4(char *out, size_t cap) {
    char f32[4096], dir[4096], tmp[4200];
    gptoss_model_f32(f32, sizeof f32);
    int fd = s_lock_dir("ref", GPTOSS_MXFP4, dir, sizeof dir, out, cap);
    if (!s_exists(out)) {
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        cr_assert_eq(coli_quantize_file(f32, tmp, "MXFP4_MOE"), 0, "%s", coli_last_error());
        cr_assert_eq(rename(tmp, out), 0);
    }
    s_unlock_dir(fd);
}

/* Read a fixture ("# model NAME sha256 HEX", "ids: ...", "pos P: id logit ..."),
 * and check that model is the file it was recorded on. */
static inline void gptoss_ref_load(const char *fixture, const char *model, gptoss_ref *r) {
    char line[8192], name[256];
    memset(r, 0, sizeof *r);
    FILE *f = fopen(fixture, "r");
    cr_assert(f, "cannot open %s", fixture);
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "# model %255s sha256 %64s", name, r->sha256) == 2) continue;
        if (strncmp(line, "ids:", 4) == 0) {
            char *p = line + 4, *e;
            for (long v; (v = strtol(p, &e, 10)), e != p; p = e) {
                cr_assert_lt(r->n_pos, GPTOSS_MAX_POS);
                r->ids[r->n_pos++] = (int32_t)v;
            }
            continue;
        }
        int pos, off;
        if (sscanf(line, "pos %d:%n", &pos, &off) != 1) continue;
        cr_assert(pos >= 0 && pos < r->n_pos, "%s: position %d outside the prompt", fixture, pos);
        char *p = line + off;
        for (int j = 0; j < GPTOSS_TOP; j++) {
            char *e;
            r->top_id[pos][j] = (int)strtol(p, &e, 10);
            r->top_logit[pos][j] = strtod(e, &p);
            cr_assert(p != e, "%s: position %d: fewer than %d entries", fixture, pos, GPTOSS_TOP);
        }
    }
    fclose(f);
    cr_assert_gt(r->n_pos, 0, "%s: no ids", fixture);
    char got[65];
    ref_sha256(model, got);
    cr_assert_str_eq(got, r->sha256, "%s is not the file %s was recorded on (generator or quantizer changed)", model,
                     fixture);
}

/* Every position's logits of ids (one teacher-forced eval) on devices. */
static inline float *gptoss_logits(const char *model, const char *devices, int kv_f16, const int32_t *ids, int n,
                                   int *n_vocab) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = devices;
    mp.n_threads = 1;
    mp.kv_f16 = kv_f16;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(model, &mp, &m), 0, "%s", coli_last_error());
    coli_model_info info;
    coli_model_get_info(m, &info);
    *n_vocab = info.n_vocab;
    float *lg = malloc((size_t)n * (size_t)info.n_vocab * sizeof(float));
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0, "%s", coli_last_error());
    cr_assert_eq(coli_eval(ctx, ids, n, lg, 1), 0, "%s", coli_last_error());
    coli_context_free(&ctx);
    coli_model_free(&m);
    return lg;
}

/* What a variant of the model changes (zero: nothing). */
typedef struct gptoss_variant {
    const char *drop_key;    /* a key left out */
    const char *key;         /* a key set to one of: */
    int64_t u32;             /* > 0: this u32 */
    float f32;               /* != 0: this f32 */
    int flags3;              /* 1: an int32 array of 3 flags (a wrong length for 4 layers) */
    const char *drop_tensor; /* a tensor left out */
} gptoss_variant;

/* A copy of src at dst with the changes of v. */
static inline void gptoss_write_variant(const char *src, const char *dst, const gptoss_variant *v) {
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(src, &f), 0, "%s", coli_last_error());
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const gguf_str k = gguf_key_name(f, i);
        if (v->drop_key && k.len == strlen(v->drop_key) && memcmp(k.ptr, v->drop_key, k.len) == 0) continue;
        cr_assert_eq(gguf_writer_copy_kv(w, f, i), 0);
    }
    if (v->key && v->u32 > 0) cr_assert_eq(gguf_writer_set_u32(w, v->key, (uint32_t)v->u32), 0);
    if (v->key && v->f32 != 0.0f) cr_assert_eq(gguf_writer_set_f32(w, v->key, v->f32), 0);
    if (v->key && v->flags3) {
        const int32_t flags[3] = {1, 0, 1};
        cr_assert_eq(gguf_writer_set_arr(w, v->key, GGUF_INT32, flags, 3), 0);
    }
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        if (v->drop_tensor && strcmp(t->name, v->drop_tensor) == 0) continue;
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), 0);
    }
    cr_assert_eq(gguf_writer_write(w, dst), 0, "%s", coli_last_error());
    gguf_writer_free(&w);
    gguf_close(&f);
}

#endif
