/*
 * test_dsa.c - DeepSeek Sparse Attention: the tiny deepseek32 and glm-dsa
 * models of tests/gen_dsa.py (generated on first use into $COLI_BUILD/ref,
 * their sha256 checked against the fixture) against llama.cpp de3ff815's
 * logits (tests/fixtures/dsa-<family>-logits.txt, F32 KV): the F32 rule of
 * ../shared/reference (every recorded logit within 1e-3, the same argmax)
 * on a 24- and a 40-token prompt, both past the indexer's top-k of 8, and
 * llama.cpp's greedy continuation decoded one token at a time. Also: the
 * sparse path is taken (a dense copy differs past top-k and is bit-equal
 * before it), workers equal in-process, batched / prefix-restored /
 * token-by-token equal a fresh one-batch evaluation, bad metadata refused
 * in one line naming the key, the MTP block not run.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "coordinator/forward_impl.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "tests/greedy_run.h"
#include "tests/ref_models.h"
#include "tests/serve_util.h"

#define MAX_IDS 64
#define TOP 10
#define GEN 8

typedef struct ref_prompt {
    int n;
    int32_t ids[MAX_IDS];
    int32_t top_id[MAX_IDS][TOP];
    float top_logit[MAX_IDS][TOP];
    int32_t gen[GEN];
} ref_prompt;

typedef struct ref_file {
    char sha256[65];
    int n_prompts;
    ref_prompt p[2];
} ref_file;

static void s_read_ids(const char *s, int32_t *out, int *n, int cap) {
    char *e;
    *n = 0;
    for (long v = strtol(s, &e, 10); e != s && *n < cap; v = strtol(s, &e, 10)) {
        out[(*n)++] = (int32_t)v;
        s = e;
    }
}

/* tests/fixtures/dsa-<fam>-logits{,-kv16}.txt (llama.cpp's logit_dump output, F32 or F16 KV). */
static void s_read_fixture_kv(const char *fam, int kv_f16, ref_file *r) {
    char path[256], line[8192];
    snprintf(path, sizeof path, "tests/fixtures/dsa-%s-logits%s.txt", fam, kv_f16 ? "-kv16" : "");
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot open %s", path);
    memset(r, 0, sizeof *r);
    ref_prompt *p = NULL;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || strncmp(line, "ids:", 4) == 0) continue; /* logit_dump's echo of the ids */
        if (sscanf(line, "sha256 %64s", r->sha256) == 1) continue;
        if (strncmp(line, "ids ", 4) == 0) {
            cr_assert_lt(r->n_prompts, 2);
            p = &r->p[r->n_prompts++];
            s_read_ids(line + 4, p->ids, &p->n, MAX_IDS);
        } else if (strncmp(line, "gen:", 4) == 0) {
            int n = 0;
            s_read_ids(line + 4, p->gen, &n, GEN);
            cr_assert_eq(n, GEN, "%s: gen line", path);
        } else {
            int pos, off = 0, used = 0;
            cr_assert(p && sscanf(line, "pos %d:%n", &pos, &off) == 1 && pos >= 0 && pos < p->n, "%s: %s", path, line);
            for (int i = 0; i < TOP; i++, off += used)
                cr_assert_eq(sscanf(line + off, "%d %f%n", &p->top_id[pos][i], &p->top_logit[pos][i], &used), 2);
        }
    }
    fclose(f);
    cr_assert_eq(r->n_prompts, 2, "%s: two prompts", path);
}

static void s_read_fixture(const char *fam, ref_file *r) { s_read_fixture_kv(fam, 0, r); }

/* The family's model (generated once), checked against the fixture's hash. */
static void s_model(const char *fam, const ref_file *r, char *out, size_t cap) {
    s_require_shared();
    char dir[4096], file[64], cmd[9000];
    snprintf(file, sizeof file, "tiny-%s.gguf", fam);
    int fd = s_lock_dir("ref", file, dir, sizeof dir, out, cap);
    if (!s_exists(out)) {
        const char *py = s_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
        snprintf(cmd, sizeof cmd, "COLI_SHARED='%s' %s tests/gen_dsa.py %s '%s'", s_shared(), py, fam, out);
        s_run_or_fail(cmd);
    }
    s_unlock_dir(fd);
    ref_assert_sha256(out, r->sha256);
}

