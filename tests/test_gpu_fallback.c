/*
 * test_gpu_fallback.c - the real GPU plugins behind real workers:
 * `--devices cuda:0,cpu:1` (and hip:0,cpu:1) with the plugin that
 * `make gpu-compile` / `make CUDA=1` built.
 *
 * Without a device (this CI): the GPU worker's hello says FAILED with the
 * plugin's precise probe reason, its experts go to the CPU worker, tokens
 * and logits are the bytes of the in-process run, and the stats and the
 * end-of-run summary show the fallback. With a device (tools/gpu-check.sh):
 * the GPU worker is up, holds experts, and the logits stay within 1e-2 of
 * the CPU's.
 */
#include <dlfcn.h>
#include <math.h>

#include "plugins/plugin_abi.h"
#define SCHED_WAIVE_RUNNER_LEAK /* skipped tests: no plugin built, or no device */
#include "tests/sched_util.h"

#define MODEL "tiny-llama-moe-f32.gguf"

static void s_env(void) {
    sched_env_defaults();
    unsetenv("COLI_PLUGIN_FAULT");
}

TestSuite(gpu_fallback, .init = s_env);

//  The built plugin for vendor (absolute path), or skip.
static void s_find_plugin(const char *vendor, char *out, size_t n) {
    const char *b = getenv("COLI_BUILD");
    char *build = realpath(b && *b ? b : "build", NULL);
    cr_assert(build, "build directory");
    const char *fmt[] = {"%s/lib/libcoli-%s.so", "%s/gpu/%s/libcoli-%s.so"};
    for (int i = 0; i < 2; i++) {
        if (i == 0)
            snprintf(out, n, fmt[0], build, vendor);
        else
            snprintf(out, n, fmt[1], build, vendor, vendor);
        if (access(out, R_OK) == 0) {
            free(build);
            return;
        }
    }
    free(build);
    cr_skip_test("skipped: no %s plugin built (make gpu-compile or %s=1)", vendor,
                 strcmp(vendor, "cuda") ? "HIP" : "CUDA");
}

//  What the plugin's own probe says here: device count and reason.
static int s_probe(const char *path, char *why, size_t n) {
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        snprintf(why, n, "%s", dlerror());
        return 0;
    }
    moe_plugin_get_fn get = (moe_plugin_get_fn)dlsym(dl, MOE_PLUGIN_SYMBOL);
    cr_assert(get, "%s: no %s", path, MOE_PLUGIN_SYMBOL);
    int count = 0;
    cr_assert_eq(get()->probe(&count, why, n), 0);
    dlclose(dl);
    return count;
}

//  A plugin directory with the cpu plugin and the real GPU plugin.
static void s_plugin_dir(char *dir, size_t n, const char *vendor, const char *so) {
    const int cuda = !strcmp(vendor, "cuda");
    sched_plugin_dir(dir, n, "/tmp/coli-gputest-XXXXXX", cuda ? so : NULL, cuda ? NULL : so);
}

static void s_check_vendor(const char *vendor) {
    char so[1200], why[512] = "", dir[64], devices[64], gpu[16];
    s_find_plugin(vendor, so, sizeof so);
    const int n_devices = s_probe(so, why, sizeof why);
    const char *model = sched_fixture(MODEL);
    s_plugin_dir(dir, sizeof dir, vendor, so);
    snprintf(gpu, sizeof gpu, "%s:0", vendor);
    snprintf(devices, sizeof devices, "%s,cpu:1", gpu);
    gen_result ref, got;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    sched_generate(model, devices, NULL, NULL, &got);
    char v[512];
    if (n_devices == 0) {
        cr_log_info("%s: no device here (%s): checking the fallback", vendor, why);
        sched_assert_same(&ref, &got, devices);
        cr_expect_eq(sched_fallbacks(got.stats, gpu, "no_device"), 1, "%s", got.stats);
        cr_expect_eq(sched_field(got.stats, "fallbacks_total"), 1, "%s", got.stats);
        sched_worker_field(got.stats, 0, "status", v, sizeof v);
        cr_expect_str_eq(v, "failed");
        sched_worker_field(got.stats, 0, "reason", v, sizeof v);
        cr_expect(strstr(v, why), "worker reason '%s' lacks the probe's '%s'", v, why);
        sched_worker_field(got.stats, 1, "resident_experts", v, sizeof v);
        cr_expect_eq(atol(v), 8, "the cpu worker holds every expert (2 layers x 4)");
    } else {
        sched_worker_field(got.stats, 0, "status", v, sizeof v);
        cr_expect_str_eq(v, "up", "%s", got.stats);
        sched_worker_field(got.stats, 0, "resident_experts", v, sizeof v);
        cr_expect_gt(atol(v), 0, "the %s worker holds no expert: %s", vendor, got.stats);
        float m = 0;
        for (size_t i = 0; i < (size_t)(GEN_STEPS + 1) * (size_t)ref.n_vocab; i++)
            m = fmaxf(m, fabsf(ref.logits[i] - got.logits[i]));
        cr_log_info("%s: max |logit diff| vs in-process: %g", vendor, m);
        cr_expect_lt(m, 1e-2f, "%s: logits differ by %g", vendor, m);
    }
    gen_free(&ref);
    gen_free(&got);
    sched_rm_plugin_dir(dir);
    sched_assert_no_orphans();
}

