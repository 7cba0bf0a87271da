/*
 * bench_sched.c - decode speed through the scheduler: --inproc vs local CPU
 * workers on either data path, and the per-layer dispatch round trip
 * (make bench-sched).
 *
 *   bench_sched MODEL [N_DECODE] [DEVICES[/shm|/zmq]...]
 *       default: inproc cpu:1/shm cpu:1/zmq cpu:2/shm cpu:2/zmq
 *   BENCH_ROUNDS=R (default 3): every configuration runs R times,
 *   interleaved (round 1 of each, then round 2, ...), so a load change on a
 *   shared machine hits all of them alike; medians are printed.
 *
 * Each run loads the model, evaluates an 8-token prompt, then decodes
 * N_DECODE tokens greedily; the decode time excludes the prompt. "dispatch"
 * is one MoE layer's fan-out + gather (compute included), "batch" a
 * worker's send -> reply, "rtt" = batch minus the worker's kernel time is
 * not visible here: compare a /shm and a /zmq row instead.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "colibri.h"
#include "core/clock.h"
#include "core/settings.h"

#define MAX_CONF 16
#define MAX_ROUNDS 15

typedef struct result {
    double tok_s, p50, p99, batch_p50, fallbacks;
} result;

static double s_json_num(const char *js, const char *key) {
    char k[96];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = js ? strstr(js, k) : NULL;
    return p ? atof(p + strlen(k)) : 0;
}

/* "cpu:2/zmq" -> devices "cpu:2", COLI_DATA_PATH=zmq (none: the default). */
static void s_split(const char *conf, char *dev, size_t n) {
    snprintf(dev, n, "%s", conf);
    char *slash = strchr(dev, '/');
    if (slash) {
        *slash = 0;
        setenv("COLI_DATA_PATH", slash + 1, 1);
    } else {
        unsetenv("COLI_DATA_PATH");
    }
}

static int s_decode(coli_model *m, int n_decode, double *seconds) {
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
    double t0 = coli_now_s();
    for (int i = 0; !rc && i < n_decode; i++) {
        int32_t best = 0;
        for (int v = 1; v < info.n_vocab; v++)
            if (logits[v] > logits[best]) best = v;
        rc = coli_eval(c, &best, 1, logits, 0);
    }
    *seconds = coli_now_s() - t0;
    free(logits);
    coli_context_free(&c);
    return rc;
}

static int s_bench(const char *path, const char *conf, int n_decode, result *r) {
    char dev[64];
    s_split(conf, dev, sizeof dev);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = dev;
    coli_model *m = NULL;
    if (coli_model_load(path, &mp, &m) != 0) {
        fprintf(stderr, "bench_sched: %s: %s\n", conf, coli_last_error());
        return 1;
    }
    double dt = 0;
    int rc = s_decode(m, n_decode, &dt);
    char *js = NULL;
    if (!rc) coli_model_stats_json(m, &js);
    if (rc) fprintf(stderr, "bench_sched: %s: %s\n", conf, coli_last_error());
    r->tok_s = (double)n_decode / dt;
    r->p50 = s_json_num(js, "dispatch_latency_p50_ms");
    r->p99 = s_json_num(js, "dispatch_latency_p99_ms");
    r->batch_p50 = s_json_num(js, "batch_latency_p50_ms"); /* worker 0 */
    r->fallbacks = s_json_num(js, "fallbacks_total");
    free(js);
    coli_model_free(&m);
    return rc ? 1 : 0;
}

static int s_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double s_median(const result *r, int n, size_t field) {
    double v[MAX_ROUNDS];
    for (int i = 0; i < n; i++) v[i] = *(const double *)((const char *)&r[i] + field);
    qsort(v, (size_t)n, sizeof v[0], s_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_sched MODEL [N_DECODE] [DEVICES[/shm|/zmq]...]\n");
        return 2;
    }
    int n_decode = argc > 2 ? atoi(argv[2]) : 32;
    if (n_decode <= 0) n_decode = 32;
    const char *deflt[] = {"inproc", "cpu:1/shm", "cpu:1/zmq", "cpu:2/shm", "cpu:2/zmq"};
    const char **confs = argc > 3 ? (const char **)argv + 3 : deflt;
    int n_conf = argc > 3 ? argc - 3 : 5;
    static coli_settings set; /* PATH_MAX strings: not on the stack */
    coli_settings_from_env(&set);
    int rounds = set.bench_rounds > 0 ? (int)(set.bench_rounds < MAX_ROUNDS ? set.bench_rounds : MAX_ROUNDS) : 3;
    if (n_conf > MAX_CONF) n_conf = MAX_CONF;
    static result res[MAX_CONF][MAX_ROUNDS];
    int rc = 0;
    for (int k = 0; k < rounds; k++)
        for (int i = 0; i < n_conf; i++) rc |= s_bench(argv[1], confs[i], n_decode, &res[i][k]);
    printf("%s (%d decode tokens, median of %d interleaved rounds)\n", argv[1], n_decode, rounds);
    printf("  %-10s %10s %14s %14s %16s %9s\n", "devices", "decode", "dispatch p50", "dispatch p99", "w0 batch p50",
           "fallbacks");
    for (int i = 0; i < n_conf; i++)
        printf("  %-10s %6.2f tok/s %11.3f ms %11.3f ms %13.3f ms %9.0f\n", confs[i],
               s_median(res[i], rounds, offsetof(result, tok_s)), s_median(res[i], rounds, offsetof(result, p50)),
               s_median(res[i], rounds, offsetof(result, p99)), s_median(res[i], rounds, offsetof(result, batch_p50)),
               s_median(res[i], rounds, offsetof(result, fallbacks)));
    return rc;
}
