/*
 * sched_internal.h - the worker executor's shared state (coordinator side).
 *
 * One file per concern works on it (docs/scheduler.md, docs/architecture.md):
 *   scheduler.c      moe_exec_workers_new, the per-layer fan-out / gather / fallback,
 *                    and what follows a worker's outcome (sched_outcome)
 *   placement.c      --devices parsing and the expert -> worker map
 *   heat_place.c     the map from routing heat and pins
 *   device_probe.c   --devices auto: GPU probes in child processes
 *   plan.c           coli_plan_text: the placement without starting workers
 *   supervisor.c     spawning, reaping, restart with back-off, shutdown
 *   worker_link.c    messages from workers: hello, place ack, heartbeat, results
 *   link_ring.c      the shared-memory data path (coordinator side)
 *   link_remote.c    workers on other hosts (tcp + CURVE)
 *   fallback_stats.c counters, latency histograms, JSON and text summaries
 *   host_tier.c      remote hosts' experts: moved when a host is lost, back when it returns
 * Each part of worker_link and sched below names the file that writes it.
 */
#ifndef COLI_COORD_SCHED_INTERNAL_H
#define COLI_COORD_SCHED_INTERNAL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "coordinator/moe_exec.h"
#include "core/clock.h"
#include "core/settings.h"
#include "proto/shm_ring.h"
#include "proto/wire.h"

// ----------------------------------------------------------------------------
// devices and placement (placement.c)
typedef struct device_spec {
    char plugin[16];    /* "cpu", "cuda", "hip", "xdna" */
    int index;          /* vendor ordinal */
    uint64_t budget;    /* bytes of experts it may hold; 0 = unlimited */
    int threads;        /* cpu:N@T: compute threads of each (0 = an even share of n_threads) */
    char endpoint[224]; /* plugin "remote": the worker's tcp:// endpoint (link_remote.c) */
    int cache;          /* @cache=SIZE: a live expert cache holding at most budget bytes (cache_link.c) */
    double cache_pct;   /* @cache=P%: budget = P% of the model's expert bytes (set at start); 0: bytes given */
} device_spec;

#define SCHED_MAX_WORKERS 64

/* Parse a --devices string ("cpu:2,cuda:0=8G", "auto", NULL = default).
 * *inproc = 1 when it says "inproc" (then n = 0). */
int sched_parse_devices(const char *devices, device_spec *out, int cap, int *n, int *inproc);
/* Append one device (plugin, index, budget; no endpoint) to out[*n]; COLI_EINVAL when cap are there. */
int sched_add_device(device_spec *out, int cap, int *n, const char *plugin, int index, uint64_t budget);
/* Bytes this process may still use: MemAvailable, or the room left under
 * its memory cgroup when that is less (mem_limit.c); 0 when unknown. */
uint64_t sched_memory_allowed(void);
/* A memory size as --devices writes it (8G, 512M, 1.5G); 0 or COLI_EINVAL naming it. */
int sched_parse_budget(const char *s, uint64_t *out);
/* CPU workers of "auto" (from the core count). */
int sched_default_cpu_workers(void);
/* Replace each "auto" entry (plugin "auto", the default) by one worker per
 * GPU that the cuda and hip plugins find (each probed in its own process,
 * `coli-worker --probe NAME`, with a timeout: a broken driver cannot take the
 * coordinator down) plus the default CPU workers as their fallback target;
 * renumbers cpu workers. When the expanded list holds no worker besides
 * local CPU ones (no GPU found, no remote, no --xdna), auto's CPU workers are
 * dropped: *n may become 0, which means in-process (docs/scheduler.md).
 * worker_bin NULL: no probes. No GPU is normal and silent. */
int sched_expand_auto(const coli_settings *set, const char *worker_bin, device_spec *d, int cap, int *n, int verbose);

/* What sched_workers_of decides. */
typedef struct sched_workers {
    int n;                     /* workers to start; 0: every expert runs in this process */
    int inproc;                /* 1: devices said "inproc" (nothing probed, no worker program sought) */
    char worker_bin[PATH_MAX]; /* the coli-worker program, "" when none was found */
} sched_workers;

