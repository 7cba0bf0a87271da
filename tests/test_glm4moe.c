/*
 * test_glm4moe.c - the glm4moe family (GLM-4.5 / 4.6 / 4.7) on a tiny model
 * written by tests/gen_glm4moe.py (layer 0 dense, two MoE layers with the
 * sigmoid + exp_probs_b router and a shared expert, q/k/v biases, per-head
 * q/k norm, rope on half of each head, a NextN block appended), generated
 * on first use into $COLI_BUILD/ref and checked against the sha256 its
 * llama.cpp logits were recorded for (tests/fixtures/glm4moe/README).
 *
 * - the F32 rule of ../shared/reference: F32 KV cache, every recorded
 *   logit (top 20 of 32 positions) within 1e-3 of llama.cpp de3ff815, the
 *   same argmax everywhere; greedy steps while llama.cpp's margin >= 0.05;
 * - two workers and a worker SIGKILLed mid-run give --inproc's bytes;
 * - the NextN block is loaded and validated, never run;
 * - each required key missing, and inconsistent metadata or tensors, is
 *   refused with one line naming the key or tensor.
 */
#include <math.h>

#include "core/error.h"
#include "core/gguf/gguf.h"
#include "coordinator/model.h"
#include "tests/ref_models.h"
#include "tests/sched_util.h"

#define MODEL "tiny-glm4moe-f32.gguf"
#define FIXTURE "tests/fixtures/glm4moe/tiny-glm4moe-f32.txt"
#define MAX_POS 64
#define MAX_TOP 20
#define GREEDY_JUDGED 2 /* llama.cpp's margins: 0.30, 0.26, then 0.009 */

typedef struct glm_ref {
    char sha[65];
    int32_t ids[MAX_POS];
    int n_ids, n_pos, top;
    int32_t id[MAX_POS][MAX_TOP];
    double logit[MAX_POS][MAX_TOP];
    int32_t gen[16];
    int n_gen;
} glm_ref;

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

/* The recorded llama.cpp run (format: tests/fixtures/glm4moe/README). */
static void s_read_ref(glm_ref *r) {
    memset(r, 0, sizeof *r);
    FILE *f = fopen(FIXTURE, "r");
    cr_assert(f, "cannot open %s", FIXTURE);
    char line[16384];
    while (fgets(line, sizeof line, f)) {
        int pos, off;
        if (sscanf(line, "# tiny-glm4moe-f32.gguf sha256 %64s", r->sha) == 1) continue;
        if (!strncmp(line, "ids:", 4)) r->n_ids = s_ints(line + 4, r->ids, MAX_POS);
        if (!strncmp(line, "gen:", 4)) r->n_gen = s_ints(line + 4, r->gen, 16);
        if (sscanf(line, "pos %d:%n", &pos, &off) != 1) continue;
        cr_assert(pos == r->n_pos && pos < MAX_POS, "%s: position %d out of order", FIXTURE, pos);
        const char *p = line + off;
        int k = 0;
        for (int n; k < MAX_TOP && sscanf(p, "%d %lf%n", &r->id[pos][k], &r->logit[pos][k], &n) == 2; k++) p += n;
        cr_assert(k > 1 && (pos == 0 || k == r->top), "%s: position %d has %d pairs", FIXTURE, pos, k);
        r->top = k;
        r->n_pos++;
    }
    fclose(f);
    cr_assert(strlen(r->sha) == 64 && r->n_pos == r->n_ids && r->n_gen >= GREEDY_JUDGED, "%s: incomplete", FIXTURE);
}

/* The model, generated once, and its sha256 equal to the recorded one. */
static void s_model(const glm_ref *r, char *out, size_t cap) {
    char dir[4096], cmd[9000], sum[65] = "";
    s_require_shared();
    const char *py = s_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    int fd = s_lock_dir("ref", MODEL, dir, sizeof dir, out, cap);
    if (!s_exists(out)) {
        snprintf(cmd, sizeof cmd, "COLI_SHARED='%s' %s tests/gen_glm4moe.py '%s'", s_shared(), py, out);
        s_run_or_fail(cmd);
    }
    s_unlock_dir(fd);
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", out);
    FILE *p = popen(cmd, "r");
    cr_assert(p && fscanf(p, "%64s", sum) == 1, "sha256sum %s", out);
    pclose(p);
    cr_assert_str_eq(sum, r->sha, "%s: the generator drifted from the file the logits were recorded for", out);
}

