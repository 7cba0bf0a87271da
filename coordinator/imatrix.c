/*
 * imatrix.c - the importance matrix's files and what the quantizer gets
 * from them; see imatrix.h. The two layouts are llama.cpp de3ff815's
 * (tools/imatrix/imatrix.cpp save_imatrix / save_imatrix_legacy,
 * common/imatrix-loader.cpp):
 *
 *   GGUF    general.type = "imatrix", imatrix.datasets [str],
 *           imatrix.chunk_count u32, imatrix.chunk_size u32; per weight,
 *           in name order, NAME.in_sum2 F32 (n_in, n_mat) raw sums of x^2 and
 *           NAME.counts F32 (1, n_mat) token rows.
 *   legacy  i32 n_entries; per entry i32 name length, the name, i32 ncall,
 *           i32 nval, nval floats (sum / count * ncall, 1 where a matrix saw
 *           nothing); then optionally i32 chunk count, i32 length, dataset.
 */
#include "coordinator/imatrix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "core/error.h"
#include "core/file_io.h"

void imatrix_free(imatrix *im) {
    for (int i = 0; i < im->n; i++) {
        free(im->e[i].name);
        free(im->e[i].sums);
        free(im->e[i].counts);
    }
    free(im->e);
    free(im->dataset);
    memset(im, 0, sizeof *im);
}

const imatrix_entry *imatrix_find(const imatrix *im, const char *name) {
    for (int i = 0; i < im->n; i++)
        if (strcmp(im->e[i].name, name) == 0) return &im->e[i];
    return NULL;
}

