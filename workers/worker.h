/*
 * worker.h - the worker process: one device, one plugin, one DEALER socket.
 *
 * Life: parse the command line -> connect -> load the plugin (dlopen) ->
 * hello (OK or FAILED with the reason) -> Place (map the model, take
 * ownership of the experts) -> serve batches and heartbeat from the main
 * loop until Shutdown, or until the coordinator is gone (EOF on the lifeline
 * pipe, or a new parent, for local workers), then exit.
 *
 * One file per concern, each the one writer of its part of the worker below:
 *   worker_main.c    the command line, the settings, the plugin and its device; start and close
 *   worker_remote.c  the link: a local DEALER or a listening ROUTER, the coordinator served
 *   worker_serve.c   the main loop and handlers: what it holds, the ring, the buffers, the counters
 *   worker_cache.c   a live expert cache (loader thread, copies)
 *   worker_fault.c   fault injection (COLI_FAULT)
 */
#ifndef COLI_WORKER_H
#define COLI_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "proto/shm_ring.h"
#include "proto/wire.h"
#include "core/settings.h"
#include "core/kernels/expert_ffn.h"
#include "core/expert_table.h"
#include "core/gguf/gguf.h"
#include "plugins/plugin_abi.h"
#include "proto/coli.pb-c.h"

// ----------------------------------------------------------------------------
// fault injection (tests only; see docs/scheduler.md)
typedef enum worker_fault_kind {
    FAULT_NONE = 0,
    FAULT_CRASH,        /* SIGKILL itself when the batch arrives */
    FAULT_CRASH_DURING, /* ... after computing, before replying */
    FAULT_CRASH_AFTER,  /* ... right after replying */
    FAULT_HANG,         /* SIGSTOP itself when the batch arrives */
    FAULT_GARBAGE_NAN,  /* reply with a NaN in the output */
    FAULT_GARBAGE_SIZE, /* reply with one row too few */
    FAULT_GARBAGE_ID,   /* reply under a request id never issued */
    FAULT_FAIL_LOAD,    /* the plugin "fails to initialise" */
    FAULT_GARBAGE_RING, /* reply with a lying ring slot header (a non-envelope frame over ZeroMQ) */
    FAULT_FAIL_EXPERT,  /* an expert load at Place fails as a device allocation would */
    FAULT_FAIL_BATCH,   /* answer every matching batch with an error (persistent, not once) */
    FAULT_NO_ACT,       /* act as a plugin of ABI <= 1.3 (caps.act_mask 0): gpt-oss experts refused */
} worker_fault_kind;

typedef struct worker_fault {
    worker_fault_kind kind;
    int layer;     /* -1 = any layer */
    int worker;    /* -1 = any worker id */
    int64_t after; /* matching batches to let through first */
    int64_t seen;  /* matching batches seen so far */
    int fired;
} worker_fault;

#define WORKER_MAX_FAULTS 8

/* Parse COLI_FAULT ("KIND[@layer=L][@worker=W][:after=N]", comma list).
 * Returns the number parsed or a negative coli_status naming the bad part. */
int worker_fault_parse(const char *spec, worker_fault *out, int cap);
const char *worker_fault_name(worker_fault_kind k);

// ----------------------------------------------------------------------------
// the process
typedef struct worker_args {
    const char *connect;    /* endpoint the DEALER connects to */
    const char *listen;     /* or binds (remote workers) */
    const char *plugin;     /* "cpu", "cuda", ... */
    const char *plugin_dir; /* NULL: set.plugin_dir (COLI_PLUGIN_DIR) or <exe>/../lib */
    int device_index;
    int worker_id;
    unsigned generation;
    int n_threads;
    uint64_t budget;
    int parent_pid;  /* 0: not a local child */
    int lifeline_fd; /* read end of the coordinator's lifeline pipe; -1: none */
    int id_fd;       /* --id-fd: a pipe holding this spawn's routing id (with its secret); -1: none */
    int heartbeat_ms;
    const char *ring;       /* "FD,BELL_REQ,BELL_REP": the shared-memory ring (local workers) */
    const char *probe;      /* --probe NAME: print the plugin's device count as JSON, exit */
    const char *keys;       /* --keys DIR: CURVE keys of a --listen worker (worker_remote.c) */
    const char *model_path; /* -m FILE: this host's copy of the model (remote workers) */
    int takeover;           /* --takeover: a newer coordinator's greeting wins over the one served */
} worker_args;

struct worker_cache; /* worker_cache.c: a live expert cache's loader thread and copies */

/* Each part of a worker has one file that writes it; the others read it or
 * call that file's functions (as coordinator/sched/sched_internal.h does for
 * the coordinator's side). */

