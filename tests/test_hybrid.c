/*
 * test_hybrid.c - the hybrid families qwen3next and qwen35moe (Gated
 * DeltaNet + gated attention, MoE with a gated shared expert) on the tiny
 * models of tests/gen_qwen3next.py (generated on first use into
 * $COLI_BUILD/ref; their sha256 is checked against the one recorded with
 * the llama.cpp logits in tests/fixtures/tiny-ARCH-llama-logits.txt):
 * - the F32 rule: a chunked prefill of 80 ids (two chunks of the
 *   recurrence) gives every recorded logit within 1e-3 of llama.cpp's, the
 *   same argmax at every position;
 * - token-by-token decode (the recurrent form) gives the same within the
 *   rule, against llama.cpp and against the prefill; greedy decoding after
 *   the 80 ids gives llama.cpp's 8 tokens;
 * - the same for kimi-k3 and kimi-linear (tests/gen_kimi.py; KDA + MLA),
 *   with coli run / coli perplexity, and their bad files refused;
 * - workers (cpu:2) give the in-process bytes, also when one crashes;
 * - continuous batching gives each sequence the tokens and logits bits it
 *   gets alone; the prefix cache restores a snapshot whose continuation has
 *   the bits of a cold prefill, and answers forked from a cached prompt
 *   (n > 1) are those of a cold one; a full context stops generation; a
 *   reset context starts from a zero state (coli perplexity's windows);
 * - the state memory per position and per sequence coli_model_info gives;
 * - a file whose ssm keys disagree is refused in one line naming them.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "coordinator/model.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "tests/gguf_edit.h"
#include "tests/cli_run.h"
#include "tests/greedy_run.h"
#include "tests/ref_models.h"

enum {
    MAX_POS = 128,
    TOP = 10
};

typedef struct llama_ref {
    char sha[65];
    int n;                         /* positions */
    int32_t ids[MAX_POS];          /* the teacher-forced ids */
    int32_t top_id[MAX_POS][TOP];  /* llama.cpp's 10 largest logits per position */
    float top_logit[MAX_POS][TOP]; /* and their values */
    int32_t gen[8];                /* its greedy continuation */
    int n_gen;
} llama_ref;

/* tests/fixtures/tiny-ARCH-llama-logits{,-kv16}.txt: llama.cpp's F32- or F16-KV run. */
static void s_read_ref_kv(const char *arch, int kv_f16, llama_ref *r) {
    char path[256], line[8192];
    snprintf(path, sizeof path, "tests/fixtures/tiny-%s-llama-logits%s.txt", arch, kv_f16 ? "-kv16" : "");
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot open %s", path);
    memset(r, 0, sizeof *r);
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        int pos, used;
        if (sscanf(line, "sha256 %64s", r->sha) == 1) continue;
        if (strncmp(line, "gen:", 4) == 0)
            for (p += 4; r->n_gen < 8 && sscanf(p, "%d%n", &r->gen[r->n_gen], &used) == 1; p += used) r->n_gen++;
        if (strncmp(line, "ids:", 4) == 0) {
            for (p += 4; r->n < MAX_POS && sscanf(p, "%d%n", &r->ids[r->n], &used) == 1; p += used) r->n++;
        } else if (sscanf(line, "pos %d:%n", &pos, &used) == 1 && pos >= 0 && pos < MAX_POS) {
            p += used;
            for (int i = 0; i < TOP; i++, p += used)
                cr_assert_eq(sscanf(p, "%d %f%n", &r->top_id[pos][i], &r->top_logit[pos][i], &used), 2, "%s", path);
        }
    }
    fclose(f);
    cr_assert(r->n > 64 && strlen(r->sha) == 64, "%s: no ids or sha256", path);
}

static void s_read_ref(const char *arch, llama_ref *r) { s_read_ref_kv(arch, 0, r); }

