/*
 * test_scheduler_auto.c - `--devices auto`, the default: one worker per GPU
 * the built plugins find (each probed in a child, `coli-worker --probe`),
 * plus CPU workers as their fallback target; no GPU: the experts run
 * in-process (faster than local CPU workers, docs/scheduler.md), while CPU
 * workers asked for by name still start. A machine without a GPU is normal
 * and silent; a probe that crashes or hangs costs one line and never the
 * coordinator.
 */
#include <sys/wait.h>

#define SCHED_WAIVE_RUNNER_LEAK
#include "tests/sched_util.h"

#define MODEL "tiny-llama-moe-f32.gguf"

static void s_env(void) {
    sched_env_defaults();
    unsetenv("COLI_PROBE_TIMEOUT_MS");
}

TestSuite(scheduler_auto, .init = s_env);

//  A plugin directory: the cpu plugin, plus cuda/hip as given (NULL = absent).
static void s_plugin_dir(char *dir, size_t n, const char *cuda, const char *hip) {
    sched_plugin_dir(dir, n, "/tmp/coli-autotest-XXXXXX", cuda, hip);
}

//  The GPU plugin `make gpu-compile` built (absolute path), or NULL.
static const char *s_gpu_plugin(const char *vendor, char *out, size_t n) {
    snprintf(out, n, "%s/gpu/%s/libcoli-%s.so", sched_build_dir(), vendor, vendor);
    if (access(out, R_OK) == 0) return out;
    snprintf(out, n, "%s/lib/libcoli-%s.so", sched_build_dir(), vendor);
    return access(out, R_OK) == 0 ? out : NULL;
}

//  A plugin named cuda whose probe misbehaves (body = the probe's statements),
//  built in a new directory dir.
static void s_fake_plugin(char *dir, size_t dir_len, const char *body, char *so, size_t n) {
    char src[256], cmd[1024];
    snprintf(dir, dir_len, "/tmp/coli-fake-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp");
    snprintf(src, sizeof src, "%s/fake.c", dir);
    snprintf(so, n, "%s/libfake.so", dir);
    FILE *f = fopen(src, "w");
    cr_assert(f);
    fprintf(f,
            "#include <signal.h>\n#include <unistd.h>\n#include \"plugins/plugin_abi.h\"\n"
            "static int probe(int *n, char *why, size_t len) { %s; *n = 0; return 0; }\n"
            "static int op(const moe_open_opts *o, moe_device **d, char *e, size_t l) { return -1; }\n"
            "static int caps(moe_device *d, moe_caps *c) { return -1; }\n"
            "static int load(moe_device *d, const moe_expert_desc *x, char *e, size_t l) { return -1; }\n"
            "static int run(moe_device *d, const moe_batch_group *g, int32_t ng, const float *x,\n"
            "               int64_t nr, int64_t ne, float *o, char *e, size_t l) { return -1; }\n"
            "static void cl(moe_device **d) {}\n"
            "static const struct moe_plugin p = {MOE_PLUGIN_ABI_MAJOR, MOE_PLUGIN_ABI_MINOR,\n"
            "  sizeof(struct moe_plugin), \"cuda\", probe, op, caps, load, run, 0, cl};\n"
            "const struct moe_plugin *moe_plugin_get(void) { return &p; }\n",
            body);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -I. -o %s %s 2>/dev/null", so, src);
    if (system(cmd) != 0) cr_skip_test("no C compiler to build a fake plugin");
}

static int s_n_workers(const char *js) {
    int n = 0;
    for (const char *p = js; (p = strstr(p, "{\"id\":")); p++) n++;
    return n;
}

static int s_default_cpu(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)(cores / 16);
    return n < 1 ? 1 : (n > 4 ? 4 : n);
}

//  devices (NULL = the default) against --inproc; returns stats, *err = stderr.
static char *s_run(const char *devices, char **err) {
    const char *model = sched_fixture(MODEL);
    gen_result ref, got;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    stderr_capture c = stderr_capture_begin();
    sched_generate(model, devices, NULL, NULL, &got);
    *err = stderr_capture_end(c);
    sched_assert_same(&ref, &got, devices ? devices : "(default)");
    char *js = got.stats;
    got.stats = NULL;
    gen_free(&ref);
    gen_free(&got);
    sched_assert_no_orphans();
    return js;
}