/* The plugin and its device (worker_main.c). */
typedef struct worker_device {
    void *dl; /* dlopen handle of the plugin */
    const struct moe_plugin *plugin;
    moe_device *dev;
    moe_caps caps;
} worker_device;

/* The socket and the coordinator served (worker_remote.c: the local DEALER
 * and the listening ROUTER alike). */
typedef struct worker_link {
    void *zctx, *sock;
    /* who this worker is to the coordinator served: --id and --gen, then
     * what a greeting of a coordinator says (a listening worker) */
    int worker_id;
    unsigned generation;
    /* --listen: a ROUTER serving one coordinator at a time */
    int listening;
    unsigned char peer[WIRE_MAX_PEER]; /* routing id of the coordinator served now */
    size_t peer_len;                   /* 0: none yet */
    uint64_t busy_refused;             /* greetings refused "busy" (another coordinator is served) */
    char peer_session[40];             /* the served coordinator's session ("" = it sent none) */
    struct worker_zap *zap;            /* the ZAP handler thread */
} worker_link;

/* What it holds (worker_serve.c): the model and the experts handed to the plugin. */
typedef struct worker_hold {
    gguf_file *model;
    struct coli_prefault *prefault; /* fills the held experts' page tables (core/prefault.h) */
    expert_table resident;
} worker_hold;

/* The serving loop (worker_serve.c): the ring, the batch buffers, the counters a heartbeat reports. */
typedef struct worker_loop {
    shm_ring ring;       /* batches and results of same-host workers */
    int in_ring_request; /* the batch being served came by the ring: so goes its reply */
    uint64_t spin_ns;    /* spin for the next ring request before sleeping */
    float *out;          /* result buffer, grown on demand */
    size_t out_cap;
    float *xin; /* aligned copy of a misaligned input frame */
    size_t xin_cap;
    uint64_t batches, rows, last_request_id, hb_seq;
    uint64_t last_hb_ns;
    struct worker_mem *mem; /* worker_mem.c: the memory sampler thread */
    int stop;
} worker_loop;

/* Fault injection (worker_fault.c). */
typedef struct worker_faults {
    worker_fault f[WORKER_MAX_FAULTS];
    int n;
} worker_faults;

typedef struct worker {
    worker_args a;     /* the command line (worker_main.c) */
    coli_settings set; /* the environment, read once at start (worker_main.c; core/settings.h) */
    worker_device device;
    worker_link link;
    worker_hold hold;
    worker_loop loop;
    struct worker_cache *cache; /* non-NULL once a Place said cache (worker_cache.c; docs/scheduler.md) */
    worker_faults faults;
} worker;

int worker_parse_args(int argc, char **argv, worker_args *a);
int worker_load_plugin(worker *w, char *why, size_t why_len);
void worker_close(worker *w);

/* worker_main.c */
int worker_send_hello(worker *w, int ok, const char *why);
/* Close and reopen the device, dropping every expert and the model (a new
 * coordinator with another model). */
int worker_reopen_device(worker *w, char *why, size_t why_len);

/* The link (worker_remote.c). */
/* Take the identity of the command line, then connect a DEALER to a.connect
 * under routing id (len bytes), or (a.listen) bind a ROUTER at a.listen as a
 * CURVE server (a.keys), with a ZAP handler that admits only the authorized
 * coordinator keys, and print the endpoint (id unused). */
int worker_connect(worker *w, const char *id, size_t len);
/* Send to the coordinator (the current one, for a listening worker; nothing
 * when none has greeted yet). */
int worker_send(worker *w, Coli__Envelope *env, const void *payload, size_t bytes, int flags);
/* A listening worker's filter: a greeting makes its sender the coordinator
 * served (answered with a hello); messages of any other peer are dropped.
 * Returns 1 when m was consumed here. */
int worker_remote_gate(worker *w, const struct wire_msg *m);
/* Keep unsent messages up to ms at close (a FAILED hello must get out). */
void worker_link_linger(worker *w, int ms);
/* Close the socket, terminate the context, join the ZAP thread, free. */
void worker_link_close(worker *w);

/* Live expert cache (worker_cache.c). */
/* Become a cache worker (a Place with cache set): the plugin must have
 * unload_expert; starts the loader thread. Idempotent. 0, or nonzero with why. */
int worker_cache_enable(worker *w, char *why, size_t why_len);
/* Load expert (layer, e) now, as a copy in the worker's memory (Place of a
 * cache worker). 0 or the plugin's error with err. */
int worker_cache_load_now(worker *w, int layer, int e, const expert_weights *src, char *err, size_t err_len);
/* CacheLoad: validate, queue for the loader thread (acked when resident);
 * CacheEvict: unload now and ack. A request refused as a whole gets a FAILED
 * ack naming the reason. 0 or COLI_EIO (the ack could not be sent). */