static coli_model *s_load(const char *path, const char *devices) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = devices;
    mp.n_threads = 1;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(path, &mp, &m), 0, "%s", coli_last_error());
    return m;
}

/* Logits of every position of ids (one batch, F32 KV); caller frees. */
static float *s_eval(const char *path, const char *devices, const int32_t *ids, int n, int *n_vocab) {
    coli_model *m = s_load(path, devices);
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

TestSuite(glm4moe, .timeout = 120);

// ---------------------------------------------------------------------------
// against llama.cpp

Test(glm4moe, f32_kv_matches_llamacpp) {
    glm_ref r;
    char model[4096];
    s_read_ref(&r);
    s_model(&r, model, sizeof model);
    int nv = 0;
    float *lg = s_eval(model, "inproc", r.ids, r.n_ids, &nv);
    double worst = 0.0;
    for (int t = 0; t < r.n_pos; t++) {
        const float *a = lg + (size_t)t * (size_t)nv;
        for (int k = 0; k < r.top; k++) {
            const double d = fabs((double)a[r.id[t][k]] - r.logit[t][k]);
            if (d > worst) worst = d;
            cr_expect_leq(d, 1e-3, "position %d id %d: %.7g, llama.cpp %.7g", t, r.id[t][k], a[r.id[t][k]],
                          r.logit[t][k]);
        }
        cr_expect_eq(sched_argmax(a, nv), r.id[t][0], "position %d: argmax %d, llama.cpp %d", t, sched_argmax(a, nv),
                     r.id[t][0]);
    }
    cr_log_info("glm4moe F32 KV: max |logit - llama.cpp| %.2e over %d positions x top %d", worst, r.n_pos, r.top);
    free(lg);
}

typedef struct collect {
    int32_t ids[16];
    int n;
} collect;

static int s_collect(void *user, int32_t id, const char *text, size_t len) {
    collect *c = user;
    (void)text;
    (void)len;
    if (c->n < 16) c->ids[c->n++] = id;
    return 0;
}

Test(glm4moe, greedy_matches_llamacpp) {
    glm_ref r;
    char model[4096];
    s_read_ref(&r);
    s_model(&r, model, sizeof model);
    coli_model *m = s_load(model, "inproc");
    coli_sampling_params sp;
    coli_sampling_default_params(&sp);
    sp.temperature = 0.0f;
    sp.n_predict = GREEDY_JUDGED;
    collect c = {.n = 0};
    coli_context *ctx = NULL;
    coli_gen_stats st;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0, "%s", coli_last_error());
    cr_assert_eq(coli_generate(ctx, r.ids, r.n_ids, &sp, s_collect, &c, &st), 0, "%s", coli_last_error());
    cr_assert_eq(c.n, GREEDY_JUDGED);
    for (int g = 0; g < GREEDY_JUDGED; g++)
        cr_expect_eq(c.ids[g], r.gen[g], "greedy step %d: %d, llama.cpp %d", g, c.ids[g], r.gen[g]);
    coli_context_free(&ctx);
    coli_model_free(&m);
}

// ---------------------------------------------------------------------------
// workers

static void s_env(void) {
    sched_env_defaults();
    setenv("COLI_RESTART_BACKOFF_MS", "20", 1);
}

Test(glm4moe, workers_give_inproc_bytes, .init = s_env) {
    glm_ref r;
    char model[4096];
    s_read_ref(&r);
    s_model(&r, model, sizeof model);
    gen_result ref, got;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    sched_generate(model, "cpu:2", NULL, NULL, &got);
    sched_assert_same(&ref, &got, "glm4moe on cpu:2");
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), 0, "%s", got.stats);
    cr_expect_eq(sched_field(got.stats, "inproc_rows"), 0, "%s", got.stats);
    long held = 0;
    char v[64];
    for (int w = 0; w < 2; w++) {
        sched_worker_field(got.stats, w, "resident_experts", v, sizeof v);
        cr_expect_gt(atol(v), 0, "worker %d holds no experts", w);
        held += atol(v);
    }
    cr_expect_eq(held, 2 * 8, "the two MoE layers' experts, not the dense layer's or the NextN block's: %s", got.stats);
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

