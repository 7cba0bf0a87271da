/*
 * server.h - the pieces of `coli serve` and how they meet. The server is a
 * library (libcoli-server.a): every piece of its state lives in one server
 * object, so one process can run several, each on its own port over its own
 * model (not a shared one: the baton that keeps a model's calls from
 * overlapping, below, is the server's):
 *
 *   server *s = server_new(&cfg);   configuration copied, nothing started
 *   server_listen(s);               optional: HTTP up early, /health says "loading"
 *   server_run(s, model, path);     listening (if not yet), slots started, ready
 *   ...                             requests are served on the server's threads
 *   server_stop(s);                 stop accepting, drain (cfg.shutdown_grace_s), close
 *   server_free(s);                 everything but the model (the caller's)
 *
 *   server_http.c      libmicrohttpd daemon: routing, body limit, auth, JSON/error replies
 *   server_openai.c    OpenAI request bodies -> gen_request (cJSON), every check named
 *   server_handlers.c  /v1/completions, /v1/chat/completions (non-streaming), /v1/models, /health
 *   server_sse.c       the streaming replies (text/event-stream, data: [DONE])
 *   server_logprobs.c  per-token log-probabilities in OpenAI's chat and completions shapes
 *   server_tools.c     /tokenize, /detokenize, /props
 *   server_dashboard.c GET / (/dashboard): the live page (dashboard.html, built in); /dashboard.json
 *   server.c           the lifecycle above
 *   server_grammar.c   response_format: a JSON (schema) state machine masking the logits
 *   server_reasoning.c reasoning_format deepseek: "<think>..</think>" apart as reasoning_content
 *   server_metrics.c   counters, histograms and the Prometheus text, per worker from the stats JSON
 *   server_slots.c     request queue (answers counted, requests in turn), slot threads,
 *                      the compute baton, stats snapshots,
 *                      the prefix cache (a request first restores the longest cached
 *                      prefix of its prompt into its slot's context, and leaves its
 *                      prompt + answer there for the next turn)
 *   server_conns.c     per-connection registry: the connection limit (sized from the descriptor
 *                      limit; the oldest slow one makes room) and the head-and-body deadline
 *   server_utf8.c      answer text stays valid UTF-8 (held partial characters, U+FFFD)
 *
 * Concurrency (why it looks like this): a coli_model owns one thread pool and one
 * expert executor, shared by its contexts, and coordinator/api.c says calls on
 * contexts of one model must not overlap. So every library call that computes
 * or touches the executor runs while holding the model's "baton", a fair
 * (ticket) lock. Each of --parallel slot threads owns a coli_context (its own
 * KV cache) and runs coli_generate for one request at a time. The contexts
 * share one coli_batch (continuous batching, include/colibri.h): each step
 * is one forward pass over the next token of every generating request,
 * taken under the baton; a new request's prompt is evaluated in chunks
 * (--prefill-chunk), each under the baton, between the steps. With
 * --no-batching each context takes the baton for each step and prompt part
 * (coli_context_set_compute_lock), so active requests take turns one token
 * each. Either way state copies are made without it. The slot threads live as long as the server. Which
 * thread notices a crash and forks the replacement worker does not matter:
 * a worker is tied to the coordinator process by its lifeline pipe, not to
 * the forking thread (coordinator/sched/supervisor.c). Tokenizing is read-only and runs in the HTTP threads without the baton.
 *
 * The chat templates and the tokenize helpers are tools/coli/chat/'s, shared
 * with `coli run` and `coli chat`; this folder includes nothing of tools/coli/.
 */
#ifndef COLI_CLI_SERVER_H
#define COLI_CLI_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "colibri.h"
#include "tools/coli/chat/chat_template.h"
#include "tools/coli/chat/tokenize.h"

struct cJSON;
struct MHD_Connection;
struct MHD_Response;
enum MHD_ConnectionNotificationCode;

/* What the functions that can fail return: 0, SERVER_FAIL (a runtime error,
 * printed) or SERVER_USAGE (a configuration that cannot work): the exit
 * statuses of coli serve. */
#define SERVER_FAIL 1
#define SERVER_USAGE 2

#define SERVE_MAX_STOP 4
#define SERVE_MAX_CHOICES 16 /* n */

// ---------------------------------------------------------------------------
// metrics (server_metrics.c)

#define METRICS_N_BUCKETS 14

