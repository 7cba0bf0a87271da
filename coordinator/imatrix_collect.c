/*
 * imatrix_collect.c - the importance matrix gathered from the engine's own
 * matmuls (see imatrix.h). Installed as core/kernels/matmul.h's observer, it
 * sees every y = W x of the forward pass with W a pointer into the model's
 * mapping; the weight is the tensor whose data holds W, the matrix the
 * expert slice W starts (3-D tensors).
 *
 * llama-imatrix's rules (tools/imatrix/imatrix.cpp collect_imatrix):
 *  - only weights named "blk.*" (not output.weight: it has --process-output
 *    off by default, and token_embd is no matmul);
 *  - a 2-D weight (MUL_MAT) counts only in batches of at least 16 tokens;
 *    expert tensors (MUL_MAT_ID) count for every routed row, per expert;
 *  - sums of x^2 are kept in F32, counts are token rows;
 *  - a non-finite sum is an error.
 * The routed experts are seen wherever they run in this process (the
 * in-process executor); experts computed by worker processes are not.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "coordinator/imatrix.h"
#include "core/error.h"

/* Below this many tokens llama-imatrix skips a dense matmul. */
#define IMATRIX_MIN_DENSE_ROWS 16

typedef struct weight_range {
    const uint8_t *lo, *hi;
    const coli_tensor *t;
    size_t mat_bytes; /* one matrix (expert) of t */
    int entry;        /* index into im.e, -1 until first seen */
} weight_range;

struct imatrix_collector {
    imatrix im;
    pthread_mutex_t mu;
    weight_range *r;
    int n_r;
    int status;
};

static int s_by_lo(const void *a, const void *b) {
    const uint8_t *x = ((const weight_range *)a)->lo, *y = ((const weight_range *)b)->lo;
    return x < y ? -1 : x > y;
}

int imatrix_collect_new(const gguf_file *f, imatrix_collector **out) {
    imatrix_collector *c = calloc(1, sizeof *c);
    const int64_t n = gguf_n_tensors(f);
    if (c) c->r = calloc((size_t)(n ? n : 1), sizeof *c->r);
    if (!c || !c->r) {
        free(c);
        return coli_fail(COLI_ENOMEM, "imatrix: out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        if (strncmp(t->name, "blk.", 4) != 0 || t->n_dims < 2 || t->nbytes == 0) continue;
        weight_range *w = &c->r[c->n_r++];
        w->lo = t->data;
        w->hi = w->lo + t->nbytes;
        w->t = t;
        w->mat_bytes = coli_row_bytes(t->type, t->ne[0]) * (size_t)t->ne[1];
        w->entry = -1;
    }
    qsort(c->r, (size_t)c->n_r, sizeof *c->r, s_by_lo);
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return 0;
}

void imatrix_collect_free(imatrix_collector **c) {
    if (!*c) return;
    pthread_mutex_destroy(&(*c)->mu);
    imatrix_free(&(*c)->im);
    free((*c)->r);
    free(*c);
    *c = NULL;
}

void imatrix_collect_start(imatrix_collector *c) { coli_matmul_set_observer(imatrix_collect_op, c); }

void imatrix_collect_stop(void) { coli_matmul_set_observer(NULL, NULL); }

int imatrix_collect_status(const imatrix_collector *c) { return c->status; }

imatrix *imatrix_collect_data(imatrix_collector *c) { return &c->im; }

/* The weight whose data holds p, or NULL. */
static weight_range *s_find(imatrix_collector *c, const void *p) {
    const uint8_t *q = p;
    int lo = 0, hi = c->n_r - 1, best = -1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        if (c->r[mid].lo <= q)
            best = mid, lo = mid + 1;
        else
            hi = mid - 1;
    }
    return best >= 0 && q < c->r[best].hi ? &c->r[best] : NULL;
}

/* Add the op's rows to matrix mat of w's entry (lock held). */
static void s_accumulate(imatrix_collector *c, weight_range *w, int64_t mat, const coli_matmul_op *op) {
    const coli_tensor *t = w->t;
    if (w->entry < 0) {
        if (!imatrix_add(&c->im, t->name, t->ne[0], t->n_dims >= 3 ? t->ne[2] : 1)) {
            c->status = coli_fail(COLI_ENOMEM, "imatrix: out of memory");
            return;
        }
        w->entry = c->im.n - 1;
    }
    imatrix_entry *e = &c->im.e[w->entry];
    float *acc = e->sums + mat * e->n_in;
    for (int64_t r = 0; r < op->n_tok; r++) {
        const float *x = op->x + r * op->n_in;
        for (int64_t j = 0; j < e->n_in; j++) acc[j] += x[j] * x[j];
    }
    e->counts[mat] += op->n_tok;
    for (int64_t j = 0; j < e->n_in; j++)
        if (!isfinite(acc[j])) {
            c->status = coli_fail(COLI_EFORMAT, "imatrix: non-finite activations into '%s'", t->name);
            return;
        }
}

void imatrix_collect_op(void *collector, const coli_matmul_op *op) {
    imatrix_collector *c = collector;
    weight_range *w = s_find(c, op->W);
    if (!w || op->n_tok <= 0 || op->n_in != w->t->ne[0]) return;
    const int experts = w->t->n_dims >= 3 && w->t->ne[2] > 1;
    if (!experts && op->n_tok < IMATRIX_MIN_DENSE_ROWS) return;
    const int64_t mat = (int64_t)((size_t)((const uint8_t *)op->W - w->lo) / w->mat_bytes);
    pthread_mutex_lock(&c->mu);
    if (c->status == 0) s_accumulate(c, w, mat, op);
    pthread_mutex_unlock(&c->mu);
}
