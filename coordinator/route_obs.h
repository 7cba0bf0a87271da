/*
 * route_obs.h - what the API does with each routing decision: count it in
 * the model's heat, write it to the routing trace, hand it to the context's
 * callback (include/colibri.h, "routing: traces and heat").
 */
#ifndef COLI_COORD_ROUTE_OBS_H
#define COLI_COORD_ROUTE_OBS_H

#include <stdint.h>
#include <stdio.h>

#include "colibri.h"
#include "core/file_io.h"
#include "coordinator/heat.h"
#include "coordinator/moe_exec.h"

/* Model-wide: one per coli_model. */
typedef struct route_sink {
    heat_table heat;    /* counts (loaded + new); heat.count NULL: not counted */
    coli_outfile trace; /* coli_dump_routing's file; trace.fp NULL: none */
    int next_ctx;       /* ids of contexts, in creation order */
} route_sink;

/* Per context. */
typedef struct route_obs {
    route_sink *sink;
    moe_exec *moe; /* who says which device computed a pair */
    int ctx_id;
    coli_route_cb cb;
    void *user;
} route_obs;

/* The forward pass's route_hook (forward.h); user is a route_obs. */
void route_obs_hook(void *user, int layer, int pos0, int n_tok, int k, const int32_t *sel, const float *w);
/* The same for n_tok tokens at positions pos0.. that were rows row0.. of a
 * pass with other sequences' rows (batch.c): the devices are looked up at
 * the pass's pair indices (row0 + t) * k + j; sel/w are these rows' own. */
void route_obs_rows(route_obs *o, int layer, int pos0, int n_tok, int row0, int k, const int32_t *sel, const float *w);

/* Start path as the sink's trace, finishing any previous one; NULL: finish.
 * The trace is written to a temporary beside path and renamed into place
 * when finished (core/file_io.h). 0, or COLI_EIO: the previous trace could
 * not be written (it is removed) or path cannot be created. */
int route_sink_trace(route_sink *sink, const char *path);

#endif
