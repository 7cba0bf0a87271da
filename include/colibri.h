/*
 * colibri.h - the public C API of libcolibri, an inference engine for
 * Mixture-of-Experts language models.
 *
 * Three calls do the work: coli_model_load (init), coli_eval (forward),
 * coli_model_free (free). The rest are conveniences on top: contexts with
 * their own KV cache, tokenization, generation with a per-token callback.
 *
 * Rules that hold for every function here:
 *  - Functions that can fail return a coli_status: 0 (COLI_OK) on success,
 *    a negative code otherwise. coli_last_error() then returns a one-line
 *    message naming the thing and the reason (thread-local, valid until the
 *    next failing call on that thread).
 *  - Destructors accept NULL and set the caller's pointer to NULL.
 *  - Constructors set *out to NULL first; *out is non-NULL only on success.
 *  - Nothing here calls exit() or abort() on bad input.
 *  - Strings and pointers the library returns are owned by the object they
 *    came from and live as long as it, unless a function says "malloc'd".
 *  - Times are seconds (double, monotonic clock); sizes are bytes.
 *  - Threads: a model's contexts share its compute pool and expert
 *    executor, so calls on contexts (and stats) of one model must not
 *    overlap in time; serialize them (coli serve passes a lock) or load one
 *    model per thread. Free every context of a model before the model.
 */
#ifndef COLIBRI_H
#define COLIBRI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COLI_API_VERSION 1

typedef enum coli_status {
    COLI_OK = 0,
    COLI_EINVAL = -1,       /* bad argument, flag or value */
    COLI_EIO = -2,          /* a file cannot be opened, read, mapped or written */
    COLI_EFORMAT = -3,      /* malformed or hostile file or message */
    COLI_EUNSUPPORTED = -4, /* well-formed but not supported (type, architecture) */
    COLI_ENOMEM = -5,       /* allocation failed */
    COLI_ERANGE = -6,       /* context full, id out of range */
    COLI_EDEVICE = -7,      /* plugin or device failure */
    COLI_ETIMEOUT = -8,     /* a deadline passed */
    COLI_EPROTO = -9,       /* protocol violation by a peer */
    COLI_ECANCELLED = -10,  /* stopped by the caller (callback asked to stop) */
    COLI_EINTERNAL = -11    /* an invariant broke: a bug, please report */
} coli_status;

/* The message of the last failure on this thread ("" if none). Owned by
 * the library; overwritten by the next failure on this thread. */
const char *coli_last_error(void);
/* A short name for a status code, e.g. "EFORMAT": a static string (an
 * unknown code gets a name too, never NULL). */
const char *coli_status_str(int status);

typedef struct coli_model coli_model;     /* weights (mapped file), tokenizer, workers */
typedef struct coli_context coli_context; /* one conversation: KV cache, positions */

// ----------------------------------------------------------------------------
// model

typedef struct coli_model_params {
    const char *devices;         /* where experts run: NULL or "" = default ("auto": a worker per GPU
                             found plus CPU workers as their fallback; no GPU: in this process),
                             "inproc" = in this process, "cpu:2", "cuda:0,cpu:1", "auto" */
    int n_threads;               /* compute threads in this process; 0 = one per core */
    int kv_f16;                  /* 1 = F16 KV cache, 0 = F32 (default) */
    int n_ctx_max;               /* cap on the context length; 0 = the model's own */
    const char *stats_json_path; /* optional: write run stats as JSON here on free */
    int verbose;                 /* 1 = progress and per-worker lines on stderr */
    /* Added in API version 1 without breaking it (zero = as before): */
    const char *worker_path; /* the coli-worker program; NULL or "" = $COLI_WORKER, else next
                                to this program (or ../bin), else $COLI_BUILD/bin */
    const char *keys_dir;    /* CURVE keys for remote:tcp://... workers (coli keygen DIR);
                                NULL or "" = $COLI_KEYS */
    int vocab_only;          /* 1 = read only the tokenizer (any general.architecture,
                                weights or none, as llama.cpp's vocab_only): tokenize
                                and detokenize work, coli_context_new refuses */
    const char *heat_path;   /* expert heat file (docs/scheduler.md, "Heat"): NULL or "" =
                                none. Read at load if it exists (placement then follows
                                it); every routed token is counted; written back, with
                                the new counts added, by coli_model_free. A file that is
                                not a valid heat file for this model is ignored with one
                                line on stderr and never overwritten. */
    const char *pins;        /* "L:E=DEV,L:*=DEV": experts placed on a worker whatever
                                the heat (DEV: cpu:1, cuda:0, ...); NULL or "" = none */
    int xdna;                /* 1 = ask for the experimental NPU lane (docs/xdna.md), as
                                COLI_XDNA=1 does (the CLI's --xdna): an xdna:0 worker joins
                                unless devices is "inproc"; 0 = as COLI_XDNA says. The
                                process's environment is not changed */
} coli_model_params;

