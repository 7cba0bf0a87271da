/* route_obs.c - heat, trace and callback for each routing decision; see route_obs.h. */
#include "coordinator/route_obs.h"

#define ROUTE_MAX_K 64 /* experts per token the trace spells out (models use <= 16) */

static void s_trace_line(FILE *fp, int ctx, const coli_route_event *ev) {
    fprintf(fp, "{\"ctx\":%d,\"pos\":%d,\"layer\":%d,\"experts\":[", ctx, ev->pos, ev->layer);
    for (int j = 0; j < ev->k; j++) fprintf(fp, "%s%d", j ? "," : "", ev->experts[j]);
    fputs("],\"weights\":[", fp);
    for (int j = 0; j < ev->k; j++) fprintf(fp, "%s%.9g", j ? "," : "", (double)ev->weights[j]);
    fputs("],\"devices\":[", fp);
    for (int j = 0; j < ev->k; j++) fprintf(fp, "%s\"%s\"", j ? "," : "", ev->devices[j]);
    fputs("]}\n", fp);
}

void route_obs_hook(void *user, int layer, int pos0, int n_tok, int k, const int32_t *sel, const float *w) {
    route_obs_rows(user, layer, pos0, n_tok, 0, k, sel, w);
}

void route_obs_rows(route_obs *o, int layer, int pos0, int n_tok, int row0, int k, const int32_t *sel, const float *w) {
    route_sink *sink = o->sink;
    if (sink->heat.count) heat_add(&sink->heat, layer, n_tok, k, sel);
    if (!sink->trace.fp && !o->cb) return;
    const char *dev[ROUTE_MAX_K];
    const int kk = k < ROUTE_MAX_K ? k : ROUTE_MAX_K;
    for (int t = 0; t < n_tok; t++) {
        for (int j = 0; j < kk; j++)
            dev[j] =
                o->moe && o->moe->pair_device ? o->moe->pair_device(o->moe, ((int64_t)row0 + t) * k + j) : "inproc";
        coli_route_event ev = {layer, pos0 + t, kk, sel + (size_t)t * (size_t)k, w + (size_t)t * (size_t)k, dev};
        if (sink->trace.fp) s_trace_line(sink->trace.fp, o->ctx_id, &ev);
        if (o->cb) o->cb(o->user, &ev);
    }
}

int route_sink_trace(route_sink *sink, const char *path) {
    int rc = sink->trace.fp ? coli_outfile_commit(&sink->trace) : 0;
    if (rc == 0 && path) rc = coli_outfile_open(&sink->trace, "route trace", path, 0);
    return rc;
}
