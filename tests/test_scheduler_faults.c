/*
 * test_scheduler_faults.c - the scheduler against real worker processes
 * that crash, hang or answer garbage (COLI_FAULT, see docs/scheduler.md).
 * In every case the token ids and the logits bytes equal those of an
 * --inproc run, and the fallbacks counted are exactly the ones caused.
 * Each case runs on both data paths (COLI_DATA_PATH=shm, the default for
 * local workers, and zmq); the random trials alternate between them.
 */
#include "tests/gptoss_util.h"
#include "tests/ref_models.h"
#include "tests/sched_util.h"

#define MODEL "tiny-llama-moe-f32.gguf"

static void s_env(void) {
    setenv("COLI_LAYER_DEADLINE_MS", "5000", 1); /* generous: CI noise */
    setenv("COLI_RESTART_BACKOFF_MS", "20", 1);
    stderr_quiet();
}

TestSuite(scheduler_faults, .init = s_env);

static const char *s_paths[2] = {"shm", "zmq"};

//  Every worker that is up used the data path asked for (and the ring, if shm).
static void s_check_path(const char *js, const char *path) {
    for (int id = 0;; id++) {
        char key[32], v[32];
        snprintf(key, sizeof key, "{\"id\":%d,", id);
        if (!strstr(js, key)) break;
        sched_worker_field(js, id, "status", v, sizeof v);
        if (strcmp(v, "up")) continue;
        sched_worker_field(js, id, "data_path", v, sizeof v);
        cr_expect_str_eq(v, path, "worker %d", id);
        sched_worker_field(js, id, "ring_replies", v, sizeof v);
        if (!strcmp(path, "shm"))
            cr_expect_gt(atol(v), 0, "worker %d: no reply came by the ring", id);
        else
            cr_expect_eq(atol(v), 0, "worker %d: ring used on the zmq path", id);
    }
}

//  Run `model` on devices with COLI_FAULT=fault on data path `path`; compare with --inproc;
//  return stats.
static char *s_run_model(const char *model, const char *devices, const char *path, const char *fault, step_hook hook,
                         void *user) {
    gen_result ref, got;
    unsetenv("COLI_FAULT");
    sched_generate(model, "inproc", NULL, NULL, &ref);
    if (fault) setenv("COLI_FAULT", fault, 1);
    setenv("COLI_DATA_PATH", path, 1);
    sched_generate(model, devices, hook, user, &got);
    unsetenv("COLI_FAULT");
    unsetenv("COLI_DATA_PATH");
    char what[160];
    snprintf(what, sizeof what, "%s over %s with COLI_FAULT=%s", devices, path, fault ? fault : "");
    sched_assert_same(&ref, &got, what);
    s_check_path(got.stats, path);
    char *stats = got.stats;
    got.stats = NULL;
    gen_free(&ref);
    gen_free(&got);
    sched_assert_no_orphans();
    return stats;
}

//  The same on both data paths: stats[0] shm, stats[1] zmq.
#define FOR_EACH_PATH(p) for (int p = 0; p < 2; p++)
#define s_run_fault(devices, fault, hook, user) \
    s_run_model(sched_fixture(MODEL), devices, s_paths[path_i], fault, hook, user)

Test(scheduler_faults, happy_path_two_workers_bit_identical) {
    FOR_EACH_PATH(path_i) {
        char *js = s_run_fault("cpu:2", NULL, NULL, NULL);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 0, "%s", js);
        cr_expect_eq(sched_field(js, "inproc_rows"), 0, "%s", js);
        char v[64];
        for (int w = 0; w < 2; w++) {
            sched_worker_field(js, w, "status", v, sizeof v);
            cr_expect_str_eq(v, "up");
            sched_worker_field(js, w, "resident_experts", v, sizeof v);
            cr_expect_gt(atol(v), 0, "worker %d holds no experts", w);
            sched_worker_field(js, w, "batches", v, sizeof v);
            cr_expect_gt(atol(v), 0, "worker %d did no work", w);
        }
        free(js);
    }
}