int worker_cache_on_load(worker *w, const Coli__Envelope *env);
int worker_cache_on_evict(worker *w, const Coli__Envelope *env);
/* Adopt what the loader thread staged (between batches) and ack it. */
void worker_cache_poll(worker *w);
/* The main thread is idle (no batch waiting): stage a job the loader thread
 * has left waiting too long (a starved thread), adopt it, ack it. Returns 1
 * while loads still wait for the loader. */
int worker_cache_idle(worker *w);
/* The loader's doorbell (an eventfd to poll), or -1. */
int worker_cache_fd(const worker *w);
/* Join the loader, free the copies (after the plugin dropped them). */
void worker_cache_close(worker *w);

/* Handlers (worker_serve.c). */
int worker_attach_ring(worker *w, char *why, size_t why_len);
int worker_serve(worker *w); /* the main loop */
/* Give the plugin expert (layer, e) with weights ew and record it resident. */
int worker_hand_expert(worker *w, int layer, int e, const expert_weights *ew, char *err, size_t err_len);
/* No longer resident (the plugin dropped it or never kept it): 1 when it was. */
int worker_forget_expert(worker *w, int layer, int e);
/* Drop the model, the resident set and the prefault pass (the device is closed). */
void worker_hold_close(worker *w);
/* Free the batch buffers, unmap the ring. */
void worker_loop_close(worker *w);
/* The next heartbeat's body: its sequence number (counted) and the counters. */
void worker_heartbeat_fill(worker *w, Coli__Heartbeat *h);
/* Memory (worker_mem.c): the heartbeat's rss_bytes, model_rss_bytes and
 * cgroup_bytes, the latest sample of a thread that samples once a second
 * (started by the first call). */
void worker_mem_fill(worker *w, Coli__Heartbeat *h);
/* Sample again now (the held set changed). */
void worker_mem_resample(worker *w);
/* Stop and join the sampler. */
void worker_mem_close(worker *w);
/* A remote worker (listening) maps the whole file but holds only its experts:
 * no readahead around a fault, no huge page mappings of the file. */
void worker_mem_advise_model(const worker *w);
/* A remote worker: read [p, p + n) ahead now, in large reads (before a
 * plugin copies an expert or the prefault pass maps it, which MADV_RANDOM
 * would otherwise leave to single pages). */
void worker_mem_willneed(const worker *w, const void *p, size_t n);
/* Give back the whole pages of [p, p + n) of the mapped model (MADV_DONTNEED):
 * an expert no longer held leaves the resident set. */
void worker_mem_release(const void *p, size_t n);
/* A new coordinator is served: no request of it has been seen. */
void worker_served_anew(worker *w);
int worker_on_place(worker *w, const Coli__Envelope *env);
int worker_on_batch(worker *w, const Coli__Envelope *env, const void *x, size_t x_bytes);
/* Reply to batch b (request id): its n_rows outputs when ok, else FAILED with
 * why; by the ring when the batch came by it, else ZeroMQ. 0 or COLI_EIO. */
int worker_send_result(worker *w, uint64_t id, const Coli__ExpertBatch *b, int ok, const char *why, const float *out,
                       int64_t n_rows, uint64_t ns);
/* A reply whose framing itself is wrong, on whichever path the batch came (fault tests). */
void worker_send_garbage_frame(worker *w);

/* Fault injection (worker_fault.c; tests only, COLI_FAULT). Faults strike
 * only in a worker's first generation. */
/* Parse set.fault into the worker's faults. 0, or the parser's error. */
int worker_faults_init(worker *w);
/* Should the plugin "fail to initialise" (fail-load)? */
int worker_fault_fail_load(const worker *w);
/* 1 when a no-act fault names this worker: its plugin's act_mask is ignored. */
int worker_fault_no_act(const worker *w);
/* Before loading an expert of layer at Place: the fail-expert fault that
 * fires on it (counted), or NULL. */
worker_fault *worker_fault_before_load(worker *w, int layer);
/* Before computing a batch of layer: the fault that fires on it (counted),
 * or NULL; crash and hang strike here and do not return. */
worker_fault *worker_fault_before_batch(worker *w, int layer);
/* The reply to batch b as fault f wants it (out holds the computed rows, and
 * garbage-nan spoils one): garbage in place of the answer, or the answer and
 * then a crash. Returns what worker_send_result returns for the answer, 0
 * for garbage. */
int worker_fault_reply(worker *w, worker_fault *f, uint64_t id, const Coli__ExpertBatch *b, float *out, uint64_t ns);

#endif
