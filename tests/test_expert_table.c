/*
 * test_expert_table.c - core/expert_table: the one (layer, expert) table of
 * the cpu, gpu and xdna plugins and of the worker. The first two tests were
 * the GPU plugin's (gpu_table), the key rules the worker's (expert_set).
 */
#include <criterion/criterion.h>
#include <stdint.h>

#include "colibri.h"
#include "core/expert_table.h"

#define VAL(l, e) ((void *)(intptr_t)((l)*1000 + (e) + 1))

static void count_val(void *val, void *arg) { *(long *)arg += (long)(intptr_t)val; }

static void *get(const expert_table *t, int l, int e) { return expert_table_get(t, expert_key(l, e)); }

Test(expert_table, finds_what_was_put_and_nothing_else) {
    expert_table t = {0};
    cr_assert_null(get(&t, 0, 0));
    long sum = 0;
    for (int l = 0; l < 40; l++)
        for (int e = 0; e < 64; e++) {
            cr_assert_eq(expert_table_put(&t, expert_key(l, e), VAL(l, e)), 0);
            sum += l * 1000 + e + 1;
        }
    cr_assert_eq(t.n, 40 * 64);
    cr_assert(t.n * 2 <= t.cap);
    for (int l = 0; l < 40; l++)
        for (int e = 0; e < 64; e++) cr_assert_eq(get(&t, l, e), VAL(l, e), "(%d, %d)", l, e);
    cr_assert_null(get(&t, 40, 0));
    cr_assert_null(get(&t, 0, 64));
    cr_assert_null(get(&t, -1, 3));
    long seen = 0;
    expert_table_free(&t, count_val, &seen);
    cr_assert_eq(seen, sum);
    cr_assert_eq(t.cap, 0);
    cr_assert_null(get(&t, 1, 1));
}

//  Removing keys in a scattered order keeps every other key findable (the
//  re-seating after a hole), whatever the probe runs look like.
Test(expert_table, remove_keeps_the_others) {
    expert_table t = {0};
    const int L = 12, E = 40;
    for (int l = 0; l < L; l++)
        for (int e = 0; e < E; e++) cr_assert_eq(expert_table_put(&t, expert_key(l, e), VAL(l, e)), 0);
    void *val = VAL(99, 99);
    cr_assert_eq(expert_table_remove(&t, expert_key(L, 0), &val), 0, "absent key");
    cr_assert_eq(val, VAL(99, 99), "an absent key leaves *val alone");
    unsigned char gone[12][40] = {{0}};
    for (int i = 0; i < L * E; i += 1) {
        int k = (i * 37) % (L * E); /* 37 is prime to 480: visits each key once */
        if (k % 3 == 0) continue;
        int l = k / E, e = k % E;
        cr_assert_eq(expert_table_remove(&t, expert_key(l, e), &val), 1);
        cr_assert_eq(val, VAL(l, e));
        gone[l][e] = 1;
        if (i % 17 == 0)
            for (int l2 = 0; l2 < L; l2++)
                for (int e2 = 0; e2 < E; e2++)
                    cr_assert_eq(get(&t, l2, e2), gone[l2][e2] ? NULL : VAL(l2, e2), "(%d, %d)", l2, e2);
    }
    size_t left = 0;
    for (int l = 0; l < L; l++)
        for (int e = 0; e < E; e++) {
            left += !gone[l][e];
            cr_assert_eq(expert_table_has(&t, expert_key(l, e)), !gone[l][e]);
        }
    cr_assert_eq(t.n, left);
    cr_assert_eq(expert_table_put(&t, expert_key(0, 1), (void *)(intptr_t)7), 0, "a removed key can come back");
    cr_assert_eq((intptr_t)get(&t, 0, 1), 7);
    expert_table_free(&t, NULL, NULL);
}

//  The pair (-1, -1) packed plus 1 would be 0, the empty slot's mark: a
//  negative layer or expert has no key, and key 0 is never held, never put.
Test(expert_table, negative_pairs_have_no_key_and_key_0_is_refused) {
    cr_assert_eq(expert_key(-1, -1), 0);
    cr_assert_eq(expert_key(-1, 3), 0);
    cr_assert_eq(expert_key(3, -1), 0);
    cr_assert_neq(expert_key(0, 0), 0);
    int32_t l, e;
    expert_unkey(expert_key(7, 200), &l, &e);
    cr_assert(l == 7 && e == 200);
    expert_unkey(expert_key(INT32_MAX, INT32_MAX), &l, &e);
    cr_assert(l == INT32_MAX && e == INT32_MAX);
    expert_table t = {0};
    cr_assert_eq(expert_table_put(&t, 0, VAL(1, 1)), COLI_EINVAL);
    cr_assert_eq(t.n, 0);
    cr_assert_eq(expert_table_put(&t, expert_key(0, 0), NULL), 0, "a set: the value may be NULL");
    cr_assert_eq(expert_table_put(&t, expert_key(2, 5), VAL(2, 5)), 0);
    cr_assert(!expert_table_has(&t, 0), "empty slots are no entry");
    cr_assert(!expert_table_has(&t, expert_key(-1, -1)));
    cr_assert_null(expert_table_get(&t, 0));
    cr_assert_eq(expert_table_remove(&t, 0, NULL), 0);
    cr_assert(expert_table_has(&t, expert_key(0, 0)), "held with a NULL value");
    cr_assert_eq(t.n, 2);
    expert_table_free(&t, NULL, NULL);
}

Test(expert_table, put_of_a_held_key_replaces_its_value) {
    expert_table t = {0};
    for (int i = 0; i < 200; i++) cr_assert_eq(expert_table_put(&t, expert_key(i % 4, i % 50), VAL(i, 0)), 0);
    cr_assert_eq(t.n, 100, "4 x 50 pairs cycle, 100 distinct (i %% 4, i %% 50) for i < 200");
    cr_assert_eq(get(&t, 3, 49), VAL(199, 0), "the last put wins");
    expert_table_free(&t, NULL, NULL);
}
