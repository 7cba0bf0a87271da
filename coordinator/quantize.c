/*
 * quantize.c - coli_quantize_file: a GGUF copy with its weights converted,
 * laid out exactly as `llama-quantize --pure` writes it, so Q8_0/Q4_0 output
 * is byte-identical to llama.cpp's (checked against the shipped files).
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
#include "error.h"
#include "gguf.h"
#include "quant.h"
#include "tensor.h"

/* GGML's llama_ftype of a file whose weights are all of type t. */
static uint32_t s_file_type(coli_dtype t) {
    switch (t) {
    case COLI_F32:  return 0;
    case COLI_F16:  return 1;
    case COLI_Q4_0: return 2;
    case COLI_Q8_0: return 7;
    case COLI_BF16: return 32;
    default: break;
    }
    return 0;
}

static int s_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int s_converted(const coli_tensor *t) {
    return s_ends_with(t->name, ".weight") && (t->n_dims == 2 || t->n_dims == 3) &&
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

/* New bytes of t in type: row by row through F32. *out is malloc'd. */
static int s_convert(const coli_tensor *t, coli_dtype type, void **out, size_t *nbytes) {
    const int64_t n_in = t->ne[0], rows = coli_tensor_nelems(t) / n_in;
    if (n_in % coli_dtype_block_elems(type) != 0)
        return coli_fail(COLI_EUNSUPPORTED, "tensor '%s': row length %lld is not a multiple of %lld, cannot be %s",
                         t->name, (long long)n_in, (long long)coli_dtype_block_elems(type), coli_dtype_name(type));
    const size_t src_row = coli_row_bytes(t->type, n_in), dst_row = coli_row_bytes(type, n_in);
    *nbytes = dst_row * (size_t)rows;
    char *dst = malloc(*nbytes);
    float *tmp = malloc((size_t)n_in * sizeof(float));
    if (!dst || !tmp) {
        free(dst); free(tmp);
        return coli_fail(COLI_ENOMEM, "tensor '%s': out of memory for %zu bytes", t->name, *nbytes);
    }
    for (int64_t r = 0; r < rows; r++) {
        coli_dequantize_row(t->type, (const char *)t->data + (size_t)r * src_row, tmp, n_in);
        coli_quantize_row(type, tmp, dst + (size_t)r * dst_row, n_in);
    }
    free(tmp);
    *out = dst;
    return 0;
}

/* Metadata: every key in order, then the two llama-quantize sets last. */
static int s_copy_metadata(gguf_writer *w, const gguf_file *in, coli_dtype type) {
    int rc;
    for (int64_t i = 0; i < gguf_n_kv(in); i++)
        if ((rc = gguf_writer_copy_kv(w, in, i)) < 0) return rc;
    if ((rc = gguf_writer_set_u32(w, "general.quantization_version", 2)) < 0) return rc;
    return gguf_writer_set_u32(w, "general.file_type", s_file_type(type));
}

/* Tensors in llama-quantize order; converted data goes to bufs[i]. */
static int s_add_tensors(gguf_writer *w, const gguf_file *in, coli_dtype type,
                         const coli_tensor **order, void **bufs) {
    const int64_t n = gguf_n_tensors(in);
    int rc;
    for (int64_t i = 0; i < n; i++) order[i] = gguf_tensor(in, i);
    qsort(order, (size_t)n, sizeof *order, s_tensor_order);
    for (int64_t i = 0; i < n; i++) {
        const coli_tensor *t = order[i];
        const void *data = t->data;
        size_t nbytes = t->nbytes;
        coli_dtype out_type = t->type;
        if (s_converted(t) && t->type != type) {
            if ((rc = s_convert(t, type, &bufs[i], &nbytes)) < 0) return rc;
            data = bufs[i];
            out_type = type;
        }
        if ((rc = gguf_writer_add_tensor(w, t->name, out_type, t->n_dims, t->ne, data, nbytes)) < 0)
            return rc;
    }
    return 0;
}

int coli_quantize_file(const char *in_path, const char *out_path, const char *type_name) {
    coli_dtype type;
    if (!in_path || !out_path || !type_name)
        return coli_fail(COLI_EINVAL, "quantize: input path, output path and type are required");
    /* coli_quantize_row writes these; the other weight types are read-only here */
    if (coli_dtype_from_name(type_name, &type) != 0 ||
        !(type == COLI_F32 || type == COLI_F16 || type == COLI_BF16 || type == COLI_Q8_0 || type == COLI_Q4_0))
        return coli_fail(COLI_EINVAL, "quantize: type '%s': expected Q8_0, Q4_0, F16, BF16 or F32", type_name);
    if (strcmp(in_path, out_path) == 0)
        return coli_fail(COLI_EINVAL, "quantize: output '%s' is the input file", out_path);
    gguf_file *in = NULL;
    int rc = gguf_open(in_path, &in);
    if (rc < 0) return rc;
    const int64_t n = gguf_n_tensors(in);
    const coli_tensor **order = calloc((size_t)(n ? n : 1), sizeof *order);
    void **bufs = calloc((size_t)(n ? n : 1), sizeof *bufs);
    gguf_writer *w = gguf_writer_new();
    if (!order || !bufs || !w) rc = coli_fail(COLI_ENOMEM, "quantize: out of memory");
    if (rc == 0) rc = s_copy_metadata(w, in, type);
    if (rc == 0) rc = s_add_tensors(w, in, type, order, bufs);
    if (rc == 0) rc = gguf_writer_write(w, out_path);
    if (rc < 0) rc = coli_fail_prefix(rc, "quantize %s -> %s", in_path, out_path);
    for (int64_t i = 0; bufs && i < n; i++) free(bufs[i]);
    free(bufs);
    free(order);
    gguf_writer_free(&w);
    gguf_close(&in);
    return rc;
}
