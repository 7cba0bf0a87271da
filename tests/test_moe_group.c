/*
 * test_moe_group.c - moe_group_by_expert, the one way both executors group
 * rows by expert: against an independent reference (a stable insertion sort
 * on (expert, position)), on random ids, with and without an item list.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "coordinator/moe_exec.h"

//  The reference: items sorted by expert, ties by their position in items.
static void s_reference(const int32_t *ids, const int64_t *items, int64_t n, int64_t *out) {
    for (int64_t j = 0; j < n; j++) {
        int64_t v = items ? items[j] : j, i = j;
        while (i > 0 && ids[out[i - 1]] > ids[v]) {
            out[i] = out[i - 1];
            i--;
        }
        out[i] = v;
    }
}

static void s_check(int64_t n, int n_expert, int use_items, unsigned seed) {
    srand(seed);
    int32_t *ids = malloc((size_t)(3 * n + 1) * sizeof *ids);
    int64_t *items = malloc((size_t)(n + 1) * sizeof *items), *out = malloc((size_t)(n + 1) * sizeof *out);
    int64_t *ref = malloc((size_t)(n + 1) * sizeof *ref), *start = malloc((size_t)(n_expert + 1) * sizeof *start);
    cr_assert(ids && items && out && ref && start);
    for (int64_t i = 0; i < 3 * n; i++) ids[i] = rand() % n_expert;
    for (int64_t j = 0, p = 0; j < n; j++) items[j] = p += 1 + rand() % 3; /* increasing, < 3n */
    moe_group_by_expert(ids, use_items ? items : NULL, n, n_expert, start, out);
    s_reference(ids, use_items ? items : NULL, n, ref);
    for (int64_t j = 0; j < n; j++)
        cr_assert_eq(out[j], ref[j], "n %lld experts %d: position %lld", (long long)n, n_expert, (long long)j);
    cr_assert_eq(start[0], 0);
    cr_assert_eq(start[n_expert], n);
    for (int e = 0; e < n_expert; e++)
        for (int64_t j = start[e]; j < start[e + 1]; j++)
            cr_assert_eq(ids[out[j]], e, "expert %d's range holds an item of expert %d", e, ids[out[j]]);
    free(ids);
    free(items);
    free(out);
    free(ref);
    free(start);
}

Test(moe_group, matches_a_stable_sort_by_expert) {
    unsigned seed = 1;
    for (int use_items = 0; use_items < 2; use_items++) {
        s_check(0, 4, use_items, seed++);
        s_check(1, 1, use_items, seed++);
        s_check(37, 8, use_items, seed++);
        s_check(500, 64, use_items, seed++);
        s_check(300, 3, use_items, seed++);
    }
}
