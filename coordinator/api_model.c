/*
 * api_model.c - the model half of include/colibri.h: loading a file (the
 * weights, the tokenizer, the expert executor and its placement, the
 * heat file, the prefault), its info, the scheduler's stats, and the
 * routing heat it gathers. Contexts and generation are api.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/api_impl.h"
#include "coordinator/heat.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/settings.h"

static char *s_strdup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

// ---------------------------------------------------------------------------
// model

void coli_model_default_params(coli_model_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
}

/* heat_path: counts start from the file when it is there and valid; a file
 * that is not (another model's, damaged, hostile) is one line on stderr,
 * ignored and left as it is. */
static int s_load_heat(coli_model *cm, const coli_model_params *p) {
    const model_hparams *hp = &cm->m->hp;
    if (!p->heat_path || !*p->heat_path) return 0;
    if (!(cm->heat_path = s_strdup(p->heat_path, strlen(p->heat_path))))
        return coli_fail(COLI_ENOMEM, "model: out of memory");
    int rc = heat_init(&cm->route.heat, hp->n_layer, hp->n_expert);
    if (rc) return rc;
    cm->heat_save = 1;
    if (access(cm->heat_path, F_OK) != 0) return 0; /* first run: created at free */
    heat_table old;
    if ((rc = heat_read(cm->heat_path, &old)) == 0 && (rc = heat_merge(&cm->route.heat, &old)) != 0)
        coli_fail_prefix(rc, "heat file %s (%d layers x %d experts, the model has %d x %d)", cm->heat_path, old.n_layer,
                         old.n_expert, hp->n_layer, hp->n_expert);
    heat_free(&old);
    if (rc) {
        fprintf(stderr, "colibri: %s; it is ignored and not updated\n", coli_last_error());
        cm->heat_save = 0;
    }
    return 0;
}

static int s_start_experts(coli_model *cm, const char *path, const coli_model_params *p, const coli_settings *set) {
    const model_hparams *hp = &cm->m->hp;
    if (hp->n_expert == 0) return 0; /* dense: the forward pass runs the FFN itself */
    int rc = s_load_heat(cm, p);
    if (rc) return rc;
    moe_exec_config cfg = {
        .model_path = path,
        .gguf = cm->m->gguf,
        .n_layer = hp->n_layer,
        .n_expert = hp->n_expert,
        .n_expert_used = hp->n_expert_used,
        .n_embd = hp->n_embd_latent ? hp->n_embd_latent : hp->n_embd, /* kimi-k3: the experts' latent width */
        .n_ff = hp->n_ff_exp,
        .devices = p->devices,
        .n_threads = cm->n_threads,
        .pool = cm->pool,
        .verbose = p->verbose,
        .settings = set,
        .pins = p->pins,
        .heat = heat_total(&cm->route.heat) ? cm->route.heat.count : NULL,
    };
    /* the worker executor decides where experts run (sched_workers_of): "inproc", and auto
     * without an accelerator, give the in-process one */
    return moe_exec_workers_new(&cfg, &cm->moe);
}

/* name, chat template: copies, so they outlive nothing but the model. */
static int s_load_strings(coli_model *cm, const gguf_file *f, const char *path) {
    gguf_str s;
    if (gguf_find_key(f, "general.name") >= 0 && gguf_get_str(f, "general.name", &s) == 0) {
        cm->name = s_strdup(s.ptr, (size_t)s.len);
    } else {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        cm->name = s_strdup(base, strlen(base));
    }
    if (gguf_find_key(f, "tokenizer.chat_template") >= 0 && gguf_get_str(f, "tokenizer.chat_template", &s) == 0 &&
        !(cm->chat_template = s_strdup(s.ptr, (size_t)s.len)))
        return coli_fail(COLI_ENOMEM, "model: out of memory");
    return cm->name ? 0 : coli_fail(COLI_ENOMEM, "model: out of memory");
}

