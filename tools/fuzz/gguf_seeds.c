/*
 * gguf_seeds.c - write the fuzzer's seed corpus: small valid GGUF files
 * (every value type, nested arrays, each tensor type, v2 and v3, a custom
 * alignment) into the directory given as argv[1].
 */
#include <stdio.h>
#include <string.h>

#include "colibri.h"
#include "core/gguf/gguf.h"
#include "tests/gguf_bytes.h"

static int s_save(const char *dir, const char *name, const void *p, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(p, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "gguf_seeds: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

/* One small tensor of each supported type, written by the real writer. */
static int s_write_tensor_types(const char *dir, uint32_t alignment, const char *name) {
    static uint8_t data[2 * 256 * 4];
    static const coli_dtype types[] = {COLI_F32,    COLI_F16,   COLI_BF16,  COLI_Q8_0,    COLI_Q4_0,
                                       COLI_Q4_1,   COLI_Q5_0,  COLI_Q5_1,  COLI_IQ4_NL,  COLI_Q2_K,
                                       COLI_Q3_K,   COLI_Q4_K,  COLI_Q5_K,  COLI_Q6_K,    COLI_IQ4_XS,
                                       COLI_MXFP4,  COLI_TQ1_0, COLI_TQ2_0, COLI_IQ2_XXS, COLI_IQ3_XXS,
                                       COLI_IQ2_XS, COLI_IQ3_S, COLI_IQ2_S, COLI_IQ1_S,   COLI_IQ1_M};
    static const char *const tokens[] = {"<unk>", "<s>", "</s>", "a", "b"};
    char path[1024], tname[32];
    gguf_writer *w = gguf_writer_new();
    int rc = w ? 0 : 1;
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 13);
    if (alignment != 32 && !rc) rc = gguf_writer_set_u32(w, "general.alignment", alignment);
    if (!rc) rc = gguf_writer_set_str(w, "general.architecture", "llama");
    if (!rc) rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 5);
    if (!rc) rc = gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f);
    for (size_t t = 0; !rc && t < sizeof types / sizeof types[0]; t++) {
        /* one block per row (F32: 32 values), two rows */
        const int64_t n0 = coli_dtype_block_elems(types[t]) == COLI_QK_K ? COLI_QK_K : 32;
        int64_t ne[2] = {n0, 2};
        snprintf(tname, sizeof tname, "blk.%zu.w", t);
        rc = gguf_writer_add_tensor(w, tname, types[t], 2, ne, data, coli_row_bytes(types[t], n0) * 2);
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!rc) rc = gguf_writer_write(w, path);
    if (rc) fprintf(stderr, "gguf_seeds: %s\n", coli_last_error());
    gguf_writer_free(&w);
    return rc != 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gguf_seeds DIR\n");
        return 2;
    }
    int bad = 0;
    gguf_bytes b = {0};
    gb_all_types(&b, 3);
    bad |= s_save(argv[1], "all_types_v3.gguf", b.p, b.n);
    gb_free(&b);
    gb_all_types(&b, 2);
    bad |= s_save(argv[1], "all_types_v2.gguf", b.p, b.n);
    gb_free(&b);
    gb_header(&b, 3, 0, 0);
    bad |= s_save(argv[1], "empty_v3.gguf", b.p, b.n);
    gb_free(&b);
    bad |= s_write_tensor_types(argv[1], 32, "tensor_types.gguf");
    bad |= s_write_tensor_types(argv[1], 64, "tensor_types_align64.gguf");
    return bad;
}