/* tiny-ARCH-f32.gguf, made by tests/gen_qwen3next.py once, checked against the recorded sha256. */
static void s_model(const char *arch, const llama_ref *r, char *out, size_t cap) {
    s_hybrid_model(arch, out, cap);
    ref_assert_sha256(out, r->sha);
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

static int s_vocab(const coli_model *m) {
    coli_model_info info;
    coli_model_get_info(m, &info);
    return info.n_vocab;
}

/* Logits of every position: one prefill (step 0) or one token per eval. */
static float *s_logits(coli_model *m, const llama_ref *r, int step) {
    const size_t V = (size_t)s_vocab(m);
    float *lg = malloc((size_t)r->n * V * sizeof(float));
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0, "%s", coli_last_error());
    if (!step)
        cr_assert_eq(coli_eval(ctx, r->ids, r->n, lg, 1), 0, "%s", coli_last_error());
    else
        for (int t = 0; t < r->n; t++) cr_assert_eq(coli_eval(ctx, r->ids + t, 1, lg + (size_t)t * V, 0), 0);
    coli_context_free(&ctx);
    return lg;
}

/* Every recorded logit within tol, the same argmax where llama.cpp's top-1
 * minus top-2 exceeds gap_min; the largest delta. */
static double s_against_llama_gap(const float *lg, int V, const llama_ref *r, double tol, double gap_min) {
    double worst = 0.0;
    for (int t = 0; t < r->n; t++) {
        const float *a = lg + (size_t)t * (size_t)V;
        int am = 0;
        for (int v = 1; v < V; v++)
            if (a[v] > a[am]) am = v;
        if (r->top_logit[t][0] - r->top_logit[t][1] > gap_min)
            cr_expect_eq(am, r->top_id[t][0], "position %d: argmax %d, llama.cpp %d", t, am, r->top_id[t][0]);
        for (int i = 0; i < TOP; i++) {
            const double d = fabs((double)a[r->top_id[t][i]] - r->top_logit[t][i]);
            if (d > worst) worst = d;
        }
    }
    cr_expect_leq(worst, tol, "max |logit - llama.cpp| %.3g", worst);
    return worst;
}

/* Every recorded logit within tol, the same argmax everywhere. */
static double s_against_llama(const float *lg, int V, const llama_ref *r, double tol) {
    return s_against_llama_gap(lg, V, r, tol, -1.0);
}

static void s_f32_rule(const char *arch) {
    llama_ref r;
    char path[4096];
    s_read_ref(arch, &r);
    s_model(arch, &r, path, sizeof path);
    coli_model *m = s_load(path, "inproc");
    const int V = s_vocab(m);
    float *pre = s_logits(m, &r, 0), *dec = s_logits(m, &r, 1);
    const double wp = s_against_llama(pre, V, &r, 1e-3), wd = s_against_llama(dec, V, &r, 1e-3);
    double both = 0.0;
    for (size_t i = 0; i < (size_t)r.n * (size_t)V; i++) both = fmax(both, fabs((double)pre[i] - dec[i]));
    cr_expect_leq(both, 1e-3, "chunked prefill vs token by token: %.3g", both);
    cr_log_info("%s: max delta vs llama.cpp: prefill %.2e, decode %.2e; prefill vs decode %.2e", arch, wp, wd, both);
    /* greedy after the prompt: llama.cpp's tokens */
    gen_run g = {.prompt = r.ids, .n_prompt = r.n};
    cr_assert_eq(coli_context_new(m, NULL, &g.ctx), 0);
    s_generate(&g);
    cr_expect_eq(g.rc, 0, "%s", coli_last_error());
    for (int i = 0; i < r.n_gen && i < g.n_out; i++)
        cr_expect_eq(g.out[i], r.gen[i], "greedy step %d: %d, llama.cpp %d", i, g.out[i], r.gen[i]);
    coli_context_free(&g.ctx);
    free(pre);
    free(dec);
    coli_model_free(&m);
}

/* The F16 rule of ../shared/reference: F16 KV against llama.cpp's F16-KV run,
 * every recorded logit within 1e-2, the same argmax where llama.cpp's gap
 * is > 2e-2; the chunked prefill and token by token. */
