/*
 * settings.h - the COLI_* environment, read once.
 *
 * Every variable a colibri program takes from the environment is a field
 * here, read by coli_settings_from_env at one moment (model load, plan,
 * worker start, a command's start) and passed down; no other file calls
 * getenv. The table of variables, their units, defaults and the flags that
 * override them is docs/settings.md. What a program using libcolibri sets
 * (the worker program, the CURVE keys, the NPU lane: the CLI's flags) is a
 * field of coli_model_params, which wins over the environment
 * (coli_settings_load); nothing passes a setting by setenv.
 */
#ifndef COLI_CORE_SETTINGS_H
#define COLI_CORE_SETTINGS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "colibri.h"

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
    uint64_t disk_auto;     /* COLI_DISK_AUTO: in-process experts of a file larger than memory use the disk tier */
    uint64_t disk_direct;   /* COLI_DISK_DIRECT: the disk tier reads with O_DIRECT where allowed (0 = page cache) */
    uint64_t disk_prefetch; /* COLI_DISK_PREFETCH: the disk tier reads the next layer's likely experts (default 0) */
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
    char xdna_text[32];          /* COLI_XDNA as written (`coli xdna check` shows it) */
    /* the HTTP server (coli serve; docs/api.md) */
    const char *api_key;     /* COLI_API_KEY, NULL = none (--api-key and --api-key-file win); the
                                 environment's own string (a key has no length limit), valid while
                                 the environment is unchanged: nothing in colibri changes it */
    uint64_t heat_save_s;    /* COLI_HEAT_SAVE_S: how often a server with a heat file writes it (0 = 60) */
    uint64_t serve_delay_ms; /* COLI_SERVE_DELAY_MS (tests): each slot sleeps this long after a token */
    /* tests and tools only */
    int place_ignore_budget;   /* COLI_PLACE_IGNORE_BUDGET=1 */
    char fault[512];           /* COLI_FAULT (worker): fault injection, workers/worker_fault.c */
    char plugin_fault[256];    /* COLI_PLUGIN_FAULT (worker): passed to the plugin */
    char fuzz_vocab[PATH_MAX]; /* COLI_FUZZ_VOCAB: the tokenizer fuzz target's vocabulary */
    uint64_t bench_rounds;     /* BENCH_ROUNDS: bench_sched's rounds (0 = its default) */
} coli_settings;

/* Fill *out from the environment: each variable unset, empty or not a
 * number gives its default (docs/settings.md). Never fails; an unknown
 * COLI_DATA_PATH is COLI_DATA_PATH_INVALID, for the executor to refuse. */
void coli_settings_from_env(coli_settings *out);

/* The settings of a load or a plan: the environment, then what the program
 * set in p (NULL = nothing) over it: worker_path, keys_dir, xdna. */
void coli_settings_load(coli_settings *out, const coli_model_params *p);

/* The environment a worker process started by this one gets: this
 * process's, with the settings the worker reads itself that the program set
 * by p put in (COLI_XDNA=1 when set->xdna and the variable says otherwise),
 * so the process's own environment never changes. A NULL-terminated array
 * to pass to execve, freed with free() (its strings belong to the
 * environment or to set); NULL when out of memory. */
char **coli_settings_worker_env(const coli_settings *set);

/* The directory of this process's executable (/proc/self/exe without its
 * last component) into out (n bytes). 0, or -1 when it cannot be read
 * (errno set; out is then ""). */
int coli_exe_dir(char *out, size_t n);

#endif