/* All fields zero: default devices, one thread per core, F32 KV cache, the
 * model's context, no stats file, quiet, weights loaded, the worker program
 * and keys from the environment (docs/settings.md lists every variable read,
 * once, at load). p may be NULL (nothing happens). */
void coli_model_default_params(coli_model_params *p);

/* Map and validate a GGUF file, build its tokenizer and start its expert
 * executor (worker processes unless devices is "inproc"). p may be NULL
 * (defaults); its strings are copied. Returns 0 with *out owning the
 * mapping, or COLI_EINVAL (NULL/empty path, negative n_threads/n_ctx_max),
 * COLI_EIO, COLI_EFORMAT, COLI_EUNSUPPORTED, COLI_ENOMEM, COLI_EDEVICE.
 * With p->vocab_only only the tokenizer is built (a vocabulary-only file
 * such as llama.cpp's ggml-vocab-*.gguf loads); a file without tokenizer
 * metadata is refused either way (COLI_EFORMAT, "no tokenizer"). */
int coli_model_load(const char *path, const coli_model_params *p, coli_model **out);
/* Write stats_json_path (if given), stop the workers, unmap the file. */
void coli_model_free(coli_model **model);

typedef struct coli_model_info {
    const char *arch; /* "llama", "olmoe", "qwen2moe" */
    const char *name; /* general.name or the file name */
    int64_t n_params;
    int n_vocab, n_ctx, n_embd, n_layer, n_head, n_head_kv;
    int n_expert, n_expert_used; /* 0 for a dense model */
    int32_t bos_id, eos_id;      /* -1 if the vocabulary has none */
    int add_bos;                 /* 1 if prompts get BOS */
    const char *chat_template;   /* tokenizer.chat_template, NULL if absent */
    double load_seconds;
    /* The state of one sequence (a context, a server slot): KV bytes per
     * position (the attention layers, in the cache's type), and the bytes of
     * the recurrent states of hybrid models (their linear-attention layers;
     * 0 otherwise), whatever the length; a context also keeps up to two
     * copies of these for the prefix cache. docs/architectures.md. */
    size_t state_bytes_per_token, state_bytes_per_seq;
} coli_model_info;
/* A vocab_only model: arch is general.architecture as the file says ("" if
 * absent), n_vocab the vocabulary's size, the other counts 0. */

/* Fill *out (zeroed first; all zero if m is NULL). Its strings belong to m. */
void coli_model_get_info(const coli_model *m, coli_model_info *out);

// ----------------------------------------------------------------------------
// tokens

/* Tokenize len bytes of text (need not be NUL-terminated; text may be NULL
 * if len is 0). add_special: add BOS if the vocabulary does.
 * parse_special: text like "<s>" becomes the special token. Writes at most
 * cap ids; *n_out receives the full count (call again with a bigger buffer
 * if *n_out > cap, in which case COLI_ERANGE is returned). COLI_EINVAL for a
 * NULL model/n_out, NULL ids with cap > 0, or cap < 0. */
int coli_tokenize(const coli_model *m, const char *text, size_t len, int add_special, int parse_special, int32_t *ids,
                  int cap, int *n_out);

/* A byte range of a text: text[off .. off + len). */
typedef struct coli_text_span {
    size_t off, len;
} coli_text_span;

