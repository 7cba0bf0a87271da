/*
 * heat.h - how often the router picked each expert: per (layer, expert)
 * selection counts, co-selection pairs, and the heat file that keeps them
 * across runs (docs/scheduler.md, "Heat").
 *
 * Heat file, version 1 (little-endian, every field unsigned):
 *
 *   offset 0   "COLIHEAT"                 8 bytes
 *          8   u32 version = 1
 *         12   u32 n_layer                1..HEAT_MAX_LAYERS
 *         16   u32 n_expert               1..HEAT_MAX_EXPERTS
 *         20   u32 flags                  bit 0: pair counts present (n_expert <= HEAT_PAIR_MAX_EXPERTS)
 *         24   u64 rows[n_layer]          tokens routed through each layer
 *              u64 count[n_layer][n_expert]  times expert e was among a token's k
 *              u64 pair[n_layer][n_expert*(n_expert-1)/2]  (flag 0) times a<b were chosen together
 *              u64 checksum               FNV-1a 64 of every byte before it
 *
 * Reading checks the magic, the version, the flags, the shape limits, that
 * the size is exactly what the header says, the checksum, and that no count
 * exceeds its layer's rows (nor a pair its experts' counts): a truncated or
 * hostile file is refused (COLI_EFORMAT) with one line naming it.
 */
#ifndef COLI_COORD_HEAT_H
#define COLI_COORD_HEAT_H

#include <stddef.h>
#include <stdint.h>

#define HEAT_VERSION 1
#define HEAT_MAX_LAYERS 4096
#define HEAT_MAX_EXPERTS 4096
#define HEAT_PAIR_MAX_EXPERTS 128 /* more experts: no pair counts (they would be MiBs per layer) */

typedef struct heat_table {
    int n_layer, n_expert;
    uint64_t *rows;  /* (n_layer) tokens routed through the layer */
    uint64_t *count; /* (n_layer, n_expert) selections of each expert */
    uint64_t *pair;  /* (n_layer, heat_n_pairs) co-selections, NULL when n_expert is too large */
} heat_table;

/* Pairs a<b of n experts (n (n-1) / 2). */
size_t heat_n_pairs(int n_expert);
/* Index of the pair (a, b), a != b, in a layer's pair counts. */
size_t heat_pair_index(int n_expert, int a, int b);

/* Zeroed counts for n_layer x n_expert. 0, COLI_EINVAL (shape out of limits) or COLI_ENOMEM. */
int heat_init(heat_table *h, int n_layer, int n_expert);
void heat_free(heat_table *h);

/* Count n_tok tokens of layer: sel (n_tok, k) their chosen experts. Ids out
 * of range are skipped (the executor refuses them anyway). */
void heat_add(heat_table *h, int layer, int64_t n_tok, int k, const int32_t *sel);
/* dst += src; COLI_EINVAL when the shapes differ. */
int heat_merge(heat_table *dst, const heat_table *src);
/* Sum of the selections of every layer (0: no heat). */
uint64_t heat_total(const heat_table *h);

/* Read path into *h (initialised here; heat_free it). COLI_EIO when it
 * cannot be opened or read, COLI_EFORMAT when it is
 * not a valid heat file; the message names the file and the reason. */
int heat_read(const char *path, heat_table *h);
/* Write h to path atomically (a temporary file renamed over it). 0 or COLI_EIO. */
int heat_write(const heat_table *h, const char *path);

#endif
