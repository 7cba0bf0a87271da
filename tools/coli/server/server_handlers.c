/*
 * server_handlers.c - what each endpoint answers: completions and chat
 * completions (the non-streaming reply; streaming is server_sse.c),
 * /v1/models, /health (truthful: "degraded", with the reason, while any
 * worker is not up or most of its recent batches fail) and
 * /metrics.
 */
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server.h"

cJSON *response_base(server *s, const job *j, const char *object) {
    cJSON *o = cJSON_CreateObject();
    char id[64];
    snprintf(id, sizeof id, "%s-%s", j->req.chat ? "chatcmpl" : "cmpl", j->id);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddNullToObject(o, "system_fingerprint");
    return o;
}

cJSON *usage_json(const job *j) {
    int n_gen = 0; /* every answer's tokens (n > 1: the next_choice chain, all finished) */
    for (const job *k = j; k; k = k->next_choice) n_gen += k->n_gen;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", j->req.n_ids);
    cJSON_AddNumberToObject(u, "completion_tokens", n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", j->req.n_ids + n_gen);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", j->n_cached);
    return u;
}

/* Answer index of a finished job, as one entry of "choices" (j->mu held by the caller). */
static cJSON *s_choice_json(server *s, const job *j, int index) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    if (j->req.chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        const char *raw = j->raw ? j->raw : "";
        const size_t len = j->raw ? j->raw_len : 0;
        size_t sent_r = 0, sent_c = 0;
        reasoning_delta part = {NULL, 0, strndup(raw, len), len, len}; /* reasoning_format none: all of it */
        if (j->req.reasoning == REASONING_DEEPSEEK) {
            free(part.content);
            part = reasoning_next(j->req.syntax, raw, len, 1, &sent_r, &sent_c);
        }
        cJSON_AddStringToObject(m, "content", part.content ? part.content : "");
        if (part.reasoning_len) cJSON_AddStringToObject(m, "reasoning_content", part.reasoning);
        reasoning_delta_free(&part);
    } else {
        cJSON_AddStringToObject(c, "text", j->raw ? j->raw : "");
    }
    if (j->req.sp.logprobs)
        cJSON_AddItemToObject(c, "logprobs", logprobs_json(s, j, j->lp, j->n_lp));
    else
        cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", j->finish_reason);
    return c;
}

/* The whole answer of finished jobs: first and its next_choice chain, one
 * choice each; usage counts the prompt once and every answer's tokens. */