static void s_f16_rule(const char *arch) {
    llama_ref r;
    char path[4096];
    s_read_ref_kv(arch, 1, &r);
    s_model(arch, &r, path, sizeof path);
    coli_model *m = s_load_kv(path, "inproc", 1);
    const int V = s_vocab(m);
    float *pre = s_logits(m, &r, 0), *dec = s_logits(m, &r, 1);
    const double wp = s_against_llama_gap(pre, V, &r, 1e-2, 2e-2), wd = s_against_llama_gap(dec, V, &r, 1e-2, 2e-2);
    cr_log_info("%s F16 KV: max delta vs llama.cpp's F16-KV run: prefill %.2e, decode %.2e", arch, wp, wd);
    free(pre);
    free(dec);
    coli_model_free(&m);
}

TestSuite(hybrid, .timeout = 240);

Test(hybrid, qwen3next_f32_rule) { s_f32_rule("qwen3next"); }
Test(hybrid, qwen35moe_f32_rule) { s_f32_rule("qwen35moe"); }
Test(hybrid, qwen3next_f16_rule) { s_f16_rule("qwen3next"); }
Test(hybrid, qwen35moe_f16_rule) { s_f16_rule("qwen35moe"); }

Test(hybrid, kimi_k3_f32_rule) { s_f32_rule("kimi-k3"); }
Test(hybrid, kimi_linear_f32_rule) { s_f32_rule("kimi-linear"); }
/* F16 latent rows (MLA) beside F32 KDA states, against llama.cpp's F16-KV runs */
Test(hybrid, kimi_k3_f16_rule) { s_f16_rule("kimi-k3"); }
Test(hybrid, kimi_linear_f16_rule) { s_f16_rule("kimi-linear"); }

static void s_workers_bytes(const char *arch) {
    llama_ref r;
    char path[4096];
    s_read_ref(arch, &r);
    s_model(arch, &r, path, sizeof path);
    coli_model *a = s_load(path, "inproc"), *b = s_load(path, "cpu:2");
    const size_t bytes = (size_t)r.n * (size_t)s_vocab(a) * sizeof(float);
    float *la = s_logits(a, &r, 0), *lb = s_logits(b, &r, 0), *da = s_logits(a, &r, 1), *db = s_logits(b, &r, 1);
    cr_expect(memcmp(la, lb, bytes) == 0, "prefill: workers differ from in-process");
    cr_expect(memcmp(da, db, bytes) == 0, "decode: workers differ from in-process");
    free(la);
    free(lb);
    free(da);
    free(db);
    coli_model_free(&a);
    coli_model_free(&b);
}

Test(hybrid, workers_give_inproc_bytes) { s_workers_bytes("qwen35moe"); }
/* kimi-k3: the workers run plain situ experts over the latent width */
Test(hybrid, kimi_k3_workers_give_inproc_bytes) { s_workers_bytes("kimi-k3"); }
Test(hybrid, kimi_linear_workers_give_inproc_bytes) { s_workers_bytes("kimi-linear"); }

/* A worker that crashes mid-prefill: its experts fall back, no byte changes. */
Test(hybrid, worker_crash_changes_no_byte) {
    llama_ref r;
    char path[4096];
    s_read_ref("qwen3next", &r);
    s_model("qwen3next", &r, path, sizeof path);
    coli_model *a = s_load(path, "inproc");
    float *la = s_logits(a, &r, 0), *da = s_logits(a, &r, 1);
    const size_t bytes = (size_t)r.n * (size_t)s_vocab(a) * sizeof(float);
    coli_model_free(&a);
    setenv("COLI_FAULT", "crash@layer=2:after=1", 1);
    coli_model *b = s_load(path, "cpu:1");
    unsetenv("COLI_FAULT");
    float *lb = s_logits(b, &r, 0), *db = s_logits(b, &r, 1);
    char *js = NULL;
    cr_assert_eq(coli_model_stats_json(b, &js), 0);
    cr_expect(strstr(js, "\"crash\""), "no crash recorded: %s", js);
    cr_expect(memcmp(la, lb, bytes) == 0, "prefill: bytes changed by the crash");
    cr_expect(memcmp(da, db, bytes) == 0, "decode: bytes changed by the crash");
    free(js);
    free(la);
    free(lb);
    free(da);
    free(db);
    coli_model_free(&b);
}