/* The one decision whether experts run in-process, taken by the executor,
 * coli_plan_* and coli_devices_check_* alike: the workers a devices string
 * gives on this machine (d, up to cap), parsed, `auto` expanded (its GPU
 * probes run: sched_expand_auto) and the NPU lane added when requested
 * (set->xdna; `auto` never adds it by itself, docs/xdna.md). out->n == 0
 * means in-process: "inproc", or auto found nothing that needs a worker
 * (faster than local CPU workers: docs/scheduler.md). A missing worker
 * program is an error only for whoever starts workers (sup_find_worker_bin
 * says why). 0 or COLI_EINVAL (a bad devices string, a list too long). */
int sched_workers_of(const coli_settings *set, const char *devices, device_spec *d, int cap, sched_workers *out,
                     int verbose);

typedef struct placement_in {
    int n_layer, n_expert;
    const uint64_t *expert_bytes; /* (n_layer) bytes of one expert of each layer; 0: a dense layer */
    int n_workers;
    const uint64_t *budget; /* (n_workers) 0 = unlimited */
    const int *usable;      /* (n_workers) 0 = takes nothing */
    const uint8_t *able;    /* (n_workers * n_layer) 0: worker w cannot compute layer l's experts
                               (placement_fits); NULL: every worker computes every layer */
} placement_in;

/* What computing one layer's experts takes: the weight types (bit 1 << ggml
 * type) and the act_mask bits (plugin_abi.h: SWIGLU_OAI, biases). */
typedef struct place_need {
    uint64_t types;
    uint32_t acts;
} place_need;

struct expert_weights;
void placement_need_of(const struct expert_weights *ew, place_need *out);
/* 1 when a worker whose hello reported these type and act masks computes them. */
int placement_fits(const place_need *need, uint64_t types, uint32_t acts);
/* May worker w be given an expert of layer l (usable, able)? */
int placement_may(const placement_in *in, int w, int l);

/* owner (n_layer * n_expert) = worker index, or -1 when nobody has room
 * (computed in-process) or the layer has no experts (expert_bytes 0). Within each layer, each expert goes to the usable
 * worker with the fewest bytes of that layer so far that still has budget. */
int placement_plan(const placement_in *in, int32_t *owner);

// ----------------------------------------------------------------------------
// placement from heat (heat_place.c)
/* How fast a device computes experts, as a rank (higher = faster): the kind
 * (cuda/hip > xdna > remote > cpu), then its compute threads (cpu:N@T, else
 * threads: the share it gets). A static rank from the device's kind, not a measurement. */
long sched_device_speed(const device_spec *d, int threads);
/* "L:E=W,L:*=W" into pin (n_layer * n_expert, -1 = not pinned): W is a
 * worker's name as `coli plan` shows it ("cpu:1", "cuda:0", "remote:0"; also
 * "cpu1") among d[0..n_w), not a live expert cache. pin NULL: check only
 * (n_layer, n_expert 0: numbers unbounded). 0 or COLI_EINVAL naming the item
 * and listing the workers. */
int sched_parse_pins(const char *pins, const device_spec *d, int n_w, int n_layer, int n_expert, int32_t *pin);
/* Pins onto the disk tier's RAM cache ("L:E=ram", "L:*=ram"; disk_tier.c):
 * pin[slot] = 0 for each pinned slot, else -1. n_layer 0 and pin NULL: only
 * the syntax and the name are checked. 0 or COLI_EINVAL naming the item. */
int disk_tier_parse_pins(const char *pins, int n_layer, int n_expert, int32_t *pin);
/* `coli plan` for in-process experts of the model at path (n_layer x
 * n_expert, k routed per token) under p: the disk tier's budget, what stays
 * resident and the reads a token should expect (disk_plan.c); *text NULL
 * when the tier does not apply (the mapped file). */
int disk_plan_text(const char *model_path, const coli_model_params *p, int n_layer, int n_expert, int k, char **text);
/* "cpu:0, cpu:1, cuda:0" (or "none") into out (cap bytes). */
void sched_worker_names(const device_spec *d, int n_w, char *out, size_t cap);
/* Placement that follows the heat: pinned experts first (pin may be NULL),
 * then every other expert, hottest first (heat: (n_layer, n_expert)
 * selection counts), onto the fastest usable worker with budget room; among
 * workers of equal speed the one expected to serve the fewest rows of that
 * layer so far (then fewest bytes). A pin that does not fit its worker's
 * budget is COLI_EINVAL naming it. owner as placement_plan. */
int placement_plan_heat(const placement_in *in, const uint64_t *heat, const long *speed, const int32_t *pin,
                        int32_t *owner);
