/*
 * cmd_quantize.c - `coli quantize IN.gguf OUT.gguf TYPE`.
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "colibri.h"
#include "commands.h"

static const char *const s_types[] = {"Q8_0", "Q4_0", "F16", "BF16", "F32"};

int cmd_quantize(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0;
    int rc = args_parse("quantize", argc, argv, NULL, 0, pos, 3, &n_pos);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "quantize", "IN.gguf OUT.gguf Q8_0|Q4_0|F16|BF16|F32",
                   "Write a copy of IN with every 2-D/3-D weight (token_embd and output included) in the\n"
                   "given type; norms, biases and routers stay F32 (llama-quantize --pure's recipe).",
                   NULL, 0);
        return 0;
    }
    if (rc) return rc;
    if (n_pos < 3) {
        static const char *const missing[] = {"IN.gguf", "OUT.gguf", "TYPE"};
        return args_error("quantize", missing[n_pos], "missing (usage: coli quantize IN.gguf OUT.gguf TYPE)");
    }
    int known = 0;
    for (size_t i = 0; i < sizeof s_types / sizeof s_types[0]; i++) known |= strcmp(pos[2], s_types[i]) == 0;
    if (!known) return args_error("quantize", "TYPE", "unknown type '%s' (Q8_0, Q4_0, F16, BF16, F32)", pos[2]);
    if (strcmp(pos[0], pos[1]) == 0)
        return args_error("quantize", "OUT.gguf", "'%s' is also the input file", pos[1]);
    if (coli_quantize_file(pos[0], pos[1], pos[2]) != 0) return cli_fail();
    printf("coli quantize: wrote %s (%s)\n", pos[1], pos[2]);
    return 0;
}
