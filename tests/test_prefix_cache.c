/*
 * test_prefix_cache.c - coli_prefix_cache on the gen_model fixtures: a
 * restored prefix plus the new tokens gives the logits bits (and greedy
 * tokens) of a cold prefill of the whole prompt (F32 and F16 caches);
 * lookups stop at the first block that differs; the byte bound holds, the
 * least recently used chain goes first, leaves before their prefixes; the
 * counters add up; bad arguments are refused.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "tests/gptoss_util.h"
#include "tests/ref_models.h"

enum {
    BLOCK = 16
};

static coli_model *s_load_path(const char *path, int kv_f16) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    mp.n_threads = 1;
    mp.kv_f16 = kv_f16;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(path, &mp, &m), 0, "%s: %s", path, coli_last_error());
    return m;
}

static coli_model *s_load(int kv_f16) {
    char path[4096];
    s_fixture("tiny-llama-moe-f32.gguf", path, sizeof path);
    return s_load_path(path, kv_f16);
}

static int s_vocab(const coli_model *m) {
    coli_model_info info;
    coli_model_get_info(m, &info);
    return info.n_vocab;
}

static void s_ids(int32_t *ids, int n, int n_vocab, int salt) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919 + 13 + salt) % n_vocab);
}

/* Bytes of one block of m's KV cache, from a cache that holds exactly one. */
static size_t s_block_bytes(coli_model *m) {
    coli_prefix_cache *pc = NULL;
    cr_assert_eq(coli_prefix_cache_new(m, (size_t)1 << 30, BLOCK, &pc), 0, "%s", coli_last_error());
    coli_context *ctx = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &ctx), 0);
    int32_t ids[BLOCK];
    s_ids(ids, BLOCK, s_vocab(m), 0);
    cr_assert_eq(coli_eval(ctx, ids, BLOCK, NULL, 0), 0, "%s", coli_last_error());
    cr_assert_eq(coli_context_save_prefix(ctx, pc, ids, BLOCK), 1);
    coli_prefix_cache_stats st;
    coli_prefix_cache_get_stats(pc, &st);
    coli_context_free(&ctx);
    coli_prefix_cache_free(&pc);
    cr_assert_gt(st.bytes, 0);
    return st.bytes;
}

/* Turn 1 evaluates P; turn 2 (P + more) restores what turn 1 left and
 * evaluates the rest; a cold context evaluates turn 2 whole. */
static void s_warm_equals_cold_on(coli_model *m, int kv_f16) {
    enum {
        N1 = 40,
        N2 = 61
    };
    const int V = s_vocab(m);
    int32_t ids[N2];
    s_ids(ids, N2, V, 0);
    float *cold = malloc((size_t)V * sizeof(float)), *warm = malloc((size_t)V * sizeof(float));
    coli_prefix_cache *pc = NULL;
    cr_assert_eq(coli_prefix_cache_new(m, (size_t)64 << 20, BLOCK, &pc), 0, "%s", coli_last_error());
    coli_context *a = NULL, *b = NULL, *c = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &a), 0);
    cr_assert_eq(coli_context_new(m, NULL, &b), 0);
    cr_assert_eq(coli_context_new(m, NULL, &c), 0);
    cr_assert_eq(coli_context_restore_prefix(a, pc, ids, N1), 0, "an empty cache restores nothing");
    cr_assert_eq(coli_eval(a, ids, N1, NULL, 0), 0, "%s", coli_last_error());
    cr_assert_eq(coli_context_save_prefix(a, pc, ids, N1), N1 / BLOCK);
    const int got = coli_context_restore_prefix(b, pc, ids, N2);
    cr_assert_eq(got, N1 / BLOCK * BLOCK, "restored %d", got);
    cr_assert_eq(coli_context_pos(b), got);
    cr_assert_eq(coli_eval(b, ids + got, N2 - got, warm, 0), 0, "%s", coli_last_error());
    cr_assert_eq(coli_eval(c, ids, N2, cold, 0), 0, "%s", coli_last_error());
    cr_assert(memcmp(warm, cold, (size_t)V * sizeof(float)) == 0, "warm logits differ from cold (kv_f16 %d)", kv_f16);
    coli_prefix_cache_stats st;
    coli_prefix_cache_get_stats(pc, &st);
    cr_assert_eq(st.hit_tokens, (uint64_t)got);
    cr_assert_eq(st.miss_tokens, (uint64_t)(N1 + N2 - got));
    cr_assert_eq(st.stored_tokens, (uint64_t)(N1 / BLOCK * BLOCK));
    /* greedy generation after the warm prompt = after the cold one */
    coli_sampling_params sp;
    coli_sampling_default_params(&sp);
    sp.temperature = 0;
    sp.n_predict = 12;
    coli_gen_stats gs_w, gs_c;
    cr_assert_eq(coli_context_restore_prefix(b, pc, ids, N2), got);
    cr_assert_eq(coli_generate(b, ids + got, N2 - got, &sp, NULL, NULL, &gs_w), 0, "%s", coli_last_error());
    coli_context_reset(c);
    cr_assert_eq(coli_generate(c, ids, N2, &sp, NULL, NULL, &gs_c), 0, "%s", coli_last_error());
    cr_assert_eq(gs_w.n_gen, gs_c.n_gen);
    cr_assert_eq(coli_context_pos(b), coli_context_pos(c));
    coli_context_free(&a);
    coli_context_free(&b);
    coli_context_free(&c);
    coli_prefix_cache_free(&pc);
    free(cold);
    free(warm);
}

