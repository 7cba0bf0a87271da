/*
 * test_kv_cache.c - the KV cache layouts: separate K and V widths (qwen3moe,
 * deepseek2's decompressed heads) and values inside the keys (deepseek2's
 * latent cache); bytes per token as docs/architectures.md states them. The
 * sequence state of hybrid models: KV rows only for attention layers, a
 * recurrent state per linear layer, zeroed at position 0, its snapshots
 * dropped when the sequence is rewritten before them; the prefix cache keeps
 * and restores them, and only up to a block that has one, copying without
 * its mutex (a copy hook checks; a block evicted mid-copy stays whole).
 */
#include <criterion/criterion.h>

#include "coordinator/forward.h"
#include "coordinator/kv_cache.h"
#include "coordinator/prefix_cache.h"
#include "coordinator/model.h"
#include "core/error.h"
#include "tests/ref_models.h"

/* K rows of 6, V rows of 4, fp32 and fp16: what is stored is read back. */
Test(kv_cache, separate_widths_round_trip) {
    for (int f16 = 0; f16 < 2; f16++) {
        kv_cache c;
        cr_assert_eq(kv_cache_init(&c, 2, 8, 6, 4, 0, f16), 0, "%s", coli_last_error());
        const float k[2 * 6] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, v[2 * 4] = {-1, -2, -3, -4, -5, -6, -7, -8};
        kv_cache_store(&c, 1, 3, 2, k, v);
        for (int t = 0; t < 2; t++) {
            for (int i = 0; i < 6; i++) {
                const void *row = kv_cache_k(&c, 1, 3 + t);
                float got = f16 ? kv_fp16_table()[((const uint16_t *)row)[i]] : ((const float *)row)[i];
                cr_expect_eq(got, k[t * 6 + i]);
            }
            for (int i = 0; i < 4; i++) {
                const void *row = kv_cache_v(&c, 1, 3 + t);
                float got = f16 ? kv_fp16_table()[((const uint16_t *)row)[i]] : ((const float *)row)[i];
                cr_expect_eq(got, v[t * 4 + i]);
            }
        }
        cr_expect_eq(kv_cache_bytes_per_token(&c), (size_t)2 * (6 + 4) * (f16 ? 2 : 4));
        kv_cache_free(&c);
    }
}

/* v_in_k: the values are the leading v_dim elements of the key row. */
Test(kv_cache, values_inside_keys) {
    kv_cache c;
    cr_assert_eq(kv_cache_init(&c, 1, 4, 5, 3, 1, 0), 0, "%s", coli_last_error());
    cr_expect_null(c.v);
    const float k[5] = {1, 2, 3, 4, 5};
    kv_cache_store(&c, 0, 2, 1, k, NULL);
    const float *v = kv_cache_v(&c, 0, 2);
    cr_expect(v[0] == 1 && v[1] == 2 && v[2] == 3);
    cr_expect_eq(kv_cache_bytes_per_token(&c), (size_t)5 * 4);
    kv_cache_free(&c);
    cr_expect_eq(kv_cache_init(&c, 1, 4, 3, 5, 1, 0), COLI_EINVAL, "values wider than keys");
}

/* tiny-deepseek2 (attn_kv_b layout): 3 layers x 4 heads x (48 + 32) F32 = 3840 B. */
Test(kv_cache, deepseek2_decompressed_bytes) {
    s_require_shared();
    char path[4096];
    s_ref_model("tiny-deepseek2-f32.gguf", path, sizeof path);
    model *m = NULL;
    cr_assert_eq(model_open(path, &m), 0, "%s", coli_last_error());
    kv_cache c;
    cr_assert_eq(kv_cache_init(&c, m->hp.n_layer, 16, model_k_dim(&m->hp), model_v_dim(&m->hp), m->hp.mla_absorbed, 0),
                 0);
    cr_expect_eq(kv_cache_bytes_per_token(&c), 3840);
    kv_cache_free(&c);
    model_close(&m);
}

/* Layers 0, 1, 3 recurrent (8 floats each), 2 and 4 with KV rows of 4 + 4. */
static const uint8_t s_hybrid_layers[5] = {1, 1, 0, 1, 0};

static void s_hybrid(kv_cache *c, int n_ctx) {
    const kv_shape sh = {.n_layer = 5, .k_dim = 4, .v_dim = 4, .recurrent = s_hybrid_layers, .rec_floats = 8};
    cr_assert_eq(kv_cache_init_shape(c, &sh, n_ctx), 0, "%s", coli_last_error());
}

