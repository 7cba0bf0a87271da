/*
 * cmd_bench.c - `coli bench`: prefill and decode speed of a model, measured
 * against the machine's own read bandwidth.
 *
 *   coli bench -m FILE [-p 64,512] [-n 128] [--devices "inproc cpu:1"]
 *              [--repeat R] [--bandwidth] [--json OUT]
 *   coli bench --bandwidth [-t N]          (only the read-bandwidth test)
 *
 * Several --devices configurations (separated by spaces) are loaded side by
 * side and run interleaved, repeat by repeat, so a noisy machine slows them
 * alike and their ratio stays meaningful. Each repeat: for every prompt
 * length P, a fresh context evaluates P tokens in one batch (prefill); then
 * one token and n greedy decode steps, each timed alone (token latency).
 * Decode speed is compared with the limit bandwidth / weight bytes a token
 * reads (bench_bytes.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "bench.h"
#include "colibri.h"
#include "commands.h"
#include "model_opts.h"

#define MAX_PROMPTS 8
#define MAX_CONFIGS 8
#define MAX_REPEAT 100

typedef struct bench_opts {
    model_opts mo;
    const char *prompts;  /* "64,512" */
    int n_decode, repeat, bandwidth, bw_mib;
    const char *json;
    int n_prompt, prompt[MAX_PROMPTS];
    int n_threads;        /* what -t resolves to */
} bench_opts;

typedef struct config_run {
    char devices[64];
    coli_model *m;
    coli_context *ctx;
    double load_s;
    int n_ctx;                               /* context length: needs, capped by the model's */
    double prefill[MAX_PROMPTS][MAX_REPEAT]; /* tok/s */
    double decode[MAX_REPEAT];               /* tok/s */
    double *lat;                             /* seconds per decode token, all repeats */
    int n_lat;
    double disp_p50, disp_p99, fallbacks;
    int has_dispatch;
} config_run;

typedef struct bench_env {
    bench_bytes bytes;
    double gbs;           /* read bandwidth, 0 = not measured */
    double load_before[3], load_after[3];
} bench_env;

// ---------------------------------------------------------------------------
// helpers

static void read_loadavg(double out[3]) {
    out[0] = out[1] = out[2] = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return;
    if (fscanf(f, "%lf %lf %lf", &out[0], &out[1], &out[2]) != 3) out[0] = out[1] = out[2] = -1;
    fclose(f);
}

static int parse_prompts(bench_opts *o) {
    const char *s = o->prompts;
    o->n_prompt = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || (*end && *end != ','))
            return args_error("bench", "-p", "'%s' must be a comma-separated list of token counts >= 1", o->prompts);
        if (o->n_prompt == MAX_PROMPTS)
            return args_error("bench", "-p", "at most %d prompt lengths", MAX_PROMPTS);
        o->prompt[o->n_prompt++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return ARGS_OK;
}

