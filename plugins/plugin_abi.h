/*
 * plugin_abi.h - the one header a device vendor implements.
 *
 * A plugin is a shared library (libcoli-<name>.so) that exports exactly one
 * symbol:
 *
 *     const struct moe_plugin *moe_plugin_get(void);
 *
 * The worker process dlopens it, checks abi_major (a different major is
 * refused and both numbers are logged) and struct_size (members past it are
 * treated as NULL), then drives it: probe -> open -> load experts -> run
 * batches -> stats -> close. The worker speaks ZeroMQ; the plugin never does.
 *
 * Conventions: functions return 0 on success or a negative coli_status
 * value (see colibri.h: -7 = device failure, -5 = out of memory, ...) and
 * then write a one-line reason into err[0..err_len). Sizes are int64_t or
 * size_t, never int products. A plugin never calls exit() or abort().
 *
 * Shapes: weights follow GGML (see core/tensor.h): gate and up are n_ff rows
 * of n_embd values, down is n_embd rows of n_ff values, row-major, in the
 * dtype given (F32=0, F16=1, Q4_0=2, Q8_0=8, BF16=30, the GGML type ids).
 * Activations and outputs are F32, rows of n_embd values.
 */
#ifndef COLI_PLUGIN_ABI_H
#define COLI_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_PLUGIN_ABI_MAJOR 1
#define MOE_PLUGIN_ABI_MINOR \
    4 /* 1.1: get_counters; 1.2: unload_expert; 1.3: moe_caps.dtype_mask_hi;
                                  1.4: moe_caps.act_mask, moe_expert_desc.act and biases */
#define MOE_PLUGIN_SYMBOL "moe_plugin_get"

typedef struct moe_device moe_device; /* the plugin's own state for one device */

typedef struct moe_open_opts {
    int device_index;       /* vendor ordinal (cuda:1 -> 1); 0 for cpu */
    int n_threads;          /* host threads the plugin may use; 0 = its choice */
    uint64_t memory_budget; /* bytes of expert weights it may hold; 0 = its default */
    const char *fault;      /* test-only fault spec (e.g. "alloc@3,launch@5"); NULL = none */
} moe_open_opts;

typedef struct moe_caps {
    uint32_t dtype_mask;    /* bit (1u << dtype) set for each weight type it computes */
    int64_t max_rows;       /* largest batch of rows one run call takes; 0 = unbounded */
    uint64_t memory_total;  /* bytes on the device (0 = host memory) */
    uint64_t memory_budget; /* bytes it will hold for experts */
    char device_name[64];   /* e.g. "NVIDIA H200", "cpu (avx2)" */
    uint32_t dtype_mask_hi; /* (1.3) bit (1u << (dtype - 32)) for the types 32..63 (TQ1_0, TQ2_0, MXFP4);
                               the worker zeroes caps first, so an older plugin reports none */
    uint32_t act_mask;      /* (1.4) bit (1u << act) for each moe_expert_desc.act it computes besides
                               MOE_ACT_SILU, and MOE_ACT_BIASES when it adds the descriptor's biases;
                               0 (an older plugin): the worker refuses it any other expert (unsupported) */
} moe_caps;

#define MOE_ACT_SILU 0       /* down(silu(gate x) * up x): every family but gpt-oss */
#define MOE_ACT_SWIGLU_OAI 1 /* gpt-oss: llama.cpp's ggml_swiglu_oai with act_alpha, act_limit */
/* kimi-k3: llama.cpp's situ, act_alpha = situ_beta, act_limit = situ_linear_beta:
 * h = alpha tanh(g / alpha) sigmoid(g) * limit tanh(u / limit) (limit <= 0: u) */
#define MOE_ACT_SITU 2
#define MOE_ACT_SWIGLU_CLAMP 3    /* deepseek4: llama.cpp's ggml_swiglu_clamp with act_limit (no biases) */
#define MOE_ACT_BIASES (1u << 31) /* act_mask bit: adds gate_bias / up_bias / down_bias */
/* the act_mask bits this ABI defines */
#define MOE_ACT_KNOWN \
    ((1u << MOE_ACT_SWIGLU_OAI) | (1u << MOE_ACT_SITU) | (1u << MOE_ACT_SWIGLU_CLAMP) | MOE_ACT_BIASES)

/* One expert's three matrices, as host pointers (into the mapped model file,
 * or a copy the worker owns). They stay valid until close(), or until
 * unload_expert of that expert. The plugin may use them in place (cpu) or
 * copy them to device memory (gpu). */