typedef struct histogram {
    uint64_t counts[METRICS_N_BUCKETS]; /* per bucket, not cumulative; last is +Inf */
    uint64_t n;
    double sum; /* seconds */
} histogram;

enum {
    EP_COMPLETIONS,
    EP_CHAT,
    EP_MODELS,
    EP_HEALTH,
    EP_METRICS,
    EP_TOKENIZE,
    EP_DETOKENIZE,
    EP_PROPS,
    EP_DASHBOARD,
    EP_DASHBOARD_JSON,
    EP_OTHER,
    EP_COUNT
};
#define METRICS_MAX_CODES 12

typedef struct server_metrics {
    pthread_mutex_t mu;
    struct {
        int code;
        uint64_t n;
    } requests[EP_COUNT][METRICS_MAX_CODES];
    uint64_t prompt_tokens, generated_tokens, cancelled, rejected_queue_full;
    histogram ttft, per_token, queue_wait;
} server_metrics;

void metrics_init(server_metrics *m);
void metrics_destroy(server_metrics *m);
void metrics_count_request(server_metrics *m, int endpoint, int http_code);
void metrics_observe(server_metrics *m, histogram *h, double seconds);
void metrics_add_tokens(server_metrics *m, int prompt, int generated);
void metrics_count_cancelled(server_metrics *m);
int metrics_endpoint(const char *url);

// ---------------------------------------------------------------------------
// requests and jobs

/* One validated request, ready to generate. */
typedef struct gen_request {
    int chat; /* 1: /v1/chat/completions */
    int stream, include_usage;
    coli_sampling_params sp; /* n_predict = max_tokens */
    int max_tokens_given;    /* 0: fill the context (chat) or 16 (completions) */
    char *stop[SERVE_MAX_STOP];
    int n_stop;
    char *prompt;          /* text (chat: rendered template); NULL if ids given */
    coli_text_span *plain; /* chat: the messages' text in prompt, tokenized without special tokens */
    int n_plain;
    int32_t *ids; /* prompt tokens once tokenized */
    int n_ids;
    int add_special;              /* BOS by the vocabulary (completions) or by the template text (chat) */
    struct json_grammar *grammar; /* response_format json_object / json_schema; NULL: free text */
    int reasoning;                /* chat: REASONING_NONE or REASONING_DEEPSEEK (reasoning_format) */
    int syntax;                   /* chat: how the answer carries its reasoning (chat_syntax) */
    int n_choices;                /* n: answers wanted (each its own job, server_handlers.c) */
    int32_t *bias_id;             /* logit_bias: n_bias token ids and what is added to their logits */
    float *bias;                  /* (-INFINITY for -100: a ban) */
    int n_bias;
    char *cache_salt;      /* cache_salt: NULL if not given */
    uint64_t cache_domain; /* the prefix cache domain: (API key, cache_salt), server_cache_domain */
} gen_request;

/* Longest cache_salt a request may give, in bytes. */
#define SERVE_MAX_CACHE_SALT 256

/* Most logit_bias entries a request may carry. */
#define SERVE_MAX_LOGIT_BIAS 1024

/* One generated token's log-probabilities and where its text lies in job.raw. */
typedef struct tok_logprob {
    coli_logprob chosen;
    int n_top;
    coli_logprob top[COLI_MAX_TOP_LOGPROBS];
    size_t start, end; /* raw[start..end): the text that became complete with it */
} tok_logprob;

void gen_request_free(gen_request *r);

// ---------------------------------------------------------------------------
// reasoning_format (server_reasoning.c)

enum {
    REASONING_NONE = 0,    /* the answer as generated, thought and all, in content */
    REASONING_DEEPSEEK = 1 /* "<think>R</think>A": R in reasoning_content, A in content */
};

/* The two parts of an answer's text t[0..len): t[reasoning_start..+reasoning_len)
 * and t[content_start..+content_len). final 0 (still generating): only what
 * later text cannot change (each part only grows as text is added). */
typedef struct reasoning_split {
    size_t reasoning_start, reasoning_len, content_start, content_len;
} reasoning_split;
reasoning_split reasoning_split_text(const char *t, size_t len, int final);
/* What a stream sends next for an answer t[0..len) whose reasoning is marked
 * as syntax (chat_syntax): the bytes each part grew by since *sent_reasoning
 * / *sent_content of them went out (both advanced), malloc'd and
 * NUL-terminated (NULL, nothing advanced, when out of memory; free with
 * reasoning_delta_free), and raw_end, how far into t the text sent so far
 * reaches. The whole split of a finished answer: final 1, both counts 0. */
