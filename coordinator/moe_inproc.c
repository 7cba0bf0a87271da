/*
 * moe_inproc.c - the in-process expert executor: the cpu plugin's vtable
 * called directly, no workers (contract: moe_exec.h).
 *
 * Every expert of the model is loaded into the plugin at start (pointers
 * into the coordinator's mapping, nothing copied). A layer call groups the
 * (token, slot) pairs by expert - the batch union: each chosen expert runs
 * once over all the rows routed to it - then scatters the outputs back to
 * y[t][s]. Buffers grow on demand and are reused, so decode allocates
 * nothing after the first token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/moe_exec.h"
#include "core/error.h"
#include "core/kernels/expert_ffn.h"
#include "core/gguf/gguf.h"
#include "plugins/cpu/cpu_plugin.h"
#include "plugins/plugin_abi.h"
#include "core/strbuf.h"

typedef struct inproc {
    moe_exec base; /* first: a moe_exec* is an inproc* */
    const struct moe_plugin *plugin;
    moe_device *dev;
    char device_name[64];
    int n_layer, n_expert;
    int64_t n_embd;
    size_t cap_rows;          /* rows xg/yg/order have room for */
    float *xg, *yg;           /* (cap_rows, n_embd) inputs / outputs grouped by expert */
    int64_t *order;           /* (cap_rows) grouped row -> pair index t*k + s */
    int64_t *start;           /* (n_expert + 1) first grouped row of each expert in this call */
    moe_batch_group *groups;  /* (n_expert) */
    uint64_t *rows_by_expert; /* (n_layer, n_expert) rows computed since start */
    uint64_t layer_calls, rows;
} inproc;

// ---------------------------------------------------------------------------
// layer calls

static int s_reserve(inproc *ex, size_t rows) {
    if (rows <= ex->cap_rows) return 0;
    size_t cap = ex->cap_rows ? ex->cap_rows : 16;
    while (cap < rows) cap *= 2;
    float *xg = realloc(ex->xg, cap * (size_t)ex->n_embd * sizeof(float));
    if (xg) ex->xg = xg;
    float *yg = realloc(ex->yg, cap * (size_t)ex->n_embd * sizeof(float));
    if (yg) ex->yg = yg;
    int64_t *order = realloc(ex->order, cap * sizeof(int64_t));
    if (order) ex->order = order;
    if (!xg || !yg || !order) return coli_fail(COLI_ENOMEM, "inproc experts: cannot grow buffers to %zu rows", cap);
    ex->cap_rows = cap;
    return 0;
}

void moe_group_by_expert(const int32_t *ids, const int64_t *items, int64_t n, int n_expert, int64_t *start,
                         int64_t *out) {
    memset(start, 0, ((size_t)n_expert + 1) * sizeof *start);
    for (int64_t j = 0; j < n; j++) start[ids[items ? items[j] : j] + 1]++;
    for (int e = 0; e < n_expert; e++) start[e + 1] += start[e];
    /* start[e] is the next free position of expert e while placing, so it
     * ends one expert on: shift back afterwards */
    for (int64_t j = 0; j < n; j++) {
        int64_t item = items ? items[j] : j;
        out[start[ids[item]]++] = item;
    }
    for (int e = n_expert; e > 0; e--) start[e] = start[e - 1];
    start[0] = 0;
}

/* Group the pairs by expert (ex->order, ex->groups); gathers x rows into xg. */
static int s_group(inproc *ex, int layer, const float *x, int64_t n_tok, int k, const int32_t *ids) {
    const size_t E = (size_t)ex->n_embd;
    const int64_t n_pairs = n_tok * k;
    for (int64_t p = 0; p < n_pairs; p++)
        if (ids[p] < 0 || ids[p] >= ex->n_expert)
            return coli_fail(COLI_ERANGE, "inproc experts: layer %d: expert id %d out of range [0, %d)", layer, ids[p],
                             ex->n_expert);
    moe_group_by_expert(ids, NULL, n_pairs, ex->n_expert, ex->start, ex->order);
    int32_t n_groups = 0;
    for (int e = 0; e < ex->n_expert; e++) {
        int64_t n = ex->start[e + 1] - ex->start[e];
        if (!n) continue;
        ex->groups[n_groups++] = (moe_batch_group){layer, e, ex->start[e], n};
        ex->rows_by_expert[(size_t)layer * (size_t)ex->n_expert + (size_t)e] += (uint64_t)n;
    }
    for (int64_t row = 0; row < n_pairs; row++)
        memcpy(ex->xg + (size_t)row * E, x + (size_t)(ex->order[row] / k) * E, E * sizeof(float));
    return n_groups;
}