/* share[w] (n_w + 1 entries; share[n_w]: in-process) = the fraction of the
 * routed rows heat says owner sends to each worker (0 when heat is all zero). */
void placement_row_share(const placement_in *in, const uint64_t *heat, const int32_t *owner, double *share);

// ----------------------------------------------------------------------------
// one worker, as the coordinator sees it
typedef enum link_state {
    LINK_STARTING, /* spawned, no hello yet */
    LINK_PLACING,  /* hello OK, Place sent, no ack yet */
    LINK_UP,
    LINK_HUNG,        /* missed a deadline; no work until it proves alive */
    LINK_DOWN,        /* dead; restart pending (or restart limit reached) */
    LINK_FAILED,      /* hello or place said FAILED: permanent */
    LINK_QUARANTINED, /* answered garbage: permanent */
} link_state;

#define SCHED_LAT_RING 4096
#define SCHED_N_BUCKETS 13
#define SCHED_FAIL_TIMES 8

typedef struct lat_stats { /* latency in seconds */
    double ring[SCHED_LAT_RING];
    uint64_t n;                        /* samples ever */
    uint64_t buckets[SCHED_N_BUCKETS]; /* non-cumulative */
    double sum;
} lat_stats;

/* Each part of a worker_link has one file that writes it; the others read. */

/* Its process and its generations (supervisor.c; link_remote.c for a remote
 * worker, whose "process" is a connection). */
typedef struct link_proc {
    pid_t pid;
    int pidfd; /* -1 when pidfd_open is unavailable */
    unsigned gen;
    int n_threads;
    char routing_id[64]; /* local: "w<id>.<gen>.<32 hex secret>" (supervisor.c; see
                                        worker_identity.c); remote: "w<id>.<gen>" (its own DEALER) */
    size_t routing_len;
    uint64_t exit_seen_ns; /* died before its hello: wait for a FAILED hello in flight */
    uint64_t restart_at_ns;
    uint64_t fail_ns[SCHED_FAIL_TIMES];
    int n_fail;
    int restart_limited; /* DOWN for good: it cannot be started */
    int probation;       /* re-probes since it failed too often; 0 once a trial batch succeeded */
    uint64_t restarts;
} link_proc;

/* What it holds: its hello and the Place conversation (worker_link.c). */
typedef struct link_place {
    int hello_ok; /* its hello said OK (this generation) */
    char device_name[64];
    uint64_t caps_budget; /* memory budget its hello reported */
    uint64_t caps_types;  /* weight types its hello reported (dtype_mask | dtype_mask_hi << 32) */
    uint32_t caps_acts;   /* act_mask its hello reported (0 from an older worker) */
    uint64_t owned_experts, owned_bytes;
    uint64_t resident_experts, resident_bytes;
    uint64_t refused_experts; /* placed experts it could not hold (all generations) */
    int replacing;            /* re-Places sent while up (host_tier.c), not yet answered */
} link_place;

/* The request in flight (scheduler.c gathers rows; worker_link.c sends them). */
typedef struct link_req {
    uint64_t id; /* 0 = none */
    uint64_t sent_ns;
    int64_t n_rows;
    int64_t *row_pair; /* (n_rows) pair index of each row, grouped by expert */
    float *x;          /* (n_rows, n_embd) gathered inputs */
    size_t cap_rows;
    int x_finite;
    uint64_t hung_id; /* a late reply with this id is dropped */
} link_req;

/* The shared-memory data path (link_ring.c; supervisor.c makes the ring). */
typedef struct link_shm {
    shm_ring ring;    /* batches and results go here when ring.base is set */
    uint64_t replies; /* messages taken from its rings (all generations) */
} link_shm;

/* A worker on another host (link_remote.c): our own DEALER to it, and its monitor. */
typedef struct link_tcp {
    int on; /* dev.endpoint is set: this worker is remote */
    void *sock, *mon;
    int handshaked; /* the CURVE handshake of this generation succeeded */
} link_tcp;

#define SCHED_MAX_COUNTERS 8

/* Counters (fallback_stats.c formats them; the files that see the events count). */
#define SCHED_RECENT_BATCHES 32

