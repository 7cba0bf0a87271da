/*
 * test_scheduler_residency.c - partial residency: a worker loads each placed
 * expert on its own, says which it holds and which it refused (budget,
 * allocation), and the refused ones go to the CPU path, counted one fallback
 * each, the first three named on stderr and then one summary line. Tokens and
 * logits stay the bytes of the in-process run. The end-of-run summary gives
 * every worker's resident set.
 *
 * The fixture's experts are 96 KiB each (2 layers x 4 experts, F32). The cpu
 * plugin enforces its memory budget in load_expert; COLI_PLACE_IGNORE_BUDGET=1
 * makes placement send experts regardless, so that the plugin's refusal (what
 * a GPU plugin does when its accounting exceeds the coordinator's estimate)
 * is what is tested. COLI_FAULT=fail-expert stands in for a device allocation
 * failure.
 */
#include <fcntl.h>

#include "tests/sched_util.h"

#define MODEL "tiny-llama-moe-f32.gguf"

static void s_env(void) {
    sched_env_defaults();
    unsetenv("COLI_PLACE_IGNORE_BUDGET");
}

TestSuite(scheduler_residency, .init = s_env);

static long s_worker_long(const char *js, int id, const char *name) {
    char v[64];
    sched_worker_field(js, id, name, v, sizeof v);
    return atol(v);
}

//  devices with COLI_FAULT=fault: same bytes as --inproc; returns the stats JSON.
static char *s_run(const char *devices, const char *fault, char **err_text) {
    const char *model = sched_fixture(MODEL);
    gen_result ref, got;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    if (fault) setenv("COLI_FAULT", fault, 1);
    stderr_capture c = {-1, -1};
    if (err_text) c = stderr_capture_begin();
    sched_generate(model, devices, NULL, NULL, &got);
    if (err_text) *err_text = stderr_capture_end(c);
    unsetenv("COLI_FAULT");
    sched_assert_same(&ref, &got, devices);
    char *js = got.stats;
    got.stats = NULL;
    gen_free(&ref);
    gen_free(&got);
    sched_assert_no_orphans();
    return js;
}

//  Placement consults the budget: nothing beyond it is even sent, so nothing
//  is refused or counted; the budget-limited worker holds what fits (2 x 96 KiB).
Test(scheduler_residency, placement_stays_within_the_budget) {
    char *js = s_run("cpu:1=200K,cpu:1", NULL, NULL);
    cr_expect_eq(sched_field(js, "fallbacks_total"), 0, "%s", js);
    cr_expect_eq(s_worker_long(js, 0, "resident_experts"), 2, "%s", js);
    cr_expect_eq(s_worker_long(js, 0, "resident_bytes"), 2 * 98304, "%s", js);
    cr_expect_eq(s_worker_long(js, 1, "resident_experts"), 6, "%s", js);
    cr_expect_eq(s_worker_long(js, 0, "refused_experts"), 0, "%s", js);
    free(js);
}

//  Worker 0 is sent 4 experts (2 per layer) and holds the 2 that fit its
//  budget; the other 2 are refused ("budget") and computed by worker 1.
Test(scheduler_residency, budget_refusals_go_to_the_cpu_worker) {
    setenv("COLI_PLACE_IGNORE_BUDGET", "1", 1);
    char *err = NULL;
    char *js = s_run("cpu:1=200K,cpu:1", NULL, &err);
    cr_expect_eq(sched_fallbacks(js, "cpu:0", "budget"), 2, "%s", js);
    cr_expect_eq(sched_field(js, "fallbacks_total"), 2, "%s", js);
    cr_expect_eq(s_worker_long(js, 0, "resident_experts"), 2, "%s", js);
    cr_expect_eq(s_worker_long(js, 0, "refused_experts"), 2, "%s", js);
    cr_expect_eq(s_worker_long(js, 0, "owned_experts"), 2, "%s", js);
    cr_expect_eq(sched_field(js, "inproc_rows"), 0, "worker 1 takes the refused experts: %s", js);
    char v[32];
    sched_worker_field(js, 0, "status", v, sizeof v);
    cr_expect_str_eq(v, "up");
    cr_expect(strstr(err, "colibri: cpu:0: blk.1 expert 0: budget (cpu: expert 1/0:"), "%s", err);
    cr_expect(strstr(err, "colibri: cpu:0: blk.1 expert 2: budget"), "%s", err);
    cr_expect(!strstr(err, "more expert"), "no summary line for 2 refusals: %s", err);
    free(err);
    free(js);
}

