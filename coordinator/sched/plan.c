/*
 * plan.c - coli_plan_text: the placement the scheduler would make, without
 * starting any worker (`coli plan`). Assumes every named device comes up;
 * `auto` runs the GPU probes (device_probe.c) to know which there are.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/heat.h"
#include "coordinator/sched/sched_internal.h"
#include "core/error.h"
#include "core/kernels/expert_ffn.h"
#include "core/gguf/gguf.h"
#include "plugins/plugin_abi.h"

/* "<arch>.<suffix>" as an integer. */
static int s_arch_int(const gguf_file *f, const char *suffix, int64_t *out) {
    gguf_str arch;
    int rc = gguf_get_str(f, "general.architecture", &arch);
    if (rc) return rc;
    char key[128];
    snprintf(key, sizeof key, "%.*s.%s", (int)(arch.len < 64 ? arch.len : 64), arch.ptr, suffix);
    return gguf_get_i64(f, key, out);
}

/* What plan takes a worker to compute, not having its hello: the cpu
 * plugin every activation (its caps.act_mask), a remote worker too (its
 * plugin is unknown until it greets; most are cpu), cuda and hip what the
 * GPU plugin reports today (SWIGLU_OAI, SITU, SWIGLU_CLAMP, biases), xdna
 * none beyond SiLU. A live load places by each worker's hello instead.
 * Weight types are not assumed. */
static uint32_t s_assumed_acts(const device_spec *d) {
    if (!strcmp(d->plugin, "cpu") || d->endpoint[0]) return MOE_ACT_KNOWN;
    if (!strcmp(d->plugin, "cuda") || !strcmp(d->plugin, "hip"))
        return (1u << MOE_ACT_SWIGLU_OAI) | (1u << MOE_ACT_SITU) | (1u << MOE_ACT_SWIGLU_CLAMP) | MOE_ACT_BIASES;
    return 0;
}

/* able (n_w * n_layer) from need and the assumed activations; the text's
 * note on the layers some workers cannot take (NULL note: none). */
static void s_plan_able(const device_spec *d, int n_w, int n_layer, const place_need *need, uint8_t *able, char *note,
                        size_t cap) {
    int first = -1, n = 0;
    for (int l = 0; l < n_layer; l++) {
        int any_not = 0;
        for (int w = 0; w < n_w; w++) {
            able[(size_t)w * (size_t)n_layer + (size_t)l] =
                (uint8_t)placement_fits(&need[l], ~0ULL, s_assumed_acts(&d[w]));
            any_not |= !able[(size_t)w * (size_t)n_layer + (size_t)l];
        }
        if (any_not && first < 0) first = l;
        n += any_not;
    }
    note[0] = '\0';
    if (n)
        snprintf(note, cap,
                 "  %d layers (first %d) have experts with an activation beyond SwiGLU%s: only workers whose plugin "
                 "computes it take them (assumed: cpu and remote compute all, cuda/hip gpt-oss's, kimi-k3's and "
                 "deepseek4's, xdna none; a load follows each worker's hello)\n",
                 n, first, need[first].acts & MOE_ACT_BIASES ? " or biases (gpt-oss)" : "");
}