/* coli_tokenize with parse_special on, except inside the n_plain ranges of
 * plain (ascending, not overlapping, within the text): a control token's
 * text that overlaps one of them stays text, as with parse_special 0
 * (user-defined tokens match everywhere, as in coli_tokenize). For a chat
 * prompt: the template's markers are special, the messages' text is plain,
 * so a message cannot forge another role's turn. Tokens are those of the
 * whole text (BPE merges cross the range edges as usual). COLI_EINVAL for
 * ranges out of order or past the text; otherwise as coli_tokenize. */
int coli_tokenize_plain(const coli_model *m, const char *text, size_t len, int add_special, const coli_text_span *plain,
                        int n_plain, int32_t *ids, int cap, int *n_out);

/* The bytes a token stands for (SPM "▁" -> " ", byte tokens -> the byte,
 * GPT-2 byte mapping undone). Not NUL-terminated; valid while m lives.
 * Control tokens (BOS/EOS) give the empty string. COLI_ERANGE for an id
 * outside [0, n_vocab), COLI_EINVAL for a NULL argument. */
int coli_token_to_bytes(const coli_model *m, int32_t id, const char **bytes, size_t *len);
/* The token's vocabulary string as stored (e.g. "▁Hello", "<0x0A>"),
 * NUL-terminated, valid while m lives; NULL for a bad id or a NULL m. */
const char *coli_token_text(const coli_model *m, int32_t id);
/* 1 if id ends generation (EOS, EOT, ...), else 0 (also for a bad id). */
int coli_token_is_eog(const coli_model *m, int32_t id);

// ----------------------------------------------------------------------------
// contexts and the forward pass

typedef struct coli_context_params {
    int n_ctx; /* tokens the KV cache holds; 0 = model's (capped by n_ctx_max) */
} coli_context_params;

/* n_ctx = 0 (the model's). p may be NULL. */
void coli_context_default_params(coli_context_params *p);
/* A conversation on m with its own KV cache (p NULL: defaults). m must
 * outlive it. COLI_EINVAL if n_ctx is outside 1..the model's context (as
 * capped by n_ctx_max), COLI_ENOMEM. */
int coli_context_new(coli_model *m, const coli_context_params *p, coli_context **out);
void coli_context_free(coli_context **ctx);
/* Forget the conversation (positions back to 0). NULL: nothing. */
void coli_context_reset(coli_context *ctx);
int coli_context_pos(const coli_context *ctx); /* tokens in the cache (0 for NULL) */

/* The forward pass: append n ids at the current position, run them as one
 * batch. logits: NULL, or room for n_vocab floats (logits_all = 0: of the
 * last position only) or n * n_vocab floats (logits_all = 1: every position,
 * row i predicts the token after ids[i]). On success the position moves
 * by n. COLI_EINVAL (NULL ctx/ids, n <= 0), COLI_ERANGE (an id outside the
 * vocabulary, or pos + n > n_ctx: the context is full), or what the expert
 * executor reports (a failing worker's experts fall back to the CPU
 * instead); the position does not move on failure. */
int coli_eval(coli_context *ctx, const int32_t *ids, int n, float *logits, int logits_all);

// ----------------------------------------------------------------------------
// prefix cache

/* KV rows of token prefixes evaluated before, kept for contexts of one model
 * (coordinator/prefix_cache.h): blocks of block_tokens positions keyed by
 * the whole prefix up to their end, least recently used evicted first,
 * their KV bytes at most max_bytes. Restored rows are the bits a cold
 * prefill writes (the determinism contract), so the logits that follow are
 * identical. Thread-safe; calls that take a context follow the context's
 * rules. */
typedef struct coli_prefix_cache coli_prefix_cache;

typedef struct coli_prefix_cache_stats {
    uint64_t hit_tokens;     /* prompt positions restored */
    uint64_t miss_tokens;    /* prompt positions a restore left to compute */
    uint64_t evicted_tokens; /* positions dropped for room */
    uint64_t stored_tokens;  /* positions added */
    size_t bytes, max_bytes; /* KV bytes held now / the bound */
    int n_blocks, block_tokens;
} coli_prefix_cache_stats;

