/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader.
 *
 * Every input goes through gguf_open_memory; whatever it accepts is walked
 * through every accessor (each key by its typed getter, every array element
 * and string, every tensor's first and last data byte, its first and last
 * row dequantized). The sanitizers turn
 * any out-of-bounds read into a crash; an accessor that disagrees with the
 * index traps. Built and run by `make fuzz` (see docs/gguf.md).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "core/gguf/gguf.h"
#include "core/quant/quant.h"
#include "tests/gguf_bytes.h"

/* The first and last row of every tensor through coli_dequantize_row: the
 * block decoders must stay inside a row of coli_row_bytes bytes whatever
 * those bytes are (NaN scales, any nibbles); the reader's nbytes must be
 * whole rows. */
static int s_dequant_rows(const gguf_file *f) {
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const coli_tensor *t = gguf_tensor(f, i);
        const int64_t n_in = t->ne[0], rows = coli_tensor_nelems(t) / n_in;
        const size_t rb = coli_row_bytes(t->type, n_in);
        if (rb * (size_t)rows != t->nbytes) return -1;
        float *row = malloc((size_t)n_in * sizeof(float));
        if (!row) continue;
        coli_dequantize_row(t->type, t->data, row, n_in);
        coli_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)(rows - 1) * rb, row, n_in);
        free(row);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    int rc = gguf_open_memory(data, size, &f);
    if (rc != 0) {
        /* a refusal must come with a one-line message naming the buffer */
        const char *msg = coli_last_error();
        if (rc > 0 || strncmp(msg, "<memory>: ", 10) != 0 || strchr(msg, '\n')) __builtin_trap();
        return 0;
    }
    if (gb_walk(f) < 0 || s_dequant_rows(f) < 0) __builtin_trap();
    gguf_close(&f);
    return 0;
}