static coli_model *s_load_kv(const char *path, const char *devices, int kv_f16) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = devices;
    mp.n_threads = 2;
    mp.kv_f16 = kv_f16;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(path, &mp, &m), 0, "%s", coli_last_error());
    return m;
}

static coli_model *s_load(const char *path, const char *devices) { return s_load_kv(path, devices, 0); }

/* Logits of every position of ids in one batch (caller frees). */
static float *s_logits(coli_model *m, const int32_t *ids, int n, int *n_vocab) {
    coli_model_info info;
    coli_model_get_info(m, &info);
    *n_vocab = info.n_vocab;
    float *lg = malloc((size_t)n * (size_t)info.n_vocab * sizeof(float));
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0, "%s", coli_last_error());
    cr_assert_eq(coli_eval(ctx, ids, n, lg, 1), 0, "%s", coli_last_error());
    coli_context_free(&ctx);
    return lg;
}

static int s_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Every recorded logit of every position within tol, the same argmax
 * where llama.cpp's top-1 minus top-2 exceeds gap_min. */
static void s_check_logits(coli_model *m, const ref_prompt *p, double tol, double gap_min) {
    int V;
    float *lg = s_logits(m, p->ids, p->n, &V);
    double worst = 0.0;
    for (int t = 0; t < p->n; t++) {
        const float *row = lg + (size_t)t * (size_t)V;
        double pos_worst = 0.0;
        for (int i = 0; i < TOP; i++)
            pos_worst = fmax(pos_worst, fabs((double)row[p->top_id[t][i]] - (double)p->top_logit[t][i]));
        cr_expect_leq(pos_worst, tol, "%d tokens, position %d: max delta %.3g", p->n, t, pos_worst);
        worst = fmax(worst, pos_worst);
        if (p->top_logit[t][0] - p->top_logit[t][1] > gap_min)
            cr_expect_eq(s_argmax(row, V), p->top_id[t][0], "position %d: argmax %d, llama.cpp %d", t, s_argmax(row, V),
                         p->top_id[t][0]);
    }
    cr_log_info("%d tokens: max |logit - llama.cpp| %.2e", p->n, worst);
    free(lg);
}

/* The F32 rule on every position, then llama.cpp's greedy continuation. */
static void s_check_prompt(coli_model *m, const ref_prompt *p) {
    s_check_logits(m, p, 1e-3, -1.0);
    coli_model_info info;
    coli_model_get_info(m, &info);
    const int V = info.n_vocab;
    coli_context *ctx = NULL;
    float *last = malloc((size_t)V * sizeof(float));
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0);
    cr_assert_eq(coli_eval(ctx, p->ids, p->n, last, 0), 0, "%s", coli_last_error());
    for (int g = 0; g < GEN; g++) {
        const int32_t id = s_argmax(last, V);
        cr_expect_eq(id, p->gen[g], "%d tokens, greedy step %d: %d, llama.cpp %d", p->n, g, id, p->gen[g]);
        cr_assert_eq(coli_eval(ctx, &id, 1, last, 0), 0, "%s", coli_last_error());
    }
    coli_context_free(&ctx);
    free(last);
}

static void s_llama_cpp(const char *fam, const char *devices) {
    ref_file r;
    char path[4096];
    s_read_fixture(fam, &r);
    s_model(fam, &r, path, sizeof path);
    coli_model *m = s_load(path, devices);
    coli_model_info info;
    coli_model_get_info(m, &info);
    cr_expect_eq(info.n_layer, 3, "the MTP block (blk.3) is loaded, not run");
    for (int i = 0; i < r.n_prompts; i++) s_check_prompt(m, &r.p[i]);
    coli_model_free(&m);
}

