/*
 * server_sse.c - streamed completions: text/event-stream with one
 * `data: {chunk}` event per piece of new text, a last chunk with the
 * finish_reason, a usage chunk when stream_options.include_usage asks for
 * it, and `data: [DONE]`. libmicrohttpd pulls bytes through s_read on a
 * pool thread; with nothing new to send, s_read suspends the connection and
 * the slot thread resumes it (job_wake). When the connection goes away,
 * s_free cancels the generation. A stream the shutdown cuts ends with an
 * error event (code "shutting_down"), never with a finish_reason.
 */
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server.h"
#include "core/strbuf.h"

typedef struct sse_stream {
    server *srv;
    job *j;
    struct MHD_Connection *conn; /* suspended while the job has nothing new */
    coli_strbuf pending;         /* formatted events not yet handed to the connection */
    size_t pending_off;          /* bytes of pending already handed over */
    size_t sent;                 /* bytes of j->raw already sent (with reasoning_format: covered) */
    size_t reasoning_sent;       /* reasoning_format deepseek: bytes of each part already sent */
    size_t content_sent;
    int lp_sent;   /* entries of j->lp already sent */
    int role_sent; /* chat: the first chunk carries the role */
    int finished;  /* [DONE] is in pending */
    int oom;       /* cJSON could not print an event (a failed append: pending.failed) */
} sse_stream;

static void s_put(sse_stream *st, const char *text) { coli_strbuf_appendf(&st->pending, "%s", text); }

/* "data: <json>\n\n", consuming o. */
static void s_event(sse_stream *st, cJSON *o) {
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) {
        st->oom = 1;
        return;
    }
    s_put(st, "data: ");
    s_put(st, text);
    s_put(st, "\n\n");
    free(text);
}

/* A chunk with new text (or the role, or the finish reason): the answer's
 * text, and with reasoning_format deepseek the reasoning's, reasoning_len
 * bytes (0: no reasoning_content field); raw_end: how far into j->raw the
 * chunk reaches (for the log-probabilities it completes). */
static void s_chunk(sse_stream *st, const char *reasoning, size_t reasoning_len, const char *text, size_t len,
                    size_t raw_end, const char *finish) {
    const job *j = st->j;
    cJSON *o = response_base(st->srv, j, j->req.chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    char *copy = strndup(text ? text : "", len);
    if (j->req.chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (!st->role_sent) cJSON_AddStringToObject(d, "role", "assistant");
        if (reasoning_len) {
            char *r = strndup(reasoning, reasoning_len);
            cJSON_AddStringToObject(d, "reasoning_content", r ? r : "");
            free(r);
        }
        if ((!finish || !st->role_sent) && (len || !reasoning_len))
            cJSON_AddStringToObject(d, "content", copy ? copy : "");
        st->role_sent = 1;
    } else {
        cJSON_AddStringToObject(c, "text", copy ? copy : "");
    }
    free(copy);
    /* logprobs: the tokens whose text this chunk completes (at the end: all that are left) */
    int n_lp = st->lp_sent;
    while (n_lp < j->n_lp && (finish || j->lp[n_lp].end <= raw_end)) n_lp++;
    if (j->req.sp.logprobs && (n_lp > st->lp_sent || !finish))
        cJSON_AddItemToObject(c, "logprobs", logprobs_json(st->srv, j, j->lp + st->lp_sent, n_lp - st->lp_sent));
    else
        cJSON_AddNullToObject(c, "logprobs");
    st->lp_sent = n_lp;
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    if (j->req.include_usage) cJSON_AddNullToObject(o, "usage");
    s_event(st, o);
}

/* reasoning_format deepseek: what each part of raw[0..exposed) grew by since
 * the last chunk (reasoning_next: the split only grows). */
static void s_reasoning_chunk(sse_stream *st, int final) {
    const job *j = st->j;
    reasoning_delta d =
        reasoning_next(j->req.syntax, j->raw ? j->raw : "", j->exposed, final, &st->reasoning_sent, &st->content_sent);
    if (!d.reasoning) {
        st->oom = 1;
        return;
    }
    st->sent = j->exposed;
    if (d.reasoning_len || d.content_len)
        s_chunk(st, d.reasoning, d.reasoning_len, d.content, d.content_len, d.raw_end, NULL);
    reasoning_delta_free(&d);
}

/* The end: finish_reason chunk (or the error), usage, [DONE]. j->mu held. */
static void s_final(sse_stream *st) {
    const job *j = st->j;
    if (j->error_http) {
        cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "message", j->error);
        cJSON_AddStringToObject(e, "type", "server_error");
        cJSON_AddNullToObject(e, "param");
        if (j->error_code)
            cJSON_AddStringToObject(e, "code", j->error_code);
        else
            cJSON_AddNullToObject(e, "code");
        s_event(st, o);
    } else {
        s_chunk(st, "", 0, "", 0, j->exposed, j->finish_reason);
        if (j->req.include_usage) {
            cJSON *o = response_base(st->srv, j, j->req.chat ? "chat.completion.chunk" : "text_completion");
            cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToObject(o, "usage", usage_json(j));
            s_event(st, o);
        }
    }
    s_put(st, "data: [DONE]\n\n");
    st->finished = 1;
}

