/*
 * test_expert_cache.c - the live expert cache (docs/scheduler.md, "Live
 * expert cache"):
 *  - the policy without processes: promotion into free room, hysteresis
 *    (equal heat never swaps; a clearly hotter expert does), decay (an old
 *    favourite loses to a new one after some half-lives), the initial set
 *    from heat, refused loads and unsent messages give their room back;
 *  - --devices @cache=SIZE parsing, errors naming the item;
 *  - real processes, a cpu cache worker in front of a cpu tier: tokens and
 *    logits are the bytes of --inproc for budgets of 1 expert, 25 %, 50 %
 *    and all, with evictions happening mid-run, with a heat file, and with
 *    the cache worker SIGKILLed mid-run; hits + misses = the routed pairs;
 *    the rows the cache worker served = its hits;
 *  - a worker refuses malformed CacheLoad / CacheEvict with a one-line reason,
 *    keys outside the model included ((-1, -1) too), and holds one copy per
 *    expert whether a CacheLoad, a Place or both made it resident.
 * Uses the bundled trained model (models/, always in the repository):
 * 4 layers x 4 experts of 576 KiB, top-2.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coordinator/heat.h"
#include "coordinator/sched/expert_cache.h"
#include "coordinator/sched/sched_internal.h"
#include "core/gguf/gguf.h"
#include "tests/cli_run.h"
#include "tests/gptoss_util.h"
#include "tests/sched_util.h"

#define BUNDLED "models/tiny-moe-4e2r-f16.gguf"
#define N_LAYER 4
#define TOP_K 2

TestSuite(ec_policy);
TestSuite(ec_devices);
TestSuite(ec_run, .init = sched_env_defaults, .timeout = 240);
TestSuite(ec_wire, .timeout = 60);
TestSuite(ec_cli, .init = sched_env_defaults, .timeout = 240);

static const uint64_t s_bytes[2] = {100, 100};

static expert_cache *s_cache(uint64_t budget) {
    expert_cache *ec = ec_new(2, 4, s_bytes, budget, NULL);
    cr_assert_not_null(ec);
    return ec;
}

//  Load slot through decide + ack; it must be granted without a victim.
static void s_make_resident(expert_cache *ec, int64_t slot) {
    ec_action a[4];
    cr_assert_eq(ec_decide(ec, &slot, 1, 0, a, 4), 1);
    cr_assert_eq(a[0].victim, -1);
    ec_loaded(ec, (size_t)slot, 1);
    cr_assert_eq(ec->state[slot], EC_RESIDENT);
}

Test(ec_policy, promotion_into_free_room_then_hits) {
    expert_cache *ec = s_cache(200);
    cr_assert_eq(ec_touch(ec, 1), 0, "not resident: a miss");
    int64_t c = 1;
    ec_action a[4];
    cr_assert_eq(ec_decide(ec, &c, 1, 0, a, 4), 1);
    cr_assert_eq(a[0].slot, 1);
    cr_assert_eq(a[0].victim, -1, "free room: nothing evicted");
    cr_assert_eq(ec->state[1], EC_LOADING);
    cr_assert_eq(ec_touch(ec, 1), 0, "LOADING is not routed: still a miss");
    cr_assert_eq(ec_decide(ec, &c, 1, 0, a, 4), 0, "already on its way");
    ec_loaded(ec, 1, 1);
    cr_assert_eq(ec_touch(ec, 1), 1, "acknowledged: a hit");
    cr_assert_eq(ec->c.hits, 1);
    cr_assert_eq(ec->c.misses, 2);
    cr_assert_eq(ec->c.promotions, 1);
    cr_assert_eq(ec->c.bytes_moved, 100);
    cr_assert_eq(ec->used, 100);
    ec_free(ec);
}

Test(ec_policy, hysteresis_keeps_equal_heat_and_lets_a_clear_winner_in) {
    expert_cache *ec = s_cache(100); /* one expert */
    s_make_resident(ec, 0);
    ec_action a[4];
    int64_t b = 1;                  /* same layer as slot 0 */
    for (int i = 0; i < 200; i++) { /* two experts of equal heat, alternating */
        ec_touch(ec, 0);
        ec_touch(ec, 1);
        cr_assert_eq(ec_decide(ec, &b, 1, 0, a, 4), 0, "round %d: equal heat must not swap", i);
    }
    cr_assert_eq(ec->c.evictions, 0);
    /* 0 has 200 touches; 1 needs a share above 1.25 times 0's: more than 250 */
    for (int i = 0; i < 50; i++) ec_touch(ec, 1);
    cr_assert_eq(ec_decide(ec, &b, 1, 0, a, 4), 0, "250 is not more than 250");
    ec_touch(ec, 1);
    cr_assert_eq(ec_decide(ec, &b, 1, 0, a, 4), 1, "251 is");
    cr_assert_eq(a[0].victim, 0);
    cr_assert_eq(a[0].slot, 1);
    cr_assert_eq(ec->state[0], EC_NONE, "the victim leaves routing at once");
    cr_assert_eq(ec->state[1], EC_LOADING);
    cr_assert_eq(ec->c.evictions, 1);
    cr_assert_eq(ec->used, 100);
    ec_free(ec);
}