typedef struct reasoning_delta {
    char *reasoning;
    size_t reasoning_len;
    char *content;
    size_t content_len;
    size_t raw_end;
} reasoning_delta;
reasoning_delta reasoning_next(int syntax, const char *t, size_t len, int final, size_t *sent_reasoning,
                               size_t *sent_content);
void reasoning_delta_free(reasoning_delta *d);
/* "none" -> REASONING_NONE, "deepseek" or "auto" -> REASONING_DEEPSEEK; -1 for any other name. */
int reasoning_format_parse(const char *name, int *out);
#define REASONING_FORMAT_NAMES "none, deepseek, auto"

typedef enum job_state {
    JOB_QUEUED,
    JOB_RUNNING,
    JOB_DONE
} job_state;

/* A request's life between its HTTP thread and a slot thread (refcounted). */
typedef struct job {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* new text, state changes */
    int refs;
    gen_request req;
    job_state state;
    char *raw; /* everything generated so far */
    size_t raw_len, raw_cap;
    size_t exposed; /* raw[0..exposed) is final (no stop string can start in it) */
    int n_gen;
    char utf8_hold[4]; /* an incomplete UTF-8 sequence awaiting the next token */
    size_t n_hold;
    tok_logprob *lp; /* req.sp.logprobs: one per answer token (stop-string tokens dropped) */
    int n_lp, lp_cap;
    int n_cached;              /* prompt tokens restored from the prefix cache */
    const char *finish_reason; /* "stop" | "length", set when done */
    int error_http;            /* 0, or the status of a failure during generation */
    const char *error_code;    /* OpenAI error code of that failure, or NULL */
    char error[256];
    atomic_int cancel;           /* client gone or server stopping */
    int aborted;                 /* stopped by the shutdown, not finished */
    struct MHD_Connection *conn; /* suspended until this job changes; NULL if none */
    int client_fd;               /* for hang-up checks; -1 if unknown */
    double t_arrival, t_first, t_last;
    char id[48];
    long long created;
    struct job *next_choice; /* n > 1: the job of the next answer (this one holds a reference) */
} job;

job *job_new(int client_fd);
void job_retain(job *j);
void job_release(job *j);
/* 1 if the client of fd has closed its end (checked without blocking). */
int client_gone(int fd);
/* With j->mu held: resume the connection suspended on j, if any (new text or done). */
void job_wake(job *j);
/* With j->mu held: end a job that will not run (queued at shutdown, ...). */
void job_fail(job *j, int http_status, const char *code, const char *msg);

/* server_utf8.c. Copy in[0..n) to out as valid UTF-8: ill-formed bytes become
 * U+FFFD (out needs 3*n bytes); a valid but incomplete sequence at the end is
 * not copied, *hold says how many bytes it has. Returns the bytes written. */
size_t utf8_sanitize(const char *in, size_t n, char *out, size_t *hold);
/* Offset of the first byte of text[0..n) that is not valid UTF-8 or is NUL; n if none. */
size_t utf8_invalid_at(const char *text, size_t n);
/* bytes[0..n) as a NUL-terminated UTF-8 string: ill-formed bytes (maximal subparts, as in
 * utf8_sanitize), an incomplete tail and NUL bytes as U+FFFD; malloc'd, NULL on OOM. */
char *utf8_lossy(const char *bytes, size_t n);

// ---------------------------------------------------------------------------
// the server

