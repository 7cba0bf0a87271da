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
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/sampler.h"
#include "tools/coli/args.h"
#include "tools/coli/bench.h"
#include "colibri.h"
#include "tools/coli/commands.h"
#include "core/clock.h"
#include "core/file_io.h"
#include "tools/coli/model_opts.h"

#define MAX_PROMPTS 8
#define MAX_CONFIGS 8
#define MAX_REPEAT 100

typedef struct bench_opts {
    model_opts mo;
    const char *prompts; /* "64,512" */
    const char *batch;   /* "1,4,8": --batch levels, NULL: the prefill/decode bench */
    int n_decode, repeat, bandwidth, bw_mib, floor;
    const char *json;
    int n_prompt, prompt[MAX_PROMPTS];
    int n_threads; /* what -t resolves to */
} bench_opts;

typedef struct config_run {
    char devices[256];
    int index; /* its place in --devices */
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
    char *stats;     /* its stats JSON after the run (per-worker report) */
    double n_tokens; /* tokens evaluated, all repeats */
    cJSON *caches;   /* live expert caches: [{"device", hits, misses, ...}] from the stats (owned) */
} config_run;

typedef struct bench_env {
    bench_bytes bytes;
    double gbs;        /* read bandwidth, 0 = not measured */
    double *floor_lat; /* --floor: seconds per floor token, all repeats (NULL: not run) */
    int n_floor, floor_jobs;
    double load_before[3], load_after[3];
    size_t state_tok, state_seq; /* a sequence's state: KV bytes per position, recurrent bytes */
} bench_env;

// ---------------------------------------------------------------------------
// helpers

static void s_read_loadavg(double out[3]) {
    out[0] = out[1] = out[2] = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return;
    if (fscanf(f, "%lf %lf %lf", &out[0], &out[1], &out[2]) != 3) out[0] = out[1] = out[2] = -1;
    fclose(f);
}

static int s_parse_prompts(bench_opts *o) {
    const char *s = o->prompts;
    o->n_prompt = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || (*end && *end != ','))
            return args_error("bench", "-p", "'%s' must be a comma-separated list of token counts >= 1", o->prompts);
        if (o->n_prompt == MAX_PROMPTS) return args_error("bench", "-p", "at most %d prompt lengths", MAX_PROMPTS);
        o->prompt[o->n_prompt++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return ARGS_OK;
}

/* Split the --devices list at spaces into cfg[].devices. */
static int s_parse_configs(const bench_opts *o, config_run *cfg, int *n_cfg) {
    const char *list = o->mo.inproc ? "inproc" : o->mo.devices ? o->mo.devices : "inproc";
    *n_cfg = 0;
    for (const char *s = list; *s;) {
        while (*s == ' ') s++;
        size_t len = strcspn(s, " ");
        if (!len) break;
        if (*n_cfg == MAX_CONFIGS) return args_error("bench", "--devices", "at most %d configurations", MAX_CONFIGS);
        if (len >= sizeof cfg->devices) return args_error("bench", "--devices", "'%.*s' too long", (int)len, s);
        snprintf(cfg[*n_cfg].devices, sizeof cfg->devices, "%.*s", (int)len, s);
        int rc =
            devices_check("bench", cfg[*n_cfg].devices, NULL, 0); /* a bad list is a usage error, before any load */
        if (rc) return rc;
        cfg[*n_cfg].index = *n_cfg;
        (*n_cfg)++;
        s += len;
    }
    return *n_cfg ? ARGS_OK : args_error("bench", "--devices", "empty list");
}

/* A top-level number of a parsed JSON object; 0 (and *found 0) when absent or not a number. */
static double s_json_num(const cJSON *js, const char *key, int *found) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(js, key);
    if (found) *found = cJSON_IsNumber(v);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

// ---------------------------------------------------------------------------
// one configuration

