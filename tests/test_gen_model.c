/*
 * test_gen_model.c - bin/gen_model writes GGUF files that our reader
 * accepts, with the tensors, shapes and metadata of make_models.py, and the
 * same bytes for the same arguments.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cli_run.h"
#include "colibri.h"
#include "core/gguf/gguf.h"

static char s_dir[64];
static char s_gen[512];

static void setup(void) {
    strcpy(s_dir, "/tmp/coli-gen-XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
    cli_build_path(s_gen, sizeof s_gen, "bin/gen_model");
    if (!cli_file_exists(s_gen)) cr_skip_test("%s not built", s_gen);
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(gen_model, .init = setup, .fini = teardown);

static gguf_file *open_in_dir(const char *file) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", s_dir, file);
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f);
    cr_assert_eq(rc, 0, "gguf_open(%s): %s", path, coli_last_error());
    return f;
}

static uint32_t get_u32(const gguf_file *f, const char *key) {
    uint32_t v = 0;
    cr_assert_eq(gguf_get_u32(f, key, &v), 0, "%s: %s", key, coli_last_error());
    return v;
}

static void expect_tensor(const gguf_file *f, const char *name, coli_dtype type, int n_dims, int64_t ne0, int64_t ne1,
                          int64_t ne2) {
    const coli_tensor *t = gguf_find_tensor(f, name);
    cr_assert_not_null(t, "tensor %s missing", name);
    cr_expect_eq(t->type, type, "%s: type %d, want %d", name, t->type, type);
    cr_expect_eq(t->n_dims, n_dims, "%s: n_dims %d, want %d", name, t->n_dims, n_dims);
    cr_expect_eq(t->ne[0], ne0, "%s: ne0 %lld want %lld", name, (long long)t->ne[0], (long long)ne0);
    cr_expect_eq(t->ne[1], ne1, "%s: ne1 %lld want %lld", name, (long long)t->ne[1], (long long)ne1);
    cr_expect_eq(t->ne[2], ne2, "%s: ne2 %lld want %lld", name, (long long)t->ne[2], (long long)ne2);
}

static void gen_all(void) {
    char *argv[] = {s_gen, "--all", s_dir, NULL};
    cli_result r = cli_run(argv);
    cr_assert_eq(r.status, 0, "gen_model --all: status %d, stderr: %s", r.status, r.err);
    cli_result_free(&r);
}

Test(gen_model, fixtures_llama_moe_layout) {
    gen_all();
    gguf_file *f = open_in_dir("tiny-llama-moe-f32.gguf");
    gguf_str arch;
    cr_assert_eq(gguf_get_str(f, "general.architecture", &arch), 0);
    cr_expect(arch.len == 5 && memcmp(arch.ptr, "llama", 5) == 0);
    cr_expect_eq(get_u32(f, "llama.embedding_length"), 64);
    cr_expect_eq(get_u32(f, "llama.block_count"), 2);
    cr_expect_eq(get_u32(f, "llama.attention.head_count"), 4);
    cr_expect_eq(get_u32(f, "llama.attention.head_count_kv"), 2);
    cr_expect_eq(get_u32(f, "llama.expert_count"), 4);
    cr_expect_eq(get_u32(f, "llama.expert_used_count"), 2);
    cr_expect_eq(get_u32(f, "llama.context_length"), 256);
    cr_expect_eq(get_u32(f, "llama.rope.dimension_count"), 16);
    uint32_t n_vocab = get_u32(f, "llama.vocab_size");
    expect_tensor(f, "token_embd.weight", COLI_F32, 2, 64, n_vocab, 1);
    expect_tensor(f, "output.weight", COLI_F32, 2, 64, n_vocab, 1);
    expect_tensor(f, "output_norm.weight", COLI_F32, 1, 64, 1, 1);
    expect_tensor(f, "blk.1.attn_k.weight", COLI_F32, 2, 64, 32, 1);
    expect_tensor(f, "blk.1.ffn_gate_inp.weight", COLI_F32, 2, 64, 4, 1);
    expect_tensor(f, "blk.1.ffn_gate_exps.weight", COLI_F32, 3, 64, 128, 4);
    expect_tensor(f, "blk.1.ffn_down_exps.weight", COLI_F32, 3, 128, 64, 4);
    cr_expect_null(gguf_find_tensor(f, "blk.2.attn_q.weight"));
    cr_expect_eq(gguf_n_tensors(f), 3 + 2 * 10);
    gguf_close(&f);
}

Test(gen_model, fixtures_quantized_variants) {
    gen_all();
    static const struct {
        const char *file;
        coli_dtype t;
        uint32_t ftype;
    } v[] = {
        {"tiny-llama-moe-f16.gguf", COLI_F16, 1},
        {"tiny-llama-moe-q8_0.gguf", COLI_Q8_0, 7},
        {"tiny-llama-moe-q4_0.gguf", COLI_Q4_0, 2},
    };
    for (size_t i = 0; i < 3; i++) {
        gguf_file *f = open_in_dir(v[i].file);
        cr_expect_eq(get_u32(f, "general.file_type"), v[i].ftype, "%s", v[i].file);
        expect_tensor(f, "token_embd.weight", v[i].t, 2, 64, get_u32(f, "llama.vocab_size"), 1);
        expect_tensor(f, "blk.0.ffn_up_exps.weight", v[i].t, 3, 64, 128, 4);
        /* norms and routers stay F32 */
        expect_tensor(f, "blk.0.ffn_gate_inp.weight", COLI_F32, 2, 64, 4, 1);
        expect_tensor(f, "blk.0.attn_norm.weight", COLI_F32, 1, 64, 1, 1);
        /* llama-quantize's order: non-layer tensors first, then by layer and name */
        const coli_tensor *first = gguf_tensor(f, 0);
        cr_expect_str_eq(first->name, "output.weight");
        gguf_close(&f);
    }
}