typedef struct server_config {
    const char *host;
    int port;
    const char *api_key;           /* --api-key or COLI_API_KEY (folded into api_keys) */
    const char **api_keys;         /* every accepted key, n_api_keys of them (0: no auth); malloc'd */
    int n_api_keys;                /* key i is prefix cache domain i (with the request's cache_salt) */
    char *api_key_text;            /* --api-key-file's text, which api_keys point into (malloc'd) */
    int max_connections;           /* open connections in all; 0 until conns_plan sizes it */
    long long fd_limit;            /* the file-descriptor limit in force (raised to the hard one) */
    int max_conn_per_client;       /* open connections per client address */
    int request_timeout_s;         /* deadline for a request's head and body */
    double shutdown_grace_s;       /* on SIGTERM, how long running requests may finish */
    int n_slots;                   /* --parallel */
    int queue_max;                 /* waiting answers beyond the free slots (a request of n counts n) */
    size_t max_body;               /* bytes */
    int n_ctx;                     /* per slot, 0 = the model's */
    int token_delay_ms;            /* COLI_SERVE_DELAY_MS: tests slow generation down */
    coli_sampling_params sampling; /* what a request starts from (OpenAI's defaults, or run's flags);
                                      seed UINT64_MAX: a fresh seed per request */
    const char *cors_origin;       /* --cors-origin: Access-Control-Allow-Origin on every reply; NULL: none */
    const char *alias;             /* --alias: the model id /v1/models and replies show */
    size_t prefix_cache_bytes;     /* --prefix-cache-mb; 0 = no prefix cache */
    int prefix_block;              /* --prefix-block: tokens per cached block */
    int no_batching;               /* --no-batching: slots take turns one token each */
    int prefill_chunk;             /* --prefill-chunk: prompt tokens per turn when batching */
    int reasoning;                 /* --reasoning-format: what a chat request starts from (REASONING_*) */
    int allow_special_in_content;  /* --allow-special-in-content: message text may spell special tokens */
    const char *chat_template;     /* --chat-template: NULL or "auto" (the model's), or a family name */
    int chat_thinking;             /* --chat-template-kwargs enable_thinking, CHAT_THINKING_DEFAULT: not given */
    int chat_effort; /* --reasoning-effort or the kwargs' reasoning_effort, CHAT_EFFORT_DEFAULT: not given */
    int verbose;
} server_config;

typedef struct server_slot server_slot;

/* server_conns.c's connection registry (see there); one per server. */
typedef struct server_conns {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct conn_entry *head;
    int timeout_s, running;
    int limit, live; /* --max-connections; entries not reaped */
    pthread_t reaper;
} server_conns;

/* server_http.c's daemon; one per server. */
typedef struct server_http {
    struct MHD_Daemon *daemon;
    int port;             /* the one bound (cfg.port 0: any free one) */
    int listen_fd;        /* after quiesce: closed after the daemon; -1 none */
    atomic_int in_flight; /* requests between their head and their end */
} server_http;

typedef struct server {
    server_config cfg;
    coli_model *model;
    coli_model_info info;
    const char *model_id;      /* what /v1/models lists (--alias, else the model's name) */
    const char *model_path;    /* -m */
    chat_family family;        /* CHAT_UNKNOWN: chat requests fail with a clear error */
    const char *family_source; /* "tokenizer.chat_template" | "architecture" */
    char *bos_text, *eos_text;
    atomic_int ready;         /* model loaded, slots started */
    atomic_int stopping;      /* no new requests; queued ones were answered 503 */
    atomic_int abort_running; /* the grace period is over: running requests stop */
    server_metrics metrics;
    coli_prefix_cache *prefix; /* NULL when off; shared by the slots */
    uint64_t cache_key[2];     /* random per start: the SipHash key of the prefix cache domains */
    coli_batch *batch;         /* continuous batching; NULL with --no-batching */

    /* the baton: a fair lock over every computing library call */
    pthread_mutex_t baton_mu;
    pthread_cond_t baton_cv;
    uint64_t baton_next, baton_serving;
    /* copies of sequence state (coli_context_set_state_copy_callback): [1] made by a
     * thread holding the baton, [0] without it; bytes likewise */
    atomic_ullong state_copies[2], state_copy_bytes[2];

    /* the queue */
    pthread_mutex_t q_mu;
    pthread_cond_t q_cv;
    job **queue; /* ring of queue_max + n_slots: each waiting request's next answer, in turn */
    int q_head, q_len, q_cap;
    int q_answers; /* answers waiting (a request's later ones are not in the ring yet) */
    int active;    /* slots generating */
    server_slot *slots;
    pthread_t *slot_threads;
    int n_started;

    /* stats snapshots, refreshed by the monitor thread (a long-lived one, see above) */
    pthread_mutex_t st_mu;
    pthread_cond_t st_cv;
    char *stats_json;
    uint64_t st_want, st_have;
    pthread_t monitor;
    int monitor_started;

    server_http http;
    server_conns conns;
} server;

