/*
 * test_model_mutations.c - hostile metadata, every family: each numeric key
 * of each family's tiny model is set to values a broken or hostile file may
 * carry (0, 1, a large count, all bits set; for floats 0, -1, NaN, inf) and
 * each array is cut to one element. Every such file is loaded in a child
 * process (address space capped, so a size the file made up cannot take the
 * machine; a time limit, so a loop it made up cannot hang the suite) and
 * must either be refused with one line, or load and answer a short prompt
 * (logits without a NaN, or a one-line refusal of its own). A crash, a hang,
 * an abort, a multi-line or empty error fails, naming the key and the value.
 *
 * The families' own tests refuse chosen keys with chosen messages; this one
 * walks all of them, the keys nobody thought of included.
 */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#include "colibri.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "tests/gguf_edit.h"
#include "tests/gptoss_util.h"
#include "tests/ref_models.h"
#include "tests/sched_util.h"

#define CHILD_SECONDS 20
#define CHILD_ADDRESS_SPACE (6ULL << 30)

#if defined(__SANITIZE_ADDRESS__)
/* Under ASan (make test-sanitize) the address space cannot be capped (the
 * shadow maps terabytes), so the allocator is: a size a hostile file made
 * up fails as malloc would (NULL), above 6 GiB, instead of aborting; and
 * a sanitizer's report aborts the child (exit code 1 would read as "refused"). */
#define CAP_ADDRESS_SPACE 0
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1:max_allocation_size_mb=6144:abort_on_error=1";
}
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "abort_on_error=1:halt_on_error=1"; }
#else
#define CAP_ADDRESS_SPACE 1
#endif

enum {
    OUTCOME_RAN = 0,
    OUTCOME_REFUSED = 1,
    OUTCOME_BAD_MESSAGE = 2,
    OUTCOME_BAD_LOGITS = 3
};

enum {
    TENSOR_KEPT,
    TENSOR_DROPPED,
    TENSOR_SWAPPED,
    TENSOR_SHRUNK
};

/* One hostile change: to a key, or to a tensor. */
typedef struct mutation {
    int64_t key;    /* index of the key in the source file, -1: none */
    int is_float;   /* set an F32 (else a U32) ... */
    double value;   /* ... to this */
    int cut_array;  /* or: the array cut to its first element */
    int64_t tensor; /* index of the tensor, -1: none */
    int how;        /* TENSOR_*: left out, first two dims swapped, outermost dim one less (its data cut) */
} mutation;

static const char *const k_tensor_how[] = {"kept", "left out", "with its first two dims swapped",
                                           "one row (outermost) short"};

/* A one-line, non-empty message: what every refusal must be. */
static int s_one_line(const char *msg) { return msg && *msg && !strchr(msg, '\n'); }

/* Load path, answer a 5-token prompt; the child's exit code (OUTCOME_*). */
static int s_try_model(const char *path) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    mp.n_threads = 1;
    mp.n_ctx_max = 64;
    coli_model *m = NULL;
    if (coli_model_load(path, &mp, &m) != 0)
        return s_one_line(coli_last_error()) ? OUTCOME_REFUSED : OUTCOME_BAD_MESSAGE;
    coli_model_info info;
    coli_model_get_info(m, &info);
    int rc = OUTCOME_RAN;
    coli_context *ctx = NULL;
    float *lg = malloc((size_t)(info.n_vocab > 0 ? info.n_vocab : 1) * sizeof *lg);
    int32_t ids[5];
    for (int i = 0; i < 5; i++) ids[i] = info.n_vocab > 0 ? (int32_t)((7 + 13 * i) % info.n_vocab) : 0;
    if (!lg) {
        rc = OUTCOME_REFUSED;
    } else if (coli_context_new(m, NULL, &ctx) != 0 || coli_eval(ctx, ids, 5, lg, 0) != 0) {
        rc = s_one_line(coli_last_error()) ? OUTCOME_REFUSED : OUTCOME_BAD_MESSAGE;
    } else {
        for (int v = 0; v < info.n_vocab; v++)
            if (isnan(lg[v])) rc = OUTCOME_BAD_LOGITS; /* inf may be a hostile scale's honest result; NaN is not */
    }
    free(lg);
    coli_context_free(&ctx);
    coli_model_free(&m);
    return rc;
}