/* Split the --devices list at spaces into cfg[].devices. */
static int parse_configs(const bench_opts *o, config_run *cfg, int *n_cfg) {
    const char *list = o->mo.inproc ? "inproc" : o->mo.devices ? o->mo.devices : "inproc";
    *n_cfg = 0;
    for (const char *s = list; *s;) {
        while (*s == ' ') s++;
        size_t len = strcspn(s, " ");
        if (!len) break;
        if (*n_cfg == MAX_CONFIGS) return args_error("bench", "--devices", "at most %d configurations", MAX_CONFIGS);
        if (len >= sizeof cfg->devices) return args_error("bench", "--devices", "'%.*s' too long", (int)len, s);
        snprintf(cfg[*n_cfg].devices, sizeof cfg->devices, "%.*s", (int)len, s);
        (*n_cfg)++;
        s += len;
    }
    return *n_cfg ? ARGS_OK : args_error("bench", "--devices", "empty list");
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

static double json_num(const char *js, const char *key, int *found) {
    char k[96];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = js ? strstr(js, k) : NULL;
    if (found) *found = p != NULL;
    return p ? atof(p + strlen(k)) : 0;
}

// ---------------------------------------------------------------------------
// one configuration

static int config_open(const bench_opts *o, config_run *c, int n_ctx) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = c->devices;
    mp.n_threads = o->mo.n_threads;
    mp.kv_f16 = o->mo.kv_f16;
    mp.verbose = o->mo.verbose;
    double t0 = bench_now();
    if (coli_model_load(o->mo.model, &mp, &c->m) != 0) return cli_fail();
    c->load_s = bench_now() - t0;
    coli_model_info info;
    coli_model_get_info(c->m, &info);
    c->n_ctx = n_ctx < info.n_ctx ? n_ctx : info.n_ctx;
    if (o->n_decode + 1 > c->n_ctx) {
        fprintf(stderr, "coli bench: -n: %d decode tokens + 1 do not fit the model's context (%d)\n",
                o->n_decode, info.n_ctx);
        return ARGS_ERROR;
    }
    coli_context_params cp;
    coli_context_default_params(&cp);
    cp.n_ctx = c->n_ctx;
    if (coli_context_new(c->m, &cp, &c->ctx) != 0) return cli_fail();
    c->lat = malloc((size_t)o->repeat * (size_t)o->n_decode * sizeof(double));
    if (!c->lat) { fprintf(stderr, "coli: bench: out of memory\n"); return CLI_FAIL; }
    return 0;
}

static void config_close(config_run *c) {
    coli_context_free(&c->ctx);
    coli_model_free(&c->m);
    free(c->lat);
    c->lat = NULL;
}

/* One repeat r of configuration c: the prefills, then the decode. */
static int config_repeat(const bench_opts *o, config_run *c, int r, const int32_t *ids, float *logits) {
    coli_model_info info;
    coli_model_get_info(c->m, &info);
    for (int p = 0; p < o->n_prompt; p++) {
        if (o->prompt[p] > c->n_ctx) continue; /* longer than the context: reported as skipped */
        coli_context_reset(c->ctx);
        double t0 = bench_now();
        if (coli_eval(c->ctx, ids, o->prompt[p], logits, 0) != 0) return cli_fail();
        c->prefill[p][r] = o->prompt[p] / (bench_now() - t0);
    }
    coli_context_reset(c->ctx);
    if (coli_eval(c->ctx, ids, 1, logits, 0) != 0) return cli_fail();
    double start = bench_now();
    for (int i = 0; i < o->n_decode; i++) {
        int32_t next = argmax(logits, info.n_vocab);
        double t0 = bench_now();
        if (coli_eval(c->ctx, &next, 1, logits, 0) != 0) return cli_fail();
        c->lat[c->n_lat++] = bench_now() - t0;
    }
    c->decode[r] = o->n_decode / (bench_now() - start);
    return 0;
}

static int config_stats(config_run *c) {
    char *js = NULL;
    if (coli_model_stats_json(c->m, &js) != 0) return cli_fail();
    c->disp_p50 = json_num(js, "dispatch_latency_p50_ms", &c->has_dispatch);
    c->disp_p99 = json_num(js, "dispatch_latency_p99_ms", NULL);
    int found = 0;
    c->fallbacks = json_num(js, "fallbacks_total", &found);
    if (!found) c->fallbacks = json_num(js, "fallbacks", NULL);
    free(js);
    return 0;
}

// ---------------------------------------------------------------------------
// reporting

typedef struct summary { double med, min, max; } summary;

static summary summarize(const double *v, int n) {
    double tmp[MAX_REPEAT];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    summary s = {bench_quantile(tmp, n, 0.5), tmp[0], tmp[n - 1]};
    return s;
}

static double limit_tok_s(const bench_env *env) {
    return env->gbs > 0 && env->bytes.per_token > 0 ? env->gbs * 1e9 / (double)env->bytes.per_token : 0;
}

