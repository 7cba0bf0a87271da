/*
 * test_gpu_plugin.c - the GPU plugin's own tests, through dlopen like the
 * worker: libcoli-cuda.so / libcoli-hip.so from $COLI_GPU_PLUGIN, or
 * $COLI_BUILD/lib/ (make CUDA=1 / HIP=1), or $COLI_BUILD/gpu/{cuda,hip}/
 * (make gpu-compile, which `make test` runs where a toolchain is present).
 *
 * Without a device: the probe's reason must be precise (driver library
 * missing, no device, driver older than runtime), open must fail with it,
 * and the host-side argument checks still run. Tests that need a device
 * skip, saying why. With one: kernels against the cpu plugin (the host
 * model of gpu_test_model.h for types the CPU path lacks) for every weight
 * type, decode (<= 8 rows) and prefill shapes; gpt-oss's SWIGLU_OAI with
 * biases and kimi-k3's SITU against the cpu plugin; unknown types, unknown
 * activations and rows that are not whole blocks refused; bad device id;
 * over-budget and oversized allocations; injected failures with the
 * accounting unchanged and no sticky error; stats.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "colibri.h"
#include "tests/gpu_test_util.h"
#include "plugins/gpu/gpu_host.h"
#include "plugins/gpu/gpu_math.h"
#include "tests/gpu_test_model.h"

#define MAX_PLUGINS 6

typedef struct gpu_plugin {
    char path[512];
    void *dl;
    const struct moe_plugin *p;
    int n_devices;
    char why[256];
} gpu_plugin;

/* ---- finding and loading ---------------------------------------------------------- */

static int find_plugins(char paths[][512], int cap) {
    const char *env = getenv("COLI_GPU_PLUGIN"), *build = getenv("COLI_BUILD");
    int n = 0;
    if (env && *env) {
        snprintf(paths[n++], 512, "%s", env);
        return n;
    }
    if (!build || !*build) build = "build";
    const char *rel[] = {"lib/libcoli-cuda.so", "lib/libcoli-hip.so", "gpu/cuda/libcoli-cuda.so",
                         "gpu/hip/libcoli-hip.so"};
    for (int i = 0; i < 4 && n < cap; i++) {
        snprintf(paths[n], 512, "%s/%s", build, rel[i]);
        if (access(paths[n], R_OK) == 0) n++;
    }
    return n;
}

/* dlopen + ABI checks + probe. 0, or -1 with why set (the plugin cannot load). */
static int load_plugin(gpu_plugin *g, const char *path) {
    memset(g, 0, sizeof *g);
    snprintf(g->path, sizeof g->path, "%s", path);
    g->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!g->dl) {
        const char *e = dlerror();
        snprintf(g->why, sizeof g->why, "%s", e ? e : "dlopen failed");
        return -1;
    }
    moe_plugin_get_fn get = (moe_plugin_get_fn)dlsym(g->dl, MOE_PLUGIN_SYMBOL);
    cr_assert(get, "%s: no symbol %s", path, MOE_PLUGIN_SYMBOL);
    g->p = get();
    cr_assert(g->p, "%s: moe_plugin_get returned NULL", path);
    cr_assert_eq(g->p->abi_major, MOE_PLUGIN_ABI_MAJOR, "%s: ABI major", path);
    cr_assert_eq(g->p->struct_size, sizeof(struct moe_plugin), "%s: struct_size", path);
    cr_assert(!strcmp(g->p->name, "cuda") || !strcmp(g->p->name, "hip"), "%s: name '%s'", path, g->p->name);
    char want[32];
    snprintf(want, sizeof want, "libcoli-%s.so", g->p->name);
    cr_assert(strstr(path, want), "%s: plugin calls itself '%s'", path, g->p->name);
    cr_assert(g->p->probe && g->p->open && g->p->get_caps && g->p->load_expert && g->p->run && g->p->get_stats &&
                  g->p->close,
              "%s: incomplete function table", path);
    cr_assert_eq(g->p->probe(&g->n_devices, g->why, sizeof g->why), 0, "%s: probe", path);
    return 0;
}