Test(scheduler_faults, crash_before_during_after_batch) {
    const char *kinds[] = {"crash", "crash-during", "crash-after"};
    for (int i = 0; i < 6; i++) {
        int path_i = i / 3;
        char fault[64];
        snprintf(fault, sizeof fault, "%s@layer=1:after=2", kinds[i % 3]);
        /* one worker: every layer of every step is its batch, so the fault fires */
        char *js = s_run_fault("cpu:1", fault, NULL, NULL);
        cr_expect_eq(sched_fallbacks(js, "cpu:0", "crash"), 1, "%s: %s", fault, js);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "%s: %s", fault, js);
        free(js);
    }
}

//  Random trials are reproducible: a fixed seed unless COLI_TEST_SEED is set
//  (CI must not fail on one day and pass on the next with the same code).
static unsigned s_trial_seed(unsigned salt) {
    const char *env = getenv("COLI_TEST_SEED");
    unsigned seed = env && *env ? (unsigned)strtoul(env, NULL, 10) : 20261130u;
    return seed ^ salt;
}

//  20+ trials: a random kind of crash at a random layer and token.
Test(scheduler_faults, random_kill_trials, .timeout = 240) {
    const char *kinds[] = {"crash", "crash-during", "crash-after"};
    unsigned seed = s_trial_seed(0);
    srand(seed);
    for (int t = 0; t < 22; t++) {
        int path_i = t % 2;
        char fault[96];
        /* after < GEN_STEPS: a batch always follows the faulty one, so even a
         * crash after the reply is seen by the run (a crash after the very
         * last reply would race the end of the run and prove nothing). */
        int layer = rand() % 2, after = rand() % GEN_STEPS;
        snprintf(fault, sizeof fault, "%s@layer=%d:after=%d", kinds[rand() % 3], layer, after);
        char *js = s_run_fault("cpu:1", fault, NULL, NULL);
        cr_expect_eq(sched_fallbacks(js, "cpu:0", "crash"), 1, "seed %u %s: %s", seed, fault, js);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "seed %u %s: %s", seed, fault, js);
        free(js);
    }
}

typedef struct kill_plan {
    int step, worker, killed_pid;
} kill_plan;

//  SIGKILL a worker from outside, between two steps; wait until it is dead.
static void s_kill_hook(coli_model *m, int step, void *user) {
    kill_plan *k = user;
    if (step != k->step) return;
    k->killed_pid = sched_worker_pid(m, k->worker);
    cr_assert_gt(k->killed_pid, 0);
    kill(k->killed_pid, SIGKILL);
    sched_wait_dead(k->killed_pid, 5);
}

Test(scheduler_faults, external_sigkill_trials, .timeout = 120) {
    unsigned seed = s_trial_seed(0x5eed);
    srand(seed);
    for (int t = 0; t < 6; t++) {
        int path_i = t % 2;
        kill_plan k = {1 + rand() % GEN_STEPS, rand() % 2, 0};
        char *js = s_run_fault("cpu:2", NULL, s_kill_hook, &k);
        char dev[16];
        snprintf(dev, sizeof dev, "cpu:%d", k.worker);
        cr_expect_eq(sched_fallbacks(js, dev, "crash"), 1, "seed %u step %d: %s", seed, k.step, js);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "%s", js);
        free(js);
    }
}

Test(scheduler_faults, garbage_answers_quarantine) {
    const char *kinds[] = {"garbage-nan", "garbage-size", "garbage-id", "garbage-ring"};
    for (int i = 0; i < 8; i++) {
        int path_i = i / 4;
        char fault[64];
        snprintf(fault, sizeof fault, "%s@worker=0", kinds[i % 4]);
        char *js = s_run_fault("cpu:2", fault, NULL, NULL);
        cr_expect_eq(sched_fallbacks(js, "cpu:0", "garbage"), 1, "%s: %s", fault, js);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "%s: %s", fault, js);
        char v[32];
        sched_worker_field(js, 0, "status", v, sizeof v);
        cr_expect_str_eq(v, "quarantined", "%s", fault);
        free(js);
    }
}

Test(scheduler_faults, all_workers_gone_computes_in_process) {
    setenv("COLI_WORKER_MAX_FAILURES", "0", 1); /* a crashed worker stays down */
    FOR_EACH_PATH(path_i) {
        char *js = s_run_fault("cpu:2", "crash@worker=0,crash@worker=1", NULL, NULL);
        cr_expect_eq(sched_fallbacks(js, "cpu:0", "crash"), 1, "%s", js);
        cr_expect_eq(sched_fallbacks(js, "cpu:1", "crash"), 1, "%s", js);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 2, "%s", js);
        cr_expect_gt(sched_field(js, "inproc_rows"), 0, "%s", js);
        free(js);
    }
}