// ---------------------------------------------------------------------------
// sequences: batching, prefix cache, forks, the full context

enum {
    GEN = GREEDY_STEPS,
    SEQS = 3
};

static void s_batched_equals_alone(const char *arch) {
    llama_ref r;
    char path[4096];
    s_read_ref(arch, &r);
    s_model(arch, &r, path, sizeof path);
    coli_model *m = s_load(path, "inproc");
    coli_batch *b = NULL;
    gen_run alone[SEQS], together[SEQS];
    const int lens[SEQS] = {80, 23, 70}; /* prefill chunks of 48 cut at 64 (forward_split) */
    for (int i = 0; i < SEQS; i++) {
        alone[i] = (gen_run){.prompt = r.ids + i, .n_prompt = lens[i] - i};
        cr_assert_eq(coli_context_new(m, NULL, &alone[i].ctx), 0);
        s_generate(&alone[i]);
        cr_assert_eq(alone[i].rc, 0, "%s", coli_last_error());
    }
    cr_expect_gt(s_run_batched(m, SEQS, 48, alone, together, &b), 1, "the sequences never shared a step (5 tries)");
    const size_t V = (size_t)s_vocab(m);
    float *la = malloc(V * sizeof(float)), *lt = malloc(V * sizeof(float));
    for (int i = 0; i < SEQS; i++) {
        cr_expect_eq(together[i].rc, 0);
        cr_expect_eq(together[i].n_out, GEN);
        cr_expect(memcmp(together[i].out, alone[i].out, GEN * sizeof(int32_t)) == 0, "sequence %d: tokens differ", i);
        /* the states after the answers: one more token gives the same bits */
        cr_assert_eq(coli_eval(alone[i].ctx, r.ids, 1, la, 0), 0);
        cr_assert_eq(coli_eval(together[i].ctx, r.ids, 1, lt, 0), 0);
        cr_expect(memcmp(la, lt, V * sizeof(float)) == 0, "sequence %d: the state differs after batching", i);
        coli_context_free(&alone[i].ctx);
        coli_context_free(&together[i].ctx);
    }
    free(la);
    free(lt);
    coli_batch_free(&b);
    coli_model_free(&m);
}

Test(hybrid, batched_equals_alone) { s_batched_equals_alone("qwen3next"); }
Test(hybrid, kimi_k3_batched_equals_alone) { s_batched_equals_alone("kimi-k3"); }

/* Turn 1 evaluates 100 ids (a snapshot at 64); turn 2 (the same 100 + 50)
 * restores 64 positions; its logits are the bits of a cold prefill. Then
 * answers forked from a cached prompt equal a cold one's. */
static void s_prefix_cache(const char *arch) {
    llama_ref r;
    char path[4096];
    s_read_ref(arch, &r);
    s_model(arch, &r, path, sizeof path);
    coli_model *m = s_load(path, "inproc");
    const int V = s_vocab(m);
    int32_t ids[150];
    for (int i = 0; i < 150; i++) ids[i] = r.ids[i % r.n] + (i >= r.n);
    coli_prefix_cache *pc = NULL;
    cr_assert_eq(coli_prefix_cache_new(m, (size_t)64 << 20, 16, &pc), 0, "%s", coli_last_error());
    coli_context *a = NULL, *b = NULL, *c = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &a), 0);
    cr_assert_eq(coli_context_new(m, NULL, &b), 0);
    cr_assert_eq(coli_context_new(m, NULL, &c), 0);
    cr_assert_eq(coli_context_restore_prefix(a, pc, ids, 100), 0);
    cr_assert_eq(coli_eval(a, ids, 100, NULL, 0), 0, "%s", coli_last_error());
    cr_assert_eq(coli_context_save_prefix(a, pc, ids, 100), 4, "blocks up to the snapshot at 64");
    float *warm = malloc((size_t)V * sizeof(float)), *cold = malloc((size_t)V * sizeof(float));
    cr_assert_eq(coli_context_restore_prefix(b, pc, ids, 150), 64);
    cr_assert_eq(coli_eval(b, ids + 64, 150 - 64, warm, 0), 0, "%s", coli_last_error());
    cr_assert_eq(coli_eval(c, ids, 150, cold, 0), 0, "%s", coli_last_error());
    cr_expect(memcmp(warm, cold, (size_t)V * sizeof(float)) == 0, "restored state: logits differ from a cold prefill");
    /* n > 1: each answer restores the prompt's state and goes on from there */
    gen_run fork = {.ctx = b}, ref = {.ctx = c};
    for (int k = 0; k < 2; k++) {
        const int got = coli_context_restore_prefix(b, pc, ids, 130);
        cr_expect_eq(got, 64 * (k + 1), "answer %d restored %d", k, got);
        fork.prompt = ids + got;
        fork.n_prompt = 130 - got;
        s_generate(&fork);
        cr_assert_eq(fork.rc, 0, "%s", coli_last_error());
        cr_expect_eq(coli_context_save_prefix(b, pc, ids, 130) >= 0, 1);
        coli_context_reset(c);
        ref.prompt = ids;
        ref.n_prompt = 130;
        s_generate(&ref);
        cr_expect(memcmp(fork.out, ref.out, GEN * sizeof(int32_t)) == 0, "answer %d differs from a cold one", k);
    }
    coli_context_free(&a);
    coli_context_free(&b);
    coli_context_free(&c);
    coli_prefix_cache_free(&pc);
    coli_model_free(&m);
    free(warm);
    free(cold);
}

