/*
 * sched_internal.h - the worker scheduler's shared state (coordinator side).
 *
 * One file per concern works on it:
 *   placement.c      --devices parsing and the expert -> worker map
 *   supervisor.c     spawning, reaping, restart with back-off, shutdown
 *   worker_link.c    messages from workers: hello, place ack, heartbeat, results
 *   scheduler.c      moe_exec_workers_new and the per-layer fan-out / gather / fallback
 *   fallback_stats.c counters, latency histograms, JSON and text summaries
 */
#ifndef COLI_COORD_SCHED_INTERNAL_H
#define COLI_COORD_SCHED_INTERNAL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "coordinator/moe_exec.h"
#include "coordinator/shm_ring.h"
#include "coordinator/wire.h"

/* ---- devices and placement (placement.c) ------------------------------ */
typedef struct device_spec {
    char plugin[16];       /* "cpu", "cuda", "hip", "xdna" */
    int index;             /* vendor ordinal */
    uint64_t budget;       /* bytes of experts it may hold; 0 = unlimited */
    char endpoint[224];    /* plugin "remote": the worker's tcp:// endpoint (link_remote.c) */
} device_spec;

#define SCHED_MAX_WORKERS 64

/* Parse a --devices string ("cpu:2,cuda:0=8G", "auto", NULL = default).
 * *inproc = 1 when it says "inproc" (then n = 0). */
int sched_parse_devices(const char *devices, device_spec *out, int cap, int *n, int *inproc);
/* CPU workers of "auto" (from the core count). */
int sched_default_cpu_workers(void);
/* Replace each "auto" entry (plugin "auto", the default) by one worker per
 * GPU that the cuda and hip plugins find (each probed in its own process,
 * `coli-worker --probe NAME`, with a timeout: a broken driver cannot take the
 * coordinator down) plus the default CPU workers; renumbers cpu workers.
 * worker_bin NULL: CPU workers only. No GPU is normal and silent. */
int sched_expand_auto(const char *worker_bin, device_spec *d, int cap, int *n, int verbose);

typedef struct placement_in {
    int n_layer, n_expert;
    const uint64_t *expert_bytes;  /* (n_layer) bytes of one expert of each layer */
    int n_workers;
    const uint64_t *budget;        /* (n_workers) 0 = unlimited */
    const int *usable;             /* (n_workers) 0 = takes nothing */
} placement_in;

/* owner (n_layer * n_expert) = worker index, or -1 when nobody has room
 * (computed in-process). Within each layer, each expert goes to the usable
 * worker with the fewest bytes of that layer so far that still has budget. */
int placement_plan(const placement_in *in, int32_t *owner);

/* ---- one worker, as the coordinator sees it ----------------------------- */
typedef enum link_state {
    LINK_STARTING,    /* spawned, no hello yet */
    LINK_PLACING,     /* hello OK, Place sent, no ack yet */
    LINK_UP,
    LINK_HUNG,        /* missed a deadline; no work until it proves alive */
    LINK_DOWN,        /* dead; restart pending (or restart limit reached) */
    LINK_FAILED,      /* hello or place said FAILED: permanent */
    LINK_QUARANTINED, /* answered garbage: permanent */
} link_state;

#define SCHED_LAT_RING 4096
#define SCHED_N_BUCKETS 13
#define SCHED_FAIL_TIMES 8

typedef struct lat_stats {          /* latency in seconds */
    double ring[SCHED_LAT_RING];
    uint64_t n;                      /* samples ever */
    uint64_t buckets[SCHED_N_BUCKETS]; /* non-cumulative */
    double sum;
} lat_stats;

