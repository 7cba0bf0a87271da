/*
 * ref_models.h - tests' access to ../shared/reference and to the reference
 * models, generated on first use into $COLI_BUILD/ref (python3 + numpy, a
 * few seconds; serialised with a lock file because Criterion runs tests in
 * parallel processes). The shipped quantized models are symlinked.
 * Static functions: include from one test file each.
 */
#ifndef COLI_TESTS_REF_MODELS_H
#define COLI_TESTS_REF_MODELS_H

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static inline const char *s_shared(void) {
    const char *s = getenv("COLI_SHARED");
    return s && *s ? s : "../shared";
}

static inline const char *s_build(void) {
    const char *b = getenv("COLI_BUILD");
    return b && *b ? b : "build";
}

static inline int s_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static inline void s_require_shared(void) {
    char p[4096];
    snprintf(p, sizeof p, "%s/reference/expected/tiny-mixtral-f32.json", s_shared());
    if (!s_exists(p)) cr_skip_test("../shared not found: %s missing (set COLI_SHARED)", p);
}

static inline void s_run_or_fail(const char *cmd) {
    int rc = system(cmd);
    cr_assert_eq(rc, 0, "reference model generation failed (rc %d): %s", rc, cmd);
}

/* Make sure DIR/file exists; generation is serialised with a lock file, as
 * Criterion runs tests in parallel processes. Writes the path to out. */
/* $COLI_BUILD/sub/file into out (and the folder into dir), the folder made,
 * and its lock file held: returns the locked fd for s_unlock_dir. Criterion
 * runs tests in parallel processes, so generation on first use is serialised. */
static inline int s_lock_dir(const char *sub, const char *file, char *dir, size_t dir_cap, char *out, size_t cap) {
    char lock[4200];
    cr_assert_lt(snprintf(dir, dir_cap, "%s/%s", s_build(), sub), (int)dir_cap, "COLI_BUILD too long");
    cr_assert_lt(snprintf(out, cap, "%s/%s", dir, file), (int)cap, "path too long");
    mkdir(s_build(), 0755);
    mkdir(dir, 0755);
    snprintf(lock, sizeof lock, "%s/.lock", dir);
    int fd = open(lock, O_CREAT | O_RDWR, 0644);
    cr_assert_geq(fd, 0, "cannot open %s: %s", lock, strerror(errno));
    flock(fd, LOCK_EX);
    return fd;
}

static inline void s_unlock_dir(int fd) {
    flock(fd, LOCK_UN);
    close(fd);
}

static inline void s_ref_model(const char *file, char *out, size_t cap) {
    char dir[4096], cmd[9000], shipped[4200];
    const char *gen = "/usr/bin/python3";
    int fd = s_lock_dir("ref", file, dir, sizeof dir, out, cap);
    if (!s_exists(out)) {
        if (!s_exists(gen)) gen = "python3";
        const char *maker = "reference/gen/make_models.py";
        /* the quantized files llama.cpp made are shipped, not generated */
        snprintf(shipped, sizeof shipped, "%s/reference/models/%s", s_shared(), file);
        if (s_exists(shipped)) {
            char *abs = realpath(shipped, NULL);
            cr_assert(abs != NULL, "shipped model %s missing", shipped);
            cr_assert_eq(symlink(abs, out), 0, "symlink %s -> %s: %s", out, abs, strerror(errno));
            free(abs);
        } else if (strstr(file, "-f16")) {
            snprintf(cmd, sizeof cmd, "%s %s/%s %s --no-bench --only tiny-mixtral --dtype F16 >/dev/null", gen,
                     s_shared(), maker, dir);
            s_run_or_fail(cmd);
        } else {
            snprintf(cmd, sizeof cmd, "%s %s/%s %s --no-bench >/dev/null", gen, s_shared(), maker, dir);
            s_run_or_fail(cmd);
        }
    }
    s_unlock_dir(fd);
    cr_assert(s_exists(out), "reference model %s was not generated", out);
}

/* $COLI_BUILD/ref/tiny-ARCH-f32.gguf of tests/gen_qwen3next.py (qwen3next,
 * qwen35moe) or tests/gen_kimi.py (kimi-k3, kimi-linear), generated on first
 * use; with mtp, tiny-ARCH-mtp-f32.gguf (the same model plus a
 * multi-token-prediction block, --mtp; the Qwen families only). */
static inline void s_hybrid_model_mtp(const char *arch, int mtp, char *out, size_t cap) {
    char dir[4096], file[64], cmd[9000];
    s_require_shared();
    snprintf(file, sizeof file, "tiny-%s%s-f32.gguf", arch, mtp ? "-mtp" : "");
    int fd = s_lock_dir("ref", file, dir, sizeof dir, out, cap);
    if (!s_exists(out)) {
        const char *py = s_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
        const char *gen = strncmp(arch, "kimi", 4) ? "gen_qwen3next.py" : "gen_kimi.py";
        snprintf(cmd, sizeof cmd, "COLI_SHARED='%s' %s tests/%s %s '%s'%s", s_shared(), py, gen, arch, out,
                 mtp ? " --mtp" : "");
        s_run_or_fail(cmd);
    }
    s_unlock_dir(fd);
}

static inline void s_hybrid_model(const char *arch, char *out, size_t cap) { s_hybrid_model_mtp(arch, 0, out, cap); }

/* A test fixture of tools/gen_model (make fixtures), generated on first use. */
static inline void s_fixture(const char *file, char *out, size_t cap) {
    char dir[4096], cmd[9000];
    int fd = s_lock_dir("fixtures", file, dir, sizeof dir, out, cap);
    if (!s_exists(out)) {
        snprintf(cmd, sizeof cmd, "%s/bin/gen_model --all %s >/dev/null", s_build(), dir);
        int rc = system(cmd);
        cr_assert_eq(rc, 0, "fixture generation failed (rc %d): %s (run make fixtures)", rc, cmd);
    }
    s_unlock_dir(fd);
    cr_assert(s_exists(out), "fixture %s missing", out);
}

/* sha256 of path as 64 hex digits (coreutils' sha256sum). */
static inline void ref_sha256(const char *path, char out[65]) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "cannot run sha256sum");
    cr_assert_eq(fscanf(p, "%64s", out), 1, "no sha256sum output for %s", path);
    pclose(p);
}

/* A generated model is the file its fixture was recorded on: a generator
 * that drifted fails here, loudly, not as a tolerance miss later. */
static inline void ref_assert_sha256(const char *path, const char *want) {
    char got[65] = "";
    ref_sha256(path, got);
    cr_assert_str_eq(got, want, "%s: the generator drifted from the file the reference was recorded on", path);
}

#endif