static int s_config_open(const bench_opts *o, config_run *c, int n_ctx) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = c->devices;
    mp.n_threads = o->mo.n_threads;
    mp.kv_f16 = o->mo.kv_f16;
    mp.verbose = o->mo.verbose;
    mp.keys_dir = o->mo.keys;
    mp.pins = o->mo.pins;
    mp.xdna = o->mo.xdna; /* configurations with workers get the NPU lane */
    double t0 = coli_now_s();
    if (coli_model_load(o->mo.model, &mp, &c->m) != 0) return cli_fail();
    if (o->mo.route_trace) {
        char path[4096];
        int i = c->index;
        if (i)
            snprintf(path, sizeof path, "%s.%d", o->mo.route_trace, i);
        else
            snprintf(path, sizeof path, "%s", o->mo.route_trace);
        if (coli_dump_routing(c->m, path) != 0) return cli_fail();
    }
    c->load_s = coli_now_s() - t0;
    coli_model_info info;
    coli_model_get_info(c->m, &info);
    c->n_ctx = n_ctx < info.n_ctx ? n_ctx : info.n_ctx;
    if (o->n_decode + 1 > c->n_ctx) {
        fprintf(stderr, "coli bench: -n: %d decode tokens + 1 do not fit the model's context (%d)\n", o->n_decode,
                info.n_ctx);
        return ARGS_ERROR;
    }
    coli_context_params cp;
    coli_context_default_params(&cp);
    cp.n_ctx = c->n_ctx;
    if (coli_context_new(c->m, &cp, &c->ctx) != 0) return cli_fail();
    c->lat = malloc((size_t)o->repeat * (size_t)o->n_decode * sizeof(double));
    if (!c->lat) {
        fprintf(stderr, "coli: bench: out of memory\n");
        return CLI_FAIL;
    }
    return 0;
}

/* 0, or CLI_FAIL (printed) when its --route-trace could not be written. */
static int s_config_close(config_run *c) {
    coli_context_free(&c->ctx);
    int rc = model_opts_free(&c->m);
    free(c->lat);
    c->lat = NULL;
    free(c->stats);
    c->stats = NULL;
    cJSON_Delete(c->caches);
    c->caches = NULL;
    return rc;
}

/* One repeat r of configuration c: the prefills, then the decode. */
static int s_config_repeat(const bench_opts *o, config_run *c, int r, const int32_t *ids, float *logits) {
    coli_model_info info;
    coli_model_get_info(c->m, &info);
    for (int p = 0; p < o->n_prompt; p++) {
        if (o->prompt[p] > c->n_ctx) continue; /* longer than the context: reported as skipped */
        coli_context_reset(c->ctx);
        double t0 = coli_now_s();
        if (coli_eval(c->ctx, ids, o->prompt[p], logits, 0) != 0) return cli_fail();
        c->prefill[p][r] = o->prompt[p] / (coli_now_s() - t0);
        c->n_tokens += o->prompt[p];
    }
    coli_context_reset(c->ctx);
    if (coli_eval(c->ctx, ids, 1, logits, 0) != 0) return cli_fail();
    double start = coli_now_s();
    for (int i = 0; i < o->n_decode; i++) {
        int32_t next = sampler_argmax(logits, info.n_vocab);
        double t0 = coli_now_s();
        if (coli_eval(c->ctx, &next, 1, logits, 0) != 0) return cli_fail();
        c->lat[c->n_lat++] = coli_now_s() - t0;
    }
    c->decode[r] = o->n_decode / (coli_now_s() - start);
    c->n_tokens += 1 + o->n_decode;
    return 0;
}

static int s_config_stats(config_run *c) {
    char *text = NULL;
    if (coli_model_stats_json(c->m, &text) != 0) return cli_fail();
    cJSON *js = cJSON_Parse(text);
    free(c->stats);
    c->stats = text; /* kept for the per-worker report */
    if (!js) {
        fprintf(stderr, "coli: bench: [%s]: the stats are not JSON\n", c->devices);
        return CLI_FAIL;
    }
    c->disp_p50 = s_json_num(js, "dispatch_latency_p50_ms", &c->has_dispatch);
    c->disp_p99 = s_json_num(js, "dispatch_latency_p99_ms", NULL);
    int found = 0;
    c->fallbacks = s_json_num(js, "fallbacks_total", &found); /* workers; inproc says "fallbacks" */
    if (!found) c->fallbacks = s_json_num(js, "fallbacks", NULL);
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(js, "workers")) {
        const cJSON *cache = cJSON_GetObjectItemCaseSensitive(w, "cache");
        if (!cache) continue;
        if (!c->caches) c->caches = cJSON_CreateArray();
        cJSON *e = cJSON_Duplicate(cache, 1);
        cJSON_AddItemToObject(e, "device", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(w, "device"), 0));
        cJSON_AddItemToObject(e, "rows", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(w, "rows"), 0));
        cJSON_AddItemToArray(c->caches, e);
    }
    cJSON_Delete(js);
    return 0;
}