/* A cache for m's contexts. block_tokens >= 1 (16 or 32 are good values).
 * Returns 0 with *out, COLI_EINVAL (NULL model or out, vocab_only model,
 * block_tokens < 1), COLI_ENOMEM. Free it before m. */
int coli_prefix_cache_new(const coli_model *m, size_t max_bytes, int block_tokens, coli_prefix_cache **out);
void coli_prefix_cache_free(coli_prefix_cache **pc);
/* Reset ctx, then copy into it the longest cached prefix of ids[0..n)
 * that leaves at least one id to evaluate (whole blocks): the context's
 * position becomes that length, which is returned (>= 0); counts the
 * restored positions as hits and the rest of the n as misses. The caller
 * then evaluates ids[returned..n). COLI_EINVAL for NULL arguments, n < 1, or
 * a context of another model. */
int coli_context_restore_prefix(coli_context *ctx, coli_prefix_cache *pc, const int32_t *ids, int n);
/* Keep the whole blocks of ids[0..n), the tokens ctx holds at positions
 * 0..n-1 (n <= its position). Hybrid models (recurrent layers): only up to
 * the last block end where a prefill of ctx since its restore kept the
 * recurrent state (docs/api.md, "Prefix cache": a one-token coli_eval is a
 * decode step and keeps none). Returns the blocks added (>= 0), COLI_EINVAL
 * (NULL arguments, n outside 0..position, another model's context) or
 * COLI_ENOMEM. */
int coli_context_save_prefix(coli_context *ctx, coli_prefix_cache *pc, const int32_t *ids, int n);
/* The cache domain of ctx's later restores and saves (0, the default, until
 * set): a restore finds only blocks saved in the same domain, so clients
 * that must not learn each other's prompts (cached positions and timing
 * would tell) get domains of their own. */
void coli_context_set_prefix_domain(coli_context *ctx, uint64_t domain);
/* The counters into *out (all zero when pc is NULL; out NULL: nothing). */
void coli_prefix_cache_get_stats(coli_prefix_cache *pc, coli_prefix_cache_stats *out);

// ----------------------------------------------------------------------------
// continuous batching

/* Contexts attached to one batch decode together: while several run
 * coli_generate (each on its own thread), every generation step is one
 * forward pass over the next token of each of them (attention per context,
 * the experts once for all: one executor call per layer). A context joins
 * when its prompt is in (prompts are evaluated alone, in chunks of
 * prefill_chunk tokens under the lock, alternating with the others' steps)
 * and leaves when its generation ends. A sequence gets the same tokens
 * batched or alone (the determinism contract). The batch takes the
 * model's compute under lock/unlock (both or neither; coli serve passes its
 * baton), so attached contexts' coli_generate calls may overlap; every
 * other call keeps the rule that calls of one model must not overlap. */
typedef struct coli_batch coli_batch;
typedef void (*coli_lock_fn)(void *user);

typedef struct coli_batch_stats {
    uint64_t steps, rows; /* forward passes, tokens in them (rows / steps: the mean batch) */
    int max_rows;         /* the largest step */
    int members;          /* contexts decoding now */
} coli_batch_stats;

/* A batch of up to max_seqs contexts of m, each of n_ctx positions or fewer
 * (a context that joins while max_seqs decode waits for one to leave).
 * prefill_chunk >= 1. Returns 0 with *out, COLI_EINVAL, COLI_ENOMEM. Free
 * it after detaching (or freeing) its contexts, before m. */
int coli_batch_new(coli_model *m, int max_seqs, int n_ctx, int prefill_chunk, coli_lock_fn lock, coli_lock_fn unlock,
                   void *user, coli_batch **out);
void coli_batch_free(coli_batch **b);
/* Attach ctx to b (NULL: detach); coli_generate then decodes in the batch.
 * COLI_EINVAL for a NULL ctx, a batch of another model or a context longer
 * than the batch's n_ctx. */
int coli_context_set_batch(coli_context *ctx, coli_batch *b);
void coli_batch_get_stats(coli_batch *b, coli_batch_stats *out);
/* A context in no batch then runs each evaluation's compute under
 * lock/unlock (both or neither; NULL: none): every part of a prompt and
 * every decode step takes it, and the recurrent-state snapshots a prefill
 * keeps are copied after it is given back. The caller does not hold it
 * around coli_eval / coli_generate; `coli serve --no-batching` passes its
 * baton, so the slots take turns one step each and no state copy holds
 * the others up. COLI_EINVAL for a NULL ctx or half a pair. */
