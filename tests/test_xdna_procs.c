/*
 * test_xdna_procs.c - the NPU lane through real coli-worker processes, with
 * the real helper built against the synthetic XRT runtime (plugins/xdna/
 * xrt_synth) and a synthetic package made by xdna_pack.
 *
 * Devices: "cpu:1" plus the xdna worker the opt-in adds (worker 1). Whenever
 * the lane does not compute (any diagnostic, decline or failure), tokens and
 * logits are the bytes of the in-process run; when it does, logits stay
 * within XDNA_LOGIT_TOL of them (BF16 arithmetic).
 */
#include <math.h>

#define SCHED_WAIVE_RUNNER_LEAK
#include "tests/sched_util.h"
#include "tests/xdna_test_util.h"

#define MODEL "tiny-llama-moe-f32.gguf"
#define XDNA "xdna:0"
/* BF16 keeps 8 significant bits (relative rounding error <= 2^-9 per value);
 * through three GEMMs per expert and two layers the fixture's logits moved by
 * at most 0.017 (teacher-forced, 7 steps) (docs/xdna.md); 0.1 leaves room without hiding a
 * wrong kernel (a missing sync or a wrong weight layout moves them by > 1). */
#define XDNA_LOGIT_TOL 0.1f
/* Q8_0 / Q4_0 weights: the CPU path rounds activations to Q8_0 blocks, the
 * lane to BF16: two different 8-bit roundings of the same values, so the two
 * paths differ more (measured 0.100 for Q8_0, 0.109 for Q4_0 on the fixtures). */
#define XDNA_LOGIT_TOL_QUANT 0.3f

TestSuite(xdna_procs, .init = xdna_env_defaults);

//  The in-process reference of a fixture, once per test process.
static const gen_result *s_reference_of(const char *model) {
    static gen_result refs[4];
    static char names[4][64];
    int i = 0;
    while (i < 4 && names[i][0] && strcmp(names[i], model)) i++;
    cr_assert_lt(i, 4);
    if (!names[i][0]) {
        sched_generate(sched_fixture(model), "inproc", NULL, NULL, &refs[i]);
        snprintf(names[i], sizeof names[i], "%s", model);
    }
    return &refs[i];
}

static const gen_result *s_reference(void) { return s_reference_of(MODEL); }

//  A run through cpu:1 (+ the lane) that the lane does not compute: same bytes,
//  `count` fallbacks of reason on xdna:0 (count < 0: at least one), and only those.
static void s_expect_declined(const char *reason, long count) {
    gen_result got;
    sched_generate(sched_fixture(MODEL), "cpu:1", NULL, NULL, &got);
    sched_assert_same(s_reference(), &got, reason);
    long n = sched_fallbacks(got.stats, XDNA, reason);
    if (count >= 0)
        cr_expect_eq(n, count, "%s: %ld fallbacks: %s", reason, n, got.stats);
    else
        cr_expect_gt(n, 0, "%s: no fallback counted: %s", reason, got.stats);
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), n, "only %s: %s", reason, got.stats);
    gen_free(&got);
    sched_assert_no_orphans();
}

//  Worker 1's provisioning failed with reason (a FAILED hello: counted once).
static void s_expect_failed_hello(const char *reason) { s_expect_declined(reason, 1); }

Test(xdna_procs, off_unless_requested_and_auto_never_adds_it) {
    char dir[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, sched_fixture(MODEL));
    const char *off[] = {NULL, "0", "", "yes"};
    for (size_t i = 0; i < sizeof off / sizeof *off; i++) {
        if (off[i])
            setenv("COLI_XDNA", off[i], 1);
        else
            unsetenv("COLI_XDNA");
        gen_result got;
        sched_generate(sched_fixture(MODEL), "auto", NULL, NULL, &got);
        cr_expect_null(strstr(got.stats, "\"plugin\":\"xdna\""), "COLI_XDNA=%s: %s", off[i] ? off[i] : "(unset)",
                       got.stats);
        sched_assert_same(s_reference(), &got, "auto without the lane");
        gen_free(&got);
    }
    /* named in --devices without the opt-in: the plugin itself says no */
    setenv("COLI_XDNA", "0", 1);
    gen_result got;
    sched_generate(sched_fixture(MODEL), "xdna,cpu:1", NULL, NULL, &got);
    sched_assert_same(s_reference(), &got, "xdna named, not requested");
    cr_expect_eq(sched_fallbacks(got.stats, XDNA, "NOT_REQUESTED"), 1, "%s", got.stats);
    gen_free(&got);
    xdna_rm_dir(dir);
}

