/* test_sampler.c - greedy, temperature, top-k, top-p and the seeded RNG. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "coordinator/sampler.h"

static coli_sampling_params s_params(float temp, int top_k, float top_p, uint64_t seed) {
    coli_sampling_params p;
    coli_sampling_default_params(&p);
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.seed = seed;
    p.n_predict = 1;
    return p;
}

Test(sampler, greedy_picks_argmax_and_lower_id_on_ties) {
    float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 2.0f};
    sampler s;
    coli_sampling_params p = s_params(0.0f, 0, 1.0f, 7);
    cr_assert_eq(sampler_init(&s, &p, 6), 0);
    cr_assert_eq(sampler_sample(&s, logits), 1);
    logits[1] = 1.0f;
    cr_assert_eq(sampler_sample(&s, logits), 3);
    sampler_free(&s);
    cr_assert_eq(sampler_argmax(logits, 6), 3);
}

/* The index the plain loop picks: the first of the largest, NaNs never. */
static int32_t naive_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

//  The two-pass argmax agrees with the plain loop on every length (partial
//  lanes), ties (first wins), -0.0 next to 0.0, NaNs anywhere (a NaN first
//  element wins, as in the loop) and all-equal rows.
Test(sampler, argmax_equals_the_plain_loop) {
    unsigned seed = 99;
    float x[300];
    for (int trial = 0; trial < 2000; trial++) {
        const int n = 1 + trial % 300;
        for (int i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            x[i] = (float)((seed >> 20) % 7) - 3.0f; /* few values: many ties */
            if ((seed >> 8) % 53 == 0) x[i] = NAN;
            if ((seed >> 8) % 61 == 1) x[i] = -0.0f;
        }
        if (trial % 5 == 0) x[trial % n] = 9.0f;
        if (trial % 97 == 0) x[0] = NAN;
        cr_assert_eq(sampler_argmax(x, n), naive_argmax(x, n), "trial %d, n %d", trial, n);
    }
}

Test(sampler, same_seed_same_sequence_other_seed_differs) {
    enum {
        V = 50,
        N = 200
    };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)sin(i * 0.7) * 2.0f;
    int32_t a[N], b[N], c[N];
    sampler s;
    coli_sampling_params p = s_params(1.0f, 0, 1.0f, 1234);
    cr_assert_eq(sampler_init(&s, &p, V), 0);
    for (int i = 0; i < N; i++) a[i] = sampler_sample(&s, logits);
    sampler_free(&s);
    cr_assert_eq(sampler_init(&s, &p, V), 0);
    for (int i = 0; i < N; i++) b[i] = sampler_sample(&s, logits);
    sampler_free(&s);
    p.seed = 1235;
    cr_assert_eq(sampler_init(&s, &p, V), 0);
    for (int i = 0; i < N; i++) c[i] = sampler_sample(&s, logits);
    sampler_free(&s);
    cr_assert(memcmp(a, b, sizeof a) == 0, "same seed gave different tokens");
    cr_assert(memcmp(a, c, sizeof a) != 0, "different seeds gave the same 200 tokens");
}

Test(sampler, top_k_one_and_tiny_top_p_are_greedy) {
    float logits[5] = {0.1f, 0.3f, 3.0f, 0.2f, 2.9f};
    sampler s;
    coli_sampling_params p = s_params(5.0f, 1, 1.0f, 9);
    cr_assert_eq(sampler_init(&s, &p, 5), 0);
    for (int i = 0; i < 100; i++) cr_assert_eq(sampler_sample(&s, logits), 2);
    sampler_free(&s);
    p = s_params(5.0f, 0, 1e-6f, 9);
    cr_assert_eq(sampler_init(&s, &p, 5), 0);
    for (int i = 0; i < 100; i++) cr_assert_eq(sampler_sample(&s, logits), 2);
    sampler_free(&s);
}