//  The summary the user sees names the failed GPU worker and the fallback.
static void s_check_summary(const char *vendor) {
    char so[1200], why[512] = "", dir[64], devices[64];
    s_find_plugin(vendor, so, sizeof so);
    if (s_probe(so, why, sizeof why) > 0) cr_skip_test("skipped: a %s device is present", vendor);
    s_plugin_dir(dir, sizeof dir, vendor, so);
    snprintf(devices, sizeof devices, "%s:0,cpu:1", vendor);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = devices;
    mp.n_threads = 1;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(sched_fixture(MODEL), &mp, &m), 0, "%s", coli_last_error());
    char *text = NULL;
    cr_assert_eq(coli_model_stats_text(m, &text), 0, "%s", coli_last_error());
    char want[64];
    snprintf(want, sizeof want, "%s:0 no_device 1", vendor);
    cr_expect(strstr(text, want), "summary lacks '%s':\n%s", want, text);
    cr_expect(strstr(text, why), "summary lacks the reason '%s':\n%s", why, text);
    free(text);
    /* the failed GPU worker is not left running beside the healthy one */
    const int pid = sched_worker_pid(m, 0);
    coli_model_free(&m);
    if (pid > 0) sched_wait_dead(pid, 2.0);
    sched_rm_plugin_dir(dir);
}

//  With a device: partial residency. COLI_PLUGIN_FAULT makes the plugin fail
//  one upload (its own allocation / copy failure paths); a budget of three
//  experts (96 KiB each) is respected by placement. Each refused expert is one
//  fallback of that reason, the rest stay resident, logits within 1e-2.
static void s_check_partial(const char *vendor, const char *devices, const char *fault, const char *reason,
                            long fallbacks, long resident) {
    char so[1200], why[512] = "", dir[64], gpu[16], v[64];
    s_find_plugin(vendor, so, sizeof so);
    if (s_probe(so, why, sizeof why) == 0) cr_skip_test("skipped: no %s device (%s)", vendor, why);
    s_plugin_dir(dir, sizeof dir, vendor, so);
    snprintf(gpu, sizeof gpu, "%s:0", vendor);
    const char *model = sched_fixture(MODEL);
    gen_result ref, got;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    if (fault) setenv("COLI_PLUGIN_FAULT", fault, 1);
    sched_generate(model, devices, NULL, NULL, &got);
    unsetenv("COLI_PLUGIN_FAULT");
    if (reason) cr_expect_eq(sched_fallbacks(got.stats, gpu, reason), fallbacks, "%s", got.stats);
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), fallbacks, "%s", got.stats);
    sched_worker_field(got.stats, 0, "resident_experts", v, sizeof v);
    cr_expect_eq(atol(v), resident, "%s", got.stats);
    float m = 0;
    for (size_t i = 0; i < (size_t)(GEN_STEPS + 1) * (size_t)ref.n_vocab; i++)
        m = fmaxf(m, fabsf(ref.logits[i] - got.logits[i]));
    cr_expect_lt(m, 1e-2f, "%s: logits differ by %g", devices, m);
    gen_free(&ref);
    gen_free(&got);
    sched_rm_plugin_dir(dir);
    sched_assert_no_orphans();
}

Test(gpu_fallback, cuda_alloc_failure_leaves_one_expert_on_cpu, .timeout = 120) {
    s_check_partial("cuda", "cuda:0,cpu:1", "alloc@2", "alloc", 1, 3);
}

Test(gpu_fallback, cuda_upload_failure_leaves_one_expert_on_cpu, .timeout = 120) {
    s_check_partial("cuda", "cuda:0,cpu:1", "h2d@1", "upload", 1, 3);
}

Test(gpu_fallback, cuda_budget_is_placed_not_refused, .timeout = 120) {
    s_check_partial("cuda", "cuda:0=288K,cpu:1", NULL, NULL, 0, 3);
}

Test(gpu_fallback, cuda_worker_without_device_falls_back_with_the_precise_reason, .timeout = 120) {
    s_check_vendor("cuda");
}

Test(gpu_fallback, hip_worker_without_device_falls_back_with_the_precise_reason, .timeout = 120) {
    s_check_vendor("hip");
}

Test(gpu_fallback, cuda_fallback_is_in_the_summary, .timeout = 60) { s_check_summary("cuda"); }
