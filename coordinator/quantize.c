/*
 * quantize.c - coli_quantize_file: a GGUF copy with its weights converted
 * to a llama.cpp preset ("Q4_K_M": per-tensor types as llama-quantize picks
 * them, coordinator/quantize_mix.c) or, pure, every weight in one type, laid
 * out exactly as llama-quantize writes it; with our row quantizers
 * (core/quant/quantize_*.c) the files are byte-identical to llama.cpp's (checked
 * against the shipped files).
 *
 * What llama-quantize does, and so we do:
 *  - every metadata key is copied in order; general.quantization_version = 2
 *    and general.file_type are then set, which moves them to the end;
 *  - tensors are written non-layer first, then by layer number, each group
 *    sorted by name (its weight_name_comparer: output.weight,
 *    output_norm.weight, token_embd.weight, blk.0.attn_k.weight, ...);
 *  - a tensor is converted when its name ends in ".weight", it has 2 or 3
 *    dims and it is neither a norm nor a router (ffn_gate_inp*); the rest
 *    keep their type and bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "core/file_io.h"
#include "core/quant/quant.h"
#include "coordinator/imatrix.h"
#include "coordinator/quantize_mix.h"
#include "core/tensor.h"
#include "core/threadpool.h"

static int s_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int s_converted(const coli_tensor *t) {
    return s_ends_with(t->name, ".weight") && (t->n_dims == 2 || t->n_dims == 3) && t->type != COLI_I32 &&
           !s_ends_with(t->name, "_norm.weight") && !strstr(t->name, "ffn_gate_inp");
}

/* "blk.N." -> N; any other name -> -1 (sorts first). */
static long s_layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long n = strtol(name + 4, &end, 10);
    return end != name + 4 && *end == '.' ? n : -1;
}