Test(sampler, top_k_keeps_only_the_k_best) {
    float logits[8] = {1.0f, 5.0f, 0.0f, 4.0f, 4.5f, -3.0f, 0.5f, 2.0f};
    int seen[8] = {0};
    sampler s;
    coli_sampling_params p = s_params(10.0f, 3, 1.0f, 42);
    cr_assert_eq(sampler_init(&s, &p, 8), 0);
    for (int i = 0; i < 3000; i++) seen[sampler_sample(&s, logits)]++;
    sampler_free(&s);
    for (int i = 0; i < 8; i++) {
        int allowed = i == 1 || i == 3 || i == 4;
        if (allowed)
            cr_assert_gt(seen[i], 500, "id %d drawn %d times", i, seen[i]);
        else
            cr_assert_eq(seen[i], 0, "id %d outside top-3 drawn %d times", i, seen[i]);
    }
}

Test(sampler, top_p_cuts_the_tail) {
    /* probabilities at T=1: about 0.665, 0.245, 0.090 (+ tiny) */
    float logits[4] = {2.0f, 1.0f, 0.0f, -20.0f};
    int seen[4] = {0};
    sampler s;
    coli_sampling_params p = s_params(1.0f, 0, 0.8f, 5);
    cr_assert_eq(sampler_init(&s, &p, 4), 0);
    for (int i = 0; i < 4000; i++) seen[sampler_sample(&s, logits)]++;
    sampler_free(&s);
    cr_assert_eq(seen[2] + seen[3], 0, "top_p 0.8 must keep only the first two");
    /* renormalised over {0, 1}: 0.731 / 0.269 */
    cr_assert(fabs(seen[0] / 4000.0 - 0.731) < 0.03, "id 0 frequency %f", seen[0] / 4000.0);
}

Test(sampler, temperature_matches_softmax_frequencies) {
    float logits[2] = {0.0f, 0.0f};
    int ones = 0;
    sampler s;
    coli_sampling_params p = s_params(1.0f, 0, 1.0f, 77);
    cr_assert_eq(sampler_init(&s, &p, 2), 0);
    for (int i = 0; i < 10000; i++) ones += sampler_sample(&s, logits);
    sampler_free(&s);
    cr_assert(ones > 4700 && ones < 5300, "fair coin came up %d / 10000", ones);
}

Test(sampler, bad_params_are_refused) {
    sampler s;
    coli_sampling_params p = s_params(-1.0f, 0, 1.0f, 0);
    cr_assert_eq(sampler_init(&s, &p, 10), COLI_EINVAL);
    p = s_params(NAN, 0, 1.0f, 0);
    cr_assert_eq(sampler_init(&s, &p, 10), COLI_EINVAL);
    p = s_params(1.0f, -2, 1.0f, 0);
    cr_assert_eq(sampler_init(&s, &p, 10), COLI_EINVAL);
    p = s_params(1.0f, 0, 0.0f, 0);
    cr_assert_eq(sampler_init(&s, &p, 10), COLI_EINVAL);
    p = s_params(1.0f, 0, 1.5f, 0);
    cr_assert_eq(sampler_init(&s, &p, 10), COLI_EINVAL);
    cr_assert(strstr(coli_last_error(), "top_p") != NULL, "message: %s", coli_last_error());
    p = s_params(1.0f, 0, 1.0f, 0);
    p.n_predict = -1;
    cr_assert_eq(sampler_init(&s, &p, 10), COLI_EINVAL);
    cr_assert_eq(sampler_init(&s, NULL, 10), COLI_EINVAL);
}

Test(sampler, pcg32_reference_stream) {
    /* The first outputs of PCG32 for the stream used here differ per seed
     * and repeat exactly: a regression check of the generator itself. */
    sampler a, b;
    coli_sampling_params p = s_params(1.0f, 0, 1.0f, 42);
    cr_assert_eq(sampler_init(&a, &p, 2), 0);
    cr_assert_eq(sampler_init(&b, &p, 2), 0);
    uint32_t x0 = sampler_rand_u32(&a);
    cr_assert_eq(x0, sampler_rand_u32(&b));
    int distinct = 0;
    for (int i = 0; i < 64; i++) distinct += sampler_rand_u32(&a) != x0;
    cr_assert_gt(distinct, 60);
    sampler_free(&a);
    sampler_free(&b);
}