Test(hybrid, prefix_cache_restores_snapshots_exactly) { s_prefix_cache("qwen35moe"); }
Test(hybrid, kimi_k3_prefix_cache_restores_snapshots_exactly) { s_prefix_cache("kimi-k3"); }

Test(hybrid, full_context_stops_generation) {
    llama_ref r;
    char path[4096];
    s_read_ref("qwen3next", &r);
    s_model("qwen3next", &r, path, sizeof path);
    coli_model *m = s_load(path, "inproc");
    coli_context_params cp;
    coli_context_default_params(&cp);
    cp.n_ctx = 30;
    gen_run g = {.prompt = r.ids, .n_prompt = 24};
    cr_assert_eq(coli_context_new(m, &cp, &g.ctx), 0);
    s_generate(&g);
    cr_expect_eq(g.rc, 0, "%s", coli_last_error());
    cr_expect_eq(coli_context_pos(g.ctx), 30);
    cr_expect_eq(g.n_out, 6, "the prompt and 6 answer tokens fill the context");
    coli_context_free(&g.ctx);
    coli_model_free(&m);
}

/* coli perplexity's windows: after a reset a context starts from a zero
 * recurrent state, so a window's logits are those of a fresh context. */
Test(hybrid, reset_starts_a_fresh_state) {
    llama_ref r;
    char path[4096];
    s_read_ref("qwen3next", &r);
    s_model("qwen3next", &r, path, sizeof path);
    coli_model *m = s_load(path, "inproc");
    const size_t V = (size_t)s_vocab(m);
    float *a = malloc(40 * V * sizeof(float)), *b = malloc(40 * V * sizeof(float));
    coli_context *used = NULL, *fresh = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &used), 0);
    cr_assert_eq(coli_context_new(m, NULL, &fresh), 0);
    cr_assert_eq(coli_eval(used, r.ids, 70, NULL, 0), 0);
    coli_context_reset(used);
    cr_assert_eq(coli_eval(used, r.ids + 40, 40, a, 1), 0);
    cr_assert_eq(coli_eval(fresh, r.ids + 40, 40, b, 1), 0);
    cr_expect(memcmp(a, b, 40 * V * sizeof(float)) == 0, "the second window saw the first one's state");
    coli_context_free(&used);
    coli_context_free(&fresh);
    coli_model_free(&m);
    free(a);
    free(b);
}

/* docs/architectures.md's figures for the tiny qwen3next: 2 attention layers x
 * 2 KV heads x (32 + 32) per position; 2 linear layers x (3 x 128 conv tail
 * + 4 heads x 16 x 16) F32 per sequence. */