Test(xdna_procs, no_package_is_package_missing) {
    char dir[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 0, sched_fixture(MODEL));
    s_expect_failed_hello("PACKAGE_MISSING");
    xdna_rm_dir(dir);
}

Test(xdna_procs, empty_package_directory_is_package_missing) {
    char dir[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 0, sched_fixture(MODEL));
    xdna_sh("mkdir '%s/xdna-package'", dir);
    s_expect_failed_hello("PACKAGE_MISSING");
    xdna_rm_dir(dir);
}

Test(xdna_procs, deleted_artifact_is_package_incomplete) {
    char dir[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, sched_fixture(MODEL));
    xdna_sh("rm '%s/xdna-package/ffn_gate_m64_k64_n128_F32.xclbin'", dir);
    s_expect_failed_hello("PACKAGE_INCOMPLETE");
    xdna_rm_dir(dir);
}

Test(xdna_procs, tampered_byte_fails_integrity_and_restoring_restores_the_lane) {
    char dir[64], file[128];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, sched_fixture(MODEL));
    snprintf(file, sizeof file, "%s/xdna-package/ffn_down_m256_k128_n64_F32.insts", dir);
    xdna_sh("cp '%s' '%s.orig' && printf '\\001' | dd of='%s' bs=1 seek=0 conv=notrunc status=none", file, dir, file);
    s_expect_failed_hello("INTEGRITY_FAILED");
    xdna_sh("mv '%s.orig' '%s'", dir, file);
    gen_result got;
    sched_generate(sched_fixture(MODEL), "cpu:1", NULL, NULL, &got);
    char v[64];
    sched_worker_field(got.stats, 1, "status", v, sizeof v);
    cr_expect_str_eq(v, "up", "restored bytes, lane back: %s", got.stats);
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), 0, "%s", got.stats);
    gen_free(&got);
    xdna_rm_dir(dir);
}

Test(xdna_procs, escaping_name_is_registry_invalid) {
    char dir[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, sched_fixture(MODEL));
    xdna_sh("sed -i '0,/instr=ffn_up_m64/s//instr=..\\/..\\/ffn_up_m64/' '%s/xdna-package/registry.txt'", dir);
    s_expect_failed_hello("REGISTRY_INVALID");
    xdna_rm_dir(dir);
}

Test(xdna_procs, helper_absent_other_abi_or_missing_symbol_is_helper_unavailable) {
    const xdna_helper_kind kinds[] = {XDNA_NO_HELPER, XDNA_ABI1_HELPER, XDNA_NOSYM_HELPER};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        char dir[64];
        xdna_lane_dir(dir, kinds[i], 1, sched_fixture(MODEL));
        s_expect_failed_hello("HELPER_UNAVAILABLE");
        xdna_rm_dir(dir);
    }
}

//  Each failure switch of the synthetic runtime: at open (the worker's hello
//  fails: counted once) or per execution (each batch sent to the lane fails).
Test(xdna_procs, runtime_failures_fall_back_with_their_reason) {
    static const struct {
        const char *fault, *reason;
        int at_open;
    } cases[] = {
        {"device", "DEVICE_UNAVAILABLE", 1}, {"xclbin", "XCLBIN_LOAD_FAILED", 1}, {"hwctx", "HW_CONTEXT_FAILED", 1},
        {"bo", "BO_ALLOC_FAILED", 1},        {"sync", "SYNC_FAILED", 1},          {"start", "RUN_START_FAILED", 0},
        {"timeout", "RUN_TIMEOUT", 0},       {"error", "RUN_FAILED", 0},          {"nan", "NAN_OUTPUT", 0},
    };
    char dir[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, sched_fixture(MODEL));
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        setenv("COLI_XRT_SYNTH_FAULT", cases[i].fault, 1);
        cr_log_info("fault switch %s -> %s", cases[i].fault, cases[i].reason);
        s_expect_declined(cases[i].reason, cases[i].at_open ? 1 : -1);
    }
    xdna_rm_dir(dir);
}

