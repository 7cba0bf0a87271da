/*
 * cpu_plugin.c - the cpu plugin over expert_ffn and the thread pool; see
 * cpu_plugin.h and plugins/plugin_abi.h.
 */
#include "plugins/cpu/cpu_plugin.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "colibri.h"
#include "core/clock.h"
#include "core/cpu_features.h"
#include "core/expert_table.h"
#include "core/kernels/expert_ffn.h"
#include "core/kernels/matmul.h"
#include "core/threadpool.h"

#define CPU_DEV_TAG 0xc0c0c9u
#define CPU_DTYPE_MASK coli_dtype_weight_mask() /* every type core/kernels/matmul computes */

/* One loaded expert, the value of its (layer, expert) in the device's table. */
typedef struct cpu_expert {
    expert_weights w; /* host pointers, not owned */
    size_t bytes;
} cpu_expert;

struct moe_device {
    uint32_t tag; /* CPU_DEV_TAG while open */
    coli_pool *pool;
    int owns_pool;        /* 0 when the pool is borrowed (coli_cpu_plugin_open_shared) */
    coli_scratch scratch; /* expert_ffn's buffers, reused across runs */
    uint64_t budget;      /* bytes of experts it may hold; 0 = no limit */
    expert_table experts; /* (layer, expert) -> cpu_expert* */
    moe_stats stats;      /* stats.resident_experts: experts.n */
};