static char *s_final_json(server *s, job *first) {
    cJSON *o = response_base(s, first, first->req.chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    int index = 0;
    for (job *j = first; j; j = j->next_choice) {
        pthread_mutex_lock(&j->mu);
        cJSON_AddItemToArray(choices, s_choice_json(s, j, index++));
        pthread_mutex_unlock(&j->mu);
    }
    cJSON_AddItemToObject(o, "usage", usage_json(first));
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

/* Reply for a request the queue did not take. */
static int s_submit_error(server *s, struct MHD_Connection *c, int ep, int rc, int n) {
    if (rc == 429)
        return http_reply_error(s, c, ep, 429, "rate_limit_error", "queue_full", NULL,
                                "server busy: %d answer%s wanted, more than the free places of %d slots and %d "
                                "waiting answers (the limit); retry later",
                                n, n == 1 ? "" : "s", s->cfg.n_slots, s->cfg.queue_max);
    return http_reply_error(s, c, ep, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
}

/* The first job of the chain that is not done, with its mu held; NULL if all are. */
static job *s_running_choice(job *first) {
    for (job *j = first; j; j = j->next_choice) {
        pthread_mutex_lock(&j->mu);
        if (j->state != JOB_DONE) return j;
        pthread_mutex_unlock(&j->mu);
    }
    return NULL;
}

int completion_reply(server *s, struct MHD_Connection *c, job *first) {
    int ep = first->req.chat ? EP_CHAT : EP_COMPLETIONS;
    job *j = s_running_choice(first);
    if (j) { /* not yet: sleep until that job's slot thread wakes us (job_wake), then look again */
        j->conn = c;
        http_suspend(c);
        pthread_mutex_unlock(&j->mu);
        return MHD_YES;
    }
    if (atomic_load(&first->cancel) && client_gone(first->client_fd)) return MHD_NO; /* nobody to answer */
    for (j = first; j; j = j->next_choice) { /* any answer that failed fails the request */
        pthread_mutex_lock(&j->mu);
        int err = j->error_http;
        const char *code = j->error_code;
        char msg[sizeof j->error];
        memcpy(msg, j->error, sizeof msg);
        pthread_mutex_unlock(&j->mu);
        if (err) return http_reply_error(s, c, ep, err, "server_error", code, NULL, "%s", msg);
    }
    char *text = s_final_json(s, first);
    if (!text) return http_reply_error(s, c, ep, 500, "server_error", NULL, NULL, "out of memory for the reply");
    return http_reply_json(c, 200, text);
}

/* n > 1: the other answers, each parsed from the same body as its own job
 * (its own grammar state, logit_bias, prompt tokens) with the seed moved by
 * its index, chained behind first (queued with it: server_submit). Returns 0,
 * or 500: the body parsed once already, a second failure is ours (out of memory). */
static int s_more_choices(server *s, struct MHD_Connection *c, job *first, const char *body, size_t len) {
    job *last = first;
    for (int i = 1; i < first->req.n_choices; i++) {
        job *j = job_new(http_connection_fd(c));
        char err[1024];
        const char *param = NULL;
        int rc = j ? openai_parse(s, body, len, first->req.chat, &j->req, err, sizeof err, &param) : 500;
        if (!rc) rc = openai_prepare_tokens(s, &j->req, err, sizeof err, &param);
        if (rc) {
            job_release(j);
            return 500;
        }
        j->req.sp.seed = first->req.sp.seed + (uint64_t)i;
        j->req.cache_domain = first->req.cache_domain;
        last->next_choice = j; /* the chain holds it now */
        last = j;
    }
    return 0;
}

/* Parse the body into j (and its other answers): 0, or a reply sent. */
static int s_prepare(server *s, struct MHD_Connection *c, int ep, job *j, const char *body, size_t len, int *ret) {
    char err[1024];
    const char *param = NULL;
    int rc = openai_parse(s, body, len, ep == EP_CHAT, &j->req, err, sizeof err, &param);
    if (!rc) rc = openai_prepare_tokens(s, &j->req, err, sizeof err, &param);
    const int most = s->cfg.n_slots + s->cfg.queue_max;
    if (!rc && j->req.n_choices > most) { /* it could never be queued: 429 would say retry */
        rc = 400;
        param = "n";
        snprintf(err, sizeof err, "n: %d answers, more than this server holds at once (%d: --parallel + --queue)",
                 j->req.n_choices, most);
    }
    if (rc) {
        *ret = http_reply_error(s, c, ep, rc, rc >= 500 ? "server_error" : "invalid_request_error",
                                rc == 400 && strstr(err, "maximum context length") ? "context_length_exceeded" : NULL,
                                param, "%s", err);
        return rc;
    }
    j->req.cache_domain = server_cache_domain(s, http_current_key(), j->req.cache_salt);
    if (j->req.n_choices > 1 && s_more_choices(s, c, j, body, len)) {
        *ret = http_reply_error(s, c, ep, 500, "server_error", NULL, NULL, "out of memory for %d answers",
                                j->req.n_choices);
        return 500;
    }
    return 0;
}

int handle_completion(server *s, struct MHD_Connection *c, int chat, const char *body, size_t len) {
    int ep = chat ? EP_CHAT : EP_COMPLETIONS;
    job *j = job_new(http_connection_fd(c));
    if (!j) return http_reply_error(s, c, ep, 500, "server_error", NULL, NULL, "out of memory");
    int ret = 0, rc;
    if (s_prepare(s, c, ep, j, body, len, &ret) == 0) {
        if ((rc = server_submit(s, j))) {
            ret = s_submit_error(s, c, ep, rc, j->req.n_choices);
        } else if (j->req.stream) {
            ret = sse_reply(s, c, j);
        } else {
            http_set_job(j); /* the request keeps it across its suspension */
            ret = completion_reply(s, c, j);
        }
    }
    job_release(j);
    return ret;
}

int handle_models(server *s, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject(), *data = NULL;
    cJSON_AddStringToObject(o, "object", "list");
    data = cJSON_AddArrayToObject(o, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToArray(data, m);
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "colibri");
    cJSON_AddStringToObject(m, "architecture", s->info.arch);
    cJSON_AddNumberToObject(m, "context_length", s->cfg.n_ctx > 0 ? s->cfg.n_ctx : s->info.n_ctx);
    cJSON_AddStringToObject(m, "chat_template", chat_family_name(s->family));
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return http_reply_json(c, 200, text);
}

/* Why worker w makes the server degraded (into why), or 0 if it does not:
 * not up, or up but most of its recent batches (at least 4) failed. */
static int s_worker_trouble(const cJSON *w, const char *status, char *why, size_t cap) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(w, "id"), *dev = cJSON_GetObjectItemCaseSensitive(w, "device");
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(w, "reason");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(w, "recent_batches");
    const cJSON *failed = cJSON_GetObjectItemCaseSensitive(w, "recent_failed_batches");
    int wid = cJSON_IsNumber(id) ? id->valueint : -1;
    const char *dname = cJSON_IsString(dev) ? dev->valuestring : "?";
    if (strcmp(status, "up") != 0) {
        snprintf(why, cap, "worker %d (%s) is %s%s%s", wid, dname, status,
                 cJSON_IsString(reason) && *reason->valuestring ? ": " : "",
                 cJSON_IsString(reason) ? reason->valuestring : "");
        return 1;
    }
    if (cJSON_IsNumber(n) && cJSON_IsNumber(failed) && n->valueint >= 4 && 2 * failed->valueint > n->valueint) {
        snprintf(why, cap, "worker %d (%s): %d of its last %d batches failed", wid, dname, failed->valueint,
                 n->valueint);
        return 1;
    }
    return 0;
}

/* Workers from the stats into the health body; *all_up: 0 if any is in
 * trouble (s_worker_trouble), the first such reason in why. */
static void s_health_workers(cJSON *out, const char *stats_json, int *all_up, char *why, size_t cap) {
    cJSON *stats = stats_json ? cJSON_Parse(stats_json) : NULL, *w;
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(stats, "executor");
    cJSON_AddStringToObject(out, "executor", cJSON_IsString(ex) ? ex->valuestring : "unknown");
    cJSON *list = cJSON_AddArrayToObject(out, "workers");
    *all_up = stats != NULL;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(stats, "workers")) {
        const cJSON *status = cJSON_GetObjectItemCaseSensitive(w, "status");
        const char *st = cJSON_IsString(status) ? status->valuestring : "unknown";
        char trouble[320];
        if (s_worker_trouble(w, st, trouble, sizeof trouble) && (*all_up || !*why)) {
            snprintf(why, cap, "%s", trouble);
            *all_up = 0;
        }
        cJSON *e = cJSON_CreateObject();
        const char *keys[] = {"id",     "device",   "plugin",         "status",
                              "reason", "restarts", "recent_batches", "recent_failed_batches"};
        for (int k = 0; k < 8; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(w, keys[k]);
            if (v) cJSON_AddItemToObject(e, keys[k], cJSON_Duplicate(v, 1));
        }
        cJSON_AddItemToArray(list, e);
    }
    const cJSON *ft = cJSON_GetObjectItemCaseSensitive(stats, "fallbacks_total");
    cJSON_AddNumberToObject(out, "fallbacks_total", cJSON_IsNumber(ft) ? ft->valuedouble : 0);
    const cJSON *fb = cJSON_GetObjectItemCaseSensitive(stats, "fallbacks");
    cJSON_AddItemToObject(out, "fallbacks", cJSON_IsArray(fb) ? cJSON_Duplicate(fb, 1) : cJSON_CreateArray());
    cJSON_Delete(stats);
}

int handle_health(server *s, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    int status = 503;
    if (!atomic_load(&s->ready)) {
        cJSON_AddStringToObject(o, "status", atomic_load(&s->stopping) ? "stopping" : "loading");
    } else {
        char *stats = server_stats_fresh(s), why[320] = "";
        int all_up = 0;
        cJSON_AddStringToObject(o, "status", "ok"); /* replaced below when not all is well */
        cJSON_AddStringToObject(o, "model", s->model_id);
        s_health_workers(o, stats, &all_up, why, sizeof why);
        free(stats);
        if (!all_up) {
            cJSON_ReplaceItemInObject(o, "status", cJSON_CreateString("degraded"));
            cJSON_AddStringToObject(o, "reason", *why ? why : "no executor stats");
        }
        int waiting = 0, active = 0;
        server_queue_gauges(s, &waiting, &active);
        cJSON_AddNumberToObject(o, "slots", s->cfg.n_slots);
        cJSON_AddNumberToObject(o, "slots_busy", active);
        cJSON_AddNumberToObject(o, "queue_depth", waiting);
        status = 200;
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return http_reply_json(c, status, text);
}

int handle_metrics(server *s, struct MHD_Connection *c) {
    char *text = metrics_render(s);
    if (!text) return http_reply_error(s, c, EP_METRICS, 500, "server_error", NULL, NULL, "out of memory for /metrics");
    return http_reply_text(c, 200, text, "text/plain; version=0.0.4; charset=utf-8");
}