int coli_context_set_compute_lock(coli_context *ctx, coli_lock_fn lock, coli_lock_fn unlock, void *user);

// ----------------------------------------------------------------------------
// generation

typedef struct coli_sampling_params {
    float temperature; /* 0 = greedy (argmax) */
    int top_k;         /* 0 = off */
    float top_p;       /* 1 = off */
    uint64_t seed;     /* same seed, same output */
    int n_predict;     /* max tokens to generate; must be >= 0 */
    /* llama.cpp's definitions, applied in this order before top_k: */
    float repeat_penalty;    /* 0 or 1 = off; a seen token's logit l becomes l / p (l > 0) or l * p */
    float presence_penalty;  /* 0 = off; subtracted once from a seen token's logit */
    float frequency_penalty; /* 0 = off; subtracted per occurrence */
    int repeat_last_n;       /* tokens "seen" = the last N (prompt included); 0 = off, -1 = all */
    float min_p;             /* 0 = off; after top_k keep p >= min_p * p(best), on logits before temperature */
    int ignore_eos;          /* 1: end-of-generation tokens are never sampled (llama.cpp --ignore-eos) */
    int logprobs;            /* 1: compute log-probabilities (coli_generate_logprobs) */
    int top_logprobs;        /* with logprobs: also rank this many alternatives, 0..COLI_MAX_TOP_LOGPROBS */
    /* Optional: called with the (penalised) logits of every step before
     * sampling, to set -INFINITY on tokens that must not come next
     * (constrained decoding). If it leaves no finite logit, generation
     * ends as if by an end-of-generation token. */
    void (*logit_filter)(void *user, float *logits, int n_vocab);
    void *logit_filter_user;
} coli_sampling_params;

#define COLI_MAX_TOP_LOGPROBS 20

/* temperature 0.8, top_k 40, top_p 0.95, seed 0, n_predict 128, repeat_last_n 64,
 * every penalty, min_p and logprobs off. */
void coli_sampling_default_params(coli_sampling_params *p);

/* One token and its log-probability: ln softmax(logits)[id] over the
 * model's raw logits (before penalties, filters, temperature). */
typedef struct coli_logprob {
    int32_t id;
    float logprob;
} coli_logprob;

/* Called once per generated token. text/len: the bytes that became complete
 * UTF-8 with this token (possibly empty when a character is split across
 * tokens; not NUL-terminated; valid only during the call). Return nonzero
 * to stop generation (not an error: coli_generate still returns 0). */
typedef int (*coli_token_cb)(void *user, int32_t id, const char *text, size_t len);

typedef struct coli_gen_stats {
    int n_prompt, n_gen;
    double prompt_seconds, gen_seconds;
    int stopped_by_eog; /* 1 if an end-of-generation token ended it */
} coli_gen_stats;

/* Evaluate the prompt (n_prompt >= 1 ids appended at the context's current
 * position), then sample up to n_predict tokens, calling cb (may be NULL)
 * for each. Generation also stops when the context is full. EOG tokens end
 * generation and are not passed to cb. Afterwards the context holds the
 * prompt and every token cb saw. stats may be NULL; it is filled also on
 * failure. Errors: those of coli_eval, COLI_EINVAL for bad sampling params. */
int coli_generate(coli_context *ctx, const int32_t *prompt, int n_prompt, const coli_sampling_params *sp,
                  coli_token_cb cb, void *user, coli_gen_stats *stats);

/* Only inside coli_generate's callback, with sp->logprobs set: the token
 * just sampled in *chosen, and the n most likely of the step
 * (n = min(n_top, sp->top_logprobs), best first, ties: lower id) in
 * top[0..n). Returns n, or COLI_EINVAL (no generation running, logprobs
 * off, NULL ctx/chosen). */
int coli_generate_logprobs(const coli_context *ctx, coli_logprob *chosen, coli_logprob *top, int n_top);

