/*
 * quantize_iq_grid.h - the search structures of the IQ grid quantizers
 * (quantize_iq.c): each grid point as its levels, the map from a rounded
 * group of levels to its grid point, and for a group that is not on the
 * grid the grid points nearest to it. Private to core/quant.
 *
 * A grid point of `group` values (8 for the IQ2 grids, 4 for IQ3's) is kept
 * as levels l (0..7) and compared as the odd integers 2 l + 1, as
 * llama.cpp's quantizers do (ggml-quants.c iq2xs_init_impl /
 * iq3xs_init_impl). The levels come from the format's own tables
 * (quant_blocks.h): the k-th smallest byte value of a grid (as int8: IQ1's
 * -1, 0, 1) is level k.
 *
 * A group u (its levels packed `bits` bits each, element 0 lowest) maps to
 * map[u] >= 0, its grid point, or to a neighbour list nb[-map[u] - 1]:
 * a count, then the grid points at the `n_dist` smallest distinct squared
 * distances (sum of (2 l + 1 - p)^2), ordered by distance then index.
 * Lists exist for the groups whose levels are all below max_level.
 */
#ifndef COLI_CORE_QUANTIZE_IQ_GRID_H
#define COLI_CORE_QUANTIZE_IQ_GRID_H

#include <stdint.h>

typedef struct iq_grid {
    int n_points, group, bits;
    int8_t *pts;  /* n_points * group values 2 l + 1 */
    int32_t *map; /* 1 << (bits * group) entries */
    uint16_t *nb; /* the neighbour lists */
} iq_grid;

typedef enum iq_grid_id {
    IQ_GRID_2XXS, /* IQ2_XXS: 256 points of 8, 2 neighbour distances */
    IQ_GRID_3XXS, /* IQ3_XXS: 256 points of 4, 2 */
    IQ_GRID_3S,   /* IQ3_S: 512 points of 4, 3 */
    IQ_GRID_2S,   /* IQ2_S: 1024 points of 8, 1 */
    IQ_GRID_2XS,  /* IQ2_XS: 512 points of 8, 2 */
    IQ_GRID_1S,   /* IQ1_S / IQ1_M: 2048 points of 8 (-1, 0, 1 as levels 0..2), 3 */
    IQ_GRID_COUNT
} iq_grid_id;

/* The grid, built on first use (thread-safe); NULL when out of memory. */
const iq_grid *iq_grid_get(iq_grid_id id);

/* The grid point for levels L[0..group), searching u's neighbours when it
 * is off the grid: the one with the least sum of w[i] (scale p_i - x[i])^2;
 * L is then set to that point's levels. Returns the point's index. */
int iq_grid_point(const iq_grid *g, int8_t *L, const float *x, const float *w, float scale);

/* The point L packs to when it is on the grid, else -1. */
int iq_grid_lookup(const iq_grid *g, const int8_t *L);

#endif
