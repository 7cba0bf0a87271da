/*
 * settings.h - the COLI_* environment, read once.
 *
 * Every tunable the library and the worker take from the environment is a
 * field here, read by coli_settings_from_env at one moment (model load, plan,
 * worker start) and passed down; nothing below that point calls getenv. The
 * table of variables, their units and defaults is docs/settings.md. What a
 * program using libcolibri should set (the worker program, the CURVE keys)
 * is also a field of coli_model_params, which wins over the environment.
 */
#ifndef COLI_CORE_SETTINGS_H
#define COLI_CORE_SETTINGS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

typedef enum coli_data_path {
    COLI_DATA_PATH_SHM,     /* local workers get a shared-memory ring (default) */
    COLI_DATA_PATH_ZMQ,     /* batches over ZeroMQ only */
    COLI_DATA_PATH_INVALID, /* neither: the worker executor refuses to start */
} coli_data_path;

typedef struct coli_settings {
    /* the worker executor's deadlines and restarts (docs/scheduler.md) */
    uint64_t layer_deadline_ms;   /* COLI_LAYER_DEADLINE_MS */
    uint64_t deadline_per_row_us; /* COLI_DEADLINE_PER_ROW_US */
    uint64_t worker_start_ms;     /* COLI_WORKER_START_MS */
    uint64_t hang_kill_ms;        /* COLI_HANG_KILL_MS */
    uint64_t restart_backoff_ms;  /* COLI_RESTART_BACKOFF_MS */
    uint64_t fail_window_ms;      /* COLI_WORKER_FAIL_WINDOW_MS */
    uint64_t max_failures;        /* COLI_WORKER_MAX_FAILURES */
    uint64_t reprobe_ms;          /* COLI_WORKER_REPROBE_MS (0 = a worker that failed too often stays down) */
    uint64_t heartbeat_ms;        /* COLI_HEARTBEAT_MS */
    uint64_t heartbeat_miss;      /* COLI_HEARTBEAT_MISS (0 = off) */
    uint64_t cache_margin_pct;    /* COLI_CACHE_MARGIN_PCT: a live cache's hysteresis, percent */
    uint64_t cache_prefetch;      /* COLI_CACHE_PREFETCH: live expert caches prefetch the next layer (0 = off) */
    uint64_t probe_timeout_ms;    /* COLI_PROBE_TIMEOUT_MS */
    uint64_t prefault;            /* COLI_PREFAULT: fill the weights' page tables in the background (0 = off) */
    /* the data path to local workers */
    coli_data_path data_path; /* COLI_DATA_PATH */
    char data_path_text[32];  /* its text, for the error message */
    uint64_t shm_spin_us;     /* COLI_SHM_SPIN_US */
    /* where things are ("" = not set) */
    char worker_bin[PATH_MAX]; /* COLI_WORKER: the coli-worker program */
    char build_dir[PATH_MAX];  /* COLI_BUILD: <dir>/bin/coli-worker, last resort */
    char keys_dir[PATH_MAX];   /* COLI_KEYS: CURVE keys for remote workers */
    char plugin_dir[PATH_MAX]; /* COLI_PLUGIN_DIR: libcoli-<name>.so */
    char tmp_dir[PATH_MAX];    /* TMPDIR: the executor's private directory goes in it */
    /* the experimental NPU lane (docs/xdna.md; the xdna plugin reads these at open) */
    int xdna;                    /* COLI_XDNA: a non-zero integer asks for it (`--xdna` sets 1) */
    char xdna_package[PATH_MAX]; /* COLI_XDNA_PACKAGE: its artifact package ("" = beside the plugin) */
    uint32_t xdna_timeout_ms;    /* COLI_XDNA_TIMEOUT_MS: one execution's limit (0 = the helper's 5000) */
    /* tests only */
    int place_ignore_budget; /* COLI_PLACE_IGNORE_BUDGET=1 */
    char fault[512];         /* COLI_FAULT (worker): fault injection, workers/worker_fault.c */
    char plugin_fault[256];  /* COLI_PLUGIN_FAULT (worker): passed to the plugin */
} coli_settings;

/* Fill *out from the environment: each variable unset, empty or not a
 * number gives its default (docs/settings.md). Never fails; an unknown
 * COLI_DATA_PATH is COLI_DATA_PATH_INVALID, for the executor to refuse. */
void coli_settings_from_env(coli_settings *out);

/* The directory of this process's executable (/proc/self/exe without its
 * last component) into out (n bytes). 0, or -1 when it cannot be read
 * (errno set; out is then ""). */
int coli_exe_dir(char *out, size_t n);

#endif