Test(scheduler_faults, fail_load_goes_to_cpu) {
    FOR_EACH_PATH(path_i) {
        char *js = s_run_fault("cpu:2", "fail-load@worker=1", NULL, NULL);
        cr_expect_eq(sched_fallbacks(js, "cpu:1", "plugin_load"), 1, "%s", js);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "%s", js);
        char v[32];
        sched_worker_field(js, 1, "status", v, sizeof v);
        cr_expect_str_eq(v, "failed");
        sched_worker_field(js, 0, "resident_experts", v, sizeof v);
        cr_expect_eq(atol(v), 8, "the healthy worker holds every expert (2 layers x 4)");
        free(js);
    }
}

//  The hung worker is resumed at the next step; its late reply is dropped.
static void s_cont_hook(coli_model *m, int step, void *user) {
    if (step != 2) return;
    int pid = sched_worker_pid(m, 0);
    kill(pid, SIGCONT);
    /* wait until the late reply has been seen and dropped */
    double until = sched_now() + 10;
    for (;;) {
        char *js = NULL;
        cr_assert_eq(coli_model_stats_json(m, &js), 0);
        long late = sched_field(js, "late_replies_dropped");
        free(js);
        if (late == 1 || sched_now() > until) break;
        usleep(10000);
    }
    (void)user;
}

Test(scheduler_faults, hang_deadline_and_late_reply) {
    setenv("COLI_LAYER_DEADLINE_MS", "300", 1);
    setenv("COLI_DEADLINE_PER_ROW_US", "0", 1);
    FOR_EACH_PATH(path_i) {
        char *js = s_run_fault("cpu:2", "hang@worker=0", s_cont_hook, NULL);
        cr_expect_eq(sched_fallbacks(js, "cpu:0", "timeout"), 1, "%s", js);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "%s", js);
        cr_expect_eq(sched_field(js, "late_replies_dropped"), 1, "%s", js);
        char v[32];
        sched_worker_field(js, 0, "status", v, sizeof v);
        cr_expect_str_eq(v, "up", "the resumed worker serves again");
        free(js);
    }
}

//  Between two steps worker 0 stops (SIGSTOP) while idle, long enough to miss
//  its heartbeats: it is declared down at the next layer ("heartbeat"),
//  killed and restarted; the other worker takes its experts meanwhile.
static void s_stop_hook(coli_model *m, int step, void *user) {
    if (step != 2) return;
    int *pid = user;
    *pid = sched_worker_pid(m, 0);
    kill(*pid, SIGSTOP);
    usleep(600 * 1000); /* 12 intervals of 50 ms, the limit is 4 */
}

Test(scheduler_faults, idle_hang_missed_heartbeats) {
    setenv("COLI_HEARTBEAT_MS", "50", 1);
    setenv("COLI_HEARTBEAT_MISS", "4", 1);
    FOR_EACH_PATH(path_i) {
        int pid = 0;
        char *js = s_run_fault("cpu:2", NULL, s_stop_hook, &pid);
        cr_expect_eq(sched_fallbacks(js, "cpu:0", "heartbeat"), 1, "%s", js);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "%s", js);
        cr_expect(sched_proc_dead(pid), "the silent worker %d was not stopped for good", pid);
        char v[32];
        sched_worker_field(js, 0, "rerouted_rows", v, sizeof v);
        cr_expect_gt(atol(v), 0, "worker 0's experts did not go elsewhere while it was down");
        free(js);
    }
}

//  The newer families (../shared reference models): qwen3moe, and deepseek2
//  whose layer 0 is dense (no experts to place) and whose shared experts
//  stay in the coordinator. Workers give --inproc's bytes; a crash mid-run
//  (layer 1 has experts in both) falls back once with the same answer.
static const char *s_new_families[2] = {"tiny-qwen3moe-f32.gguf", "tiny-deepseek2-f32.gguf"};
static const long s_new_family_experts[2] = {2 * 16, 2 * 8}; /* MoE layers x experts */