//  No worker process: the in-process executor computed every expert.
static void s_expect_inproc(const char *js) {
    cr_expect(strstr(js, "\"executor\":\"inproc\""), "not in-process: %s", js);
    cr_expect_eq(s_n_workers(js), 0, "%s", js);
    cr_expect_gt(sched_field(js, "rows"), 0, "%s", js);
}

// ---------------------------------------------------------------------------
Test(scheduler_auto, probe_of_a_missing_plugin_gives_the_reason) {
    char dir[64], cmd[1400], line[1024] = "";
    s_plugin_dir(dir, sizeof dir, NULL, NULL);
    snprintf(cmd, sizeof cmd, "%s/bin/coli-worker --probe cuda", sched_build_dir());
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    cr_assert(fgets(line, sizeof line, p), "no probe line");
    int st = pclose(p);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "probe exit status %d", st);
    cr_expect(strstr(line, "{\"plugin\":\"cuda\",\"devices\":0,\"reason\":\"plugin 'cuda': libcoli-cuda.so: "
                           "cannot open shared object file"),
              "%s", line);
    sched_rm_plugin_dir(dir);
}

//  No GPU here: the default and "auto" run the experts in-process, silently,
//  with the real GPU plugins present when they are built (they probe 0 devices).
Test(scheduler_auto, auto_without_a_gpu_is_in_process_and_silent, .timeout = 120) {
    char dir[64], cuda[1100], hip[1100];
    s_plugin_dir(dir, sizeof dir, s_gpu_plugin("cuda", cuda, sizeof cuda), s_gpu_plugin("hip", hip, sizeof hip));
    const char *devices[2] = {NULL, "auto"};
    for (int i = 0; i < 2; i++) {
        char *err = NULL, *js = s_run(devices[i], &err);
        s_expect_inproc(js);
        cr_expect_eq(err[0], 0, "auto printed: %s", err);
        free(err);
        free(js);
    }
    sched_rm_plugin_dir(dir);
}

//  A plugin that finds a device gets a worker: the cpu plugin standing in as
//  "cuda" (its probe says 1 device) becomes worker cuda:0 beside the CPU ones.
Test(scheduler_auto, auto_starts_a_worker_per_device_found, .timeout = 120) {
    char dir[64], cpu[1100];
    snprintf(cpu, sizeof cpu, "%s/lib/libcoli-cpu.so", sched_build_dir());
    s_plugin_dir(dir, sizeof dir, cpu, NULL);
    char *err = NULL, *js = s_run("auto", &err);
    cr_expect_eq(s_n_workers(js), 1 + s_default_cpu(), "%s", js);
    char v[32];
    sched_worker_field(js, 0, "device", v, sizeof v);
    cr_expect_str_eq(v, "cuda:0", "%s", js);
    sched_worker_field(js, 0, "status", v, sizeof v);
    cr_expect_str_eq(v, "up", "%s", js);
    sched_worker_field(js, 1, "device", v, sizeof v);
    cr_expect_str_eq(v, "cpu:0", "%s", js);
    cr_expect_eq(sched_field(js, "fallbacks_total"), 0, "%s", js);
    cr_expect_eq(err[0], 0, "%s", err);
    free(err);
    free(js);
    sched_rm_plugin_dir(dir);
}

//  A driver that crashes in its probe takes only the probe process down.
Test(scheduler_auto, crashing_probe_costs_one_line, .timeout = 120) {
    char dir[64], fake[64], so[256];
    s_fake_plugin(fake, sizeof fake, "raise(SIGSEGV)", so, sizeof so);
    s_plugin_dir(dir, sizeof dir, so, NULL);
    char *err = NULL, *js = s_run(NULL, &err);
    s_expect_inproc(js);
    /* under ASan the probe's SEGV handler turns the signal into exit status 1 */
    cr_expect(strstr(err, "colibri: devices auto: cuda: probe crashed (") ||
                  strstr(err, "colibri: devices auto: cuda: probe failed (exit status 1)"),
              "%s", err);
    cr_expect(strstr(err, "; no cuda workers\n"), "%s", err);
    cr_expect_eq(sched_fallbacks(js, "cuda:0", "no_device"), 0, "auto counts no fallback: %s", js);
    free(err);
    free(js);
    sched_rm_plugin_dir(dir);
    sched_rm_plugin_dir(fake);
}