//  A pinned slot (the disk tier's --pin L:E=ram) takes its room at once and
//  is never a victim, however much hotter a candidate gets; a pin that does
//  not fit what is left is refused.
Test(ec_policy, a_pinned_slot_is_never_evicted) {
    expert_cache *ec = s_cache(100); /* one expert */
    cr_assert_eq(ec_pin(ec, 0), 0);
    cr_assert_eq(ec->state[0], EC_LOADING);
    cr_assert_eq(ec->used, 100);
    cr_assert_eq(ec_pin(ec, 1), -1, "no room left for a second pin");
    ec_loaded(ec, 0, 1);
    ec_action a[4];
    int64_t b = 1;
    for (int i = 0; i < 1000; i++) ec_touch(ec, 1);
    cr_assert_eq(ec_decide(ec, &b, 1, 0, a, 4), 0, "slot 1 is far hotter, but 0 is pinned");
    cr_assert_eq(ec->state[0], EC_RESIDENT);
    cr_assert_eq(ec->c.evictions, 0);
    cr_assert_eq(ec_seed(ec, NULL), 0);
    ec_free(ec);
}

//  Layers compare by share: a big batch seen by layer 1 only does not make
//  layer 1's experts look hotter than layer 0's hot one.
Test(ec_policy, layers_compare_by_share_not_by_raw_counts) {
    expert_cache *ec = s_cache(100);
    s_make_resident(ec, 0);
    for (int i = 0; i < 10; i++) ec_touch(ec, 0), ec_touch(ec, 1); /* layer 0: 0 and 1 half each */
    for (int i = 0; i < 500; i++) ec_touch(ec, 4 + i % 4);         /* layer 1: a burst, uniform */
    int64_t c[4] = {4, 5, 6, 7};
    ec_action a[4];
    cr_assert_eq(ec_decide(ec, c, 4, 0, a, 4), 0, "a quarter share does not beat a half");
    for (int i = 0; i < 300; i++) ec_touch(ec, 5);
    cr_assert_eq(ec_decide(ec, c, 4, 0, a, 4), 0, "425 / 800 = 0.53 is not above 0.5 * 1.25");
    for (int i = 0; i < 300; i++) ec_touch(ec, 5);
    cr_assert_eq(ec_decide(ec, c, 4, 0, a, 4), 1, "725 / 1100 = 0.66 is");
    cr_assert_eq(a[0].victim, 0);
    cr_assert_eq(a[0].slot, 5);
    ec_free(ec);
}

Test(ec_policy, decay_lets_a_new_favourite_displace_an_old_one) {
    ec_params p;
    ec_default_params(&p);
    p.half_life_tokens = 10;
    expert_cache *ec = ec_new(2, 4, s_bytes, 100, &p);
    s_make_resident(ec, 2);
    for (int i = 0; i < 50; i++) ec_touch(ec, 2);
    int64_t b = 1; /* same layer */
    ec_action a[4];
    for (int i = 0; i < 3; i++) ec_touch(ec, 1);
    cr_assert_eq(ec_decide(ec, &b, 1, 0, a, 4), 0, "3 recent touches do not beat 50 of the same age");
    ec_advance(ec, 100); /* ten half-lives: the old touches weigh 1/1024 of new ones */
    for (int i = 0; i < 3; i++) ec_touch(ec, 1);
    cr_assert_eq(ec_decide(ec, &b, 1, 0, a, 4), 1, "now they do");
    cr_assert_eq(a[0].victim, 2);
    /* a rescale keeps the order */
    ec_loaded(ec, 1, 1);
    ec_advance(ec, 10 * 400);
    cr_assert(ec->inc < 1e100 && ec->inc >= 1);
    cr_assert(ec->score[1] > ec->score[2]);
    ec_free(ec);
}

Test(ec_policy, initial_set_from_heat_hottest_first_within_budget) {
    expert_cache *ec = s_cache(300);
    const uint64_t heat[8] = {5, 9, 1, 0, 9, 2, 7, 3};
    cr_assert_eq(ec_seed(ec, heat), 3);
    /* 9 (slot 1), 9 (slot 4: ties in slot order), 7 (slot 6) */
    const unsigned char want[8] = {EC_NONE, EC_LOADING, EC_NONE, EC_NONE, EC_LOADING, EC_NONE, EC_LOADING, EC_NONE};
    cr_assert_eq(memcmp(ec->state, want, 8), 0);
    cr_assert(ec->score[1] > ec->score[6] && ec->score[6] > ec->score[0]);
    for (int k = 0; k < 8; k++)
        if (want[k] == EC_LOADING) ec_placed(ec, (size_t)k, k != 6);
    cr_assert_eq(ec->c.promotions, 0, "the initial set is no promotion");
    cr_assert_eq(ec->c.bytes_moved, 200);
    cr_assert_eq(ec->used, 200, "slot 6 was refused: its room is free");
    cr_assert_eq(ec_seed(s_cache(300), NULL), 0);
    ec_free(ec);
}