//  One budget-limited worker alone: it holds 1 of 8, the 7 refused run
//  in-process; 3 are named on stderr, then one summary line.
Test(scheduler_residency, refusals_beyond_three_are_summarised) {
    setenv("COLI_PLACE_IGNORE_BUDGET", "1", 1);
    char *err = NULL;
    char *js = s_run("cpu:1=100K", NULL, &err);
    cr_expect_eq(sched_fallbacks(js, "cpu:0", "budget"), 7, "%s", js);
    cr_expect_eq(sched_field(js, "fallbacks_total"), 7, "%s", js);
    cr_expect_eq(s_worker_long(js, 0, "resident_experts"), 1, "%s", js);
    cr_expect_gt(sched_field(js, "inproc_rows"), 0, "%s", js);
    int named = 0;
    for (const char *p = err; (p = strstr(p, ": budget (cpu: expert")); p++) named++;
    cr_expect_eq(named, 3, "first three by name:\n%s", err);
    cr_expect(strstr(err, "colibri: cpu:0: 4 more experts left on CPU (budget 4)\n"), "%s", err);
    free(err);
    free(js);
}

//  An allocation failure (injected) on one expert of worker 0: that expert
//  alone goes to the CPU path ("alloc"); the worker keeps the other three.
Test(scheduler_residency, allocation_failure_leaves_one_expert_on_cpu) {
    char *err = NULL;
    char *js = s_run("cpu:2", "fail-expert@worker=0@layer=1", &err);
    cr_expect_eq(sched_fallbacks(js, "cpu:0", "alloc"), 1, "%s", js);
    cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "%s", js);
    cr_expect_eq(s_worker_long(js, 0, "resident_experts"), 3, "%s", js);
    cr_expect_eq(s_worker_long(js, 0, "refused_experts"), 1, "%s", js);
    cr_expect_eq(s_worker_long(js, 1, "resident_experts"), 4, "%s", js);
    cr_expect(strstr(err, "colibri: cpu:0: blk.1 expert 0: alloc (expert 1.0: device allocation failed"), "%s", err);
    free(err);
    free(js);
}

//  The end-of-run summary gives each worker's resident set in experts and bytes.
Test(scheduler_residency, summary_shows_each_resident_set) {
    setenv("COLI_PLACE_IGNORE_BUDGET", "1", 1);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "cpu:1=200K,cpu:1";
    mp.n_threads = 1;
    coli_model *m = NULL;
    stderr_capture c = stderr_capture_begin();
    int rc = coli_model_load(sched_fixture(MODEL), &mp, &m);
    free(stderr_capture_end(c));
    cr_assert_eq(rc, 0, "%s", coli_last_error());
    char *text = NULL;
    cr_assert_eq(coli_model_stats_text(m, &text), 0, "%s", coli_last_error());
    cr_expect(strstr(text, "cpu:0    plugin cpu   up          resident set: 2 experts (196608 bytes"), "%s", text);
    cr_expect(strstr(text, ", 2 refused"), "%s", text);
    cr_expect(strstr(text, "resident set: 4 experts (393216 bytes"), "%s", text);
    cr_expect(strstr(text, "fallbacks: budget 2"), "%s", text);
    free(text);
    const int pid = sched_worker_pid(m, 0); /* the partly refused worker goes with the model */
    coli_model_free(&m);
    sched_wait_dead(pid, 2.0);
}
