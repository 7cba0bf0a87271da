/*
 * family_ref.h - what the tests of a newer family share: its tiny model,
 * written on first use by its deterministic generator (tests/gen_*.py)
 * into $COLI_BUILD/ref and checked against the sha256 that llama.cpp's
 * logits were recorded for (tests/fixtures/<family>/), and the checks every
 * family passes: the F32 rule of ../shared/reference (F32 KV, every
 * recorded logit within 1e-3, the same argmax everywhere; F16 KV against
 * llama.cpp's F16-KV run: within 1e-2, the same argmax where llama.cpp's
 * gap is > 2e-2), greedy steps
 * while llama.cpp's margin is >= 0.05, two workers and a SIGKILLed worker
 * give --inproc's bytes, and rewritten files refused with one line naming
 * the key or tensor. Static functions: include from one test file each.
 */
#ifndef COLI_TESTS_FAMILY_REF_H
#define COLI_TESTS_FAMILY_REF_H

#include <math.h>

#include "coordinator/model.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "tests/ref_models.h"
#include "tests/sched_util.h"

#define FAM_MAX_POS 160
#define FAM_MAX_TOP 20

typedef struct family {
    const char *model;   /* file name under $COLI_BUILD/ref */
    const char *gen;     /* tests/gen_*.py MODEL */
    const char *fixture; /* llama.cpp's recorded run (F32 KV); its F16-KV run: ...-kv16.txt */
    const char *prefix;  /* "<arch>." of the metadata keys */
} family;

typedef struct fam_ref {
    char sha[65];
    int32_t ids[FAM_MAX_POS];
    int n_ids, n_pos, top;
    int32_t id[FAM_MAX_POS][FAM_MAX_TOP];
    double logit[FAM_MAX_POS][FAM_MAX_TOP];
    int32_t gen[16];
    int n_gen;
} fam_ref;

