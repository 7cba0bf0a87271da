/*
 * quantize_iq_grid.c - the IQ grids' search structures; see
 * quantize_iq_grid.h. Built once per grid from the format tables.
 */
#include "core/quant/quantize_iq_grid.h"

#include <float.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant_blocks.h"

/* What each grid is made of: its table (bytes of 64- or 32-bit words), the
 * levels below which groups get neighbour lists, how many distinct
 * distances a list spans. */
typedef struct grid_spec {
    const void *table;
    int word_bytes, n_points, group, bits, max_level, n_dist;
} grid_spec;

static const grid_spec s_specs[IQ_GRID_COUNT] = {
    [IQ_GRID_2XXS] = {coli_iq2xxs_grid, 8, 256, 8, 2, 3, 2}, [IQ_GRID_3XXS] = {coli_iq3xxs_grid, 4, 256, 4, 3, 8, 2},
    [IQ_GRID_3S] = {coli_iq3s_grid, 4, 512, 4, 3, 8, 3},     [IQ_GRID_2S] = {coli_iq2s_grid, 8, 1024, 8, 2, 3, 1},
    [IQ_GRID_2XS] = {coli_iq2xs_grid, 8, 512, 8, 2, 3, 2},   [IQ_GRID_1S] = {coli_iq1s_grid, 8, 2048, 8, 2, 3, 3},
};

static iq_grid s_grids[IQ_GRID_COUNT];
static pthread_once_t s_once[IQ_GRID_COUNT] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                               PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};
_Static_assert(IQ_GRID_COUNT == 6, "one PTHREAD_ONCE_INIT per grid");
static int s_failed[IQ_GRID_COUNT];

static uint8_t s_byte(const grid_spec *sp, int point, int i) {
    const uint8_t *p = (const uint8_t *)sp->table + (size_t)point * (size_t)sp->word_bytes;
    return p[i]; /* element i in byte i (little-endian words) */
}

/* Points as 2 l + 1, l the rank of the byte among the grid's byte values. */
static void s_levels(const grid_spec *sp, int8_t *pts) {
    int seen[256] = {0}, rank[256], r = 0; /* indexed by the int8 value + 128 */
    for (int k = 0; k < sp->n_points; k++)
        for (int i = 0; i < sp->group; i++) seen[(int8_t)s_byte(sp, k, i) + 128] = 1;
    for (int b = 0; b < 256; b++) rank[b] = seen[b] ? r++ : -1;
    for (int k = 0; k < sp->n_points; k++)
        for (int i = 0; i < sp->group; i++)
            pts[k * sp->group + i] = (int8_t)(2 * rank[(int8_t)s_byte(sp, k, i) + 128] + 1);
}

static int s_pack(const iq_grid *g, const int8_t *L) {
    int u = 0;
    for (int i = 0; i < g->group; i++) u |= L[i] << (g->bits * i);
    return u;
}

/* 1 when every level packed in u is below max_level. */
static int s_in_range(const iq_grid *g, int u, int max_level) {
    for (int i = 0; i < g->group; i++)
        if (((u >> (g->bits * i)) & ((1 << g->bits) - 1)) >= max_level) return 0;
    return 1;
}

/* u's neighbour list into out (count first); returns its length. */
static int s_neighbours(const iq_grid *g, int u, int n_dist, int *d2, uint16_t *out) {
    for (int j = 0; j < g->n_points; j++) {
        int d = 0;
        for (int i = 0; i < g->group; i++) {
            const int p = 2 * ((u >> (g->bits * i)) & ((1 << g->bits) - 1)) + 1, q = g->pts[j * g->group + i];
            d += (p - q) * (p - q);
        }
        d2[j] = d;
    }
    int n = 0, last = -1;
    for (int k = 0; k < n_dist; k++) {
        int next = -1; /* the smallest distance above last */
        for (int j = 0; j < g->n_points; j++)
            if (d2[j] > last && (next < 0 || d2[j] < next)) next = d2[j];
        if (next < 0) break;
        for (int j = 0; j < g->n_points; j++)
            if (d2[j] == next) out[1 + n++] = (uint16_t)j;
        last = next;
    }
    out[0] = (uint16_t)n;
    return n + 1;
}