/* The first plugin with a device, or skip the test with every plugin's reason. */
static void need_device(gpu_plugin *g) {
    char paths[MAX_PLUGINS][512], reasons[4096] = "";
    const int n = find_plugins(paths, MAX_PLUGINS);
    if (n == 0) cr_skip_test("skipped: no GPU plugin built (make CUDA=1, HIP=1 or gpu-compile)");
    for (int i = 0; i < n; i++) {
        if (load_plugin(g, paths[i]) == 0 && g->n_devices > 0) return;
        size_t len = strlen(reasons);
        snprintf(reasons + len, sizeof reasons - len, "%s%.300s: %.250s", len ? "; " : "", paths[i], g->why);
        if (g->dl) dlclose(g->dl);
    }
    cr_skip_test("skipped: no GPU device (%s)", reasons);
}

static moe_device *open_dev(const gpu_plugin *g, uint64_t budget, const char *fault) {
    moe_open_opts o;
    memset(&o, 0, sizeof o);
    o.memory_budget = budget;
    o.fault = fault;
    moe_device *dev = NULL;
    char err[256] = "";
    cr_assert_eq(g->p->open(&o, &dev, err, sizeof err), 0, "open: %s", err);
    cr_assert(dev);
    return dev;
}

static moe_stats stats_of(const gpu_plugin *g, moe_device *dev) {
    moe_stats s;
    cr_assert_eq(g->p->get_stats(dev, &s), 0);
    return s;
}

static uint64_t expert_device_bytes(const moe_expert_desc *d) {
    return gpu_align_up(gpu_align_up(d->gate_bytes) + gpu_align_up(d->up_bytes) + d->down_bytes);
}

/* ---- without a device ------------------------------------------------------------------- */

static int reason_is_precise(const char *why) {
    const char *known[] = {"libcuda.so.1 not found", "no CUDA device",     "older than runtime", "no /dev/kfd",
                           "no HIP device",          "device count failed"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strstr(why, known[i])) return 1;
    return 0;
}

Test(gpu_plugin, probe_gives_a_precise_reason_and_open_fails_with_it) {
    char paths[MAX_PLUGINS][512];
    const int n = find_plugins(paths, MAX_PLUGINS);
    if (n == 0) cr_skip_test("skipped: no GPU plugin built (make CUDA=1, HIP=1 or gpu-compile)");
    for (int i = 0; i < n; i++) {
        gpu_plugin g;
        if (load_plugin(&g, paths[i])) {
            /* built but its runtime library is missing here: the loader names it */
            cr_assert(strstr(g.why, "cannot open shared object file"), "%s: %s", paths[i], g.why);
            cr_log_info("%s: cannot load: %s", paths[i], g.why);
            continue;
        }
        cr_log_info("%s: %d device(s)%s%s", paths[i], g.n_devices, g.n_devices ? "" : ": ", g.why);
        if (g.n_devices > 0) {
            cr_assert_eq(g.why[0], '\0', "%s: devices found but a reason given: %s", paths[i], g.why);
            continue;
        }
        cr_assert(reason_is_precise(g.why), "%s: vague probe reason '%s'", paths[i], g.why);
        moe_open_opts o = {0};
        moe_device *dev = (moe_device *)&o; /* must be reset to NULL */
        char err[512] = "";
        cr_assert_eq(g.p->open(&o, &dev, err, sizeof err), COLI_EDEVICE, "%s: open without device", paths[i]);
        cr_assert_null(dev);
        cr_assert(strstr(err, g.why), "%s: open error '%s' lacks the probe reason '%s'", paths[i], err, g.why);
        g.p->close(&dev); /* accepts NULL */
    }
}