// ----------------------------------------------------------------------------
// files

/* Options of coli_quantize_file_params; all zero/NULL = llama-quantize's defaults. */
typedef struct coli_quantize_params {
    int pure;                    /* 1: every weight in the preset's base type (llama-quantize --pure) */
    const char *output_type;     /* NULL, or the type of output.weight ("Q6_K"; --output-tensor-type) */
    const char *token_embd_type; /* NULL, or the type of token_embd.weight (--token-embedding-type) */
    int n_threads;               /* threads converting rows; <= 0: one per core (same bytes for any) */
    /* Added without breaking the API (NULL = none): called on the calling thread after each
     * tensor is converted or copied, with the tensors and input bytes done so far and in all;
     * the file is written after the last call. */
    void (*progress)(void *user, int64_t n_done, int64_t n_total, uint64_t bytes_done, uint64_t bytes_total);
    void *progress_user;
    /* Added without breaking the API (NULL = none): an importance matrix (llama-imatrix's GGUF or
     * legacy .dat, or `coli imatrix`'s): the IQ grid types need one (IQ2_XXS, IQ2_XS, IQ2_S,
     * IQ3_XXS, IQ1_S, IQ1_M); their presets are accepted with it. */
    const char *imatrix;
} coli_quantize_params;

/* Write a copy of the GGUF at in_path to out_path with its 2-D/3-D weights
 * (token_embd and output included) quantized as llama-quantize does for the
 * preset type: "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
 * "IQ4_NL", "IQ4_XS", "Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S",
 * "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K" (and the aliases "Q3_K", "Q4_K", "Q5_K"
 * for the _M presets). Each weight gets the type llama.cpp's preset picks for
 * it (output.weight Q6_K, some attn_v/ffn_down one step up; docs/gguf.md),
 * or with params->pure the preset's base type. Norms, biases and routers
 * (ffn_gate_inp*) stay as they are. Metadata is copied, general.file_type set
 * to the preset's llama_ftype. The tensor data are byte-identical to
 * llama-quantize's (no imatrix). params may be NULL. Returns 0, COLI_EINVAL
 * (unknown type), COLI_EIO, COLI_EFORMAT, COLI_EUNSUPPORTED (a row length no
 * type of the preset fits) or COLI_ENOMEM. */
int coli_quantize_file_params(const char *in_path, const char *out_path, const char *type,
                              const coli_quantize_params *params);
/* coli_quantize_file_params with params NULL. */
int coli_quantize_file(const char *in_path, const char *out_path, const char *type);
/* 1 if type is a name coli_quantize_file accepts, else 0. */
int coli_quantize_type_known(const char *type);
/* The accepted type names, comma-separated, for messages (static string). */
const char *coli_quantize_type_names(void);

// ----------------------------------------------------------------------------
// routing: traces and heat

/* One token's expert choice in one MoE layer, after its experts ran. */
typedef struct coli_route_event {
    int layer;                  /* layer index */
    int pos;                    /* the token's position in its context */
    int k;                      /* experts per token */
    const int32_t *experts;     /* (k) the chosen experts, best first */
    const float *weights;       /* (k) their weights in the combination */
    const char *const *devices; /* (k) what computed each: "cpu:0", "cuda:1", "inproc" */
} coli_route_event;
/* Called once per (token, layer); ev and its arrays are valid during the call only. */
typedef void (*coli_route_cb)(void *user, const coli_route_event *ev);

/* Call cb for every routed token of ctx from now on (cb NULL: stop). For a
 * context in a coli_batch, the decode steps' events come from the thread that
 * runs the step, which may be another member's. COLI_EINVAL for a NULL ctx. */
int coli_set_route_callback(coli_context *ctx, coli_route_cb cb, void *user);
/* Call cb with the bytes of every copy of ctx's sequence state (a
 * recurrent-state snapshot taken or loaded, prefix-cache rows or a snapshot
 * copied from or into it), on the copying thread (cb NULL: stop). Set it
 * while no other thread uses ctx. `coli serve` counts the copies made under
 * its baton (docs/api.md). COLI_EINVAL for a NULL ctx. */
