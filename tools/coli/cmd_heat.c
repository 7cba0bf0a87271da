/*
 * cmd_heat.c - `coli heat FILE [--top N] [--pairs N] [--plot OUT.svg]`: what a
 * heat file (coordinator/heat.h) says: per layer each expert's selections and
 * share, the share of the routed rows the N hottest experts take, the pairs
 * chosen together most often, and optionally an SVG heat map (layers x experts).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/args.h"
#include "colibri.h"
#include "tools/coli/commands.h"
#include "coordinator/heat.h"
#include "core/file_io.h"

static const uint64_t *s_layer(const heat_table *h, int l) { return h->count + (size_t)l * (size_t)h->n_expert; }

/* Sum of the n largest of v[0..X) (a partial selection; X is small). */
static uint64_t s_top_sum(const uint64_t *v, int X, int n, int *order) {
    for (int e = 0; e < X; e++) order[e] = e;
    uint64_t sum = 0;
    for (int i = 0; i < n && i < X; i++) {
        int best = i;
        for (int j = i + 1; j < X; j++)
            if (v[order[j]] > v[order[best]]) best = j;
        int t = order[i];
        order[i] = order[best];
        order[best] = t;
        sum += v[order[i]];
    }
    return sum;
}

static double s_pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

/* One layer: its table, its top-N share, its most frequent pairs. */
static void s_print_layer(const heat_table *h, int l, int top, int n_pairs, int *order) {
    const int X = h->n_expert;
    const uint64_t *c = s_layer(h, l);
    uint64_t sel = 0;
    for (int e = 0; e < X; e++) sel += c[e];
    printf("layer %d: %llu rows, %llu selections\n", l, (unsigned long long)h->rows[l], (unsigned long long)sel);
    if (!sel) return;
    printf("  expert  selections  share of selections  rows that chose it\n");
    for (int e = 0; e < X; e++)
        printf("  %6d  %10llu  %18.1f%%  %17.1f%%\n", e, (unsigned long long)c[e], s_pct(c[e], sel),
               s_pct(c[e], h->rows[l]));
    uint64_t ts = s_top_sum(c, X, top, order);
    printf("  top %d experts take %.1f%% of the selections (uniform: %.1f%%)\n", top, s_pct(ts, sel),
           100.0 * (top < X ? top : X) / X);
    if (!h->pair || n_pairs <= 0) return;
    const size_t P = heat_n_pairs(X);
    const uint64_t *pc = h->pair + (size_t)l * P;
    printf("  chosen together most often:");
    for (int i = 0; i < n_pairs; i++) {
        size_t best = P;
        int ba = 0, bb = 0;
        for (int a = 0; a < X; a++) /* the i-th largest by repeated scan: pairs are few */
            for (int b = a + 1; b < X; b++) {
                size_t k = heat_pair_index(X, a, b);
                int seen = 0;
                for (int j = 0; j < i; j++) seen |= order[X + j] == (int)k;
                if (!seen && (best == P || pc[k] > pc[best])) best = k, ba = a, bb = b;
            }
        if (best == P || !pc[best]) break;
        order[X + i] = (int)best;
        printf("%s %d+%d (%.1f%% of rows)", i ? "," : "", ba, bb, s_pct(pc[best], h->rows[l]));
    }
    printf("\n");
}

/* The SVG heat map: one row per layer, one column per expert, darker = a
 * larger share of that layer's selections. */