Test(gpu_plugin, bad_options_are_refused_before_touching_a_device) {
    char paths[MAX_PLUGINS][512];
    const int n = find_plugins(paths, MAX_PLUGINS);
    if (n == 0) cr_skip_test("skipped: no GPU plugin built (make CUDA=1, HIP=1 or gpu-compile)");
    for (int i = 0; i < n; i++) {
        gpu_plugin g;
        if (load_plugin(&g, paths[i])) continue;
        char err[256] = "";
        moe_device *dev = NULL;
        cr_assert_eq(g.p->open(NULL, &dev, err, sizeof err), COLI_EINVAL);
        cr_assert(strstr(err, "NULL options"), "%s", err);
        const char *bad[] = {"bogus@1", "alloc@0", "alloc@", "launch@x", "alloc@1,", "h2d@3-"};
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            moe_open_opts o = {0};
            o.fault = bad[k];
            cr_assert_eq(g.p->open(&o, &dev, err, sizeof err), COLI_EINVAL, "fault '%s' accepted", bad[k]);
            cr_assert_null(dev);
            cr_assert(strstr(err, "fault spec"), "fault '%s': %s", bad[k], err);
        }
        cr_assert_eq(g.p->get_caps(NULL, NULL), COLI_EINVAL);
        cr_assert_eq(g.p->get_stats(NULL, NULL), COLI_EINVAL);
        cr_assert_eq(g.p->load_expert(NULL, NULL, err, sizeof err), COLI_EINVAL);
        cr_assert_eq(g.p->run(NULL, NULL, 0, NULL, 0, 1, NULL, err, sizeof err), COLI_EINVAL);
    }
}

/* ---- with a device --------------------------------------------------------------------- */

Test(gpu_plugin, bad_device_id_is_refused) {
    gpu_plugin g;
    need_device(&g);
    moe_open_opts o = {0};
    o.device_index = g.n_devices + 3;
    moe_device *dev = NULL;
    char err[256] = "";
    cr_assert_eq(g.p->open(&o, &dev, err, sizeof err), COLI_EINVAL);
    cr_assert_null(dev);
    cr_assert(strstr(err, "no such device"), "%s", err);
    o.device_index = -1;
    cr_assert_eq(g.p->open(&o, &dev, err, sizeof err), COLI_EINVAL);
}

/* The activation of the experts check_expert makes (MOE_ACT_*, alpha,
 * limit, biases or not). */
typedef struct test_act {
    int act;
    float alpha, limit;
    int biases;
} test_act;

static const test_act silu = {MOE_ACT_SILU, 0.0f, 0.0f, 0};

/* Groups over two experts of one type and activation: decode-sized (1, 5,
 * 8 rows) and prefill-sized (200 rows), against the reference (cpu plugin
 * or host model) row range by row range. */
static void check_expert(const gpu_plugin *g, coli_dtype t, test_act a) {
    const int super = gpu_block_elems(t) == 256;
    const int64_t n_embd = super ? 256 : 96, n_rows = 214;
    const moe_batch_group groups[] = {{0, 0, 0, 1}, {0, 1, 1, 5}, {0, 0, 6, 8}, {0, 1, 14, 200}};
    test_expert te[2];
    const char *which = "";
    cr_assert_eq(test_expert_make(&te[0], 0, 0, t, n_embd, 512, 40 + (uint64_t)t), 0);
    cr_assert_eq(test_expert_make(&te[1], 0, 1, t, n_embd, super ? 768 : 160, 80 + (uint64_t)t), 0);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(test_expert_set_act(&te[i], a.act, a.alpha, a.limit, a.biases, 9 + (uint64_t)i), 0);
    float *x = malloc((size_t)(n_rows * n_embd) * sizeof *x), *out = calloc((size_t)(n_rows * n_embd), sizeof *out);
    float *ref = calloc((size_t)(n_rows * n_embd), sizeof *ref);
    cr_assert(x && out && ref);
    test_rand_rows(x, n_rows * n_embd, 2.0f, 7 + (uint64_t)t);
    char err[256] = "";
    moe_device *dev = open_dev(g, 0, NULL);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(g->p->load_expert(dev, &te[i].desc, err, sizeof err), 0, "%s: %s", coli_dtype_name(t), err);
    cr_assert_eq(g->p->run(dev, groups, 4, x, n_rows, n_embd, out, err, sizeof err), 0, "%s: %s", coli_dtype_name(t),
                 err);
    float diff[2] = {0, 0}, scale = 0;
    for (int i = 0; i < 4; i++) {
        const int64_t off = groups[i].row_begin * n_embd, n = groups[i].n_rows * n_embd;
        cr_assert_eq(
            test_reference_expert(&te[groups[i].expert], x + off, groups[i].n_rows, ref + off, &which, err, sizeof err),
            0, "%s reference: %s", coli_dtype_name(t), err);
        const float d = test_max_diff(out + off, ref + off, n), s = test_max_abs(ref + off, n);
        const int prefill = groups[i].n_rows > 8;
        diff[prefill] = d > diff[prefill] ? d : diff[prefill];
        scale = s > scale ? s : scale;
    }
    fprintf(stderr, "GPU-DIFF %s dtype=%s act=%d%s decode=%.3g prefill=%.3g scale=%.3g vs=%s\n", g->p->name,
            coli_dtype_name(t), a.act, a.biases ? "+biases" : "", diff[0], diff[1], scale,
            test_cpu_computes(&te[0].desc) ? "cpu" : "host-model");
    const float tol = test_tolerance(t) * scale;
    cr_assert(diff[0] <= tol && diff[1] <= tol, "%s: max diff decode %g prefill %g > %g", coli_dtype_name(t), diff[0],
              diff[1], tol);
    g->p->close(&dev);
    test_expert_free(&te[0]);
    test_expert_free(&te[1]);
    free(x), free(out), free(ref);
}

