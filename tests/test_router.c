/*
 * test_router.c - expert choice (coordinator/router.c) on small cases
 * worked out by hand: softmax + renormalisation (Mixtral), sigmoid with a
 * selection bias, normalisation and scale (DeepSeek-V3), group-limited
 * routing (DeepSeek-V3's expert groups).
 */
#include <criterion/criterion.h>
#include <math.h>

#include "coordinator/router.h"

#define TOL 1e-6f

/* logits 0, ln 2, ln 4: softmax 1/7, 2/7, 4/7; top-2 = experts 2, 1,
 * renormalised 4/6 and 2/6. */
Test(router, softmax_renormalised) {
    router_params rp = {3, 2, GATING_SOFTMAX, 1, 1.0f, 0, 0};
    float p[3] = {0.0f, logf(2.0f), logf(4.0f)}, scratch[6], w[2];
    int32_t sel[2];
    router_select(&rp, p, NULL, scratch, sel, w);
    cr_expect_eq(sel[0], 2);
    cr_expect_eq(sel[1], 1);
    cr_expect(fabsf(w[0] - 4.0f / 6.0f) < TOL && fabsf(w[1] - 2.0f / 6.0f) < TOL, "w %g %g", w[0], w[1]);
    cr_expect(fabsf(p[0] - 1.0f / 7.0f) < TOL, "scores replace the logits");
}

/* raw top-k (OLMoE, Qwen2-MoE): the softmax values themselves. */
Test(router, softmax_raw) {
    router_params rp = {3, 2, GATING_SOFTMAX, 0, 1.0f, 0, 0};
    float p[3] = {0.0f, logf(2.0f), logf(4.0f)}, scratch[6], w[2];
    int32_t sel[2];
    router_select(&rp, p, NULL, scratch, sel, w);
    cr_expect(fabsf(w[0] - 4.0f / 7.0f) < TOL && fabsf(w[1] - 2.0f / 7.0f) < TOL, "w %g %g", w[0], w[1]);
}

/* sigmoid(0) = 1/2 for all; bias 0, .1, -.1, .2 chooses experts 3 and 1,
 * but the weights are the unbiased 1/2, 1/2 -> normalised 1/2 -> x 2.5. */
Test(router, sigmoid_bias_chooses_only) {
    router_params rp = {4, 2, GATING_SIGMOID, 1, 2.5f, 0, 0};
    float p[4] = {0, 0, 0, 0}, bias[4] = {0.0f, 0.1f, -0.1f, 0.2f}, scratch[8], w[2];
    int32_t sel[2];
    router_select(&rp, p, bias, scratch, sel, w);
    cr_expect_eq(sel[0], 3);
    cr_expect_eq(sel[1], 1);
    cr_expect(fabsf(w[0] - 1.25f) < TOL && fabsf(w[1] - 1.25f) < TOL, "w %g %g", w[0], w[1]);
}

/* 8 experts in 4 groups of 2, 2 groups kept, top-3. Choice values (1/2 +
 * bias): g0 {.9, 0}, g1 {.5, .5}, g2 {.8, .05}, g3 {.1, .1}; group scores
 * .9, 1.0, .85, .2 keep g1 and g0, so experts 0, 2, 3 (expert 4's .8 is
 * out of reach); without groups the choice is 0, 4, 2. */
Test(router, expert_groups_limit_the_choice) {
    const float want[8] = {0.9f, 0.0f, 0.5f, 0.5f, 0.8f, 0.05f, 0.1f, 0.1f};
    float bias[8], p[8], scratch[12], w[3];
    int32_t sel[3];
    for (int e = 0; e < 8; e++) bias[e] = want[e] - 0.5f;
    router_params rp = {8, 3, GATING_SIGMOID, 1, 1.0f, 4, 2};
    for (int e = 0; e < 8; e++) p[e] = 0.0f;
    router_select(&rp, p, bias, scratch, sel, w);
    cr_expect(sel[0] == 0 && sel[1] == 2 && sel[2] == 3, "grouped: %d %d %d", sel[0], sel[1], sel[2]);
    cr_expect(fabsf(w[0] - 1.0f / 3.0f) < TOL, "weights from the unbiased scores: %g", w[0]);
    rp.n_group = 0;
    for (int e = 0; e < 8; e++) p[e] = 0.0f;
    router_select(&rp, p, bias, scratch, sel, w);
    cr_expect(sel[0] == 0 && sel[1] == 4 && sel[2] == 2, "ungrouped: %d %d %d", sel[0], sel[1], sel[2]);
}

/* gpt-oss (SOFTMAX_WEIGHT): the top-k by the logits themselves (a softmax
 * over all experts is never taken), weights = softmax over the k chosen:
 * logits 1, ln 3 + 1, 0.5, 1 + ln 1 -> top-2 = experts 1, 0 (ties to the
 * lower index: 0 before 3), weights 3/4, 1/4; the logits stay as they were. */
Test(router, softmax_weight_over_the_chosen) {
    router_params rp = {4, 2, GATING_SOFTMAX_WEIGHT, 0, 1.0f, 0, 0};
    float p[4] = {1.0f, logf(3.0f) + 1.0f, 0.5f, 1.0f}, scratch[8], w[2];
    int32_t sel[2];
    router_select(&rp, p, NULL, scratch, sel, w);
    cr_expect(sel[0] == 1 && sel[1] == 0, "sel %d %d", sel[0], sel[1]);
    cr_expect(fabsf(w[0] - 0.75f) < TOL && fabsf(w[1] - 0.25f) < TOL, "w %g %g", w[0], w[1]);
    cr_expect_eq(p[2], 0.5f, "logits untouched");
}