/* arch's state memory as coli_model_get_info reports it (F16 KV: kv_f16) */
static void s_expect_state(const char *arch, int kv_f16, long per_token, long per_seq) {
    llama_ref r;
    char path[4096];
    s_read_ref(arch, &r);
    s_model(arch, &r, path, sizeof path);
    coli_model *m = s_load_kv(path, "inproc", kv_f16);
    coli_model_info info;
    coli_model_get_info(m, &info);
    cr_expect_eq(info.state_bytes_per_token, per_token, "%s (F16 KV %d): %lld per token", arch, kv_f16,
                 (long long)info.state_bytes_per_token);
    cr_expect_eq(info.state_bytes_per_seq, per_seq, "%s (F16 KV %d): %lld per sequence", arch, kv_f16,
                 (long long)info.state_bytes_per_seq);
    coli_model_free(&m);
}

Test(hybrid, state_memory_reported) {
    s_expect_state("qwen3next", 0, 2 * 2 * 64 * 4, 2 * (3 * 128 + 4 * 16 * 16) * 4);
    /* F16 KV halves the rows, not the recurrent state */
    s_expect_state("qwen3next", 1, 2 * 2 * 64 * 2, 2 * (3 * 128 + 4 * 16 * 16) * 4);
}

/* A copy of src at dst with e applied (tests/gguf_edit.h). */
static void s_edited(const char *src, const char *dst, gguf_edit e) {
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(src, &f), 0, "%s", coli_last_error());
    cr_assert_eq(gguf_edit_write(f, dst, &e), 0, "%s", coli_last_error());
    gguf_close(&f);
}

Test(hybrid, inconsistent_ssm_keys_are_refused) {
    llama_ref r;
    char path[4096], bad[4200];
    s_read_ref("qwen3next", &r);
    s_model("qwen3next", &r, path, sizeof path);
    snprintf(bad, sizeof bad, "%s/hybrid-bad-%d.gguf", s_build(), (int)getpid());
    s_edited(path, bad, (gguf_edit){.set_key = "qwen3next.ssm.group_count", .v = 3});
    coli_model *m = NULL;
    cr_expect_eq(coli_model_load(bad, NULL, &m), COLI_EFORMAT);
    cr_expect(strstr(coli_last_error(), "ssm.group_count 3") && !strchr(coli_last_error(), '\n'), "%s",
              coli_last_error());
    s_edited(path, bad, (gguf_edit){.set_key = "qwen3next.ssm.state_size", .v = 8});
    cr_expect_eq(coli_model_load(bad, NULL, &m), COLI_EFORMAT);
    cr_expect(strstr(coli_last_error(), "ssm.state_size 8"), "%s", coli_last_error());
    unlink(bad);
}

// ---------------------------------------------------------------------------
// the multi-token-prediction block: loaded and validated, never run

/* tiny-ARCH-mtp-f32.gguf (gen_qwen3next.py --mtp): the trunk of tiny-ARCH
 * plus blk.4, an attention MoE block with its NextN tensors. llama.cpp
 * ignores it for plain decoding (its logits on the file are the recorded
 * ones); here it is loaded, not run and not placed: the logits are the
 * plain model's bytes, in-process and on workers. */
static void s_mtp_ignored(const char *arch) {
    llama_ref r;
    char plain[4096], mtp[4096];
    s_read_ref(arch, &r);
    s_model(arch, &r, plain, sizeof plain);
    s_hybrid_model_mtp(arch, 1, mtp, sizeof mtp);
    model *raw = NULL;
    cr_assert_eq(model_open(mtp, &raw), 0, "%s", coli_last_error());
    cr_expect_eq(raw->hp.n_layer, 4, "block_count 5 less one NextN block");
    cr_assert_eq(raw->n_nextn, 1, "the MTP block is loaded");
    cr_expect_str_eq(raw->nextn[0].eh_proj->name, "blk.4.nextn.eh_proj.weight");
    cr_expect_not_null(raw->nextn[0].head_norm, "shared_head_norm");
    cr_expect(!raw->nextn[0].layer.recurrent && raw->nextn[0].layer.wq, "an attention block");
    model_close(&raw);
    coli_model *a = s_load(plain, "inproc"), *b = s_load(mtp, "inproc"), *c = s_load(mtp, "cpu:2");
    const size_t bytes = (size_t)r.n * (size_t)s_vocab(a) * sizeof(float);
    float *la = s_logits(a, &r, 0), *lb = s_logits(b, &r, 0), *lc = s_logits(c, &r, 0);
    cr_expect(memcmp(la, lb, bytes) == 0, "%s: the MTP file's logits differ from the plain one's", arch);
    cr_expect(memcmp(la, lc, bytes) == 0, "%s: the MTP file on workers differs", arch);
    free(la);
    free(lb);
    free(lc);
    coli_model_free(&a);
    coli_model_free(&b);
    coli_model_free(&c);
}

