/*
 * cmd_xdna.c - `coli xdna check [--package DIR] [-m MODEL]`: a doctor for the
 * NPU lane. Prints each of the lane's independent facts in the order the
 * worker checks them (requested, package, helper, device), the package's
 * artifacts, and with -m each layer's experts against the gates, then one
 * verdict line. Exit status 0 when the lane is provisioned (package, helper
 * and device all good; whether it is requested is reported, not judged),
 * 1 when it is not, 2 for a usage error. docs/xdna.md explains every line.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/coli/args.h"
#include "colibri.h"
#include "tools/coli/commands.h"
#include "core/settings.h"
#include "core/kernels/expert_ffn.h"
#include "core/gguf/gguf.h"
#include "plugins/xdna/xdna_loader.h"
#include "plugins/xdna/xdna_package.h"
#include "core/tensor.h"

/* Where the worker finds the plugin (and the helper beside it): COLI_PLUGIN_DIR,
 * else <dir of this executable>/../lib. */
static void s_plugin_dir(const coli_settings *set, char *out, size_t n) {
    char exe[PATH_MAX];
    if (set->plugin_dir[0])
        snprintf(out, n, "%s", set->plugin_dir);
    else if (coli_exe_dir(exe, sizeof exe) == 0)
        snprintf(out, n, "%.4000s/../lib", exe);
    else
        snprintf(out, n, "lib");
    char *real = realpath(out, NULL);
    if (real) snprintf(out, n, "%s", real);
    free(real);
}

static void s_print_artifacts(const xdna_package *p) {
    for (int i = 0; i < p->n; i++) {
        const xdna_artifact *a = &p->art[i];
        printf("    %-8s M%-3lld K %-6lld N %-6lld %-5s BF16xBF16->F32  %s + %s\n", xdna_op_name(a->op),
               (long long)a->bucket, (long long)a->k, (long long)a->n, coli_dtype_name((uint32_t)a->wtype), a->xclbin,
               a->instr);
    }
}

/* Gates 1-3 for expert 0 of each layer of model (the shapes are per layer). */
static int s_print_gates(const xdna_package *p, const char *model) {
    gguf_file *g = NULL;
    if (gguf_open(model, &g) != 0) {
        fprintf(stderr, "coli: xdna check: %s: %s\n", model, coli_last_error());
        return 1;
    }
    printf("  gates for %s (op qualified, K/N and weight type, buckets):\n", model);
    expert_weights w;
    int l = 0;
    for (; expert_weights_from_gguf(g, l, 0, &w) == 0; l++) {
        xdna_expert_shape e = {w.n_embd, w.n_ff, {w.gate_type, w.up_type, w.down_type}};
        printf("    blk.%d:", l);
        for (int op = 0; op < XDNA_N_OPS; op++) {
            char why[256];
            xdna_diag d = xdna_gate_op(p, &e, (xdna_op)op, why, sizeof why);
            printf(" %s %s%s", xdna_op_name((xdna_op)op), xdna_diag_name(d), op < XDNA_N_OPS - 1 ? "," : "");
        }
        for (int b = 0; b < 2; b++) {
            const int64_t m = b ? 256 : 64;
            int all = 1;
            for (int op = 0; op < XDNA_N_OPS; op++) all &= xdna_find_artifact(p, &e, (xdna_op)op, m) >= 0;
            printf("; M%lld %s", (long long)m, all ? "yes" : "no");
        }
        printf("\n");
    }
    if (l == 0) printf("    (no MoE experts in this model: nothing for the lane)\n");
    gguf_close(&g);
    return 0;
}

static int s_check(const char *package, const char *model) {
    char dir[PATH_MAX], pkg[PATH_MAX + 32], why[640];
    static coli_settings set; /* PATH_MAX strings: not on the stack */
    coli_settings_load(&set, NULL);
    s_plugin_dir(&set, dir, sizeof dir);
    if (package)
        snprintf(pkg, sizeof pkg, "%s", package);
    else
        xdna_package_default_dir(set.xdna_package, dir, pkg, sizeof pkg);
    printf("xdna lane (experimental NPU lane; docs/xdna.md)\n");
    printf("  requested: %s (COLI_XDNA=%s%s)\n", set.xdna ? "yes" : "no", set.xdna_text, /* shown as it is written */
           set.xdna ? "" : "; --xdna or COLI_XDNA=1 turns it on");
    static xdna_package p;
    xdna_diag d = xdna_package_load(pkg, &p, why, sizeof why);
    printf("  package:   %s: %s\n", pkg, d == XDNA_OK ? "OK, every SHA-256 matches the registry" : why);
    if (d == XDNA_OK) s_print_artifacts(&p);
    const xdna_helper *h = NULL;
    xdna_diag hd = d == XDNA_OK ? xdna_helper_load(dir, &h, why, sizeof why) : XDNA_DIAG_COUNT;
    if (hd == XDNA_DIAG_COUNT)
        printf("  helper:    not tried (the package gate comes first)\n");
    else
        printf("  helper:    %s/%s: %s\n", dir, XDNA_HELPER_FILE, hd == XDNA_OK ? "OK, ABI generation 2" : why);
    xdna_diag dd = XDNA_DIAG_COUNT;
    if (hd == XDNA_OK) {
        xdna_session *s = NULL;
        dd = xdna_session_open(h, &p, 0, set.xdna_timeout_ms, &s, why, sizeof why);
        printf("  device:    %s\n", dd == XDNA_OK ? "OK, device 0 opened with every artifact" : why);
        if (s) h->shutdown(&s);
    } else {
        printf("  device:    not tried (the helper comes first)\n");
    }
    if (model && d == XDNA_OK && s_print_gates(&p, model)) return 1;
    xdna_diag first = d != XDNA_OK ? d : hd != XDNA_OK ? hd : dd;
    printf("verdict: %s\n",
           first == XDNA_OK ? "provisioned (with --xdna, qualified experts run on the NPU)" : xdna_diag_name(first));
    return first == XDNA_OK ? 0 : 1;
}

int cmd_xdna(int argc, char **argv) {
    const char *package = NULL, *model = NULL;
    arg_spec specs[] = {
        {"--package", NULL, ARG_STR, &package, 0, 0, 0, "DIR",
         "the package to check (default: COLI_XDNA_PACKAGE, "
         "else xdna-package beside the plugin)"},
        {"--model", "-m", ARG_STR, &model, 0, 0, 0, "FILE", "also show how the model's experts fare at the gates"},
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    if (argc < 2 || strcmp(argv[1], "check") != 0) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            args_usage(stdout, "xdna", "check [--package DIR] [-m FILE]",
                       "The NPU lane's doctor: whether it is requested, the package and its SHA-256\n"
                       "check, the helper library, the device, and with -m the gates per layer.",
                       specs, n_specs);
            return 0;
        }
        fprintf(stderr, "coli xdna: want 'coli xdna check [--package DIR] [-m FILE]'\n");
        return ARGS_ERROR;
    }
    int rc = args_parse("xdna check", argc - 1, argv + 1, specs, n_specs, NULL, 0, NULL);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "xdna check", "[--package DIR] [-m FILE]",
                   "The NPU lane's doctor: whether it is requested, the package and its SHA-256\n"
                   "check, the helper library, the device, and with -m the gates per layer.",
                   specs, n_specs);
        return 0;
    }
    if (rc) return rc;
    return s_check(package, model);
}
