/*
 * test_xdna_plugin.c - libcoli-xdna.so through dlopen, as the worker uses it,
 * with the real helper on the synthetic XRT runtime: the expert FFN against a
 * reference computed here in double from the same BF16-rounded values, both
 * buckets and their padding counters, gate 3 (more than 256 rows declined),
 * gates 1-2 at load, and a weight image that fails half-way is never
 * published (the expert is refused, nothing of it is kept, a later load works).
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "plugins/plugin_abi.h"
#include "core/quant/quant.h"
#include "tests/xdna_test_util.h"

#define MODEL "tiny-llama-moe-f32.gguf" /* its shapes: n_embd 64, n_ff 128, F32 */
enum {
    E = 64,
    F = 128
};

typedef struct rig {
    char dir[64];
    void *dl;
    const struct moe_plugin *p;
    moe_device *dev;
    float *gate, *up, *down; /* F x E, F x E, E x F */
} rig;

static const char *s_model(void) {
    static char path[1100];
    snprintf(path, sizeof path, "%.1000s/fixtures/%s", xdna_abs_build(), MODEL);
    if (access(path, R_OK) != 0) cr_skip_test("fixture %s missing (make fixtures)", path);
    return path;
}

static void s_fill(float *v, size_t n, unsigned seed, float scale) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = scale * ((float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f);
    }
}

static void s_open(rig *r) {
    memset(r, 0, sizeof *r);
    xdna_lane_dir(r->dir, XDNA_SYNTH_HELPER, 1, s_model());
    char path[128], err[512] = "";
    snprintf(path, sizeof path, "%s/libcoli-xdna.so", r->dir);
    r->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(r->dl, "%s", dlerror());
    moe_plugin_get_fn get = (moe_plugin_get_fn)dlsym(r->dl, MOE_PLUGIN_SYMBOL);
    cr_assert(get);
    r->p = get();
    cr_assert_str_eq(r->p->name, "xdna");
    moe_open_opts o = {0};
    cr_assert_eq(r->p->open(&o, &r->dev, err, sizeof err), 0, "%s", err);
    r->gate = malloc(F * E * sizeof(float));
    r->up = malloc(F * E * sizeof(float));
    r->down = malloc(E * F * sizeof(float));
    s_fill(r->gate, F * E, 1, 0.3f);
    s_fill(r->up, F * E, 2, 0.3f);
    s_fill(r->down, E * F, 3, 0.2f);
}

static void s_close(rig *r) {
    r->p->close(&r->dev);
    cr_expect_null(r->dev);
    free(r->gate);
    free(r->up);
    free(r->down);
    xdna_rm_dir(r->dir); /* the plugin stays mapped: the helper's verdict is the process's */
}

static moe_expert_desc s_desc(const rig *r, int expert, int64_t n_ff, int32_t gate_type) {
    return (moe_expert_desc){.layer = 0,
                             .expert = expert,
                             .n_embd = E,
                             .n_ff = n_ff,
                             .gate_type = gate_type,
                             .up_type = COLI_F32,
                             .down_type = COLI_F32,
                             .gate = r->gate,
                             .up = r->up,
                             .down = r->down,
                             .gate_bytes = (size_t)(n_ff * E) * (gate_type == COLI_F16 ? 2 : 4),
                             .up_bytes = (size_t)(n_ff * E) * 4,
                             .down_bytes = (size_t)(E * n_ff) * 4};
}

static double s_bf(float v) { return coli_bf16_to_fp32(coli_fp32_to_bf16(v)); }

//  The lane's FFN for one row, in double from the same BF16-rounded values; also
//  the sum of |terms| of each output (the scale for the comparison).
static void s_reference(const rig *r, const float *x, double *y, double *mag) {
    float h[F];
    for (int j = 0; j < F; j++) {
        double g = 0, u = 0;
        for (int k = 0; k < E; k++) {
            g += s_bf(x[k]) * s_bf(r->gate[j * E + k]);
            u += s_bf(x[k]) * s_bf(r->up[j * E + k]);
        }
        h[j] = (float)(g / (1.0 + exp(-g)) * u);
    }
    for (int i = 0; i < E; i++) {
        y[i] = mag[i] = 0;
        for (int j = 0; j < F; j++) {
            double t = s_bf(h[j]) * s_bf(r->down[i * F + j]);
            y[i] += t;
            mag[i] += fabs(t);
        }
    }
}

static uint64_t s_counter(const rig *r, const char *name) {
    moe_counter c[MOE_MAX_COUNTERS];
    int n = r->p->get_counters(r->dev, c, MOE_MAX_COUNTERS);
    for (int i = 0; i < n; i++)
        if (!strcmp(c[i].name, name)) return c[i].value;
    cr_assert_fail("no counter %s", name);
    return 0;
}

TestSuite(xdna_plugin, .init = xdna_env_defaults);

