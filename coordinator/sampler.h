/*
 * sampler.h - pick the next token from a row of logits.
 *
 * temperature 0: greedy, the argmax (ties: the lower id). Otherwise:
 * candidates = all ids, or the top_k best (ties: lower id first); p =
 * softmax(logit / temperature) over them; top_p keeps the shortest prefix
 * (best first) whose mass reaches top_p; one draw from a seeded PCG32.
 * Same seed and same logits give the same token on every machine.
 * sampler_init allocates everything once; sampling allocates nothing.
 */
#ifndef COLI_COORD_SAMPLER_H
#define COLI_COORD_SAMPLER_H

#include <stdint.h>

#include "colibri.h"

typedef struct sampler_cand {
    float v;      /* logit, then probability */
    int32_t id;
} sampler_cand;

typedef struct sampler {
    coli_sampling_params p;
    uint64_t rng_state, rng_inc; /* PCG32 */
    int n_vocab;
    sampler_cand *cand;          /* (n_vocab) scratch */
} sampler;

/* Check p (temperature >= 0 and finite, top_k >= 0, 0 < top_p <= 1,
 * n_predict >= 0) and allocate. Returns 0, COLI_EINVAL or COLI_ENOMEM. */
int  sampler_init(sampler *s, const coli_sampling_params *p, int n_vocab);
void sampler_free(sampler *s);

/* The next token for logits (n_vocab floats). */
int32_t sampler_sample(sampler *s, const float *logits);

/* Index of the largest of x[0..n), the lowest on ties. */
int32_t sampler_argmax(const float *x, int n);

/* The generator itself (exposed for tests): next 32 random bits. */
uint32_t sampler_rand_u32(sampler *s);

#endif