typedef struct worker_link {
    int id;
    device_spec dev;
    char device[32];                 /* "cpu:0", "cuda:1" */
    int is_cpu;
    link_state state;
    char reason[256];
    int restart_limited;             /* DOWN for good: too many failures */
    int hello_ok;                    /* its hello said OK (this generation) */
    uint64_t exit_seen_ns;           /* died before its hello: wait for a FAILED hello in flight */
    /* process */
    pid_t pid;
    int pidfd;                       /* -1 when pidfd_open is unavailable */
    unsigned gen;
    int n_threads;
    char routing_id[32];
    size_t routing_len;
    uint64_t state_since_ns;
    uint64_t restart_at_ns;
    uint64_t fail_ns[SCHED_FAIL_TIMES];
    int n_fail;
    uint64_t restarts;
    /* placement */
    uint64_t owned_experts, owned_bytes;
    uint64_t resident_experts, resident_bytes;
    uint64_t caps_budget;            /* memory budget its hello reported */
    uint64_t refused_experts;        /* placed experts it could not hold (all generations) */
    char device_name[64];
    /* the request in flight */
    uint64_t req_id;                 /* 0 = none */
    uint64_t sent_ns;
    int64_t n_rows;
    int64_t *row_pair;               /* (n_rows) pair index of each row */
    float *x;                        /* (n_rows, n_embd) gathered inputs */
    size_t cap_rows;
    int x_finite;
    uint64_t hung_req_id;            /* a late reply with this id is dropped */
    /* remote worker (dev.endpoint set): our own DEALER to it, and its monitor */
    int remote;
    void *rsock, *rmon;
    int handshaked;                  /* the CURVE handshake of this generation succeeded */
    /* data path: batches and results go through ring when ring.base is set */
    shm_ring ring;
    uint64_t ring_replies;           /* messages taken from its rings (all generations) */
    /* stats */
    uint64_t batches, rows, rerouted_rows, last_seen_ns, heartbeats;
    char counter_name[8][32];        /* its plugin's own counters, latest values (e.g. xdna buckets) */
    uint64_t counter_value[8];
    int n_counters;
    lat_stats lat;
} worker_link;

typedef struct fallback_count {
    char device[32];
    char reason[24];
    uint64_t count;
} fallback_count;

#define SCHED_MAX_FALLBACK_KINDS 64

typedef struct sched {
    moe_exec base;                   /* first: a moe_exec* is a sched* */
    moe_exec_config cfg;
    char *model_path;
    uint64_t model_size, model_hash;
    int n_layer, n_expert;
    int64_t n_embd;
    uint64_t *expert_bytes;          /* (n_layer) */
    /* transport */
    void *zctx, *router;
    char dir[PATH_MAX];              /* private temporary directory */
    char endpoint[PATH_MAX + 16];
    char worker_bin[PATH_MAX];
    /* workers */
    worker_link *w;
    int n_w;
    int32_t *owner;                  /* (n_layer, n_expert) worker index or -1 */
    uint64_t *refused_by;            /* (n_layer, n_expert) bit w: worker w refused it at Place */
    int lifeline[2];                 /* pipe: workers hold the read end, EOF = coordinator gone */
    moe_exec *inproc;                /* fallback of last resort, made on first use */
    uint64_t next_req;
    /* settings (environment, see docs/scheduler.md) */
    uint64_t deadline_ns, per_row_ns, start_ns, hang_kill_ns;
    uint64_t backoff_ns, backoff_max_ns, fail_window_ns;
    int max_failures;
    uint64_t hb_ns;                  /* worker heartbeat interval (COLI_HEARTBEAT_MS) */
    uint64_t hb_miss;                /* idle silence of this many intervals = down (COLI_HEARTBEAT_MISS, 0 = off) */
    int use_rings;                   /* COLI_DATA_PATH: local workers get a shm ring */
    int64_t ring_rows;               /* rows one ring slot holds (the largest batch) */
    uint64_t spin_ns;                /* spin on a ring before sleeping (COLI_SHM_SPIN_US) */
    int verbose;
    int started;                     /* start-up placement done: restarts place at once */
    /* per call scratch */
    int64_t *pair_target;            /* (pairs) worker index, -1 inproc, -2 done */
    size_t cap_pairs;
    unsigned char *excluded;         /* (n_w) failed during this layer */
    float *cur_y;                    /* y of the layer being computed */
    const int32_t *cur_ids;          /* its expert id per pair */
    int cur_layer;
    int64_t pending;                 /* pairs of this layer still without output */
    /* stats */
    fallback_count fb[SCHED_MAX_FALLBACK_KINDS];
    int n_fb;
    uint64_t fallbacks_total, foreign_dropped, late_dropped, stale_dropped, inproc_rows;
    lat_stats dispatch;
} sched;

