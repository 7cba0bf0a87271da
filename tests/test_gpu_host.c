/*
 * test_gpu_host.c - the GPU plugin's host-side bookkeeping (gpu_host.c):
 * fault-injection spec, resident-expert table, default budget. Plain C, so
 * it is compiled into this test directly (it is not part of libcolibri).
 */
#include <criterion/criterion.h>
#include <string.h>

#include "plugins/gpu/gpu_host.c"

Test(gpu_host, fault_spec_parses_and_fires_on_the_right_events) {
    gpu_faults f;
    char err[128] = "";
    cr_assert_eq(gpu_faults_parse("alloc@2,launch@5,alloc@4+,h2d@1", &f, err, sizeof err), 0, "%s", err);
    int fired[10];
    for (int i = 0; i < 10; i++) fired[i] = gpu_faults_next(&f, GPU_FAULT_ALLOC);
    const int want[10] = {0, 1, 0, 1, 1, 1, 1, 1, 1, 1};
    cr_assert_arr_eq(fired, want, sizeof want);
    cr_assert_eq(f.fired[GPU_FAULT_ALLOC], 8);
    for (int i = 1; i <= 6; i++) cr_assert_eq(gpu_faults_next(&f, GPU_FAULT_LAUNCH), i == 5, "launch %d", i);
    cr_assert_eq(gpu_faults_next(&f, GPU_FAULT_H2D), 1);
    cr_assert_eq(gpu_faults_next(&f, GPU_FAULT_H2D), 0);
}

Test(gpu_host, no_spec_means_no_faults) {
    gpu_faults f;
    char err[128] = "";
    cr_assert_eq(gpu_faults_parse(NULL, &f, err, sizeof err), 0);
    cr_assert_eq(gpu_faults_parse("", &f, err, sizeof err), 0);
    for (int i = 0; i < 100; i++) cr_assert_eq(gpu_faults_next(&f, GPU_FAULT_ALLOC), 0);
}

Test(gpu_host, bad_fault_specs_are_named) {
    const char *bad[] = {"bogus@1",
                         "alloc",
                         "alloc@",
                         "alloc@0",
                         "alloc@-1",
                         "alloc@1x",
                         "alloc@1,",
                         ",alloc@1",
                         "alloc@1++",
                         "alloc@99999999999999999999999",
                         "launch@1,launch@2,launch@3,launch@4,launch@5,launch@6,launch@7,launch@8,launch@9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gpu_faults f;
        char err[128] = "";
        cr_assert_eq(gpu_faults_parse(bad[i], &f, err, sizeof err), COLI_EINVAL, "'%s' accepted", bad[i]);
        cr_assert(strstr(err, "fault spec"), "'%s': %s", bad[i], err);
        cr_assert_eq(f.n_at[GPU_FAULT_ALLOC] + f.n_at[GPU_FAULT_LAUNCH], 0, "'%s' left entries", bad[i]);
    }
}

/* What the plugin uploads at open is core's codebooks, whole, in
 * gpu_grids' order (gpu_blocks_iq.h). */
Test(gpu_host, grid_sources_are_cores_tables_in_struct_order) {
    const void *src[GPU_HOST_GRIDS];
    size_t bytes[GPU_HOST_GRIDS];
    gpu_grid_sources(src, bytes);
    const void *want[GPU_HOST_GRIDS] = {coli_iq2xxs_grid, coli_iq2xs_grid,  coli_iq2s_grid,
                                        coli_iq1s_grid,   coli_iq3xxs_grid, coli_iq3s_grid};
    const size_t want_bytes[GPU_HOST_GRIDS] = {256 * 8, 512 * 8, 1024 * 8, 2048 * 8, 256 * 4, 512 * 4};
    for (int i = 0; i < GPU_HOST_GRIDS; i++) {
        cr_assert_eq(src[i], want[i], "table %d", i);
        cr_assert_eq(bytes[i], want_bytes[i], "table %d: %zu bytes", i, bytes[i]);
    }
}

Test(gpu_host, default_budget_keeps_a_reserve) {
    const uint64_t gib = 1ull << 30;
    cr_assert_eq(gpu_reserve_bytes(8 * gib), gib);       /* small card: 1 GiB */
    cr_assert_eq(gpu_reserve_bytes(140 * gib), 7 * gib); /* H200-sized: 5 % */
    cr_assert_eq(gpu_default_budget(100 * gib, 140 * gib), 93 * gib);
    cr_assert_eq(gpu_default_budget(gib / 2, 8 * gib), 0); /* less free than the reserve */
    cr_assert_eq(gpu_align_up(1), 256);
    cr_assert_eq(gpu_align_up(256), 256);
    cr_assert_eq(gpu_align_up(0), 0);
    char b[32];
    cr_assert_str_eq(gpu_fmt_bytes(b, sizeof b, 3 * gib / 2), "1.50 GiB");
    cr_assert_str_eq(gpu_fmt_bytes(b, sizeof b, 12u << 20), "12.0 MiB");
    cr_assert_str_eq(gpu_fmt_bytes(b, sizeof b, 512), "512 B");
}