/* The F16 rule of ../shared/reference: F16 KV against llama.cpp's F16-KV
 * run, every recorded logit within 1e-2, the same argmax where llama.cpp's
 * gap is > 2e-2 (tests/fixtures/dsa-<fam>-logits-kv16.txt). */
static void s_f16_rule(const char *fam) {
    ref_file r;
    char path[4096];
    s_read_fixture_kv(fam, 1, &r);
    s_model(fam, &r, path, sizeof path);
    coli_model *m = s_load_kv(path, "inproc", 1);
    for (int i = 0; i < r.n_prompts; i++) s_check_logits(m, &r.p[i], 1e-2, 2e-2);
    coli_model_free(&m);
}

TestSuite(dsa, .timeout = 240);

Test(dsa, deepseek32_f16_rule) { s_f16_rule("deepseek32"); }
Test(dsa, glm_dsa_f16_rule) { s_f16_rule("glm-dsa"); }

Test(dsa, deepseek32_matches_llama_cpp) { s_llama_cpp("deepseek32", "inproc"); }
Test(dsa, glm_dsa_matches_llama_cpp) { s_llama_cpp("glm-dsa", "inproc"); }

/* Workers give the bytes the in-process experts give. */
static void s_workers_equal(const char *fam) {
    ref_file r;
    char path[4096];
    s_read_fixture(fam, &r);
    s_model(fam, &r, path, sizeof path);
    const ref_prompt *p = &r.p[1];
    int V, V2;
    coli_model *a = s_load(path, "inproc");
    float *x = s_logits(a, p->ids, p->n, &V);
    coli_model_free(&a);
    coli_model *b = s_load(path, "cpu:2");
    float *y = s_logits(b, p->ids, p->n, &V2);
    coli_model_free(&b);
    cr_expect(memcmp(x, y, (size_t)p->n * (size_t)V * sizeof(float)) == 0, "%s: workers' logits differ", fam);
    free(x);
    free(y);
}

Test(dsa, deepseek32_workers_equal_inproc) { s_workers_equal("deepseek32"); }
Test(dsa, glm_dsa_workers_equal_inproc) { s_workers_equal("glm-dsa"); }

/* Equal scores at the top-k boundary: which positions stay is libstdc++'s
 * heap's decision, not "lowest index first". Expected sets from
 * std::partial_sort (g++ 12, libstdc++) on these rows. */