Test(gpu_plugin, kernels_match_cpu_plugin_for_every_type_decode_and_prefill) {
    gpu_plugin g;
    need_device(&g);
    for (int i = 0; i < GPU_TEST_N_DTYPES; i++) check_expert(&g, gpu_test_dtypes[i], silu);
}

/* gpt-oss's and kimi-k3's experts against expert_ffn.c (the cpu plugin):
 * the device's expf / tanhf may differ from the host's by an ulp or two,
 * well inside each type's tolerance (gpu_test_util.h). */
Test(gpu_plugin, activations_and_biases_match_cpu_plugin) {
    gpu_plugin g;
    need_device(&g);
    const test_act acts[] = {{MOE_ACT_SWIGLU_OAI, 1.702f, 7.0f, 1},
                             {MOE_ACT_SWIGLU_OAI, 1.702f, 1.5f, 1},
                             {MOE_ACT_SITU, 1.5f, 2.0f, 0},
                             {MOE_ACT_SITU, 0.75f, 0.0f, 1}};
    const coli_dtype types[] = {COLI_F32, COLI_F16, COLI_Q8_0, COLI_Q4_K, COLI_MXFP4};
    for (int a = 0; a < 4; a++)
        for (int i = 0; i < 5; i++) check_expert(&g, types[i], acts[a]);
}

/* Activations the kernels lack and hostile parameters: refused in one line,
 * nothing held; the biases are uploaded with the expert and budgeted. */
Test(gpu_plugin, unknown_activations_and_bad_parameters_are_refused) {
    gpu_plugin g;
    need_device(&g);
    test_expert te;
    cr_assert_eq(test_expert_make(&te, 0, 0, COLI_Q8_0, 64, 96, 5), 0);
    cr_assert_eq(test_expert_set_act(&te, MOE_ACT_SWIGLU_OAI, 1.702f, 7.0f, 1, 2), 0);
    moe_device *dev = open_dev(&g, 0, NULL);
    char err[256] = "";
    moe_expert_desc d = te.desc;
    d.act = 7;
    cr_assert_eq(g.p->load_expert(dev, &d, err, sizeof err), COLI_EUNSUPPORTED);
    cr_assert(strstr(err, "activation 7 not supported"), "%s", err);
    d.act = MOE_ACT_SWIGLU_CLAMP; /* deepseek4's needs a limit > 0 */
    d.act_limit = 0.0f;
    cr_assert_eq(g.p->load_expert(dev, &d, err, sizeof err), COLI_EINVAL);
    d = te.desc;
    d.act_limit = NAN;
    cr_assert_eq(g.p->load_expert(dev, &d, err, sizeof err), COLI_EINVAL);
    cr_assert(strstr(err, "activation 1 with alpha"), "%s", err);
    d = te.desc;
    d.act = MOE_ACT_SITU;
    d.act_alpha = 0.0f;
    cr_assert_eq(g.p->load_expert(dev, &d, err, sizeof err), COLI_EINVAL);
    moe_stats s = stats_of(&g, dev);
    cr_assert_eq(s.resident_experts, 0);
    cr_assert_eq(s.failed_loads, 4);
    cr_assert_eq(g.p->load_expert(dev, &te.desc, err, sizeof err), 0, "%s", err);
    const uint64_t biases = gpu_align_up(96 * 4) * 2 + 64 * 4;
    s = stats_of(&g, dev);
    cr_assert_eq(s.resident_bytes, gpu_align_up(gpu_align_up(expert_device_bytes(&te.desc)) + biases));
    g.p->close(&dev);
    test_expert_free(&te);
}