Test(gen_model, fixtures_other_archs) {
    gen_all();
    gguf_file *f = open_in_dir("tiny-llama-dense-f32.gguf");
    cr_expect_eq(gguf_find_key(f, "llama.expert_count"), -1);
    cr_expect_null(gguf_find_tensor(f, "blk.0.ffn_gate_inp.weight"));
    expect_tensor(f, "blk.0.ffn_down.weight", COLI_F32, 2, 128, 64, 1);
    gguf_close(&f);

    f = open_in_dir("tiny-olmoe-f32.gguf");
    cr_expect_eq(get_u32(f, "olmoe.attention.head_count_kv"), get_u32(f, "olmoe.attention.head_count"));
    expect_tensor(f, "blk.0.attn_q_norm.weight", COLI_F32, 1, 64, 1, 1);
    expect_tensor(f, "blk.0.attn_k_norm.weight", COLI_F32, 1, 64, 1, 1);
    gguf_str s;
    cr_assert_eq(gguf_get_str(f, "tokenizer.ggml.pre", &s), 0);
    cr_expect(s.len == 4 && memcmp(s.ptr, "olmo", 4) == 0);
    gguf_close(&f);

    f = open_in_dir("tiny-qwen2moe-f32.gguf");
    uint32_t sh = get_u32(f, "qwen2moe.expert_shared_feed_forward_length");
    uint32_t ff = get_u32(f, "qwen2moe.expert_feed_forward_length");
    expect_tensor(f, "blk.1.ffn_gate_inp_shexp.weight", COLI_F32, 1, 64, 1, 1);
    expect_tensor(f, "blk.1.ffn_down_shexp.weight", COLI_F32, 2, sh, 64, 1);
    expect_tensor(f, "blk.1.ffn_up_exps.weight", COLI_F32, 3, 64, ff, get_u32(f, "qwen2moe.expert_count"));
    expect_tensor(f, "blk.1.attn_v.bias", COLI_F32, 1, 32, 1, 1);
    gguf_close(&f);
}

static int token_index(const gguf_file *f, uint64_t n, const char *text, size_t len) {
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s;
        if (gguf_arr_str(f, "tokenizer.ggml.tokens", i, &s) == 0 && s.len == len && memcmp(s.ptr, text, len) == 0)
            return (int)i;
    }
    return -1;
}

Test(gen_model, spm_vocabulary) {
    gen_all();
    gguf_file *f = open_in_dir("tiny-llama-moe-f32.gguf");
    gguf_type et;
    uint64_t n;
    const void *data;
    cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &n, &data), 0);
    cr_expect_eq(n, get_u32(f, "llama.vocab_size"));
    int32_t types[259]; /* metadata arrays are packed, not aligned: copy */
    cr_assert_geq(n, 259);
    memcpy(types, data, sizeof types);
    cr_expect_eq(types[1], 3);
    cr_expect_eq(types[3], 6);
    cr_expect_eq(types[258], 6);
    cr_expect_eq(token_index(f, n, "<s>", 3), 1);
    cr_expect_eq(token_index(f, n, "<0x0A>", 6), 3 + 10);
    cr_expect_geq(token_index(f, n, "\xe2\x96\x81the", 6), 259);
    cr_expect_geq(token_index(f, n, "\xe2\x96\x81Once", 7), 259, "capitalised words are in the vocabulary");
    gguf_close(&f);
}