Test(dsa, top_k_ties_as_ggml) {
    static const struct {
        int n, k;
        float sc[20];
        int32_t want[8];
    } cases[] = {
        {14, 6, {2, 1, 2, 0, 2, 1, 0, 1, 2, 1, 1, 0, 1, 0}, {0, 1, 2, 4, 7, 8}},
        {15, 7, {0, 2, 0, 2, 0, 0, 1, 1, 1, 1, 2, 0, 2, 2, 0}, {1, 3, 7, 9, 10, 12, 13}},
        {14, 5, {1, 1, 0, 1, 2, 2, 0, 2, 1, 1, 2, 0, 1, 1}, {1, 4, 5, 7, 10}},
        {17, 6, {1, 0, 0, 2, 2, 1, 1, 1, 1, 2, 0, 0, 2, 1, 1, 1, 0}, {3, 4, 6, 7, 9, 12}},
        {11, 7, {0, 0, 2, 0, 0, 0, 2, 0, 1, 0, 2}, {1, 2, 3, 4, 6, 8, 10}},
        {10, 8, {0, 2, 0, 1, 2, 0, 1, 0, 2, 2}, {0, 1, 3, 4, 6, 7, 8, 9}},
        {5, 5, {3, 1, 4, 1, 5}, {0, 1, 2, 3, 4}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t got[8];
        forward_dsa_top_k(cases[c].sc, cases[c].n, cases[c].k, got);
        cr_expect(memcmp(got, cases[c].want, (size_t)cases[c].k * sizeof(int32_t)) == 0,
                  "case %zu: got %d %d %d ..., want %d %d %d ...", c, got[0], got[1], got[2], cases[c].want[0],
                  cases[c].want[1], cases[c].want[2]);
    }
}

// ---------------------------------------------------------------------------
// modified copies

typedef struct edit {
    const char *drop_key;    /* key left out (NULL: none) */
    const char *drop_tensor; /* tensor left out */
    const char *u32_key;     /* key set to u32_val */
    uint32_t u32_val;
    const char *arr_key; /* key set to the bool array arr[0..n_arr) */
    const int8_t *arr;
    int n_arr;
} edit;

static void s_write_edited(const char *src, const char *dst, const edit *e) {
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(src, &f), 0, "%s", coli_last_error());
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_str k = gguf_key_name(f, i);
        if (e->drop_key && k.len == strlen(e->drop_key) && memcmp(k.ptr, e->drop_key, k.len) == 0) continue;
        cr_assert_eq(gguf_writer_copy_kv(w, f, i), 0);
    }
    if (e->u32_key) cr_assert_eq(gguf_writer_set_u32(w, e->u32_key, e->u32_val), 0);
    if (e->arr_key) cr_assert_eq(gguf_writer_set_arr(w, e->arr_key, GGUF_BOOL, e->arr, (uint64_t)e->n_arr), 0);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        if (e->drop_tensor && strcmp(t->name, e->drop_tensor) == 0) continue;
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), 0);
    }
    cr_assert_eq(gguf_writer_write(w, dst), 0, "%s", coli_last_error());
    gguf_writer_free(&w);
    gguf_close(&f);
}

static void s_edited(const char *fam, const edit *e, char *dst, size_t cap) {
    ref_file r;
    char src[4096];
    s_read_fixture(fam, &r);
    s_model(fam, &r, src, sizeof src);
    snprintf(dst, cap, "%s/dsa-edit-%d.gguf", s_build(), (int)getpid());
    s_write_edited(src, dst, e);
}

/* Rows up to top_k see every position: a copy whose top_k covers the whole
 * prompt gives the same bits there, and differs past it. */
static void s_short_is_dense(const char *fam) {
    char key[96], dense[4200], sparse[4096];
    snprintf(key, sizeof key, "%s.attention.indexer.top_k", fam);
    const edit e = {.u32_key = key, .u32_val = 4096};
    s_edited(fam, &e, dense, sizeof dense);
    ref_file r;
    s_read_fixture(fam, &r);
    s_model(fam, &r, sparse, sizeof sparse);
    const ref_prompt *p = &r.p[1];
    int V;
    coli_model *a = s_load(sparse, "inproc"), *b = s_load(dense, "inproc");
    float *x = s_logits(a, p->ids, p->n, &V), *y = s_logits(b, p->ids, p->n, &V);
    const size_t row = (size_t)V * sizeof(float);
    cr_expect(memcmp(x, y, 8 * row) == 0, "%s: positions 0..7 (<= top_k 8 visible) differ from dense", fam);
    double past = 0.0;
    for (size_t i = 8 * (size_t)V; i < (size_t)p->n * (size_t)V; i++)
        if (fabs((double)x[i] - (double)y[i]) > past) past = fabs((double)x[i] - (double)y[i]);
    cr_expect_gt(past, 1e-2, "%s: sparse attention changes nothing past top_k (max delta %.3g)", fam, past);
    coli_model_free(&a);
    coli_model_free(&b);
    free(x);
    free(y);
    unlink(dense);
}

Test(dsa, deepseek32_short_sequence_is_dense) { s_short_is_dense("deepseek32"); }
Test(dsa, glm_dsa_short_sequence_is_dense) { s_short_is_dense("glm-dsa"); }