static int s_run_layer(moe_exec *self, int layer, const float *x, int64_t n_tok, int k, const int32_t *ids, float *y) {
    inproc *ex = (inproc *)self;
    const size_t E = (size_t)ex->n_embd;
    if (layer < 0 || layer >= ex->n_layer)
        return coli_fail(COLI_EINVAL, "inproc experts: layer %d out of range [0, %d)", layer, ex->n_layer);
    if (n_tok <= 0 || k <= 0) return 0;
    const int64_t n_pairs = n_tok * k;
    int rc = s_reserve(ex, (size_t)n_pairs);
    if (rc < 0) return rc;
    int n_groups = s_group(ex, layer, x, n_tok, k, ids);
    if (n_groups < 0) return n_groups;
    char err[256] = "";
    rc = ex->plugin->run(ex->dev, ex->groups, n_groups, ex->xg, n_pairs, ex->n_embd, ex->yg, err, sizeof err);
    if (rc < 0) return coli_fail(rc, "inproc experts: layer %d: cpu plugin: %s", layer, err);
    // y[t][s] = the output row of pair t*k + s
    for (int64_t row = 0; row < n_pairs; row++)
        memcpy(y + (size_t)ex->order[row] * E, ex->yg + (size_t)row * E, E * sizeof(float));
    ex->layer_calls++;
    ex->rows += (uint64_t)n_pairs;
    return 0;
}

// ---------------------------------------------------------------------------
// stats

static int s_finish(coli_strbuf *b, char **out) {
    if (b->failed || !b->s) {
        free(b->s);
        return coli_fail(COLI_ENOMEM, "inproc experts: stats: out of memory");
    }
    *out = b->s;
    return 0;
}

static int s_stats_json(moe_exec *self, char **json) {
    inproc *ex = (inproc *)self;
    coli_strbuf b = {0};
    coli_strbuf_appendf(&b,
                        "{\"executor\":\"inproc\",\"device\":\"%s\",\"n_layer\":%d,\"n_expert\":%d,"
                        "\"layer_calls\":%llu,\"rows\":%llu,\"fallbacks\":0,\"expert_rows\":[",
                        ex->device_name, ex->n_layer, ex->n_expert, (unsigned long long)ex->layer_calls,
                        (unsigned long long)ex->rows);
    for (int l = 0; l < ex->n_layer; l++) {
        coli_strbuf_appendf(&b, "%s[", l ? "," : "");
        for (int e = 0; e < ex->n_expert; e++)
            coli_strbuf_appendf(&b, "%s%llu", e ? "," : "",
                                (unsigned long long)ex->rows_by_expert[(size_t)l * (size_t)ex->n_expert + (size_t)e]);
        coli_strbuf_appendf(&b, "]");
    }
    coli_strbuf_appendf(&b, "]}");
    return s_finish(&b, json);
}

static int s_stats_text(moe_exec *self, char **text) {
    inproc *ex = (inproc *)self;
    coli_strbuf b = {0};
    coli_strbuf_appendf(&b, "experts: in-process on %s, %llu layer calls, %llu expert rows, 0 fallbacks\n",
                        ex->device_name, (unsigned long long)ex->layer_calls, (unsigned long long)ex->rows);
    for (int l = 0; l < ex->n_layer; l++) {
        coli_strbuf_appendf(&b, "  layer %d rows per expert:", l);
        for (int e = 0; e < ex->n_expert; e++)
            coli_strbuf_appendf(&b, " %llu",
                                (unsigned long long)ex->rows_by_expert[(size_t)l * (size_t)ex->n_expert + (size_t)e]);
        coli_strbuf_appendf(&b, "\n");
    }
    return s_finish(&b, text);
}

// ---------------------------------------------------------------------------
// lifecycle

static void s_destroy(moe_exec *self) {
    inproc *ex = (inproc *)self;
    if (!ex) return;
    if (ex->plugin && ex->dev) ex->plugin->close(&ex->dev);
    free(ex->xg);
    free(ex->yg);
    free(ex->order);
    free(ex->start);
    free(ex->groups);
    free(ex->rows_by_expert);
    free(ex);
}

