/*
 * server.c - a server's life: new, listen, run, stop, free (server.h). The
 * pieces it starts keep all their state in the server object, so a process
 * may run several servers side by side, each over its own model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server.h"

void server_config_defaults(server_config *cfg) {
    *cfg = (server_config){.host = "127.0.0.1",
                           .port = 8080,
                           .n_slots = 4,
                           .queue_max = 64,
                           .max_connections = 0, /* conns_plan: from the file-descriptor limit */
                           .max_conn_per_client = 256,
                           .request_timeout_s = 30,
                           .shutdown_grace_s = 30,
                           .max_body = 1 << 20,
                           .prefix_cache_bytes = (size_t)256 << 20,
                           .prefix_block = 16,
                           .prefill_chunk = 64,
                           .chat_thinking = CHAT_THINKING_DEFAULT,
                           .chat_effort = CHAT_EFFORT_DEFAULT};
    coli_sampling_default_params(&cfg->sampling);
    cfg->sampling.temperature = 1.0f; /* OpenAI's defaults: the full distribution */
    cfg->sampling.top_k = 0;
    cfg->sampling.top_p = 1.0f;
    cfg->sampling.seed = UINT64_MAX; /* a fresh seed per request unless --seed */
}

server *server_new(const server_config *cfg) {
    server *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "coli serve: out of memory\n");
        return NULL;
    }
    s->cfg = *cfg;
    metrics_init(&s->metrics);
    server_sync_init(s);
    conns_init(&s->conns);
    http_init(s);
    return s;
}

int server_listen(server *s) { return s->http.daemon ? 0 : http_start(s); }

int server_port(const server *s) { return s->http.daemon ? s->http.port : 0; }

/* Text of a special token ("<s>"), "" if the vocabulary has none; malloc'd. */
static char *s_token_string(const coli_model *m, int32_t id) {
    const char *t = id >= 0 ? coli_token_text(m, id) : NULL;
    return strdup(t ? t : "");
}

/* What the server knows of its model: names, chat template, BOS/EOS text, context. */
static int s_attach(server *s, coli_model *model, const char *model_path) {
    s->model = model;
    coli_model_get_info(model, &s->info);
    s->model_id = s->cfg.alias ? s->cfg.alias : s->info.name;
    s->model_path = model_path;
    s->family = chat_template_pick(s->cfg.chat_template, &s->info, &s->family_source);
    char err[160];
    if (chat_thinking_check(s->family, s->cfg.chat_thinking, err, sizeof err) ||
        chat_effort_check(s->family, s->cfg.chat_effort, err, sizeof err)) {
        fprintf(stderr, "coli serve: %s: %s\n",
                s->cfg.chat_thinking != CHAT_THINKING_DEFAULT ? "--chat-template-kwargs" : "--reasoning-effort", err);
        return SERVER_FAIL;
    }
    s->bos_text = s_token_string(model, s->info.bos_id);
    s->eos_text = s_token_string(model, s->info.eos_id);
    if (!s->bos_text || !s->eos_text) {
        fprintf(stderr, "coli serve: out of memory\n");
        return SERVER_FAIL;
    }
    if (s->cfg.n_ctx <= 0) s->cfg.n_ctx = s->info.n_ctx;
    return 0;
}

int server_run(server *s, coli_model *model, const char *model_path) {
    int rc = server_listen(s);
    if (!rc) rc = s_attach(s, model, model_path);
    if (!rc) rc = server_slots_start(s);
    if (!rc) atomic_store(&s->ready, 1);
    return rc;
}

void server_stop(server *s) {
    atomic_store(&s->ready, 0);
    http_quiesce(s);
    int finished = server_drain(s, s->cfg.shutdown_grace_s);
    server_slots_stop(s);
    if (!finished) {
        printf("coli serve: requests still running after the %.1f s grace period were stopped\n",
               s->cfg.shutdown_grace_s);
        fflush(stdout);
    }
    http_stop(s, 5.0);
}

void server_free(server *s) {
    if (!s) return;
    server_stop(s);
    server_slots_free(s);
    free(s->bos_text);
    free(s->eos_text);
    conns_destroy(&s->conns);
    metrics_destroy(&s->metrics);
    free(s);
}