// ---------------------------------------------------------------------------
// reporting

typedef struct summary {
    double med, min, max;
} summary;

static summary s_summarize(const double *v, int n) {
    double tmp[MAX_REPEAT];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    summary s = {bench_quantile(tmp, n, 0.5), tmp[0], tmp[n - 1]};
    return s;
}

static double s_limit_tok_s(const bench_env *env) {
    return env->gbs > 0 && env->bytes.per_token > 0 ? env->gbs * 1e9 / (double)env->bytes.per_token : 0;
}

static void s_print_header(const bench_opts *o, const bench_env *env) {
    printf("coli bench: %s (%s experts), %d threads, %d repeats, %d decode tokens\n", o->mo.model,
           env->bytes.expert_type[0] ? env->bytes.expert_type : "no", o->n_threads, o->repeat, o->n_decode);
    printf("weights read per decode token: %.1f MB (routed experts %.1f MB, output head %.1f MB; file %.1f MB)\n",
           (double)env->bytes.per_token / 1e6, (double)env->bytes.experts / 1e6, (double)env->bytes.output / 1e6,
           (double)env->bytes.all_tensors / 1e6);
    printf("sequence state: %zu bytes per position (KV), %zu bytes per sequence (recurrent)\n", env->state_tok,
           env->state_seq);
    if (env->gbs > 0)
        printf("read bandwidth (%d threads): %.2f GB/s -> decode limit %.1f tok/s\n", o->n_threads, env->gbs,
               s_limit_tok_s(env));
    else
        printf("read bandwidth: not measured (--bandwidth)\n");
}

/* Decode token latency over all repeats, in ms. */
typedef struct token_latency {
    double p50, p90, p99, max;
} token_latency;

static token_latency s_token_latency_of(const config_run *c) {
    token_latency l = {0, 0, 0, 0};
    for (int i = 0; i < c->n_lat; i++)
        if (c->lat[i] * 1e3 > l.max) l.max = c->lat[i] * 1e3;
    l.p50 = bench_quantile(c->lat, c->n_lat, 0.5) * 1e3;
    l.p90 = bench_quantile(c->lat, c->n_lat, 0.9) * 1e3;
    l.p99 = bench_quantile(c->lat, c->n_lat, 0.99) * 1e3;
    return l;
}

static void s_print_config(const bench_opts *o, const bench_env *env, config_run *c) {
    printf("[%s] load %.3f s\n", c->devices, c->load_s);
    for (int p = 0; p < o->n_prompt; p++) {
        if (o->prompt[p] > c->n_ctx) {
            printf("  prefill %4d tokens: skipped (longer than the context, %d)\n", o->prompt[p], c->n_ctx);
            continue;
        }
        summary s = s_summarize(c->prefill[p], o->repeat);
        printf("  prefill %4d tokens: %9.2f tok/s (min %.2f, max %.2f)\n", o->prompt[p], s.med, s.min, s.max);
    }
    summary d = s_summarize(c->decode, o->repeat);
    printf("  decode  %4d tokens: %9.2f tok/s (min %.2f, max %.2f)", o->n_decode, d.med, d.min, d.max);
    if (s_limit_tok_s(env) > 0) printf("  = %.0f%% of the limit", 100.0 * d.med / s_limit_tok_s(env));
    const token_latency l = s_token_latency_of(c);
    printf("\n  token latency p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms (p99/p50 %.2f)\n", l.p50, l.p90, l.p99,
           l.max, l.p50 > 0 ? l.p99 / l.p50 : 0);
    if (c->has_dispatch)
        printf("  per-layer dispatch p50 %.3f ms, p99 %.3f ms, fallbacks %.0f\n", c->disp_p50, c->disp_p99,
               c->fallbacks);
    else
        printf("  experts in-process (no dispatch), fallbacks %.0f\n", c->fallbacks);
    bench_hosts_print(c->stats, c->n_tokens);
    const cJSON *e;
    cJSON_ArrayForEach(e, c->caches) /* live expert caches (docs/scheduler.md) */
        printf("  cache %s: hit rate %.1f%% (%.0f hits, %.0f misses), %.0f promotions, %.0f evictions, prefetch %.0f "
               "issued / %.0f used\n",
               cJSON_GetStringValue(cJSON_GetObjectItem(e, "device")), 100 * s_json_num(e, "hit_rate", NULL),
               s_json_num(e, "hits", NULL), s_json_num(e, "misses", NULL), s_json_num(e, "promotions", NULL),
               s_json_num(e, "evictions", NULL), s_json_num(e, "prefetch_issued", NULL),
               s_json_num(e, "prefetch_used", NULL));
}

