/*
 * sampler.h - pick the next token from a row of logits.
 *
 * First the logits are adjusted (on a copy), as llama.cpp defines it: for
 * each token seen c > 0 times among the last repeat_last_n accepted ones,
 * l = l > 0 ? l / repeat_penalty : l * repeat_penalty, then
 * l -= c * frequency_penalty + presence_penalty; then the logit_filter
 * may set -INFINITY on forbidden tokens (those never get drawn).
 * temperature 0: greedy, the argmax (ties: the lower id). Otherwise:
 * candidates = all ids with a finite logit, or the top_k best of them
 * (ties: lower id first); min_p drops those with logit < max + ln(min_p)
 * (p < min_p * p(best) before temperature); p = softmax(logit /
 * temperature) over them; top_p keeps the shortest prefix (best first)
 * whose mass reaches top_p; one draw from a seeded PCG32.
 * Same seed and same logits give the same token on every machine.
 * sampler_init allocates everything once; sampling allocates nothing
 * (accepting tokens with repeat_last_n = -1 grows the history).
 */
#ifndef COLI_COORD_SAMPLER_H
#define COLI_COORD_SAMPLER_H

#include <stdint.h>

#include "colibri.h"

typedef struct sampler_cand {
    float v; /* logit, then probability */
    int32_t id;
} sampler_cand;

typedef struct sampler {
    coli_sampling_params p;
    uint64_t rng_state, rng_inc; /* PCG32 */
    int n_vocab;
    sampler_cand *cand; /* (n_vocab) scratch */
    float *work;        /* (n_vocab) adjusted logits; NULL when nothing adjusts them */
    int32_t *hist;      /* ring of the last accepted tokens (penalties) */
    int hist_cap, hist_len, hist_head;
    int *counts; /* (n_vocab) occurrences in hist; NULL when no penalty is on */
    /* logprobs of the last sampled token (p.logprobs) */
    coli_logprob chosen, top[COLI_MAX_TOP_LOGPROBS];
    int n_top;
} sampler;

/* Check p (temperature >= 0 and finite, top_k >= 0, 0 < top_p <= 1,
 * n_predict >= 0, penalties finite, repeat_penalty >= 0, repeat_last_n >= -1,
 * 0 <= min_p <= 1, 0 <= top_logprobs <= COLI_MAX_TOP_LOGPROBS) and
 * allocate. Returns 0, COLI_EINVAL or COLI_ENOMEM. */
int sampler_init(sampler *s, const coli_sampling_params *p, int n_vocab);
void sampler_free(sampler *s);

/* Note a token of the sequence (prompt or generated) for the penalties.
 * 0, or COLI_ENOMEM (repeat_last_n = -1 growing its history). */
int sampler_accept(sampler *s, int32_t id);

/* The next token for logits (n_vocab floats, not modified), or -1 when
 * the logit_filter left no token allowed. With p.logprobs, also fills
 * s->chosen / s->top / s->n_top. */
int32_t sampler_sample(sampler *s, const float *logits);

/* Index of the largest of x[0..n), the lowest on ties. */
int32_t sampler_argmax(const float *x, int n);

/* The generator itself (exposed for tests): next 32 random bits. */
uint32_t sampler_rand_u32(sampler *s);

#endif