/* vocab_only: the tokenizer of any GGUF that carries one, whatever its
 * architecture and tensors (as llama.cpp's vocab_only load). */
static int s_vocab_setup(coli_model *cm, const char *path) {
    gguf_str s = {0};
    int rc = gguf_open(path, &cm->vocab_file);
    if (rc < 0) return rc;
    if ((rc = coli_tokenizer_new(cm->vocab_file, &cm->tok)) < 0) return coli_fail_prefix(rc, "%s", path);
    if (gguf_find_key(cm->vocab_file, "general.architecture") >= 0 &&
        (rc = gguf_get_str(cm->vocab_file, "general.architecture", &s)) < 0)
        return coli_fail_prefix(rc, "%s", path);
    if (!(cm->arch = s_strdup(s.ptr ? s.ptr : "", (size_t)s.len)))
        return coli_fail(COLI_ENOMEM, "model: out of memory");
    return s_load_strings(cm, cm->vocab_file, path);
}

/* Fill the page tables of what this process computes from, in the
 * background: the dense weights, and the experts no worker or host holds
 * (moe_exec_prefault_ranges): a host's experts stay out of our memory. */
static int s_prefault(coli_model *cm) {
    coli_byte_range *r = NULL;
    int n = 0;
    const coli_byte_range whole = {gguf_base(cm->m->gguf), gguf_size(cm->m->gguf)};
    if (!cm->moe) {
        cm->prefault = coli_prefault_start(&whole, 1);
        return 0;
    }
    int rc = moe_exec_prefault_ranges(cm->moe, cm->m->gguf, cm->m->hp.n_layer, cm->m->hp.n_expert, &r, &n);
    if (rc == 0) cm->prefault = coli_prefault_start(r, n);
    free(r);
    return rc;
}

static int s_model_setup(coli_model *cm, const char *path, const coli_model_params *p) {
    int rc;
    if (p->vocab_only) return s_vocab_setup(cm, path);
    if ((rc = model_open(path, &cm->m)) < 0) return rc;
    if ((rc = coli_tokenizer_new(cm->m->gguf, &cm->tok)) < 0) return coli_fail_prefix(rc, "%s", path);
    if (coli_tokenizer_n_vocab(cm->tok) != cm->m->hp.n_vocab)
        return coli_fail(COLI_EFORMAT, "%s: vocabulary has %d tokens but token_embd.weight has %d rows", path,
                         coli_tokenizer_n_vocab(cm->tok), cm->m->hp.n_vocab);
    if ((rc = s_load_strings(cm, cm->m->gguf, path)) < 0) return rc;
    cm->n_ctx = cm->m->hp.n_ctx_train;
    if (p->n_ctx_max > 0 && p->n_ctx_max < cm->n_ctx) cm->n_ctx = p->n_ctx_max;
    if (!(cm->pool = coli_pool_new(p->n_threads))) return COLI_ENOMEM;
    cm->n_threads = coli_pool_size(cm->pool);
    /* the environment, read once here, and what the program set in p over it */
    coli_settings *set = malloc(sizeof *set); /* ~30 KiB (paths); the executor copies it */
    if (!set) return coli_fail(COLI_ENOMEM, "model: out of memory");
    coli_settings_load(set, p);
    rc = s_start_experts(cm, path, p, set);
    if (rc == 0 && set->prefault) rc = s_prefault(cm);
    free(set);
    return rc;
}