static int s_render(const device_spec *d, int n_w, int n_layer, int n_expert, const uint64_t *eb, const int32_t *owner,
                    const double *share, int pinned, const char *note, char **text) {
    size_t cap = 4096 + (size_t)n_w * 400 + (size_t)n_layer * ((size_t)n_expert * 8 + 32);
    char *t = malloc(cap);
    if (!t) return coli_fail(COLI_ENOMEM, "plan: out of memory");
    size_t len = 0;
    len += (size_t)snprintf(t + len, cap - len, "placement: %d workers, %d layers x %d experts (%s)\n", n_w, n_layer,
                            n_expert,
                            pinned ? "hottest first onto the fastest device with room; pins win"
                                   : "balance expert bytes per layer within budgets");
    char names[512]; /* one naming: what the stats, the metrics and --pin use too */
    sched_worker_names(d, n_w, names, sizeof names);
    len += (size_t)snprintf(t + len, cap - len, "  workers (--pin L:E=NAME takes these names): %s\n", names);
    len += (size_t)snprintf(t + len, cap - len, "%s", note);
    for (int w = -1; w < n_w; w++) {
        uint64_t n = 0, bytes = 0;
        for (int l = 0; l < n_layer; l++)
            for (int e = 0; e < n_expert; e++)
                if (eb[l] && owner[(size_t)l * (size_t)n_expert + (size_t)e] == w) n++, bytes += eb[l];
        if (w < 0 && !n) continue;
        char rows[64] = "";
        if (share) snprintf(rows, sizeof rows, "  expected rows %.1f%%", 100.0 * share[w < 0 ? n_w : w]);
        if (w < 0)
            len +=
                (size_t)snprintf(t + len, cap - len, "  in-process: %llu experts, %.1f MiB (no room on any worker)%s\n",
                                 (unsigned long long)n, (double)bytes / 1048576.0, rows);
        else if (d[w].cache) {
            len += (size_t)snprintf(t + len, cap - len,
                                    "  worker %d  %s:%d  live expert cache  budget %.1f MiB (the hottest experts that "
                                    "fit, promoted and evicted as routing goes; a miss goes to the expert's home)\n",
                                    w, d[w].plugin, d[w].index, (double)d[w].budget / 1048576.0);
        } else {
            char b[32] = "unlimited", at[240] = "";
            if (d[w].budget) snprintf(b, sizeof b, "%.1f MiB", (double)d[w].budget / 1048576.0);
            if (d[w].endpoint[0]) snprintf(at, sizeof at, " (%s)", d[w].endpoint); /* a host: which one */
            len += (size_t)snprintf(t + len, cap - len, "  worker %d  %s:%d%s  budget %s  experts %llu  %.1f MiB%s\n",
                                    w, d[w].plugin, d[w].index, at, b, (unsigned long long)n, (double)bytes / 1048576.0,
                                    rows);
        }
    }
    for (int l = 0; l < n_layer; l++) {
        len += (size_t)snprintf(t + len, cap - len, "  layer %3d:", l);
        for (int e = 0; e < n_expert; e++) {
            int o = owner[(size_t)l * (size_t)n_expert + (size_t)e];
            len += (size_t)(o < 0 ? snprintf(t + len, cap - len, " -") : snprintf(t + len, cap - len, " %d", o));
        }
        len += (size_t)snprintf(t + len, cap - len, "\n");
    }
    *text = t;
    return 0;
}

/* The heat file at heat_path (NULL: none) for a model of that shape, and
 * the placement from it and pins into owner; share: rows per worker. */
static int s_plan_heat(const placement_in *in, const device_spec *d, const char *heat_path, const char *pins,
                       int32_t *owner, double *share) {
    heat_table h = {0};
    int rc = heat_path ? heat_read(heat_path, &h) : heat_init(&h, in->n_layer, in->n_expert);
    if (rc == 0 && (h.n_layer != in->n_layer || h.n_expert != in->n_expert))
        rc = coli_fail(COLI_EFORMAT, "heat file %s: %d layers x %d experts, the model has %d x %d", heat_path,
                       h.n_layer, h.n_expert, in->n_layer, in->n_expert);
    int32_t *pin = rc ? NULL : malloc((size_t)in->n_layer * (size_t)in->n_expert * sizeof *pin);
    if (rc == 0 && !pin) rc = coli_fail(COLI_ENOMEM, "plan: out of memory");
    long speed[SCHED_MAX_WORKERS];
    for (int i = 0; i < in->n_workers; i++) speed[i] = sched_device_speed(&d[i], 0);
    if (rc == 0) rc = sched_parse_pins(pins, d, in->n_workers, in->n_layer, in->n_expert, pin);
    if (rc == 0) rc = placement_plan_heat(in, h.count, speed, pin, owner);
    if (rc == 0) placement_row_share(in, h.count, owner, share);
    free(pin);
    heat_free(&h);
    return rc;
}

/* Without a heat file each expert is taken as equally likely: a worker's
 * expected share of the routed rows is then its share of the experts
 * (every layer routes the same tokens, k each). */
