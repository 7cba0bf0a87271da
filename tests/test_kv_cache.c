/*
 * test_kv_cache.c - the KV cache layouts: separate K and V widths (qwen3moe,
 * deepseek2's decompressed heads) and values inside the keys (deepseek2's
 * latent cache); bytes per token as docs/architectures.md states them.
 */
#include <criterion/criterion.h>

#include "coordinator/kv_cache.h"
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
