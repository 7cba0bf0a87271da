/*
 * test_cpu_plugin.c - the cpu plugin through its vtable: ABI fields, load /
 * run / stats, errors for bad input, results equal to expert_ffn, and the
 * shared library exporting nothing but moe_plugin_get.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "colibri.h"
#include "core/kernels/expert_ffn.h"
#include "plugins/cpu/cpu_plugin.h"
#include "core/quant/quant.h"
#include "core/threadpool.h"

enum {
    EMBD = 64,
    FF = 96
};

typedef struct test_expert {
    uint8_t *gate, *up, *down;
    moe_expert_desc d;
} test_expert;

static void fill(uint8_t *dst, coli_dtype t, int64_t rows, int64_t n, unsigned seed) {
    float *row = malloc(sizeof(float) * (size_t)n);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t k = 0; k < n; k++) {
            seed = seed * 1664525u + 1013904223u;
            row[k] = ((float)(seed >> 8) / 8388608.0f - 1.0f) * 0.2f;
        }
        coli_quantize_row(t, row, dst + (size_t)r * coli_row_bytes(t, n), n);
    }
    free(row);
}

static test_expert make_expert(int layer, int expert, coli_dtype t) {
    test_expert e;
    memset(&e, 0, sizeof e);
    size_t gb = coli_row_bytes(t, EMBD) * FF, db = coli_row_bytes(t, FF) * EMBD;
    e.gate = malloc(gb);
    e.up = malloc(gb);
    e.down = malloc(db);
    unsigned seed = (unsigned)(layer * 100 + expert);
    fill(e.gate, t, FF, EMBD, seed + 1);
    fill(e.up, t, FF, EMBD, seed + 2);
    fill(e.down, t, EMBD, FF, seed + 3);
    e.d = (moe_expert_desc){
        .layer = layer,
        .expert = expert,
        .n_embd = EMBD,
        .n_ff = FF,
        .gate_type = t,
        .up_type = t,
        .down_type = t,
        .gate = e.gate,
        .up = e.up,
        .down = e.down,
        .gate_bytes = gb,
        .up_bytes = gb,
        .down_bytes = db,
    };
    return e;
}

static void free_expert(test_expert *e) {
    free(e->gate);
    free(e->up);
    free(e->down);
}

static moe_device *open_dev(const struct moe_plugin *p, int threads, uint64_t budget) {
    moe_open_opts o = {.device_index = 0, .n_threads = threads, .memory_budget = budget};
    moe_device *d = NULL;
    char err[256] = "";
    cr_assert_eq(p->open(&o, &d, err, sizeof err), 0, "open: %s", err);
    cr_assert_not_null(d);
    return d;
}

Test(cpu_plugin, vtable_is_sane) {
    const struct moe_plugin *p = coli_cpu_plugin();
    cr_assert_eq(p, moe_plugin_get());
    cr_assert_eq(p->abi_major, MOE_PLUGIN_ABI_MAJOR);
    cr_assert_eq(p->abi_minor, MOE_PLUGIN_ABI_MINOR);
    cr_assert_eq(p->struct_size, sizeof(struct moe_plugin));
    cr_assert_str_eq(p->name, "cpu");
    cr_assert(p->probe && p->open && p->get_caps && p->load_expert && p->run && p->get_stats && p->close);
    int n = 0;
    char why[64] = "x";
    cr_assert_eq(p->probe(&n, why, sizeof why), 0);
    cr_assert_eq(n, 1);
    moe_device *d = open_dev(p, 2, 0);
    moe_caps caps;
    cr_assert_eq(p->get_caps(d, &caps), 0);
    const uint64_t mask = (uint64_t)caps.dtype_mask_hi << 32 | caps.dtype_mask;
    for (int t = 0; t < 64; t++) /* MXFP4 (39), TQ1_0/TQ2_0 (34, 35) in the high word */
        cr_assert_eq((mask >> t) & 1, (unsigned)coli_dtype_valid((uint32_t)t), "dtype %d", t);
    cr_assert(strncmp(caps.device_name, "cpu", 3) == 0, "%s", caps.device_name);
    cr_assert_gt(caps.memory_budget, 0);
    p->close(&d);
    cr_assert_null(d);
    p->close(&d);
    p->close(NULL);
}

