/*
 * expert_predict.c - the next layer's likely experts (expert_predict.h).
 */
#include "coordinator/sched/expert_predict.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/gguf/gguf.h"

void expert_predictor_free(expert_predictor *p) {
    free(p->logits);
    coli_scratch_free(&p->scratch);
    p->logits = NULL;
    p->cap_logits = 0;
}

/* Layer's router logits for x (n_tok rows) into p->logits; 0 or an error code. */
static int s_router(expert_predictor *p, int layer, const float *x, int64_t n_tok) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", layer);
    const coli_tensor *t = p->gguf ? gguf_find_tensor(p->gguf, name) : NULL;
    if (!t || t->ne[0] != p->n_embd || t->ne[1] != p->n_expert) return COLI_EINVAL;
    size_t need = (size_t)n_tok * (size_t)p->n_expert;
    if (need > p->cap_logits) {
        float *l = realloc(p->logits, need * sizeof *l);
        if (!l) return COLI_ENOMEM;
        p->logits = l;
        p->cap_logits = need;
    }
    return coli_matmul(NULL, &p->scratch, t->data, t->type, p->n_embd, p->n_expert, x, n_tok, p->logits);
}

int expert_predict(expert_predictor *p, int layer, const float *x, int64_t n_tok, int64_t *cand) {
    const int X = p->n_expert, K = p->k > 0 ? p->k : 1;
    int votes[1024] = {0};
    if (X > 1024 || s_router(p, layer, x, n_tok) != 0) return 0;
    for (int64_t t = 0; t < n_tok; t++) {
        const float *lg = p->logits + (size_t)t * (size_t)X;
        unsigned char taken[1024] = {0};
        for (int j = 0; j < K && j < X; j++) {
            int best = -1;
            for (int e = 0; e < X; e++)
                if (!taken[e] && (best < 0 || lg[e] > lg[best])) best = e;
            taken[best] = 1;
            votes[best]++;
        }
    }
    int n = 0;
    for (int e = 0; e < X; e++)
        if (votes[e]) cand[n++] = (int64_t)layer * X + e;
    for (int i = 1; i < n; i++) { /* most votes first, then expert order */
        int64_t v = cand[i];
        int j = i;
        for (; j > 0 && votes[cand[j - 1] % X] < votes[v % X]; j--) cand[j] = cand[j - 1];
        cand[j] = v;
    }
    return n;
}