Test(gen_model, bpe_merges_are_consistent) {
    gen_all();
    gguf_file *f = open_in_dir("tiny-olmoe-f32.gguf");
    gguf_type et;
    uint64_t n_tok, n_merge;
    const void *data;
    cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n_tok, &data), 0);
    cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.merges", &et, &n_merge, &data), 0);
    cr_expect_eq(n_tok, 1 + 256 + n_merge);
    for (uint64_t i = 0; i < n_merge; i++) {
        gguf_str m;
        cr_assert_eq(gguf_arr_str(f, "tokenizer.ggml.merges", i, &m), 0);
        const char *sp = memchr(m.ptr, ' ', m.len);
        cr_assert_not_null(sp);
        size_t l = (size_t)(sp - m.ptr), r = m.len - l - 1;
        char joined[256];
        cr_assert_lt(l + r, sizeof joined);
        memcpy(joined, m.ptr, l);
        memcpy(joined + l, sp + 1, r);
        cr_expect_geq(token_index(f, n_tok, m.ptr, l), 0, "merge %llu: left part not a token", (unsigned long long)i);
        cr_expect_geq(token_index(f, n_tok, sp + 1, r), 0, "merge %llu: right part not a token", (unsigned long long)i);
        cr_expect_eq(token_index(f, n_tok, joined, l + r), (int)(257 + i), "merge %llu: result id",
                     (unsigned long long)i);
    }
    gguf_close(&f);
}

static cli_result gen_one(const char *out, const char *seed) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", s_dir, out);
    char *argv[] = {s_gen,      "--arch", "qwen2moe", "--dim", "32",     "--heads",    "2",  "--kv-heads", "1",
                    "--layers", "1",      "--ffn",    "32",    "--seed", (char *)seed, path, NULL};
    return cli_run(argv);
}

Test(gen_model, same_seed_same_bytes) {
    cli_result a = gen_one("a.gguf", "7"), b = gen_one("b.gguf", "7"), c = gen_one("c.gguf", "8");
    cr_assert_eq(a.status, 0, "%s", a.err);
    cr_assert_eq(b.status, 0, "%s", b.err);
    cr_assert_eq(c.status, 0, "%s", c.err);
    char pa[256], pb[256], pc[256];
    snprintf(pa, sizeof pa, "%s/a.gguf", s_dir);
    snprintf(pb, sizeof pb, "%s/b.gguf", s_dir);
    snprintf(pc, sizeof pc, "%s/c.gguf", s_dir);
    size_t la = 0, lb = 0, lc = 0;
    char *da = cli_slurp(pa, &la), *db = cli_slurp(pb, &lb), *dc = cli_slurp(pc, &lc);
    cr_assert(da && db && dc);
    cr_expect(la == lb && memcmp(da, db, la) == 0, "same seed, different bytes");
    cr_expect(la == lc && memcmp(da, dc, la) != 0, "different seed, same bytes");
    free(da);
    free(db);
    free(dc);
    cli_result_free(&a);
    cli_result_free(&b);
    cli_result_free(&c);
}

static void expect_usage_error(char **argv, const char *needle) {
    cli_result r = cli_run(argv);
    cr_expect_eq(r.status, 2, "%s: status %d, want 2 (stderr: %s)", needle, r.status, r.err);
    cr_expect_not_null(strstr(r.err, needle), "stderr does not name %s: %s", needle, r.err);
    cr_expect_eq(cli_count_lines(r.err), 1, "one line expected: %s", r.err);
    cli_result_free(&r);
}

Test(gen_model, bad_arguments) {
    char out[256];
    snprintf(out, sizeof out, "%s/x.gguf", s_dir);
    char *a1[] = {s_gen, "--arch", "gpt9", out, NULL};
    char *a2[] = {s_gen, "--arch", "llama", "--dim", "abc", out, NULL};
    char *a3[] = {s_gen, "--arch", "llama", "--top-k", "9", out, NULL};
    char *a4[] = {s_gen, "--arch", "olmoe", "--dense", out, NULL};
    char *a5[] = {s_gen, "--arch", "llama", "--frobnicate", "1", out, NULL};
    char *a6[] = {s_gen, "--arch", "llama", "--dim", NULL};
    char *a7[] = {s_gen, "--arch", "llama", "--dim", "-64", out, NULL};
    expect_usage_error(a1, "--arch");
    expect_usage_error(a2, "--dim");
    expect_usage_error(a3, "--top-k");
    expect_usage_error(a4, "--dense");
    expect_usage_error(a5, "--frobnicate");
    expect_usage_error(a6, "--dim");
    expect_usage_error(a7, "--dim");
    cr_expect(!cli_file_exists(out), "no file written on a usage error");
}

/* The bytes gen_model wrote before it streamed its output (it then held the
 * whole model in memory): the streamed writer must give the same files. */
