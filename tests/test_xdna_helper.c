/*
 * test_xdna_helper.c - the helper library through its C ABI, as the plugin
 * loads it (xdna_loader.c): the sticky all-or-nothing verdict, refusals of
 * another generation and of a missing entry point, and the real helper
 * against the synthetic XRT runtime: a GEMM checked against a reference
 * summed in double from the same BF16 values, failures caught and reported
 * with the session still usable. (Each Criterion test is its own process, so
 * each starts with no verdict.)
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plugins/xdna/xdna_loader.h"
#include "plugins/xdna/xdna_package.h"
#include "core/quant/quant.h"
#include "tests/xdna_test_util.h"

#define MODEL "tiny-llama-moe-f32.gguf"

static const char *s_model(void) {
    static char path[1100];
    snprintf(path, sizeof path, "%.1000s/fixtures/%s", xdna_abs_build(), MODEL);
    if (access(path, R_OK) != 0) cr_skip_test("fixture %s missing (make fixtures)", path);
    return path;
}

TestSuite(xdna_helper, .init = xdna_env_defaults);

Test(xdna_helper, verdict_is_sticky) {
    char empty[64], good[64], why[640] = "", why2[640] = "";
    xdna_lane_dir(empty, XDNA_NO_HELPER, 0, s_model());
    xdna_lane_dir(good, XDNA_SYNTH_HELPER, 0, s_model());
    const xdna_helper *h = NULL;
    cr_expect_eq(xdna_helper_load(empty, &h, why, sizeof why), XDNA_HELPER_UNAVAILABLE);
    cr_expect(strstr(why, "HELPER_UNAVAILABLE: "), "%s", why);
    cr_expect_eq(xdna_helper_load(good, &h, why2, sizeof why2), XDNA_HELPER_UNAVAILABLE,
                 "a later good helper does not change the process's verdict");
    cr_expect_str_eq(why2, why);
    xdna_rm_dir(empty);
    xdna_rm_dir(good);
}

Test(xdna_helper, other_generation_is_refused) {
    char dir[64], why[640] = "";
    xdna_lane_dir(dir, XDNA_ABI1_HELPER, 0, s_model());
    const xdna_helper *h = NULL;
    cr_expect_eq(xdna_helper_load(dir, &h, why, sizeof why), XDNA_HELPER_UNAVAILABLE);
    cr_expect(strstr(why, "generation 1, this plugin needs 2"), "%s", why);
    xdna_rm_dir(dir);
}

Test(xdna_helper, missing_symbol_is_refused) {
    char dir[64], why[640] = "";
    xdna_lane_dir(dir, XDNA_NOSYM_HELPER, 0, s_model());
    const xdna_helper *h = NULL;
    cr_expect_eq(xdna_helper_load(dir, &h, why, sizeof why), XDNA_HELPER_UNAVAILABLE);
    cr_expect(strstr(why, "lacks coli_xdna_last_error"), "%s", why);
    xdna_rm_dir(dir);
}

typedef struct rig {
    char dir[64];
    xdna_package pkg;
    const xdna_helper *h;
    xdna_session *s;
    int art; /* ffn_gate M64: K 64, N 128 */
} rig;

static void s_rig(rig *r) {
    char why[640] = "", pkg[128];
    xdna_lane_dir(r->dir, XDNA_SYNTH_HELPER, 1, s_model());
    snprintf(pkg, sizeof pkg, "%s/xdna-package", r->dir);
    cr_assert_eq(xdna_package_load(pkg, &r->pkg, why, sizeof why), XDNA_OK, "%s", why);
    cr_assert_eq(xdna_helper_load(r->dir, &r->h, why, sizeof why), XDNA_OK, "%s", why);
    cr_assert_eq(xdna_session_open(r->h, &r->pkg, 0, 0, &r->s, why, sizeof why), XDNA_OK, "%s", why);
    xdna_expert_shape e = {64, 128, {COLI_F32, COLI_F32, COLI_F32}};
    r->art = xdna_find_artifact(&r->pkg, &e, XDNA_OP_GATE, 64);
    cr_assert_geq(r->art, 0);
}

static void s_fill(uint16_t *v, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = coli_fp32_to_bf16((float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f);
    }
}

Test(xdna_helper, gemm_matches_a_double_reference_of_the_same_bf16_values) {
    rig r;
    s_rig(&r);
    enum {
        M = 64,
        K = 64,
        N = 128
    };
    uint16_t *a = malloc(M * K * 2), *b = malloc(N * K * 2);
    float *c = malloc(M * N * 4);
    s_fill(a, M * K, 1);
    s_fill(b, N * K, 2);
    xdna_weight *w = NULL;
    cr_assert_eq(r.h->wrap_weight(r.s, r.art, b, N * K, &w), XDNA_SUCCESS, "%s", r.h->last_error());
    cr_assert_eq(r.h->execute(r.s, w, a, c), XDNA_SUCCESS, "%s", r.h->last_error());
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)coli_bf16_to_fp32(a[i * K + k]) * coli_bf16_to_fp32(b[j * K + k]);
                ref += p;
                mag += fabs(p);
            }
            worst = fmax(worst, fabs(c[i * N + j] - ref) / (mag + 1e-30));
        }
    cr_log_info("helper GEMM vs double reference: max error %.3g of the sum of |products|", worst);
    cr_expect_lt(worst, 1e-5, "F32 sums of exact BF16 products: %g", worst);
    cr_expect_eq(r.h->wrap_weight(r.s, r.art, b, N * K - 1, &w), XDNA_E_ARG, "a wrong size is refused");
    r.h->release_weight(r.s, &w);
    cr_expect_null(w);
    r.h->shutdown(&r.s);
    cr_expect_null(r.s);
    free(a);
    free(b);
    free(c);
    xdna_rm_dir(r.dir);
}

Test(xdna_helper, failures_are_caught_and_the_session_stays_usable) {
    setenv("COLI_XRT_SYNTH_FAULT", "start@1,timeout@1,sync@11", 1);
    rig r;
    s_rig(&r);
    enum {
        M = 64,
        K = 64,
        N = 128
    };
    uint16_t *a = calloc(M * K, 2), *b = calloc(N * K, 2);
    float *c = malloc(M * N * 4);
    xdna_weight *w = NULL;
    /* syncs: one per artifact's instruction stream (1-6), the weight (7), then per
     * execution one in (8, 9, 10) and, once it completed, one out (11) */
    cr_assert_eq(r.h->wrap_weight(r.s, r.art, b, N * K, &w), XDNA_SUCCESS, "%s", r.h->last_error());
    cr_expect_eq(r.h->execute(r.s, w, a, c), XDNA_E_START);
    cr_expect(strstr(r.h->last_error(), "run start"), "%s", r.h->last_error());
    cr_expect_eq(r.h->execute(r.s, w, a, c), XDNA_E_TIMEOUT);
    cr_expect(strstr(r.h->last_error(), "no completion within 5000 ms"), "%s", r.h->last_error());
    cr_expect_eq(r.h->execute(r.s, w, a, c), XDNA_E_SYNC);
    cr_expect(strstr(r.h->last_error(), "output from the device"), "%s", r.h->last_error());
    cr_expect_eq(r.h->execute(r.s, w, a, c), XDNA_SUCCESS, "usable after failures: %s", r.h->last_error());
    r.h->release_weight(r.s, &w);
    r.h->shutdown(&r.s);
    free(a);
    free(b);
    free(c);
    xdna_rm_dir(r.dir);
}