static void s_warm_equals_cold(int kv_f16) {
    coli_model *m = s_load(kv_f16);
    s_warm_equals_cold_on(m, kv_f16);
    coli_model_free(&m);
}

Test(prefix_cache, warm_equals_cold_f32) { s_warm_equals_cold(0); }
Test(prefix_cache, warm_equals_cold_f16) { s_warm_equals_cold(1); }

/* gpt-oss (tests/gen_gptoss.py): a restored prefix of 32 positions, far past
 * the 6-position window of its SWA layers, plus 29 new tokens equals a cold
 * prefill bit for bit, sinks included, with either cache type. */
static void s_gptoss_warm_equals_cold(int kv_f16) {
    char path[4096];
    gptoss_model_f32(path, sizeof path);
    coli_model *m = s_load_path(path, kv_f16);
    s_warm_equals_cold_on(m, kv_f16);
    coli_model_free(&m);
}

Test(prefix_cache, gptoss_warm_equals_cold_f32) { s_gptoss_warm_equals_cold(0); }
Test(prefix_cache, gptoss_warm_equals_cold_f16) { s_gptoss_warm_equals_cold(1); }

/* Greedy tokens, through the callback, warm and cold. */
static int s_collect(void *user, int32_t id, const char *text, size_t len) {
    (void)text;
    (void)len;
    int32_t *out = user;
    out[++out[0]] = id;
    return 0;
}

Test(prefix_cache, generated_tokens_identical) {
    enum {
        N = 50,
        GEN = 16
    };
    coli_model *m = s_load(0);
    int32_t ids[N], cold[GEN + 1] = {0}, warm[GEN + 1] = {0};
    s_ids(ids, N, s_vocab(m), 5);
    coli_prefix_cache *pc = NULL;
    cr_assert_eq(coli_prefix_cache_new(m, (size_t)64 << 20, BLOCK, &pc), 0);
    coli_context *a = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &a), 0);
    coli_sampling_params sp;
    coli_sampling_default_params(&sp);
    sp.temperature = 0;
    sp.n_predict = GEN;
    cr_assert_eq(coli_generate(a, ids, N, &sp, s_collect, cold, NULL), 0, "%s", coli_last_error());
    cr_assert_eq(coli_context_save_prefix(a, pc, ids, N), N / BLOCK);
    cr_assert_eq(coli_context_restore_prefix(a, pc, ids, N), N / BLOCK * BLOCK);
    cr_assert_eq(coli_generate(a, ids + N / BLOCK * BLOCK, N % BLOCK, &sp, s_collect, warm, NULL), 0);
    cr_assert_eq(cold[0], warm[0]);
    cr_assert(memcmp(cold, warm, sizeof cold) == 0, "greedy tokens differ warm vs cold");
    coli_context_free(&a);
    coli_prefix_cache_free(&pc);
    coli_model_free(&m);
}