typedef struct link_stats {
    uint64_t batches, rows, rerouted_rows, heartbeats;
    /* its memory as its latest heartbeat says (worker_mem.c): VmRSS, the mapped model's part, its cgroup's usage */
    uint64_t rss_bytes, model_rss_bytes, cgroup_bytes;
    /* bytes of our messages to it and of its messages to us (protobuf header + payload, as handed to
       ZeroMQ or a ring slot; ZMTP framing and CURVE's per-frame overhead not included), all generations */
    uint64_t bytes_sent, bytes_received, messages_sent, messages_received;
    lat_stats lat;
    uint32_t recent_failed; /* bit i: the i-th latest batch failed */
    int recent_n;           /* batches in that window, <= SCHED_RECENT_BATCHES */
    /* its plugin's own counters, latest values (e.g. xdna buckets; worker_link.c, from each result) */
    char counter_name[SCHED_MAX_COUNTERS][32];
    uint64_t counter_value[SCHED_MAX_COUNTERS];
    int n_counters;
} link_stats;

typedef struct worker_link {
    int id;
    device_spec dev;
    char device[32]; /* "cpu:0", "cuda:1" */
    int is_cpu;
    link_state state; /* link_set_state (worker_link.c) */
    char reason[256];
    uint64_t state_since_ns;
    uint64_t last_seen_ns; /* any message from it */
    link_proc proc;
    link_place place;
    link_req req;
    link_shm shm;
    link_tcp tcp;
    link_stats stats;
    struct cache_worker *cache; /* a live expert cache's state, NULL otherwise (cache_link.c) */
} worker_link;

typedef struct fallback_count {
    char device[32];
    char reason[24];
    uint64_t count;
} fallback_count;

#define SCHED_MAX_FALLBACK_KINDS 64

/* The model as the executor needs it (scheduler.c, read-only after start). */
typedef struct sched_model {
    char *path;
    uint64_t size, hash; /* identity both sides check (wire_model_identity) */
    int n_layer, n_expert;
    int64_t n_embd;
    uint64_t *expert_bytes; /* (n_layer) */
    place_need *need;       /* (n_layer) what a worker must compute to be given its experts */
} sched_model;

/* Deadlines and switches, from coli_settings (scheduler.c, at start). */
typedef struct sched_limits {
    uint64_t deadline_ns, per_row_ns, start_ns, hang_kill_ns;
    uint64_t backoff_ns, backoff_max_ns, fail_window_ns;
    uint64_t reprobe_ns; /* first re-probe of a worker that failed too often; 0: never */
    int max_failures;
    uint64_t hb_ns;    /* worker heartbeat interval */
    uint64_t hb_miss;  /* idle silence of this many intervals = down (0 = off) */
    int use_rings;     /* local workers get a shm ring */
    int64_t ring_rows; /* rows one ring slot holds (the largest batch) */
    uint64_t spin_ns;  /* spin on a ring before sleeping */
} sched_limits;

/* Sockets, the private directory, the lifeline (scheduler.c; supervisor.c spawns with them). */
typedef struct sched_transport {
    void *zctx, *router;
    char dir[PATH_MAX]; /* private temporary directory */
    char endpoint[PATH_MAX + 16];
    char worker_bin[PATH_MAX];
    int lifeline[2];  /* pipe: workers hold the read end, EOF = coordinator gone */
    char session[17]; /* this executor instance, 16 hex (random): the ipc name and
                                        the session of its greetings to remote workers */
} sched_transport;

/* Who holds what (scheduler.c plans; worker_link.c takes refusals back). */
typedef struct sched_placement {
    int32_t *owner;       /* (n_layer, n_expert) worker index or -1 */
    uint64_t *refused_by; /* (n_layer, n_expert) bit w: worker w refused it at Place */
    int started;          /* start-up placement done: restarts place at once */
    int32_t *home;        /* (n_layer, n_expert) the worker the plan gave it, -1 none (host_tier.c) */
    int32_t *moving;      /* (n_layer, n_expert) the host asked to hold it while its home is lost, no ack yet; -1 */
    uint64_t *heat; /* (n_layer, n_expert) the heat file's counts at load + the pairs routed since (host_tier.c) */
} sched_placement;

