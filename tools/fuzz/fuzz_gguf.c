/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader.
 *
 * Every input goes through gguf_open_memory; whatever it accepts is walked
 * through every accessor (each key by its typed getter, every array element
 * and string, every tensor's first and last data byte). The sanitizers turn
 * any out-of-bounds read into a crash; an accessor that disagrees with the
 * index traps. Built and run by `make fuzz` (see docs/gguf.md).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"
#include "gguf.h"
#include "../../tests/gguf_bytes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    int rc = gguf_open_memory(data, size, &f);
    if (rc != 0) {
        /* a refusal must come with a one-line message naming the buffer */
        const char *msg = coli_last_error();
        if (rc > 0 || strncmp(msg, "<memory>: ", 10) != 0 || strchr(msg, '\n')) __builtin_trap();
        return 0;
    }
    if (gb_walk(f) < 0) __builtin_trap();
    gguf_close(&f);
    return 0;
}
