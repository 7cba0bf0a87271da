/*
 * cmd_plan.c - `coli plan -m FILE [--devices LIST] [--heat FILE] [--pin ...]`:
 * which expert goes where, without starting any worker.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/coli/args.h"
#include "colibri.h"
#include "tools/coli/commands.h"
#include "tools/coli/model_opts.h"

int cmd_plan(int argc, char **argv) {
    const char *model = NULL, *devices = NULL, *heat = NULL, *pins = NULL;
    int xdna = 0;
    arg_spec specs[] = {
        {"--model", "-m", ARG_STR, &model, 0, 0, 0, "FILE", "the GGUF model file (required)"},
        {"--devices", NULL, ARG_STR, &devices, 0, 0, 0, "LIST",
         "cpu:N[@T], cuda:I[=BUDGET], hip:I[=BUDGET], xdna, auto, inproc (default: the library's)"},
        {"--xdna", NULL, ARG_FLAG, &xdna, 0, 0, 0, NULL,
         "include the experimental NPU lane (= COLI_XDNA=1; docs/xdna.md)"},
        {"--heat", NULL, ARG_STR, &heat, 0, 0, 0, "FILE",
         "place from this heat file: hottest experts onto the fastest device with room"},
        {"--pin", NULL, ARG_STR, &pins, 0, 0, 0, "L:E=WORKER,...",
         "these experts on these workers (names as listed below: cpu:0, cuda:0, ...) whatever the heat"},
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    int rc = args_parse("plan", argc, argv, specs, n_specs, NULL, 0, NULL);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "plan", "-m FILE [--devices LIST] [--xdna] [--heat FILE] [--pin L:E=DEV,...]",
                   "Print the expert -> worker placement the scheduler would make (assuming every\n"
                   "device comes up): experts and bytes per worker (with --heat: the share of routed rows\n"
                   "each is expected to serve), then each layer's owners.",
                   specs, n_specs);
        return 0;
    }
    if (rc) return rc;
    if (!model) return args_error("plan", "-m", "required (the GGUF model file)");
    if (cli_check_input_file("-m", model)) return CLI_FAIL;
    /* an in-process plan never opens the model: a missing one must not pass for a plan */
    if (access(model, R_OK) != 0) {
        fprintf(stderr, "coli: -m %s: %s\n", model, strerror(errno));
        return CLI_FAIL;
    }
    if ((rc = devices_check("plan", devices, pins, xdna))) return rc;
    char *text = NULL;
    const coli_model_params p = {.devices = devices, .heat_path = heat, .pins = pins, .xdna = xdna};
    if (coli_plan_params_text(model, &p, &text) != 0) return cli_fail();
    fputs(text, stdout);
    free(text);
    return 0;
}
