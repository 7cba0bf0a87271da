/*
 * gpu_host.h - the GPU plugin's host-side bookkeeping, in plain C (built by
 * the host compiler, linked into libcoli-cuda.so / libcoli-hip.so, and
 * tested on machines without a GPU): fault-injection spec, the default
 * memory budget. Its table of resident experts is core/expert_table.h.
 */
#ifndef COLI_GPU_HOST_H
#define COLI_GPU_HOST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- fault injection (tests only) ------------------------------------------
 * Spec: comma list of KIND@N (the Nth event of that kind fails, 1-based) or
 * KIND@N+ (the Nth and every later one fails). Kinds:
 *   alloc   device allocations (expert uploads and scratch)
 *   h2d     host-to-device copies of expert weights
 *   launch  kernel launches
 * e.g. "alloc@2,launch@5", "alloc@3+" (device full after two allocations).
 * A failing event is made to fail for real inside the runtime (impossible
 * allocation size, copy to NULL, launch with a zero-sized block), so the
 * plugin's genuine error paths run. */
typedef enum gpu_fault_kind {
    GPU_FAULT_ALLOC = 0,
    GPU_FAULT_H2D,
    GPU_FAULT_LAUNCH,
    GPU_FAULT_KINDS
} gpu_fault_kind;

#define GPU_FAULT_MAX_AT 8

typedef struct gpu_faults {
    uint64_t seen[GPU_FAULT_KINDS];                     /* events counted so far */
    uint64_t at[GPU_FAULT_KINDS][GPU_FAULT_MAX_AT];     /* event numbers that fail */
    uint8_t from_on[GPU_FAULT_KINDS][GPU_FAULT_MAX_AT]; /* 1: that one and all later */
    int n_at[GPU_FAULT_KINDS];
    uint64_t fired[GPU_FAULT_KINDS]; /* failures injected so far */
} gpu_faults;

/* Parse spec (NULL or "" = no faults) into f. 0, or COLI_EINVAL with the bad
 * entry named in err. */
int gpu_faults_parse(const char *spec, gpu_faults *f, char *err, size_t err_len);
/* Count one event of kind k; 1 if it must fail. */
int gpu_faults_next(gpu_faults *f, gpu_fault_kind k);
const char *gpu_fault_kind_name(gpu_fault_kind k);

// ----------------------------------------------------------------------------
// memory

/* What the plugin keeps free on the device for its own scratch (activations,
 * intermediate rows) and the runtime's context: the larger of 1 GiB and 5 %
 * of the device. */
uint64_t gpu_reserve_bytes(uint64_t total_bytes);
/* Budget when the caller gives none: free memory minus the reserve (the
 * coordinator subtracts any dense share before it passes a budget). */
uint64_t gpu_default_budget(uint64_t free_bytes, uint64_t total_bytes);
/* Device allocations are rounded up to this, so the budget counts what the
 * device really gives out. */
#define GPU_ALLOC_ALIGN 256
static inline uint64_t gpu_align_up(uint64_t n) { return (n + GPU_ALLOC_ALIGN - 1) & ~(uint64_t)(GPU_ALLOC_ALIGN - 1); }

/* ---- IQ grids ---------------------------------------------------------------
 * The codebooks the IQ types index (core/quant/quant_tables_iq*.c), in
 * gpu_grids' field order (gpu_blocks_iq.h): IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S
 * (64-bit points), IQ3_XXS, IQ3_S (32-bit). The plugin copies them to the
 * device once at open. */
#define GPU_HOST_GRIDS 6
void gpu_grid_sources(const void *src[GPU_HOST_GRIDS], size_t bytes[GPU_HOST_GRIDS]);

/* "1.50 GiB", "12.0 MiB", "512 B" into buf (returns buf). */
const char *gpu_fmt_bytes(char *buf, size_t n, uint64_t bytes);

#ifdef __cplusplus
}
#endif
#endif