/* f with mutation mu applied, written to dst (tests/gguf_edit.h); 0 or an error. */
static int s_write_mutated(const gguf_file *f, const mutation *mu, const char *dst) {
    char key[256] = "";
    if (mu->key >= 0) {
        gguf_str k = gguf_key_name(f, mu->key);
        snprintf(key, sizeof key, "%.*s", (int)k.len, k.ptr);
    }
    const char *tensor = mu->tensor >= 0 ? gguf_tensor(f, mu->tensor)->name : NULL;
    gguf_edit e = {.cut_key = mu->cut_array ? key : NULL,
                   .set_key = mu->key >= 0 && !mu->cut_array ? key : NULL,
                   .v = mu->value,
                   .f32 = mu->is_float,
                   .drop_tensor = mu->how == TENSOR_DROPPED ? tensor : NULL,
                   .swap = mu->how == TENSOR_SWAPPED ? tensor : NULL,
                   .shrink = mu->how == TENSOR_SHRUNK ? tensor : NULL};
    return gguf_edit_write(f, dst, &e);
}

/* Run mutation mu of f in a child; its outcome, or -SIGNAL, or -1000 on a hang. */
static int s_run_child(const gguf_file *f, const mutation *mu, const char *dst) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        struct rlimit as = {CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE};
        if (CAP_ADDRESS_SPACE) setrlimit(RLIMIT_AS, &as);
        stderr_quiet();
        if (s_write_mutated(f, mu, dst) != 0) _exit(OUTCOME_REFUSED); /* the writer refused the value itself */
        _exit(s_try_model(dst));
    }
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int st = 0;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > CHILD_SECONDS) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return -1000;
        }
        usleep(2000);
    }
}

/* The values tried on a key of type t (n of them into v, floats or not). */
static int s_values(gguf_type t, double *v, int *is_float) {
    static const double ints[] = {0, 1, 100000, 4294967295.0};
    static const double floats[] = {0, -1, NAN, INFINITY};
    const double *src = NULL;
    int n = 0;
    *is_float = 0;
    switch (t) {
    case GGUF_UINT8:
    case GGUF_INT8:
    case GGUF_UINT16:
    case GGUF_INT16:
    case GGUF_UINT32:
    case GGUF_INT32:
    case GGUF_UINT64:
    case GGUF_INT64: src = ints, n = 4; break;
    case GGUF_FLOAT32:
    case GGUF_FLOAT64: src = floats, n = 4, *is_float = 1; break;
    default: return 0;
    }
    memcpy(v, src, (size_t)n * sizeof *v);
    return n;
}

static const char *s_outcome_name(int o) {
    static char buf[48];
    if (o == -1000) return "hung";
    if (o < 0) {
        snprintf(buf, sizeof buf, "killed by signal %d (%s)", -o, strsignal(-o));
        return buf;
    }
    if (o == OUTCOME_BAD_MESSAGE) return "failed with an empty or multi-line message";
    if (o == OUTCOME_BAD_LOGITS) return "ran and gave NaN logits";
    snprintf(buf, sizeof buf, "exit %d", o);
    return buf;
}

/* Run mu; a failure is reported with what (the change, in words). 1 when it failed. */
static int s_check(const gguf_file *f, const mutation *mu, const char *path, const char *dst, const char *what,
                   int *ran) {
    int o = s_run_child(f, mu, dst);
    *ran += o == OUTCOME_RAN;
    if (o == OUTCOME_RAN || o == OUTCOME_REFUSED) return 0;
    cr_expect_fail("%s: %s: %s", path, what, s_outcome_name(o));
    return 1;
}