// ---------------------------------------------------------------------------
// penalties, min_p, the logit filter and logprobs (expected values by hand from
// llama.cpp's definitions, see coordinator/sampler.h)

typedef struct seen_logits {
    float l[8];
    int n, calls;
} seen_logits;

static void s_capture(void *user, float *logits, int n) {
    seen_logits *s = user;
    memcpy(s->l, logits, (size_t)n * sizeof *logits);
    s->n = n;
    s->calls++;
}

Test(sampler, penalties_follow_llama_cpp) {
    float logits[4] = {2.0f, -1.0f, 0.5f, 3.0f};
    seen_logits seen = {0};
    sampler s;
    coli_sampling_params p = s_params(0.0f, 0, 1.0f, 1);
    p.repeat_penalty = 1.5f;
    p.frequency_penalty = 0.25f;
    p.presence_penalty = 0.5f;
    p.repeat_last_n = 64;
    p.logit_filter = s_capture;
    p.logit_filter_user = &seen;
    cr_assert_eq(sampler_init(&s, &p, 4), 0);
    cr_assert_eq(sampler_accept(&s, 3), 0);
    cr_assert_eq(sampler_accept(&s, 3), 0);
    cr_assert_eq(sampler_accept(&s, 1), 0);
    int32_t id = sampler_sample(&s, logits);
    cr_assert_eq(seen.calls, 1);
    /* id 3 seen twice: 3 / 1.5 - 2 * 0.25 - 0.5; id 1 once: -1 * 1.5 - 0.25 - 0.5 */
    cr_assert_float_eq(seen.l[3], 1.0f, 1e-6);
    cr_assert_float_eq(seen.l[1], -2.25f, 1e-6);
    cr_assert_float_eq(seen.l[0], 2.0f, 1e-6);
    cr_assert_float_eq(seen.l[2], 0.5f, 1e-6);
    cr_assert_eq(id, 0, "greedy after penalties: id 0 (2.0) beats id 3 (1.0)");
    cr_assert_float_eq(logits[3], 3.0f, 0, "the caller's logits are not touched");
    sampler_free(&s);
    /* last_n = 2: after 3, 3, 1 the window holds 3 and 1 once each */
    p.repeat_last_n = 2;
    cr_assert_eq(sampler_init(&s, &p, 4), 0);
    sampler_accept(&s, 3);
    sampler_accept(&s, 3);
    sampler_accept(&s, 1);
    sampler_sample(&s, logits);
    cr_assert_float_eq(seen.l[3], 3.0f / 1.5f - 0.25f - 0.5f, 1e-6);
    sampler_free(&s);
    /* last_n = 0: penalties off */
    p.repeat_last_n = 0;
    cr_assert_eq(sampler_init(&s, &p, 4), 0);
    sampler_accept(&s, 3);
    cr_assert_eq(sampler_sample(&s, logits), 3);
    cr_assert_float_eq(seen.l[3], 3.0f, 0);
    sampler_free(&s);
    /* last_n = -1: the whole history, growing past its first allocation */
    p.repeat_last_n = -1;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.001f;
    cr_assert_eq(sampler_init(&s, &p, 4), 0);
    for (int i = 0; i < 1000; i++) cr_assert_eq(sampler_accept(&s, 3), 0);
    sampler_sample(&s, logits);
    cr_assert_float_eq(seen.l[3], 3.0f - 1000 * 0.001f, 1e-5);
    sampler_free(&s);
}

