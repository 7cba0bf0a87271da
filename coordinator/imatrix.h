/*
 * imatrix.h - llama.cpp's importance matrix: per weight matrix, the sum over
 * the tokens of each input column's squared activation, and how many token
 * rows went in (one count per expert for the 3-D expert tensors).
 *
 *  - imatrix_collect_*: gathered from the engine's own matmuls
 *    (core/kernels/matmul.h's observer) while `coli imatrix` runs the
 *    forward pass, with llama-imatrix's rules (imatrix_collect.c);
 *  - imatrix_save: the file llama-imatrix de3ff815 writes by default (GGUF:
 *    NAME.in_sum2 (n_in, n_mat) and NAME.counts (1, n_mat), F32, sorted by
 *    name; general.type "imatrix", imatrix.datasets, imatrix.chunk_count,
 *    imatrix.chunk_size) or its legacy .dat (--output-format dat);
 *  - imatrix_load: either form, told apart by the GGUF magic;
 *  - imatrix_weights: what llama-quantize hands the quantizer per tensor
 *    (sums / count per matrix; 1 where a matrix saw no token; the legacy
 *    form's values / ncall).
 */
#ifndef COLI_COORD_IMATRIX_H
#define COLI_COORD_IMATRIX_H

#include <stdint.h>

#include "core/gguf/gguf.h"
#include "core/kernels/matmul.h"

typedef struct imatrix_entry {
    char *name;      /* the weight, "blk.0.ffn_down_exps.weight" */
    int64_t n_in;    /* values per matrix (the weight's ne[0]) */
    int64_t n_mat;   /* matrices: experts of a 3-D tensor, else 1 */
    float *sums;     /* n_mat * n_in sums of x^2 (legacy: mean * ncall) */
    int64_t *counts; /* n_mat token rows (legacy: one entry, ncall) */
    int64_t n_counts;
} imatrix_entry;

typedef struct imatrix {
    imatrix_entry *e;
    int n, cap;
    int legacy; /* read from a .dat file */
    uint32_t chunk_count, chunk_size;
    char *dataset; /* the text file it was computed on ("" if unknown) */
} imatrix;

void imatrix_free(imatrix *im);
/* The entry called name, or NULL. */
const imatrix_entry *imatrix_find(const imatrix *im, const char *name);

/* A new zeroed entry of n_mat matrices (one count each), or NULL when out
 * of memory. Pointers to earlier entries may move. */
imatrix_entry *imatrix_add(imatrix *im, const char *name, int64_t n_in, int64_t n_mat);

/* Read path (GGUF or legacy .dat). Every failure is one line naming the
 * file and what is wrong. */
int imatrix_load(const char *path, imatrix *out);
/* Write im to path: GGUF, or the legacy .dat when legacy is 1. */
int imatrix_save(const imatrix *im, const char *path, int legacy);

/* The importance of the n_in * n_mat columns of tensor t (malloc'd into
 * *out; NULL when im has no entry for it). COLI_EINVAL when the entry's size
 * is not t's (an imatrix of another model): the message names the tensor. */
int imatrix_weights(const imatrix *im, const coli_tensor *t, float **out);

// ----------------------------------------------------------------------------
// collecting

struct coli_model;
/* The mapping a loaded model computes from (api.c); NULL for vocab-only. */
const gguf_file *coli_model_gguf(const struct coli_model *m);

typedef struct imatrix_collector imatrix_collector;

/* A collector for the weights of f (the mapping the forward pass computes
 * from: weights are recognised by their data pointers). */
int imatrix_collect_new(const gguf_file *f, imatrix_collector **out);
void imatrix_collect_free(imatrix_collector **c);
/* Install / remove the collector as the matmul observer. */
void imatrix_collect_start(imatrix_collector *c);
void imatrix_collect_stop(void);
/* The matmul observer itself (exposed for tests). */
void imatrix_collect_op(void *collector, const coli_matmul_op *op);
/* The first error seen (a non-finite activation), 0 if none. */
int imatrix_collect_status(const imatrix_collector *c);
/* The data so far; chunk_size and dataset set by the caller. Valid until
 * the collector is freed. */
imatrix *imatrix_collect_data(imatrix_collector *c);

#endif