Test(scheduler_faults, new_families_two_workers_bit_identical, .timeout = 120) {
    s_require_shared();
    for (int i = 0; i < 2; i++) {
        char model[4096];
        s_ref_model(s_new_families[i], model, sizeof model);
        FOR_EACH_PATH(path_i) {
            char *js = s_run_model(model, "cpu:2", s_paths[path_i], NULL, NULL, NULL);
            cr_expect_eq(sched_field(js, "fallbacks_total"), 0, "%s: %s", model, js);
            cr_expect_eq(sched_field(js, "inproc_rows"), 0, "%s: %s", model, js);
            long held = 0;
            char v[64];
            for (int w = 0; w < 2; w++) {
                sched_worker_field(js, w, "resident_experts", v, sizeof v);
                cr_expect_gt(atol(v), 0, "%s: worker %d holds no experts", model, w);
                held += atol(v);
                sched_worker_field(js, w, "batches", v, sizeof v);
                cr_expect_gt(atol(v), 0, "%s: worker %d did no work", model, w);
            }
            cr_expect_eq(held, s_new_family_experts[i], "%s: experts placed", model);
            free(js);
        }
    }
}

Test(scheduler_faults, new_families_crash_falls_back, .timeout = 120) {
    s_require_shared();
    for (int i = 0; i < 2; i++) {
        char model[4096];
        s_ref_model(s_new_families[i], model, sizeof model);
        char *js = s_run_model(model, "cpu:1", "shm", "crash-during@layer=1:after=2", NULL, NULL);
        cr_expect_eq(sched_fallbacks(js, "cpu:0", "crash"), 1, "%s: %s", model, js);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "%s: %s", model, js);
        free(js);
    }
}

//  gpt-oss (tests/gen_gptoss.py): biased SWIGLU_OAI experts computed by the
//  workers' cpu plugin, sinks and a 6-position window in the coordinator
//  (prompt + steps = 11 positions). Two workers give --inproc's bytes with
//  every expert placed; a worker SIGKILLed from outside mid-run falls back
//  once with the same answer; F32 and MXFP4_MOE files.
Test(scheduler_faults, gptoss_two_workers_bit_identical, .timeout = 120) {
    char model[2][4096];
    gptoss_model_f32(model[0], sizeof model[0]);
    gptoss_model_mxfp4(model[1], sizeof model[1]);
    for (int i = 0; i < 2; i++) {
        char *js = s_run_model(model[i], "cpu:2", s_paths[i], NULL, NULL, NULL);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 0, "%s: %s", model[i], js);
        cr_expect_eq(sched_field(js, "inproc_rows"), 0, "%s: %s", model[i], js);
        long held = 0;
        char v[64];
        for (int w = 0; w < 2; w++) {
            sched_worker_field(js, w, "resident_experts", v, sizeof v);
            held += atol(v);
        }
        cr_expect_eq(held, 4 * 8, "%s: experts placed: %s", model[i], js);
        free(js);
    }
}

Test(scheduler_faults, gptoss_external_sigkill_falls_back, .timeout = 120) {
    char model[4096];
    gptoss_model_f32(model, sizeof model);
    for (int path_i = 0; path_i < 2; path_i++) {
        kill_plan k = {2 + 2 * path_i, path_i, 0};
        char *js = s_run_model(model, "cpu:2", s_paths[path_i], NULL, s_kill_hook, &k);
        char dev[16];
        snprintf(dev, sizeof dev, "cpu:%d", k.worker);
        cr_expect_eq(sched_fallbacks(js, dev, "crash"), 1, "step %d: %s", k.step, js);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "%s", js);
        free(js);
    }
}

//  A worker whose plugin does not compute gpt-oss's experts (caps.act_mask 0,
//  as the GPU plugin and any ABI 1.3 plugin report it; COLI_FAULT=no-act)
//  says so in its hello (Hello.act_mask): placement gives every expert to
//  the other worker from the start, so none is refused (no `unsupported`
//  fallback, no fallback at all) and the bytes are --inproc's. Without
//  Hello.act_mask each expert placed on worker 0 was refused at Place.
Test(scheduler_faults, gptoss_experts_placed_only_on_a_worker_that_computes_them, .timeout = 120) {
    char model[4096];
    gptoss_model_f32(model, sizeof model);
    char *js = s_run_model(model, "cpu:2", "zmq", "no-act@worker=0", NULL, NULL); /* worker 0 serves no batch */
    char v[64];
    sched_worker_field(js, 0, "resident_experts", v, sizeof v);
    cr_expect_eq(atol(v), 0, "worker 0 holds gpt-oss experts: %s", js);
    sched_worker_field(js, 1, "resident_experts", v, sizeof v);
    cr_expect_eq(atol(v), 4 * 8, "worker 1 does not hold every expert: %s", js);
    cr_expect_eq(sched_fallbacks(js, "cpu:0", "unsupported"), 0, "%s", js);
    cr_expect_eq(sched_field(js, "fallbacks_total"), 0, "%s", js);
    cr_expect_eq(sched_field(js, "inproc_rows"), 0, "%s", js);
    free(js);
}

