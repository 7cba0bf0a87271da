/* model_opts.c - shared model flags and loading; see model_opts.h. */
#include "tools/coli/model_opts.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int model_opts_check(const char *cmd, const model_opts *o) {
    if (!o->model) return args_error(cmd, "-m", "required (the GGUF model file)");
    if (cli_check_input_file("-m", o->model)) return CLI_FAIL;
    if (o->inproc && o->devices) return args_error(cmd, "--inproc", "conflicts with --devices %s", o->devices);
    if (o->xdna && o->inproc) return args_error(cmd, "--xdna", "needs worker processes; conflicts with --inproc");
    if (o->xdna) setenv("COLI_XDNA", "1", 1); /* the lane is opt-in: only this or the variable turns it on */
    if (o->no_heat && o->heat) return args_error(cmd, "--no-heat", "conflicts with --heat %s", o->heat);
    return devices_check(cmd, o->inproc ? "inproc" : o->devices, o->pins);
}

int devices_check(const char *cmd, const char *devices, const char *pins) {
    const char *flag = "--devices";
    if (coli_devices_check(devices, pins, &flag) != 0) return args_error(cmd, flag, "%s", coli_last_error());
    return ARGS_OK;
}

int model_opts_open(const model_opts *o, const char *default_devices, coli_model **m, coli_context **ctx) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = o->inproc ? "inproc" : o->devices ? o->devices : default_devices;
    mp.n_threads = o->n_threads;
    mp.kv_f16 = o->kv_f16;
    mp.n_ctx_max = o->n_ctx;
    mp.stats_json_path = o->stats_json;
    mp.verbose = o->verbose;
    mp.keys_dir = o->keys; /* NULL: COLI_KEYS (docs/settings.md) */
    char heat[4096];
    mp.heat_path = model_opts_heat_path(o, heat, sizeof heat);
    mp.pins = o->pins;
    *m = NULL;
    if (coli_model_load(o->model, &mp, m) != 0) return cli_fail();
    if (o->route_trace && coli_dump_routing(*m, o->route_trace) != 0) {
        coli_model_free(m);
        return cli_fail();
    }
    if (!ctx) return 0; /* the caller needs no context (tokenize) */
    int rc = model_opts_new_context(o, *m, ctx);
    if (rc) coli_model_free(m);
    return rc;
}

const char *model_opts_heat_path(const model_opts *o, char *buf, size_t cap) {
    if (o->no_heat || !o->model) return NULL;
    if (o->heat && strcmp(o->heat, "auto") != 0) return o->heat;
    snprintf(buf, cap, "%s.heat", o->model);
    return o->heat || access(buf, F_OK) == 0 ? buf : NULL;
}

int model_opts_new_context(const model_opts *o, coli_model *m, coli_context **ctx) {
    coli_context_params cp;
    coli_context_default_params(&cp);
    cp.n_ctx = o->n_ctx;
    *ctx = NULL;
    return coli_context_new(m, &cp, ctx) != 0 ? cli_fail() : 0;
}

int model_opts_n_ctx(const model_opts *o, const coli_model *m) {
    coli_model_info info;
    coli_model_get_info(m, &info);
    return o->n_ctx > 0 ? o->n_ctx : info.n_ctx;
}

void sampling_help_init(sampling_help *h, const coli_sampling_params *sp) {
    snprintf(h->temp, sizeof h->temp, "temperature, 0 = greedy (default %g)", sp->temperature);
    snprintf(h->top_k, sizeof h->top_k, "sample among the K most likely, 0 = off (default %d)", sp->top_k);
    snprintf(h->top_p, sizeof h->top_p, "nucleus sampling in (0, 1], 1 = off (default %g)", sp->top_p);
    snprintf(h->seed, sizeof h->seed, "random seed: same seed, same output (default %llu)",
             (unsigned long long)sp->seed);
}

int cli_tokenize(const coli_model *m, const char *text, size_t len, int add_special, int parse_special, int32_t **ids,
                 int *n) {
    /* tokens rarely outnumber bytes (BOS/EOS and odd vocabularies aside): one try mostly does */
    int cap = (int)(len < (1u << 26) ? len : (1u << 26)) + 16, rc = COLI_ERANGE;
    *ids = NULL;
    *n = 0;
    for (int attempt = 0; attempt < 2 && rc == COLI_ERANGE; attempt++) {
        if (attempt) {
            if (*n <= cap) break; /* not a short buffer: more tokens than an int counts */
            cap = *n;             /* the library said how many it needs */
        }
        if (!(*ids = malloc((size_t)cap * sizeof **ids))) return COLI_ENOMEM;
        rc = coli_tokenize(m, text, len, add_special, parse_special, *ids, cap, n);
        if (rc) {
            free(*ids);
            *ids = NULL;
        }
    }
    return rc;
}

int chat_template_check(const char *cmd, const char *name) {
    if (!name || !strcmp(name, "auto") || chat_family_from_name(name) != CHAT_UNKNOWN) return ARGS_OK;
    return args_error(cmd, "--chat-template", "unknown template '%s' (known: auto, %s)", name, chat_family_list());
}

int chat_kwargs_check(const char *cmd, const char *json, int *thinking) {
    *thinking = CHAT_THINKING_DEFAULT;
    if (!json) return ARGS_OK;
    cJSON *kw = cJSON_Parse(json);
    char err[160];
    int rc = kw ? chat_kwargs_parse(kw, thinking, err, sizeof err) : -1;
    cJSON_Delete(kw);
    if (!kw) return args_error(cmd, "--chat-template-kwargs", "not valid JSON: %.60s", json);
    return rc ? args_error(cmd, "--chat-template-kwargs", "%s", err) : ARGS_OK;
}

chat_family chat_template_pick(const char *name, const coli_model_info *info, const char **source) {
    if (name && strcmp(name, "auto") != 0) {
        *source = "--chat-template";
        return chat_family_from_name(name);
    }
    return chat_family_detect(info->chat_template, info->arch, source);
}