int coli_model_load(const char *path, const coli_model_params *p, coli_model **out) {
    coli_model_params defaults;
    if (!out) return coli_fail(COLI_EINVAL, "coli_model_load: out is NULL");
    *out = NULL;
    if (!path || !*path) return coli_fail(COLI_EINVAL, "coli_model_load: path is NULL or empty");
    if (!p) {
        coli_model_default_params(&defaults);
        p = &defaults;
    }
    if (p->n_threads < 0 || p->n_ctx_max < 0)
        return coli_fail(COLI_EINVAL, "coli_model_load: n_threads %d / n_ctx_max %d must be >= 0", p->n_threads,
                         p->n_ctx_max);
    const double t0 = coli_now_s();
    coli_model *cm = calloc(1, sizeof *cm);
    if (!cm) return coli_fail(COLI_ENOMEM, "coli_model_load: out of memory");
    cm->kv_f16 = p->kv_f16 ? 1 : 0;
    cm->verbose = p->verbose;
    if (p->stats_json_path && !(cm->stats_json_path = s_strdup(p->stats_json_path, strlen(p->stats_json_path)))) {
        free(cm);
        return coli_fail(COLI_ENOMEM, "coli_model_load: out of memory");
    }
    int rc = s_model_setup(cm, path, p);
    if (rc < 0) {
        coli_model_free(&cm);
        return rc;
    }
    cm->load_seconds = coli_now_s() - t0;
    if (cm->verbose && !cm->m)
        fprintf(stderr, "colibri: loaded the vocabulary of %s (%d tokens) in %.2f s\n", cm->name,
                coli_tokenizer_n_vocab(cm->tok), cm->load_seconds);
    else if (cm->verbose)
        fprintf(stderr, "colibri: loaded %s (%s, %d layers, %d experts) in %.2f s, %d threads\n", cm->name,
                cm->m->hp.arch_name, cm->m->hp.n_layer, cm->m->hp.n_expert, cm->load_seconds, cm->n_threads);
    *out = cm;
    return 0;
}

/* stats_json_path: the run's stats, written when the model is freed; a
 * file that cannot be written is one line on stderr (free cannot fail). */
static void s_write_stats_file(const coli_model *cm) {
    char *json = NULL;
    if (coli_model_stats_json(cm, &json) < 0) return;
    if (coli_outfile_write_line("stats file", cm->stats_json_path, json, 0) != 0)
        fprintf(stderr, "colibri: %s\n", coli_last_error());
    free(json);
}

void coli_model_free(coli_model **pm) {
    if (!pm || !*pm) return;
    coli_model *cm = *pm;
    if (cm->stats_json_path && cm->m) s_write_stats_file(cm);
    if (cm->heat_save && coli_model_heat_save(cm, NULL) != 0) fprintf(stderr, "colibri: %s\n", coli_last_error());
    if (route_sink_trace(&cm->route, NULL) != 0) fprintf(stderr, "colibri: %s\n", coli_last_error());
    heat_free(&cm->route.heat);
    free(cm->heat_path);
    if (cm->moe) cm->moe->destroy(cm->moe);
    coli_pool_destroy(&cm->pool);
    coli_tokenizer_free(&cm->tok);
    coli_prefault_stop(&cm->prefault); /* before the mapping goes */
    model_close(&cm->m);
    gguf_close(&cm->vocab_file);
    free(cm->arch);
    free(cm->stats_json_path);
    free(cm->name);
    free(cm->chat_template);
    free(cm);
    *pm = NULL;
}

/* imatrix.h: the mapping the forward pass reads weights from (NULL for a
 * vocab-only model) */
const gguf_file *coli_model_gguf(const coli_model *cm) { return cm && cm->m ? cm->m->gguf : NULL; }

void coli_model_get_info(const coli_model *cm, coli_model_info *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!cm) return;
    out->bos_id = coli_tokenizer_bos(cm->tok);
    out->eos_id = coli_tokenizer_eos(cm->tok);
    out->add_bos = coli_tokenizer_add_bos(cm->tok);
    out->chat_template = cm->chat_template;
    out->load_seconds = cm->load_seconds;
    out->name = cm->name;
    if (!cm->m) { /* vocab_only */
        out->arch = cm->arch;
        out->n_vocab = coli_tokenizer_n_vocab(cm->tok);
        return;
    }
    const model_hparams *hp = &cm->m->hp;
    out->arch = hp->arch_name;
    out->n_params = cm->m->n_params;
    out->n_vocab = hp->n_vocab;
    out->n_ctx = cm->n_ctx;
    out->n_embd = hp->n_embd;
    out->n_layer = hp->n_layer;
    out->n_head = hp->n_head;
    out->n_head_kv = hp->n_head_kv;
    out->n_expert = hp->n_expert;
    out->n_expert_used = hp->n_expert_used;
    kv_shape shape;
    model_kv_shape(cm->m, cm->kv_f16, &shape);
    kv_shape_bytes(&shape, &out->state_bytes_per_token, &out->state_bytes_per_seq);
}