/* v rounded to `decimals` places: what the file shows (cJSON prints the shortest exact form). */
static cJSON *s_json_round(double v, int decimals) {
    double scale = 1;
    for (int i = 0; i < decimals; i++) scale *= 10;
    return cJSON_CreateNumber(round(v * scale) / scale);
}

static void s_json_summary(cJSON *parent, const char *name, const double *v, int n) {
    summary s = s_summarize(v, n);
    cJSON *o = cJSON_AddObjectToObject(parent, name);
    cJSON_AddItemToObject(o, "median", s_json_round(s.med, 4));
    cJSON_AddItemToObject(o, "min", s_json_round(s.min, 4));
    cJSON_AddItemToObject(o, "max", s_json_round(s.max, 4));
    cJSON *runs = cJSON_AddArrayToObject(o, "runs");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(runs, s_json_round(v[i], 4));
}

static void s_json_latency(cJSON *parent, const char *name, double p50, double p99) {
    cJSON *o = cJSON_AddObjectToObject(parent, name);
    cJSON_AddItemToObject(o, "p50", s_json_round(p50, 4));
    cJSON_AddItemToObject(o, "p99", s_json_round(p99, 4));
}

static void s_json_token_latency(cJSON *parent, const config_run *c) {
    const token_latency l = s_token_latency_of(c);
    cJSON *o = cJSON_AddObjectToObject(parent, "token_latency_ms");
    cJSON_AddItemToObject(o, "p50", s_json_round(l.p50, 4));
    cJSON_AddItemToObject(o, "p90", s_json_round(l.p90, 4));
    cJSON_AddItemToObject(o, "p99", s_json_round(l.p99, 4));
    cJSON_AddItemToObject(o, "max", s_json_round(l.max, 4));
}

static cJSON *s_json_config(const bench_opts *o, const bench_env *env, config_run *c) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "devices", c->devices);
    cJSON_AddItemToObject(j, "load_seconds", s_json_round(c->load_s, 4));
    cJSON *prefill = cJSON_AddArrayToObject(j, "prefill");
    for (int p = 0; p < o->n_prompt; p++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "n_tokens", o->prompt[p]);
        if (o->prompt[p] > c->n_ctx) {
            cJSON_AddStringToObject(e, "skipped", "longer than the context");
            cJSON_AddNullToObject(e, "tok_s");
        } else {
            s_json_summary(e, "tok_s", c->prefill[p], o->repeat);
        }
        cJSON_AddItemToArray(prefill, e);
    }
    cJSON *decode = cJSON_AddObjectToObject(j, "decode");
    cJSON_AddNumberToObject(decode, "n_tokens", o->n_decode);
    s_json_summary(decode, "tok_s", c->decode, o->repeat);
    summary d = s_summarize(c->decode, o->repeat);
    cJSON_AddItemToObject(j, "pct_of_limit",
                          s_json_round(s_limit_tok_s(env) > 0 ? 100.0 * d.med / s_limit_tok_s(env) : 0, 2));
    s_json_token_latency(j, c);
    if (c->has_dispatch)
        s_json_latency(j, "dispatch_latency_ms", c->disp_p50, c->disp_p99);
    else
        cJSON_AddNullToObject(j, "dispatch_latency_ms");
    cJSON_AddItemToObject(j, "fallbacks", s_json_round(c->fallbacks, 0));
    cJSON_AddNumberToObject(j, "tokens", c->n_tokens);
    cJSON *hosts = bench_hosts_json(c->stats, c->n_tokens);
    if (hosts)
        cJSON_AddItemToObject(j, "workers", hosts);
    else
        cJSON_AddNullToObject(j, "workers");
    cJSON *moves = bench_moves_json(c->stats); /* experts moved between hosts (docs/scheduler.md) */
    if (moves) cJSON_AddItemToObject(j, "expert_moves", moves);
    if (c->caches) cJSON_AddItemReferenceToObject(j, "caches", c->caches);
    return j;
}

static cJSON *s_json_doubles(const double *v, int n, int decimals) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, s_json_round(v[i], decimals));
    return a;
}

// ---------------------------------------------------------------------------
// --floor: the machine's own latency floor beside the model's tokens