Test(ec_policy, refusals_and_unsent_messages_give_room_back) {
    expert_cache *ec = s_cache(100);
    s_make_resident(ec, 0);
    for (int i = 0; i < 10; i++) ec_touch(ec, 3);
    int64_t c = 3;
    ec_action a[4];
    cr_assert_eq(ec_decide(ec, &c, 1, 0, a, 4), 1);
    /* the CacheEvict could not be sent: the victim is routed again, the load is off */
    ec_unevict(ec, 0);
    ec_unload(ec, 3);
    cr_assert_eq(ec->state[0], EC_RESIDENT);
    cr_assert_eq(ec->state[3], EC_NONE);
    cr_assert_eq(ec->used, 100);
    cr_assert_eq(ec->c.evictions, 0);
    cr_assert_eq(ec_decide(ec, &c, 1, 0, a, 4), 1);
    ec_loaded(ec, 3, 0); /* the worker refused it */
    cr_assert_eq(ec->state[3], EC_NONE);
    cr_assert_eq(ec->used, 0);
    cr_assert_eq(ec->c.load_refused, 1);
    ec_free(ec);
}

Test(ec_policy, loads_per_decision_are_bounded_and_restart_hides_everything) {
    expert_cache *ec = s_cache(800);
    int64_t c[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    ec_action a[8];
    cr_assert_eq(ec_decide(ec, c, 8, 1, a, 8), 4, "max_loads 4");
    cr_assert_eq(ec->c.prefetch_issued, 4);
    for (int i = 0; i < 4; i++) ec_loaded(ec, (size_t)a[i].slot, 1);
    cr_assert_eq(ec_touch(ec, 0), 1);
    cr_assert_eq(ec->c.prefetch_used, 1, "a prefetched slot routed while resident");
    cr_assert_eq(ec_touch(ec, 0), 1);
    cr_assert_eq(ec->c.prefetch_used, 1, "counted once");
    ec_restart(ec);
    for (int k = 0; k < 4; k++) cr_assert_eq(ec->state[k], EC_LOADING, "a restarted worker holds nothing yet");
    cr_assert_eq(ec_touch(ec, 1), 0);
    ec_free(ec);
}

// ---------------------------------------------------------------------------
Test(ec_devices, cache_suffix_parses_and_errors_name_the_item) {
    device_spec d[8];
    int n = 0, inproc = 0;
    cr_assert_eq(sched_parse_devices("cpu:1@2@cache=25%,cpu:1", d, 8, &n, &inproc), 0, "%s", coli_last_error());
    cr_assert_eq(n, 2);
    cr_assert(d[0].cache && d[0].cache_pct == 25 && d[0].threads == 2);
    cr_assert(!d[1].cache);
    cr_assert_eq(sched_parse_devices("cpu@cache=64M,cuda:0@cache=1G", d, 8, &n, &inproc), 0, "%s", coli_last_error());
    cr_assert(d[0].cache && d[0].budget == 64ull << 20 && d[0].cache_pct == 0);
    cr_assert(d[1].cache && d[1].budget == 1ull << 30 && !strcmp(d[1].plugin, "cuda"));
    const char *bad[] = {"cpu@cache=0%",    "cpu@cache=101%", "cpu@cache=x",  "cpu@cache=",
                         "cpu=1G@cache=2G", "xdna@cache=1G",  "cpu@cache=5%%"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_neq(sched_parse_devices(bad[i], d, 8, &n, &inproc), 0, "'%s' accepted", bad[i]);
        const char *e = coli_last_error();
        cr_assert(strstr(e, "cache") && !strchr(e, '\n'), "'%s': %s", bad[i], e);
    }
}

//  coli plan shows a cache worker as what the scheduler makes of it: no home
//  for any expert (the other workers hold them all), with its budget in bytes.
Test(ec_devices, plan_shows_the_cache_and_homes_every_expert_elsewhere) {
    if (access(BUNDLED, R_OK) != 0) cr_skip_test("skipped: %s missing", BUNDLED);
    char *plan = NULL;
    cr_assert_eq(coli_plan_text(BUNDLED, "cpu:1@2@cache=25%,cpu:1@1", &plan), 0, "%s", coli_last_error());
    cr_expect(strstr(plan, "worker 0  cpu:0  live expert cache  budget 2.2 MiB"), "%s", plan);
    cr_expect(strstr(plan, "worker 1  cpu:1  budget unlimited  experts 16"), "%s", plan);
    cr_expect(strstr(plan, "layer   0: 1 1 1 1\n"), "%s", plan);
    free(plan);
}

// ---------------------------------------------------------------------------
//  A cache worker's counters from the stats JSON.
typedef struct cache_counts {
    long hits, misses, promotions, evictions, bytes_moved, rows, budget;
} cache_counts;

static cache_counts s_counts(const char *json, int id) {
    cache_counts c = {0};
    cJSON *j = cJSON_Parse(json);
    cr_assert_not_null(j, "stats JSON");
    cJSON *w = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "workers"), id);
    cJSON *k = cJSON_GetObjectItem(w, "cache");
    cr_assert_not_null(k, "worker %d has no cache stats: %s", id, json);
    c.hits = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(k, "hits"));
    c.misses = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(k, "misses"));
    c.promotions = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(k, "promotions"));
    c.evictions = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(k, "evictions"));
    c.bytes_moved = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(k, "bytes_moved"));
    c.budget = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(k, "budget_bytes"));
    c.rows = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(w, "rows"));
    cJSON_Delete(j);
    return c;
}

#define ROUTED_PAIRS ((PROMPT_LEN + GEN_STEPS) * N_LAYER * TOP_K)

