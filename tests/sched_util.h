/*
 * sched_util.h - helpers for the scheduler integration tests: run the same
 * greedy generation in-process and through real coli-worker processes, and
 * compare token ids and logits bytes; read counters from the stats JSON;
 * look for leftover worker processes in /proc.
 */
#ifndef COLI_TEST_SCHED_UTIL_H
#define COLI_TEST_SCHED_UTIL_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "colibri.h"
#include "tests/stderr_capture.h"

#define GEN_STEPS 6
#define PROMPT_LEN 5

typedef struct gen_result {
    int32_t ids[GEN_STEPS];
    float *logits; /* (GEN_STEPS + 1, n_vocab): after the prompt and each step */
    int n_vocab;
    char *stats; /* stats JSON taken before the model is freed */
} gen_result;

/* Called before eval step (0 = the prompt); may kill or stop workers. */
typedef void (*step_hook)(coli_model *m, int step, void *user);

static inline const char *sched_fixture(const char *name) {
    static char path[1024];
    const char *b = getenv("COLI_BUILD");
    snprintf(path, sizeof path, "%s/fixtures/%s", b && *b ? b : "build", name);
    if (access(path, R_OK) != 0) cr_skip_test("fixture %s missing (run make fixtures)", path);
    return path;
}

/* The environment every scheduler suite starts from: a generous layer
 * deadline (CI noise) and no injected fault left over from another test. */
static inline void sched_env_defaults(void) {
    setenv("COLI_LAYER_DEADLINE_MS", "5000", 1);
    unsetenv("COLI_FAULT");
    stderr_quiet(); /* the workers' expected diagnostics: shown only if the test fails */
}

/* Criterion's runner (libcriterion 2.4.1) leaks one 48-byte block of its own
 * in some schedules (parallel tests, skipped tests); under ASan that would
 * fail the program although nothing failed. A test file that meets it
 * defines SCHED_WAIVE_RUNNER_LEAK before including this header; only the
 * runner's block is waived. */
#ifdef SCHED_WAIVE_RUNNER_LEAK
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libcriterion.so\n"; }
#endif

/* The build directory ($COLI_BUILD, default "build") as an absolute path. */
static inline const char *sched_build_dir(void) {
    static char path[1024];
    const char *b = getenv("COLI_BUILD");
    char *real = realpath(b && *b ? b : "build", NULL);
    cr_assert(real, "build directory");
    snprintf(path, sizeof path, "%s", real);
    free(real);
    return path;
}

/* A new plugin directory (mkdtemp of `tmpl`) holding the built cpu plugin
 * plus `cuda` / `hip` as libcoli-cuda.so / libcoli-hip.so (NULL = absent);
 * COLI_PLUGIN_DIR points at it until sched_rm_plugin_dir. */
static inline void sched_plugin_dir(char *dir, size_t n, const char *tmpl, const char *cuda, const char *hip) {
    snprintf(dir, n, "%s", tmpl);
    cr_assert(mkdtemp(dir), "mkdtemp");
    char src[1100], dst[1100];
    snprintf(src, sizeof src, "%s/lib/libcoli-cpu.so", sched_build_dir());
    snprintf(dst, sizeof dst, "%s/libcoli-cpu.so", dir);
    cr_assert_eq(symlink(src, dst), 0);
    const char *so[2] = {cuda, hip}, *name[2] = {"cuda", "hip"};
    for (int i = 0; i < 2; i++) {
        if (!so[i]) continue;
        snprintf(dst, sizeof dst, "%s/libcoli-%s.so", dir, name[i]);
        cr_assert_eq(symlink(so[i], dst), 0, "symlink %s", so[i]);
    }
    setenv("COLI_PLUGIN_DIR", dir, 1);
}

static inline void sched_rm_plugin_dir(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
    unsetenv("COLI_PLUGIN_DIR");
}

static inline double sched_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline void gen_free(gen_result *r) {
    free(r->logits);
    free(r->stats);
    memset(r, 0, sizeof *r);
}

static inline int sched_argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* Greedy generation of GEN_STEPS tokens after a fixed prompt on a loaded
 * model (what names it in messages); hook, if any, runs before each step. */
static inline void sched_generate_on(coli_model *m, const char *what, step_hook hook, void *user, gen_result *r) {
    memset(r, 0, sizeof *r);
    coli_model_info info;
    coli_model_get_info(m, &info);
    r->n_vocab = info.n_vocab;
    r->logits = calloc((size_t)(GEN_STEPS + 1) * (size_t)info.n_vocab, sizeof(float));
    coli_context *c = NULL;
    coli_context_params cp;
    coli_context_default_params(&cp);
    cr_assert_eq(coli_context_new(m, &cp, &c), 0, "%s", coli_last_error());
    int32_t prompt[PROMPT_LEN] = {1, 17, 42, 99, 7};
    for (int step = 0; step <= GEN_STEPS; step++) {
        if (hook) hook(m, step, user);
        float *lg = r->logits + (size_t)step * (size_t)info.n_vocab;
        int rc = step == 0 ? coli_eval(c, prompt, PROMPT_LEN, lg, 0) : coli_eval(c, &r->ids[step - 1], 1, lg, 0);
        cr_assert_eq(rc, 0, "eval step %d (%s): %s", step, what, coli_last_error());
        if (step < GEN_STEPS) r->ids[step] = sched_argmax(lg, info.n_vocab);
    }
    cr_assert_eq(coli_model_stats_json(m, &r->stats), 0, "%s", coli_last_error());
    coli_context_free(&c);
}