/* A floor shaped like this model's decode token: its weight bytes, about
 * as many pool jobs as a token issues (attention projections, attention,
 * output projection, expert gate/up and down per layer, and the head). */
static bench_floor *s_floor_open(const bench_opts *o, bench_env *env, int n_layer) {
    env->n_floor = o->n_decode * o->repeat;
    env->floor_jobs = 6 * (n_layer > 0 ? n_layer : 1) + 2;
    env->floor_lat = calloc((size_t)env->n_floor, sizeof *env->floor_lat);
    if (!env->floor_lat) {
        fprintf(stderr, "coli: bench --floor: out of memory\n");
        return NULL;
    }
    return bench_floor_new(o->n_threads, (size_t)env->bytes.per_token, env->floor_jobs);
}

static token_latency s_floor_latency(const bench_env *env) {
    config_run c = {.lat = env->floor_lat, .n_lat = env->n_floor};
    return s_token_latency_of(&c);
}

static void s_print_floor(const bench_opts *o, const bench_env *env) {
    const token_latency l = s_floor_latency(env);
    printf("machine floor (no model: %d pool jobs reading %.1f MB per token, %d threads, after each repeat)\n",
           env->floor_jobs, (double)env->bytes.per_token / 1e6, o->n_threads);
    printf("  token latency p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms (p99/p50 %.2f)\n", l.p50, l.p90, l.p99,
           l.max, l.p50 > 0 ? l.p99 / l.p50 : 0);
}

static int s_write_json(const bench_opts *o, const bench_env *env, config_run *cfg, int n_cfg) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", o->mo.model);
    cJSON_AddStringToObject(j, "expert_type", env->bytes.expert_type);
    cJSON_AddNumberToObject(j, "n_threads", o->n_threads);
    cJSON_AddNumberToObject(j, "repeat", o->repeat);
    cJSON_AddNumberToObject(j, "bytes_per_token", (double)env->bytes.per_token);
    cJSON_AddNumberToObject(j, "expert_bytes_per_token", (double)env->bytes.experts);
    cJSON_AddNumberToObject(j, "output_bytes", (double)env->bytes.output);
    cJSON_AddNumberToObject(j, "file_tensor_bytes", (double)env->bytes.all_tensors);
    cJSON_AddNumberToObject(j, "state_bytes_per_token", (double)env->state_tok);
    cJSON_AddNumberToObject(j, "state_bytes_per_sequence", (double)env->state_seq);
    if (env->gbs > 0) {
        cJSON_AddItemToObject(j, "bandwidth_gbs", s_json_round(env->gbs, 3));
        cJSON_AddItemToObject(j, "limit_tok_s", s_json_round(s_limit_tok_s(env), 3));
    } else {
        cJSON_AddNullToObject(j, "bandwidth_gbs");
        cJSON_AddNullToObject(j, "limit_tok_s");
    }
    if (env->floor_lat) {
        const token_latency l = s_floor_latency(env);
        cJSON *fl = cJSON_AddObjectToObject(j, "floor");
        cJSON_AddNumberToObject(fl, "jobs_per_token", env->floor_jobs);
        cJSON_AddItemToObject(fl, "p50_ms", s_json_round(l.p50, 4));
        cJSON_AddItemToObject(fl, "p90_ms", s_json_round(l.p90, 4));
        cJSON_AddItemToObject(fl, "p99_ms", s_json_round(l.p99, 4));
        cJSON_AddItemToObject(fl, "max_ms", s_json_round(l.max, 4));
    }
    cJSON_AddItemToObject(j, "loadavg_before", s_json_doubles(env->load_before, 3, 2));
    cJSON_AddItemToObject(j, "loadavg_after", s_json_doubles(env->load_after, 3, 2));
    cJSON *configs = cJSON_AddArrayToObject(j, "configs");
    for (int i = 0; i < n_cfg; i++) cJSON_AddItemToArray(configs, s_json_config(o, env, &cfg[i]));
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!text) {
        fprintf(stderr, "coli: --json %s: out of memory\n", o->json);
        return CLI_FAIL;
    }
    int rc = coli_outfile_write_line("--json", o->json, text, 0);
    free(text);
    return rc ? cli_fail() : 0;
}

// ---------------------------------------------------------------------------
// the command