/* Up to cap integers of a space-separated list. */
static int s_ints(const char *s, int32_t *out, int cap) {
    int n = 0;
    char *end;
    for (long v = strtol(s, &end, 10); end != s && n < cap; v = strtol(s, &end, 10)) {
        out[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

/* The recorded llama.cpp run: "# NAME sha256 HEX", "ids: ...", "pos P: id
 * logit ..." (top K, teacher-forced), "gen: ..." (greedy ids). */
static void s_read_ref_file(const family *fa, const char *path, fam_ref *r) {
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot open %s", path);
    char line[16384], fmt[300];
    snprintf(fmt, sizeof fmt, "# %s sha256 %%64s", fa->model);
    while (fgets(line, sizeof line, f)) {
        int pos, off;
        if (sscanf(line, fmt, r->sha) == 1) continue;
        if (!strncmp(line, "ids:", 4)) r->n_ids = s_ints(line + 4, r->ids, FAM_MAX_POS);
        if (!strncmp(line, "gen:", 4)) r->n_gen = s_ints(line + 4, r->gen, 16);
        if (sscanf(line, "pos %d:%n", &pos, &off) != 1) continue;
        cr_assert(pos == r->n_pos && pos < FAM_MAX_POS, "%s: position %d out of order", path, pos);
        const char *p = line + off;
        int k = 0;
        for (int n; k < FAM_MAX_TOP && sscanf(p, "%d %lf%n", &r->id[pos][k], &r->logit[pos][k], &n) == 2; k++) p += n;
        cr_assert(k > 1 && (pos == 0 || k == r->top), "%s: position %d has %d pairs", path, pos, k);
        r->top = k;
        r->n_pos++;
    }
    fclose(f);
    cr_assert(strlen(r->sha) == 64 && r->n_pos == r->n_ids && r->n_gen > 0, "%s: incomplete", path);
}

static void s_read_ref(const family *fa, fam_ref *r) { s_read_ref_file(fa, fa->fixture, r); }

/* The model (generated once) into out, its sha256 the recorded one. */
static void s_model(const family *fa, const fam_ref *r, char *out, size_t cap) {
    char dir[4096], cmd[9000];
    s_require_shared();
    const char *py = s_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    int fd = s_lock_dir("ref", fa->model, dir, sizeof dir, out, cap);
    if (!s_exists(out)) {
        snprintf(cmd, sizeof cmd, "COLI_SHARED='%s' %s %s '%s'", s_shared(), py, fa->gen, out);
        s_run_or_fail(cmd);
    }
    s_unlock_dir(fd);
    ref_assert_sha256(out, r->sha);
}

/* Both of the above. */
static void s_ref_and_model(const family *fa, fam_ref *r, char *out, size_t cap) {
    s_read_ref(fa, r);
    s_model(fa, r, out, cap);
}

/* Logits of every position of ids (one batch; F32 KV unless kv_f16);
 * caller frees. */
static float *s_eval_kv(const char *path, const char *devices, int kv_f16, const int32_t *ids, int n, int *n_vocab) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = devices;
    mp.n_threads = 1;
    mp.kv_f16 = kv_f16;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(path, &mp, &m), 0, "%s", coli_last_error());
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

/* The rule of ../shared/reference for an F32 file: F32 KV against the F32
 * run (every recorded logit within 1e-3, the same argmax everywhere) or
 * F16 KV against the F16 run (within 1e-2, the same argmax where
 * llama.cpp's gap is > 2e-2). */
static void s_check_rule(const family *fa, int kv_f16) {
    fam_ref r;
    char model[4096], path[1024];
    s_ref_and_model(fa, &r, model, sizeof model);
    if (kv_f16) {
        const size_t n = strlen(fa->fixture) - strlen(".txt");
        snprintf(path, sizeof path, "%.*s-kv16.txt", (int)n, fa->fixture);
        fam_ref r16;
        s_read_ref_file(fa, path, &r16);
        cr_assert_str_eq(r16.sha, r.sha, "%s: recorded for another model", path);
        r = r16;
    }
    const double max_delta = kv_f16 ? 1e-2 : 1e-3, gap_min = kv_f16 ? 2e-2 : 0.0;
    int nv = 0;
    float *lg = s_eval_kv(model, "inproc", kv_f16, r.ids, r.n_ids, &nv);
    double worst = 0.0;
    for (int t = 0; t < r.n_pos; t++) {
        const float *a = lg + (size_t)t * (size_t)nv;
        for (int k = 0; k < r.top; k++) {
            const double d = fabs((double)a[r.id[t][k]] - r.logit[t][k]);
            if (d > worst) worst = d;
            cr_expect_leq(d, max_delta, "position %d id %d: %.7g, llama.cpp %.7g", t, r.id[t][k], a[r.id[t][k]],
                          r.logit[t][k]);
        }
        if (r.logit[t][0] - r.logit[t][1] > gap_min)
            cr_expect_eq(sched_argmax(a, nv), r.id[t][0], "position %d: argmax %d, llama.cpp %d", t,
                         sched_argmax(a, nv), r.id[t][0]);
    }
    cr_log_info("%s %s KV: max |logit - llama.cpp| %.2e over %d positions x top %d", fa->model, kv_f16 ? "F16" : "F32",
                worst, r.n_pos, r.top);
    free(lg);
}

static void s_check_f32(const family *fa) { s_check_rule(fa, 0); }

typedef struct fam_collect {
    int32_t ids[16];
    int n;
} fam_collect;

static int s_collect(void *user, int32_t id, const char *text, size_t len) {
    fam_collect *c = user;
    (void)text;
    (void)len;
    if (c->n < 16) c->ids[c->n++] = id;
    return 0;
}

/* The first n_judged greedy tokens after the recorded prompt (those whose
 * llama.cpp margin is >= 0.05) are llama.cpp's. */
static void s_check_greedy(const family *fa, int n_judged) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(fa, &r, model, sizeof model);
    cr_assert_leq(n_judged, r.n_gen);
    coli_model *m = sched_load(model, "inproc");
    coli_sampling_params sp;
    coli_sampling_default_params(&sp);
    sp.temperature = 0.0f;
    sp.n_predict = n_judged;
    fam_collect c = {.n = 0};
    coli_context *ctx = NULL;
    coli_gen_stats st;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0, "%s", coli_last_error());
    cr_assert_eq(coli_generate(ctx, r.ids, r.n_ids, &sp, s_collect, &c, &st), 0, "%s", coli_last_error());
    cr_assert_eq(c.n, n_judged);
    for (int g = 0; g < n_judged; g++)
        cr_expect_eq(c.ids[g], r.gen[g], "greedy step %d: %d, llama.cpp %d", g, c.ids[g], r.gen[g]);
    coli_context_free(&ctx);
    coli_model_free(&m);
}