/* Unknown weight types and rows that are not whole blocks stay on the CPU
 * path: EUNSUPPORTED, nothing held, one failed load each. */
Test(gpu_plugin, unknown_types_and_partial_blocks_are_refused) {
    gpu_plugin g;
    need_device(&g);
    test_expert te;
    cr_assert_eq(test_expert_make(&te, 0, 0, COLI_Q4_K, 256, 512, 5), 0);
    moe_device *dev = open_dev(&g, 0, NULL);
    char err[256] = "";
    moe_expert_desc d = te.desc;
    d.up_type = COLI_Q8_K; /* a GGML type the kernels do not take: an activation format only */
    cr_assert_eq(g.p->load_expert(dev, &d, err, sizeof err), COLI_EUNSUPPORTED);
    cr_assert(strstr(err, "up weight type 15 not supported"), "%s", err);
    d = te.desc;
    d.n_embd = 288; /* a multiple of 32, not of Q4_K's 256 */
    cr_assert_eq(g.p->load_expert(dev, &d, err, sizeof err), COLI_EUNSUPPORTED);
    cr_assert(strstr(err, "gate rows of 288 values are not a multiple of the 256-value blocks"), "%s", err);
    moe_stats s = stats_of(&g, dev);
    cr_assert_eq(s.resident_experts, 0);
    cr_assert_eq(s.failed_loads, 2);
    cr_assert_eq(g.p->load_expert(dev, &te.desc, err, sizeof err), 0, "%s", err);
    g.p->close(&dev);
    test_expert_free(&te);
}

Test(gpu_plugin, uploads_stop_at_the_budget) {
    gpu_plugin g;
    need_device(&g);
    test_expert te[2];
    cr_assert_eq(test_expert_make(&te[0], 3, 0, COLI_Q8_0, 256, 512, 1), 0);
    cr_assert_eq(test_expert_make(&te[1], 3, 1, COLI_Q8_0, 256, 512, 2), 0);
    const uint64_t one = expert_device_bytes(&te[0].desc);
    moe_device *dev = open_dev(&g, one + one / 2, NULL);
    moe_caps caps;
    cr_assert_eq(g.p->get_caps(dev, &caps), 0);
    cr_assert_eq(caps.memory_budget, one + one / 2);
    char err[256] = "";
    cr_assert_eq(g.p->load_expert(dev, &te[0].desc, err, sizeof err), 0, "%s", err);
    cr_assert_eq(g.p->load_expert(dev, &te[1].desc, err, sizeof err), COLI_ENOMEM);
    cr_assert(strstr(err, "expert 3.1") && strstr(err, "budget"), "%s", err);
    moe_stats s = stats_of(&g, dev);
    cr_assert_eq(s.resident_experts, 1);
    cr_assert_eq(s.resident_bytes, one);
    cr_assert_eq(s.failed_loads, 1);
    /* the expert that did not fit is not there; the one that did still works */
    float x[256], out[256];
    test_rand_rows(x, 256, 1.0f, 5);
    moe_batch_group grp = {3, 1, 0, 1};
    cr_assert_eq(g.p->run(dev, &grp, 1, x, 1, 256, out, err, sizeof err), COLI_EINVAL);
    cr_assert(strstr(err, "not resident"), "%s", err);
    grp.expert = 0;
    cr_assert_eq(g.p->run(dev, &grp, 1, x, 1, 256, out, err, sizeof err), 0, "%s", err);
    cr_assert_eq(g.p->load_expert(dev, &te[0].desc, err, sizeof err), COLI_EINVAL, "double load accepted");
    g.p->close(&dev);
    cr_assert_null(dev);
    test_expert_free(&te[0]);
    test_expert_free(&te[1]);
}