Test(glm4moe, worker_sigkill_gives_inproc_bytes, .init = s_env) {
    glm_ref r;
    char model[4096];
    s_read_ref(&r);
    s_model(&r, model, sizeof model);
    gen_result ref, got;
    int pid = 0;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    sched_generate(model, "cpu:2", s_kill_hook, &pid, &got);
    sched_assert_same(&ref, &got, "glm4moe on cpu:2, worker 1 killed at step 3");
    cr_expect_eq(sched_fallbacks(got.stats, "cpu:1", "crash"), 1, "%s", got.stats);
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), 1, "%s", got.stats);
    gen_free(&ref);
    gen_free(&got);
    sched_assert_no_orphans();
}

// ---------------------------------------------------------------------------
// rewritten files: NextN variants and refusals

typedef struct edit {
    const char *drop_key;    /* "glm4moe.<key>" left out */
    const char *drop_tensor; /* tensors whose name starts with it left out */
    void (*kvs)(gguf_writer *w);
} edit;

/* src with e applied, written to a file of this process; returns its path. */
static const char *s_rewrite(const char *src, const edit *e) {
    static char dst[4200];
    gguf_file *f = NULL;
    char key[128] = "";
    cr_assert_eq(gguf_open(src, &f), 0, "%s", coli_last_error());
    if (e->drop_key) snprintf(key, sizeof key, "glm4moe.%s", e->drop_key);
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
    snprintf(dst, sizeof dst, "%s/glm4moe-edit-%d.gguf", s_build(), (int)getpid());
    cr_assert_eq(gguf_writer_write(w, dst), 0, "%s", coli_last_error());
    gguf_writer_free(&w);
    gguf_close(&f);
    return dst;
}

/* The model rewritten by e is refused, the one-line reason naming what. */
static void s_refused(const edit *e, const char *what) {
    glm_ref r;
    char model[4096];
    s_read_ref(&r);
    s_model(&r, model, sizeof model);
    const char *path = s_rewrite(model, e);
    struct model *m = NULL;
    int rc = model_open(path, &m);
    cr_expect_lt(rc, 0, "%s: loaded", what);
    const char *err = coli_last_error();
    cr_expect(strstr(err, what) != NULL, "the reason does not name '%s': %s", what, err);
    cr_expect(strchr(err, '\n') == NULL, "not one line: %s", err);
    model_close(&m);
    unlink(path);
}

Test(glm4moe, nextn_block_loaded_not_run) {
    glm_ref r;
    char model[4096];
    s_read_ref(&r);
    s_model(&r, model, sizeof model);
    struct model *m = NULL;
    cr_assert_eq(model_open(model, &m), 0, "%s", coli_last_error());
    cr_expect_eq(m->hp.n_layer, 3);
    cr_expect_eq(m->hp.n_layer_nextn, 1);
    cr_assert_eq(m->n_nextn, 1);
    const nextn_weights *nx = &m->nextn[0];
    cr_expect(nx->eh_proj && nx->enorm && nx->hnorm && nx->embed_tokens && nx->head && nx->head_norm);
    cr_expect(nx->layer.router && nx->layer.exp_probs_b && nx->layer.has_shexp && nx->layer.q_norm);
    cr_expect_str_eq(nx->eh_proj->name, "blk.3.nextn.eh_proj.weight");
    model_close(&m);
    /* the same file without the block (a trunk-only conversion): the same logit bytes */
    const edit trunk = {.drop_tensor = "blk.3."};
    const char *path = s_rewrite(model, &trunk);
    cr_assert_eq(model_open(path, &m), 0, "%s", coli_last_error());
    cr_expect_eq(m->n_nextn, 0);
    model_close(&m);
    int nv = 0, nv2 = 0;
    float *a = s_eval(model, "inproc", r.ids, 8, &nv), *b = s_eval(path, "cpu:1", r.ids, 8, &nv2);
    cr_assert_eq(nv, nv2);
    cr_expect(memcmp(a, b, (size_t)8 * (size_t)nv * sizeof(float)) == 0, "logits change with the NextN block");
    char *plan = NULL;
    cr_assert_eq(coli_plan_text(model, "cpu:2", &plan), 0, "%s", coli_last_error());
    cr_expect(strstr(plan, "3 layers") && !strstr(plan, "layer   3:"), "plan places the NextN block: %s", plan);
    free(plan);
    free(a);
    free(b);
    unlink(path);
}