//  A crash inside execute kills the worker: one crash, the CPU path computes
//  the batch, and (no restart within the run) nothing else runs on the lane.
Test(xdna_procs, crash_inside_execute_is_one_crash_and_cpu_bytes) {
    char dir[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, sched_fixture(MODEL));
    setenv("COLI_XRT_SYNTH_FAULT", "crash@1", 1);
    setenv("COLI_RESTART_BACKOFF_MS", "600000", 1);
    s_expect_declined("crash", 1);
    /* default back-off, a lane that crashes in every execution: restarted, crashes
     * again, stays down after COLI_WORKER_MAX_FAILURES; each death one crash, and
     * the bytes are still the CPU's (no lane result ever arrives) */
    unsetenv("COLI_RESTART_BACKOFF_MS");
    setenv("COLI_XRT_SYNTH_FAULT", "crash", 1);
    s_expect_declined("crash", -1);
    xdna_rm_dir(dir);
}

//  Counter `name` of worker 1 in the stats JSON (its plugin's own), -1 if absent.
static long s_counter(const char *js, const char *name) {
    const char *w = strstr(js, "{\"id\":1,");
    char key[64];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *c = w ? strstr(w, "\"counters\":{") : NULL;
    const char *p = c ? strstr(c, key) : NULL;
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

//  A 200-token prompt through cpu:1 + the lane; returns the stats JSON.
static char *s_long_prompt(void) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "cpu:1";
    mp.n_threads = 1;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(sched_fixture(MODEL), &mp, &m), 0, "%s", coli_last_error());
    coli_context *c = NULL;
    coli_context_params cp;
    coli_context_default_params(&cp);
    cr_assert_eq(coli_context_new(m, &cp, &c), 0, "%s", coli_last_error());
    int32_t prompt[200];
    for (int i = 0; i < 200; i++) prompt[i] = (i * 37 + 11) % 1000 + 3;
    coli_model_info info;
    coli_model_get_info(m, &info);
    float *lg = calloc((size_t)info.n_vocab, sizeof *lg);
    cr_assert_eq(coli_eval(c, prompt, 200, lg, 0), 0, "%s", coli_last_error());
    char *js = NULL;
    cr_assert_eq(coli_model_stats_json(m, &js), 0);
    free(lg);
    const int pid = sched_worker_pid(m, 1);
    coli_context_free(&c);
    coli_model_free(&m);
    if (pid > 0) sched_wait_dead(pid, 2.0); /* the lane worker ends with its coordinator */
    return js;
}

//  Experts that get 65..256 rows of a 200-token prompt run through the M256
//  artifacts (zero-padded); with an M64-only package they are declined
//  (DECLINED_BUCKET) and the CPU computes them.
Test(xdna_procs, buckets_are_counted_and_rows_beyond_the_package_are_declined) {
    char dir[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, sched_fixture(MODEL));
    char *js = s_long_prompt();
    cr_expect_gt(s_counter(js, "bucket_m256"), 0, "%s", js);
    cr_expect_gt(s_counter(js, "padded_rows"), 0, "%s", js);
    cr_expect_eq(sched_field(js, "fallbacks_total"), 0, "%s", js);
    free(js);
    xdna_sh("cd '%s/xdna-package' && rm *_m256_* && sed -i '/bucket=256/d' registry.txt", dir);
    js = s_long_prompt();
    cr_expect_gt(sched_fallbacks(js, XDNA, "DECLINED_BUCKET"), 0, "%s", js);
    cr_expect_eq(s_counter(js, "bucket_m256"), 0, "%s", js);
    free(js);
    xdna_rm_dir(dir);
}

