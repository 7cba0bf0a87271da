/*
 * xdna_loader.h - loading the XDNA helper library (xdna_helper_abi.h): by
 * absolute path beside the plugin, all or nothing, once per process.
 */
#ifndef COLI_XDNA_LOADER_H
#define COLI_XDNA_LOADER_H

#include <stddef.h>

#include "plugins/xdna/xdna_helper_abi.h"
#include "plugins/xdna/xdna_package.h"

#define XDNA_HELPER_FILE "libcoli-xdna-helper.so"

typedef struct xdna_helper {
    void *dl;
    xdna_abi_version_fn abi_version;
    xdna_open_fn open;
    xdna_wrap_weight_fn wrap_weight;
    xdna_execute_fn execute;
    xdna_release_weight_fn release_weight;
    xdna_shutdown_fn shutdown;
    xdna_last_error_fn last_error;
} xdna_helper;

/* The directory this plugin was loaded from (absolute), into out. 0 or -1. */
int xdna_plugin_dir(char *out, size_t n);

/* The helper at <dir>/libcoli-xdna-helper.so (dir absolute): dlopen'd, every
 * symbol resolved, abi_version() == XDNA_HELPER_ABI. The first call decides,
 * and every later call in the process returns the same verdict (the same
 * table, or XDNA_HELPER_UNAVAILABLE with the same reason in why). */
xdna_diag xdna_helper_load(const char *dir, const xdna_helper **out, char *why, size_t why_len);

/* Open device device_index and every artifact of p (absolute paths inside
 * the package) through h; timeout_ms limits each run (coli_settings'
 * xdna_timeout_ms: COLI_XDNA_TIMEOUT_MS; 0: the helper's 5 s). XDNA_OK, or
 * the helper's failure as a diagnostic (DEVICE_UNAVAILABLE,
 * XCLBIN_LOAD_FAILED, ...) with "CODE: reason" in why. */
xdna_diag xdna_session_open(const xdna_helper *h, const xdna_package *p, int device_index, uint32_t timeout_ms,
                            xdna_session **out, char *why, size_t why_len);

/* The diagnostic of a helper status (XDNA_E_*). */
xdna_diag xdna_helper_diag(int status);

#endif