/* A new zeroed entry of n_mat matrices of n_in values with n_counts counts. */
static imatrix_entry *s_add(imatrix *im, const char *name, int64_t n_in, int64_t n_mat, int64_t n_counts) {
    if (im->n == im->cap) {
        int cap = im->cap ? 2 * im->cap : 64;
        imatrix_entry *e = realloc(im->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        im->e = e;
        im->cap = cap;
    }
    imatrix_entry *e = &im->e[im->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    e->n_in = n_in;
    e->n_mat = n_mat;
    e->n_counts = n_counts;
    e->sums = calloc((size_t)(n_in * n_mat), sizeof *e->sums);
    e->counts = calloc((size_t)n_counts, sizeof *e->counts);
    if (!e->name || !e->sums || !e->counts) {
        free(e->name);
        free(e->sums);
        free(e->counts);
        return NULL;
    }
    im->n++;
    return e;
}

// ---------------------------------------------------------------------------
// reading

/* "NAME.in_sum2" -> NAME into out; 0 when name does not end in suffix. */
static int s_strip(const char *name, const char *suffix, char *out, size_t cap) {
    size_t n = strlen(name), m = strlen(suffix);
    if (n <= m || strcmp(name + n - m, suffix) != 0 || n - m >= cap) return 0;
    memcpy(out, name, n - m);
    out[n - m] = 0;
    return 1;
}

static int s_load_entry_gguf(const gguf_file *f, const char *path, const coli_tensor *sums, imatrix *im) {
    char base[512], cname[600];
    if (!s_strip(sums->name, ".in_sum2", base, sizeof base)) return 0;
    snprintf(cname, sizeof cname, "%s.counts", base);
    const coli_tensor *counts = gguf_find_tensor(f, cname);
    if (!counts) return coli_fail(COLI_EFORMAT, "imatrix %s: '%s' has no '%s'", path, sums->name, cname);
    if (sums->type != COLI_F32 || counts->type != COLI_F32)
        return coli_fail(COLI_EFORMAT, "imatrix %s: '%s' and '%s' must be F32", path, sums->name, cname);
    const int64_t nval = coli_tensor_nelems(sums), ncounts = coli_tensor_nelems(counts);
    if (ncounts < 1 || nval % ncounts != 0)
        return coli_fail(COLI_EFORMAT, "imatrix %s: '%s' has %lld values for %lld counts", path, base, (long long)nval,
                         (long long)ncounts);
    imatrix_entry *e = s_add(im, base, nval / ncounts, ncounts, ncounts);
    if (!e) return coli_fail(COLI_ENOMEM, "imatrix %s: out of memory", path);
    memcpy(e->sums, sums->data, (size_t)nval * sizeof(float));
    for (int64_t j = 0; j < ncounts; j++) {
        const float c = ((const float *)counts->data)[j];
        if (!(c >= 0 && c < 9e18f)) return coli_fail(COLI_EFORMAT, "imatrix %s: '%s' count %g", path, cname, c);
        e->counts[j] = llroundf(c);
    }
    return 0;
}

static int s_load_gguf(const char *path, imatrix *im) {
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f);
    if (rc < 0) return coli_fail_prefix(rc, "imatrix");
    gguf_str s;
    uint64_t n_sets = 0;
    gguf_type et;
    const void *data;
    if (gguf_find_key(f, "imatrix.chunk_count") >= 0) gguf_get_u32(f, "imatrix.chunk_count", &im->chunk_count);
    if (gguf_find_key(f, "imatrix.chunk_size") >= 0) gguf_get_u32(f, "imatrix.chunk_size", &im->chunk_size);
    if (gguf_find_key(f, "imatrix.datasets") >= 0 && gguf_get_arr(f, "imatrix.datasets", &et, &n_sets, &data) == 0 &&
        et == GGUF_STRING && n_sets > 0 && gguf_arr_str(f, "imatrix.datasets", 0, &s) == 0)
        im->dataset = strndup(s.ptr, (size_t)s.len);
    /* llama-quantize refuses a GGUF imatrix without its metadata */
    if (gguf_find_key(f, "imatrix.chunk_count") < 0 || gguf_find_key(f, "imatrix.chunk_size") < 0 ||
        gguf_find_key(f, "imatrix.datasets") < 0)
        rc = coli_fail(COLI_EFORMAT, "imatrix %s: missing key imatrix.%s", path,
                       gguf_find_key(f, "imatrix.datasets") < 0 ? "datasets" : "chunk_count/chunk_size");
    for (int64_t i = 0; rc == 0 && i < gguf_n_tensors(f); i++) rc = s_load_entry_gguf(f, path, gguf_tensor(f, i), im);
    if (rc == 0 && im->n == 0) rc = coli_fail(COLI_EFORMAT, "imatrix %s: no NAME.in_sum2 tensors", path);
    gguf_close(&f);
    return rc;
}

/* The legacy reader over the whole file in memory. */
typedef struct dat_reader {
    const uint8_t *p, *end;
} dat_reader;

static int s_get_i32(dat_reader *r, int32_t *v) {
    if (r->end - r->p < 4) return -1;
    memcpy(v, r->p, 4);
    r->p += 4;
    return 0;
}

static int s_load_dat_entry(dat_reader *r, const char *path, int i, imatrix *im) {
    int32_t len, ncall, nval;
    if (s_get_i32(r, &len) || len < 1 || len > 4096 || r->end - r->p < len)
        return coli_fail(COLI_EFORMAT, "imatrix %s: entry %d: bad name length", path, i + 1);
    char name[4097];
    memcpy(name, r->p, (size_t)len);
    name[len] = 0;
    r->p += len;
    if (s_get_i32(r, &ncall) || s_get_i32(r, &nval) || nval < 1 || (r->end - r->p) / 4 < nval)
        return coli_fail(COLI_EFORMAT, "imatrix %s: entry '%s': bad value count", path, name);
    imatrix_entry *e = s_add(im, name, nval, 1, 1);
    if (!e) return coli_fail(COLI_ENOMEM, "imatrix %s: out of memory", path);
    memcpy(e->sums, r->p, (size_t)nval * 4);
    r->p += (size_t)nval * 4;
    e->counts[0] = ncall;
    return 0;
}

static int s_load_dat(const char *path, const uint8_t *buf, size_t len, imatrix *im) {
    dat_reader r = {buf, buf + len};
    int32_t n, chunks, dlen;
    if (s_get_i32(&r, &n) || n < 1)
        return coli_fail(COLI_EFORMAT, "imatrix %s: no entries (neither GGUF nor .dat)", path);
    im->legacy = 1;
    for (int i = 0; i < n; i++) {
        int rc = s_load_dat_entry(&r, path, i, im);
        if (rc < 0) return rc;
    }
    /* the trailer (chunk count, dataset) is optional */
    if (s_get_i32(&r, &chunks) == 0) {
        im->chunk_count = chunks > 0 ? (uint32_t)chunks : 0;
        if (s_get_i32(&r, &dlen) == 0 && dlen > 0 && r.end - r.p >= dlen)
            im->dataset = strndup((const char *)r.p, (size_t)dlen);
    }
    return 0;
}

static int s_read_all(const char *path, uint8_t **buf, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return coli_fail(COLI_EIO, "imatrix %s: cannot open", path);
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, fp);
        if (n < cap) break;
        uint8_t *nb = realloc(b, cap * 2);
        if (!nb) free(b);
        b = nb;
        cap *= 2;
    }
    int err = ferror(fp);
    fclose(fp);
    if (!b) return coli_fail(COLI_ENOMEM, "imatrix %s: out of memory", path);
    if (err) {
        free(b);
        return coli_fail(COLI_EIO, "imatrix %s: read error", path);
    }
    *buf = b;
    *len = n;
    return 0;
}