/* model loaded on `devices` with one compute thread (the test fails if it cannot be); caller frees. */
static inline coli_model *sched_load(const char *model, const char *devices) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = devices;
    mp.n_threads = 1;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(model, &mp, &m), 0, "load (%s): %s", devices, coli_last_error());
    return m;
}

/* sched_generate_on a model loaded here on `devices`, freed afterwards. */
static inline void sched_generate(const char *model, const char *devices, step_hook hook, void *user, gen_result *r) {
    coli_model *m = sched_load(model, devices);
    sched_generate_on(m, devices, hook, user, r);
    coli_model_free(&m);
}

static inline void sched_assert_same(const gen_result *a, const gen_result *b, const char *what) {
    cr_assert_eq(a->n_vocab, b->n_vocab);
    for (int i = 0; i < GEN_STEPS; i++)
        cr_assert_eq(a->ids[i], b->ids[i], "%s: token %d: %d vs %d", what, i, a->ids[i], b->ids[i]);
    size_t n = (size_t)(GEN_STEPS + 1) * (size_t)a->n_vocab * sizeof(float);
    cr_assert(memcmp(a->logits, b->logits, n) == 0, "%s: logits bytes differ from --inproc", what);
}

/* ---- stats JSON ---------------------------------------------------------- */

/* The count of fallbacks for (device, reason); 0 if absent. */
static inline long sched_fallbacks(const char *json, const char *device, const char *reason) {
    char key[160];
    snprintf(key, sizeof key, "{\"device\":\"%s\",\"reason\":\"%s\",\"count\":", device, reason);
    const char *p = strstr(json, key);
    return p ? strtol(p + strlen(key), NULL, 10) : 0;
}

/* A top-level integer field ("fallbacks_total", ...). */
static inline long sched_field(const char *json, const char *name) {
    char key[96];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *p = strstr(json, key);
    cr_assert(p, "stats JSON has no %s: %s", name, json);
    return strtol(p + strlen(key), NULL, 10);
}

/* Poll the stats (polling drives reconnects and acks) until the top-level
 * integer field reaches want; 1 when it did within seconds. */
static inline int sched_wait_field(coli_model *m, const char *name, long want, double seconds) {
    double until = sched_now() + seconds;
    for (;;) {
        char *js = NULL;
        cr_assert_eq(coli_model_stats_json(m, &js), 0);
        long v = sched_field(js, name);
        free(js);
        if (v == want) return 1;
        if (sched_now() > until) return 0;
        usleep(50000);
    }
}

/* Field `name` of worker `id` as text (value up to , or }). */
static inline void sched_worker_field(const char *json, int id, const char *name, char *out, size_t n) {
    char key[64];
    snprintf(key, sizeof key, "{\"id\":%d,", id);
    const char *w = strstr(json, key);
    cr_assert(w, "no worker %d in %s", id, json);
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *p = strstr(w, key);
    cr_assert(p, "worker %d has no %s", id, name);
    p += strlen(key);
    if (*p == '"') p++;
    size_t len = strcspn(p, "\",}");
    snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), p);
}

static inline int sched_worker_pid(coli_model *m, int id) {
    char *js = NULL, v[32];
    cr_assert_eq(coli_model_stats_json(m, &js), 0);
    sched_worker_field(js, id, "pid", v, sizeof v);
    free(js);
    return atoi(v);
}

/* ---- processes ---------------------------------------------------------- */

/* 1 if pid is gone or a zombie. */
static inline int sched_proc_dead(int pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');
    return !rp || rp[2] == 'Z' || rp[2] == 'X';
}

static inline void sched_wait_dead(int pid, double seconds) {
    double until = sched_now() + seconds;
    while (!sched_proc_dead(pid) && sched_now() < until) usleep(5000);
    cr_assert(sched_proc_dead(pid), "process %d still alive after %.1f s", pid, seconds);
}

/* Number of live coli-worker processes whose parent is ppid. */
static inline int sched_count_workers_of(int ppid) {
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int pid = atoi(e->d_name);
        if (pid <= 0) continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        const char *rp = strrchr(buf, ')');
        int parent = 0;
        char state = 0;
        if (rp && sscanf(rp + 2, "%c %d", &state, &parent) == 2 && parent == ppid && strstr(buf, "(coli-worker)") &&
            state != 'Z')
            n++;
    }
    if (d) closedir(d);
    return n;
}

static inline void sched_assert_no_orphans(void) {
    cr_assert_eq(sched_count_workers_of(getpid()), 0, "coli-worker children left behind");
}

#endif