//  Before each step: wait (up to 10 s) until the cache's loads are acknowledged,
//  so that a loaded machine's scheduling does not decide what the test sees.
static void s_settle(coli_model *m, int step, void *user) {
    (void)step, (void)user;
    for (double t0 = sched_now(); sched_now() - t0 < 10; usleep(2000)) {
        char *js = NULL;
        cr_assert_eq(coli_model_stats_json(m, &js), 0);
        cJSON *j = cJSON_Parse(js);
        free(js);
        cJSON *c = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "workers"), 0), "cache");
        double used = cJSON_GetNumberValue(cJSON_GetObjectItem(c, "used_bytes"));
        double held = cJSON_GetNumberValue(cJSON_GetObjectItem(c, "resident_experts"));
        cJSON_Delete(j);
        if (used == held * 576 * 1024) return;
    }
    cr_assert_fail("the cache's loads were not acknowledged within 10 s");
}

Test(ec_run, byte_identical_to_inproc_for_every_budget_with_evictions) {
    gen_result ref, r;
    sched_generate(BUNDLED, "inproc", NULL, NULL, &ref);
    const char *cases[] = {"cpu:1@1@cache=576K,cpu:1@1", "cpu:1@1@cache=25%,cpu:1@1", "cpu:1@1@cache=50%,cpu:1@1",
                           "cpu:1@1@cache=100%,cpu:1@1"};
    const long expert = 576 * 1024, budget[4] = {expert, 4 * expert, 8 * expert, 16 * expert};
    long evictions_small = 0;
    for (size_t i = 0; i < 4; i++) {
        if (i < 2) setenv("COLI_CACHE_MARGIN_PCT", "0", 1); /* no hysteresis: evictions mid-run */
        sched_generate(BUNDLED, cases[i], s_settle, NULL, &r);
        unsetenv("COLI_CACHE_MARGIN_PCT");
        sched_assert_same(&ref, &r, cases[i]);
        cache_counts c = s_counts(r.stats, 0);
        cr_assert_eq(c.hits + c.misses, ROUTED_PAIRS, "%s: every routed pair reaches the cache once", cases[i]);
        cr_assert_eq(c.rows, c.hits, "%s: the cache worker computed exactly its hits", cases[i]);
        cr_assert_gt(c.promotions, 0, "%s", cases[i]);
        cr_assert_eq(c.budget, budget[i], "%s", cases[i]);
        if (i < 2) evictions_small += c.evictions;
        if (i == 3) cr_assert_eq(c.evictions, 0, "all experts fit: nothing to evict");
        cr_assert_eq(sched_field(r.stats, "fallbacks_total"), 0, "%s: %s", cases[i], r.stats);
        gen_free(&r);
    }
    cr_assert_gt(evictions_small, 0, "small budgets evict mid-run");
    gen_free(&ref);
}

//  gpt-oss (tests/gen_gptoss.py, 4 MoE layers, top-4): the cache worker's
//  copies keep the experts' biases and SWIGLU_OAI (the bias pointers stay in
//  its mapping): --inproc's bytes, every routed pair through the cache.
Test(ec_run, gptoss_byte_identical_to_inproc) {
    char model[4096];
    gptoss_model_f32(model, sizeof model);
    gen_result ref, r;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    setenv("COLI_CACHE_MARGIN_PCT", "0", 1);
    sched_generate(model, "cpu:1@1@cache=25%,cpu:1@1", NULL, NULL, &r);
    unsetenv("COLI_CACHE_MARGIN_PCT");
    sched_assert_same(&ref, &r, "gpt-oss with a live expert cache");
    cache_counts c = s_counts(r.stats, 0);
    cr_expect_eq(c.hits + c.misses, (PROMPT_LEN + GEN_STEPS) * 4 * 4, "every routed pair reaches the cache once");
    cr_expect_eq(c.rows, c.hits, "the cache worker computed exactly its hits");
    cr_expect_eq(sched_field(r.stats, "fallbacks_total"), 0, "%s", r.stats);
    cr_log_info("gpt-oss cache: %ld hits, %ld misses", c.hits, c.misses);
    gen_free(&r);
    gen_free(&ref);
}

//  A cache worker whose plugin lacks SWIGLU_OAI (COLI_FAULT=no-act on
//  worker 0, as a GPU cache worker today) never loads a gpt-oss expert: no
//  miss, no promotion, no refusal, no fallback; --inproc's bytes.
Test(ec_run, gptoss_cache_worker_without_the_activation_loads_nothing) {
    char model[4096];
    gptoss_model_f32(model, sizeof model);
    gen_result ref, r;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    setenv("COLI_CACHE_MARGIN_PCT", "0", 1);
    setenv("COLI_FAULT", "no-act@worker=0", 1);
    sched_generate(model, "cpu:1@1@cache=25%,cpu:1@1", NULL, NULL, &r);
    unsetenv("COLI_FAULT");
    unsetenv("COLI_CACHE_MARGIN_PCT");
    sched_assert_same(&ref, &r, "gpt-oss, a cache worker without SWIGLU_OAI");
    cache_counts c = s_counts(r.stats, 0);
    cr_expect_eq(c.promotions, 0, "%s", r.stats);
    cr_expect_eq(c.misses, 0, "%s", r.stats);
    cr_expect_eq(c.rows, 0, "%s", r.stats);
    cr_expect_eq(sched_field(r.stats, "fallbacks_total"), 0, "%s", r.stats);
    gen_free(&r);
    gen_free(&ref);
}