// ---------------------------------------------------------------------------
// scheduler visibility

int coli_model_stats_json(const coli_model *cm, char **json) {
    if (!cm || !json) return coli_fail(COLI_EINVAL, "coli_model_stats_json: NULL argument");
    *json = NULL;
    if (cm->moe && cm->moe->stats_json) return cm->moe->stats_json(cm->moe, json);
    const char *kind = cm->moe ? "inproc" : "none";
    char buf[128];
    int n = snprintf(buf, sizeof buf, "{\"executor\":\"%s\",\"n_layer\":%d,\"n_expert\":%d}", kind,
                     cm->m ? cm->m->hp.n_layer : 0, cm->m ? cm->m->hp.n_expert : 0);
    if (!(*json = s_strdup(buf, (size_t)n))) return coli_fail(COLI_ENOMEM, "stats: out of memory");
    return 0;
}

int coli_model_stats_text(const coli_model *cm, char **text) {
    if (!cm || !text) return coli_fail(COLI_EINVAL, "coli_model_stats_text: NULL argument");
    *text = NULL;
    if (cm->moe && cm->moe->stats_text) return cm->moe->stats_text(cm->moe, text);
    const char *line = cm->moe ? "experts: in-process\n" : "experts: none (dense model)\n";
    if (!(*text = s_strdup(line, strlen(line)))) return coli_fail(COLI_ENOMEM, "stats: out of memory");
    return 0;
}

// ---------------------------------------------------------------------------
// routing: traces and heat (route_obs.c, heat.c)

int coli_dump_routing(coli_model *cm, const char *path) {
    if (!cm) return coli_fail(COLI_EINVAL, "coli_dump_routing: model is NULL");
    return route_sink_trace(&cm->route, path);
}

int coli_model_heat_save(coli_model *cm, const char *path) {
    if (!cm) return coli_fail(COLI_EINVAL, "coli_model_heat_save: model is NULL");
    if (!path && cm->heat_path && !cm->heat_save)
        return coli_fail(COLI_EINVAL, "heat file %s was refused at load: not overwritten", cm->heat_path);
    if (!path) path = cm->heat_path;
    if (!path || !*path) return coli_fail(COLI_EINVAL, "coli_model_heat_save: no path (and no heat_path at load)");
    if (!cm->route.heat.count) {
        if (!cm->m || !cm->m->hp.n_expert)
            return coli_fail(COLI_EINVAL, "coli_model_heat_save: %s has no routed experts", cm->name);
        int rc = heat_init(&cm->route.heat, cm->m->hp.n_layer, cm->m->hp.n_expert); /* count from now on */
        if (rc) return rc;
    }
    return heat_write(&cm->route.heat, path);
}

int coli_model_heat_counts(const coli_model *cm, uint64_t *counts, size_t cap, int *n_layer, int *n_expert) {
    if (!cm || !n_layer || !n_expert) return coli_fail(COLI_EINVAL, "coli_model_heat_counts: NULL argument");
    const heat_table *h = &cm->route.heat;
    *n_layer = h->count ? h->n_layer : 0;
    *n_expert = h->count ? h->n_expert : 0;
    size_t n = (size_t)*n_layer * (size_t)*n_expert;
    if (!counts || !n) return 0;
    if (cap < n) return coli_fail(COLI_ERANGE, "coli_model_heat_counts: room for %zu counts, %zu needed", cap, n);
    memcpy(counts, h->count, n * sizeof *counts);
    return 0;
}