static void print_header(const bench_opts *o, const bench_env *env) {
    printf("coli bench: %s (%s experts), %d threads, %d repeats, %d decode tokens\n", o->mo.model,
           env->bytes.expert_type[0] ? env->bytes.expert_type : "no", o->n_threads, o->repeat, o->n_decode);
    printf("weights read per decode token: %.1f MB (routed experts %.1f MB, output head %.1f MB; file %.1f MB)\n",
           (double)env->bytes.per_token / 1e6, (double)env->bytes.experts / 1e6,
           (double)env->bytes.output / 1e6, (double)env->bytes.all_tensors / 1e6);
    if (env->gbs > 0)
        printf("read bandwidth (%d threads): %.2f GB/s -> decode limit %.1f tok/s\n", o->n_threads, env->gbs,
               limit_tok_s(env));
    else
        printf("read bandwidth: not measured (--bandwidth)\n");
}

static void print_config(const bench_opts *o, const bench_env *env, config_run *c) {
    printf("[%s] load %.3f s\n", c->devices, c->load_s);
    for (int p = 0; p < o->n_prompt; p++) {
        if (o->prompt[p] > c->n_ctx) {
            printf("  prefill %4d tokens: skipped (longer than the context, %d)\n", o->prompt[p], c->n_ctx);
            continue;
        }
        summary s = summarize(c->prefill[p], o->repeat);
        printf("  prefill %4d tokens: %9.2f tok/s (min %.2f, max %.2f)\n", o->prompt[p], s.med, s.min, s.max);
    }
    summary d = summarize(c->decode, o->repeat);
    printf("  decode  %4d tokens: %9.2f tok/s (min %.2f, max %.2f)", o->n_decode, d.med, d.min, d.max);
    if (limit_tok_s(env) > 0) printf("  = %.0f%% of the limit", 100.0 * d.med / limit_tok_s(env));
    double p50 = bench_quantile(c->lat, c->n_lat, 0.5) * 1e3, p99 = bench_quantile(c->lat, c->n_lat, 0.99) * 1e3;
    printf("\n  token latency p50 %.3f ms, p99 %.3f ms (p99/p50 %.2f)\n", p50, p99, p50 > 0 ? p99 / p50 : 0);
    if (c->has_dispatch)
        printf("  per-layer dispatch p50 %.3f ms, p99 %.3f ms, fallbacks %.0f\n", c->disp_p50, c->disp_p99, c->fallbacks);
    else
        printf("  experts in-process (no dispatch), fallbacks %.0f\n", c->fallbacks);
}

static void json_summary(FILE *f, const char *name, const double *v, int n) {
    summary s = summarize(v, n);
    fprintf(f, "\"%s\":{\"median\":%.4f,\"min\":%.4f,\"max\":%.4f,\"runs\":[", name, s.med, s.min, s.max);
    for (int i = 0; i < n; i++) fprintf(f, "%s%.4f", i ? "," : "", v[i]);
    fprintf(f, "]}");
}

static void json_config(FILE *f, const bench_opts *o, const bench_env *env, config_run *c) {
    fprintf(f, "{\"devices\":\"%s\",\"load_seconds\":%.4f,\"prefill\":[", c->devices, c->load_s);
    for (int p = 0; p < o->n_prompt; p++) {
        fprintf(f, "%s{\"n_tokens\":%d,", p ? "," : "", o->prompt[p]);
        if (o->prompt[p] > c->n_ctx) fprintf(f, "\"skipped\":\"longer than the context\",\"tok_s\":null");
        else json_summary(f, "tok_s", c->prefill[p], o->repeat);
        fprintf(f, "}");
    }
    fprintf(f, "],\"decode\":{\"n_tokens\":%d,", o->n_decode);
    json_summary(f, "tok_s", c->decode, o->repeat);
    summary d = summarize(c->decode, o->repeat);
    fprintf(f, "},\"pct_of_limit\":%.2f,", limit_tok_s(env) > 0 ? 100.0 * d.med / limit_tok_s(env) : 0);
    fprintf(f, "\"token_latency_ms\":{\"p50\":%.4f,\"p99\":%.4f},", bench_quantile(c->lat, c->n_lat, 0.5) * 1e3,
            bench_quantile(c->lat, c->n_lat, 0.99) * 1e3);
    if (c->has_dispatch)
        fprintf(f, "\"dispatch_latency_ms\":{\"p50\":%.4f,\"p99\":%.4f},", c->disp_p50, c->disp_p99);
    else
        fprintf(f, "\"dispatch_latency_ms\":null,");
    fprintf(f, "\"fallbacks\":%.0f}", c->fallbacks);
}

