/*
 * moe_exec.h - how the forward pass gets its expert outputs.
 *
 * The forward pass routes each token to k experts, then asks an executor
 * for every (token, slot) output and combines them itself, in slot order:
 *
 *   h[t] += sum_{s=0..k-1} weight[t][s] * y[t][s]
 *
 * so the sum is the same whichever executor (in-process, local workers,
 * remote workers, CPU fallback) computed which expert. Executors only
 * compute; they never combine.
 */
#ifndef COLI_COORD_MOE_EXEC_H
#define COLI_COORD_MOE_EXEC_H

#include <stdint.h>

struct gguf_file;
struct coli_settings;

typedef struct moe_exec moe_exec;

/* The most tokens one run_layer call carries: the forward pass evaluates
 * longer inputs in chunks of this many (forward.h's FORWARD_MAX_BATCH), so an
 * executor can size its buffers (a worker ring's slots) without the forward pass. */
#define MOE_EXEC_MAX_TOKENS 512

struct moe_exec {
    /* y (n_tok, k, n_embd): y[t][s] = expert_{ids[t*k+s]} of layer applied to
     * x[t] (x: (n_tok, n_embd)). Returns 0 or a negative coli_status; an
     * executor with fallbacks returns an error only when no path is left. */
    int (*run_layer)(moe_exec *self, int layer, const float *x, int64_t n_tok, int k, const int32_t *ids, float *y);
    /* Write the executor's stats (workers, fallbacks) as JSON / text;
     * malloc'd, caller frees. Optional (NULL: none). */
    int (*stats_json)(moe_exec *self, char **json);
    int (*stats_text)(moe_exec *self, char **text);
    void (*destroy)(moe_exec *self);
    /* Optional (NULL: "inproc" for every pair): the device that computed
     * pair p (t * k + s) of the last run_layer, e.g. "cpu:1", "cuda:0",
     * "inproc"; a static or executor-owned string valid until the next call. */
    const char *(*pair_device)(moe_exec *self, int64_t pair);
    /* Optional (NULL: every expert): 1 when this process computes expert
     * (layer, e) itself as placed at start (nobody else holds it). The
     * coordinator prefaults only the dense weights and these: an expert a
     * worker or host holds is never touched here while it is up (the disk
     * tier: none, it reads its experts itself). */
    int (*computes_here)(moe_exec *self, int layer, int expert);
    /* Set by the caller around one run_layer, NULL otherwise: work of its own
     * that does not depend on the experts (a shared expert). An executor whose
     * experts compute elsewhere calls side(side_arg) once while they do (sent,
     * not yet waited for); one that computes them here leaves it to the
     * caller, which does it after run_layer when it was not called. */
    void (*side)(void *arg);
    void *side_arg;
};

struct coli_byte_range;
/* The parts of the mapped model f this process should prefault with
 * executor e: everything but the expert tensors of its n_layer layers, plus
 * each expert e->computes_here says it computes (all with computes_here
 * NULL). *out malloc'd (caller frees), *n ranges. 0 or COLI_ENOMEM. */
int moe_exec_prefault_ranges(moe_exec *e, const struct gguf_file *f, int n_layer, int n_expert,
                             struct coli_byte_range **out, int *n);

/* What an executor needs to know to start. */
typedef struct moe_exec_config {
    const char *model_path;       /* the GGUF file (workers map it themselves) */
    const struct gguf_file *gguf; /* the coordinator's own mapping of it */
    int n_layer, n_expert, n_expert_used;
    int64_t n_embd, n_ff;   /* n_ff: expert FFN length */
    const char *devices;    /* the --devices string, NULL = default */
    int n_threads;          /* compute threads for in-process work */
    struct coli_pool *pool; /* optional: the forward pass's pool, which the in-process
                                   executor then shares (NULL: it starts its own) */
    int verbose;
    const struct coli_settings *settings; /* the environment as read at load (core/settings.h);
                                             NULL: read it when the executor starts */
    const uint64_t *heat;                 /* optional (n_layer, n_expert) selection counts: placement
                                   follows them (coordinator/sched/heat_place.c); NULL: bytes */
    const char *pins;                     /* optional "L:E=DEV,L:*=DEV" placements that win over heat */
} moe_exec_config;

/* The one way rows are grouped by expert (both executors): a stable counting
 * sort. Writes to out[0..n) the items (items[0..n), or 0..n-1 when items is
 * NULL) ordered by their expert ids[item] (each in [0, n_expert)); items of
 * one expert keep their order. start: (n_expert + 1) int64 of scratch; on
 * return start[e] is expert e's first position in out, start[n_expert] = n. */
void moe_group_by_expert(const int32_t *ids, const int64_t *items, int64_t n, int n_expert, int64_t *start,
                         int64_t *out);

/* In-process: the cpu plugin's vtable called directly, no workers. */
int moe_exec_inproc_new(const moe_exec_config *cfg, moe_exec **out);
/* In-process with a RAM budget: experts read from the file into a RAM expert
 * cache of ram_bytes (coordinator/sched/disk_tier.c; `--devices inproc@ram=SIZE`). */
int moe_exec_disk_new(const moe_exec_config *cfg, uint64_t ram_bytes, moe_exec **out);
/* The RAM budget of the disk tier for in-process experts: SIZE of
 * "inproc@ram=SIZE"; for "inproc", "auto" or none (when they run in-process)
 * a budget chosen from the memory this process may use when file f does not
 * fit in it (set->disk_auto; docs/scheduler.md "Tiers"); else 0: the mapped
 * file. 0 or COLI_EINVAL. */
int moe_exec_ram_budget(const char *devices, const struct gguf_file *f, const struct coli_settings *set,
                        uint64_t *bytes);
/* Worker processes, one per device, with CPU fallback (coordinator/sched/scheduler.c). */
int moe_exec_workers_new(const moe_exec_config *cfg, moe_exec **out);

#endif
