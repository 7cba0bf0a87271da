/* sampler.c - temperature / top-k / top-p sampling; see sampler.h. */
#include "coordinator/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

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

/* The first index of the largest value, as the plain loop `if (x[i] >
 * x[best]) best = i` gives it (NaNs never win; a NaN x[0] stays: no value
 * compares greater), in two passes: the maximum over 8 independent lanes
 * (one dependent compare per element was ~1.5% of a batched decode step
 * at 8 rows over a 32k vocabulary), then the first index equal to it. */
int32_t sampler_argmax(const float *x, int n) {
    if (n <= 0) return 0;
    float lane[8];
    for (int l = 0; l < 8; l++) lane[l] = x[0];
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
    for (; i < n; i++) lane[0] = x[i] > lane[0] ? x[i] : lane[0];
    float max = lane[0];
    for (int l = 1; l < 8; l++) max = lane[l] > max ? lane[l] : max;
    for (i = 0; i < n; i++)
        if (x[i] == max) return i;
    return 0; /* max is a NaN x[0] */
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
        sampler_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Keep the k best of c[0..n) in c[0..k), sorted best first. */
static void s_top_k(sampler_cand *c, int n, int k) {
    for (int i = k / 2 - 1; i >= 0; i--) s_sift_down(c, k, i);
    for (int i = k; i < n; i++)
        if (s_better(&c[i], &c[0])) {
            c[0] = c[i];
            s_sift_down(c, k, 0);
        }
    qsort(c, (size_t)k, sizeof *c, s_cmp);
}

// ---------------------------------------------------------------------------
// setup

static int s_check(const coli_sampling_params *p, int n_vocab) {
    if (!p) return coli_fail(COLI_EINVAL, "sampling: params are NULL");
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return coli_fail(COLI_EINVAL, "sampling: temperature %g: expected a finite value >= 0", (double)p->temperature);
    if (p->top_k < 0) return coli_fail(COLI_EINVAL, "sampling: top_k %d: expected >= 0", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return coli_fail(COLI_EINVAL, "sampling: top_p %g: expected 0 < top_p <= 1", (double)p->top_p);
    if (p->n_predict < 0) return coli_fail(COLI_EINVAL, "sampling: n_predict %d: expected >= 0", p->n_predict);
    if (!(p->repeat_penalty >= 0.0f) || !isfinite(p->repeat_penalty))
        return coli_fail(COLI_EINVAL, "sampling: repeat_penalty %g: expected a finite value >= 0",
                         (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return coli_fail(COLI_EINVAL, "sampling: presence/frequency penalty %g/%g: expected finite values",
                         (double)p->presence_penalty, (double)p->frequency_penalty);
    if (p->repeat_last_n < -1)
        return coli_fail(COLI_EINVAL, "sampling: repeat_last_n %d: expected >= -1", p->repeat_last_n);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return coli_fail(COLI_EINVAL, "sampling: min_p %g: expected 0 <= min_p <= 1", (double)p->min_p);
    if (p->top_logprobs < 0 || p->top_logprobs > COLI_MAX_TOP_LOGPROBS)
        return coli_fail(COLI_EINVAL, "sampling: top_logprobs %d: expected 0 to %d", p->top_logprobs,
                         COLI_MAX_TOP_LOGPROBS);
    if (n_vocab <= 0) return coli_fail(COLI_EINVAL, "sampling: n_vocab %d", n_vocab);
    return 0;
}

/* Penalties change anything: llama.cpp's condition for its penalties stage. */
static int s_penalties_on(const coli_sampling_params *p) {
    int repeat = p->repeat_penalty != 0.0f && p->repeat_penalty != 1.0f;
    return p->repeat_last_n != 0 && (repeat || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
}

int sampler_init(sampler *s, const coli_sampling_params *p, int n_vocab) {
    memset(s, 0, sizeof *s);
    int rc = s_check(p, n_vocab);
    if (rc) return rc;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    int ok = s->cand != NULL;
    if (ok && s_penalties_on(p)) {
        s->hist_cap = p->repeat_last_n > 0 ? p->repeat_last_n : 256;
        s->hist = malloc((size_t)s->hist_cap * sizeof *s->hist);
        s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
        ok = s->hist && s->counts;
    }
    if (ok && (s->counts || p->logit_filter)) ok = (s->work = malloc((size_t)n_vocab * sizeof *s->work)) != NULL;
    if (!ok) {
        sampler_free(s);
        return coli_fail(COLI_ENOMEM, "sampling: out of memory for %d candidates", n_vocab);
    }
    s_seed(s, p->seed);
    return 0;
}

void sampler_free(sampler *s) {
    free(s->cand);
    free(s->work);
    free(s->hist);
    free(s->counts);
    s->cand = NULL;
    s->work = NULL;
    s->hist = NULL;
    s->counts = NULL;
}

int sampler_accept(sampler *s, int32_t id) {
    if (!s->counts || id < 0 || id >= s->n_vocab) return 0;
    if (s->hist_len == s->hist_cap) {
        if (s->p.repeat_last_n > 0) { /* the ring is full: the oldest leaves */
            s->counts[s->hist[s->hist_head]]--;
            s->hist[s->hist_head] = id;
            s->hist_head = (s->hist_head + 1) % s->hist_cap;
            s->counts[id]++;
            return 0;
        }
        int32_t *h = realloc(s->hist, (size_t)s->hist_cap * 2 * sizeof *h); /* -1: every token */
        if (!h) return coli_fail(COLI_ENOMEM, "sampling: out of memory for %d tokens of history", s->hist_cap * 2);
        s->hist = h;
        s->hist_cap *= 2;
    }
    s->hist[(s->hist_head + s->hist_len++) % s->hist_cap] = id;
    s->counts[id]++;
    return 0;
}

// ---------------------------------------------------------------------------
// sampling

/* llama.cpp's penalties on l (n_vocab logits), from the history counts. */
static void s_penalize(const sampler *s, float *l) {
    const coli_sampling_params *p = &s->p;
    float rp = p->repeat_penalty == 0.0f ? 1.0f : p->repeat_penalty;
    for (int i = 0; i < s->n_vocab; i++) {
        int c = s->counts[i];
        if (c == 0) continue;
        l[i] = l[i] <= 0.0f ? l[i] * rp : l[i] / rp;
        l[i] -= (float)c * p->frequency_penalty + p->presence_penalty;
    }
}

/* Log-probabilities of the raw logits: the chosen one and the best n. */
static void s_logprobs(sampler *s, const float *logits, int32_t chosen) {
    int n = s->n_vocab, k = s->p.top_logprobs;
    float max = logits[sampler_argmax(logits, n)];
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - max);
    float lse = max + (float)log(sum);
    s->n_top = 0;
    for (int i = 0; i < n && k > 0; i++) { /* insertion into the sorted best k */
        int at = s->n_top;
        while (at > 0 && logits[i] > s->top[at - 1].logprob) at--;
        if (at >= k) continue;
        int last = s->n_top < k ? s->n_top++ : k - 1;
        memmove(&s->top[at + 1], &s->top[at], (size_t)(last - at) * sizeof s->top[0]);
        s->top[at] = (coli_logprob){i, logits[i]};
    }
    for (int i = 0; i < s->n_top; i++) s->top[i].logprob -= lse;
    s->chosen = (coli_logprob){chosen, chosen >= 0 ? logits[chosen] - lse : -INFINITY};
}

/* The candidates: ids with a finite logit, top_k, min_p, sorted if top_p needs it. */
static int s_candidates(sampler *s, const float *l) {
    const coli_sampling_params *p = &s->p;
    sampler_cand *c = s->cand;
    int n = 0;
    for (int i = 0; i < s->n_vocab; i++)
        if (isfinite(l[i])) {
            c[n].v = l[i];
            c[n].id = i;
            n++;
        }
    if (n == 0) return 0;
    int sorted = 0;
    if (p->top_k > 0 && p->top_k < n) {
        s_top_k(c, n, p->top_k);
        n = p->top_k;
        sorted = 1;
    }
    if (p->min_p > 0.0f) {
        float max = c[0].v;
        for (int i = 1; i < n; i++)
            if (c[i].v > max) max = c[i].v;
        float floor_logit = max + logf(p->min_p);
        int kept = 0;
        for (int i = 0; i < n; i++)
            if (c[i].v >= floor_logit) c[kept++] = c[i];
        n = kept;
    }
    if (!sorted && p->top_p < 1.0f) qsort(c, (size_t)n, sizeof *c, s_cmp);
    return n;
}

/* One draw from the (adjusted) logits l; -1 if none is allowed. */
static int32_t s_draw(sampler *s, const float *l) {
    const coli_sampling_params *p = &s->p;
    if (p->temperature == 0.0f) {
        int32_t best = sampler_argmax(l, s->n_vocab);
        return isfinite(l[best]) ? best : -1;
    }
    sampler_cand *c = s->cand;
    int n = s_candidates(s, l);
    if (n == 0) return -1;
    // p = softmax(logit / T) over the candidates
    float max = c[0].v;
    for (int i = 1; i < n; i++)
        if (c[i].v > max) max = c[i].v;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        c[i].v = expf((c[i].v - max) / p->temperature);
        sum += c[i].v;
    }
    // top-p: the shortest best-first prefix holding top_p of the mass
    double keep = sum;
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        for (int i = 0; i < n; i++) {
            cum += c[i].v;
            if (cum >= p->top_p * sum) {
                n = i + 1;
                break;
            }
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

int32_t sampler_sample(sampler *s, const float *logits) {
    const float *l = logits;
    if (s->work) {
        memcpy(s->work, logits, (size_t)s->n_vocab * sizeof *s->work);
        if (s->counts) s_penalize(s, s->work);
        if (s->p.logit_filter) s->p.logit_filter(s->p.logit_filter_user, s->work, s->n_vocab);
        l = s->work;
    }
    int32_t id = s_draw(s, l);
    if (s->p.logprobs) s_logprobs(s, logits, id);
    return id;
}