Test(hybrid, qwen3next_mtp_block_not_run) { s_mtp_ignored("qwen3next"); }
Test(hybrid, qwen35moe_mtp_block_not_run) { s_mtp_ignored("qwen35moe"); }

/* A wrong-shaped MTP tensor is refused in one line naming it. */
Test(hybrid, mtp_block_wrong_shape_refused) {
    static const char *const bad_tensors[] = {"blk.4.nextn.eh_proj.weight", "blk.4.attn_q.weight",
                                              "blk.4.ffn_gate_exps.weight"};
    char mtp[4096], bad[4200];
    s_hybrid_model_mtp("qwen35moe", 1, mtp, sizeof mtp);
    snprintf(bad, sizeof bad, "%s/hybrid-mtp-bad-%d.gguf", s_build(), (int)getpid());
    for (size_t i = 0; i < sizeof bad_tensors / sizeof bad_tensors[0]; i++) {
        s_edited(mtp, bad, (gguf_edit){.swap = bad_tensors[i]});
        coli_model *m = NULL;
        cr_expect_eq(coli_model_load(bad, NULL, &m), COLI_EFORMAT, "%s", bad_tensors[i]);
        cr_expect(strstr(coli_last_error(), bad_tensors[i]) && !strchr(coli_last_error(), '\n'), "%s: %s",
                  bad_tensors[i], coli_last_error());
        coli_model_free(&m);
    }
    unlink(bad);
}

/* The tiny kimi-k3: 2 MLA layers x the latent row (64 + 16) per position;
 * 2 KDA layers x (3 x 3 x 128 conv tail + 4 heads x 32 x 32) F32 per
 * sequence (docs/architectures.md). */
Test(hybrid, kimi_k3_state_memory_reported) {
    s_expect_state("kimi-k3", 0, 2 * (64 + 16) * 4, 2 * (3 * 3 * 128 + 4 * 32 * 32) * 4);
}