/* The key mutations of key i (up to 4 into mu). */
static int s_key_mutations(const gguf_file *f, int64_t i, mutation *mu) {
    gguf_str k = gguf_key_name(f, i);
    if (k.len >= 10 && !memcmp(k.ptr, "tokenizer.", 10) && gguf_kv_type(f, i) == GGUF_ARRAY)
        return 0; /* the vocabulary's arrays: test_tokenizer's */
    int n = 0;
    if (gguf_kv_type(f, i) == GGUF_ARRAY) {
        char name[256];
        gguf_type at;
        uint64_t len = 0;
        const void *data = NULL;
        snprintf(name, sizeof name, "%.*s", (int)k.len, k.ptr);
        if (gguf_get_arr(f, name, &at, &len, &data) == 0 && len > 1)
            mu[n++] = (mutation){.key = i, .cut_array = 1, .tensor = -1};
        return n;
    }
    double v[4];
    int is_float = 0, nv = s_values(gguf_kv_type(f, i), v, &is_float);
    for (int j = 0; j < nv; j++) mu[n++] = (mutation){.key = i, .is_float = is_float, .value = v[j], .tensor = -1};
    return n;
}

/* A tensor's kind: its name with the layer number taken out ("blk.#.ffn_up_exps.weight"). */
static void s_tensor_kind(const char *name, char *kind, size_t cap) {
    int layer, used = 0;
    if (sscanf(name, "blk.%d.%n", &layer, &used) == 1 && used > 0)
        snprintf(kind, cap, "blk.#.%s", name + used);
    else
        snprintf(kind, cap, "%s", name);
}

/* Every mutation of the model at path: none may crash, hang or misreport.
 * Keys: each one. Tensors: the first of each kind (layer 0's, mostly). */
static void s_mutate_all(const char *path) {
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(path, &f), 0, "%s", coli_last_error());
    char dst[4200], what[512];
    snprintf(dst, sizeof dst, "%s/mutated-%d.gguf", s_build(), (int)getpid());
    int tried = 0, ran = 0, failures = 0;
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        mutation mu[4];
        gguf_str k = gguf_key_name(f, i);
        for (int j = 0, n = s_key_mutations(f, i, mu); j < n; j++, tried++) {
            if (mu[j].cut_array)
                snprintf(what, sizeof what, "%.*s cut to one element", (int)k.len, k.ptr);
            else
                snprintf(what, sizeof what, "%.*s = %g", (int)k.len, k.ptr, mu[j].value);
            failures += s_check(f, &mu[j], path, dst, what, &ran);
        }
    }
    char(*kinds)[128] = calloc((size_t)gguf_n_tensors(f), sizeof *kinds);
    cr_assert_not_null(kinds);
    int n_kinds = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        char kind[128];
        s_tensor_kind(t->name, kind, sizeof kind);
        int seen = 0;
        for (int j = 0; j < n_kinds && !seen; j++) seen = !strcmp(kinds[j], kind);
        if (seen) continue;
        snprintf(kinds[n_kinds++], sizeof kinds[0], "%s", kind);
        for (int how = TENSOR_DROPPED; how <= TENSOR_SHRUNK; how++) {
            if (how == TENSOR_SWAPPED && (t->n_dims < 2 || t->ne[0] == t->ne[1])) continue;
            if (how == TENSOR_SHRUNK && t->ne[t->n_dims - 1] < 2) continue;
            mutation mu = {.key = -1, .tensor = i, .how = how};
            snprintf(what, sizeof what, "tensor %s %s", t->name, k_tensor_how[how]);
            failures += s_check(f, &mu, path, dst, what, &ran);
            tried++;
        }
    }
    free(kinds);
    unlink(dst);
    gguf_close(&f);
    cr_log_info("%s: %d hostile files, %d ran, %d refused, %d failures", path, tried, ran, tried - ran - failures,
                failures);
    cr_assert_gt(tried, 10, "%s: too few keys and tensors to mutate", path);
}

