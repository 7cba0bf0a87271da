/* sampler.c - temperature / top-k / top-p sampling; see sampler.h. */
#include "coordinator/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

// ---------------------------------------------------------------------------
// PCG32 (O'Neill, pcg-random.org): small, fast, the same on every platform

uint32_t sampler_rand_u32(sampler *s) {
    uint64_t old = s->rng_state;
    s->rng_state = old * 6364136223846793005ULL + s->rng_inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
}

static void s_seed(sampler *s, uint64_t seed) {
    s->rng_state = 0;
    s->rng_inc = (0xda3e39cb94b95bdbULL << 1u) | 1u;
    sampler_rand_u32(s);
    s->rng_state += seed;
    sampler_rand_u32(s);
}

/* Uniform in [0, 1) with 53 random bits. */
static double s_uniform(sampler *s) {
    uint64_t hi = sampler_rand_u32(s) >> 5, lo = sampler_rand_u32(s) >> 6; /* 27 + 26 bits */
    return (double)(hi * 67108864.0 + lo) / 9007199254740992.0;
}

// ---------------------------------------------------------------------------
// candidates

int32_t sampler_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

/* a ranks before b: larger value, or equal value and lower id. */
static int s_better(const sampler_cand *a, const sampler_cand *b) {
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

static int s_cmp(const void *pa, const void *pb) {
    const sampler_cand *a = pa, *b = pb;
    return s_better(a, b) ? -1 : s_better(b, a) ? 1 : 0;
}

/* Min-heap by rank (root = worst kept) for top-k selection in O(n log k). */
static void s_sift_down(sampler_cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && s_better(&h[w], &h[l])) w = l;
        if (r < n && s_better(&h[w], &h[r])) w = r;
        if (w == i) return;
        sampler_cand t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

/* Keep the k best of c[0..n) in c[0..k), sorted best first. */
static void s_top_k(sampler_cand *c, int n, int k) {
    for (int i = k / 2 - 1; i >= 0; i--) s_sift_down(c, k, i);
    for (int i = k; i < n; i++)
        if (s_better(&c[i], &c[0])) { c[0] = c[i]; s_sift_down(c, k, 0); }
    qsort(c, (size_t)k, sizeof *c, s_cmp);
}

// ---------------------------------------------------------------------------
// sampling

int sampler_init(sampler *s, const coli_sampling_params *p, int n_vocab) {
    memset(s, 0, sizeof *s);
    if (!p) return coli_fail(COLI_EINVAL, "sampling: params are NULL");
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return coli_fail(COLI_EINVAL, "sampling: temperature %g: expected a finite value >= 0", (double)p->temperature);
    if (p->top_k < 0) return coli_fail(COLI_EINVAL, "sampling: top_k %d: expected >= 0", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return coli_fail(COLI_EINVAL, "sampling: top_p %g: expected 0 < top_p <= 1", (double)p->top_p);
    if (p->n_predict < 0) return coli_fail(COLI_EINVAL, "sampling: n_predict %d: expected >= 0", p->n_predict);
    if (n_vocab <= 0) return coli_fail(COLI_EINVAL, "sampling: n_vocab %d", n_vocab);
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    if (!s->cand) return coli_fail(COLI_ENOMEM, "sampling: out of memory for %d candidates", n_vocab);
    s_seed(s, p->seed);
    return 0;
}

void sampler_free(sampler *s) {
    free(s->cand);
    s->cand = NULL;
}

int32_t sampler_sample(sampler *s, const float *logits) {
    const coli_sampling_params *p = &s->p;
    if (p->temperature == 0.0f) return sampler_argmax(logits, s->n_vocab);
    sampler_cand *c = s->cand;
    int n = s->n_vocab;
    for (int i = 0; i < n; i++) { c[i].v = logits[i]; c[i].id = i; }
    if (p->top_k > 0 && p->top_k < n) { s_top_k(c, n, p->top_k); n = p->top_k; }
    else if (p->top_p < 1.0f) qsort(c, (size_t)n, sizeof *c, s_cmp);
    // p = softmax(logit / T) over the candidates
    float max = c[0].v;
    for (int i = 1; i < n; i++) if (c[i].v > max) max = c[i].v;
    double sum = 0.0;
    for (int i = 0; i < n; i++) { c[i].v = expf((c[i].v - max) / p->temperature); sum += c[i].v; }
    // top-p: the shortest best-first prefix holding top_p of the mass
    double keep = sum;
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        for (int i = 0; i < n; i++) {
            cum += c[i].v;
            if (cum >= p->top_p * sum) { n = i + 1; break; }
        }
        keep = cum;
    }
    // one draw
    double r = s_uniform(s) * keep, acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += c[i].v;
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id; /* r rounded up to the total */
}
