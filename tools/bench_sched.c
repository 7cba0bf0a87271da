/*
 * bench_sched.c - decode speed through the scheduler: --inproc vs local CPU
 * workers, and the median per-layer dispatch round trip (make bench).
 *
 *   bench_sched MODEL [N_DECODE] [DEVICES...]   (default: inproc cpu:1 cpu:2)
 *
 * Each configuration loads the model, evaluates an 8-token prompt, then
 * decodes N_DECODE tokens greedily; the decode time excludes the prompt.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "colibri.h"

static double s_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double s_json_num(const char *js, const char *key)
{
    char k[96];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = js ? strstr(js, k) : NULL;
    return p ? atof(p + strlen(k)) : 0;
}

static int s_bench(const char *path, const char *devices, int n_decode)
{
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = devices;
    coli_model *m = NULL;
    if (coli_model_load(path, &mp, &m) != 0) {
        fprintf(stderr, "bench_sched: %s: %s\n", devices, coli_last_error());
        return 1;
    }
    coli_model_info info;
    coli_model_get_info(m, &info);
    coli_context *c = NULL;
    coli_context_params cp;
    coli_context_default_params(&cp);
    float *logits = malloc((size_t)info.n_vocab * sizeof(float));
    int rc = !logits || coli_context_new(m, &cp, &c);
    int32_t prompt[8] = {1, 415, 2936, 9060, 285, 1142, 461, 10575};
    for (int i = 0; i < 8; i++) prompt[i] %= info.n_vocab;
    if (!rc) rc = coli_eval(c, prompt, 8, logits, 0);
    double t0 = s_now();
    for (int i = 0; !rc && i < n_decode; i++) {
        int32_t best = 0;
        for (int v = 1; v < info.n_vocab; v++) if (logits[v] > logits[best]) best = v;
        rc = coli_eval(c, &best, 1, logits, 0);
    }
    double dt = s_now() - t0;
    char *js = NULL;
    if (!rc) coli_model_stats_json(m, &js);
    if (rc) fprintf(stderr, "bench_sched: %s: %s\n", devices, coli_last_error());
    else
        printf("  %-8s decode %8.2f tok/s   dispatch p50 %.3f ms  p99 %.3f ms  fallbacks %.0f\n", devices,
               (double)n_decode / dt, s_json_num(js, "dispatch_latency_p50_ms"),
               s_json_num(js, "dispatch_latency_p99_ms"), s_json_num(js, "fallbacks_total"));
    free(js);
    free(logits);
    coli_context_free(&c);
    coli_model_free(&m);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_sched MODEL [N_DECODE] [DEVICES...]\n");
        return 2;
    }
    int n_decode = argc > 2 ? atoi(argv[2]) : 32;
    if (n_decode <= 0) n_decode = 32;
    const char *deflt[] = {"inproc", "cpu:1", "cpu:2"};
    const char **devs = argc > 3 ? (const char **)argv + 3 : deflt;
    int n_devs = argc > 3 ? argc - 3 : 3;
    printf("%s (%d decode tokens)\n", argv[1], n_decode);
    int rc = 0;
    for (int i = 0; i < n_devs; i++) rc |= s_bench(argv[1], devs[i], n_decode);
    return rc;
}