typedef struct moe_expert_desc {
    int32_t layer, expert;
    int64_t n_embd, n_ff;
    int32_t gate_type, up_type, down_type;
    const void *gate, *up, *down;
    size_t gate_bytes, up_bytes, down_bytes;
    /* (1.4) the activation and the F32 biases (gate, up: n_ff; down: n_embd; NULL: none), valid as
     * long as the matrices. MOE_ACT_SWIGLU_OAI: g = gate x + gate_bias, u = up x + up_bias,
     * x = min(g, limit), h = x / (1 + exp(-alpha x)) * (clamp(u, -limit, limit) + 1), out = down h +
     * down_bias. MOE_ACT_SWIGLU_CLAMP: x = min(gate x, limit), h = x / (1 + exp(-x)) *
     * clamp(up x, -limit, limit), out = down h. The worker hands such an expert only to a plugin whose act_mask has its bits. */
    int32_t act;
    float act_alpha, act_limit;
    const float *gate_bias, *up_bias, *down_bias;
} moe_expert_desc;

/* One group of a batch: n_rows consecutive rows of x (starting at row_begin)
 * all go through the same expert. */
typedef struct moe_batch_group {
    int32_t layer, expert;
    int64_t row_begin, n_rows;
} moe_batch_group;

/* One counter of the plugin's own (e.g. the xdna lane's runs per M bucket). */
typedef struct moe_counter {
    char name[32];  /* [a-z0-9_]+ */
    uint64_t value; /* since open */
} moe_counter;
#define MOE_MAX_COUNTERS 8

typedef struct moe_stats {
    uint64_t resident_experts; /* experts held in device memory right now */
    uint64_t resident_bytes;
    uint64_t calls, rows;                            /* run calls and rows computed since open */
    uint64_t failed_loads;                           /* load_expert calls that failed */
    double h2d_seconds, kernel_seconds, d2h_seconds; /* 0 where not applicable */
} moe_stats;

struct moe_plugin {
    uint32_t abi_major;   /* MOE_PLUGIN_ABI_MAJOR */
    uint32_t abi_minor;   /* MOE_PLUGIN_ABI_MINOR */
    uint32_t struct_size; /* sizeof(struct moe_plugin) as the plugin was built */
    const char *name;     /* "cpu", "cuda", "hip", "xdna" */

    /* (optional, default: 1 device, usable) How many devices this machine
     * offers; 0 with a reason in why when none can be used (library
     * missing, no device, driver too old). */
    int (*probe)(int *n_devices, char *why, size_t why_len);

    /* Open one device. On failure *out stays NULL and err says why. */
    int (*open)(const moe_open_opts *opts, moe_device **out, char *err, size_t err_len);

    /* Fill caps. */
    int (*get_caps)(moe_device *dev, moe_caps *caps);

    /* Take ownership of one expert. Either the expert is fully resident
     * afterwards, or (on failure) nothing of it is and the budget is
     * unchanged: never a half-uploaded tensor. */
    int (*load_expert)(moe_device *dev, const moe_expert_desc *e, char *err, size_t err_len);

    /* out[r] = expert_{group(r)}(x[r]) for every row of every group.
     * x and out: (n_rows_total, n_embd) F32, host memory. Each group's
     * expert must have been loaded. A failure leaves the device usable for
     * the next call (no sticky error). */
    int (*run)(moe_device *dev, const moe_batch_group *groups, int32_t n_groups, const float *x, int64_t n_rows_total,
               int64_t n_embd, float *out, char *err, size_t err_len);

    /* Fill stats. */
    int (*get_stats)(moe_device *dev, moe_stats *stats);

    /* Join threads, free device memory, set *dev to NULL. Accepts NULL. */
    void (*close)(moe_device **dev);

    /* (optional, ABI 1.1; check struct_size) Write up to cap counters of the
     * plugin's own into out; returns how many. The worker sends them with
     * each result; the coordinator shows them per worker in its stats. */
    int (*get_counters)(moe_device *dev, moe_counter *out, int cap);

    /* (optional, ABI 1.2; check struct_size) Drop one loaded expert: its
     * memory and its share of the budget are free again, and the plugin no
     * longer touches its descriptor's pointers. Unknown expert: COLI_EINVAL
     * (-1) with a reason, nothing changed. A plugin without it cannot serve
     * as a live expert cache (docs/scheduler.md). Never called during run. */
    int (*unload_expert)(moe_device *dev, int32_t layer, int32_t expert, char *err, size_t err_len);
};

/* Does plugin p (as built, struct_size) have member m set? */
#define MOE_PLUGIN_HAS(p, m) ((p)->struct_size >= offsetof(struct moe_plugin, m) + sizeof((p)->m) && (p)->m != NULL)

typedef const struct moe_plugin *(*moe_plugin_get_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* COLI_PLUGIN_ABI_H */