int imatrix_load(const char *path, imatrix *out) {
    memset(out, 0, sizeof *out);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = s_read_all(path, &buf, &len);
    if (rc < 0) return rc;
    if (len >= 4 && memcmp(buf, "GGUF", 4) == 0)
        rc = s_load_gguf(path, out);
    else
        rc = s_load_dat(path, buf, len, out);
    free(buf);
    if (rc < 0) imatrix_free(out);
    return rc;
}

// ---------------------------------------------------------------------------
// what the quantizer gets

int imatrix_weights(const imatrix *im, const coli_tensor *t, float **out) {
    *out = NULL;
    const imatrix_entry *e = imatrix_find(im, t->name);
    if (!e) return 0;
    const int64_t n_mat = t->n_dims >= 3 ? t->ne[2] : 1, want = t->ne[0] * n_mat, have = e->n_in * e->n_mat;
    if (have != want)
        return coli_fail(COLI_EINVAL,
                         "tensor '%s': the imatrix has %lld values for it, the tensor needs %lld (%lld x %lld): "
                         "an imatrix of another model?",
                         t->name, (long long)have, (long long)want, (long long)t->ne[0], (long long)n_mat);
    float *w = malloc((size_t)want * sizeof *w);
    if (!w) return coli_fail(COLI_ENOMEM, "tensor '%s': out of memory for its imatrix", t->name);
    const int64_t per = want / e->n_counts;
    for (int64_t j = 0; j < e->n_counts; j++) {
        const float c = (float)e->counts[j];
        for (int64_t i = j * per; i < (j + 1) * per; i++) {
            if (im->legacy)
                w[i] = c > 0 ? e->sums[i] / c : e->sums[i];
            else
                w[i] = c > 0 ? e->sums[i] / c : 1.0f;
        }
    }
    for (int64_t i = 0; i < want; i++)
        if (!isfinite(w[i])) {
            free(w);
            return coli_fail(COLI_EFORMAT, "tensor '%s': the imatrix holds a non-finite value", t->name);
        }
    *out = w;
    return 0;
}

// ---------------------------------------------------------------------------
// writing

static int s_by_name(const void *a, const void *b) {
    return strcmp((*(const imatrix_entry *const *)a)->name, (*(const imatrix_entry *const *)b)->name);
}

/* Entries in name order (llama-imatrix sorts them). */
static const imatrix_entry **s_sorted(const imatrix *im) {
    const imatrix_entry **v = malloc((size_t)(im->n ? im->n : 1) * sizeof *v);
    if (!v) return NULL;
    for (int i = 0; i < im->n; i++) v[i] = &im->e[i];
    qsort(v, (size_t)im->n, sizeof *v, s_by_name);
    return v;
}

static int s_add_entry_gguf(gguf_writer *w, const imatrix_entry *e, float *counts) {
    char name[600];
    const int64_t ne_s[2] = {e->n_in, e->n_mat}, ne_c[2] = {1, e->n_mat};
    for (int64_t j = 0; j < e->n_mat; j++) counts[j] = (float)e->counts[j < e->n_counts ? j : 0];
    snprintf(name, sizeof name, "%s.in_sum2", e->name);
    int rc = gguf_writer_add_tensor(w, name, COLI_F32, 2, ne_s, e->sums, (size_t)(e->n_in * e->n_mat) * sizeof(float));
    snprintf(name, sizeof name, "%s.counts", e->name);
    if (rc == 0) rc = gguf_writer_add_tensor(w, name, COLI_F32, 2, ne_c, counts, (size_t)e->n_mat * sizeof(float));
    return rc;
}