static int s_plot(const heat_table *h, const char *path) {
    coli_outfile out;
    if (coli_outfile_open(&out, "--plot", path, 0) != 0) return cli_fail();
    FILE *fp = out.fp;
    const int X = h->n_expert, L = h->n_layer, cell = X > 64 ? 6 : 16, left = 60, topm = 30;
    const int width = left + X * cell + 20 > 440 ? left + X * cell + 20 : 440, height = topm + L * cell + 30;
    fprintf(fp,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
            "font-size=\"10\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            width, height);
    fprintf(fp,
            "<text x=\"%d\" y=\"14\">expert heat: share of each layer's selections (%d layers x %d experts)</text>\n",
            left, L, X);
    for (int l = 0; l < L; l++) {
        const uint64_t *c = s_layer(h, l);
        uint64_t sel = 0, max = 0;
        for (int e = 0; e < X; e++) {
            sel += c[e];
            if (c[e] > max) max = c[e];
        }
        if (L <= 64 || l % 8 == 0)
            fprintf(fp, "<text x=\"4\" y=\"%d\">layer %d</text>\n", topm + l * cell + cell - 3, l);
        for (int e = 0; e < X; e++) {
            double f = max ? (double)c[e] / (double)max : 0.0; /* 1 = the layer's hottest */
            int shade = 255 - (int)(f * 235.0);
            fprintf(fp,
                    "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"rgb(255,%d,%d)\" stroke=\"#ddd\">"
                    "<title>layer %d expert %d: %.1f%%</title></rect>\n",
                    left + e * cell, topm + l * cell, cell, cell, shade, shade, l, e, s_pct(c[e], sel));
        }
    }
    fprintf(fp, "<text x=\"%d\" y=\"%d\">experts 0..%d (left to right); darker = hotter</text>\n</svg>\n", left,
            topm + L * cell + 18, X - 1);
    return coli_outfile_commit(&out) ? cli_fail() : 0;
}

static void s_print(const heat_table *h, const char *path, int top, int pairs) {
    uint64_t total = heat_total(h), top_total = 0;
    int *order = malloc(((size_t)h->n_expert + (size_t)(pairs > 0 ? pairs : 0) + 1) * sizeof *order);
    if (!order) return;
    printf("heat file %s: %d layers x %d experts, %llu selections\n", path, h->n_layer, h->n_expert,
           (unsigned long long)total);
    for (int l = 0; l < h->n_layer; l++) {
        s_print_layer(h, l, top, pairs, order);
        top_total += s_top_sum(s_layer(h, l), h->n_expert, top, order);
    }
    printf("all layers: the top %d experts of each layer take %.1f%% of the routed selections (uniform: %.1f%%)\n", top,
           s_pct(top_total, total), 100.0 * (top < h->n_expert ? top : h->n_expert) / h->n_expert);
    free(order);
}

int cmd_heat(int argc, char **argv) {
    int top = 0, pairs = 3;
    const char *plot = NULL, *file = NULL;
    arg_spec specs[] = {
        {"--top", NULL, ARG_INT, &top, 1, HEAT_MAX_EXPERTS, 0, "N",
         "share of the N hottest experts per layer (default: a quarter)"},
        {"--pairs", NULL, ARG_INT, &pairs, 0, 100, 0, "N", "co-selected pairs shown per layer (default 3)"},
        {"--plot", NULL, ARG_STR, &plot, 0, 0, 0, "OUT.svg", "also write an SVG heat map, layers x experts"},
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    const char *pos[1] = {NULL};
    int n_pos = 0;
    int rc = args_parse("heat", argc, argv, specs, n_specs, pos, 1, &n_pos);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "heat", "FILE [--top N] [--pairs N] [--plot OUT.svg]",
                   "Print an expert heat file (written by run/serve with --heat, or MODEL.heat): per layer\n"
                   "each expert's selections, the share the top N take, the pairs chosen together most.",
                   specs, n_specs);
        return 0;
    }
    if (rc) return rc;
    if (!n_pos) return args_error("heat", "FILE", "required (a heat file)");
    file = pos[0];
    heat_table h;
    if (heat_read(file, &h) != 0) return cli_fail();
    if (!top) top = h.n_expert >= 4 ? h.n_expert / 4 : 1;
    s_print(&h, file, top, pairs);
    rc = plot ? s_plot(&h, plot) : 0;
    heat_free(&h);
    return rc;
}