/* server.c: the lifecycle (see the top of this file). */
/* coli serve's defaults (its flags' defaults; OpenAI's sampling; max_connections 0:
 * conns_plan sizes it from the descriptor limit). */
void server_config_defaults(server_config *cfg);
/* A server for cfg (copied; the strings and api_keys it points to must outlive
 * the server), nothing started: NULL when out of memory (printed). */
server *server_new(const server_config *cfg);
/* Start the HTTP side: requests other than /health, /metrics and the dashboard
 * get 503 model_loading until server_run. 0 or SERVER_FAIL (printed). */
int server_listen(server *s);
/* Serve model (not owned, and no other server's; model_path: what /props shows):
 * listen (if not yet), pick the chat template, start the slots, then take
 * requests. 0 or SERVER_FAIL (printed). */
int server_run(server *s, coli_model *model, const char *model_path);
/* The TCP port the server listens on (cfg.port 0: the one it got); 0 before it listens. */
int server_port(const server *s);
/* Stop accepting, answer the queue 503, give running requests cfg.shutdown_grace_s,
 * stop the rest, close: safe at any point after server_new, and twice. */
void server_stop(server *s);
/* Stop (if not yet) and free s, but not its model. NULL: nothing. */
void server_free(server *s);

/* server_slots.c */
void server_sync_init(server *s);  /* locks and conditions, before anything starts */
int server_slots_start(server *s); /* contexts, slot threads, monitor; 0 or SERVER_FAIL */
/* Stop taking requests, answer queued ones 503 shutting_down, wait at most
 * grace_s seconds for running ones. 1 if all finished in time. */
int server_drain(server *s, double grace_s);
void server_slots_stop(server *s); /* stop what still runs (503 / error event), join */
void server_slots_free(server *s); /* after the HTTP side stopped: contexts, queue */
void baton_acquire(server *s);
void baton_release(server *s);
/* The prefix cache domain of a request that came with API key number key (-1: none) and
 * cache_salt salt (NULL: none): 0 (shared) for neither, else a keyed hash of both, so
 * requests of different keys or salts never share a cached block. */
uint64_t server_cache_domain(const server *s, int key, const char *salt);
/* Queue first and its next_choice chain, each answer a job (retains them): all or none.
 * 0, or 429 when its answers do not fit in the free slots and queue places, 503 when stopping. */
int server_submit(server *s, job *first);
void server_queue_gauges(server *s, int *waiting, int *active);
/* A copy of the executor's stats JSON no older than this call (malloc'd, NULL if none). */
char *server_stats_fresh(server *s);

/* server_openai.c: parse body into r. 0, or an HTTP status with *err set (param may be NULL). */
int openai_parse(server *s, const char *body, size_t len, int chat, gen_request *r, char *err, size_t err_cap,
                 const char **param);
/* A request body as exactly one JSON value, the check every endpoint makes: valid UTF-8
 * without NUL, no \u0000 in a string (cJSON would cut it there), no lone UTF-16 surrogate,
 * nothing after it. The value, or NULL with *status 400/500 and err (*param: the field). */
struct cJSON *openai_parse_json(const char *body, size_t len, char *err, size_t err_cap, const char **param,
                                int *status);
/* Tokenize r->prompt (or check r->ids) and fit max_tokens to the context. 0 or 400/500 + err. */
int openai_prepare_tokens(server *s, gen_request *r, char *err, size_t err_cap, const char **param);

/* server_grammar.c: constrained decoding for response_format json_object / json_schema. */
typedef struct json_grammar json_grammar;
/* Compile rf (the response_format object, type json_object or json_schema) over the model's
 * vocabulary into *out. 0, 400 (err names the unsupported or bad part) or 500 (out of memory). */
int json_grammar_new(server *s, const struct cJSON *rf, json_grammar **out, char *err, size_t err_cap);
void json_grammar_free(json_grammar *g);
/* coli_sampling_params.logit_filter: -INFINITY on every token that cannot continue valid output
 * (end-of-generation tokens: allowed only once the JSON value is complete). */
void json_grammar_filter(void *g, float *logits, int n_vocab);
/* Advance over the token just generated: 0, or -1 if its bytes break the grammar. */
int json_grammar_accept(json_grammar *g, int32_t id);