Test(kv_cache, hybrid_layout) {
    kv_cache c;
    s_hybrid(&c, 8);
    cr_expect_eq(c.n_kv, 2);
    cr_expect_eq(c.n_rec, 3);
    cr_expect_eq(kv_cache_bytes_per_token(&c), (size_t)2 * 8 * 4, "only the attention layers keep rows");
    cr_expect_eq(kv_cache_rec_bytes(&c), (size_t)3 * 8 * 4);
    cr_expect(!kv_cache_has_kv(&c, 3) && kv_cache_has_kv(&c, 4));
    const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    kv_cache_store(&c, 2, 7, 1, a, a);
    kv_cache_store(&c, 4, 0, 1, b, b);
    cr_expect_eq(((const float *)kv_cache_k(&c, 2, 7))[3], 4.0f, "layer 2's rows are not layer 4's");
    cr_expect_eq(((const float *)kv_cache_v(&c, 4, 0))[0], 5.0f);
    float *r1 = kv_cache_rec(&c, 1), *r3 = kv_cache_rec(&c, 3);
    cr_expect_eq(r3 - r1, 8, "recurrent states 1 and 2 of 8 floats");
    r1[0] = 9.0f;
    kv_cache_snapshot(&c, 16);
    r1[0] = 10.0f;
    kv_cache_snapshot(&c, 32);
    r1[0] = 11.0f;
    kv_cache_snapshot(&c, 48); /* replaces the oldest, 16 */
    cr_expect_null(kv_cache_snap_at(&c, 16));
    cr_expect_eq(kv_cache_snap_at(&c, 32)[8], 10.0f);
    kv_cache_rewind(&c, 40); /* the sequence is rewritten after 40: the snapshot at 48 is another one's */
    cr_expect_null(kv_cache_snap_at(&c, 48));
    cr_expect_not_null(kv_cache_snap_at(&c, 32));
    cr_expect_eq(r1[0], 11.0f, "a rewind after 0 keeps the state");
    kv_cache_rewind(&c, 0);
    cr_expect_eq(r1[0], 0.0f, "a new sequence starts from zero");
    cr_expect_null(kv_cache_snap_at(&c, 32));
    kv_cache_free(&c);
    const kv_shape bad = {.n_layer = 2, .k_dim = 4, .v_dim = 4, .recurrent = s_hybrid_layers, .rec_floats = 0};
    cr_expect_eq(kv_cache_init_shape(&c, &bad, 8), COLI_EINVAL, "recurrent layers without a state");
}

/* Positions 0..n-1 of c hold rows and a state derived from the sequence
 * (salt: which one); snapshots at each multiple of 16 in snaps. */
static void s_fill(kv_cache *c, int n, float salt, const int *snaps, int n_snaps) {
    kv_cache_rewind(c, 0);
    for (int p = 0, s = 0; p <= n; p++) {
        for (int l = 0; l < 5; l++) {
            float row[4] = {salt, (float)p, (float)l, 1.0f};
            if (!s_hybrid_layers[l] && p < n) kv_cache_store(c, l, p, 1, row, row);
            if (s_hybrid_layers[l]) kv_cache_rec(c, l)[0] = salt + (float)p;
        }
        if (s < n_snaps && snaps[s] == p) kv_cache_snapshot(c, snaps[s++]);
    }
}

Test(kv_cache, prefix_cache_keeps_snapshots) {
    const kv_shape sh = {.n_layer = 5, .k_dim = 4, .v_dim = 4, .recurrent = s_hybrid_layers, .rec_floats = 8};
    prefix_cache *pc = NULL;
    cr_assert_eq(prefix_cache_new(&sh, 16, (size_t)1 << 20, &pc), 0);
    kv_cache a, b;
    s_hybrid(&a, 64);
    s_hybrid(&b, 64);
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = i * 3 + 1;
    /* 40 positions, a snapshot at 16 only: one block kept (the second would end without a state) */
    const int at16[1] = {16};
    s_fill(&a, 40, 100.0f, at16, 1);
    cr_assert_eq(prefix_cache_store(pc, 0, &a, ids, 40), 1);
    kv_cache_rec(&b, 0)[0] = 77.0f;
    cr_assert_eq(prefix_cache_restore(pc, 0, &b, ids, 64, 63), 16);
    cr_expect_eq(kv_cache_rec(&b, 0)[0], 116.0f, "the state after 16 positions");
    cr_expect_eq(((const float *)kv_cache_k(&b, 4, 15))[1], 15.0f);
    /* 48 positions with snapshots at 16 and 48: the block ending at 32 is kept for its rows */
    const int both[2] = {16, 48};
    s_fill(&a, 48, 200.0f, both, 2);
    int32_t other[64];
    for (int i = 0; i < 64; i++) other[i] = i * 5 + 2;
    cr_assert_eq(prefix_cache_store(pc, 0, &a, other, 48), 3);
    cr_assert_eq(prefix_cache_restore(pc, 0, &b, other, 64, 63), 48);
    cr_expect_eq(kv_cache_rec(&b, 3)[0], 248.0f);
    cr_assert_eq(prefix_cache_restore(pc, 0, &b, other, 40, 39), 16, "32 ends without a state: back to 16");
    cr_expect_eq(kv_cache_rec(&b, 3)[0], 216.0f);
    cr_expect_not_null(kv_cache_snap_at(&b, 16), "a restored state is the sequence's snapshot there");
    other[20] = 0; /* differs inside the second block: no restore past the first */
    cr_assert_eq(prefix_cache_restore(pc, 0, &b, other, 64, 63), 16);
    /* no match at all: a fresh sequence, state zero */
    ids[0] = 999;
    cr_assert_eq(prefix_cache_restore(pc, 0, &b, ids, 64, 63), 0);
    cr_expect_eq(kv_cache_rec(&b, 0)[0], 0.0f);
    prefix_cache_counters st;
    prefix_cache_get_counters(pc, &st);
    cr_expect_eq(st.bytes, (size_t)4 * (16 * 2 * 8 * 4) + 3 * (3 * 8 * 4), "rows of 4 blocks, 3 snapshots");
    kv_cache_free(&a);
    kv_cache_free(&b);
    prefix_cache_free(&pc);
}

