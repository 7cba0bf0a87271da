/*
 * cmd_serve.c - `coli serve`: an OpenAI-compatible HTTP server over one
 * model (docs/api.md). The HTTP side starts first so that /health can say
 * "loading" while the model loads; SIGINT/SIGTERM stop it cleanly.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/coli/args.h"
#include "colibri.h"
#include "core/settings.h"
#include "tools/coli/commands.h"
#include "tools/coli/model_opts.h"
#include "tools/coli/server/server.h"

static int s_signal_pipe[2] = {-1, -1};

static void s_on_signal(int sig) {
    unsigned char b = (unsigned char)sig;
    ssize_t n = write(s_signal_pipe[1], &b, 1);
    (void)n;
}

static int s_install_signals(void) {
    if (pipe(s_signal_pipe) != 0) {
        fprintf(stderr, "coli serve: pipe: %s\n", strerror(errno));
        return CLI_FAIL;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that hangs up must not kill the server */
    return 0;
}

/* Text of a special token ("<s>"), "" if the vocabulary has none; malloc'd. */
static char *s_token_string(const coli_model *m, int32_t id) {
    const char *t = id >= 0 ? coli_token_text(m, id) : NULL;
    return strdup(t ? t : "");
}

static int s_load(server *s, const model_opts *o, const char *tmpl) {
    int rc = model_opts_open(o, NULL, &s->model, NULL);
    if (rc) return rc;
    coli_model_get_info(s->model, &s->info);
    s->model_id = s->cfg.alias ? s->cfg.alias : s->info.name;
    s->model_path = o->model;
    s->family = chat_template_pick(tmpl, &s->info, &s->family_source);
    char err[160];
    if (chat_thinking_check(s->family, s->chat_thinking, err, sizeof err)) {
        fprintf(stderr, "coli serve: --chat-template-kwargs: %s\n", err);
        return CLI_FAIL;
    }
    s->bos_text = s_token_string(s->model, s->info.bos_id);
    s->eos_text = s_token_string(s->model, s->info.eos_id);
    if (!s->bos_text || !s->eos_text) {
        fprintf(stderr, "coli serve: out of memory\n");
        return CLI_FAIL;
    }
    int n_ctx = model_opts_n_ctx(o, s->model);
    s->cfg.n_ctx = n_ctx;
    return server_slots_start(s);
}

/* Until a signal: every heat_save_s seconds (COLI_HEAT_SAVE_S, 60; 0: no heat file)
 * the heat counted so far goes to the heat file, under the baton, so a server killed
 * hard loses little. */
static void s_wait_for_signal(server *s, int heat_save_s) {
    unsigned char b;
    for (;;) {
        struct pollfd pfd = {s_signal_pipe[0], POLLIN, 0};
        int r = poll(&pfd, 1, heat_save_s ? heat_save_s * 1000 : -1);
        if (r > 0 && read(s_signal_pipe[0], &b, 1) == 1) break;
        if (r != 0) continue;
        baton_acquire(s);
        if (coli_model_heat_save(s->model, NULL) != 0) fprintf(stderr, "coli serve: %s\n", coli_last_error());
        baton_release(s);
    }
    printf("coli serve: stopping (signal %d)\n", b);
    fflush(stdout);
}

/* Stop accepting, answer the queue 503, give running requests the grace
 * period, stop the rest (their clients get 503 or an error event), and let
 * the answers go out before the sockets close. */
static void s_shutdown(server *s) {
    atomic_store(&s->ready, 0);
    http_quiesce();
    int finished = server_drain(s, s->cfg.shutdown_grace_s);
    server_slots_stop(s);
    if (!finished) {
        printf("coli serve: requests still running after the %.1f s grace period were stopped\n",
               s->cfg.shutdown_grace_s);
        fflush(stdout);
    }
    http_stop(5.0);
}