//  Prefetch on (the default) and off: the same bytes; prefetches issued only when on.
Test(ec_run, prefetch_on_and_off_byte_identical) {
    gen_result ref, r;
    sched_generate(BUNDLED, "inproc", NULL, NULL, &ref);
    const char *devices[] = {"cpu:1@1@cache=25%,cpu:1@1", "cpu:1@1@cache=50%,cpu:1@1"};
    long issued[2][2] = {{0}};
    for (int on = 0; on < 2; on++)
        for (int i = 0; i < 2; i++) {
            setenv("COLI_CACHE_PREFETCH", on ? "1" : "0", 1);
            sched_generate(BUNDLED, devices[i], s_settle, NULL, &r);
            sched_assert_same(&ref, &r, devices[i]);
            cJSON *j = cJSON_Parse(r.stats);
            cJSON *c = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "workers"), 0), "cache");
            issued[on][i] = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(c, "prefetch_issued"));
            long used = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(c, "prefetch_used"));
            cr_assert_leq(used, issued[on][i], "%s", r.stats);
            cache_counts k = s_counts(r.stats, 0);
            cr_assert_eq(k.hits + k.misses, ROUTED_PAIRS);
            cJSON_Delete(j);
            gen_free(&r);
        }
    cr_assert_eq(issued[0][0] + issued[0][1], 0, "COLI_CACHE_PREFETCH=0 issues none");
    cr_assert_gt(issued[1][0] + issued[1][1], 0, "the default prefetches the next layer");
    gen_free(&ref);
}

Test(ec_run, heat_seeds_the_initial_set) {
    char heat[256];
    snprintf(heat, sizeof heat, "/tmp/coli-ec-%ld.heat", (long)getpid());
    unlink(heat);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    mp.n_threads = 1;
    mp.heat_path = heat;
    coli_model *m = NULL;
    gen_result ref, r;
    cr_assert_eq(coli_model_load(BUNDLED, &mp, &m), 0, "%s", coli_last_error());
    sched_generate_on(m, "inproc", NULL, NULL, &ref);
    coli_model_free(&m); /* writes the heat */
    mp.devices = "cpu:1@1@cache=25%,cpu:1@1";
    cr_assert_eq(coli_model_load(BUNDLED, &mp, &m), 0, "%s", coli_last_error());
    char *js = NULL;
    cr_assert_eq(coli_model_stats_json(m, &js), 0);
    cache_counts c0 = s_counts(js, 0);
    free(js);
    cr_assert_eq(c0.bytes_moved, 4 * 576 * 1024, "the 4 hottest experts are loaded at start");
    sched_generate_on(m, mp.devices, NULL, NULL, &r);
    coli_model_free(&m);
    sched_assert_same(&ref, &r, "heat-seeded cache");
    cache_counts c = s_counts(r.stats, 0);
    cr_assert_eq(c.hits + c.misses, ROUTED_PAIRS);
    cr_assert_gt(c.hits, 0);
    gen_free(&ref);
    gen_free(&r);
    unlink(heat);
}

//  The cache worker SIGKILLs itself on its first batch (COLI_FAULT crash,
//  a real process death): its rows go to the CPU tier, it restarts empty
//  of routed experts until its Place is answered, the bytes do not change.
//  Before the last two steps: wait (up to 20 s) until the killed worker is back.
static void s_wait_restarted(coli_model *m, int step, void *user) {
    if (step < 1) {
        s_settle(m, step, user);
        return;
    }
    for (double t0 = sched_now(); sched_now() - t0 < 20;) {
        char *js = NULL, state[32];
        cr_assert_eq(coli_model_stats_json(m, &js), 0);
        sched_worker_field(js, 0, "state", state, sizeof state);
        free(js);
        if (strcmp(state, "down") && strcmp(state, "starting") && strcmp(state, "placing"))
            return s_settle(m, step, user);
        usleep(20000);
    }
    cr_assert_fail("the cache worker did not come back");
}

Test(ec_run, cache_worker_killed_mid_run) {
    gen_result ref, r;
    sched_generate(BUNDLED, "inproc", NULL, NULL, &ref);
    setenv("COLI_FAULT", "crash@worker=0:after=0", 1);
    sched_generate(BUNDLED, "cpu:1@1@cache=50%,cpu:1@1", s_wait_restarted, NULL, &r);
    unsetenv("COLI_FAULT");
    sched_assert_same(&ref, &r, "cache worker killed");
    cr_assert_geq(sched_fallbacks(r.stats, "cpu:0", "crash"), 1, "%s", r.stats);
    char restarts[16];
    sched_worker_field(r.stats, 0, "restarts", restarts, sizeof restarts);
    cr_assert_geq(atoi(restarts), 1, "%s", r.stats);
    cache_counts c = s_counts(r.stats, 0);
    cr_assert_eq(c.hits + c.misses, ROUTED_PAIRS);
    gen_free(&ref);
    gen_free(&r);
    sched_assert_no_orphans();
}

// ---------------------------------------------------------------------------
// A real coli-worker, driven here through a ROUTER: Place (cache), then
// malformed cache requests, each refused with a one-line reason.

typedef struct fake_coord {
    void *ctx, *router;
    unsigned char peer[WIRE_MAX_PEER];
    size_t peer_len;
    pid_t pid;
} fake_coord;