//  Logits of the reference's own token sequence (teacher-forced) through
//  cpu:1 + the lane: BF16 may flip a near-tie, which would make a free-running
//  comparison compare different texts. stats: the stats JSON (caller frees).
static float *s_teacher_forced(const char *model, const gen_result *ref, char **stats) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "cpu:1";
    mp.n_threads = 1;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(sched_fixture(model), &mp, &m), 0, "%s", coli_last_error());
    coli_context *c = NULL;
    coli_context_params cp;
    coli_context_default_params(&cp);
    cr_assert_eq(coli_context_new(m, &cp, &c), 0, "%s", coli_last_error());
    float *lg = calloc((size_t)(GEN_STEPS + 1) * (size_t)ref->n_vocab, sizeof *lg);
    int32_t prompt[PROMPT_LEN] = {1, 17, 42, 99, 7}; /* sched_generate_on's */
    for (int step = 0; step <= GEN_STEPS; step++) {
        float *out = lg + (size_t)step * (size_t)ref->n_vocab;
        int rc = step == 0 ? coli_eval(c, prompt, PROMPT_LEN, out, 0) : coli_eval(c, &ref->ids[step - 1], 1, out, 0);
        cr_assert_eq(rc, 0, "step %d: %s", step, coli_last_error());
    }
    cr_assert_eq(coli_model_stats_json(m, stats), 0);
    coli_context_free(&c);
    coli_model_free(&m);
    return lg;
}

Test(xdna_procs, lane_on_stays_within_the_bf16_tolerance) {
    char dir[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, sched_fixture(MODEL));
    const gen_result *ref = s_reference();
    char *stats = NULL, v[64];
    float *lg = s_teacher_forced(MODEL, ref, &stats);
    sched_worker_field(stats, 1, "status", v, sizeof v);
    cr_assert_str_eq(v, "up", "%s", stats);
    sched_worker_field(stats, 1, "resident_experts", v, sizeof v);
    cr_expect_gt(atol(v), 0, "the lane holds experts: %s", stats);
    sched_worker_field(stats, 1, "batches", v, sizeof v);
    cr_expect_gt(atol(v), 0, "the lane computed batches: %s", stats);
    cr_expect_eq(sched_field(stats, "fallbacks_total"), 0, "%s", stats);
    /* a 5-token prompt and single tokens: M64 only, every run padded */
    cr_expect_gt(s_counter(stats, "bucket_m64"), 0, "%s", stats);
    cr_expect_eq(s_counter(stats, "bucket_m256"), 0, "%s", stats);
    cr_expect_gt(s_counter(stats, "padded_rows"), 0, "%s", stats);
    float worst = 0;
    for (size_t i = 0; i < (size_t)(GEN_STEPS + 1) * (size_t)ref->n_vocab; i++)
        worst = fmaxf(worst, fabsf(ref->logits[i] - lg[i]));
    cr_log_info("lane on: max |logit - cpu logit| = %g over %d teacher-forced steps", worst, GEN_STEPS + 1);
    cr_expect_lt(worst, XDNA_LOGIT_TOL, "logits differ by %g", worst);
    cr_expect_gt(worst, 0.0f, "the lane really computed in BF16 (bit-identical logits would mean it did not)");
    free(lg);
    free(stats);
    xdna_rm_dir(dir);
}

//  --xdna travels by coli_model_params.xdna (as model_opts_open sets it),
//  never by the environment: with COLI_XDNA unset, the plan, the --pin check
//  and the load see the lane, its worker's plugin opens and computes (the
//  worker gets the opt-in in its own environment), and this process's
//  environment is unchanged afterwards.
Test(xdna_procs, xdna_param_reaches_plan_check_and_lane_without_setenv) {
    char dir[64], v[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, sched_fixture(MODEL));
    unsetenv("COLI_XDNA");
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "cpu:1";
    mp.n_threads = 1;
    mp.pins = "0:0=xdna:0";
    const char *flag = NULL;
    cr_expect_neq(coli_devices_check_params(&mp, &flag), 0, "no lane without the field");
    mp.xdna = 1;
    cr_expect_eq(coli_devices_check_params(&mp, &flag), 0, "a pin on the lane: %s", coli_last_error());
    mp.pins = NULL;
    char *plan = NULL;
    cr_assert_eq(coli_plan_params_text(sched_fixture(MODEL), &mp, &plan), 0, "%s", coli_last_error());
    cr_expect_not_null(strstr(plan, "xdna:0"), "the plan has the lane: %s", plan);
    free(plan);
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(sched_fixture(MODEL), &mp, &m), 0, "%s", coli_last_error());
    gen_result got;
    sched_generate_on(m, "cpu:1, xdna by params", NULL, NULL, &got);
    coli_model_free(&m);
    cr_expect_null(getenv("COLI_XDNA"), "the library left the environment alone");
    sched_worker_field(got.stats, 1, "batches", v, sizeof v);
    cr_expect_gt(atol(v), 0, "the lane computed: %s", got.stats);
    cr_expect_eq(sched_fallbacks(got.stats, XDNA, "NOT_REQUESTED"), 0, "%s", got.stats);
    gen_free(&got);
    xdna_rm_dir(dir);
}