static int s_build(iq_grid *g, const grid_spec *sp) {
    const int n_map = 1 << (sp->bits * sp->group);
    g->n_points = sp->n_points;
    g->group = sp->group;
    g->bits = sp->bits;
    g->pts = malloc((size_t)sp->n_points * (size_t)sp->group);
    g->map = malloc((size_t)n_map * sizeof *g->map);
    int *d2 = malloc((size_t)sp->n_points * sizeof *d2);
    if (!g->pts || !g->map || !d2) goto fail;
    s_levels(sp, g->pts);
    for (int u = 0; u < n_map; u++) g->map[u] = -1;
    for (int k = 0; k < sp->n_points; k++) {
        int8_t L[8];
        for (int i = 0; i < sp->group; i++) L[i] = (int8_t)((g->pts[k * sp->group + i] - 1) / 2);
        g->map[s_pack(g, L)] = k;
    }
    /* at most n_points + 1 entries per off-grid group */
    size_t cap = 0, used = 0;
    for (int u = 0; u < n_map; u++) cap += g->map[u] < 0 && s_in_range(g, u, sp->max_level);
    g->nb = malloc(cap * (size_t)(sp->n_points + 1) * sizeof *g->nb);
    if (!g->nb) goto fail;
    for (int u = 0; u < n_map; u++) {
        if (g->map[u] >= 0 || !s_in_range(g, u, sp->max_level)) continue;
        g->map[u] = -(int32_t)used - 1;
        used += (size_t)s_neighbours(g, u, sp->n_dist, d2, g->nb + used);
    }
    uint16_t *shrunk = realloc(g->nb, (used ? used : 1) * sizeof *g->nb);
    if (shrunk) g->nb = shrunk;
    free(d2);
    return 0;
fail:
    free(d2);
    free(g->pts);
    free(g->map);
    memset(g, 0, sizeof *g);
    return -1;
}

#define S_GRID_INIT(ID) \
    static void s_init_##ID(void) { s_failed[ID] = s_build(&s_grids[ID], &s_specs[ID]) != 0; }
S_GRID_INIT(IQ_GRID_2XXS)
S_GRID_INIT(IQ_GRID_3XXS)
S_GRID_INIT(IQ_GRID_3S)
S_GRID_INIT(IQ_GRID_2S)
S_GRID_INIT(IQ_GRID_2XS)
S_GRID_INIT(IQ_GRID_1S)

const iq_grid *iq_grid_get(iq_grid_id id) {
    static void (*const init[IQ_GRID_COUNT])(void) = {s_init_IQ_GRID_2XXS, s_init_IQ_GRID_3XXS, s_init_IQ_GRID_3S,
                                                      s_init_IQ_GRID_2S,   s_init_IQ_GRID_2XS,  s_init_IQ_GRID_1S};
    pthread_once(&s_once[id], init[id]);
    return s_failed[id] ? NULL : &s_grids[id];
}

int iq_grid_lookup(const iq_grid *g, const int8_t *L) {
    const int32_t k = g->map[s_pack(g, L)];
    return k >= 0 ? k : -1;
}

int iq_grid_point(const iq_grid *g, int8_t *L, const float *x, const float *w, float scale) {
    const int32_t k = g->map[s_pack(g, L)];
    if (k >= 0) return k;
    const uint16_t *nb = g->nb + (-k - 1);
    float best = FLT_MAX;
    int point = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        const int8_t *p = g->pts + nb[j] * g->group;
        float d2 = 0;
        for (int i = 0; i < g->group; i++) {
            const float diff = scale * (float)p[i] - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best) {
            best = d2;
            point = nb[j];
        }
    }
    const int8_t *p = g->pts + point * g->group;
    for (int i = 0; i < g->group; i++) L[i] = (int8_t)((p[i] - 1) / 2);
    return point;
}