/* ---- workers ------------------------------------------------------------- */

static void s_fam_env(void) {
    sched_env_defaults();
    setenv("COLI_RESTART_BACKOFF_MS", "20", 1);
}

/* Two workers give --inproc's bytes and hold n_experts experts together. */
static void s_check_workers(const family *fa, long n_experts) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(fa, &r, model, sizeof model);
    gen_result ref, got;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    sched_generate(model, "cpu:2", NULL, NULL, &got);
    sched_assert_same(&ref, &got, "cpu:2");
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), 0, "%s", got.stats);
    cr_expect_eq(sched_field(got.stats, "inproc_rows"), 0, "%s", got.stats);
    long held = 0;
    char v[64];
    for (int w = 0; w < 2; w++) {
        sched_worker_field(got.stats, w, "resident_experts", v, sizeof v);
        cr_expect_gt(atol(v), 0, "worker %d holds no experts", w);
        held += atol(v);
    }
    cr_expect_eq(held, n_experts, "experts placed: %s", got.stats);
    gen_free(&ref);
    gen_free(&got);
    sched_assert_no_orphans();
}

/* SIGKILL worker 1 before step 3; wait until it is dead. */
static void s_kill_hook(coli_model *m, int step, void *user) {
    int *pid = user;
    if (step != 3) return;
    *pid = sched_worker_pid(m, 1);
    cr_assert_gt(*pid, 0);
    kill(*pid, SIGKILL);
    sched_wait_dead(*pid, 5);
}

/* A worker SIGKILLed mid-run: one fallback, --inproc's bytes. */
static void s_check_sigkill(const family *fa) {
    fam_ref r;
    char model[4096];
    s_ref_and_model(fa, &r, model, sizeof model);
    gen_result ref, got;
    int pid = 0;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    sched_generate(model, "cpu:2", s_kill_hook, &pid, &got);
    sched_assert_same(&ref, &got, "cpu:2, worker 1 killed at step 3");
    cr_expect_eq(sched_fallbacks(got.stats, "cpu:1", "crash"), 1, "%s", got.stats);
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), 1, "%s", got.stats);
    gen_free(&ref);
    gen_free(&got);
    sched_assert_no_orphans();
}

/* ---- rewritten files ----------------------------------------------------- */

typedef struct edit {
    const char *drop_key;    /* "<arch>.<key>" left out */
    const char *drop_tensor; /* tensors whose name starts with it left out */
    void (*kvs)(gguf_writer *w);
} edit;

/* src with e applied, written to a file of this process; returns its path. */
static const char *s_rewrite(const family *fa, const char *src, const edit *e) {
    static char dst[4200];
    gguf_file *f = NULL;
    char key[128] = "";
    cr_assert_eq(gguf_open(src, &f), 0, "%s", coli_last_error());
    if (e->drop_key) snprintf(key, sizeof key, "%s%s", fa->prefix, e->drop_key);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        gguf_str k = gguf_key_name(f, i);
        if (e->drop_key && k.len == strlen(key) && !memcmp(k.ptr, key, k.len)) continue;
        cr_assert_eq(gguf_writer_copy_kv(w, f, i), 0);
    }
    if (e->kvs) e->kvs(w);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        if (e->drop_tensor && !strncmp(t->name, e->drop_tensor, strlen(e->drop_tensor))) continue;
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), 0);
    }
    snprintf(dst, sizeof dst, "%s/edit-%d-%s", s_build(), (int)getpid(), fa->model);
    cr_assert_eq(gguf_writer_write(w, dst), 0, "%s", coli_last_error());
    gguf_writer_free(&w);
    gguf_close(&f);
    return dst;
}

/* The family's model rewritten by e is refused, the one-line reason naming what. */
static void s_refused(const family *fa, const edit *e, const char *what) {
    fam_ref r;
    char path0[4096];
    s_ref_and_model(fa, &r, path0, sizeof path0);
    const char *path = s_rewrite(fa, path0, e);
    struct model *m = NULL;
    int rc = model_open(path, &m);
    cr_expect_lt(rc, 0, "%s: loaded", what);
    const char *err = coli_last_error();
    cr_expect(strstr(err, what) != NULL, "the reason does not name '%s': %s", what, err);
    cr_expect(strchr(err, '\n') == NULL, "not one line: %s", err);
    model_close(&m);
    unlink(path);
}

#endif