//  Quantized and F16 weights: the package is built for the model's own types,
//  the image is the dequantized weights rounded to BF16. The CPU path itself
//  differs more from the lane here (it quantizes activations to Q8_0 for Q8_0
//  and Q4_0 weights); the measured figures are in docs/xdna.md.
Test(xdna_procs, lane_on_quantized_weights_stays_within_the_tolerance) {
    const char *models[] = {"tiny-llama-moe-f16.gguf", "tiny-llama-moe-q8_0.gguf", "tiny-llama-moe-q4_0.gguf"};
    for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
        char dir[64], v[64];
        xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, sched_fixture(models[k]));
        const gen_result *ref = s_reference_of(models[k]);
        char *stats = NULL;
        float *lg = s_teacher_forced(models[k], ref, &stats);
        sched_worker_field(stats, 1, "batches", v, sizeof v);
        cr_expect_gt(atol(v), 0, "%s: the lane computed batches: %s", models[k], stats);
        cr_expect_eq(sched_field(stats, "fallbacks_total"), 0, "%s: %s", models[k], stats);
        float worst = 0;
        for (size_t i = 0; i < (size_t)(GEN_STEPS + 1) * (size_t)ref->n_vocab; i++)
            worst = fmaxf(worst, fabsf(ref->logits[i] - lg[i]));
        cr_log_info("%s: lane on: max |logit - cpu logit| = %g", models[k], worst);
        const float tol =
            strstr(models[k], "q8_0") || strstr(models[k], "q4_0") ? XDNA_LOGIT_TOL_QUANT : XDNA_LOGIT_TOL;
        cr_expect_lt(worst, tol, "%s: logits differ by %g", models[k], worst);
        free(lg);
        free(stats);
        xdna_rm_dir(dir);
    }
}

//  A package without ffn_down: every expert placed on the lane is refused at
//  Place (DECLINED_OP, one per expert), the CPU computes them, same bytes. A
//  package for F32 weights and a Q8_0 model: DECLINED_DTYPE the same way.
Test(xdna_procs, experts_that_fail_gates_1_2_are_refused_one_by_one) {
    char dir[64];
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, sched_fixture(MODEL));
    xdna_sh("sed -i '/op=ffn_down/d' '%s/xdna-package/registry.txt'", dir);
    gen_result got;
    sched_generate(sched_fixture(MODEL), "cpu:1", NULL, NULL, &got);
    sched_assert_same(s_reference(), &got, "no ffn_down artifact");
    char v[64];
    sched_worker_field(got.stats, 1, "refused_experts", v, sizeof v);
    cr_expect_gt(atol(v), 0, "%s", got.stats);
    cr_expect_eq(sched_fallbacks(got.stats, XDNA, "DECLINED_OP"), atol(v), "one per expert: %s", got.stats);
    gen_free(&got);
    xdna_rm_dir(dir);
    const char *q8 = "tiny-llama-moe-q8_0.gguf";
    xdna_lane_dir(dir, XDNA_SYNTH_HELPER, 1, sched_fixture(MODEL)); /* F32 package */
    sched_generate(sched_fixture(q8), "cpu:1", NULL, NULL, &got);
    sched_assert_same(s_reference_of(q8), &got, "F32 package, Q8_0 model");
    sched_worker_field(got.stats, 1, "refused_experts", v, sizeof v);
    cr_expect_gt(atol(v), 0, "%s", got.stats);
    cr_expect_eq(sched_fallbacks(got.stats, XDNA, "DECLINED_DTYPE"), atol(v), "%s", got.stats);
    gen_free(&got);
    xdna_rm_dir(dir);
}