/* A prefix saved in one domain is found only in that domain (each its own blocks, stored twice). */
Test(prefix_cache, domains_share_nothing) {
    enum {
        N = 48
    };
    coli_model *m = s_load(0);
    int32_t ids[N];
    s_ids(ids, N, s_vocab(m), 0);
    coli_prefix_cache *pc = NULL;
    cr_assert_eq(coli_prefix_cache_new(m, (size_t)64 << 20, BLOCK, &pc), 0);
    coli_context *a = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &a), 0);
    cr_assert_eq(coli_eval(a, ids, N, NULL, 0), 0);
    coli_context_set_prefix_domain(a, 7);
    cr_assert_eq(coli_context_save_prefix(a, pc, ids, N), N / BLOCK);
    coli_context_set_prefix_domain(a, 8);
    cr_assert_eq(coli_context_restore_prefix(a, pc, ids, N), 0, "domain 8 found domain 7's prefix");
    coli_context_set_prefix_domain(a, 0);
    cr_assert_eq(coli_context_restore_prefix(a, pc, ids, N), 0, "the default domain found domain 7's prefix");
    coli_context_set_prefix_domain(a, 7);
    cr_assert_eq(coli_context_restore_prefix(a, pc, ids, N), N - BLOCK);
    cr_assert_eq(coli_eval(a, ids + N - BLOCK, BLOCK, NULL, 0), 0);
    coli_context_set_prefix_domain(a, 8);
    cr_assert_eq(coli_context_save_prefix(a, pc, ids, N), N / BLOCK, "domain 8 keeps blocks of its own");
    cr_assert_eq(coli_context_restore_prefix(a, pc, ids, N), N - BLOCK);
    coli_context_free(&a);
    coli_prefix_cache_free(&pc);
    coli_model_free(&m);
}

Test(prefix_cache, lookup_stops_at_first_different_block) {
    enum {
        N = 64
    };
    coli_model *m = s_load(0);
    int32_t ids[N], other[N];
    s_ids(ids, N, s_vocab(m), 0);
    memcpy(other, ids, sizeof ids);
    other[BLOCK + 3] = (other[BLOCK + 3] + 1) % s_vocab(m); /* block 1 differs */
    coli_prefix_cache *pc = NULL;
    cr_assert_eq(coli_prefix_cache_new(m, (size_t)64 << 20, BLOCK, &pc), 0);
    coli_context *a = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &a), 0);
    cr_assert_eq(coli_eval(a, ids, N, NULL, 0), 0);
    cr_assert_eq(coli_context_save_prefix(a, pc, ids, N), N / BLOCK);
    cr_assert_eq(coli_context_save_prefix(a, pc, ids, N), 0, "blocks already held are not added again");
    cr_assert_eq(coli_context_restore_prefix(a, pc, other, N), BLOCK);
    /* a whole cached prompt still leaves its last block to evaluate (logits) */
    cr_assert_eq(coli_context_restore_prefix(a, pc, ids, N), N - BLOCK);
    cr_assert_eq(coli_context_restore_prefix(a, pc, ids, N + 0 - BLOCK + 1), N - BLOCK);
    other[0] = (other[0] + 1) % s_vocab(m);
    cr_assert_eq(coli_context_restore_prefix(a, pc, other, N), 0);
    cr_assert_eq(coli_context_pos(a), 0);
    coli_context_free(&a);
    coli_prefix_cache_free(&pc);
    coli_model_free(&m);
}