static void s_recv(fake_coord *f, wire_msg *m, Coli__Envelope__BodyCase want) {
    for (;;) {
        cr_assert_eq(wire_recv(f->router, 1, 0, m), 0, "no message from the worker: %s", coli_last_error());
        if (m->env->body_case == want) break;
        wire_msg_clear(m); /* heartbeats */
    }
    memcpy(f->peer, m->peer, m->peer_len);
    f->peer_len = m->peer_len;
}

static void s_send(fake_coord *f, Coli__Envelope *env) {
    cr_assert_eq(wire_send(f->router, f->peer, f->peer_len, env, NULL, 0, 0), 0, "%s", coli_last_error());
}

//  A Place (of the bundled model) of n (layer, expert) pairs; the ack is not awaited.
static void s_send_place(fake_coord *f, int cache, const int (*le)[2], size_t n) {
    gguf_file *g = NULL;
    cr_assert_eq(gguf_open(BUNDLED, &g), 0);
    Coli__Place p = COLI__PLACE__INIT;
    p.model_path = BUNDLED;
    wire_model_identity(g, &p.model_size, &p.header_hash);
    gguf_close(&g);
    Coli__ExpertRef r[8], *refs[8];
    for (size_t i = 0; i < n && i < 8; i++) {
        coli__expert_ref__init(&r[i]);
        r[i].layer = le[i][0], r[i].expert = le[i][1];
        refs[i] = &r[i];
    }
    p.n_experts = n, p.experts = refs, p.cache = cache;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_PLACE, env.place = &p;
    s_send(f, &env);
}