static int s_uniform_share(const placement_in *in, const int32_t *owner, double *share) {
    const size_t n = (size_t)in->n_layer * (size_t)in->n_expert;
    uint64_t *ones = malloc(n * sizeof *ones);
    if (!ones) return coli_fail(COLI_ENOMEM, "plan: out of memory");
    for (size_t i = 0; i < n; i++) ones[i] = in->expert_bytes[i / (size_t)in->n_expert] ? 1 : 0;
    placement_row_share(in, ones, owner, share);
    free(ones);
    return 0;
}

/* In-process experts: the disk tier's plan when it applies (disk_plan.c),
 * else *text NULL. A file that is no MoE model has no tier. */
static int s_disk_plan(const char *model_path, const coli_model_params *p, char **text) {
    gguf_file *f = NULL;
    *text = NULL;
    int rc = gguf_open(model_path, &f);
    if (rc) return rc;
    int64_t n_layer = 0, n_expert = 0, k = 0, n_nextn = 0;
    int moe = !s_arch_int(f, "block_count", &n_layer) && !s_arch_int(f, "expert_count", &n_expert) &&
              !s_arch_int(f, "expert_used_count", &k);
    if (s_arch_int(f, "nextn_predict_layers", &n_nextn) == 0 && n_nextn > 0 && n_nextn < n_layer) n_layer -= n_nextn;
    gguf_close(&f);
    if (!moe || n_layer <= 0 || n_expert <= 0 || k <= 0 || k > n_expert || n_layer > 100000 || n_expert > 100000)
        return 0;
    return disk_plan_text(model_path, p, (int)n_layer, (int)n_expert, (int)k, text);
}

int coli_plan_text(const char *model_path, const char *devices, char **text) {
    return coli_plan_heat_text(model_path, devices, NULL, NULL, text);
}

/* The workers p's devices give on this machine, as the scheduler would
 * start them (sched_workers_of: auto expanded, the lane added), with the
 * settings a load with p would read. */
static int s_workers_of(const coli_model_params *p, device_spec *d, sched_workers *ws) {
    coli_settings *set = malloc(sizeof *set); /* ~30 KiB (paths) */
    if (!set) return coli_fail(COLI_ENOMEM, "plan: out of memory");
    coli_settings_load(set, p);
    int rc = sched_workers_of(set, p->devices, d, SCHED_MAX_WORKERS, ws, 0);
    free(set);
    return rc;
}

int coli_devices_check(const char *devices, const char *pins, const char **flag) {
    coli_model_params p = {.devices = devices, .pins = pins};
    return coli_devices_check_params(&p, flag);
}

int coli_devices_check_params(const coli_model_params *p, const char **flag) {
    static const coli_model_params defaults = {0};
    if (!p) p = &defaults;
    device_spec d[SCHED_MAX_WORKERS];
    int n_w = 0, inproc = 0;
    const char *pins = p->pins;
    *flag = "--devices";
    int rc = sched_parse_devices(p->devices, d, SCHED_MAX_WORKERS, &n_w, &inproc);
    if (rc || !pins || !*pins) return rc; /* the probes of auto run only when pins need the names */
    sched_workers ws;
    if ((rc = s_workers_of(p, d, &ws))) return rc;
    n_w = ws.n, inproc = ws.inproc;
    *flag = "--pin";
    if (p->devices && !strncmp(p->devices, "inproc@ram=", 11)) /* the disk tier: pins hold experts in its RAM */
        return disk_tier_parse_pins(pins, 0, 0, NULL);
    if (inproc || n_w == 0)
        return coli_fail(COLI_EINVAL,
                         "'%s': no worker to pin to: %s runs every expert in-process (give --devices cpu:N or a GPU)",
                         pins, inproc ? "--devices inproc" : "--devices auto found no GPU or NPU and");
    return sched_parse_pins(pins, d, n_w, 0, 0, NULL);
}

int coli_plan_heat_text(const char *model_path, const char *devices, const char *heat_path, const char *pins,
                        char **text) {
    coli_model_params p = {.devices = devices, .heat_path = heat_path, .pins = pins};
    return coli_plan_params_text(model_path, &p, text);
}