static int write_json(const bench_opts *o, const bench_env *env, config_run *cfg, int n_cfg) {
    FILE *f = fopen(o->json, "w");
    if (!f) { fprintf(stderr, "coli: --json %s: cannot open for writing\n", o->json); return CLI_FAIL; }
    fprintf(f, "{\"model\":\"%s\",\"expert_type\":\"%s\",\"n_threads\":%d,\"repeat\":%d,", o->mo.model,
            env->bytes.expert_type, o->n_threads, o->repeat);
    fprintf(f, "\"bytes_per_token\":%lld,\"expert_bytes_per_token\":%lld,\"output_bytes\":%lld,\"file_tensor_bytes\":%lld,",
            (long long)env->bytes.per_token, (long long)env->bytes.experts, (long long)env->bytes.output,
            (long long)env->bytes.all_tensors);
    if (env->gbs > 0)
        fprintf(f, "\"bandwidth_gbs\":%.3f,\"limit_tok_s\":%.3f,", env->gbs, limit_tok_s(env));
    else
        fprintf(f, "\"bandwidth_gbs\":null,\"limit_tok_s\":null,");
    fprintf(f, "\"loadavg_before\":[%.2f,%.2f,%.2f],\"loadavg_after\":[%.2f,%.2f,%.2f],\"configs\":[",
            env->load_before[0], env->load_before[1], env->load_before[2],
            env->load_after[0], env->load_after[1], env->load_after[2]);
    for (int i = 0; i < n_cfg; i++) {
        if (i) fputc(',', f);
        json_config(f, o, env, &cfg[i]);
    }
    fprintf(f, "]}\n");
    if (fclose(f) != 0) { fprintf(stderr, "coli: --json %s: write failed\n", o->json); return CLI_FAIL; }
    return 0;
}

// ---------------------------------------------------------------------------
// the command

/* Load every configuration, run the repeats interleaved, report. */
static int run_configs(const bench_opts *o, bench_env *env, config_run *cfg, int n_cfg) {
    int max_p = 1;
    for (int p = 0; p < o->n_prompt; p++) if (o->prompt[p] > max_p) max_p = o->prompt[p];
    const int n_ctx = (max_p > o->n_decode + 1 ? max_p : o->n_decode + 1) + 1;
    int rc = 0;
    for (int i = 0; i < n_cfg && !rc; i++) rc = config_open(o, &cfg[i], n_ctx);
    coli_model_info info;
    if (!rc) coli_model_get_info(cfg[0].m, &info);
    int32_t *ids = rc ? NULL : malloc((size_t)max_p * sizeof *ids);
    float *logits = rc ? NULL : malloc((size_t)info.n_vocab * sizeof *logits);
    if (!rc && (!ids || !logits)) { fprintf(stderr, "coli: bench: out of memory\n"); rc = CLI_FAIL; }
    uint32_t seed = 12345; /* the same pseudo-random prompt for every configuration */
    for (int i = 0; !rc && i < max_p; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = (int32_t)((seed >> 8) % (uint32_t)info.n_vocab);
    }
    read_loadavg(env->load_before);
    for (int r = 0; r < o->repeat && !rc; r++)
        for (int i = 0; i < n_cfg && !rc; i++) rc = config_repeat(o, &cfg[i], r, ids, logits);
    read_loadavg(env->load_after);
    for (int i = 0; i < n_cfg && !rc; i++) rc = config_stats(&cfg[i]);
    if (!rc) {
        print_header(o, env);
        for (int i = 0; i < n_cfg; i++) print_config(o, env, &cfg[i]);
        printf("load average %.2f before, %.2f after\n", env->load_before[0], env->load_after[0]);
        if (o->json) rc = write_json(o, env, cfg, n_cfg);
    }
    free(ids);
    free(logits);
    for (int i = 0; i < n_cfg; i++) config_close(&cfg[i]);
    return rc;
}

