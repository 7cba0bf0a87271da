/*
 * bench_bytes.c - what a decode token must read, from the GGUF's tensor
 * table: the yardstick's denominator (limit tok/s = bandwidth / bytes).
 *
 * Reads only the tensor table and two metadata keys (gguf.h); the model
 * is not loaded. The routed experts count n_expert_used / n_expert of
 * their stacks, the token embedding one row; everything else (attention,
 * norms, routers, shared experts, output head) is read in full.
 */
#include <stdio.h>
#include <string.h>

#include "tools/coli/args.h"
#include "tools/coli/bench.h"
#include "colibri.h"
#include "core/gguf/gguf.h"
#include "core/tensor.h"

/* "<arch>.expert_count" style keys: the architecture prefix from general.architecture. */
static int64_t s_arch_u32(const gguf_file *f, const char *suffix) {
    gguf_str arch;
    if (gguf_get_str(f, "general.architecture", &arch) != 0) return 0;
    char key[128];
    snprintf(key, sizeof key, "%.*s.%s", (int)arch.len, arch.ptr, suffix);
    uint32_t v = 0;
    return gguf_get_u32(f, key, &v) == 0 ? (int64_t)v : 0;
}

int bench_decode_bytes(const char *path, bench_bytes *out) {
    gguf_file *f = NULL;
    memset(out, 0, sizeof *out);
    if (gguf_open(path, &f) != 0) return cli_fail();
    const int64_t n_expert = s_arch_u32(f, "expert_count"), n_used = s_arch_u32(f, "expert_used_count");
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        const int64_t bytes = (int64_t)t->nbytes;
        int64_t read = bytes;
        out->all_tensors += bytes;
        if (strcmp(t->name, "token_embd.weight") == 0) {
            read = t->ne[1] > 0 ? bytes / t->ne[1] : bytes;
        } else if (strstr(t->name, "_exps.") && n_expert > 0) {
            read = bytes / n_expert * n_used;
            snprintf(out->expert_type, sizeof out->expert_type, "%s", coli_dtype_name(t->type));
            out->experts += read;
        } else if (strcmp(t->name, "output.weight") == 0) {
            out->output = bytes;
            if (!out->expert_type[0])
                snprintf(out->expert_type, sizeof out->expert_type, "%s", coli_dtype_name(t->type));
        }
        out->per_token += read;
    }
    /* tied embeddings: the output head is token_embd, read in full */
    if (!gguf_find_tensor(f, "output.weight")) {
        const coli_tensor *e = gguf_find_tensor(f, "token_embd.weight");
        if (e) { /* one row of it is counted above already */
            out->output = (int64_t)e->nbytes;
            out->per_token += out->output - (e->ne[1] > 0 ? out->output / e->ne[1] : 0);
        }
    }
    gguf_close(&f);
    return 0;
}
