/*
 * model_opts.h - the flags that every model-using command shares (-m, -t,
 * --devices, --inproc, --ctx, --kv-f16, -v), and loading with them; and the
 * sampling flags that run and chat share.
 */
#ifndef COLI_CLI_MODEL_OPTS_H
#define COLI_CLI_MODEL_OPTS_H

#include "tools/coli/args.h"
#include "colibri.h"
#include "tools/coli/chat/chat_template.h"
#include "tools/coli/chat/tokenize.h"

typedef struct model_opts {
    const char *model;      /* -m FILE (required) */
    int n_threads;          /* -t N, 0 = one per core */
    const char *devices;    /* --devices LIST */
    int inproc;             /* --inproc = --devices inproc */
    int n_ctx;              /* --ctx N, 0 = the model's */
    int kv_f16;             /* --kv-f16 */
    int verbose;            /* -v */
    const char *stats_json; /* --stats-json FILE (run only) */
    const char *keys;       /* --keys DIR: CURVE keys for remote workers (coli_model_params.keys_dir) */
    int xdna;               /* --xdna: the NPU lane (sets COLI_XDNA=1; docs/xdna.md) */
    /* routing (run, bench, serve: ROUTE_OPTS_SPECS) */
    const char *route_trace; /* --route-trace FILE: one JSON line per (token, layer) */
    const char *heat;        /* --heat FILE|auto: the heat file (auto = MODEL.heat, created) */
    int no_heat;             /* --no-heat: neither read nor write one */
    const char *pins;        /* --pin L:E=DEV,L:*=DEV */
} model_opts;

/* The arg_spec entries of model_opts o (an lvalue), for a command's table. */
#define MODEL_OPTS_SPECS(o)                                                                                           \
    {"--model", "-m", ARG_STR, &(o).model, 0, 0, 0, "FILE", "the GGUF model file (required)"},                        \
        {"--threads", "-t", ARG_INT, &(o).n_threads, 1, 4096, 0, "N", "compute threads (default: one per core)"},     \
        {"--devices",                                                                                                 \
         NULL,                                                                                                        \
         ARG_STR,                                                                                                     \
         &(o).devices,                                                                                                \
         0,                                                                                                           \
         0,                                                                                                           \
         0,                                                                                                           \
         "LIST",                                                                                                      \
         "where experts run: inproc, auto, cpu:2, cuda:0,cpu:1"},                                                     \
        {"--inproc", NULL, ARG_FLAG, &(o).inproc, 0, 0, 0, NULL, "run experts in this process (= --devices inproc)"}, \
        {"--ctx", "-c", ARG_INT, &(o).n_ctx, 1, 1 << 24, 0, "N", "context length (default: the model's)"},            \
        {"--ctx-size", NULL, ARG_INT, &(o).n_ctx, 1, 1 << 24, 0, "N", "= --ctx (llama.cpp's spelling)"},              \
        {"--kv-f16", NULL, ARG_FLAG, &(o).kv_f16, 0, 0, 0, NULL, "F16 KV cache (default F32)"},                       \
        {"--keys",  NULL,  ARG_STR,                                                                                   \
         &(o).keys, 0,     0,                                                                                         \
         0,         "DIR", "CURVE keys for remote:tcp://... workers (= COLI_KEYS; coli keygen)"},                     \
        {"--xdna",  NULL, ARG_FLAG,                                                                                   \
         &(o).xdna, 0,    0,                                                                                          \
         0,         NULL, "experimental NPU lane: adds an xdna worker (= COLI_XDNA=1; docs/xdna.md)"},                \
    {                                                                                                                 \
        "--verbose", "-v", ARG_FLAG, &(o).verbose, 0, 0, 0, NULL, "progress and per-worker lines on stderr"           \
    }

/* The routing flags of model_opts o (an lvalue): without --heat, MODEL.heat is used (read
 * for placement, updated at exit) when it exists; docs/scheduler.md, "Heat". */