typedef void (*coli_state_copy_cb)(void *user, size_t bytes);
int coli_context_set_state_copy_callback(coli_context *ctx, coli_state_copy_cb cb, void *user);
/* Write every routed token of every context of m, from now on, to path as
 * one JSON line per (token, layer):
 *   {"ctx":0,"pos":3,"layer":1,"experts":[2,0],"weights":[0.61,0.39],"devices":["cpu:0","inproc"]}
 * (written to a temporary file beside path, renamed over path when the trace
 * stops: path NULL, another path, or coli_model_free; a trace that could not
 * be written is removed). 0, COLI_EINVAL (NULL m), COLI_EIO (cannot create
 * it, or the trace it stops could not be written). */
int coli_dump_routing(coli_model *m, const char *path);
/* Write the heat counted so far (the heat file read at load, if any, plus
 * every token routed since) to path, or to the model's heat_path when path
 * is NULL; atomic (a temporary file renamed). 0, COLI_EINVAL (no path, or a
 * dense model), COLI_EIO. */
int coli_model_heat_save(coli_model *m, const char *path);
/* The heat counted so far (what coli_model_heat_save writes): the selections
 * of expert e in layer l at counts[l * n_expert + e]. *n_layer and *n_expert
 * are always set: both 0 when m counts no heat (no heat_path at load, and no
 * heat saved since). counts may be NULL to ask the shape only; otherwise cap
 * (entries) must hold n_layer * n_expert. Call it between computing calls on
 * m's contexts. 0, COLI_EINVAL (NULL m or shape pointers), COLI_ERANGE (cap too small). */
int coli_model_heat_counts(const coli_model *m, uint64_t *counts, size_t cap, int *n_layer, int *n_expert);

// ----------------------------------------------------------------------------
// scheduler visibility

/* Stats of the expert scheduler (workers, fallbacks) as a JSON document,
 * malloc'd and NUL-terminated; the caller frees it. *json is NULL on failure
 * (COLI_EINVAL for a NULL argument, COLI_ENOMEM). */
int coli_model_stats_json(const coli_model *m, char **json);
/* The human-readable end-of-run summary (per worker lines), malloc'd; the
 * caller frees it. Failures as coli_model_stats_json. */
int coli_model_stats_text(const coli_model *m, char **text);
/* Where each expert of the model at path would go for a --devices string
 * (`coli plan`), as text: per worker experts and bytes, then per layer the
 * owner of each expert. Starts no worker. malloc'd; the caller frees it.
 * Errors: those of opening the model, COLI_EINVAL for a NULL text or path,
 * a bad devices string or a model without experts. */
int coli_plan_text(const char *model_path, const char *devices, char **text);
/* coli_plan_text from routing heat: heat_path (a heat file of this model,
 * NULL = none) and pins ("L:E=DEV,L:*=DEV", NULL = none) decide as at load
 * (docs/scheduler.md, "Placement from heat"); the text adds the share of
 * routed rows each worker is expected to serve. Errors as coli_plan_text,
 * COLI_EFORMAT / COLI_EIO for the heat file, COLI_EINVAL for a bad pin. */
int coli_plan_heat_text(const char *model_path, const char *devices, const char *heat_path, const char *pins,
                        char **text);
/* Check a --devices string (NULL = the default) and pins against each other
 * before a model is loaded: a bad or repeated item ("auto,auto", a GPU twice),
 * a pin naming a worker the devices do not give (the error lists those that
 * exist, by the names `coli plan` shows: cpu:0, cuda:0, remote:0), a pin on a
 * live expert cache, pins with no worker at all. With pins, auto runs its GPU
 * probes. 0, or COLI_EINVAL with *flag the culprit ("--devices" or "--pin"). */
int coli_devices_check(const char *devices, const char *pins, const char **flag);
/* The two above from the fields of p that a load would use (devices,
 * heat_path, pins, xdna, worker_path; p NULL = defaults), so that a plan or
 * a check sees what coli_model_load with the same p would do. */
int coli_plan_params_text(const char *model_path, const coli_model_params *p, char **text);
int coli_devices_check_params(const coli_model_params *p, const char **flag);

#ifdef __cplusplus
}
#endif
#endif /* COLIBRI_H */