static int s_tensor_order(const void *pa, const void *pb) {
    const coli_tensor *a = *(const coli_tensor *const *)pa, *b = *(const coli_tensor *const *)pb;
    long la = s_layer_of(a->name), lb = s_layer_of(b->name);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* One tensor's conversion, split by rows over the pool's threads: rows are
 * independent, so the bytes do not depend on the thread count. */
typedef struct convert_job {
    const coli_tensor *t;
    coli_dtype type;
    int64_t n_in, rows;
    size_t src_row, dst_row;
    char *dst;
    float *tmp;       /* n_in floats per thread */
    const float *qw;  /* importance of the n_in columns per matrix (expert), or NULL */
    int64_t mat_rows; /* rows per matrix: qw moves on by n_in every mat_rows rows */
} convert_job;

static void s_convert_rows(void *arg, int ith, int nth) {
    const convert_job *j = arg;
    float *tmp = j->tmp + (size_t)ith * (size_t)j->n_in;
    for (int64_t r = ith; r < j->rows; r += nth) {
        coli_dequantize_row(j->t->type, (const char *)j->t->data + (size_t)r * j->src_row, tmp, j->n_in);
        const float *qw = j->qw ? j->qw + (r / j->mat_rows) * j->n_in : NULL;
        coli_quantize_row_imatrix(j->type, tmp, j->dst + (size_t)r * j->dst_row, j->n_in, qw);
    }
}

/* 1 for the types llama.cpp quantizes only with an importance matrix (the
 * IQ grid types but IQ3_S: de3ff815's tensor_requires_imatrix) */
static int s_needs_imatrix(coli_dtype t) {
    switch (t) {
    case COLI_IQ2_XXS:
    case COLI_IQ3_XXS:
    case COLI_IQ2_XS:
    case COLI_IQ2_S:
    case COLI_IQ1_S:
    case COLI_IQ1_M: return 1;
    default: return 0;
    }
}

/* The importance of t's columns (*qw malloc'd, NULL for none), checked as
 * llama-quantize does: sizes must match; the low-bit types need an entry
 * except for token_embd / output (which it quantizes without). */
static int s_tensor_imatrix(const coli_tensor *t, coli_dtype type, const imatrix *im, float **qw) {
    *qw = NULL;
    if (!im) return 0;
    int rc = imatrix_weights(im, t, qw);
    if (rc < 0) return rc;
    if (!*qw && s_needs_imatrix(type) && strcmp(t->name, "token_embd.weight") != 0 &&
        strcmp(t->name, "output.weight") != 0)
        return coli_fail(COLI_EINVAL, "tensor '%s': the imatrix has no entry for it, and %s needs one", t->name,
                         coli_dtype_name(type));
    return 0;
}

/* New bytes of t in type: row by row through F32. *out is malloc'd. */
static int s_convert(const coli_tensor *t, coli_dtype type, const imatrix *im, coli_pool *pool, void **out,
                     size_t *nbytes) {
    const int64_t n_in = t->ne[0], rows = coli_tensor_nelems(t) / n_in;
    if (n_in % coli_dtype_block_elems(type) != 0)
        return coli_fail(COLI_EUNSUPPORTED, "tensor '%s': row length %lld is not a multiple of %lld, cannot be %s",
                         t->name, (long long)n_in, (long long)coli_dtype_block_elems(type), coli_dtype_name(type));
    const int nth = pool ? coli_pool_size(pool) : 1;
    float *qw;
    int rc = s_tensor_imatrix(t, type, im, &qw);
    if (rc < 0) return rc;
    convert_job j = {t,    type, n_in, rows,    coli_row_bytes(t->type, n_in), coli_row_bytes(type, n_in),
                     NULL, NULL, qw,   t->ne[1]};
    *nbytes = j.dst_row * (size_t)rows;
    j.dst = malloc(*nbytes);
    j.tmp = malloc((size_t)nth * (size_t)n_in * sizeof(float));
    if (!j.dst || !j.tmp) {
        free(j.dst);
        free(j.tmp);
        free(qw);
        return coli_fail(COLI_ENOMEM, "tensor '%s': out of memory for %zu bytes", t->name, *nbytes);
    }
    coli_pool_run(pool, s_convert_rows, &j);
    free(j.tmp);
    free(qw);
    *out = j.dst;
    return 0;
}

/* Metadata: every key in order, then the two llama-quantize sets last
 * (general.file_type is the preset's llama_ftype). */
static int s_copy_metadata(gguf_writer *w, const gguf_file *in, const quant_preset *preset) {
    int rc;
    for (int64_t i = 0; i < gguf_n_kv(in); i++)
        if ((rc = gguf_writer_copy_kv(w, in, i)) < 0) return rc;
    if ((rc = gguf_writer_set_u32(w, "general.quantization_version", 2)) < 0) return rc;
    return gguf_writer_set_u32(w, "general.file_type", preset->ftype);
}

/* What llama-quantize records of an importance matrix (its kv overrides):
 * the file, the first dataset, the entry count, the chunk count. */
static int s_imatrix_metadata(gguf_writer *w, const char *path, const imatrix *im) {
    int rc = gguf_writer_set_str(w, "quantize.imatrix.file", path);
    if (rc == 0 && im->dataset && im->dataset[0]) rc = gguf_writer_set_str(w, "quantize.imatrix.dataset", im->dataset);
    if (rc == 0) rc = gguf_writer_set_u32(w, "quantize.imatrix.entries_count", (uint32_t)im->n);
    if (rc == 0 && im->chunk_count > 0) rc = gguf_writer_set_u32(w, "quantize.imatrix.chunks_count", im->chunk_count);
    return rc;
}

/* Tensors in llama-quantize order, each converted weight in the type the
 * mix decides; converted data goes to bufs[i]. params->progress hears of each. */
static int s_add_tensors(gguf_writer *w, const gguf_file *in, quant_mix *mix, const imatrix *im, coli_pool *pool,
                         const coli_quantize_params *params, const coli_tensor **order, void **bufs) {
    const int64_t n = gguf_n_tensors(in);
    uint64_t total = 0, done = 0;
    int rc;
    for (int64_t i = 0; i < n; i++) order[i] = gguf_tensor(in, i), total += order[i]->nbytes;
    qsort(order, (size_t)n, sizeof *order, s_tensor_order);
    for (int64_t i = 0; i < n; i++) {
        const coli_tensor *t = order[i];
        const void *data = t->data;
        size_t nbytes = t->nbytes;
        coli_dtype out_type = t->type, type = t->type;
        if (s_converted(t) && (rc = quant_mix_type(mix, t, &type)) < 0) return rc;
        if (type != t->type) {
            if ((rc = s_convert(t, type, im, pool, &bufs[i], &nbytes)) < 0) return rc;
            data = bufs[i];
            out_type = type;
        }
        if ((rc = gguf_writer_add_tensor(w, t->name, out_type, t->n_dims, t->ne, data, nbytes)) < 0) return rc;
        done += t->nbytes;
        if (params && params->progress) params->progress(params->progress_user, i + 1, n, done, total);
    }
    return 0;
}

/* *out = the block type called name, or -1 when name is NULL. Returns 0, or
 * COLI_EINVAL when name is not a weight type, COLI_EUNSUPPORTED when it
 * needs an importance matrix. */
static int s_override(const char *name, const char *what, int has_imatrix, int *out) {
    coli_dtype t;
    *out = -1;
    if (!name) return 0;
    if (coli_dtype_from_name(name, &t) != 0 || t == COLI_Q8_1 || t == COLI_Q8_K)
        return coli_fail(COLI_EINVAL,
                         "quantize: %s '%s' is not a weight type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
                         "Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ1_0, TQ2_0, MXFP4, "
                         "IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M)",
                         what, name);
    if (s_needs_imatrix(t) && !has_imatrix)
        return coli_fail(COLI_EUNSUPPORTED, "quantize: %s '%s' needs an importance matrix (--imatrix FILE)", what,
                         name);
    *out = (int)t;
    return 0;
}

/* The overrides, the importance matrix (loaded into im when given) and the
 * preset's need of one. */
static int s_check_params(const quant_preset *preset, const coli_quantize_params *params, imatrix *im, int *output_type,
                          int *token_embd_type) {
    const char *path = params ? params->imatrix : NULL;
    int rc = s_override(params ? params->output_type : NULL, "output type", path != NULL, output_type);
    if (rc == 0)
        rc = s_override(params ? params->token_embd_type : NULL, "token embedding type", path != NULL, token_embd_type);
    if (rc == 0 && !path && s_needs_imatrix(preset->base))
        rc =
            coli_fail(COLI_EUNSUPPORTED,
                      "quantize: %s needs an importance matrix (--imatrix FILE; coli imatrix makes one)", preset->name);
    if (rc == 0 && path && (rc = imatrix_load(path, im)) < 0) rc = coli_fail_prefix(rc, "quantize");
    return rc;
}

static int s_quantize(const char *in_path, const char *out_path, const quant_preset *preset,
                      const coli_quantize_params *params) {
    int output_type, token_embd_type;
    imatrix im_data = {0}, *im = params && params->imatrix ? &im_data : NULL;
    int rc = s_check_params(preset, params, &im_data, &output_type, &token_embd_type);
    if (rc < 0) return rc;
    gguf_file *in = NULL;
    if ((rc = gguf_open(in_path, &in)) < 0) {
        imatrix_free(&im_data);
        return coli_fail_prefix(rc, "quantize"); /* it names in_path */
    }
    quant_mix mix;
    quant_mix_init(&mix, in, preset, params && params->pure, output_type, token_embd_type);
    const int64_t n = gguf_n_tensors(in);
    const coli_tensor **order = calloc((size_t)(n ? n : 1), sizeof *order);
    void **bufs = calloc((size_t)(n ? n : 1), sizeof *bufs);
    gguf_writer *w = gguf_writer_new();
    coli_pool *pool = coli_pool_new(params && params->n_threads > 0 ? params->n_threads : 0);
    if (!order || !bufs || !w)
        rc = coli_fail(COLI_ENOMEM, "quantize: out of memory");
    else if (!pool)
        rc = coli_fail_prefix(COLI_ENOMEM, "quantize");
    if (rc == 0 &&
        ((rc = s_copy_metadata(w, in, preset)) < 0 || (im && (rc = s_imatrix_metadata(w, params->imatrix, im)) < 0) ||
         (rc = s_add_tensors(w, in, &mix, im, pool, params, order, bufs)) < 0))
        rc = coli_fail_prefix(rc, "quantize %s -> %s", in_path, out_path);
    if (rc == 0) rc = gguf_writer_write(w, out_path); /* its message names out_path */
    for (int64_t i = 0; bufs && i < n; i++) free(bufs[i]);
    free(bufs);
    free(order);
    gguf_writer_free(&w);
    coli_pool_destroy(&pool);
    gguf_close(&in);
    imatrix_free(&im_data);
    return rc;
}

int coli_quantize_file_params(const char *in_path, const char *out_path, const char *type_name,
                              const coli_quantize_params *params) {
    if (!in_path || !out_path || !type_name)
        return coli_fail(COLI_EINVAL, "quantize: input path, output path and type are required");
    const quant_preset *preset = quant_preset_find(type_name);
    if (!preset)
        return coli_fail(COLI_EINVAL, "quantize: unknown type '%s' (accepted: %s)", type_name, quant_preset_names());
    /* by device and inode: "./in.gguf", an absolute path, a symlink or a
     * hard link is the input as much as its own name is */
    if (strcmp(in_path, out_path) == 0 || coli_same_file(in_path, out_path))
        return coli_fail(COLI_EINVAL, "quantize: output %s is the input file %s", out_path, in_path);
    return s_quantize(in_path, out_path, preset, params);
}

int coli_quantize_file(const char *in_path, const char *out_path, const char *type_name) {
    return coli_quantize_file_params(in_path, out_path, type_name, NULL);
}

int coli_quantize_type_known(const char *type) { return type && quant_preset_find(type) != NULL; }

const char *coli_quantize_type_names(void) { return quant_preset_names(); }
