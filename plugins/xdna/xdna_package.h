/*
 * xdna_package.h - the NPU lane's artifact package, its registry, the
 * SHA-256 check of every file, the per-expert gates, and the names of every
 * diagnostic the lane reports. Pure C, no XRT: used by the plugin (before the
 * helper loads), by `coli xdna check` and by the package builder (xdna_pack).
 *
 * A package is a directory holding registry.txt and the files it names:
 *
 *     coli-xdna-registry 1
 *     # one line per artifact: one op, one M bucket, one shape, one weight type
 *     artifact op=ffn_gate bucket=64 k=64 n=128 wtype=F32 a=BF16 b=BF16 c=F32 kernel=MLIR_AIE
 *              xclbin=ffn_gate_m64_k64_n128_f32.xclbin xclbin_sha256=<64 hex>
 *              instr=ffn_gate_m64_k64_n128_f32.insts instr_sha256=<64 hex>
 *
 * (one line in the file). op: ffn_gate | ffn_up | ffn_down (the expert FFN's
 * matrices; k = the op's input width, n = its output rows); bucket: 64 | 256;
 * wtype: the GGUF type of the source weights (converted to the BF16 image);
 * a, b, c: the only combination the lane computes, BF16 x BF16 -> F32. Names
 * are relative and stay inside the package (no absolute path, no "..", no
 * symbolic link that resolves outside).
 */
#ifndef COLI_XDNA_PACKAGE_H
#define COLI_XDNA_PACKAGE_H

#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define XDNA_REGISTRY_FILE "registry.txt"
#define XDNA_REGISTRY_MAGIC "coli-xdna-registry"
#define XDNA_PACKAGE_DIRNAME "xdna-package" /* beside the plugin, unless COLI_XDNA_PACKAGE */
#define XDNA_MAX_ARTIFACTS 128
#define XDNA_NAME_MAX 200

/* Every diagnostic the lane reports, in the order they can arise. The name is
 * the fallback reason counted in stats (and the first word of the message). */
typedef enum xdna_diag {
    XDNA_OK = 0,
    XDNA_NOT_REQUESTED,      /* neither --xdna nor COLI_XDNA=<non-zero> */
    XDNA_PACKAGE_MISSING,    /* no package directory, or no registry in it */
    XDNA_REGISTRY_INVALID,   /* bad line, hash text, duplicate row, escaping name */
    XDNA_PACKAGE_INCOMPLETE, /* a file the registry names is absent */
    XDNA_INTEGRITY_FAILED,   /* a file's SHA-256 is not the registry's */
    XDNA_HELPER_UNAVAILABLE, /* helper absent, unloadable, other ABI, missing symbol */
    XDNA_DEVICE_UNAVAILABLE, /* the NPU did not open (process-scoped) */
    XDNA_XCLBIN_LOAD_FAILED,
    XDNA_HW_CONTEXT_FAILED,
    XDNA_BO_ALLOC_FAILED,
    XDNA_SYNC_FAILED,
    XDNA_RUN_START_FAILED,
    XDNA_RUN_FAILED,
    XDNA_RUN_TIMEOUT,
    XDNA_NAN_OUTPUT, /* non-finite output for finite input */
    XDNA_HELPER_EXCEPTION,
    XDNA_HELPER_BAD_ARGUMENT,
    XDNA_DECLINED_OP,     /* gate 1: the op is not in the registry */
    XDNA_DECLINED_SHAPE,  /* gate 2: (K, N) not registered for the op */
    XDNA_DECLINED_DTYPE,  /* gate 2: the weight type not registered for the shape */
    XDNA_DECLINED_ROWS,   /* gate 3: more than 256 rows */
    XDNA_DECLINED_BUCKET, /* gate 3: no artifact for the rows' bucket */
    XDNA_IMAGE_FAILED,    /* gate 4: the weight image could not be prepared */
    XDNA_DIAG_COUNT
} xdna_diag;

/* "PACKAGE_MISSING", ...; "OK" for XDNA_OK. */
const char *xdna_diag_name(xdna_diag d);

/* Writes "<DIAG>: <prefix><message>" into why (why_len bytes, truncated; nothing when why is
 * NULL or why_len 0): the one layout of a diagnosis line for the package reader and the plugin. */
void xdna_vwhy(xdna_diag d, const char *prefix, char *why, size_t why_len, const char *fmt, va_list ap);

typedef enum xdna_op {
    XDNA_OP_GATE = 0,
    XDNA_OP_UP,
    XDNA_OP_DOWN,
    XDNA_N_OPS
} xdna_op;
const char *xdna_op_name(xdna_op op); /* "ffn_gate", "ffn_up", "ffn_down" */

typedef struct xdna_artifact {
    xdna_op op;
    int64_t bucket, k, n;
    int32_t wtype; /* GGUF type id of the source weights */
    char kernel[64];
    char xclbin[XDNA_NAME_MAX], instr[XDNA_NAME_MAX]; /* relative to the package */
    unsigned char xclbin_sha[32], instr_sha[32];
} xdna_artifact;

typedef struct xdna_package {
    char dir[PATH_MAX];  /* as given */
    char real[PATH_MAX]; /* realpath of dir */
    xdna_artifact art[XDNA_MAX_ARTIFACTS];
    int n;
} xdna_package;

/* The package directory the lane uses: package if not "" (coli_settings'
 * xdna_package: COLI_XDNA_PACKAGE), else <plugin_dir>/xdna-package. Writes
 * into out (n bytes). */
void xdna_package_default_dir(const char *package, const char *plugin_dir, char *out, size_t n);

/* The provisioning gate, cheapest first: registry present and valid, every
 * named file present, every file's SHA-256 as registered. Returns XDNA_OK or
 * the diagnostic (PACKAGE_MISSING, REGISTRY_INVALID, PACKAGE_INCOMPLETE naming
 * the artifact and file, INTEGRITY_FAILED naming the file) with a one-line
 * reason in why. Reads only; nothing is kept from a failed attempt. */
xdna_diag xdna_package_load(const char *dir, xdna_package *p, char *why, size_t why_len);

/* Parse registry text (NUL-terminated) into p (p->dir must be set); no file
 * is opened. XDNA_OK or XDNA_REGISTRY_INVALID with the line in why. */
xdna_diag xdna_registry_parse(const char *text, xdna_package *p, char *why, size_t why_len);

/* SHA-256 of a file (libsodium). 0, or -1 with the reason in why. */
int xdna_sha256_file(const char *path, unsigned char out[32], char *why, size_t why_len);
void xdna_sha256_hex(const unsigned char h[32], char out[65]);

/* The M bucket of n_rows: 64 (1..64), 256 (65..256), 0 (more: declined). */
int64_t xdna_bucket_of(int64_t n_rows);

/* The expert FFN as the gates see it. */
typedef struct xdna_expert_shape {
    int64_t n_embd, n_ff;
    int32_t types[XDNA_N_OPS]; /* gate, up, down weight types */
} xdna_expert_shape;

/* Gates 1-2 for one op of an expert, in order: op qualified, (K, N) as
 * registered, weight type as registered. XDNA_OK or the DECLINED_* code. */
xdna_diag xdna_gate_op(const xdna_package *p, const xdna_expert_shape *e, xdna_op op, char *why, size_t why_len);

/* The artifact for (op, bucket) of this expert (gates 1-3 passed), or -1. */
int xdna_find_artifact(const xdna_package *p, const xdna_expert_shape *e, xdna_op op, int64_t bucket);

#endif
