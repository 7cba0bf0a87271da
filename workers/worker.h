/*
 * worker.h - the worker process: one device, one plugin, one DEALER socket.
 *
 * Life: parse the command line -> connect -> load the plugin (dlopen) ->
 * hello (OK or FAILED with the reason) -> Place (map the model, take
 * ownership of the experts) -> serve batches and heartbeat from the main
 * loop until Shutdown, or until the coordinator is gone (EOF on the lifeline
 * pipe, or a new parent, for local workers), then exit.
 */
#ifndef COLI_WORKER_H
#define COLI_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "proto/shm_ring.h"
#include "proto/wire.h"
#include "core/settings.h"
#include "core/expert_table.h"
#include "core/expert_ffn.h"
#include "core/gguf.h"
#include "plugins/plugin_abi.h"
#include "proto/coli.pb-c.h"

/* ---- fault injection (tests only; see docs/scheduler.md) ---------------- */
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
/* The fault to act on for a batch of this layer (counting it), or NULL. */
worker_fault *worker_fault_match(worker_fault *f, int n, int worker_id, int layer);
/* The fail-expert fault to act on for loading an expert of this layer at Place
 * (counting the load), or NULL. */
worker_fault *worker_fault_match_load(worker_fault *f, int n, int worker_id, int layer);
const char *worker_fault_name(worker_fault_kind k);

/* ---- the process ------------------------------------------------------- */
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

typedef struct worker {
    worker_args a;
    coli_settings set; /* the environment, read once at start (core/settings.h) */
    void *zctx, *sock;
    void *dl; /* dlopen handle of the plugin */
    const struct moe_plugin *plugin;
    moe_device *dev;
    moe_caps caps;
    gguf_file *model;
    struct coli_prefault *prefault; /* fills the held experts' page tables (core/prefault.h) */
    expert_table resident;          /* (layer, expert) pairs the plugin holds (values unused) */
    struct worker_cache *cache;     /* non-NULL once a Place said cache (docs/scheduler.md) */
    float *out;                     /* result buffer, grown on demand */
    size_t out_cap;
    float *xin; /* aligned copy of a misaligned input frame */
    size_t xin_cap;
    uint64_t batches, rows, last_request_id, hb_seq;
    uint64_t last_hb_ns;
    shm_ring ring;       /* batches and results of same-host workers */
    int in_ring_request; /* the batch being served came by the ring: so goes its reply */
    uint64_t spin_ns;    /* spin for the next ring request before sleeping */
    worker_fault faults[WORKER_MAX_FAULTS];
    int n_faults;
    int stop;
    /* --listen: a ROUTER serving one coordinator at a time (worker_remote.c) */
    int listening;
    unsigned char peer[WIRE_MAX_PEER]; /* routing id of the coordinator served now */
    size_t peer_len;                   /* 0: none yet */
    uint64_t busy_refused;             /* greetings refused "busy" (another coordinator is served) */
    char peer_session[40];             /* the served coordinator's session ("" = it sent none) */
    struct worker_zap *zap;            /* the ZAP handler thread */
} worker;

int worker_parse_args(int argc, char **argv, worker_args *a);
int worker_load_plugin(worker *w, char *why, size_t why_len);
int worker_attach_ring(worker *w, char *why, size_t why_len);
int worker_serve(worker *w); /* the main loop */
void worker_close(worker *w);

/* worker_main.c */
int worker_send_hello(worker *w, int ok, const char *why);
/* Close and reopen the device, dropping every expert and the model (a new
 * coordinator with another model). */
int worker_reopen_device(worker *w, char *why, size_t why_len);

/* Remote workers (worker_remote.c). */
/* Bind a ROUTER at a.listen as a CURVE server (a.keys), with a ZAP handler
 * that admits only the authorized coordinator keys; prints the endpoint. */
int worker_listen(worker *w);
/* Send to the coordinator (the current one, for a listening worker; nothing
 * when none has greeted yet). */
int worker_send(worker *w, Coli__Envelope *env, const void *payload, size_t bytes, int flags);
/* A listening worker's filter: a greeting makes its sender the coordinator
 * served (answered with a hello); messages of any other peer are dropped.
 * Returns 1 when m was consumed here. */
int worker_remote_gate(worker *w, const struct wire_msg *m);
/* After the context is terminated: join the ZAP thread, free. */
void worker_remote_close(worker *w);

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
/* Give the plugin expert (layer, e) with weights ew and record it resident. */
int worker_hand_expert(worker *w, int layer, int e, const expert_weights *ew, char *err, size_t err_len);
int worker_on_place(worker *w, const Coli__Envelope *env);
int worker_on_batch(worker *w, const Coli__Envelope *env, const void *x, size_t x_bytes);
/* Reply to batch b (request id): its n_rows outputs when ok, else FAILED with
 * why; by the ring when the batch came by it, else ZeroMQ. 0 or COLI_EIO. */
int worker_send_result(worker *w, uint64_t id, const Coli__ExpertBatch *b, int ok, const char *why, const float *out,
                       int64_t n_rows, uint64_t ns);
/* A reply whose framing itself is wrong, on whichever path the batch came (fault tests). */
void worker_send_garbage_frame(worker *w);

/* Fault injection around a batch (worker_fault.c; tests only, COLI_FAULT):
 * the two places where a batch handler meets it. */
/* Before computing a batch of layer: the fault that fires on it (counted),
 * or NULL; crash and hang strike here and do not return. */
worker_fault *worker_fault_before_batch(worker *w, int layer);
/* The reply to batch b as fault f wants it (w->out holds the computed rows):
 * garbage in place of the answer, or the answer and then a crash. Returns
 * what worker_send_result returns for the answer, 0 for garbage. */
int worker_fault_reply(worker *w, worker_fault *f, uint64_t id, const Coli__ExpertBatch *b, uint64_t ns);

#endif