static int parse_bench_args(int argc, char **argv, bench_opts *o) {
    arg_spec specs[] = {
        MODEL_OPTS_SPECS(o->mo),
        {"--prompts", "-p", ARG_STR, &o->prompts, 0, 0, 0, "LIST", "prompt lengths to prefill, e.g. 64,512 (default 64,512)"},
        {"--n-decode", "-n", ARG_INT, &o->n_decode, 1, 1 << 20, 0, "N", "decode steps per repeat (default 128)"},
        {"--repeat", "-r", ARG_INT, &o->repeat, 1, MAX_REPEAT, 0, "R", "repeats, interleaved over the configurations (default 3)"},
        {"--bandwidth", NULL, ARG_FLAG, &o->bandwidth, 0, 0, 0, NULL, "measure the read bandwidth first (alone: only that)"},
        {"--bandwidth-mib", NULL, ARG_INT, &o->bw_mib, 64, 1 << 16, 0, "MIB", "buffer of the bandwidth test (default 1024)"},
        {"--json", NULL, ARG_STR, &o->json, 0, 0, 0, "OUT", "also write the results as JSON to OUT"},
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc = args_parse("bench", argc, argv, specs, n_specs, NULL, 0, NULL);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "bench", "-m FILE [-p 64,512] [-n 128] [--devices \"inproc cpu:1\"] [--repeat R] [--bandwidth] [--json OUT]",
                   "Prefill and decode tok/s (median, min, max over repeats), p50/p99 token latency,\n"
                   "per-layer dispatch latency, fallbacks, weight bytes read per decode token and, with\n"
                   "--bandwidth, the read bandwidth and the decode limit it implies. Several --devices\n"
                   "configurations, separated by spaces, run interleaved repeat by repeat.", specs, n_specs);
        return ARGS_HELP;
    }
    if (rc) return rc;
    if (!o->mo.model && !o->bandwidth)
        return args_error("bench", "-m", "required (the GGUF model file), or --bandwidth alone");
    if (o->mo.inproc && o->mo.devices) return args_error("bench", "--inproc", "conflicts with --devices %s", o->mo.devices);
    if (o->mo.xdna && (o->mo.inproc || !o->mo.devices))
        return args_error("bench", "--xdna", "needs --devices with workers (e.g. \"cpu:1\"); bench's default is inproc");
    if (o->mo.xdna) setenv("COLI_XDNA", "1", 1); /* configurations with workers get the NPU lane */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->n_threads = o->mo.n_threads > 0 ? o->mo.n_threads : (int)(cores > 0 ? cores : 1);
    return parse_prompts(o);
}

int cmd_bench(int argc, char **argv) {
    static config_run cfg[MAX_CONFIGS]; /* large (per-repeat arrays): not on the stack */
    bench_opts o = {.prompts = "64,512", .n_decode = 128, .repeat = 3, .bw_mib = 1024};
    int rc = parse_bench_args(argc, argv, &o);
    if (rc) return rc == ARGS_HELP ? 0 : rc;
    bench_env env;
    memset(&env, 0, sizeof env);
    if (o.bandwidth) {
        if ((rc = bench_read_bandwidth(o.n_threads, o.bw_mib, 5, &env.gbs)) != 0) return rc;
        if (!o.mo.model) {
            printf("read bandwidth (%d threads, %d MiB): %.2f GB/s\n", o.n_threads, o.bw_mib, env.gbs);
            return 0;
        }
    }
    int n_cfg = 0;
    memset(cfg, 0, sizeof cfg);
    if ((rc = parse_configs(&o, cfg, &n_cfg)) != 0) return rc;
    if ((rc = bench_decode_bytes(o.mo.model, &env.bytes)) != 0) return rc;
    return run_configs(&o, &env, cfg, n_cfg);
}
