/* model_opts.c - shared model flags and loading; see model_opts.h. */
#include "tools/coli/model_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file_io.h"
#include "tools/coli/progress.h"

int cli_check_output_file(const char *cmd, const char *flag, const char *path, const char *input) {
    /* by device and inode: ./IN, an absolute path, a symlink or a hard link is IN too */
    if (!path || !input || (strcmp(path, input) != 0 && !coli_same_file(path, input))) return ARGS_OK;
    return args_error(cmd, flag, "'%s' is the input file %s; writing it would destroy it", path, input);
}

int model_opts_check(const char *cmd, const model_opts *o) {
    if (!o->model) return args_error(cmd, "-m", "required (the GGUF model file)");
    if (cli_check_input_file("-m", o->model)) return CLI_FAIL;
    int rc = cli_check_output_file(cmd, "--route-trace", o->route_trace, o->model);
    if (rc || (rc = cli_check_output_file(cmd, "--stats-json", o->stats_json, o->model))) return rc;
    if (o->inproc && o->devices) return args_error(cmd, "--inproc", "conflicts with --devices %s", o->devices);
    if (o->xdna && o->inproc) return args_error(cmd, "--xdna", "needs worker processes; conflicts with --inproc");
    if (o->no_heat && o->heat) return args_error(cmd, "--no-heat", "conflicts with --heat %s", o->heat);
    return devices_check(cmd, o->inproc ? "inproc" : o->devices, o->pins, o->xdna);
}

int devices_check(const char *cmd, const char *devices, const char *pins, int xdna) {
    const char *flag = "--devices";
    const coli_model_params p = {.devices = devices, .pins = pins, .xdna = xdna};
    if (coli_devices_check_params(&p, &flag) != 0) return args_error(cmd, flag, "%s", coli_last_error());
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
    mp.xdna = o->xdna; /* the lane is opt-in: only this or COLI_XDNA turns it on */
    *m = NULL;
    /* a cold disk can take minutes: after a few seconds a line says we are at it (not with -v,
     * whose own lines tell) */
    char what[4200];
    snprintf(what, sizeof what, "loading %s", o->model);
    cli_waiting *wait = cli_waiting_start("coli", what, 3.0, o->verbose);
    int rc = coli_model_load(o->model, &mp, m);
    cli_waiting_end(wait);
    if (rc != 0) return cli_fail();
    /* auto picks the path itself: say which, so the user can find it (coli heat PATH) */
    if (mp.heat_path && o->heat && !strcmp(o->heat, "auto"))
        fprintf(stderr, "coli: --heat auto: heat file %s (%s when the model is freed)\n", mp.heat_path,
                access(mp.heat_path, F_OK) == 0 ? "read, updated" : "written");
    if (o->route_trace && coli_dump_routing(*m, o->route_trace) != 0) {
        coli_model_free(m);
        return cli_fail();
    }
    if (!ctx) return 0; /* the caller needs no context (tokenize) */
    rc = model_opts_new_context(o, *m, ctx);
    if (rc) coli_model_free(m);
    return rc;
}

int model_opts_free(coli_model **m) {
    int rc = *m && coli_dump_routing(*m, NULL) != 0 ? cli_fail() : 0;
    coli_model_free(m);
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

int chat_template_check(const char *cmd, const char *name) {
    if (chat_template_name_ok(name)) return ARGS_OK;
    return args_error(cmd, "--chat-template", "unknown template '%s' (known: auto, %s)", name, chat_family_list());
}

int chat_kwargs_check(const char *cmd, const char *json, const char *effort_flag, int *thinking, int *effort) {
    char err[160];
    if (chat_kwargs_from_json(json, thinking, effort, err, sizeof err))
        return args_error(cmd, "--chat-template-kwargs", "%s", err);
    if (effort_flag && (*effort = chat_effort_parse(effort_flag)) < 0)
        return args_error(cmd, "--reasoning-effort", "unknown effort '%s' (known: low, medium, high)", effort_flag);
    return ARGS_OK;
}