Test(cpu_plugin, runs_groups_like_expert_ffn) {
    const struct moe_plugin *p = coli_cpu_plugin();
    moe_device *d = open_dev(p, 2, 0);
    const coli_dtype types[3] = {COLI_Q8_0, COLI_F16, COLI_Q4_0};
    test_expert ex[3];
    char err[256];
    for (int i = 0; i < 3; i++) {
        ex[i] = make_expert(1, i, types[i]);
        cr_assert_eq(p->load_expert(d, &ex[i].d, err, sizeof err), 0, "%s", err);
    }
    enum {
        ROWS = 9
    };
    float x[ROWS * EMBD], out[ROWS * EMBD], want[ROWS * EMBD];
    for (int i = 0; i < ROWS * EMBD; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    const moe_batch_group g[3] = {{1, 2, 0, 4}, {1, 0, 4, 1}, {1, 1, 5, 4}};
    cr_assert_eq(p->run(d, g, 3, x, ROWS, EMBD, out, err, sizeof err), 0, "%s", err);
    /* the same computation through expert_ffn, one thread: same bits */
    for (int k = 0; k < 3; k++) {
        const test_expert *e = &ex[g[k].expert];
        const coli_dtype t = types[g[k].expert];
        expert_weights w = {.gate = e->gate,
                            .up = e->up,
                            .down = e->down,
                            .gate_type = t,
                            .up_type = t,
                            .down_type = t,
                            .n_embd = EMBD,
                            .n_ff = FF};
        cr_assert_eq(expert_ffn(NULL, NULL, &w, x + g[k].row_begin * EMBD, g[k].n_rows, want + g[k].row_begin * EMBD),
                     0);
    }
    cr_assert_eq(memcmp(out, want, sizeof out), 0, "plugin output differs from expert_ffn");
    moe_stats st;
    cr_assert_eq(p->get_stats(d, &st), 0);
    cr_assert_eq(st.calls, 1);
    cr_assert_eq(st.rows, ROWS);
    cr_assert_eq(st.resident_experts, 3);
    size_t bytes = 0;
    for (int i = 0; i < 3; i++) bytes += ex[i].d.gate_bytes + ex[i].d.up_bytes + ex[i].d.down_bytes;
    cr_assert_eq(st.resident_bytes, bytes);
    /* loading the same expert again replaces it, counts it once */
    cr_assert_eq(p->load_expert(d, &ex[0].d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(p->get_stats(d, &st), 0);
    cr_assert_eq(st.resident_experts, 3);
    cr_assert_eq(st.resident_bytes, bytes);
    p->close(&d);
    for (int i = 0; i < 3; i++) free_expert(&ex[i]);
}

Test(cpu_plugin, many_experts_in_the_table) {
    const struct moe_plugin *p = coli_cpu_plugin();
    moe_device *d = open_dev(p, 1, 0);
    test_expert e = make_expert(0, 0, COLI_Q8_0);
    char err[256];
    for (int l = 0; l < 20; l++)
        for (int k = 0; k < 16; k++) {
            moe_expert_desc desc = e.d;
            desc.layer = l;
            desc.expert = k;
            cr_assert_eq(p->load_expert(d, &desc, err, sizeof err), 0, "%s", err);
        }
    moe_stats st;
    p->get_stats(d, &st);
    cr_assert_eq(st.resident_experts, 320);
    float x[EMBD] = {0}, out[EMBD];
    moe_batch_group g = {19, 15, 0, 1};
    cr_assert_eq(p->run(d, &g, 1, x, 1, EMBD, out, err, sizeof err), 0, "%s", err);
    p->close(&d);
    free_expert(&e);
}

//  unload_expert (ABI 1.2): the budget is free again, the others still run,
//  an unknown expert is refused with a reason and changes nothing.
Test(cpu_plugin, unload_frees_the_budget_and_keeps_the_others) {
    const struct moe_plugin *p = coli_cpu_plugin();
    cr_assert(MOE_PLUGIN_HAS(p, unload_expert));
    test_expert e = make_expert(0, 0, COLI_Q8_0);
    const size_t one = e.d.gate_bytes + e.d.up_bytes + e.d.down_bytes;
    moe_device *d = open_dev(p, 1, 3 * one);
    char err[256];
    for (int k = 0; k < 3; k++) {
        moe_expert_desc desc = e.d;
        desc.expert = k;
        cr_assert_eq(p->load_expert(d, &desc, err, sizeof err), 0, "%s", err);
    }
    moe_expert_desc fourth = e.d;
    fourth.expert = 3;
    cr_assert_neq(p->load_expert(d, &fourth, err, sizeof err), 0, "over the budget");
    cr_assert_eq(p->unload_expert(d, 0, 1, err, sizeof err), 0, "%s", err);
    cr_assert_neq(p->unload_expert(d, 0, 1, err, sizeof err), 0);
    cr_assert(strstr(err, "not loaded"), "%s", err);
    moe_stats st;
    p->get_stats(d, &st);
    cr_assert_eq(st.resident_experts, 2);
    cr_assert_eq(st.resident_bytes, 2 * one);
    cr_assert_eq(p->load_expert(d, &fourth, err, sizeof err), 0, "room again: %s", err);
    float x[EMBD] = {0}, out[EMBD];
    for (int k = 0; k < 4; k++) {
        moe_batch_group g = {0, k, 0, 1};
        int rc = p->run(d, &g, 1, x, 1, EMBD, out, err, sizeof err);
        cr_assert_eq(rc != 0, k == 1, "expert %d: rc %d (%s)", k, rc, err);
    }
    /* many removals in a big table: every survivor is still found */
    moe_device *big = open_dev(p, 1, 0);
    for (int l = 0; l < 8; l++)
        for (int k = 0; k < 32; k++) {
            moe_expert_desc desc = e.d;
            desc.layer = l;
            desc.expert = k;
            cr_assert_eq(p->load_expert(big, &desc, err, sizeof err), 0, "%s", err);
        }
    for (int l = 0; l < 8; l++)
        for (int k = l % 2; k < 32; k += 2) cr_assert_eq(p->unload_expert(big, l, k, err, sizeof err), 0, "%s", err);
    for (int l = 0; l < 8; l++)
        for (int k = 0; k < 32; k++) {
            moe_batch_group g = {l, k, 0, 1};
            int rc = p->run(big, &g, 1, x, 1, EMBD, out, err, sizeof err);
            cr_assert_eq(rc == 0, (k % 2) != (l % 2), "(%d, %d): rc %d", l, k, rc);
        }
    p->close(&big);
    p->close(&d);
    free_expert(&e);
}

Test(cpu_plugin, bad_input_is_refused_with_a_reason) {
    const struct moe_plugin *p = coli_cpu_plugin();
    moe_device *d = open_dev(p, 1, 0);
    test_expert e = make_expert(0, 3, COLI_Q8_0);
    char err[256];
    moe_expert_desc bad = e.d;
    bad.down_type = 24; /* GGML I8: never a weight type here */
    cr_assert_eq(p->load_expert(d, &bad, err, sizeof err), COLI_EUNSUPPORTED);
    cr_assert(strstr(err, "type 24"), "%s", err);
    bad = e.d;
    bad.up_bytes -= 1;
    cr_assert_eq(p->load_expert(d, &bad, err, sizeof err), COLI_EINVAL);
    cr_assert(strstr(err, "up"), "%s", err);
    bad = e.d;
    bad.n_embd = 48; /* not a multiple of 32 for Q8_0 */
    cr_assert_lt(p->load_expert(d, &bad, err, sizeof err), 0);
    moe_stats st;
    p->get_stats(d, &st);
    cr_assert_eq(st.failed_loads, 3);
    cr_assert_eq(st.resident_experts, 0);

    cr_assert_eq(p->load_expert(d, &e.d, err, sizeof err), 0, "%s", err);
    float x[2 * EMBD] = {0}, out[2 * EMBD];
    moe_batch_group g = {0, 4, 0, 1};
    cr_assert_eq(p->run(d, &g, 1, x, 2, EMBD, out, err, sizeof err), COLI_EINVAL);
    cr_assert(strstr(err, "expert 4 of layer 0 is not loaded"), "%s", err);
    g = (moe_batch_group){0, 3, 1, 2};
    cr_assert_eq(p->run(d, &g, 1, x, 2, EMBD, out, err, sizeof err), COLI_EINVAL);
    cr_assert(strstr(err, "outside"), "%s", err);
    g = (moe_batch_group){0, 3, 0, 2};
    cr_assert_eq(p->run(d, &g, 1, x, 2, 32, out, err, sizeof err), COLI_EINVAL);
    cr_assert(strstr(err, "n_embd"), "%s", err);
    /* no sticky error: a good call works after the bad ones */
    cr_assert_eq(p->run(d, &g, 1, x, 2, EMBD, out, err, sizeof err), 0, "%s", err);
    p->get_stats(d, &st);
    cr_assert_eq(st.calls, 1);
    p->close(&d);

    moe_open_opts o = {.device_index = 1};
    cr_assert_eq(p->open(&o, &d, err, sizeof err), COLI_EINVAL);
    cr_assert_null(d);
    cr_assert(strstr(err, "device 1"), "%s", err);
    free_expert(&e);
}

Test(cpu_plugin, memory_budget_is_enforced) {
    const struct moe_plugin *p = coli_cpu_plugin();
    test_expert e = make_expert(0, 0, COLI_F32);
    size_t one = e.d.gate_bytes + e.d.up_bytes + e.d.down_bytes;
    moe_device *d = open_dev(p, 1, one + one / 2);
    char err[256];
    cr_assert_eq(p->load_expert(d, &e.d, err, sizeof err), 0, "%s", err);
    moe_expert_desc second = e.d;
    second.expert = 1;
    cr_assert_eq(p->load_expert(d, &second, err, sizeof err), COLI_ENOMEM);
    cr_assert(strstr(err, "budget"), "%s", err);
    moe_stats st;
    p->get_stats(d, &st);
    cr_assert_eq(st.resident_experts, 1);
    cr_assert_eq(st.resident_bytes, one);
    cr_assert_eq(st.failed_loads, 1);
    moe_caps caps;
    p->get_caps(d, &caps);
    cr_assert_eq(caps.memory_budget, one + one / 2);
    p->close(&d);
    free_expert(&e);
}

Test(cpu_plugin, shared_library_exports_only_the_entry_point) {
    const char *build = getenv("COLI_BUILD");
    char so[512], cmd[700], line[512];
    snprintf(so, sizeof so, "%s/lib/libcoli-cpu.so", build && *build ? build : "build");
    if (access(so, R_OK) != 0) cr_skip_test("%s not built", so);
    snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s' 2>&1", so);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    int n_defined = 0, found = 0;
    while (fgets(line, sizeof line, f)) {
        char addr[64], type[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3) continue;
        n_defined++;
        if (strcmp(name, "moe_plugin_get") == 0)
            found = 1;
        else
            cr_expect_fail("%s exports %s", so, name);
    }
    cr_assert_eq(pclose(f), 0, "nm failed on %s", so);
    cr_assert(found, "%s does not export moe_plugin_get", so);
    cr_assert_eq(n_defined, 1);
}

//  In-process the plugin borrows the forward pass's pool: same bits as a
//  device with a pool of its own, and closing the device leaves the pool alive.
Test(cpu_plugin, shared_pool_device_gives_the_same_bits) {
    const struct moe_plugin *p = coli_cpu_plugin();
    coli_pool *pool = coli_pool_new(2);
    cr_assert_not_null(pool);
    moe_open_opts o = {.device_index = 0, .n_threads = 2};
    moe_device *shared = NULL, *own = open_dev(p, 2, 0);
    char err[256] = "";
    cr_assert_eq(coli_cpu_plugin_open_shared(&o, pool, &shared, err, sizeof err), 0, "%s", err);
    cr_assert_neq(coli_cpu_plugin_open_shared(&o, NULL, &shared, err, sizeof err), 0);
    cr_assert(strstr(err, "NULL pool"), "%s", err);
    cr_assert_eq(coli_cpu_plugin_open_shared(&o, pool, &shared, err, sizeof err), 0, "%s", err);
    test_expert e = make_expert(0, 0, COLI_Q8_0);
    cr_assert_eq(p->load_expert(shared, &e.d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(p->load_expert(own, &e.d, err, sizeof err), 0, "%s", err);
    enum {
        ROWS = 5
    };
    float x[ROWS * EMBD], a[ROWS * EMBD], b[ROWS * EMBD];
    for (int i = 0; i < ROWS * EMBD; i++) x[i] = (float)((i * 13) % 29) / 14.0f - 1.0f;
    const moe_batch_group g = {0, 0, 0, ROWS};
    cr_assert_eq(p->run(shared, &g, 1, x, ROWS, EMBD, a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(p->run(own, &g, 1, x, ROWS, EMBD, b, err, sizeof err), 0, "%s", err);
    cr_assert_eq(memcmp(a, b, sizeof a), 0, "shared-pool output differs");
    p->close(&shared);
    cr_assert_null(shared);
    cr_assert_eq(coli_pool_size(pool), 2, "the borrowed pool must survive close()");
    p->close(&own);
    coli_pool_destroy(&pool);
    free_expert(&e);
}