static const struct {
    const char *file, *sha256, *args;
} s_recorded[] = {
    {"tiny-llama-dense-f32.gguf", "620c3e0268af874f22e5bc0bef2a9ee5f6a8d8445c055cbd363066659f3f290c", NULL},
    {"tiny-llama-moe-f16.gguf", "b23c412753918725bc96761d46922e1c2a6409f5c988cdb29d3574e98b75f7f3", NULL},
    {"tiny-llama-moe-f32.gguf", "0d0920114460bd1ed8f05af5da63528dc80d35328c2a489f266342d26adf3bfc", NULL},
    {"tiny-llama-moe-q4_0.gguf", "8d815be35b38b6290d4c74125b87bd0083cd60b3ecefb2626d733fc750fe754e", NULL},
    {"tiny-llama-moe-q8_0.gguf", "bec8efbe5fbb3c105118d27084db3dff7437d62121a8b53a52889e99644bcb28", NULL},
    {"tiny-olmoe-f32.gguf", "4d2dac6d06c7c4ed7228fcbbf3a3b8cd69b8e3df7f462d235eb47cfa5eea5fb7", NULL},
    {"tiny-qwen2moe-f32.gguf", "2e73345ad8aecd5e5014529404e62c38644fd01517ceee1587e40ab2f827cb2a", NULL},
    {"q7.gguf", "94c6f5a54aceaf74d91b1545f6f28823f2c47c919d89788622d3459b3925d7ad",
     "--arch qwen2moe --dim 32 --heads 2 --kv-heads 1 --layers 1 --ffn 32 --seed 7"},
    {"o5q4.gguf", "af0d80eb273d97857abeaa820f1fe7a397968e25b6393065016c2237fcdce19e",
     "--arch olmoe --dtype Q4_0 --dim 64 --experts 6 --top-k 2 --ffn 96 --seed 5"},
    {"l9q8.gguf", "ce1e15537a907da10c1732ba307b86d7d8a0764a5ab30e2c3ca5fde7a40613f0",
     "--arch llama --dtype Q8_0 --dim 96 --heads 3 --kv-heads 1 --layers 3 --ffn 64 --experts 5 --seed 9"},
    {"q11bf16.gguf", "987f2e31c53c08f68b33428155ead466e17734abb434633c70e9f9be191e8bae",
     "--arch qwen2moe --dtype BF16 --dim 32 --heads 2 --kv-heads 1 --layers 2 --ffn 32 --seed 11"},
    {"d12f16.gguf", "0cce46c06fffe45060be6cf4b329f5c6394a6ebfb0af69e15d24ffdd56909ae3",
     "--arch llama --dense --dtype F16 --dim 32 --heads 2 --kv-heads 2 --layers 1 --ffn 64 --seed 12"},
};

Test(gen_model, streamed_output_matches_the_recorded_bytes) {
    gen_all();
    char cmd[1024], out[256];
    for (size_t i = 0; i < sizeof s_recorded / sizeof s_recorded[0]; i++) {
        if (s_recorded[i].args) {
            snprintf(cmd, sizeof cmd, "'%s' %s '%s/%s'", s_gen, s_recorded[i].args, s_dir, s_recorded[i].file);
            cr_assert_eq(system(cmd), 0, "%s", cmd);
        }
        snprintf(cmd, sizeof cmd, "sha256sum '%s/%s'", s_dir, s_recorded[i].file);
        cr_assert_eq(cli_shell(cmd, out, sizeof out), 0, "%s", cmd);
        cr_expect_eq(strncmp(out, s_recorded[i].sha256, 64), 0, "%s: sha256 %.64s, recorded %s", s_recorded[i].file,
                     out, s_recorded[i].sha256);
    }
}

/* Run gen_model and return the child's peak resident set in KiB. */
static long run_peak_rss_kib(char *const argv[]) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    cr_assert_eq(wait4(pid, &status, 0, &ru), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "gen_model failed: status %d", status);
    return ru.ru_maxrss;
}

/* A 430 MB model: the writer that held the model peaked at the file's size;
 * the streamed one holds a slice of rows (4 MiB) and the vocabulary. */
Test(gen_model, peak_memory_is_far_below_the_file_size) {
    char path[256];
    snprintf(path, sizeof path, "%s/big.gguf", s_dir);
    char *argv[] = {s_gen,      "--arch", "llama",   "--dim", "1024",       "--ffn", "1024", "--experts", "16",
                    "--layers", "2",      "--heads", "8",     "--kv-heads", "2",     path,   NULL};
    long peak_kib = run_peak_rss_kib(argv);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_gt(st.st_size, 400L << 20, "file is %lld bytes", (long long)st.st_size);
    cr_expect_lt(peak_kib, 64L << 10, "peak RSS %ld KiB for a %lld-byte file", peak_kib, (long long)st.st_size);
}