/* A refused copy: the error is one line and names what. */
static void s_refused(const char *fam, const edit *e, const char *what) {
    char dst[4200];
    s_edited(fam, e, dst, sizeof dst);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    coli_model *m = NULL;
    cr_expect_lt(coli_model_load(dst, &mp, &m), 0, "loaded a file with %s broken", what);
    const char *msg = coli_last_error();
    cr_expect(strstr(msg, what) != NULL, "error does not name %s: %s", what, msg);
    cr_expect(strchr(msg, '\n') == NULL, "error is not one line: %s", msg);
    coli_model_free(&m);
    unlink(dst);
}

Test(dsa, bad_metadata_refused) {
    const int8_t short_types[2] = {1, 1}, shared_first[3] = {0, 1, 1};
    s_refused("deepseek32", &(edit){.drop_key = "deepseek32.attention.indexer.top_k"}, "attention.indexer.top_k");
    s_refused("deepseek32", &(edit){.drop_key = "deepseek32.attention.indexer.head_count"},
              "attention.indexer.head_count");
    s_refused("deepseek32", &(edit){.drop_key = "deepseek32.expert_gating_func"}, "expert_gating_func");
    s_refused("deepseek32", &(edit){.drop_key = "deepseek32.attention.key_length_mla"}, "key_length_mla");
    s_refused("deepseek32", &(edit){.u32_key = "deepseek32.attention.indexer.key_length", .u32_val = 8},
              "attention.indexer.key_length");
    s_refused("deepseek32", &(edit){.drop_tensor = "blk.1.indexer.proj.weight"}, "blk.1.indexer.proj.weight");
    s_refused("glm-dsa", &(edit){.drop_tensor = "blk.1.indexer.attn_k.weight"}, "blk.1.indexer.attn_k.weight");
    s_refused("deepseek32", &(edit){.drop_tensor = "blk.3.nextn.enorm.weight"}, "blk.3.nextn.enorm.weight");
    s_refused("glm-dsa", &(edit){.arr_key = "glm-dsa.attention.indexer.types", .arr = short_types, .n_arr = 2},
              "attention.indexer.types");
    s_refused("glm-dsa", &(edit){.arr_key = "glm-dsa.attention.indexer.types", .arr = shared_first, .n_arr = 3},
              "attention.indexer.types");
}

// ---------------------------------------------------------------------------
// the indexer's keys are part of the sequence state

/* The 40-token prompt of the fixture, the model loaded, the one-batch logits. */
typedef struct state_case {
    ref_prompt p;
    coli_model *m;
    int V;
    float *fresh; /* (p.n, V) */
} state_case;

static void s_case(const char *fam, state_case *c) {
    ref_file r;
    char path[4096];
    s_read_fixture(fam, &r);
    s_model(fam, &r, path, sizeof path);
    c->p = r.p[1];
    c->m = s_load(path, "inproc");
    c->fresh = s_logits(c->m, c->p.ids, c->p.n, &c->V);
}

static void s_case_free(state_case *c) {
    coli_model_free(&c->m);
    free(c->fresh);
}

/* Prefill 30 tokens, then one at a time: each row's bits as in one batch
 * (the cached indexer keys are those the batch wrote). */
static void s_token_by_token(const char *fam) {
    state_case c;
    s_case(fam, &c);
    const size_t row = (size_t)c.V * sizeof(float);
    float *lg = malloc(row);
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(c.m, NULL, &ctx), 0);
    cr_assert_eq(coli_eval(ctx, c.p.ids, 30, lg, 0), 0, "%s", coli_last_error());
    cr_expect(memcmp(lg, c.fresh + 29 * (size_t)c.V, row) == 0, "%s: position 29 differs", fam);
    for (int t = 30; t < c.p.n; t++) {
        cr_assert_eq(coli_eval(ctx, &c.p.ids[t], 1, lg, 0), 0, "%s", coli_last_error());
        cr_expect(memcmp(lg, c.fresh + (size_t)t * (size_t)c.V, row) == 0, "%s: position %d decoded alone differs", fam,
                  t);
    }
    coli_context_free(&ctx);
    free(lg);
    s_case_free(&c);
}