static int s_run(server *s, const model_opts *o, const char *tmpl, const coli_settings *env) {
    int rc = s_install_signals();
    if (!rc) rc = http_start(s);
    if (!rc) rc = s_load(s, o, tmpl);
    if (!rc) {
        atomic_store(&s->ready, 1);
        printf("coli serve: ready: model %s (%s), %d slots of %d tokens, chat template %s (from %s)\n", s->model_id,
               s->info.arch, s->cfg.n_slots, s->cfg.n_ctx, chat_family_name(s->family), s->family_source);
        fflush(stdout);
        char heat[4096];
        s_wait_for_signal(s, model_opts_heat_path(o, heat, sizeof heat) ? (int)env->heat_save_s : 0);
    }
    s_shutdown(s);
    server_slots_free(s);
    if (model_opts_free(&s->model) && !rc) rc = CLI_FAIL;
    free(s->bos_text);
    free(s->eos_text);
    return rc;
}

/* Accept key k (NUL-terminated, outliving the server) as key number n_api_keys. */
static int s_add_key(server *s, const char *k) {
    const char **keys = realloc(s->cfg.api_keys, (size_t)(s->cfg.n_api_keys + 1) * sizeof *keys);
    if (!keys) {
        fprintf(stderr, "coli serve: out of memory for the API keys\n");
        return CLI_FAIL;
    }
    keys[s->cfg.n_api_keys++] = k;
    s->cfg.api_keys = keys;
    return 0;
}

/* Line number line of the key file: its key (trimmed) is accepted, or it is skipped (blank,
 * # comment): 0; it cannot be a header's token (control bytes, spaces inside) or repeats a key:
 * a usage error. */
static int s_key_line(server *s, const char *path, int line, char *text) {
    while (*text == ' ' || *text == '\t') text++;
    size_t n = strlen(text);
    while (n && (text[n - 1] == ' ' || text[n - 1] == '\t' || text[n - 1] == '\r')) text[--n] = '\0';
    if (!n || *text == '#') return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)text[i] <= ' ' || text[i] == 0x7f)
            return args_error("serve", "--api-key-file", "%s line %d: a key is one word of visible characters", path,
                              line);
    for (int i = 0; i < s->cfg.n_api_keys; i++)
        if (!strcmp(s->cfg.api_keys[i], text))
            return args_error("serve", "--api-key-file", "%s line %d: a key given twice", path, line);
    return s_add_key(s, text);
}

/* --api-key-file: one key per line (blank lines and # comments skipped), each its own
 * prefix cache domain. */
static int s_read_key_file(server *s, const char *path) {
    if (s->cfg.api_key)
        return args_error("serve", "--api-key-file", "give either --api-key or --api-key-file, not both");
    char *text = NULL;
    size_t len = 0;
    if (cli_read_file("--api-key-file", path, &text, &len)) return CLI_FAIL;
    s->cfg.api_key_text = text; /* the keys point into it */
    if (memchr(text, '\0', len)) return args_error("serve", "--api-key-file", "%s: has a NUL byte", path);
    int rc = 0, line = 1;
    for (char *at = text, *next; at && !rc; at = next, line++) {
        if ((next = strchr(at, '\n'))) *next++ = '\0';
        rc = s_key_line(s, path, line, at);
    }
    if (rc) return rc;
    if (!s->cfg.n_api_keys)
        return args_error("serve", "--api-key-file", "%s: no key in it (only blank lines and # comments)", path);
    return 0;
}

/* The server's defaults, before the flags. */
static void s_config_defaults(server_config *cfg) {
    *cfg = (server_config){.host = "127.0.0.1",
                           .port = 8080,
                           .n_slots = 4,
                           .queue_max = 64,
                           .max_connections = 0, /* conns_plan: from the file-descriptor limit */
                           .max_conn_per_client = 256,
                           .request_timeout_s = 30,
                           .prefix_block = 16,
                           .prefill_chunk = 64};
    coli_sampling_default_params(&cfg->sampling);
    cfg->sampling.temperature = 1.0f; /* OpenAI's defaults: the full distribution */
    cfg->sampling.top_k = 0;
    cfg->sampling.top_p = 1.0f;
    cfg->sampling.seed = UINT64_MAX; /* a fresh seed per request unless --seed */
}

/* The flags' values that need checking or converting, and the environment
 * (COLI_API_KEY, COLI_SERVE_DELAY_MS, read in env), into s->cfg: 0 or a usage error. */