/* Hand every expert of the file to the plugin (views into the mapping). */
static int s_load_all(inproc *ex, const moe_exec_config *cfg) {
    char err[256];
    for (int l = 0; l < cfg->n_layer; l++) {
        if (!expert_layer_present(cfg->gguf, l)) continue; /* a dense layer: no experts */
        for (int e = 0; e < cfg->n_expert; e++) {
            expert_weights w;
            int rc = expert_weights_from_gguf(cfg->gguf, l, e, &w);
            if (rc < 0) return rc;
            const expert_part_bytes b = expert_parts_bytes(&w);
            moe_expert_desc d = {
                .layer = l,
                .expert = e,
                .n_embd = w.n_embd,
                .n_ff = w.n_ff,
                .gate_type = (int32_t)w.gate_type,
                .up_type = (int32_t)w.up_type,
                .down_type = (int32_t)w.down_type,
                .gate = w.gate,
                .up = w.up,
                .down = w.down,
                .gate_bytes = b.gate,
                .up_bytes = b.up,
                .down_bytes = b.down,
                .act = (int32_t)w.act,
                .act_alpha = w.alpha,
                .act_limit = w.limit,
                .gate_bias = w.gate_bias,
                .up_bias = w.up_bias,
                .down_bias = w.down_bias,
            };
            err[0] = '\0';
            rc = ex->plugin->load_expert(ex->dev, &d, err, sizeof err);
            if (rc < 0) return coli_fail(rc, "inproc experts: layer %d expert %d: %s", l, e, err);
        }
    }
    return 0;
}

static int s_open_device(inproc *ex, const moe_exec_config *cfg) {
    char err[256] = "";
    moe_open_opts opts = {.device_index = 0, .n_threads = cfg->n_threads, .memory_budget = 0, .fault = NULL};
    int rc = cfg->pool ? coli_cpu_plugin_open_shared(&opts, cfg->pool, &ex->dev, err, sizeof err)
                       : ex->plugin->open(&opts, &ex->dev, err, sizeof err);
    if (rc < 0) return coli_fail(rc, "inproc experts: cpu plugin open: %s", err);
    moe_caps caps;
    memset(&caps, 0, sizeof caps);
    if (ex->plugin->get_caps && ex->plugin->get_caps(ex->dev, &caps) == 0)
        snprintf(ex->device_name, sizeof ex->device_name, "%.*s", (int)sizeof caps.device_name, caps.device_name);
    else
        snprintf(ex->device_name, sizeof ex->device_name, "cpu");
    return 0;
}

int moe_exec_inproc_new(const moe_exec_config *cfg, moe_exec **out) {
    *out = NULL;
    if (!cfg || !cfg->gguf || cfg->n_layer <= 0 || cfg->n_expert <= 0 || cfg->n_embd <= 0)
        return coli_fail(COLI_EINVAL, "inproc experts: config needs a mapped file, layers, experts and n_embd");
    inproc *ex = calloc(1, sizeof *ex);
    if (!ex) return coli_fail(COLI_ENOMEM, "inproc experts: out of memory");
    ex->base = (moe_exec){
        .run_layer = s_run_layer, .stats_json = s_stats_json, .stats_text = s_stats_text, .destroy = s_destroy};
    ex->n_layer = cfg->n_layer;
    ex->n_expert = cfg->n_expert;
    ex->n_embd = cfg->n_embd;
    ex->plugin = coli_cpu_plugin();
    ex->start = calloc((size_t)cfg->n_expert + 1, sizeof *ex->start);
    ex->groups = calloc((size_t)cfg->n_expert, sizeof *ex->groups);
    ex->rows_by_expert = calloc((size_t)cfg->n_layer * (size_t)cfg->n_expert, sizeof *ex->rows_by_expert);
    int rc;
    if (!ex->start || !ex->groups || !ex->rows_by_expert) {
        rc = coli_fail(COLI_ENOMEM, "inproc experts: out of memory");
        goto fail;
    }
    if ((rc = s_open_device(ex, cfg)) < 0) goto fail;
    if ((rc = s_load_all(ex, cfg)) < 0) goto fail;
    *out = &ex->base;
    return 0;
fail:
    s_destroy(&ex->base);
    return rc;
}