/* Experts moved between remote hosts and the coordinator (host_tier.c). */
typedef struct host_moves {
    uint64_t events;                   /* hosts lost while holding experts */
    uint64_t to_hosts, to_hosts_bytes; /* moved to another host with room (acknowledged held) */
    uint64_t to_coord, to_coord_bytes; /* left to the coordinator (no host had room, or it refused) */
    uint64_t returned, returned_bytes; /* back on their home host after it returned */
    double seconds, last_seconds;      /* from a loss to the last ack of its moves: all, the latest */
    uint64_t started_ns;               /* the move in progress, 0 none */
} host_moves;

/* The layer being computed (scheduler.c). */
typedef struct sched_call {
    int64_t *pair_target; /* (pairs) worker index, -1 inproc, -2 done */
    int16_t *done_by;     /* (pairs) who computed it: worker index, -1 in-process (route traces) */
    size_t cap_pairs;
    unsigned char *excluded; /* (n_w) failed during this layer */
    float *y;                /* y of the layer being computed */
    const int32_t *ids;      /* its expert id per pair */
    int layer;
    int64_t pending;      /* pairs of this layer still without output */
    int64_t *group_start; /* (n_expert + 1) scratch of moe_group_by_expert */
    int64_t *grouped;     /* (cap_grouped) one worker's rows regrouped by expert */
    size_t cap_grouped;
    uint64_t next_req; /* request ids, never reused */
    uint64_t side_ns;  /* the caller's side work in this layer (left out of the dispatch latency) */
} sched_call;

/* Executor-wide counters (fallback_stats.c formats them). */
typedef struct sched_stats {
    fallback_count fb[SCHED_MAX_FALLBACK_KINDS];
    int n_fb;
    uint64_t fallbacks_total, foreign_dropped, late_dropped, stale_dropped, inproc_rows;
    uint64_t impostor_dropped; /* names a live worker's id and generation without its secret */
    uint64_t side_overlapped;  /* layers whose caller's side work (moe_exec.side) ran while workers computed */
    lat_stats dispatch;
    host_moves moves;
} sched_stats;

typedef struct sched {
    moe_exec base; /* first: a moe_exec* is a sched* */
    moe_exec_config cfg;
    coli_settings set; /* read once at start (core/settings.h) */
    int verbose;
    sched_model model;
    sched_limits lim;
    sched_transport net;
    worker_link *w;
    int n_w;
    sched_placement place;
    moe_exec *inproc; /* fallback of last resort, made on first use */
    sched_call call;
    sched_stats stats;
} sched;

// ----------------------------------------------------------------------------
// what the link files report (scheduler.c decides what follows)
typedef enum link_outcome {
    LINK_LOST,           /* its process or connection is gone: restart it (supervisor.c) */
    LINK_GARBAGE,        /* it answered garbage: its rows go elsewhere, quarantined for good */
    LINK_REFUSED,        /* its hello, Place reply or handshake says it cannot serve: failed for good */
    LINK_BATCH_FAILED,   /* it could not do this batch: its rows go elsewhere */
    LINK_EXPERT_REFUSED, /* one expert placed on it is not held: it stays on the CPU path */
} link_outcome;

/* Report outcome o of worker w. reason: the fallback reason it counts as
 * ("crash", "garbage", "alloc", "auth", "error", or an expert's refusal
 * kind); why: what the state and stderr say (NULL: nothing to add). The
 * counting, the rows handed back, the state change and any kill or restart
 * follow from here, in one place, the same whichever link saw it. */
void sched_outcome(sched *s, worker_link *w, link_outcome o, const char *reason, const char *why);

/* How a send went (link_send*): the caller decides what follows. */
typedef enum link_sent {
    LINK_SENT = 0,
    LINK_SEND_ERROR,  /* this message could not go (coli_last_error says why); the worker may be fine */
    LINK_UNREACHABLE, /* the worker is gone: nothing can reach it */
} link_sent;

// ----------------------------------------------------------------------------
// supervisor.c
/* The coli-worker program into out (cap bytes): set->worker_bin (COLI_WORKER,
 * or coli_model_params.worker_path), else next to this program (bin/coli,
 * tests/x -> ../bin), else <COLI_BUILD or build>/bin. 0 or COLI_EIO. */
int sup_find_worker_bin(const coli_settings *set, char *out, size_t cap);
int sup_spawn(sched *s, worker_link *w);
/* Reap dead children (non-blocking), start due restarts. */
void sup_tick(sched *s);
/* The process of w is gone (or must go): reap it, count, schedule restart. */
void sup_worker_lost(sched *s, worker_link *w, const char *reason, int count_it);
/* w answered a batch: a worker on probation (re-probed after failing too often) is back. */
void sup_batch_ok(sched *s, worker_link *w);
void sup_kill(sched *s, worker_link *w);
void sup_shutdown_all(sched *s);