static int s_config_finish(server *s, const model_opts *mo, const coli_settings *env, const char *key_file,
                           int max_body_kib, int prefix_mb, float grace_s) {
    int rc = key_file ? s_read_key_file(s, key_file) : 0;
    if (!s->cfg.api_key && !key_file && env->api_key) s->cfg.api_key = env->api_key;
    if (!rc && s->cfg.api_key && !*s->cfg.api_key) rc = args_error("serve", "--api-key", "empty key");
    if (!rc && s->cfg.api_key) rc = s_add_key(s, s->cfg.api_key);
    if (!rc && s->cfg.alias && !*s->cfg.alias) rc = args_error("serve", "--alias", "empty name");
    if (!rc && s->cfg.cors_origin && (!*s->cfg.cors_origin || strpbrk(s->cfg.cors_origin, "\r\n ")))
        rc = args_error("serve", "--cors-origin", "'%s': expected one origin (scheme://host[:port]) or *",
                        s->cfg.cors_origin);
    s->cfg.shutdown_grace_s = grace_s;
    s->cfg.max_body = (size_t)max_body_kib * 1024;
    s->cfg.prefix_cache_bytes = (size_t)prefix_mb << 20;
    s->cfg.token_delay_ms = (int)env->serve_delay_ms;
    s->cfg.verbose = mo->verbose;
    s->cfg.n_ctx = mo->n_ctx;
    return rc ? rc : conns_plan(&s->cfg);
}

/* --chat-template, --chat-template-kwargs and --reasoning-format, checked into s. */
static int s_chat_flags(server *s, const char *tmpl, const char *chat_kwargs, const char *reasoning) {
    int rc = chat_template_check("serve", tmpl);
    if (!rc) rc = chat_kwargs_check("serve", chat_kwargs, &s->chat_thinking);
    if (!rc && reasoning && reasoning_format_parse(reasoning, &s->cfg.reasoning))
        rc = args_error("serve", "--reasoning-format", "unknown format '%s' (known: %s)", reasoning,
                        REASONING_FORMAT_NAMES);
    return rc;
}

static void s_usage(const arg_spec *specs, int n_specs) {
    args_usage(stdout, "serve", "-m FILE [--host ADDR] [--port N] [--api-key-file FILE] [flags]",
               "Serve the model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions,\n"
               "/v1/models), /tokenize, /detokenize, /props, /health and Prometheus /metrics. See docs/api.md.",
               specs, n_specs);
}

//  A server with its defaults, and *env the environment it reads (COLI_API_KEY, ...), read
//  once (~30 KiB: not on the stack). NULL when out of memory.
static server *s_new(coli_settings **env) {
    server *s = calloc(1, sizeof *s);
    *env = malloc(sizeof **env);
    if (!s || !*env) {
        free(s);
        free(*env);
        return NULL;
    }
    coli_settings_load(*env, NULL);
    s_config_defaults(&s->cfg);
    return s;
}

static void s_free(server *s, coli_settings *env) {
    free(s->cfg.api_keys);
    free(s->cfg.api_key_text);
    free(s);
    free(env);
}

