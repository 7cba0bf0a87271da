/*
 * xdna_helper_abi.h - the C ABI between the XDNA plugin (pure C, no XRT) and
 * its helper library libcoli-xdna-helper.so (C++, the only code that touches
 * XRT). Generation 2: seven entry points, all extern "C", none of which lets
 * an exception out (each catches everything and returns an XDNA_E* code with
 * the reason in last_error).
 *
 * The plugin dlopens the helper by absolute path (beside the plugin, never a
 * search path) and resolves every symbol below; a helper whose abi_version is
 * not XDNA_HELPER_ABI, or that lacks one symbol, is refused as a whole and the
 * verdict holds for the life of the process.
 *
 * Numbers: A (activations) is M x K BF16 row-major, B (the prepared weight
 * image) is N x K BF16 row-major (GGML's row order: one row per output), C is
 * M x N F32. M is the artifact's bucket (64 or 256): the caller pads rows.
 */
#ifndef COLI_XDNA_HELPER_ABI_H
#define COLI_XDNA_HELPER_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define XDNA_HELPER_ABI 2

/* Status codes (0 = success). XDNA_E_* map to the diagnostic names of
 * xdna_helper_code_name (xdna_loader.c). */
enum {
    XDNA_SUCCESS = 0,
    XDNA_E_ARG = -1,        /* HELPER_BAD_ARGUMENT: a caller error */
    XDNA_E_DEVICE = -2,     /* DEVICE_UNAVAILABLE: xrt::device could not open */
    XDNA_E_XCLBIN = -3,     /* XCLBIN_LOAD_FAILED: xclbin read or registration */
    XDNA_E_HWCTX = -4,      /* HW_CONTEXT_FAILED: hardware context or kernel */
    XDNA_E_BO = -5,         /* BO_ALLOC_FAILED: a buffer object */
    XDNA_E_SYNC = -6,       /* SYNC_FAILED: a buffer sync to or from the device */
    XDNA_E_START = -7,      /* RUN_START_FAILED: the run did not start */
    XDNA_E_RUN = -8,        /* RUN_FAILED: the run ended in a state other than completed */
    XDNA_E_TIMEOUT = -9,    /* RUN_TIMEOUT: no completion within the timeout */
    XDNA_E_EXCEPTION = -10, /* HELPER_EXCEPTION: anything else that was thrown */
};

/* One artifact of the package, as the helper needs it. Paths are absolute
 * (the plugin resolved and verified them). */
typedef struct xdna_artifact_desc {
    const char *xclbin_path;
    const char *instr_path;  /* instruction stream: little-endian uint32 words */
    const char *kernel_name; /* e.g. "MLIR_AIE" */
    int64_t m, k, n;         /* bucket rows, inner, output columns */
} xdna_artifact_desc;

typedef struct xdna_open_args {
    unsigned device_index;
    const xdna_artifact_desc *artifacts;
    int n_artifacts;
    uint32_t timeout_ms; /* per run; 0 = the helper's default (5000) */
} xdna_open_args;

typedef struct xdna_session xdna_session; /* device + one hw context per artifact */
typedef struct xdna_weight xdna_weight;   /* a weight image in a device buffer */

typedef uint32_t (*xdna_abi_version_fn)(void);
/* Open the device and every artifact (xclbin registered, hardware context,
 * kernel, instruction buffer). All or nothing. */
typedef int (*xdna_open_fn)(const xdna_open_args *args, xdna_session **out);
/* Copy the N x K BF16 image b into a device buffer for artifact `artifact`. */
typedef int (*xdna_wrap_weight_fn)(xdna_session *s, int artifact, const uint16_t *b, size_t n_elems, xdna_weight **out);
/* c (M x N F32) = a (M x K BF16) . w^T on the NPU, M = the artifact's bucket. */
typedef int (*xdna_execute_fn)(xdna_session *s, xdna_weight *w, const uint16_t *a, float *c);
typedef void (*xdna_release_weight_fn)(xdna_session *s, xdna_weight **w);
typedef void (*xdna_shutdown_fn)(xdna_session **s);
/* The reason of the last failure of this thread ("" if none); owned by the helper. */
typedef const char *(*xdna_last_error_fn)(void);

#define XDNA_SYM_ABI_VERSION "coli_xdna_abi_version"
#define XDNA_SYM_OPEN "coli_xdna_open"
#define XDNA_SYM_WRAP_WEIGHT "coli_xdna_wrap_weight"
#define XDNA_SYM_EXECUTE "coli_xdna_execute"
#define XDNA_SYM_RELEASE_WEIGHT "coli_xdna_release_weight"
#define XDNA_SYM_SHUTDOWN "coli_xdna_shutdown"
#define XDNA_SYM_LAST_ERROR "coli_xdna_last_error"

#ifdef __cplusplus
}
#endif
#endif /* COLI_XDNA_HELPER_ABI_H */