/* Passes of a hybrid model end on multiples of FORWARD_REC_CHUNK when they can. */
/* The copy hook's view: copies made holding a prefix cache's mutex, and
 * without; armed, the first copy stores another prefix (as another slot
 * would meanwhile), which evicts the block the restore is copying from. */
typedef struct copy_probe {
    int locked, unlocked, armed;
    prefix_cache *pc;
    const kv_cache *src;
    const int32_t *ids;
} copy_probe;

static void s_probe_copy(void *user, size_t bytes) {
    copy_probe *p = user;
    (void)bytes;
    if (prefix_cache_locked_here())
        p->locked++;
    else
        p->unlocked++;
    if (!p->armed) return;
    p->armed = 0;
    cr_expect_eq(prefix_cache_store(p->pc, 0, p->src, p->ids, 16), 1, "a store while a restore copies");
}

/* Restores and stores copy rows and snapshots without the cache's mutex
 * (before: every copy under it, and the store from the hook deadlocked);
 * a block evicted while a restore copies from it stays whole until then. */
Test(kv_cache, prefix_cache_copies_without_its_mutex, .timeout = 60) {
    const kv_shape sh = {.n_layer = 5, .k_dim = 4, .v_dim = 4, .recurrent = s_hybrid_layers, .rec_floats = 8};
    prefix_cache *pc = NULL;
    cr_assert_eq(prefix_cache_new(&sh, 16, 1200, &pc), 0); /* one block (1024 bytes) and its snapshot (96) */
    kv_cache a, b, c;
    s_hybrid(&a, 64);
    s_hybrid(&b, 64);
    s_hybrid(&c, 64);
    int32_t x[16], y[16];
    for (int i = 0; i < 16; i++) x[i] = i * 3 + 1, y[i] = i * 7 + 2;
    const int at16[1] = {16};
    s_fill(&a, 16, 100.0f, at16, 1);
    s_fill(&c, 16, 300.0f, at16, 1);
    copy_probe probe = {.pc = pc, .src = &c, .ids = y};
    kv_cache *const all[3] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) all[i]->copy_hook = s_probe_copy, all[i]->copy_user = &probe;
    cr_assert_eq(prefix_cache_store(pc, 0, &a, x, 16), 1);
    probe.armed = 1;
    cr_assert_eq(prefix_cache_restore(pc, 0, &b, x, 17, 16), 16);
    cr_expect_eq(probe.armed, 0);
    cr_expect_eq(kv_cache_rec(&b, 0)[0], 116.0f, "x's state, copied from its evicted block");
    cr_expect_eq(((const float *)kv_cache_k(&b, 4, 15))[0], 100.0f);
    cr_expect_eq(prefix_cache_restore(pc, 0, &b, x, 17, 16), 0, "x's block was evicted for y's");
    cr_expect_eq(prefix_cache_restore(pc, 0, &b, y, 17, 16), 16);
    cr_expect_eq(kv_cache_rec(&b, 0)[0], 316.0f);
    cr_expect_eq(probe.locked, 0, "%d copies under the mutex (%d without)", probe.locked, probe.unlocked);
    cr_expect_gt(probe.unlocked, 0);
    kv_cache_free(&a);
    kv_cache_free(&b);
    kv_cache_free(&c);
    prefix_cache_free(&pc);
}

Test(kv_cache, hybrid_passes_split_on_chunks) {
    uint8_t rec[1] = {1};
    model m = {.recurrent = rec}, plain = {0};
    cr_expect_eq(forward_split(&m, 10, 1000, 100), 64);
    cr_expect_eq(forward_split(&m, 64, 1000, 512), 576);
    cr_expect_eq(forward_split(&m, 64, 100, 512), 100, "the end itself");
    cr_expect_eq(forward_split(&m, 70, 1000, 30), 128, "no multiple within reach: the next one");
    cr_expect_eq(forward_split(&m, 70, 110, 30), 110, "... or the end, if nearer");
    cr_expect_eq(forward_split(&plain, 10, 1000, 100), 110);
}