// ----------------------------------------------------------------------------
// worker_identity.c: who may speak for a local worker
/* A fresh routing id for w's next generation, "w<id>.<gen>.<32 hex>" from
 * getrandom (never in argv or the environment), into w->proc.routing_id;
 * then a pipe whose read end (*read_fd, close-on-exec: the spawn clears
 * that in the child alone) already holds it. 0 or COLI_EIO. */
int ident_new_secret(worker_link *w, int *read_fd);
/* The current worker a routing id names, or NULL: *kind 0 = unknown peer,
 * 1 = an older generation (stale), 2 = a live id and generation with a
 * wrong or missing secret (an impostor). Compared in constant time. */
worker_link *ident_find(sched *s, const void *peer, size_t peer_len, int *kind);

// ----------------------------------------------------------------------------
// worker_link.c
/* Take every waiting message (wait up to timeout_ms for the first); the
 * caller then runs sup_tick (deaths, restarts). */
void link_poll(sched *s, int timeout_ms);
/* Send w its experts (s->place.owner); w is then PLACING. */
link_sent link_send_place(sched *s, worker_link *w);
/* Send w->req's rows (grouped by expert) for layer; sets w->req.id, sent_ns. */
link_sent link_send_batch(sched *s, worker_link *w, int layer, int allow_load);
void link_set_state(worker_link *w, link_state st, const char *reason);
/* Count one message sent to w (env as sent, payload_bytes after it) in w->stats.bytes_sent. */
void link_count_sent(worker_link *w, const Coli__Envelope *env, size_t payload_bytes);
/* A new generation of w (spawned or reconnected): nothing in flight, no hello yet, STARTING. */
void link_starting(worker_link *w);
/* "starting", "up", ...: the state as stats name it (a static string). */
const char *link_state_name(link_state st);
/* Handle one message from w (either path); a garbage answer is reported (LINK_GARBAGE). */
void link_dispatch(sched *s, worker_link *w, const wire_msg *m);

// ----------------------------------------------------------------------------
// link_ring.c: the shared-memory data path, coordinator side
/* Take w's reply slot if it holds a message. */
void link_ring_take(sched *s, worker_link *w);
void link_take_rings(sched *s);
/* Spin (up to s->lim.spin_ns without progress) while ring requests are in flight. */
void link_spin_rings(sched *s);
/* Around a blocking poll: arm the doorbells of rings we wait on; returns the
 * number armed (adding their eventfds to items), or -1 when one is ready. */
int link_rings_arm(sched *s, zmq_pollitem_t *items, int max_items);
void link_rings_disarm(sched *s);

// ----------------------------------------------------------------------------
// link_remote.c: workers on other hosts (tcp + CURVE), coordinator side
/* Before anything starts: remote devices need CURVE and keys (set->keys_dir). */
int remote_preflight(const coli_settings *set, const device_spec *d, int n);
/* Connect a fresh DEALER (CURVE client, keys from s->set.keys_dir) to w's
 * endpoint and greet it; w is then STARTING until its hello. */
int remote_connect(sched *s, worker_link *w);
void remote_close(worker_link *w);
/* Send to w whichever way it is reached (ROUTER + routing id, or its DEALER). */
link_sent link_send(sched *s, worker_link *w, Coli__Envelope *env, const void *payload, size_t bytes, int flags);
/* Poll items of the remote sockets and monitors; then take what they hold. */
int remote_poll_items(sched *s, zmq_pollitem_t *items, int max_items);
void remote_take(sched *s);

// ----------------------------------------------------------------------------
// cache_link.c: live expert caches (docs/scheduler.md, "Live expert cache")
/* Resolve @cache=P% budgets (bytes of the model's experts), make each cache
 * worker's policy, seed its initial set from heat (NULL: none). 0 or COLI_ENOMEM. */