Test(sampler, min_p_drops_tokens_below_the_fraction_of_the_best) {
    /* relative probabilities at T=1: 1, 0.5, 0.09, 0.11; min_p 0.1 drops id 2 only */
    float logits[4] = {0.0f, logf(0.5f), logf(0.09f), logf(0.11f)};
    int seen[4] = {0};
    sampler s;
    coli_sampling_params p = s_params(1.0f, 0, 1.0f, 5);
    p.min_p = 0.1f;
    cr_assert_eq(sampler_init(&s, &p, 4), 0);
    for (int i = 0; i < 4000; i++) seen[sampler_sample(&s, logits)]++;
    sampler_free(&s);
    cr_assert_eq(seen[2], 0, "id 2 (p ratio 0.09 < 0.1) drawn %d times", seen[2]);
    cr_assert_gt(seen[3], 100);
    cr_assert_gt(seen[1], seen[3]);
    /* it is relative to the best before temperature: at T = 100 id 2 is still out */
    p.temperature = 100.0f;
    memset(seen, 0, sizeof seen);
    cr_assert_eq(sampler_init(&s, &p, 4), 0);
    for (int i = 0; i < 4000; i++) seen[sampler_sample(&s, logits)]++;
    sampler_free(&s);
    cr_assert_eq(seen[2], 0);
    cr_assert_gt(seen[3], 800);
    p.min_p = 1.5f;
    cr_assert_lt(sampler_init(&s, &p, 4), 0, "min_p > 1 refused");
}

static void s_forbid_0_and_3(void *user, float *l, int n) {
    (void)user;
    (void)n;
    l[0] = -INFINITY;
    l[3] = -INFINITY;
}

static void s_forbid_all(void *user, float *l, int n) {
    (void)user;
    for (int i = 0; i < n; i++) l[i] = -INFINITY;
}

Test(sampler, logit_filter_masks_tokens_and_can_end_generation) {
    float logits[4] = {5.0f, 1.0f, 0.5f, 4.0f};
    sampler s;
    coli_sampling_params p = s_params(0.0f, 0, 1.0f, 3);
    p.logit_filter = s_forbid_0_and_3;
    cr_assert_eq(sampler_init(&s, &p, 4), 0);
    cr_assert_eq(sampler_sample(&s, logits), 1);
    sampler_free(&s);
    p.temperature = 2.0f;
    p.top_p = 0.99f;
    cr_assert_eq(sampler_init(&s, &p, 4), 0);
    for (int i = 0; i < 500; i++) {
        int32_t id = sampler_sample(&s, logits);
        cr_assert(id == 1 || id == 2, "masked id %d drawn", id);
    }
    sampler_free(&s);
    p.logit_filter = s_forbid_all;
    cr_assert_eq(sampler_init(&s, &p, 4), 0);
    cr_assert_eq(sampler_sample(&s, logits), -1);
    sampler_free(&s);
    p.temperature = 0.0f;
    cr_assert_eq(sampler_init(&s, &p, 4), 0);
    cr_assert_eq(sampler_sample(&s, logits), -1);
    sampler_free(&s);
}

Test(sampler, logprobs_are_the_raw_log_softmax) {
    float logits[5] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
    double lse = log(exp(1.0) + exp(3.0) + exp(2.0) + exp(3.0) + exp(-1.0));
    sampler s;
    coli_sampling_params p = s_params(0.0f, 0, 1.0f, 3);
    p.logprobs = 1;
    p.top_logprobs = 3;
    p.repeat_penalty = 2.0f; /* penalties change the draw, not the reported logprobs */
    cr_assert_eq(sampler_init(&s, &p, 5), 0);
    sampler_accept(&s, 1);
    int32_t id = sampler_sample(&s, logits);
    cr_assert_eq(id, 3, "id 1 penalised to 1.5, so id 3 (3.0) wins");
    cr_assert_eq(s.chosen.id, 3);
    cr_assert_float_eq(s.chosen.logprob, 3.0 - lse, 1e-5);
    cr_assert_eq(s.n_top, 3);
    cr_assert_eq(s.top[0].id, 1, "ties: the lower id first");
    cr_assert_eq(s.top[1].id, 3);
    cr_assert_eq(s.top[2].id, 2);
    cr_assert_float_eq(s.top[2].logprob, 2.0 - lse, 1e-5);
    sampler_free(&s);
    p.top_logprobs = COLI_MAX_TOP_LOGPROBS + 1;
    cr_assert_lt(sampler_init(&s, &p, 5), 0);
}