/* ---- supervisor.c ---- */
int  sup_find_worker_bin(sched *s);
int  sup_spawn(sched *s, worker_link *w);
/* Reap dead children (non-blocking), start due restarts. */
void sup_tick(sched *s);
/* The process of w is gone (or must go): reap it, count, schedule restart. */
void sup_worker_lost(sched *s, worker_link *w, const char *reason, int count_it);
void sup_kill(sched *s, worker_link *w);
void sup_shutdown_all(sched *s);

/* ---- worker_link.c ---- */
/* Take every waiting message (wait up to timeout_ms for the first). */
void link_poll(sched *s, int timeout_ms);
int  link_send_place(sched *s, worker_link *w);
int  link_send_batch(sched *s, worker_link *w, int layer, int allow_load);
void link_set_state(worker_link *w, link_state st, const char *reason);
/* Handle one message from w (either path); stop w for a garbage answer. */
void link_dispatch(sched *s, worker_link *w, const wire_msg *m);
void link_quarantine(sched *s, worker_link *w, const char *why);

/* ---- link_ring.c: the shared-memory data path, coordinator side ---- */
/* Take w's reply slot if it holds a message. */
void link_ring_take(sched *s, worker_link *w);
void link_take_rings(sched *s);
/* Spin (up to s->spin_ns without progress) while ring requests are in flight. */
void link_spin_rings(sched *s);
/* Around a blocking poll: arm the doorbells of rings we wait on; returns the
 * number armed (adding their eventfds to items), or -1 when one is ready. */
int  link_rings_arm(sched *s, zmq_pollitem_t *items, int max_items);
void link_rings_disarm(sched *s);
const char *link_state_name(link_state st);

/* ---- link_remote.c: workers on other hosts (tcp + CURVE), coordinator side ---- */
/* Connect a fresh DEALER (CURVE client, keys from COLI_KEYS) to w's endpoint
 * and greet it; w is then STARTING until its hello. */
/* Before anything starts: remote devices need CURVE and keys (COLI_KEYS). */
int  remote_preflight(const device_spec *d, int n);
int  remote_connect(sched *s, worker_link *w);
void remote_close(worker_link *w);
/* Send to w whichever way it is reached (ROUTER + routing id, or its DEALER). */
int  link_send(sched *s, worker_link *w, Coli__Envelope *env, const void *payload, size_t bytes, int flags);
/* Poll items of the remote sockets and monitors; then take what they hold. */
int  remote_poll_items(sched *s, zmq_pollitem_t *items, int max_items);
void remote_take(sched *s);

/* ---- fallback_stats.c ---- */
void stats_fallback(sched *s, const worker_link *w, const char *reason);
void stats_latency(lat_stats *l, double seconds);
int  stats_json(moe_exec *self, char **json);
int  stats_text(moe_exec *self, char **text);

/* ---- scheduler.c ---- */
uint64_t sched_env_ms(const char *name, uint64_t dflt);
/* w's request in flight is answered: out holds its rows (validated). */
void sched_rows_done(sched *s, worker_link *w, const void *out); /* any alignment */
/* w's request in flight will not be answered: its pairs go elsewhere. */
void sched_rows_lost(sched *s, worker_link *w);

#endif