int cmd_serve(int argc, char **argv) {
    model_opts mo;
    memset(&mo, 0, sizeof mo);
    coli_settings *env = NULL;
    server *s = s_new(&env);
    if (!s) return CLI_FAIL;
    int max_body_kib = 1024, prefix_mb = 256;
    float grace_s = 30;
    const char *tmpl = NULL, *key_file = NULL, *chat_kwargs = NULL, *reasoning = NULL;
    sampling_help help;
    sampling_help_init(&help, &s->cfg.sampling);
    snprintf(help.seed, sizeof help.seed, "the seed of requests that give none (default: a fresh one each)");
    const arg_spec specs[] = {
        MODEL_OPTS_SPECS(mo),
        ROUTE_OPTS_SPECS(mo),
        {"--host", NULL, ARG_STR, &s->cfg.host, 0, 0, 0, "ADDR",
         "address to listen on (default 127.0.0.1, loopback only)"},
        {"--port", NULL, ARG_INT, &s->cfg.port, 0, 65535, 0, "N",
         "TCP port (default 8080; 0 = any free port, printed)"},
        {"--api-key", NULL, ARG_STR, &s->cfg.api_key, 0, 0, 0, "KEY",
         "require 'Authorization: Bearer KEY' on /v1/*; visible to every local user in ps: prefer --api-key-file or "
         "COLI_API_KEY"},
        {"--api-key-file", NULL, ARG_STR, &key_file, 0, 0, 0, "FILE",
         "API keys, one per line (# comments), each its own prefix cache domain"},
        {"--parallel", "-np", ARG_INT, &s->cfg.n_slots, 1, 256, 0, "N",
         "requests generated at once, each with its own KV cache, decoding in one batch (default 4)"},
        {"--queue", NULL, ARG_INT, &s->cfg.queue_max, 0, 100000, 0, "N",
         "answers that may wait for a slot (a request with n takes n); more get HTTP 429 (default 64)"},
        {"--max-body", NULL, ARG_INT, &max_body_kib, 1, 1 << 20, 0, "KIB",
         "largest request body in KiB; larger gets HTTP 413 (default 1024)"},
        {"--max-connections", NULL, ARG_INT, &s->cfg.max_connections, 1, 100000, 0, "N",
         "open connections; at the limit the oldest one still sending its request is closed (default: from ulimit -n)"},
        {"--max-conn-per-client", NULL, ARG_INT, &s->cfg.max_conn_per_client, 1, 100000, 0, "N",
         "open connections from one client address (default 256)"},
        {"--request-timeout", NULL, ARG_INT, &s->cfg.request_timeout_s, 1, 3600, 0, "S",
         "a request's head and body must arrive within S seconds, else 408 (default 30)"},
        {"--shutdown-grace", NULL, ARG_FLOAT, &grace_s, 0, 86400, 0, "S",
         "on SIGTERM, running requests may finish within S seconds (default 30)"},
        {"--cors-origin", NULL, ARG_STR, &s->cfg.cors_origin, 0, 0, 0, "ORIGIN",
         "allow browsers from ORIGIN (or *): CORS headers, preflight answered"},
        {"--alias", "-a", ARG_STR, &s->cfg.alias, 0, 0, 0, "NAME",
         "the model id clients see (default: the model's name)"},
        {"--prefix-cache-mb", NULL, ARG_INT, &prefix_mb, 0, 1 << 20, 0, "MB",
         "KV cache kept for prompts that start like earlier ones (multi-turn chat, shared system prompts), in MiB; 0 = "
         "off (default 256)"},
        {"--prefix-block", NULL, ARG_INT, &s->cfg.prefix_block, 1, 4096, 0, "N",
         "tokens per prefix cache block: prefixes are reused in whole blocks (default 16)"},
        {"--no-batching", NULL, ARG_FLAG, &s->cfg.no_batching, 0, 0, 0, NULL,
         "generating requests take turns one token each instead of decoding together in one forward pass per step"},
        {"--prefill-chunk", NULL, ARG_INT, &s->cfg.prefill_chunk, 1, 4096, 0, "N",
         "prompt tokens evaluated per turn while other requests decode (default 64)"},
        CHAT_TEMPLATE_SPEC(tmpl),
        CHAT_KWARGS_SPEC(chat_kwargs),
        {"--allow-special-in-content", NULL, ARG_FLAG, &s->cfg.allow_special_in_content, 0, 0, 0, NULL,
         "message text may spell special tokens (<|im_start|> becomes the token: users can forge turns)"},
        {"--reasoning-format", NULL, ARG_STR, &reasoning, 0, 0, 0, "FORMAT",
         "chat answers of thinking models: none (as generated, default) or deepseek / auto (the "
         "<think>..</think> part in reasoning_content); a request's reasoning_format wins"},
        SAMPLING_SPECS(s->cfg.sampling, help),
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc = args_parse("serve", argc, argv, specs, n_specs, NULL, 0, NULL);
    if (rc == ARGS_HELP) s_usage(specs, n_specs);
    if (!rc) rc = model_opts_check("serve", &mo);
    if (!rc) rc = s_chat_flags(s, tmpl, chat_kwargs, reasoning);
    if (!rc) rc = s_config_finish(s, &mo, env, key_file, max_body_kib, prefix_mb, grace_s);
    if (!rc) {
        metrics_init(&s->metrics);
        server_sync_init(s);
        rc = s_run(s, &mo, tmpl, env);
        metrics_destroy(&s->metrics);
    }
    s_free(s, env);
    return rc == ARGS_HELP ? 0 : rc;
}