static int s_save_gguf(const imatrix *im, const char *path, const imatrix_entry **v, float **counts) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return coli_fail(COLI_ENOMEM, "imatrix: out of memory");
    const char *ds = im->dataset ? im->dataset : "";
    int rc = gguf_writer_set_str(w, "general.type", "imatrix");
    if (rc == 0) rc = gguf_writer_set_arr_str(w, "imatrix.datasets", &ds, 1);
    if (rc == 0) rc = gguf_writer_set_u32(w, "imatrix.chunk_count", im->chunk_count);
    if (rc == 0) rc = gguf_writer_set_u32(w, "imatrix.chunk_size", im->chunk_size);
    for (int i = 0; rc == 0 && i < im->n; i++) {
        counts[i] = malloc((size_t)v[i]->n_mat * sizeof(float));
        rc = counts[i] ? s_add_entry_gguf(w, v[i], counts[i]) : coli_fail(COLI_ENOMEM, "imatrix: out of memory");
    }
    if (rc == 0) rc = gguf_writer_write(w, path);
    gguf_writer_free(&w);
    return rc;
}

/* One legacy entry: ncall = ceil(max count / chunk_size), values
 * sum / count * ncall (1 for a matrix without tokens). */
static void s_write_dat_entry(FILE *fp, const imatrix *im, const imatrix_entry *e) {
    int64_t max = 0;
    for (int64_t j = 0; j < e->n_counts; j++) max = e->counts[j] > max ? e->counts[j] : max;
    const int64_t cs = im->chunk_size ? im->chunk_size : 1;
    const int32_t len = (int32_t)strlen(e->name), ncall = (int32_t)((max + cs - 1) / cs);
    const int32_t nval = (int32_t)(e->n_in * e->n_mat);
    fwrite(&len, 4, 1, fp);
    fwrite(e->name, 1, (size_t)len, fp);
    fwrite(&ncall, 4, 1, fp);
    fwrite(&nval, 4, 1, fp);
    for (int64_t i = 0; i < nval; i++) {
        float c = (float)e->counts[e->n_counts > 1 ? i / e->n_in : 0], v = e->sums[i];
        if (c == 0.0f) v = c = 1.0f;
        const float out = (v / c) * (float)ncall;
        fwrite(&out, 4, 1, fp);
    }
}

/* llama-imatrix skips the entries that saw no token at all. */
static int s_has_data(const imatrix_entry *e) {
    for (int64_t j = 0; j < e->n_counts; j++)
        if (e->counts[j]) return 1;
    return 0;
}

static int s_save_dat(const imatrix *im, const char *path, const imatrix_entry **v) {
    coli_outfile o;
    int rc = coli_outfile_open(&o, "imatrix", path, 0);
    if (rc < 0) return rc;
    int32_t n = 0;
    for (int i = 0; i < im->n; i++) n += s_has_data(v[i]);
    fwrite(&n, 4, 1, o.fp);
    for (int i = 0; i < im->n; i++)
        if (s_has_data(v[i])) s_write_dat_entry(o.fp, im, v[i]);
    const int32_t chunks = (int32_t)im->chunk_count, dlen = im->dataset ? (int32_t)strlen(im->dataset) : 0;
    fwrite(&chunks, 4, 1, o.fp);
    fwrite(&dlen, 4, 1, o.fp);
    if (dlen) fwrite(im->dataset, 1, (size_t)dlen, o.fp);
    return coli_outfile_commit(&o);
}

int imatrix_save(const imatrix *im, const char *path, int legacy) {
    const imatrix_entry **v = s_sorted(im);
    float **counts = calloc((size_t)(im->n ? im->n : 1), sizeof *counts);
    int rc;
    if (!v || !counts)
        rc = coli_fail(COLI_ENOMEM, "imatrix: out of memory");
    else
        rc = legacy ? s_save_dat(im, path, v) : s_save_gguf(im, path, v, counts);
    for (int i = 0; counts && i < im->n; i++) free(counts[i]);
    free(counts);
    free(v);
    return rc;
}

imatrix_entry *imatrix_add(imatrix *im, const char *name, int64_t n_in, int64_t n_mat) {
    return s_add(im, name, n_in, n_mat, n_mat);
}