/* $COLI_BUILD/ref/file, made once by `tests/GEN` (gen: "gen_x.py ARGS '%s'", %s the output). */
static void s_generated(const char *file, const char *gen) {
    char dir[4096], out[4200], cmd[9000], tail[4400];
    s_require_shared();
    const char *py = s_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    int fd = s_lock_dir("ref", file, dir, sizeof dir, out, sizeof out);
    if (!s_exists(out)) {
        snprintf(tail, sizeof tail, gen, out);
        snprintf(cmd, sizeof cmd, "COLI_SHARED='%s' %s tests/%s", s_shared(), py, tail);
        s_run_or_fail(cmd);
    }
    s_unlock_dir(fd);
    s_mutate_all(out);
}

static void s_gen_model_fixture(const char *file) { s_mutate_all(sched_fixture(file)); }

static void s_shared_model(const char *file) {
    char out[4096];
    s_require_shared();
    s_ref_model(file, out, sizeof out);
    s_mutate_all(out);
}

TestSuite(model_mutations, .timeout = 600);

Test(model_mutations, llama_moe) { s_gen_model_fixture("tiny-llama-moe-f32.gguf"); }
Test(model_mutations, olmoe) { s_gen_model_fixture("tiny-olmoe-f32.gguf"); }
Test(model_mutations, qwen2moe) { s_gen_model_fixture("tiny-qwen2moe-f32.gguf"); }
Test(model_mutations, deepseek2) { s_shared_model("tiny-deepseek2-f32.gguf"); }
Test(model_mutations, qwen3moe) { s_shared_model("tiny-qwen3moe-f32.gguf"); }
Test(model_mutations, gptoss) { s_generated("tiny-gptoss-f32.gguf", "gen_gptoss.py '%s'"); }
Test(model_mutations, glm4moe) { s_generated("tiny-glm4moe-f32.gguf", "gen_glm4moe.py '%s'"); }
Test(model_mutations, llama4) { s_generated("tiny-llama4-f32.gguf", "gen_llama4.py '%s'"); }
Test(model_mutations, minimax_m2) { s_generated("tiny-minimax-m2-f32.gguf", "gen_minimax_m2.py '%s'"); }
Test(model_mutations, deepseek4) { s_generated("tiny-ds4-f32.gguf", "gen_ds4.py '%s'"); }
Test(model_mutations, deepseek32) { s_generated("tiny-deepseek32.gguf", "gen_dsa.py deepseek32 '%s'"); }
Test(model_mutations, glm_dsa) { s_generated("tiny-glm-dsa.gguf", "gen_dsa.py glm-dsa '%s'"); }
Test(model_mutations, qwen3next) { s_generated("tiny-qwen3next-f32.gguf", "gen_qwen3next.py qwen3next '%s'"); }
Test(model_mutations, qwen35moe) { s_generated("tiny-qwen35moe-f32.gguf", "gen_qwen3next.py qwen35moe '%s'"); }
Test(model_mutations, kimi_k3) { s_generated("tiny-kimi-k3-f32.gguf", "gen_kimi.py kimi-k3 '%s'"); }
Test(model_mutations, kimi_linear) { s_generated("tiny-kimi-linear-f32.gguf", "gen_kimi.py kimi-linear '%s'"); }
/* Quantized files: block types, scales and row sizes meet the same changes. */
Test(model_mutations, llama_moe_q4_0) { s_gen_model_fixture("tiny-llama-moe-q4_0.gguf"); }
Test(model_mutations, kquant_q3_k_m) { s_shared_model("tiny-kquant-q3_k_m.gguf"); }
Test(model_mutations, kquant_iq4_xs) { s_shared_model("tiny-kquant-iq4_xs.gguf"); }
Test(model_mutations, gptoss_mxfp4) {
    char path[4096];
    gptoss_model_mxfp4(path, sizeof path);
    s_mutate_all(path);
}