/* One line naming the key or tensor, for each way a kimi-k3 file can be wrong. */
Test(hybrid, kimi_k3_bad_files_are_refused) {
    llama_ref r;
    char path[4096], bad[4200];
    s_read_ref("kimi-k3", &r);
    s_model("kimi-k3", &r, path, sizeof path);
    snprintf(bad, sizeof bad, "%s/kimi-bad-%d.gguf", s_build(), (int)getpid());
    const struct {
        const char *key, *tensor, *want;
    } cases[] = {
        {"kimi-k3.kda.head_dim", NULL, "kimi-k3.kda.head_dim"},
        {"kimi-k3.activation.situ_beta", NULL, "kimi-k3.activation.situ_beta"},
        {"kimi-k3.attn_res.block_size", NULL, "kimi-k3.attn_res.block_size"},
        {"kimi-k3.attention.head_count_kv", NULL, "kimi-k3.attention.head_count_kv"},
        {"kimi-k3.attention.key_length_mla", NULL, "key_length_mla"},
        {NULL, "blk.2.ssm_f_a.weight", "blk.2.ssm_f_a.weight"},
        {NULL, "blk.0.ssm_conv1d_k.weight", "blk.0.ssm_conv1d_k.weight"},
        {NULL, "blk.1.ffn_routed_up.weight", "blk.1.ffn_routed_up.weight"},
        {NULL, "output_res_score.weight", "output_res_score.weight"},
        {NULL, "blk.3.attn_res_score.weight", "blk.3.attn_res_score.weight"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s_edited(path, bad, (gguf_edit){.drop_key = cases[i].key, .drop_tensor = cases[i].tensor});
        coli_model *m = NULL;
        cr_expect_lt(coli_model_load(bad, NULL, &m), 0, "case %zu loaded", i);
        cr_expect(strstr(coli_last_error(), cases[i].want) && !strchr(coli_last_error(), '\n'), "case %zu: %s", i,
                  coli_last_error());
        coli_model_free(&m);
    }
    /* kimi-linear: its low-rank gate, its padded ssm_a, its gating key */
    char lin[4096];
    s_read_ref("kimi-linear", &r);
    s_model("kimi-linear", &r, lin, sizeof lin);
    const char *const lin_tensors[] = {"blk.0.ssm_g_a.weight", "blk.2.ssm_g_b.weight", "blk.2.ssm_a"};
    for (size_t i = 0; i < 4; i++) {
        s_edited(lin, bad,
                 (gguf_edit){.drop_key = i < 3 ? NULL : "kimi-linear.expert_gating_func",
                             .drop_tensor = i < 3 ? lin_tensors[i] : NULL});
        coli_model *m = NULL;
        cr_expect_lt(coli_model_load(bad, NULL, &m), 0, "kimi-linear case %zu loaded", i);
        cr_expect(strstr(coli_last_error(), i < 3 ? lin_tensors[i] : "kimi-linear.expert_gating_func"),
                  "kimi-linear case %zu: %s", i, coli_last_error());
        coli_model_free(&m);
    }
    /* an inconsistent width: the tensors say which */
    s_edited(path, bad, (gguf_edit){.set_key = "kimi-k3.expert_latent_length", .v = 32});
    coli_model *m = NULL;
    cr_expect_eq(coli_model_load(bad, NULL, &m), COLI_EFORMAT);
    cr_expect(strstr(coli_last_error(), "blk.1.ffn_gate_exps.weight"), "%s", coli_last_error());
    /* hostile values */
    s_edited(path, bad, (gguf_edit){.set_key = "kimi-k3.activation.situ_beta", .v = -1.0, .f32 = 1});
    cr_expect_eq(coli_model_load(bad, NULL, &m), COLI_EFORMAT);
    cr_expect(strstr(coli_last_error(), "situ_beta -1"), "%s", coli_last_error());
    s_edited(path, bad, (gguf_edit){.set_key = "kimi-k3.kda.gate_lower_bound", .v = NAN, .f32 = 1});
    cr_expect_eq(coli_model_load(bad, NULL, &m), COLI_EFORMAT);
    cr_expect(strstr(coli_last_error(), "kimi-k3.kda.gate_lower_bound"), "%s", coli_last_error());
    unlink(bad);
}

/* coli ARGS on the tiny kimi-k3, in-process and on two workers (cli_run.h) */
static char *s_kimi_cli(const char *cmd, const char *a1, const char *a2, const char *a3, const char *a4) {
    llama_ref r;
    char path[4096];
    s_read_ref("kimi-k3", &r);
    s_model("kimi-k3", &r, path, sizeof path);
    return cli_inproc_equals_workers(path, cmd, a1, a2, a3, a4);
}

/* coli run and coli perplexity (windows of 64: each starts from a zero
 * KDA state) give the same output in-process and with workers. */
Test(hybrid, kimi_k3_cli_run_and_perplexity) {
    char *out = s_kimi_cli("run", "-p", "once upon a time the river ran past the mill", "-n", "24");
    cr_expect_gt(strlen(out), 24, "coli run printed: %s", out);
    free(out);
    char text[4096];
    snprintf(text, sizeof text, "%s/kimi-ppl-%d.txt", s_build(), (int)getpid());
    FILE *f = fopen(text, "w");
    cr_assert(f);
    for (int i = 0; i < 12; i++) fprintf(f, "once upon a time the river runs past the mill and the miller sings.\n");
    fclose(f);
    out = s_kimi_cli("perplexity", "-f", text, "--ctx", "64");
    double ppl = 0.0;
    cr_expect(sscanf(out, "perplexity: %lf", &ppl) == 1 && isfinite(ppl) && ppl > 1.0, "coli perplexity: %s", out);
    free(out);
    unlink(text);
}