Test(gpu_plugin, oversized_allocation_fails_cleanly) {
    gpu_plugin g;
    need_device(&g);
    moe_device *dev = open_dev(&g, UINT64_MAX, NULL);
    moe_caps caps;
    cr_assert_eq(g.p->get_caps(dev, &caps), 0);
    cr_assert(caps.memory_total > 0);
    /* an F32 expert of 3x the device's memory; the host buffers are small:
     * the allocation must fail before any copy is attempted */
    static float small[64];
    const int64_t n_embd = 32, n_ff = (int64_t)(caps.memory_total / 128 + 32) / 32 * 32;
    moe_expert_desc d = {0};
    d.layer = 9;
    d.n_embd = n_embd;
    d.n_ff = n_ff;
    d.gate = d.up = d.down = small;
    d.gate_bytes = d.up_bytes = d.down_bytes = (size_t)n_ff * (size_t)n_embd * 4;
    char err[256] = "";
    cr_assert_eq(g.p->load_expert(dev, &d, err, sizeof err), COLI_ENOMEM, "%s", err);
    cr_assert(strstr(err, "allocation"), "%s", err);
    moe_stats s = stats_of(&g, dev);
    cr_assert_eq(s.resident_experts, 0);
    cr_assert_eq(s.resident_bytes, 0);
    cr_assert_eq(s.failed_loads, 1);
    /* no sticky error: a normal expert loads and computes right afterwards */
    test_expert te;
    cr_assert_eq(test_expert_make(&te, 0, 0, COLI_F16, 128, 256, 3), 0);
    cr_assert_eq(g.p->load_expert(dev, &te.desc, err, sizeof err), 0, "%s", err);
    float x[3 * 128], out[3 * 128], ref[3 * 128];
    test_rand_rows(x, 3 * 128, 1.0f, 11);
    moe_batch_group grp = {0, 0, 0, 3};
    cr_assert_eq(g.p->run(dev, &grp, 1, x, 3, 128, out, err, sizeof err), 0, "%s", err);
    cr_assert_eq(test_cpu_expert(&te, x, 3, ref, err, sizeof err), 0);
    cr_assert(test_max_diff(out, ref, 3 * 128) <= test_tolerance(COLI_F16) * test_max_abs(ref, 3 * 128));
    g.p->close(&dev);
    test_expert_free(&te);
}

Test(gpu_plugin, injected_failures_leave_accounting_unchanged_and_nothing_sticky) {
    gpu_plugin g;
    need_device(&g);
    /* alloc 2 = second expert, h2d 4 = its retry's gate copy, launch 2 = the first run's gate
     * matmul (launch 1 prepares the input, shared by gate and up: both take Q8_0 blocks) */
    moe_device *dev = open_dev(&g, 0, "alloc@2,h2d@4,launch@2");
    test_expert te[2];
    cr_assert_eq(test_expert_make(&te[0], 1, 0, COLI_Q4_0, 128, 256, 21), 0);
    cr_assert_eq(test_expert_make(&te[1], 1, 1, COLI_Q4_0, 128, 256, 22), 0);
    char err[256] = "";
    cr_assert_eq(g.p->load_expert(dev, &te[0].desc, err, sizeof err), 0, "%s", err);
    const moe_stats before = stats_of(&g, dev);
    cr_assert_eq(g.p->load_expert(dev, &te[1].desc, err, sizeof err), COLI_ENOMEM);
    cr_assert(strstr(err, "expert 1.1") && strstr(err, "allocation"), "%s", err);
    cr_assert_eq(g.p->load_expert(dev, &te[1].desc, err, sizeof err), COLI_EDEVICE);
    cr_assert(strstr(err, "upload of gate"), "%s", err);
    moe_stats s = stats_of(&g, dev);
    cr_assert_eq(s.resident_experts, before.resident_experts);
    cr_assert_eq(s.resident_bytes, before.resident_bytes);
    cr_assert_eq(s.failed_loads, 2);
    cr_assert_eq(g.p->load_expert(dev, &te[1].desc, err, sizeof err), 0, "retry after faults: %s", err);

    const int64_t n_rows = 20;
    float x[20 * 128], out[20 * 128], ref[20 * 128];
    test_rand_rows(x, n_rows * 128, 1.0f, 33);
    const moe_batch_group grp[] = {{1, 0, 0, 4}, {1, 1, 4, 16}};
    cr_assert_eq(g.p->run(dev, grp, 2, x, n_rows, 128, out, err, sizeof err), COLI_EDEVICE);
    cr_assert(strstr(err, "gate matmul") && strstr(err, "injected"), "%s", err);
    s = stats_of(&g, dev);
    cr_assert_eq(s.calls, 0);
    cr_assert_eq(s.resident_experts, 2);
    cr_assert_eq(g.p->run(dev, grp, 2, x, n_rows, 128, out, err, sizeof err), 0, "after the fault: %s", err);
    for (int i = 0; i < 2; i++) {
        const int64_t off = grp[i].row_begin * 128;
        cr_assert_eq(test_cpu_expert(&te[i], x + off, grp[i].n_rows, ref + off, err, sizeof err), 0);
    }
    cr_assert(test_max_diff(out, ref, n_rows * 128) <= test_tolerance(COLI_Q4_0) * test_max_abs(ref, n_rows * 128));
    s = stats_of(&g, dev);
    cr_assert_eq(s.calls, 1);
    cr_assert_eq(s.rows, (uint64_t)n_rows);
    g.p->close(&dev);
    test_expert_free(&te[0]);
    test_expert_free(&te[1]);
}