#define ROUTE_OPTS_SPECS(o)                                                                                            \
    {"--route-trace",                                                                                                  \
     NULL,                                                                                                             \
     ARG_STR,                                                                                                          \
     &(o).route_trace,                                                                                                 \
     0,                                                                                                                \
     0,                                                                                                                \
     0,                                                                                                                \
     "FILE",                                                                                                           \
     "write each token's expert choice per layer as JSON lines"},                                                      \
        {"--heat",                                                                                                     \
         NULL,                                                                                                         \
         ARG_STR,                                                                                                      \
         &(o).heat,                                                                                                    \
         0,                                                                                                            \
         0,                                                                                                            \
         0,                                                                                                            \
         "FILE",                                                                                                       \
         "expert heat file: placement follows it, counts are added at exit (auto: MODEL.heat; default: MODEL.heat if " \
         "it exists)"},                                                                                                \
        {"--no-heat", NULL, ARG_FLAG, &(o).no_heat, 0, 0, 0, NULL, "no heat file (placement balances bytes)"}, {       \
        "--pin", NULL, ARG_STR, &(o).pins, 0, 0, 0, "L:E=WORKER,...",                                                  \
            "place these experts on these workers (cpu:0, cuda:0, ... as `coli plan` names them; L:*=W: a layer)"      \
    }

/* The heat file o names for its model (--heat, auto, or MODEL.heat when it
 * exists; NULL: none) into buf (cap bytes): buf or NULL. */
const char *model_opts_heat_path(const model_opts *o, char *buf, size_t cap);

/* The help lines of the sampling flags, with the defaults they start from. */
typedef struct sampling_help {
    char temp[64], top_k[64], top_p[64], seed[80];
} sampling_help;

/* Fill h from sp (coli_sampling_default_params, before any flag is parsed). */
void sampling_help_init(sampling_help *h, const coli_sampling_params *sp);

/* The arg_spec entries of the sampling flags of sp (an lvalue), helped by h (a sampling_help). */
#define SAMPLING_SPECS(sp, h)                                                                                      \
    {"--temp", NULL, ARG_FLOAT, &(sp).temperature, 0, 0, 0, "T", (h).temp},                                        \
        {"--top-k", NULL, ARG_INT, &(sp).top_k, 0, 0, 0, "K", (h).top_k},                                          \
        {"--top-p", NULL, ARG_FLOAT, &(sp).top_p, 0, 1, 1, "P", (h).top_p},                                        \
        {"--seed", "-s", ARG_U64, &(sp).seed, 0, 0, 0, "S", (h).seed},                                             \
        {"--min-p",   NULL, ARG_FLOAT,                                                                             \
         &(sp).min_p, 0,    1,                                                                                     \
         0,           "P",  "drop tokens below P x the best one's probability, 0 = off"},                          \
        {"--repeat-penalty",                                                                                       \
         NULL,                                                                                                     \
         ARG_FLOAT,                                                                                                \
         &(sp).repeat_penalty,                                                                                     \
         0,                                                                                                        \
         100,                                                                                                      \
         0,                                                                                                        \
         "X",                                                                                                      \
         "divide seen tokens' logits by X (llama.cpp), 1 = off"},                                                  \
        {"--repeat-last-n",                                                                                        \
         NULL,                                                                                                     \
         ARG_INT,                                                                                                  \
         &(sp).repeat_last_n,                                                                                      \
         -1,                                                                                                       \
         1 << 24,                                                                                                  \
         0,                                                                                                        \
         "N",                                                                                                      \
         "tokens the penalties look back at (default 64, -1 = all, 0 = off)"},                                     \
        {"--presence-penalty",                                                                                     \
         NULL,                                                                                                     \
         ARG_FLOAT,                                                                                                \
         &(sp).presence_penalty,                                                                                   \
         -2,                                                                                                       \
         2,                                                                                                        \
         0,                                                                                                        \
         "X",                                                                                                      \
         "subtract X from seen tokens' logits, 0 = off"},                                                          \
        {"--frequency-penalty",                                                                                    \
         NULL,                                                                                                     \
         ARG_FLOAT,                                                                                                \
         &(sp).frequency_penalty,                                                                                  \
         -2,                                                                                                       \
         2,                                                                                                        \
         0,                                                                                                        \
         "X",                                                                                                      \
         "subtract X per occurrence, 0 = off"},                                                                    \
    {                                                                                                              \
        "--ignore-eos", NULL, ARG_FLAG, &(sp).ignore_eos, 0, 0, 0, NULL, "never end at an end-of-generation token" \
    }