int coli_plan_params_text(const char *model_path, const coli_model_params *p, char **text) {
    static const coli_model_params defaults = {0};
    if (!text) return coli_fail(COLI_EINVAL, "plan: text must not be NULL");
    *text = NULL;
    if (!model_path) return coli_fail(COLI_EINVAL, "plan: no model path");
    if (!p) p = &defaults;
    const char *heat_path = p->heat_path && *p->heat_path ? p->heat_path : NULL, *pins = p->pins;
    device_spec d[SCHED_MAX_WORKERS];
    sched_workers ws;
    int rc = s_workers_of(p, d, &ws), n_w = ws.n;
    if (rc) return rc;
    if (n_w == 0 && (rc = s_disk_plan(model_path, p, text)) == 0 && *text) return 0;
    if (n_w == 0) {
        if (rc) return rc;
        *text = strdup(ws.inproc ? "placement: in-process (--devices inproc): every expert runs in the coordinator\n"
                                 : "placement: in-process (--devices auto found no GPU or NPU): every expert runs in "
                                   "the coordinator\n");
        return *text ? 0 : coli_fail(COLI_ENOMEM, "plan: out of memory");
    }
    gguf_file *f = NULL;
    if ((rc = gguf_open(model_path, &f))) return rc;
    int64_t n_layer = 0, n_expert = 0;
    if ((rc = s_arch_int(f, "block_count", &n_layer)) || (rc = s_arch_int(f, "expert_count", &n_expert))) {
        gguf_close(&f);
        return coli_fail_prefix(rc, "plan: %s", model_path);
    }
    int64_t n_nextn = 0; /* multi-token-prediction blocks: not run, not placed (model.c) */
    if (s_arch_int(f, "nextn_predict_layers", &n_nextn) == 0 && n_nextn > 0 && n_nextn < n_layer) n_layer -= n_nextn;
    if (n_layer <= 0 || n_expert <= 0 || n_layer > 100000 || n_expert > 100000) {
        gguf_close(&f);
        return coli_fail(COLI_EINVAL, "plan: %s is not a MoE model (%lld layers, %lld experts)", model_path,
                         (long long)n_layer, (long long)n_expert);
    }
    uint64_t *eb = calloc((size_t)n_layer, sizeof *eb);
    int32_t *owner = malloc((size_t)n_layer * (size_t)n_expert * sizeof *owner);
    place_need *need = calloc((size_t)n_layer, sizeof *need);
    uint8_t *able = malloc((size_t)n_w * (size_t)n_layer);
    rc = (!eb || !owner || !need || !able) ? coli_fail(COLI_ENOMEM, "plan: out of memory") : 0;
    for (int l = 0; rc == 0 && l < n_layer; l++) {
        expert_weights w;
        if (!expert_layer_present(f, l)) continue; /* dense layer: no experts, 0 bytes */
        rc = expert_weights_from_gguf(f, l, 0, &w);
        if (rc == 0) eb[l] = expert_weights_bytes(&w);
        if (rc == 0) placement_need_of(&w, &need[l]);
    }
    char note[400] = "";
    if (rc == 0) s_plan_able(d, n_w, (int)n_layer, need, able, note, sizeof note);
    uint64_t budget[SCHED_MAX_WORKERS], all = 0;
    int usable[SCHED_MAX_WORKERS];
    for (int l = 0; l < n_layer; l++) all += eb[l] * (uint64_t)n_expert;
    cache_budgets_of(all, d, n_w);
    /* a cache worker is no home: its experts come and go (cache_link.c), as in the scheduler */
    for (int i = 0; i < n_w; i++) budget[i] = d[i].budget, usable[i] = !d[i].cache;
    placement_in in = {(int)n_layer, (int)n_expert, eb, n_w, budget, usable, able};
    const int by_heat = heat_path || (pins && *pins);
    double share[SCHED_MAX_WORKERS + 1];
    if (rc == 0) rc = by_heat ? s_plan_heat(&in, d, heat_path, pins, owner, share) : placement_plan(&in, owner);
    if (rc == 0 && !heat_path) rc = s_uniform_share(&in, owner, share);
    if (rc == 0) rc = s_render(d, n_w, (int)n_layer, (int)n_expert, eb, owner, share, by_heat, note, text);
    free(need);
    free(able);
    free(eb);
    free(owner);
    gguf_close(&f);
    return rc;
}