Test(dsa, deepseek32_decode_equals_batch) { s_token_by_token("deepseek32"); }
Test(dsa, glm_dsa_decode_equals_batch) { s_token_by_token("glm-dsa"); }

/* A prompt restored from the prefix cache (32 positions in blocks of 16,
 * the indexer keys in their rows) continues with the fresh bits. */
static void s_prefix_reuse(const char *fam) {
    state_case c;
    s_case(fam, &c);
    const size_t row = (size_t)c.V * sizeof(float);
    coli_prefix_cache *pc = NULL;
    cr_assert_eq(coli_prefix_cache_new(c.m, 64u << 20, 16, &pc), 0, "%s", coli_last_error());
    coli_context *a = NULL, *b = NULL;
    float *lg = malloc(row);
    cr_assert_eq(coli_context_new(c.m, NULL, &a), 0);
    cr_assert_eq(coli_eval(a, c.p.ids, c.p.n, lg, 0), 0);
    cr_assert_gt(coli_context_save_prefix(a, pc, c.p.ids, c.p.n), 0, "%s", coli_last_error());
    cr_assert_eq(coli_context_new(c.m, NULL, &b), 0);
    const int got = coli_context_restore_prefix(b, pc, c.p.ids, c.p.n);
    cr_assert_eq(got, 32, "restored %d positions", got);
    cr_assert_eq(coli_eval(b, c.p.ids + got, c.p.n - got, lg, 0), 0, "%s", coli_last_error());
    cr_expect(memcmp(lg, c.fresh + (size_t)(c.p.n - 1) * (size_t)c.V, row) == 0, "%s: restored prefix differs", fam);
    coli_context_free(&a);
    coli_context_free(&b);
    coli_prefix_cache_free(&pc);
    free(lg);
    s_case_free(&c);
}

Test(dsa, deepseek32_prefix_reuse_equals_fresh) { s_prefix_reuse("deepseek32"); }
Test(dsa, glm_dsa_prefix_reuse_equals_fresh) { s_prefix_reuse("glm-dsa"); }

/* Three sequences (6, 20, 30 prompt tokens: below, at and past top-k as
 * they decode) batched give the tokens each gives alone. */
static void s_batched(const char *fam) {
    state_case c;
    s_case(fam, &c);
    const int lens[3] = {6, 20, 30};
    gen_run alone[3], together[3];
    coli_batch *b = NULL;
    for (int i = 0; i < 3; i++) {
        alone[i] = (gen_run){.prompt = c.p.ids + i, .n_prompt = lens[i]};
        cr_assert_eq(coli_context_new(c.m, NULL, &alone[i].ctx), 0);
        s_generate(&alone[i]);
        cr_assert_eq(alone[i].rc, 0, "%s", coli_last_error());
    }
    cr_expect_gt(s_run_batched(c.m, 3, 7, alone, together, &b), 1, "%s: the sequences never shared a step (5 tries)",
                 fam);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(together[i].rc, 0, "%s", coli_last_error());
        cr_expect_eq(together[i].n_out, alone[i].n_out);
        cr_expect(memcmp(together[i].out, alone[i].out, (size_t)alone[i].n_out * sizeof(int32_t)) == 0,
                  "%s: sequence %d batched differs from alone", fam, i);
        coli_context_free(&alone[i].ctx);
        coli_context_free(&together[i].ctx);
    }
    coli_batch_free(&b);
    s_case_free(&c);
}

Test(dsa, deepseek32_batched_equals_alone) { s_batched("deepseek32"); }
Test(dsa, glm_dsa_batched_equals_alone) { s_batched("glm-dsa"); }

// ---------------------------------------------------------------------------
// through the command line

/* coli ARGS... on the family's model, in-process and on two workers (cli_run.h) */
static char *s_cli_both(const char *fam, const char *cmd, const char *a1, const char *a2, const char *a3,
                        const char *a4) {
    ref_file r;
    char path[4096];
    s_read_fixture(fam, &r);
    s_model(fam, &r, path, sizeof path);
    return cli_inproc_equals_workers(path, cmd, a1, a2, a3, a4);
}