static void s_start_worker(fake_coord *f, int cache) {
    char ep[128], bin[1200];
    snprintf(ep, sizeof ep, "ipc://@coli-ec-test-%ld", (long)getpid());
    snprintf(bin, sizeof bin, "%s/bin/coli-worker", sched_build_dir());
    f->ctx = zmq_ctx_new();
    f->router = zmq_socket(f->ctx, ZMQ_ROUTER);
    int tmo = 20000;
    zmq_setsockopt(f->router, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    cr_assert_eq(zmq_bind(f->router, ep), 0);
    char parent[16]; /* the worker leaves when this test process does, a failed assertion included */
    snprintf(parent, sizeof parent, "%d", (int)getpid());
    f->pid = fork();
    if (f->pid == 0) {
        execl(bin, bin, "--connect", ep, "--id", "0", "--gen", "0", "--plugin", "cpu", "--device", "0", "--threads",
              "1", "--budget", "1179648", "--parent-pid", parent, (char *)NULL);
        _exit(127);
    }
    wire_msg m;
    s_recv(f, &m, COLI__ENVELOPE__BODY_HELLO);
    cr_assert_eq(m.env->hello->status, COLI__STATUS__STATUS_OK, "%s", m.env->hello->reason);
    wire_msg_clear(&m);
    const int first[1][2] = {{0, 0}};
    s_send_place(f, cache, first, 1);
    s_recv(f, &m, COLI__ENVELOPE__BODY_PLACE_ACK);
    cr_assert_eq(m.env->place_ack->status, COLI__STATUS__STATUS_OK, "%s", m.env->place_ack->reason);
    cr_assert_eq(m.env->place_ack->n_resident, 1);
    wire_msg_clear(&m);
}

static void s_stop_worker(fake_coord *f) {
    Coli__Shutdown sd = COLI__SHUTDOWN__INIT;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_SHUTDOWN, env.shutdown = &sd;
    s_send(f, &env);
    int st = 0;
    cr_assert_eq(waitpid(f->pid, &st, 0), f->pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker status %d", st);
    zmq_close(f->router);
    zmq_ctx_term(f->ctx);
}

//  Send a CacheLoad (evict 0) or CacheEvict (1) of n (layer, expert) pairs, not waiting for the ack.
static void s_send_request(fake_coord *f, int evict, uint64_t seq, const int (*le)[2], size_t n) {
    Coli__ExpertRef refs[8], *ptrs[8];
    for (size_t i = 0; i < n; i++) {
        coli__expert_ref__init(&refs[i]);
        refs[i].layer = le[i][0], refs[i].expert = le[i][1];
        ptrs[i] = &refs[i];
    }
    Coli__CacheLoad ld = COLI__CACHE_LOAD__INIT;
    Coli__CacheEvict ev = COLI__CACHE_EVICT__INIT;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    if (evict) {
        ev.seq = seq, ev.n_experts = n, ev.experts = ptrs;
        env.body_case = COLI__ENVELOPE__BODY_CACHE_EVICT, env.cache_evict = &ev;
    } else {
        ld.seq = seq, ld.n_experts = n, ld.experts = ptrs;
        env.body_case = COLI__ENVELOPE__BODY_CACHE_LOAD, env.cache_load = &ld;
    }
    s_send(f, &env);
}

//  s_send_request, then its ack (caller clears).
static void s_request(fake_coord *f, int evict, uint64_t seq, const int (*le)[2], size_t n, wire_msg *m) {
    s_send_request(f, evict, seq, le, n);
    s_recv(f, m, COLI__ENVELOPE__BODY_CACHE_ACK);
    cr_assert_eq(m->env->cache_ack->seq, seq);
}

static void s_expect_refused(fake_coord *f, int evict, const int (*le)[2], size_t n, const char *why) {
    static uint64_t seq = 100;
    wire_msg m;
    s_request(f, evict, ++seq, le, n, &m);
    const Coli__CacheAck *a = m.env->cache_ack;
    cr_assert_eq(a->status, COLI__STATUS__STATUS_FAILED, "accepted: %s", why);
    cr_assert(strstr(a->reason, why) && !strchr(a->reason, '\n'), "reason '%s', want '%s'", a->reason, why);
    wire_msg_clear(&m);
}

Test(ec_wire, malformed_cache_requests_are_refused_with_a_reason) {
    fake_coord f = {0};
    s_start_worker(&f, 1);
    const int out_of_range[1][2] = {{0, 4}}, bad_layer[1][2] = {{9, 0}}, twice[2][2] = {{1, 1}, {1, 1}},
              held[1][2] = {{0, 0}}, absent[1][2] = {{2, 2}};
    s_expect_refused(&f, 0, out_of_range, 1, "expert");
    s_expect_refused(&f, 0, bad_layer, 1, "9");
    s_expect_refused(&f, 0, twice, 2, "named twice");
    s_expect_refused(&f, 0, held, 1, "already resident");
    s_expect_refused(&f, 0, held, 0, "0 experts");
    s_expect_refused(&f, 1, absent, 1, "not resident");
    /* a good load then a good eviction: acked with the resident set */
    wire_msg m;
    const int one[1][2] = {{3, 2}};
    s_request(&f, 0, 7, one, 1, &m);
    cr_assert_eq(m.env->cache_ack->status, COLI__STATUS__STATUS_OK, "%s", m.env->cache_ack->reason);
    cr_assert_eq(m.env->cache_ack->n_loaded, 1);
    cr_assert_eq(m.env->cache_ack->n_resident, 2);
    cr_assert_eq(m.env->cache_ack->bytes_copied, 576 * 1024, "the expert's bytes were copied");
    wire_msg_clear(&m);
    const int third[1][2] = {{1, 3}};
    s_request(&f, 0, 8, third, 1, &m); /* the budget holds two */
    cr_assert_eq(m.env->cache_ack->n_refused, 1);
    cr_assert_str_eq(m.env->cache_ack->refused[0]->kind, "budget");
    wire_msg_clear(&m);
    s_request(&f, 1, 9, held, 1, &m);
    cr_assert_eq(m.env->cache_ack->status, COLI__STATUS__STATUS_OK);
    cr_assert_eq(m.env->cache_ack->n_evicted, 1);
    cr_assert_eq(m.env->cache_ack->n_resident, 1);
    wire_msg_clear(&m);
    s_stop_worker(&f);
}

//  VmRSS of pid in KiB.
static long s_rss_kib(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *fp = fopen(path, "r");
    cr_assert(fp, "%s", path);
    long kib = -1;
    while (kib < 0 && fgets(line, sizeof line, fp))
        if (!strncmp(line, "VmRSS:", 6)) kib = strtol(line + 6, NULL, 10);
    fclose(fp);
    return kib;
}

//  The worker's copies after an ack: one per resident expert, each of its bytes.
static void s_expect_one_copy_each(const Coli__CacheAck *a, const char *when) {
    cr_assert_eq(a->copies, a->n_resident, "%s: %llu copies for %zu resident experts", when,
                 (unsigned long long)a->copies, a->n_resident);
    cr_assert_eq(a->copy_bytes, (uint64_t)a->n_resident * 576 * 1024, "%s: %llu bytes of copies for %zu experts", when,
                 (unsigned long long)a->copy_bytes, a->n_resident);
    cr_assert_eq(a->copy_bytes, a->resident_bytes, "%s: the plugin holds %llu bytes", when,
                 (unsigned long long)a->resident_bytes);
}

//  A CacheLoad and a Place of the same expert sent back to back (the worker
//  takes both before its loader's copy is adopted, as often as not), then an
//  evict: one copy per expert whatever the path, every round (issue 28: the
//  worker kept both copies and grew by an expert a round).
Test(ec_wire, load_and_place_of_one_expert_keep_one_copy) {
    fake_coord f = {0};
    s_start_worker(&f, 1);
    long rss0 = s_rss_kib(f.pid);
    for (int round = 0; round < 200; round++) {
        const int one[1][2] = {{1 + round % 3, round % 4}};
        s_send_request(&f, 0, 1000 + (uint64_t)round, one, 1);
        s_send_place(&f, 1, one, 1);
        int got_ack = 0, got_place = 0;
        while (!got_ack || !got_place) {
            wire_msg m;
            cr_assert_eq(wire_recv(f.router, 1, 0, &m), 0, "round %d: no answer: %s", round, coli_last_error());
            if (m.env->body_case == COLI__ENVELOPE__BODY_PLACE_ACK) {
                cr_assert_eq(m.env->place_ack->status, COLI__STATUS__STATUS_OK, "%s", m.env->place_ack->reason);
                got_place = 1;
            } else if (m.env->body_case == COLI__ENVELOPE__BODY_CACHE_ACK) {
                const Coli__CacheAck *a = m.env->cache_ack;
                /* loaded by the CacheLoad, or already held by the Place: both OK */
                cr_assert(a->status == COLI__STATUS__STATUS_OK || strstr(a->reason, "already resident"), "round %d: %s",
                          round, a->reason);
                got_ack = 1;
            }
            wire_msg_clear(&m);
        }
        wire_msg m;
        s_request(&f, 1, 5000 + (uint64_t)round, one, 1, &m);
        cr_assert_eq(m.env->cache_ack->status, COLI__STATUS__STATUS_OK, "round %d: %s", round,
                     m.env->cache_ack->reason);
        cr_assert_eq(m.env->cache_ack->n_resident, 1, "round %d: (0, 0) alone is left", round);
        char when[32];
        snprintf(when, sizeof when, "round %d", round);
        s_expect_one_copy_each(m.env->cache_ack, when);
        wire_msg_clear(&m);
    }
    /* a second check, with a wide margin: 200 leaked copies would be 112 MiB */
    long grew = s_rss_kib(f.pid) - rss0;
    cr_expect_lt(grew, 48 * 1024, "the worker grew by %ld KiB over 200 rounds", grew);
    s_stop_worker(&f);
}

//  Keys: (-1, -1) and other pairs outside the model are refused with a
//  reason (it used to wrap to the empty-slot marker and be "found"); expert
//  (0, 0) loads, is listed and evicts like any other.
Test(ec_wire, negative_and_out_of_range_keys_are_refused_and_expert_0_0_works) {
    fake_coord f = {0};
    s_start_worker(&f, 1);
    const int minus[1][2] = {{-1, -1}}, neg_expert[1][2] = {{0, -1}}, big[1][2] = {{2147483647, 2147483647}},
              zero[1][2] = {{0, 0}};
    s_expect_refused(&f, 1, minus, 1, "expert -1.-1");
    s_expect_refused(&f, 0, minus, 1, "expert -1.-1");
    s_expect_refused(&f, 1, neg_expert, 1, "expert 0.-1");
    s_expect_refused(&f, 1, big, 1, "expert 2147483647.2147483647");
    wire_msg m;
    s_request(&f, 1, 1, zero, 1, &m);
    cr_assert_eq(m.env->cache_ack->status, COLI__STATUS__STATUS_OK, "%s", m.env->cache_ack->reason);
    cr_assert_eq(m.env->cache_ack->n_evicted, 1);
    cr_assert_eq(m.env->cache_ack->n_resident, 0);
    s_expect_one_copy_each(m.env->cache_ack, "after evicting 0.0");
    wire_msg_clear(&m);
    s_expect_refused(&f, 1, zero, 1, "not resident");
    s_request(&f, 0, 2, zero, 1, &m);
    cr_assert_eq(m.env->cache_ack->status, COLI__STATUS__STATUS_OK, "%s", m.env->cache_ack->reason);
    cr_assert_eq(m.env->cache_ack->n_loaded, 1);
    cr_assert_eq(m.env->cache_ack->n_resident, 1);
    cr_assert_eq(m.env->cache_ack->resident[0]->layer, 0);
    cr_assert_eq(m.env->cache_ack->resident[0]->expert, 0);
    s_expect_one_copy_each(m.env->cache_ack, "after loading 0.0 again");
    wire_msg_clear(&m);
    s_stop_worker(&f);
}

Test(ec_wire, a_worker_placed_without_cache_refuses_cache_requests) {
    fake_coord f = {0};
    s_start_worker(&f, 0);
    const int one[1][2] = {{3, 2}};
    s_expect_refused(&f, 0, one, 1, "not a cache worker");
    s_stop_worker(&f);
}

// ---------------------------------------------------------------------------
//  The counters reach the end-of-run summary, --stats-json, coli stats and coli bench --json.
Test(ec_cli, counters_in_summary_stats_file_and_bench_json) {
    char coli[1024], st[256], bj[256];
    cli_build_path(coli, sizeof coli, "bin/coli");
    snprintf(st, sizeof st, "/tmp/coli-ec-%ld.json", (long)getpid());
    snprintf(bj, sizeof bj, "/tmp/coli-ec-bench-%ld.json", (long)getpid());
    char *run[] = {coli,
                   "run",
                   "-m",
                   BUNDLED,
                   "-p",
                   "And God said",
                   "-n",
                   "4",
                   "--temp",
                   "0",
                   "-t",
                   "1",
                   "--devices",
                   "cpu:1@1@cache=25%,cpu:1@1",
                   "--stats-json",
                   st,
                   NULL};
    cli_result r = cli_run(run);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.err, "cache cpu:0: budget 2.2 MiB  hits"), "summary: %s", r.err);
    cli_result_free(&r);
    char *stats[] = {coli, "stats", st, NULL};
    r = cli_run(stats);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "live expert caches:") && strstr(r.out, "promotions"), "%s", r.out);
    cli_result_free(&r);
    char *bench[] = {coli,       "bench", "-m",     BUNDLED, "--devices", "cpu:1@1@cache=50%,cpu:1@1", "-n", "4",
                     "--repeat", "1",     "--json", bj,      NULL};
    r = cli_run(bench);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "cache cpu:0: hit rate"), "%s", r.out);
    cli_result_free(&r);
    size_t n = 0;
    char *text = cli_slurp(bj, &n);
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "%s", text);
    cJSON *cfg = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "configs"), 0);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(cfg, "caches"), 0);
    cr_assert_not_null(c, "%s", text);
    cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(c, "hits")),
                 cJSON_GetNumberValue(cJSON_GetObjectItem(c, "rows")), "its rows are its hits");
    cJSON_Delete(j);
    free(text);
    unlink(st);
    unlink(bj);
}