int cache_setup(sched *s, const uint64_t *heat);
/* Before the workers start: @cache=P% into bytes (d[i].budget) of s's model. */
void cache_budgets(const sched *s, device_spec *d, int n);
/* The same for a model whose experts weigh all_expert_bytes in total (coli plan). */
void cache_budgets_of(uint64_t all_expert_bytes, device_spec *d, int n);
void cache_free(sched *s);
/* Does w's Place name slot? (a cache worker: its wanted set; else its owner map) */
int cache_place_has(const sched *s, const worker_link *w, size_t slot);
/* w (a cache worker) answered its Place: held experts become routable. */
void cache_on_place_ack(sched *s, worker_link *w, const Coli__PlaceAck *a);
/* A CacheAck from w: validated (garbage is reported), states follow. */
void cache_on_ack(sched *s, worker_link *w, const Coli__CacheAck *a);
/* A new generation of w: nothing it held is routable until its Place is answered. */
void cache_restart(worker_link *w);
/* The cache worker serving pair slot (layer * n_expert + expert), or -1: the
 * pair's tier decides. count: the first assignment of the pair (hits, misses
 * and scores follow it). */
int cache_route(sched *s, size_t slot, int count);
/* Before layer's batches go out (x: its n_tok MoE inputs): when
 * COLI_CACHE_PREFETCH is on, predict layer + 1's experts with its router and
 * start loads of those not resident (free room, or colder ones under the
 * hysteresis). */
void cache_prefetch(sched *s, int layer, const float *x, int64_t n_tok);
/* After a layer of n_tok tokens (no batch in flight): promotions and evictions. */
void cache_after_layer(sched *s, int64_t n_tok);
/* The stats of w's cache as JSON members (",\"cache\":{...}") / a text line; nothing for other workers. */
struct coli_strbuf;
void cache_stats_json(const worker_link *w, struct coli_strbuf *b);
void cache_stats_text(const worker_link *w, struct coli_strbuf *b);

// ----------------------------------------------------------------------------
// host_tier.c: remote hosts' experts (docs/scheduler.md, "Remote hosts as a memory tier")
/* home, moving and heat (n_slots each), before anything is placed. 0 or COLI_ENOMEM. */
int host_tier_init(sched *s);
/* The plan is made: each expert's home is its owner now. */
void host_tier_planned(sched *s);
/* Count the layer's routed pairs into place.heat (ids checked by the caller). */
void host_tier_count(sched *s, int layer, const int32_t *ids, int64_t n_pairs);
/* Where each expert of lost goes: dest[slot] = a remote host with room or -1
 * (the coordinator), hottest first (place.heat); slots it did not hold are
 * left as they were. The number of its experts; -1 out of memory. */
int host_moves_plan(const sched *s, const worker_link *lost, int32_t *dest);
/* Is slot in w's Place? Its owner, its home, or moving to it. */
int host_place_has(const sched *s, const worker_link *w, size_t slot);
/* Remote worker w left service (DOWN): each expert it held goes to another
 * remote host with budget room (a re-Place; the coordinator computes it
 * until that host acks), else to the coordinator. */
void host_on_lost(sched *s, worker_link *w);
/* The answer to a re-Place of w (up): moved experts it holds become its. */
void host_on_replace_ack(sched *s, worker_link *w, const Coli__PlaceAck *a);
/* w answered its Place (it is up again): its home experts it holds come back
 * from wherever they went; the hosts that held them drop them (a re-Place). */
void host_on_home_ack(sched *s, worker_link *w, const Coli__PlaceAck *a);
/* The moves as JSON members / a summary line (nothing when none happened). */
struct coli_strbuf;
void host_moves_json(const sched *s, struct coli_strbuf *b);
void host_moves_text(const sched *s, struct coli_strbuf *b);

// ----------------------------------------------------------------------------
// fallback_stats.c
/* Count one fallback of w's device for reason. */
void stats_fallback(sched *s, const worker_link *w, const char *reason);
void stats_latency(lat_stats *l, double seconds);
/* One batch of w answered (ok = 1) or failed: the recent window /health judges by. */
void stats_batch_outcome(link_stats *st, int ok);
/* Format the stats as they are (the caller polls first): malloc'd, caller frees. */
int stats_json(const sched *s, char **json);
int stats_text(const sched *s, char **text);

// ----------------------------------------------------------------------------
// scheduler.c
/* w's request in flight is answered: out holds its rows (validated, any
 * alignment); counts the batch and its latency, clears the request. */
void sched_rows_done(sched *s, worker_link *w, const void *out);
/* w's request in flight will not be answered: its pairs go elsewhere. */
void sched_rows_lost(sched *s, worker_link *w);

#endif
