/*
 * xdna_test_util.h - helpers of the NPU lane tests: a plugin directory with
 * the cpu and xdna plugins, a helper build of choice beside them and a
 * synthetic artifact package (tools/xdna_pack.c --synth) in xdna-package/.
 */
#ifndef COLI_TEST_XDNA_UTIL_H
#define COLI_TEST_XDNA_UTIL_H

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/cli_run.h"
#include "tests/stderr_capture.h"

/* Which helper sits beside the plugin. */
typedef enum xdna_helper_kind {
    XDNA_NO_HELPER,    /* none: what a default build has */
    XDNA_SYNTH_HELPER, /* the real helper source built against the synthetic XRT */
    XDNA_ABI1_HELPER,  /* the same, reporting ABI generation 1 */
    XDNA_NOSYM_HELPER, /* the same, without coli_xdna_last_error */
} xdna_helper_kind;

static inline const char *xdna_abs_build(void) {
    static char path[1024];
    char *real = realpath(cli_build_dir(), NULL);
    cr_assert(real, "build directory %s", cli_build_dir());
    snprintf(path, sizeof path, "%s", real);
    free(real);
    return path;
}

static inline void xdna_link(const char *src_rel, const char *dir, const char *name) {
    char src[1200], dst[1200];
    snprintf(src, sizeof src, "%s/%s", xdna_abs_build(), src_rel);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    cr_assert(access(src, R_OK) == 0, "%s not built (make all)", src);
    cr_assert_eq(symlink(src, dst), 0, "symlink %s", dst);
}

/* Run a shell command line; assert it exits 0. */
static inline void xdna_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void xdna_sh(const char *fmt, ...) {
    char cmd[2400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* A new plugin directory (dir, 64 bytes) with the cpu and xdna plugins, the
 * helper `helper`, and, when package is set, a synthetic package for `model`
 * in dir/xdna-package. COLI_PLUGIN_DIR points at it. */
static inline void xdna_lane_dir(char *dir, xdna_helper_kind helper, int package, const char *model) {
    snprintf(dir, 64, "/tmp/coli-xdnatest-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp");
    xdna_link("lib/libcoli-cpu.so", dir, "libcoli-cpu.so");
    xdna_link("lib/libcoli-xdna.so", dir, "libcoli-xdna.so");
    static const char *const helpers[] = {NULL, "xdna/synth/libcoli-xdna-helper.so", "xdna/abi1/libcoli-xdna-helper.so",
                                          "xdna/nosym/libcoli-xdna-helper.so"};
    if (helpers[helper]) xdna_link(helpers[helper], dir, "libcoli-xdna-helper.so");
    if (package) xdna_sh("'%s/bin/xdna_pack' --synth '%s' '%s/xdna-package' >/dev/null", xdna_abs_build(), model, dir);
    setenv("COLI_PLUGIN_DIR", dir, 1);
}

static inline void xdna_rm_dir(const char *dir) {
    xdna_sh("rm -rf '%s'", dir);
    unsetenv("COLI_PLUGIN_DIR");
}

/* The environment every lane test starts from: the lane requested, no fault
 * switch, no package override, a generous layer deadline. */
static inline void xdna_env_defaults(void) {
    setenv("COLI_LAYER_DEADLINE_MS", "5000", 1);
    setenv("COLI_XDNA", "1", 1);
    unsetenv("COLI_FAULT");
    unsetenv("COLI_XRT_SYNTH_FAULT");
    unsetenv("COLI_XDNA_PACKAGE");
    unsetenv("COLI_RESTART_BACKOFF_MS");
    stderr_quiet(); /* the lane's expected diagnostics: shown only if the test fails */
}

#endif