/* Load every configuration, run the repeats interleaved, report. */
static int s_run_configs(const bench_opts *o, bench_env *env, config_run *cfg, int n_cfg) {
    int max_p = 1;
    for (int p = 0; p < o->n_prompt; p++)
        if (o->prompt[p] > max_p) max_p = o->prompt[p];
    const int n_ctx = (max_p > o->n_decode + 1 ? max_p : o->n_decode + 1) + 1;
    int rc = 0;
    for (int i = 0; i < n_cfg && !rc; i++) rc = s_config_open(o, &cfg[i], n_ctx);
    coli_model_info info;
    if (!rc) coli_model_get_info(cfg[0].m, &info);
    if (!rc) {
        env->state_tok = info.state_bytes_per_token;
        env->state_seq = info.state_bytes_per_seq;
    }
    int32_t *ids = rc ? NULL : malloc((size_t)max_p * sizeof *ids);
    float *logits = rc ? NULL : malloc((size_t)info.n_vocab * sizeof *logits);
    if (!rc && (!ids || !logits)) {
        fprintf(stderr, "coli: bench: out of memory\n");
        rc = CLI_FAIL;
    }
    uint32_t seed = 12345; /* the same pseudo-random prompt for every configuration */
    for (int i = 0; !rc && i < max_p; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = (int32_t)((seed >> 8) % (uint32_t)info.n_vocab);
    }
    bench_floor *floor = NULL;
    if (!rc && o->floor && !(floor = s_floor_open(o, env, info.n_layer))) rc = CLI_FAIL;
    s_read_loadavg(env->load_before);
    for (int r = 0; r < o->repeat && !rc; r++) {
        for (int i = 0; i < n_cfg && !rc; i++) rc = s_config_repeat(o, &cfg[i], r, ids, logits);
        if (floor && !rc) bench_floor_run(floor, o->n_decode, env->floor_lat + (size_t)r * o->n_decode);
    }
    s_read_loadavg(env->load_after);
    bench_floor_free(floor);
    for (int i = 0; i < n_cfg && !rc; i++) rc = s_config_stats(&cfg[i]);
    if (!rc) {
        s_print_header(o, env);
        for (int i = 0; i < n_cfg; i++) s_print_config(o, env, &cfg[i]);
        if (env->floor_lat) s_print_floor(o, env);
        printf("load average %.2f before, %.2f after\n", env->load_before[0], env->load_after[0]);
        if (o->json) rc = s_write_json(o, env, cfg, n_cfg);
    }
    free(ids);
    free(logits);
    free(env->floor_lat);
    env->floor_lat = NULL;
    for (int i = 0; i < n_cfg; i++)
        if (s_config_close(&cfg[i]) && !rc) rc = CLI_FAIL;
    return rc;
}

static int s_parse_bench_args(int argc, char **argv, bench_opts *o) {
    arg_spec specs[] = {
        MODEL_OPTS_SPECS(o->mo),
        {"--route-trace", NULL, ARG_STR, &o->mo.route_trace, 0, 0, 0, "FILE",
         "write each token's expert choice per layer as JSON lines (configuration i > 0: FILE.i)"},
        {"--pin", NULL, ARG_STR, &o->mo.pins, 0, 0, 0, "L:E=DEV,...",
         "place these experts on these workers (every configuration with workers)"},
        {"--prompts", "-p", ARG_STR, &o->prompts, 0, 0, 0, "LIST",
         "prompt lengths to prefill, e.g. 64,512 (default 64,512)"},
        {"--n-decode", "-n", ARG_INT, &o->n_decode, 1, 1 << 20, 0, "N", "decode steps per repeat (default 128)"},
        {"--repeat", "-r", ARG_INT, &o->repeat, 1, MAX_REPEAT, 0, "R",
         "repeats, interleaved over the configurations (default 3)"},
        {"--bandwidth", NULL, ARG_FLAG, &o->bandwidth, 0, 0, 0, NULL,
         "measure the read bandwidth first (alone: only that)"},
        {"--bandwidth-mib", NULL, ARG_INT, &o->bw_mib, 64, 1 << 16, 0, "MIB",
         "buffer of the bandwidth test (default 1024)"},
        {"--floor", NULL, ARG_FLAG, &o->floor, 0, 0, 0, NULL,
         "also time the machine's latency floor: decode-shaped tokens with no model, after each repeat"},
        {"--json", NULL, ARG_STR, &o->json, 0, 0, 0, "OUT", "also write the results as JSON to OUT"},
        {"--batch", NULL, ARG_STR, &o->batch, 0, 0, 0, "LIST",
         "instead: continuous-batching decode steps of 1,4,8... sequences at once (step ms, tok/s)"},
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc = args_parse("bench", argc, argv, specs, n_specs, NULL, 0, NULL);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "bench",
                   "-m FILE [-p 64,512] [-n 128] [--devices \"inproc cpu:1\"] [--repeat R] [--bandwidth] [--json OUT]",
                   "Prefill and decode tok/s (median, min, max over repeats), p50/p90/p99/max token latency,\n"
                   "per-layer dispatch latency, fallbacks, weight bytes read per decode token and, with\n"
                   "--bandwidth, the read bandwidth and the decode limit it implies. Several --devices\n"
                   "configurations, separated by spaces, run interleaved repeat by repeat.",
                   specs, n_specs);
        return ARGS_HELP;
    }
    if (rc) return rc;
    if (!o->mo.model && !o->bandwidth)
        return args_error("bench", "-m", "required (the GGUF model file), or --bandwidth alone");
    if (o->mo.model && cli_check_input_file("-m", o->mo.model)) return CLI_FAIL;
    if ((rc = cli_check_output_file("bench", "--json", o->json, o->mo.model)) ||
        (rc = cli_check_output_file("bench", "--route-trace", o->mo.route_trace, o->mo.model)))
        return rc;
    if (o->mo.inproc && o->mo.devices)
        return args_error("bench", "--inproc", "conflicts with --devices %s", o->mo.devices);
    if (o->mo.xdna && (o->mo.inproc || !o->mo.devices))
        return args_error("bench", "--xdna",
                          "needs --devices with workers (e.g. \"cpu:1\"); bench's default is inproc");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->n_threads = o->mo.n_threads > 0 ? o->mo.n_threads : (int)(cores > 0 ? cores : 1);
    return s_parse_prompts(o);
}

