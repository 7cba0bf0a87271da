/*
 * xdna_loader.c - the helper library, loaded once; see xdna_loader.h.
 */
#define _GNU_SOURCE
#include "plugins/xdna/xdna_loader.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static int s_decided; /* 1 once the first attempt ended, either way */
static xdna_diag s_verdict;
static char s_why[512];
static xdna_helper s_helper;

int xdna_plugin_dir(char *out, size_t n) {
    Dl_info info;
    if (!dladdr((void *)xdna_plugin_dir, &info) || !info.dli_fname) return -1;
    /* the directory the plugin was opened from, as named (a symbolic link to
     * the plugin keeps its own directory): made absolute, not resolved */
    char path[PATH_MAX], cwd[PATH_MAX];
    if (info.dli_fname[0] == '/')
        snprintf(path, sizeof path, "%s", info.dli_fname);
    else if (getcwd(cwd, sizeof cwd))
        snprintf(path, sizeof path, "%.2000s/%.2000s", cwd, info.dli_fname);
    else
        return -1;
    char *slash = strrchr(path, '/');
    *slash = '\0';
    snprintf(out, n, "%s", path[0] ? path : "/");
    return 0;
}

/* Resolve one symbol into *slot; 0 or -1 with the reason in s_why. */
static int s_sym(void *dl, const char *name, void **slot) {
    dlerror();
    *slot = dlsym(dl, name);
    if (*slot) return 0;
    snprintf(s_why, sizeof s_why, "%s: " XDNA_HELPER_FILE " lacks %s (not a generation %d helper)",
             xdna_diag_name(XDNA_HELPER_UNAVAILABLE), name, XDNA_HELPER_ABI);
    return -1;
}

static xdna_diag s_load(const char *dir) {
    char path[PATH_MAX + 64];
    if (dir[0] != '/') {
        snprintf(s_why, sizeof s_why, "%s: plugin directory '%s' is not absolute",
                 xdna_diag_name(XDNA_HELPER_UNAVAILABLE), dir);
        return XDNA_HELPER_UNAVAILABLE;
    }
    snprintf(path, sizeof path, "%s/%s", dir, XDNA_HELPER_FILE);
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *e = dlerror();
        snprintf(s_why, sizeof s_why, "%s: %.460s", xdna_diag_name(XDNA_HELPER_UNAVAILABLE), e ? e : path);
        return XDNA_HELPER_UNAVAILABLE;
    }
    xdna_helper h = {.dl = dl};
    if (s_sym(dl, XDNA_SYM_ABI_VERSION, (void **)&h.abi_version) || s_sym(dl, XDNA_SYM_OPEN, (void **)&h.open) ||
        s_sym(dl, XDNA_SYM_WRAP_WEIGHT, (void **)&h.wrap_weight) || s_sym(dl, XDNA_SYM_EXECUTE, (void **)&h.execute) ||
        s_sym(dl, XDNA_SYM_RELEASE_WEIGHT, (void **)&h.release_weight) ||
        s_sym(dl, XDNA_SYM_SHUTDOWN, (void **)&h.shutdown) || s_sym(dl, XDNA_SYM_LAST_ERROR, (void **)&h.last_error)) {
        dlclose(dl);
        return XDNA_HELPER_UNAVAILABLE;
    }
    uint32_t gen = h.abi_version();
    if (gen != XDNA_HELPER_ABI) {
        snprintf(s_why, sizeof s_why, "%s: %.400s is ABI generation %u, this plugin needs %d",
                 xdna_diag_name(XDNA_HELPER_UNAVAILABLE), path, gen, XDNA_HELPER_ABI);
        dlclose(dl);
        return XDNA_HELPER_UNAVAILABLE;
    }
    s_helper = h;
    return XDNA_OK;
}

xdna_diag xdna_helper_load(const char *dir, const xdna_helper **out, char *why, size_t why_len) {
    pthread_mutex_lock(&s_mu);
    if (!s_decided) {
        s_verdict = s_load(dir);
        s_decided = 1;
    }
    xdna_diag v = s_verdict;
    if (v == XDNA_OK)
        *out = &s_helper;
    else
        snprintf(why, why_len, "%s", s_why);
    pthread_mutex_unlock(&s_mu);
    return v;
}

xdna_diag xdna_helper_diag(int status) {
    switch (status) {
    case XDNA_SUCCESS: return XDNA_OK;
    case XDNA_E_DEVICE: return XDNA_DEVICE_UNAVAILABLE;
    case XDNA_E_XCLBIN: return XDNA_XCLBIN_LOAD_FAILED;
    case XDNA_E_HWCTX: return XDNA_HW_CONTEXT_FAILED;
    case XDNA_E_BO: return XDNA_BO_ALLOC_FAILED;
    case XDNA_E_SYNC: return XDNA_SYNC_FAILED;
    case XDNA_E_START: return XDNA_RUN_START_FAILED;
    case XDNA_E_RUN: return XDNA_RUN_FAILED;
    case XDNA_E_TIMEOUT: return XDNA_RUN_TIMEOUT;
    case XDNA_E_ARG: return XDNA_HELPER_BAD_ARGUMENT;
    default: return XDNA_HELPER_EXCEPTION;
    }
}

xdna_diag xdna_session_open(const xdna_helper *h, const xdna_package *p, int device_index, uint32_t timeout_ms,
                            xdna_session **out, char *why, size_t why_len) {
    *out = NULL;
    xdna_artifact_desc *descs = calloc((size_t)p->n, sizeof *descs);
    char(*paths)[2][PATH_MAX + XDNA_NAME_MAX] = calloc((size_t)p->n, sizeof *paths);
    if (!descs || !paths) {
        free(descs);
        free(paths);
        snprintf(why, why_len, "%s: out of memory", xdna_diag_name(XDNA_HELPER_BAD_ARGUMENT));
        return XDNA_HELPER_BAD_ARGUMENT;
    }
    for (int i = 0; i < p->n; i++) {
        const xdna_artifact *a = &p->art[i];
        snprintf(paths[i][0], sizeof paths[i][0], "%s/%s", p->real, a->xclbin);
        snprintf(paths[i][1], sizeof paths[i][1], "%s/%s", p->real, a->instr);
        descs[i] = (xdna_artifact_desc){paths[i][0], paths[i][1], a->kernel, a->bucket, a->k, a->n};
    }
    xdna_open_args args = {(unsigned)device_index, descs, p->n, timeout_ms};
    int st = h->open(&args, out);
    free(descs);
    free(paths);
    if (st == XDNA_SUCCESS && *out) return XDNA_OK;
    xdna_diag d = xdna_helper_diag(st ? st : XDNA_E_EXCEPTION);
    snprintf(why, why_len, "%s: xdna: %.400s", xdna_diag_name(d), h->last_error());
    return d;
}