Test(glm4moe, refuses_nextn_block_missing_a_tensor) {
    s_refused(&(edit){.drop_tensor = "blk.3.nextn.enorm."}, "blk.3.nextn.enorm.weight");
}

Test(glm4moe, refuses_mtp_only_file) { s_refused(&(edit){.drop_tensor = "blk.0."}, "NextN"); }

/* One test per key the family needs (llama.cpp refuses these files too). */
#define MISSING_KEY(tname, k) \
    Test(glm4moe, refuses_missing_##tname) { s_refused(&(edit){.drop_key = k}, "glm4moe." k); }
MISSING_KEY(block_count, "block_count")
MISSING_KEY(context_length, "context_length")
MISSING_KEY(embedding_length, "embedding_length")
MISSING_KEY(feed_forward_length, "feed_forward_length")
MISSING_KEY(head_count, "attention.head_count")
MISSING_KEY(rms_epsilon, "attention.layer_norm_rms_epsilon")
MISSING_KEY(expert_count, "expert_count")
MISSING_KEY(expert_used_count, "expert_used_count")
MISSING_KEY(expert_feed_forward_length, "expert_feed_forward_length")
MISSING_KEY(expert_shared_count, "expert_shared_count")

static void s_value_length(gguf_writer *w) { gguf_writer_set_u32(w, "glm4moe.attention.value_length", 32); }
static void s_no_shared(gguf_writer *w) { gguf_writer_set_u32(w, "glm4moe.expert_shared_count", 0); }
static void s_dense_lead(gguf_writer *w) { gguf_writer_set_u32(w, "glm4moe.leading_dense_block_count", 4); }
static void s_nextn_all(gguf_writer *w) { gguf_writer_set_u32(w, "glm4moe.nextn_predict_layers", 4); }
static void s_rope_dims(gguf_writer *w) { gguf_writer_set_u32(w, "glm4moe.rope.dimension_count", 50); }
static void s_mrope(gguf_writer *w) {
    const int32_t sec[4] = {8, 8, 8, 0};
    gguf_writer_set_arr(w, "glm4moe.rope.dimension_sections", GGUF_INT32, sec, 4);
}

Test(glm4moe, refuses_value_length_not_key_length) {
    s_refused(&(edit){.kvs = s_value_length}, "glm4moe.attention.value_length");
}
Test(glm4moe, refuses_no_shared_expert) { s_refused(&(edit){.kvs = s_no_shared}, "glm4moe.expert_shared_count"); }
Test(glm4moe, refuses_dense_lead_past_layers) {
    s_refused(&(edit){.kvs = s_dense_lead}, "glm4moe.leading_dense_block_count");
}
Test(glm4moe, refuses_nextn_without_trunk) { s_refused(&(edit){.kvs = s_nextn_all}, "glm4moe.nextn_predict_layers"); }
Test(glm4moe, refuses_rope_dims_past_head) { s_refused(&(edit){.kvs = s_rope_dims}, "glm4moe.rope.dimension_count"); }
Test(glm4moe, refuses_mrope_sections) { s_refused(&(edit){.kvs = s_mrope}, "glm4moe.rope.dimension_sections"); }
Test(glm4moe, refuses_missing_selection_bias) {
    s_refused(&(edit){.drop_tensor = "blk.2.exp_probs_b."}, "blk.2.exp_probs_b.bias");
}
Test(glm4moe, refuses_k_norm_without_q_norm) {
    s_refused(&(edit){.drop_tensor = "blk.1.attn_q_norm."}, "blk.1.attn_q_norm.weight");
}
