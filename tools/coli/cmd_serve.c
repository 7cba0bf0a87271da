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
#include "tools/coli/commands.h"
#include "tools/coli/model_opts.h"
#include "tools/coli/server/server.h"
#include "core/settings.h"

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

/* Listen (so /health says "loading"), load the model, serve it until a signal, stop. */
static int s_serve(const server_config *cfg, const model_opts *o, const coli_settings *env) {
    server *s = server_new(cfg);
    if (!s) return CLI_FAIL;
    coli_model *model = NULL;
    int rc = s_install_signals();
    if (!rc) rc = server_listen(s);
    if (!rc) rc = model_opts_open(o, NULL, &model, NULL);
    if (!rc) rc = server_run(s, model, o->model);
    if (!rc) {
        printf("coli serve: ready: model %s (%s), %d slots of %d tokens, chat template %s (from %s)\n", s->model_id,
               s->info.arch, s->cfg.n_slots, s->cfg.n_ctx, chat_family_name(s->family), s->family_source);
        fflush(stdout);
        char heat[4096];
        s_wait_for_signal(s, model_opts_heat_path(o, heat, sizeof heat) ? (int)env->heat_save_s : 0);
    }
    server_free(s); /* stops it first */
    if (model_opts_free(&model) && !rc) rc = CLI_FAIL;
    return rc;
}

/* Accept key k (NUL-terminated, outliving the server) as key number n_api_keys. */
static int s_add_key(server_config *cfg, const char *k) {
    const char **keys = realloc(cfg->api_keys, (size_t)(cfg->n_api_keys + 1) * sizeof *keys);
    if (!keys) {
        fprintf(stderr, "coli serve: out of memory for the API keys\n");
        return CLI_FAIL;
    }
    keys[cfg->n_api_keys++] = k;
    cfg->api_keys = keys;
    return 0;
}

/* Line number line of the key file: its key (trimmed) is accepted, or it is skipped (blank,
 * # comment): 0; it cannot be a header's token (control bytes, spaces inside) or repeats a key:
 * a usage error. */
static int s_key_line(server_config *cfg, const char *path, int line, char *text) {
    while (*text == ' ' || *text == '\t') text++;
    size_t n = strlen(text);
    while (n && (text[n - 1] == ' ' || text[n - 1] == '\t' || text[n - 1] == '\r')) text[--n] = '\0';
    if (!n || *text == '#') return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)text[i] <= ' ' || text[i] == 0x7f)
            return args_error("serve", "--api-key-file", "%s line %d: a key is one word of visible characters", path,
                              line);
    for (int i = 0; i < cfg->n_api_keys; i++)
        if (!strcmp(cfg->api_keys[i], text))
            return args_error("serve", "--api-key-file", "%s line %d: a key given twice", path, line);
    return s_add_key(cfg, text);
}

/* --api-key-file: one key per line (blank lines and # comments skipped), each its own
 * prefix cache domain. */
static int s_read_key_file(server_config *cfg, const char *path) {
    if (cfg->api_key) return args_error("serve", "--api-key-file", "give either --api-key or --api-key-file, not both");
    char *text = NULL;
    size_t len = 0;
    if (cli_read_file("--api-key-file", path, &text, &len)) return CLI_FAIL;
    cfg->api_key_text = text; /* the keys point into it */
    if (memchr(text, '\0', len)) return args_error("serve", "--api-key-file", "%s: has a NUL byte", path);
    int rc = 0, line = 1;
    for (char *at = text, *next; at && !rc; at = next, line++) {
        if ((next = strchr(at, '\n'))) *next++ = '\0';
        rc = s_key_line(cfg, path, line, at);
    }
    if (rc) return rc;
    if (!cfg->n_api_keys)
        return args_error("serve", "--api-key-file", "%s: no key in it (only blank lines and # comments)", path);
    return 0;
}