//  No worker computes them: every expert stays in-process from the start
//  (owner nobody, no CPU worker takes its rows on demand either), no
//  fallback counted, --inproc's bytes.
Test(scheduler_faults, gptoss_experts_in_process_when_no_worker_computes_them, .timeout = 120) {
    char model[4096];
    gptoss_model_f32(model, sizeof model);
    char *js = s_run_model(model, "cpu:2", "zmq", "no-act", NULL, NULL);
    char v[64];
    for (int w = 0; w < 2; w++) {
        sched_worker_field(js, w, "resident_experts", v, sizeof v);
        cr_expect_eq(atol(v), 0, "worker %d holds gpt-oss experts: %s", w, js);
    }
    cr_expect_eq(sched_field(js, "fallbacks_total"), 0, "%s", js);
    cr_expect_gt(sched_field(js, "inproc_rows"), 0, "%s", js);
    free(js);
}

//  Slow steps, so that a re-probe due after 150 ms happens within the run.
static void s_slow_step_hook(coli_model *m, int step, void *user) {
    (void)m;
    (void)user;
    if (step > 0) usleep(150000);
}

Test(scheduler_faults, worker_that_failed_too_often_is_reprobed_and_returns, .timeout = 120) {
    setenv("COLI_WORKER_MAX_FAILURES", "0", 1); /* the first crash is "too often" */
    setenv("COLI_WORKER_REPROBE_MS", "150", 1);
    FOR_EACH_PATH(path_i) {
        char *js = s_run_fault("cpu:2", "crash@worker=0", s_slow_step_hook, NULL);
        char status[32], restarts[32];
        sched_worker_field(js, 0, "status", status, sizeof status);
        sched_worker_field(js, 0, "restarts", restarts, sizeof restarts);
        cr_expect_str_eq(status, "up", "worker 0 was not brought back by its re-probe: %s", js);
        cr_expect_eq(atol(restarts), 1, "%s", js);
        cr_expect_eq(sched_fallbacks(js, "cpu:0", "crash"), 1, "%s", js);
        free(js);
    }
    unsetenv("COLI_WORKER_REPROBE_MS");
}

//  coli plan places as a load would: gpt-oss's experts never on a device
//  plugin that reports no SWIGLU_OAI (xdna today), all on the cpu worker,
//  and it says why; cuda computes them (the GPU plugin's act_mask), so it
//  shares them; a SiLU model's experts are shared as before.
Test(scheduler_faults, plan_keeps_gptoss_experts_off_a_device_without_the_activation) {
    char model[4096], *plan = NULL;
    gptoss_model_f32(model, sizeof model);
    cr_assert_eq(coli_plan_text(model, "cpu:1,xdna:0", &plan), 0, "%s", coli_last_error());
    cr_expect(strstr(plan, "worker 0  cpu:0  budget unlimited  experts 32"), "%s", plan);
    cr_expect(strstr(plan, "worker 1  xdna:0  budget unlimited  experts 0 "), "%s", plan);
    cr_expect(strstr(plan, "activation beyond SwiGLU or biases (gpt-oss)"), "%s", plan);
    free(plan);
    cr_assert_eq(coli_plan_text(model, "cpu:1,cuda:0", &plan), 0, "%s", coli_last_error());
    cr_expect(!strstr(plan, "experts 0 "), "%s", plan);
    cr_expect(!strstr(plan, "beyond SwiGLU"), "%s", plan);
    free(plan);
    cr_assert_eq(coli_plan_text(sched_fixture(MODEL), "cpu:1,cuda:0", &plan), 0, "%s", coli_last_error());
    cr_expect(!strstr(plan, "experts 0 "), "%s", plan);
    cr_expect(!strstr(plan, "beyond SwiGLU"), "%s", plan);
    free(plan);
}