Test(gpu_plugin, caps_and_stats_account_for_what_is_held_and_done) {
    gpu_plugin g;
    need_device(&g);
    moe_device *dev = open_dev(&g, 0, NULL);
    moe_caps caps;
    cr_assert_eq(g.p->get_caps(dev, &caps), 0);
    uint64_t want = 0; /* types 32..63 (TQ1_0, TQ2_0, MXFP4) in the ABI 1.3 high word */
    for (int i = 0; i < GPU_TEST_N_DTYPES; i++) want |= 1ull << gpu_test_dtypes[i];
    cr_assert_eq(caps.dtype_mask, (uint32_t)want, "dtype mask %#x, want %#x", caps.dtype_mask, (uint32_t)want);
    cr_assert_eq(caps.dtype_mask_hi, (uint32_t)(want >> 32), "dtype mask hi %#x, want %#x", caps.dtype_mask_hi,
                 (uint32_t)(want >> 32));
    cr_assert_eq(caps.act_mask,
                 (1u << MOE_ACT_SWIGLU_OAI) | (1u << MOE_ACT_SITU) | (1u << MOE_ACT_SWIGLU_CLAMP) | MOE_ACT_BIASES,
                 "act mask %#x", caps.act_mask);
    cr_assert(caps.memory_total > 0 && caps.memory_budget > 0 && caps.memory_budget < caps.memory_total);
    cr_assert(caps.device_name[0]);
    test_expert te[3];
    uint64_t bytes = 0;
    char err[256] = "";
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(test_expert_make(&te[i], 2, i, gpu_test_dtypes[i], 128, 192, 60 + (uint64_t)i), 0);
        cr_assert_eq(g.p->load_expert(dev, &te[i].desc, err, sizeof err), 0, "%s", err);
        bytes += expert_device_bytes(&te[i].desc);
    }
    moe_stats s = stats_of(&g, dev);
    cr_assert_eq(s.resident_experts, 3);
    cr_assert_eq(s.resident_bytes, bytes);
    cr_assert_eq(s.calls, 0);
    float x[40 * 128], out[40 * 128];
    test_rand_rows(x, 40 * 128, 1.0f, 4);
    const moe_batch_group grp[] = {{2, 2, 0, 30}, {2, 0, 30, 0}, {2, 1, 30, 10}};
    for (int k = 0; k < 2; k++) cr_assert_eq(g.p->run(dev, grp, 3, x, 40, 128, out, err, sizeof err), 0, "%s", err);
    s = stats_of(&g, dev);
    cr_assert_eq(s.calls, 2);
    cr_assert_eq(s.rows, 80);
    cr_assert_eq(s.failed_loads, 0);
    /* copies of 20 KB may read as 0 at the events' resolution; kernels cannot */
    cr_assert(s.kernel_seconds > 0 && s.h2d_seconds >= 0 && s.d2h_seconds >= 0 && s.h2d_seconds + s.d2h_seconds > 0,
              "times h2d %g kernel %g d2h %g", s.h2d_seconds, s.kernel_seconds, s.d2h_seconds);
    const moe_batch_group bad = {2, 0, 35, 10};
    cr_assert_eq(g.p->run(dev, &bad, 1, x, 40, 128, out, err, sizeof err), COLI_EINVAL);
    cr_assert(strstr(err, "outside the batch"), "%s", err);
    g.p->close(&dev);
    for (int i = 0; i < 3; i++) test_expert_free(&te[i]);
}