Test(prefix_cache, bound_and_lru_order) {
    enum {
        N = 3 * BLOCK
    };
    coli_model *m = s_load(0);
    const size_t bb = s_block_bytes(m);
    int32_t x[N], y[N];
    s_ids(x, N, s_vocab(m), 1);
    s_ids(y, N, s_vocab(m), 2);
    coli_prefix_cache *pc = NULL;
    cr_assert_eq(coli_prefix_cache_new(m, 4 * bb + bb / 2, BLOCK, &pc), 0); /* room for 4 blocks */
    coli_context *a = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &a), 0);
    cr_assert_eq(coli_eval(a, x, N, NULL, 0), 0);
    cr_assert_eq(coli_context_save_prefix(a, pc, x, N), 3);
    coli_context_reset(a);
    cr_assert_eq(coli_eval(a, y, N, NULL, 0), 0);
    /* y's 3 blocks need 2 of x's: the oldest are x's leaves (blocks 2, then 1) */
    int added = coli_context_save_prefix(a, pc, y, N);
    cr_assert_eq(added, 3, "added %d: %s", added, coli_last_error());
    coli_prefix_cache_stats st;
    coli_prefix_cache_get_stats(pc, &st);
    cr_assert_eq(st.n_blocks, 4);
    cr_assert_leq(st.bytes, st.max_bytes);
    cr_assert_eq(st.evicted_tokens, 2 * BLOCK);
    cr_assert_eq(coli_context_restore_prefix(a, pc, x, N), BLOCK, "x keeps its first block");
    cr_assert_eq(coli_context_restore_prefix(a, pc, y, N), 2 * BLOCK, "y's whole chain (less the last block)");
    /* a chain longer than the whole budget stores what fits and never evicts itself */
    coli_prefix_cache_free(&pc);
    cr_assert_eq(coli_prefix_cache_new(m, 2 * bb, BLOCK, &pc), 0);
    coli_context_reset(a);
    cr_assert_eq(coli_eval(a, y, N, NULL, 0), 0);
    cr_assert_eq(coli_context_save_prefix(a, pc, y, N), 2);
    coli_prefix_cache_get_stats(pc, &st);
    cr_assert_eq(st.evicted_tokens, 0);
    cr_assert_eq(coli_context_restore_prefix(a, pc, y, N), 2 * BLOCK);
    coli_prefix_cache_free(&pc);
    /* 0 bytes: nothing is ever stored */
    cr_assert_eq(coli_prefix_cache_new(m, 0, BLOCK, &pc), 0);
    cr_assert_eq(coli_context_pos(a), 2 * BLOCK, "the restore above left y's first 2 blocks");
    cr_assert_eq(coli_context_save_prefix(a, pc, y, 2 * BLOCK), 0);
    cr_assert_eq(coli_context_restore_prefix(a, pc, y, N), 0);
    coli_context_free(&a);
    coli_prefix_cache_free(&pc);
    coli_model_free(&m);
}

Test(prefix_cache, bad_arguments) {
    coli_model *m = s_load(0);
    coli_prefix_cache *pc = NULL;
    cr_assert_eq(coli_prefix_cache_new(NULL, 1024, BLOCK, &pc), COLI_EINVAL);
    cr_assert_null(pc);
    cr_assert_eq(coli_prefix_cache_new(m, 1024, 0, &pc), COLI_EINVAL);
    cr_assert_eq(coli_prefix_cache_new(m, 1024, BLOCK, NULL), COLI_EINVAL);
    cr_assert_eq(coli_prefix_cache_new(m, (size_t)1 << 20, BLOCK, &pc), 0);
    coli_context *a = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &a), 0);
    int32_t ids[4] = {1, 2, 3, 4};
    cr_assert_eq(coli_context_restore_prefix(a, pc, ids, 0), COLI_EINVAL);
    cr_assert_eq(coli_context_restore_prefix(NULL, pc, ids, 4), COLI_EINVAL);
    cr_assert_eq(coli_context_save_prefix(a, pc, ids, 4), COLI_EINVAL, "the context holds 0 positions");
    cr_assert_eq(coli_context_save_prefix(a, NULL, ids, 0), COLI_EINVAL);
    coli_prefix_cache_stats st;
    coli_prefix_cache_get_stats(NULL, &st);
    cr_assert_eq(st.n_blocks, 0);
    coli_prefix_cache_get_stats(pc, NULL);
    coli_context_free(&a);
    coli_prefix_cache_free(&pc);
    coli_prefix_cache_free(&pc);
    coli_model_free(&m);
}