Test(xdna_plugin, ffn_matches_the_bf16_reference_in_both_buckets) {
    rig r;
    s_open(&r);
    char err[512] = "";
    moe_expert_desc d = s_desc(&r, 0, F, COLI_F32);
    cr_assert_eq(r.p->load_expert(r.dev, &d, err, sizeof err), 0, "%s", err);
    const int64_t rows[2] = {5, 100}; /* M64 padded by 59, M256 padded by 156 */
    for (int b = 0; b < 2; b++) {
        float *x = malloc((size_t)(rows[b] * E) * sizeof *x), *out = malloc((size_t)(rows[b] * E) * sizeof *out);
        s_fill(x, (size_t)(rows[b] * E), 10 + (unsigned)b, 1.0f);
        moe_batch_group g = {0, 0, 0, rows[b]};
        cr_assert_eq(r.p->run(r.dev, &g, 1, x, rows[b], E, out, err, sizeof err), 0, "%s", err);
        double worst = 0, y[E], mag[E];
        for (int64_t t = 0; t < rows[b]; t++) {
            s_reference(&r, x + t * E, y, mag);
            for (int i = 0; i < E; i++) worst = fmax(worst, fabs(out[t * E + i] - y[i]) / (mag[i] + 1e-30));
        }
        cr_log_info("%lld rows: max |lane - reference| = %.3g of the sum of |terms|", (long long)rows[b], worst);
        /* F32 sums differ from double ones by ~1e-7; at worst a gate/up sum lands on the
         * other side of a BF16 rounding boundary of h, moving one term by 2^-8 of itself */
        cr_expect_lt(worst, 1.0 / 256, "%lld rows: %g", (long long)rows[b], worst);
        free(x);
        free(out);
    }
    cr_expect_eq(s_counter(&r, "bucket_m64"), 1);
    cr_expect_eq(s_counter(&r, "bucket_m256"), 1);
    cr_expect_eq(s_counter(&r, "padded_rows"), 59 + 156);
    s_close(&r);
}

Test(xdna_plugin, more_than_256_rows_are_declined_before_anything_runs) {
    rig r;
    s_open(&r);
    char err[512] = "";
    moe_expert_desc d = s_desc(&r, 0, F, COLI_F32);
    cr_assert_eq(r.p->load_expert(r.dev, &d, err, sizeof err), 0, "%s", err);
    enum {
        N = 300
    };
    float *x = calloc(N * E, sizeof *x), *out = calloc(N * E, sizeof *out);
    moe_batch_group g[2] = {{0, 0, 0, 4}, {0, 0, 4, N - 4}};
    cr_expect_neq(r.p->run(r.dev, g, 2, x, N, E, out, err, sizeof err), 0);
    cr_expect(!strncmp(err, "DECLINED_ROWS: ", 15), "%s", err);
    cr_expect_eq(s_counter(&r, "bucket_m64"), 0, "the first group did not run either: one batch, one answer");
    moe_batch_group other = {0, 3, 0, 4};
    cr_expect_neq(r.p->run(r.dev, &other, 1, x, 4, E, out, err, sizeof err), 0);
    cr_expect(!strncmp(err, "IMAGE_FAILED: ", 14), "an expert never loaded has no image: %s", err);
    free(x);
    free(out);
    s_close(&r);
}

Test(xdna_plugin, shapes_and_types_not_registered_are_declined_at_load) {
    rig r;
    s_open(&r);
    char err[512] = "";
    moe_expert_desc d = s_desc(&r, 0, 96, COLI_F32);
    cr_expect_eq(r.p->load_expert(r.dev, &d, err, sizeof err), COLI_EUNSUPPORTED);
    cr_expect(!strncmp(err, "DECLINED_SHAPE: ", 16), "%s", err);
    d = s_desc(&r, 1, F, COLI_F16);
    cr_expect_eq(r.p->load_expert(r.dev, &d, err, sizeof err), COLI_EUNSUPPORTED);
    cr_expect(!strncmp(err, "DECLINED_DTYPE: ", 16), "%s", err);
    moe_stats st;
    r.p->get_stats(r.dev, &st);
    cr_expect_eq(st.resident_experts, 0);
    cr_expect_eq(st.failed_loads, 2);
    s_close(&r);
}

Test(xdna_plugin, a_half_prepared_image_is_never_published) {
    /* open allocates 3 buffers per artifact (6 artifacts): the 20th is the
     * second weight buffer of the first expert (gate M256) */
    setenv("COLI_XRT_SYNTH_FAULT", "bo@20", 1);
    rig r;
    s_open(&r);
    char err[512] = "";
    moe_expert_desc d = s_desc(&r, 0, F, COLI_F32);
    cr_expect_eq(r.p->load_expert(r.dev, &d, err, sizeof err), COLI_EDEVICE);
    cr_expect(!strncmp(err, "BO_ALLOC_FAILED: ", 17), "%s", err);
    moe_stats st;
    r.p->get_stats(r.dev, &st);
    cr_expect_eq(st.resident_experts, 0);
    cr_expect_eq(st.resident_bytes, 0);
    float x[E] = {0}, out[E];
    moe_batch_group g = {0, 0, 0, 1};
    cr_expect_neq(r.p->run(r.dev, &g, 1, x, 1, E, out, err, sizeof err), 0);
    cr_expect(!strncmp(err, "IMAGE_FAILED: ", 14), "%s", err);
    cr_expect_eq(r.p->load_expert(r.dev, &d, err, sizeof err), 0, "the next attempt starts clean: %s", err);
    cr_expect_eq(r.p->run(r.dev, &g, 1, x, 1, E, out, err, sizeof err), 0, "%s", err);
    r.p->get_stats(r.dev, &st);
    cr_expect_eq(st.resident_experts, 1);
    s_close(&r);
}