/* An output flag's path that is the input file (same device and inode: any
 * name of it): ARGS_ERROR, printed; else ARGS_OK. path or input NULL: OK. */
int cli_check_output_file(const char *cmd, const char *flag, const char *path, const char *input);

/* Check the combination (-m given, --inproc vs --devices and --xdna): 0 or
 * ARGS_ERROR. --xdna reaches the library as coli_model_params.xdna
 * (model_opts_open), never through the environment. */
int model_opts_check(const char *cmd, const model_opts *o);
/* --devices and --pin against each other, with the lane --xdna adds
 * (coli_devices_check_params): ARGS_OK, or ARGS_ERROR with one line naming the flag. */
int devices_check(const char *cmd, const char *devices, const char *pins, int xdna);

/* Load o->model and, if ctx is not NULL, make a context; on failure print "coli: <error>" and
 * return CLI_FAIL (nothing to free). default_devices is used when neither
 * --devices nor --inproc was given (NULL = the library's default). */
int model_opts_open(const model_opts *o, const char *default_devices, coli_model **m, coli_context **ctx);

/* Free *m after finishing its --route-trace: a trace that cannot be written
 * (a full disk, /dev/full) fails the command. 0 or CLI_FAIL (printed). */
int model_opts_free(coli_model **m);

/* A context of --ctx tokens (0: the model's) for m; 0 or CLI_FAIL (printed). */
int model_opts_new_context(const model_opts *o, coli_model *m, coli_context **ctx);

/* Context length the context got: --ctx, else the model's. */
int model_opts_n_ctx(const model_opts *o, const coli_model *m);

/* --chat-template NAME of run, chat and serve: NULL or "auto" (the model's
 * template) or a chat_family_name. Returns ARGS_OK, or ARGS_ERROR with a
 * usage error listing the known names. */
int chat_template_check(const char *cmd, const char *name);

/* --chat-template-kwargs JSON and --reasoning-effort NAME of run, chat and
 * serve (NULL: not given): *thinking and *effort set from them
 * (chat_kwargs_parse; CHAT_THINKING_DEFAULT, CHAT_EFFORT_DEFAULT when not
 * given; the flag wins over the JSON's reasoning_effort). Returns ARGS_OK,
 * or ARGS_ERROR with a usage error naming the key or the flag. */
int chat_kwargs_check(const char *cmd, const char *json, const char *effort_flag, int *thinking, int *effort);

/* The arg_spec entry of --reasoning-effort for a const char * lvalue. */
#define REASONING_EFFORT_SPEC(name)                                                                  \
    {                                                                                                \
        "--reasoning-effort", NULL, ARG_STR, &(name), 0, 0, 0, "LEVEL",                              \
            "low, medium or high: the reasoning effort the gpt-oss template writes (default medium)" \
    }

/* The arg_spec entry of --chat-template-kwargs for a const char * lvalue. */
#define CHAT_KWARGS_SPEC(json)                                                                            \
    {                                                                                                     \
        "--chat-template-kwargs", NULL, ARG_STR, &(json), 0, 0, 0, "JSON",                                \
            "template options as llama.cpp takes them; known: enable_thinking (qwen3, qwen3.5, glm4.5), " \
            "reasoning_effort (gpt-oss), e.g. "                                                           \
            "'{\"enable_thinking\":false}'"                                                               \
    }

/* The arg_spec entry of --chat-template for a const char * lvalue. */
#define CHAT_TEMPLATE_SPEC(name)                                             \
    {                                                                        \
        "--chat-template", NULL, ARG_STR, &(name), 0, 0, 0, "NAME",          \
            "chat template: auto (the model's, default), " CHAT_FAMILY_NAMES \
    }

#endif