/* Turn what the job has into events; 1 if there is something to send. */
static int s_collect(sse_stream *st) {
    job *j = st->j;
    pthread_mutex_lock(&j->mu);
    if (!st->role_sent && j->req.chat) s_chunk(st, "", 0, "", 0, 0, NULL);
    if (j->req.chat && j->req.reasoning == REASONING_DEEPSEEK) {
        if (j->exposed > st->sent || j->state == JOB_DONE) s_reasoning_chunk(st, j->state == JOB_DONE);
    } else if (j->exposed > st->sent) {
        s_chunk(st, "", 0, j->raw + st->sent, j->exposed - st->sent, j->exposed, NULL);
        st->sent = j->exposed;
    }
    if (j->state == JOB_DONE) s_final(st);
    pthread_mutex_unlock(&j->mu);
    return st->pending.len > st->pending_off;
}

/* Suspend the connection unless the job changed since s_collect; 1 if suspended. */
static int s_sleep_until_change(sse_stream *st) {
    job *j = st->j;
    pthread_mutex_lock(&j->mu);
    int nothing_new = j->exposed == st->sent && j->state != JOB_DONE;
    if (nothing_new) {
        j->conn = st->conn;
        http_suspend(st->conn);
    }
    pthread_mutex_unlock(&j->mu);
    return nothing_new;
}

static ssize_t s_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse_stream *st = cls;
    while (st->pending_off >= st->pending.len) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        st->pending.len = st->pending_off = 0;
        if (s_collect(st)) break;
        if (st->oom || st->pending.failed) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (s_sleep_until_change(st)) return 0; /* resumed by job_wake, then called again */
    }
    size_t n = st->pending.len - st->pending_off;
    if (n > max) n = max;
    memcpy(buf, st->pending.s + st->pending_off, n);
    st->pending_off += n;
    return (ssize_t)n;
}

/* The connection is done with the stream (finished, or the client left). */
static void s_free(void *cls) {
    sse_stream *st = cls;
    atomic_store(&st->j->cancel, 1); /* a no-op when it already finished */
    job_release(st->j);
    free(st->pending.s);
    free(st);
}

int sse_reply(server *s, struct MHD_Connection *c, job *j) {
    sse_stream *st = calloc(1, sizeof *st);
    if (!st) {
        atomic_store(&j->cancel, 1);
        return http_reply_error(s, c, j->req.chat ? EP_CHAT : EP_COMPLETIONS, 500, "server_error", NULL, NULL,
                                "out of memory");
    }
    st->srv = s;
    st->j = j;
    st->conn = c;
    job_retain(j);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, s_read, st, s_free);
    if (!r) {
        s_free(st);
        return MHD_NO;
    }
    return http_reply_stream(c, r);
}