static void s_cli(const char *fam) {
    char *out = s_cli_both(fam, "run", "-p", "In the beginning God created", "-n", "24");
    cr_expect_gt(strlen(out), 24, "coli run printed: %s", out);
    free(out);
    char text[4096];
    snprintf(text, sizeof text, "%s/dsa-ppl-%d.txt", s_build(), (int)getpid());
    FILE *f = fopen(text, "w");
    cr_assert(f);
    for (int i = 0; i < 12; i++)
        fprintf(f, "And God said, Let there be light: and there was light. And God saw the light, that it was good.\n");
    fclose(f);
    out = s_cli_both(fam, "perplexity", "-f", text, "--ctx", "64");
    double ppl = 0.0;
    cr_expect(sscanf(out, "perplexity: %lf", &ppl) == 1 && isfinite(ppl) && ppl > 1.0, "coli perplexity: %s", out);
    free(out);
    unlink(text);
}

Test(dsa, deepseek32_cli_run_and_perplexity) { s_cli("deepseek32"); }
Test(dsa, glm_dsa_cli_run_and_perplexity) { s_cli("glm-dsa"); }

/* Choice i's text of a /v1/completions answer into out ("" when absent). */
static void s_choice_text(const char *body, int i, char *out, size_t cap) {
    cJSON *j = cJSON_Parse(body);
    cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), i), "text");
    snprintf(out, cap, "%s", cJSON_IsString(t) ? t->valuestring : "");
    cJSON_Delete(j);
}

/* coli serve on two workers: a greedy completion, the same again (its
 * prompt now from the prefix cache) and n = 2 choices all give one text. */
static void s_serve(const char *fam) {
    ref_file r;
    char path[4096], first[2048], again[2048], c0[2048], c1[2048];
    s_read_fixture(fam, &r);
    s_model(fam, &r, path, sizeof path);
    const char *extra[] = {"--devices", "cpu:2", "-t", "2", NULL};
    serve_proc sp = su_start(path, extra);
    char ids[512] = "", body[700], body2[700];
    for (int i = 0; i < r.p[0].n; i++)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? "," : "", r.p[0].ids[i]);
    /* the fixture's 24 ids: llama.cpp's greedy continuation has no end token */
    snprintf(body, sizeof body, "{\"prompt\":[%s],\"max_tokens\":12,\"temperature\":0}", ids);
    snprintf(body2, sizeof body2, "{\"prompt\":[%s],\"max_tokens\":12,\"temperature\":0,\"n\":2}", ids);
    http_resp a = su_post(sp.port, "/v1/completions", body);
    cr_assert_eq(a.status, 200, "%s", a.raw);
    s_choice_text(a.body, 0, first, sizeof first);
    http_resp b = su_post(sp.port, "/v1/completions", body);
    cr_assert_eq(b.status, 200, "%s", b.raw);
    s_choice_text(b.body, 0, again, sizeof again);
    http_resp c = su_post(sp.port, "/v1/completions", body2);
    cr_assert_eq(c.status, 200, "%s", c.raw);
    s_choice_text(c.body, 0, c0, sizeof c0);
    s_choice_text(c.body, 1, c1, sizeof c1);
    cr_expect_gt(strlen(first), 0, "%s: empty completion: %s", fam, a.body);
    cr_expect_str_eq(again, first, "%s: the prefix-cached request differs", fam);
    cr_expect_str_eq(c0, first, "%s: choice 0 of n = 2 differs", fam);
    cr_expect_str_eq(c1, first, "%s: choice 1 of n = 2 differs", fam);
    su_free(&a);
    su_free(&b);
    su_free(&c);
    cr_expect_eq(su_stop(&sp), 0);
}

Test(dsa, deepseek32_serve) { s_serve("deepseek32"); }
Test(dsa, glm_dsa_serve) { s_serve("glm-dsa"); }