/* --max-connections checked against the descriptor limit, or sized from it (conns_plan). */
static int s_plan_connections(server_config *cfg) {
    char err[256];
    int rc = conns_plan(cfg, err, sizeof err);
    if (rc == SERVER_USAGE) return args_error("serve", "--max-connections", "%s", err);
    if (rc) fprintf(stderr, "coli serve: %s\n", err);
    return rc;
}

/* The flags' values that need checking or converting, and the environment
 * (COLI_API_KEY, COLI_SERVE_DELAY_MS, read in env), into cfg: 0 or a usage error. */
static int s_config_finish(server_config *cfg, const model_opts *mo, const coli_settings *env, const char *key_file,
                           int max_body_kib, int prefix_mb, float grace_s) {
    int rc = key_file ? s_read_key_file(cfg, key_file) : 0;
    if (!cfg->api_key && !key_file && env->api_key) cfg->api_key = env->api_key;
    if (!rc && cfg->api_key && !*cfg->api_key) rc = args_error("serve", "--api-key", "empty key");
    if (!rc && cfg->api_key) rc = s_add_key(cfg, cfg->api_key);
    if (!rc && cfg->alias && !*cfg->alias) rc = args_error("serve", "--alias", "empty name");
    if (!rc && cfg->cors_origin && (!*cfg->cors_origin || strpbrk(cfg->cors_origin, "\r\n ")))
        rc = args_error("serve", "--cors-origin", "'%s': expected one origin (scheme://host[:port]) or *",
                        cfg->cors_origin);
    cfg->shutdown_grace_s = grace_s;
    cfg->max_body = (size_t)max_body_kib * 1024;
    cfg->prefix_cache_bytes = (size_t)prefix_mb << 20;
    cfg->token_delay_ms = (int)env->serve_delay_ms;
    cfg->verbose = mo->verbose;
    cfg->n_ctx = mo->n_ctx;
    return rc ? rc : s_plan_connections(cfg);
}