/* server_http.c */
void http_init(server *s);    /* nothing listening yet */
int http_start(server *s);    /* 0 or SERVER_FAIL; prints the listening line */
void http_quiesce(server *s); /* stop accepting connections */
/* Wait at most wait_s seconds for answers still being sent, then close everything. */
void http_stop(server *s, double wait_s);
/* Suspend c until job_wake (with the job's mutex held: the wake cannot be missed). */
void http_suspend(struct MHD_Connection *c);
void http_resume(struct MHD_Connection *c);
/* Queue a reply (takes ownership of the text). */
int http_reply_json(struct MHD_Connection *c, int status, char *json_text);
int http_reply_text(struct MHD_Connection *c, int status, char *text, const char *content_type);
/* Queue a 200 text/event-stream reply (takes the response). */
int http_reply_stream(struct MHD_Connection *c, struct MHD_Response *r);
int http_reply_error(server *s, struct MHD_Connection *c, int ep, int status, const char *type, const char *code,
                     const char *param, const char *fmt, ...) __attribute__((format(printf, 8, 9)));
int http_connection_fd(struct MHD_Connection *c);
/* The job a suspended request waits for (NULL if none); http_set_job retains it. */
job *http_current_job(void);
void http_set_job(job *j);
/* The number of the API key the request this thread answers came with; -1: no auth. */
int http_current_key(void);

/* server_conns.c: the connection limit and the head-and-body deadline (see there). */
/* Raise the soft file-descriptor limit to the hard one and size cfg->max_connections from it
 * when not given (or check the given one fits): 0, or SERVER_USAGE (the given
 * --max-connections does not fit) or SERVER_FAIL (the limit is too low), with the
 * one-line reason in err. */
int conns_plan(server_config *cfg, char *err, size_t err_cap);
/* Connections beyond limit libmicrohttpd keeps room for: closed ones not yet gone. */
int conns_slack(int limit);
void conns_init(server_conns *cn);
void conns_destroy(server_conns *cn);
int conns_start(server_conns *cn, int timeout_s, int limit); /* 0 or -1 (printed) */
void conns_stop(server_conns *cn);
/* libmicrohttpd's connection notification; cls is the server_conns. */
void conns_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe);
void conns_head_received(server_conns *cn, struct MHD_Connection *c);
void conns_request_received(server_conns *cn, struct MHD_Connection *c);
void conns_request_done(server_conns *cn, struct MHD_Connection *c);

/* server_handlers.c */
int handle_completion(server *s, struct MHD_Connection *c, int chat, const char *body, size_t len);
int handle_models(server *s, struct MHD_Connection *c);
int handle_health(server *s, struct MHD_Connection *c);
int handle_metrics(server *s, struct MHD_Connection *c);
/* A response object (chunk or final) common fields. */
struct cJSON *response_base(server *s, const job *j, const char *object);
/* usage of a finished request: the prompt once, every answer's tokens (j and its next_choice chain). */
struct cJSON *usage_json(const job *j);

/* server_logprobs.c: the "logprobs" value of a choice for lp[0..n) (chat: {"content": [...]},
 * completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}), or NULL on OOM. */
struct cJSON *logprobs_json(server *s, const job *j, const tok_logprob *lp, int n);
/* Record the current token's logprobs into j (j->mu held); start/end: its text in raw. 0 or -1 (OOM). */
int logprobs_record(coli_context *ctx, job *j, size_t start, size_t end);
/* Drop the entries whose text starts at or after raw[len] (a stop string cut there). */
void logprobs_truncate(job *j, size_t len);

/* server_tools.c: POST /tokenize, POST /detokenize, GET /props. */
int handle_tokenize(server *s, struct MHD_Connection *c, const char *body, size_t len);
int handle_detokenize(server *s, struct MHD_Connection *c, const char *body, size_t len);
int handle_props(server *s, struct MHD_Connection *c);

/* server_dashboard.c: GET / and /dashboard (the page), GET /dashboard.json (its numbers). */
int handle_dashboard_page(server *s, struct MHD_Connection *c);
int handle_dashboard_json(server *s, struct MHD_Connection *c);

/* server_sse.c: reply to j with a stream (j already queued). */
int sse_reply(server *s, struct MHD_Connection *c, job *j);
/* The non-streamed answer of a finished job. */
int completion_reply(server *s, struct MHD_Connection *c, job *j);

/* server_metrics.c: the whole /metrics text (malloc'd). */
char *metrics_render(server *s);

#endif