//  ... and one that hangs is killed after COLI_PROBE_TIMEOUT_MS.
Test(scheduler_auto, hanging_probe_is_killed_after_the_timeout, .timeout = 120) {
    char dir[64], fake[64], so[256];
    s_fake_plugin(fake, sizeof fake, "sleep(60)", so, sizeof so);
    s_plugin_dir(dir, sizeof dir, so, NULL);
    setenv("COLI_PROBE_TIMEOUT_MS", "300", 1);
    double t0 = sched_now();
    char *err = NULL, *js = s_run("auto", &err);
    cr_expect_lt(sched_now() - t0, 30.0, "the hung probe held the load");
    s_expect_inproc(js);
    cr_expect(strstr(err, "colibri: devices auto: cuda: probe did not answer within 300 ms; no cuda workers"), "%s",
              err);
    free(err);
    free(js);
    sched_rm_plugin_dir(dir);
    sched_rm_plugin_dir(fake);
}

//  `coli plan` expands auto the same way: in-process without a GPU, the
//  device's worker plus its CPU fallback target with one.
Test(scheduler_auto, plan_follows_the_same_rule, .timeout = 60) {
    char dir[64], cpu[1100];
    s_plugin_dir(dir, sizeof dir, NULL, NULL);
    char *text = NULL;
    cr_assert_eq(coli_plan_text(sched_fixture(MODEL), NULL, &text), 0, "%s", coli_last_error());
    cr_expect(strstr(text, "placement: in-process (--devices auto found no GPU or NPU)"), "%s", text);
    free(text);
    sched_rm_plugin_dir(dir);
    snprintf(cpu, sizeof cpu, "%s/lib/libcoli-cpu.so", sched_build_dir());
    s_plugin_dir(dir, sizeof dir, cpu, NULL);
    cr_assert_eq(coli_plan_text(sched_fixture(MODEL), "auto", &text), 0, "%s", coli_last_error());
    cr_expect(strstr(text, "worker 0  cuda:0") && strstr(text, "worker 1  cpu:0"), "%s", text);
    free(text);
    sched_rm_plugin_dir(dir);
}

//  CPU workers named beside auto start without a GPU: only auto's own are
//  dropped. Same bytes as --inproc, one worker, no fallback.
Test(scheduler_auto, named_cpu_workers_start_beside_auto, .timeout = 120) {
    char dir[64];
    s_plugin_dir(dir, sizeof dir, NULL, NULL);
    char *err = NULL, *js = s_run("auto,cpu:1", &err);
    cr_expect_eq(s_n_workers(js), 1, "%s", js);
    char v[32];
    sched_worker_field(js, 0, "device", v, sizeof v);
    cr_expect_str_eq(v, "cpu:0", "%s", js);
    sched_worker_field(js, 0, "batches", v, sizeof v);
    cr_expect_gt(atol(v), 0, "the named worker did no work: %s", js);
    cr_expect_eq(sched_field(js, "fallbacks_total"), 0, "%s", js);
    free(err);
    free(js);
    sched_rm_plugin_dir(dir);
}

//  The default's workers (here the cpu plugin standing in as a GPU, and the
//  CPU worker that is its fallback target) go with the model, as named
//  devices' do.
Test(scheduler_auto, default_workers_end_with_the_model, .timeout = 60) {
    char dir[64], cpu[1100];
    snprintf(cpu, sizeof cpu, "%s/lib/libcoli-cpu.so", sched_build_dir());
    s_plugin_dir(dir, sizeof dir, cpu, NULL);
    coli_model_params mp;
    coli_model_default_params(&mp);
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(sched_fixture(MODEL), &mp, &m), 0, "%s", coli_last_error());
    const int pid = sched_worker_pid(m, 0);
    cr_expect_gt(pid, 0);
    coli_model_free(&m);
    sched_wait_dead(pid, 2.0);
    sched_assert_no_orphans();
    sched_rm_plugin_dir(dir);
}