static int s_fail(char *err, size_t err_len, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int s_fail(char *err, size_t err_len, int code, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

// ----------------------------------------------------------------------------
// the expert table

static cpu_expert *s_find_slot(const moe_device *d, int32_t layer, int32_t expert) {
    return expert_table_get(&d->experts, expert_key(layer, expert));
}

static void s_free_expert(void *val, void *arg) {
    (void)arg;
    free(val);
}

// ----------------------------------------------------------------------------
// vtable

static int s_cpu_probe(int *n_devices, char *why, size_t why_len) {
    if (n_devices) *n_devices = 1;
    if (why && why_len) why[0] = '\0';
    return 0;
}

static void s_cpu_close(moe_device **dev) {
    if (!dev || !*dev) return;
    moe_device *d = *dev;
    if (d->owns_pool) coli_pool_destroy(&d->pool);
    coli_scratch_free(&d->scratch);
    expert_table_free(&d->experts, s_free_expert, NULL);
    d->tag = 0xdeadbeefu;
    free(d);
    *dev = NULL;
}

/* Open with the given pool (borrowed) or, when pool is NULL, a pool of its own. */
static int s_cpu_open_with(const moe_open_opts *opts, coli_pool *pool, moe_device **out, char *err, size_t err_len) {
    if (!out) return s_fail(err, err_len, COLI_EINVAL, "cpu: open: NULL output");
    *out = NULL;
    if (!opts) return s_fail(err, err_len, COLI_EINVAL, "cpu: open: NULL options");
    if (opts->device_index != 0)
        return s_fail(err, err_len, COLI_EINVAL, "cpu: device %d does not exist (only 0)", opts->device_index);
    if (opts->n_threads < 0) return s_fail(err, err_len, COLI_EINVAL, "cpu: n_threads %d < 0", opts->n_threads);
    moe_device *d = calloc(1, sizeof *d);
    if (!d) return s_fail(err, err_len, COLI_ENOMEM, "cpu: open: out of memory");
    d->tag = CPU_DEV_TAG;
    d->budget = opts->memory_budget;
    d->owns_pool = pool == NULL;
    d->pool = pool ? pool : coli_pool_new(opts->n_threads);
    if (!d->pool) {
        int rc = s_fail(err, err_len, COLI_ENOMEM, "cpu: open: %s", coli_last_error());
        s_cpu_close(&d);
        return rc;
    }
    *out = d;
    return 0;
}

static int s_cpu_open(const moe_open_opts *opts, moe_device **out, char *err, size_t err_len) {
    return s_cpu_open_with(opts, NULL, out, err, err_len);
}

int coli_cpu_plugin_open_shared(const moe_open_opts *opts, coli_pool *pool, moe_device **out, char *err,
                                size_t err_len) {
    if (!pool) return s_fail(err, err_len, COLI_EINVAL, "cpu: open_shared: NULL pool");
    return s_cpu_open_with(opts, pool, out, err, err_len);
}

static uint64_t s_host_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

static int s_cpu_get_caps(moe_device *dev, moe_caps *caps) {
    if (!dev || !caps) return COLI_EINVAL;
    memset(caps, 0, sizeof *caps);
    caps->dtype_mask = (uint32_t)CPU_DTYPE_MASK;
    caps->dtype_mask_hi = (uint32_t)(CPU_DTYPE_MASK >> 32);
    /* expert_ffn computes all of them */
    caps->act_mask = (1u << MOE_ACT_SWIGLU_OAI) | (1u << MOE_ACT_SITU) | (1u << MOE_ACT_SWIGLU_CLAMP) | MOE_ACT_BIASES;
    caps->max_rows = 0;
    caps->memory_total = 0;
    caps->memory_budget = dev->budget ? dev->budget : s_host_memory();
    snprintf(caps->device_name, sizeof caps->device_name, "cpu (%s, %d threads)", coli_cpu_avx2() ? "avx2" : "portable",
             coli_pool_size(dev->pool));
    return 0;
}

/* Shapes, types and byte counts of a descriptor; 0 or an error in err. */
static int s_check_desc(const moe_expert_desc *e, char *err, size_t err_len) {
    const int32_t types[3] = {e->gate_type, e->up_type, e->down_type};
    const char *names[3] = {"gate", "up", "down"};
    const void *ptrs[3] = {e->gate, e->up, e->down};
    const size_t bytes[3] = {e->gate_bytes, e->up_bytes, e->down_bytes};
    if (e->n_embd <= 0 || e->n_ff <= 0)
        return s_fail(err, err_len, COLI_EINVAL, "cpu: expert %d/%d: bad shape n_embd %lld, n_ff %lld", e->layer,
                      e->expert, (long long)e->n_embd, (long long)e->n_ff);
    if (e->act != MOE_ACT_SILU && e->act != MOE_ACT_SWIGLU_OAI && e->act != MOE_ACT_SITU &&
        e->act != MOE_ACT_SWIGLU_CLAMP)
        return s_fail(err, err_len, COLI_EUNSUPPORTED, "cpu: expert %d/%d: activation %d not supported", e->layer,
                      e->expert, (int)e->act);
    for (int i = 0; i < 3; i++) {
        if (types[i] < 0 || !coli_dtype_valid((uint32_t)types[i]))
            return s_fail(err, err_len, COLI_EUNSUPPORTED, "cpu: expert %d/%d: %s type %s not supported", e->layer,
                          e->expert, names[i], coli_dtype_name((uint32_t)types[i]));
        int64_t n_in = i < 2 ? e->n_embd : e->n_ff, n_out = i < 2 ? e->n_ff : e->n_embd;
        coli_dtype t = (coli_dtype)types[i];
        if (n_in % coli_dtype_block_elems(t) != 0)
            return s_fail(err, err_len, COLI_EINVAL,
                          "cpu: expert %d/%d: %s rows of %lld not a multiple "
                          "of %lld for %s",
                          e->layer, e->expert, names[i], (long long)n_in, (long long)coli_dtype_block_elems(t),
                          coli_dtype_name(t));
        size_t want = coli_row_bytes(t, n_in) * (size_t)n_out;
        if (!ptrs[i] || bytes[i] != want)
            return s_fail(err, err_len, COLI_EINVAL,
                          "cpu: expert %d/%d: %s is %zu bytes at %p, "
                          "expected %zu",
                          e->layer, e->expert, names[i], bytes[i], ptrs[i], want);
    }
    return 0;
}

/* A new entry for e's (layer, expert) in the table, into *out. 0, COLI_EINVAL
 * (a negative layer or expert has no key) or COLI_ENOMEM. */
static int s_add_expert(moe_device *dev, const moe_expert_desc *e, cpu_expert **out) {
    cpu_expert *x = calloc(1, sizeof *x);
    if (!x) return COLI_ENOMEM;
    int rc = expert_table_put(&dev->experts, expert_key(e->layer, e->expert), x);
    if (rc) {
        free(x);
        return rc;
    }
    dev->stats.resident_experts = dev->experts.n;
    *out = x;
    return 0;
}

static int s_cpu_load_expert(moe_device *dev, const moe_expert_desc *e, char *err, size_t err_len) {
    if (!dev || dev->tag != CPU_DEV_TAG || !e)
        return s_fail(err, err_len, COLI_EINVAL, "cpu: load_expert: NULL or closed device or descriptor");
    int rc = s_check_desc(e, err, err_len);
    if (rc) {
        dev->stats.failed_loads++;
        return rc;
    }
    size_t bytes = e->gate_bytes + e->up_bytes + e->down_bytes;
    cpu_expert *s = s_find_slot(dev, e->layer, e->expert);
    uint64_t after = dev->stats.resident_bytes - (s ? s->bytes : 0) + bytes;
    if (dev->budget && after > dev->budget) {
        dev->stats.failed_loads++;
        return s_fail(err, err_len, COLI_ENOMEM,
                      "cpu: expert %d/%d: %zu bytes exceed the budget "
                      "(%llu of %llu bytes held)",
                      e->layer, e->expert, bytes, (unsigned long long)dev->stats.resident_bytes,
                      (unsigned long long)dev->budget);
    }
    if (!s && (rc = s_add_expert(dev, e, &s))) {
        dev->stats.failed_loads++;
        return rc == COLI_EINVAL
                   ? s_fail(err, err_len, rc, "cpu: expert %d/%d: a negative layer or expert", e->layer, e->expert)
                   : s_fail(err, err_len, rc, "cpu: expert %d/%d: out of memory", e->layer, e->expert);
    }
    dev->stats.resident_bytes = after;
    *s = (cpu_expert){
        .bytes = bytes,
        .w = {.gate = e->gate,
              .up = e->up,
              .down = e->down,
              .gate_type = (coli_dtype)e->gate_type,
              .up_type = (coli_dtype)e->up_type,
              .down_type = (coli_dtype)e->down_type,
              .n_embd = e->n_embd,
              .n_ff = e->n_ff,
              .act = (expert_act)e->act,
              .alpha = e->act_alpha,
              .limit = e->act_limit,
              .gate_bias = e->gate_bias,
              .up_bias = e->up_bias,
              .down_bias = e->down_bias},
    };
    return 0;
}

static int s_cpu_unload_expert(moe_device *dev, int32_t layer, int32_t expert, char *err, size_t err_len) {
    if (!dev || dev->tag != CPU_DEV_TAG)
        return s_fail(err, err_len, COLI_EINVAL, "cpu: unload_expert: NULL or closed device");
    cpu_expert *s = s_find_slot(dev, layer, expert);
    if (!s) return s_fail(err, err_len, COLI_EINVAL, "cpu: unload_expert: expert %d/%d is not loaded", layer, expert);
    dev->stats.resident_bytes -= s->bytes;
    expert_table_remove(&dev->experts, expert_key(layer, expert), NULL);
    dev->stats.resident_experts = dev->experts.n;
    free(s);
    return 0;
}

/* Every group names a loaded expert of width n_embd and rows inside x. */
static int s_check_groups(const moe_device *dev, const moe_batch_group *groups, int32_t n_groups, int64_t n_rows_total,
                          int64_t n_embd, char *err, size_t err_len) {
    for (int32_t i = 0; i < n_groups; i++) {
        const moe_batch_group *g = &groups[i];
        if (g->n_rows < 0 || g->row_begin < 0 || g->row_begin > n_rows_total || g->n_rows > n_rows_total - g->row_begin)
            return s_fail(err, err_len, COLI_EINVAL,
                          "cpu: run: group %d rows [%lld, +%lld) outside "
                          "the batch of %lld",
                          i, (long long)g->row_begin, (long long)g->n_rows, (long long)n_rows_total);
        const cpu_expert *s = s_find_slot(dev, g->layer, g->expert);
        if (!s)
            return s_fail(err, err_len, COLI_EINVAL,
                          "cpu: run: group %d: expert %d of layer %d "
                          "is not loaded",
                          i, g->expert, g->layer);
        if (s->w.n_embd != n_embd)
            return s_fail(err, err_len, COLI_EINVAL,
                          "cpu: run: group %d: n_embd %lld, expert %d/%d "
                          "has %lld",
                          i, (long long)n_embd, g->layer, g->expert, (long long)s->w.n_embd);
    }
    return 0;
}

static int s_cpu_run(moe_device *dev, const moe_batch_group *groups, int32_t n_groups, const float *x,
                     int64_t n_rows_total, int64_t n_embd, float *out, char *err, size_t err_len) {
    if (!dev || dev->tag != CPU_DEV_TAG) return s_fail(err, err_len, COLI_EINVAL, "cpu: run: NULL or closed device");
    if (n_groups < 0 || (n_groups > 0 && !groups) || n_rows_total < 0 || n_embd <= 0 ||
        (n_rows_total > 0 && (!x || !out)))
        return s_fail(err, err_len, COLI_EINVAL,
                      "cpu: run: bad arguments (%d groups, %lld rows, "
                      "n_embd %lld)",
                      n_groups, (long long)n_rows_total, (long long)n_embd);
    int rc = s_check_groups(dev, groups, n_groups, n_rows_total, n_embd, err, err_len);
    if (rc) return rc;
    double t0 = coli_now_s();
    /* up to EXPERT_FFN_MANY_MAX experts at a time: 2 pool jobs, not 3 each */
    for (int32_t i = 0; i < n_groups;) {
        expert_ffn_task tasks[EXPERT_FFN_MANY_MAX];
        int n = 0;
        const int32_t first = i;
        for (; i < n_groups && n < EXPERT_FFN_MANY_MAX; i++) {
            const moe_batch_group *g = &groups[i];
            const size_t off = (size_t)g->row_begin * (size_t)n_embd;
            tasks[n++] = (expert_ffn_task){&s_find_slot(dev, g->layer, g->expert)->w, x + off, out + off, g->n_rows};
            dev->stats.rows += (uint64_t)g->n_rows;
        }
        rc = expert_ffn_many(dev->pool, &dev->scratch, tasks, n);
        if (rc)
            return s_fail(err, err_len, rc, "cpu: run: experts of groups %d..%d: %s", first, i - 1, coli_last_error());
    }
    dev->stats.calls++;
    dev->stats.kernel_seconds += coli_now_s() - t0;
    /* A pool of our own serves a worker process: its next batch comes after
     * the coordinator's attention, which must not share its cores with our
     * spinning threads. A borrowed pool (in-process) goes on at once. */
    if (dev->owns_pool) coli_pool_stand_down();
    return 0;
}

static int s_cpu_get_stats(moe_device *dev, moe_stats *stats) {
    if (!dev || dev->tag != CPU_DEV_TAG || !stats) return COLI_EINVAL;
    *stats = dev->stats;
    return 0;
}

static const struct moe_plugin s_cpu_plugin = {
    .abi_major = MOE_PLUGIN_ABI_MAJOR,
    .abi_minor = MOE_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(struct moe_plugin),
    .name = "cpu",
    .probe = s_cpu_probe,
    .open = s_cpu_open,
    .get_caps = s_cpu_get_caps,
    .load_expert = s_cpu_load_expert,
    .run = s_cpu_run,
    .get_stats = s_cpu_get_stats,
    .close = s_cpu_close,
    .unload_expert = s_cpu_unload_expert,
};

const struct moe_plugin *coli_cpu_plugin(void) { return &s_cpu_plugin; }

const struct moe_plugin *moe_plugin_get(void) { return &s_cpu_plugin; }