/* --batch LIST: the levels, then bench_batch on the first configuration. */
static int s_run_batch(const bench_opts *o, double gbs) {
    bench_batch_opts b = {
        .model = o->mo.model, .n_threads = o->mo.n_threads, .n_decode = o->n_decode, .repeat = o->repeat};
    b.devices = o->mo.inproc ? "inproc" : o->mo.devices ? o->mo.devices : "inproc";
    b.xdna = o->mo.xdna;
    for (const char *s = o->batch; *s;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 64 || (*end && *end != ','))
            return args_error("bench", "--batch", "'%s' must be a comma-separated list of 1..64", o->batch);
        if (b.n_levels == BENCH_BATCH_MAX_LEVELS)
            return args_error("bench", "--batch", "at most %d levels", BENCH_BATCH_MAX_LEVELS);
        b.levels[b.n_levels++] = (int)v;
        s = *end ? end + 1 : end;
    }
    if (!b.n_levels) return args_error("bench", "--batch", "empty list");
    if (o->json) return args_error("bench", "--json", "not written by --batch (its table is on stdout)");
    if (!o->mo.model) return args_error("bench", "--batch", "needs -m (the GGUF model file)");
    b.gbs = gbs;
    if (strchr(b.devices, ' ')) return args_error("bench", "--batch", "one --devices configuration only");
    return bench_batch(&b);
}

int cmd_bench(int argc, char **argv) {
    static config_run cfg[MAX_CONFIGS]; /* large (per-repeat arrays): not on the stack */
    bench_opts o = {.prompts = "64,512", .n_decode = 128, .repeat = 3, .bw_mib = 1024};
    int rc = s_parse_bench_args(argc, argv, &o);
    if (rc) return rc == ARGS_HELP ? 0 : rc;
    bench_env env;
    memset(&env, 0, sizeof env);
    if (o.bandwidth) {
        if ((rc = bench_read_bandwidth(o.n_threads, o.bw_mib, 10, &env.gbs)) != 0) return rc;
        if (!o.mo.model) {
            printf("read bandwidth (%d threads, %d MiB): %.2f GB/s\n", o.n_threads, o.bw_mib, env.gbs);
            return 0;
        }
    }
    if (o.batch) return s_run_batch(&o, env.gbs);
    int n_cfg = 0;
    memset(cfg, 0, sizeof cfg);
    if ((rc = s_parse_configs(&o, cfg, &n_cfg)) != 0) return rc;
    if ((rc = bench_decode_bytes(o.mo.model, &env.bytes)) != 0) return rc;
    return s_run_configs(&o, &env, cfg, n_cfg);
}