/* --chat-template, --chat-template-kwargs and --reasoning-format, checked into s. */
static int s_chat_flags(server_config *cfg, const char *tmpl, const char *chat_kwargs, const char *effort,
                        const char *reasoning) {
    int rc = chat_template_check("serve", tmpl);
    cfg->chat_template = tmpl;
    if (!rc) rc = chat_kwargs_check("serve", chat_kwargs, effort, &cfg->chat_thinking, &cfg->chat_effort);
    if (!rc && reasoning && reasoning_format_parse(reasoning, &cfg->reasoning))
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

int cmd_serve(int argc, char **argv) {
    model_opts mo;
    memset(&mo, 0, sizeof mo);
    server_config cfg;
    server_config_defaults(&cfg);
    int max_body_kib = 1024, prefix_mb = 256;
    float grace_s = 30;
    const char *tmpl = NULL, *key_file = NULL, *chat_kwargs = NULL, *reasoning = NULL, *effort = NULL;
    sampling_help help;
    sampling_help_init(&help, &cfg.sampling);
    snprintf(help.seed, sizeof help.seed, "the seed of requests that give none (default: a fresh one each)");
    const arg_spec specs[] = {
        MODEL_OPTS_SPECS(mo),
        ROUTE_OPTS_SPECS(mo),
        {"--host", NULL, ARG_STR, &cfg.host, 0, 0, 0, "ADDR",
         "address to listen on (default 127.0.0.1, loopback only)"},
        {"--port", NULL, ARG_INT, &cfg.port, 0, 65535, 0, "N", "TCP port (default 8080; 0 = any free port, printed)"},
        {"--api-key", NULL, ARG_STR, &cfg.api_key, 0, 0, 0, "KEY",
         "require 'Authorization: Bearer KEY' on /v1/*; visible to every local user in ps: prefer --api-key-file or "
         "COLI_API_KEY"},
        {"--api-key-file", NULL, ARG_STR, &key_file, 0, 0, 0, "FILE",
         "API keys, one per line (# comments), each its own prefix cache domain"},
        {"--parallel", "-np", ARG_INT, &cfg.n_slots, 1, 256, 0, "N",
         "requests generated at once, each with its own KV cache, decoding in one batch (default 4)"},
        {"--queue", NULL, ARG_INT, &cfg.queue_max, 0, 100000, 0, "N",
         "answers that may wait for a slot (a request with n takes n); more get HTTP 429 (default 64)"},
        {"--max-body", NULL, ARG_INT, &max_body_kib, 1, 1 << 20, 0, "KIB",
         "largest request body in KiB; larger gets HTTP 413 (default 1024)"},
        {"--max-connections", NULL, ARG_INT, &cfg.max_connections, 1, 100000, 0, "N",
         "open connections; at the limit the oldest one still sending its request is closed (default: from ulimit -n)"},
        {"--max-conn-per-client", NULL, ARG_INT, &cfg.max_conn_per_client, 1, 100000, 0, "N",
         "open connections from one client address (default 256)"},
        {"--request-timeout", NULL, ARG_INT, &cfg.request_timeout_s, 1, 3600, 0, "S",
         "a request's head and body must arrive within S seconds, else 408 (default 30)"},
        {"--shutdown-grace", NULL, ARG_FLOAT, &grace_s, 0, 86400, 0, "S",
         "on SIGTERM, running requests may finish within S seconds (default 30)"},
        {"--cors-origin", NULL, ARG_STR, &cfg.cors_origin, 0, 0, 0, "ORIGIN",
         "allow browsers from ORIGIN (or *): CORS headers, preflight answered"},
        {"--alias", "-a", ARG_STR, &cfg.alias, 0, 0, 0, "NAME", "the model id clients see (default: the model's name)"},
        {"--prefix-cache-mb", NULL, ARG_INT, &prefix_mb, 0, 1 << 20, 0, "MB",
         "KV cache kept for prompts that start like earlier ones (multi-turn chat, shared system prompts), in MiB; 0 = "
         "off (default 256)"},
        {"--prefix-block", NULL, ARG_INT, &cfg.prefix_block, 1, 4096, 0, "N",
         "tokens per prefix cache block: prefixes are reused in whole blocks (default 16)"},
        {"--no-batching", NULL, ARG_FLAG, &cfg.no_batching, 0, 0, 0, NULL,
         "generating requests take turns one token each instead of decoding together in one forward pass per step"},
        {"--prefill-chunk", NULL, ARG_INT, &cfg.prefill_chunk, 1, 4096, 0, "N",
         "prompt tokens evaluated per turn while other requests decode (default 64)"},
        CHAT_TEMPLATE_SPEC(tmpl),
        CHAT_KWARGS_SPEC(chat_kwargs),
        REASONING_EFFORT_SPEC(effort),
        {"--allow-special-in-content", NULL, ARG_FLAG, &cfg.allow_special_in_content, 0, 0, 0, NULL,
         "message text may spell special tokens (<|im_start|> becomes the token: users can forge turns)"},
        {"--reasoning-format", NULL, ARG_STR, &reasoning, 0, 0, 0, "FORMAT",
         "chat answers of thinking models: none (as generated, default) or deepseek / auto (the "
         "<think>..</think> part in reasoning_content); a request's reasoning_format wins"},
        SAMPLING_SPECS(cfg.sampling, help),
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc = args_parse("serve", argc, argv, specs, n_specs, NULL, 0, NULL);
    if (rc == ARGS_HELP) {
        s_usage(specs, n_specs);
        return 0;
    }
    if (!rc) rc = model_opts_check("serve", &mo);
    if (!rc) rc = s_chat_flags(&cfg, tmpl, chat_kwargs, effort, reasoning);
    /* the environment, read once (~30 KiB: not on the stack) */
    coli_settings *env = malloc(sizeof *env);
    if (!env) rc = CLI_FAIL;
    if (env) coli_settings_load(env, NULL);
    if (!rc) rc = s_config_finish(&cfg, &mo, env, key_file, max_body_kib, prefix_mb, grace_s);
    if (!rc) rc = s_serve(&cfg, &mo, env);
    free(env);
    free(cfg.api_keys);
    free(cfg.api_key_text);
    return rc;
}
