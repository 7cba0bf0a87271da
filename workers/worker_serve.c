/*
 * worker_serve.c - the worker's main loop and its message handlers.
 *
 * One thread: poll the socket with the heartbeat interval as timeout, take
 * every waiting message, heartbeat when due. A kernel that hangs therefore
 * stops the heartbeat too, which is what the coordinator watches.
 */
#include <stddef.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/wire.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/kernels/expert_ffn.h"
#include "core/prefault.h"
#include "workers/worker.h"

/* Map the shared-memory ring the coordinator passed (inherited fds). */
int worker_attach_ring(worker *w, char *why, size_t why_len) {
    w->loop.spin_ns = w->set.shm_spin_us * 1000ULL;
    if (!w->a.ring) return 0;
    int fd, req, rep;
    char tail;
    if (sscanf(w->a.ring, "%d,%d,%d%c", &fd, &req, &rep, &tail) != 3 || fd < 0 || req < 0 || rep < 0) {
        snprintf(why, why_len, "--ring '%s': want FD,BELL_REQ,BELL_REP", w->a.ring);
        return COLI_EINVAL;
    }
    int rc = ring_attach(&w->loop.ring, fd, req, rep, w->a.generation);
    if (rc != 0) snprintf(why, why_len, "%s", coli_last_error());
    return rc;
}

/* 0 when the plugin computes ew's activation and biases (caps.act_mask, ABI
 * 1.4), else COLI_EUNSUPPORTED with the reason: such an expert must fall
 * back to the CPU path rather than be computed as a plain SwiGLU. */
static int s_act_supported(const worker *w, int layer, int e, const expert_weights *ew, char *err, size_t err_len) {
    const uint32_t mask = w->device.caps.act_mask;
    const int biased = ew->gate_bias || ew->up_bias || ew->down_bias;
    if ((ew->act == EXPERT_ACT_SILU || (mask >> ew->act & 1)) && (!biased || (mask & MOE_ACT_BIASES))) return 0;
    snprintf(err, err_len, "plugin %s: expert %d/%d: activation %s%s not supported", w->device.plugin->name, layer, e,
             ew->act == EXPERT_ACT_SWIGLU_OAI     ? "SWIGLU_OAI (gpt-oss)"
             : ew->act == EXPERT_ACT_SITU         ? "SITU (kimi-k3)"
             : ew->act == EXPERT_ACT_SWIGLU_CLAMP ? "SWIGLU_CLAMP (deepseek4)"
                                                  : "SILU",
             biased ? " with biases" : "");
    return COLI_EUNSUPPORTED;
}

int worker_hand_expert(worker *w, int layer, int e, const expert_weights *ew, char *err, size_t err_len) {
    const expert_part_bytes b = expert_parts_bytes(ew);
    int rc = s_act_supported(w, layer, e, ew, err, err_len);
    if (rc != 0) return rc;
    moe_expert_desc d = {
        .layer = layer,
        .expert = e,
        .n_embd = ew->n_embd,
        .n_ff = ew->n_ff,
        .gate_type = ew->gate_type,
        .up_type = ew->up_type,
        .down_type = ew->down_type,
        .gate = ew->gate,
        .up = ew->up,
        .down = ew->down,
        .gate_bytes = b.gate,
        .up_bytes = b.up,
        .down_bytes = b.down,
        .act = (int32_t)ew->act,
        .act_alpha = ew->alpha,
        .act_limit = ew->limit,
        .gate_bias = ew->gate_bias,
        .up_bias = ew->up_bias,
        .down_bias = ew->down_bias,
    };
    rc = w->device.plugin->load_expert(w->device.dev, &d, err, err_len);
    if (rc != 0) return rc;
    rc = expert_table_put(&w->hold.resident, expert_key(layer, e), NULL);
    if (rc == COLI_EINVAL) return coli_fail(rc, "worker: expert set: a negative layer or expert has no key");
    return rc ? coli_fail(rc, "worker: expert set") : 0;
}

int worker_forget_expert(worker *w, int layer, int e) {
    return expert_table_remove(&w->hold.resident, expert_key(layer, e), NULL);
}

void worker_hold_close(worker *w) {
    coli_prefault_stop(&w->hold.prefault);
    gguf_close(&w->hold.model);
    expert_table_free(&w->hold.resident, NULL, NULL);
    memset(&w->hold, 0, sizeof w->hold);
}

void worker_loop_close(worker *w) {
    worker_mem_close(w);
    free(w->loop.out);
    free(w->loop.xin);
    ring_close(&w->loop.ring);
    memset(&w->loop, 0, sizeof w->loop);
}

/* Hand expert (layer, e) to the plugin unless it already holds it: in place
 * from the mapping, or (a cache worker) as a copy of its own. */
static int s_load_expert(worker *w, int layer, int e, char *err, size_t err_len) {
    if (expert_table_has(&w->hold.resident, expert_key(layer, e))) return 0;
    expert_weights ew;
    int rc = expert_weights_from_gguf(w->hold.model, layer, e, &ew);
    if (rc != 0) {
        snprintf(err, err_len, "%s", coli_last_error());
        return rc;
    }
    const expert_part_bytes b = expert_parts_bytes(&ew); /* large reads ahead of a copy or the prefault pass */
    worker_mem_willneed(w, ew.gate, b.gate);
    worker_mem_willneed(w, ew.up, b.up);
    worker_mem_willneed(w, ew.down, b.down);
    if (w->cache) return worker_cache_load_now(w, layer, e, &ew, err, err_len);
    return worker_hand_expert(w, layer, e, &ew, err, err_len);
}

// ---------------------------------------------------------------------------
//  What a Place left behind: the placed experts held and the ones refused.
typedef struct place_outcome {
    Coli__ExpertRef *held;
    Coli__RefusedExpert *refused;
    char (*why)[256];
    char (*code)[24]; /* the refusal kind when the reason names one */
    size_t n_held, n_refused;
} place_outcome;

/* Why a load failed, as the coordinator counts it. */
static const char *s_refusal_kind(int rc, const char *why, char *code, size_t code_len) {
    const char *named = wire_reason_code(why, code, code_len); /* e.g. DECLINED_SHAPE (xdna) */
    if (named) return named;
    if (strstr(why, "budget")) return "budget";
    if (rc == COLI_EUNSUPPORTED) return "unsupported";
    if (rc == COLI_ENOMEM) return "alloc";
    if (rc == COLI_EDEVICE) return "upload";
    return "load";
}

static int s_send_place_ack(worker *w, int ok, const char *why, const place_outcome *po) {
    moe_stats st = {0};
    if (ok && w->device.plugin->get_stats) w->device.plugin->get_stats(w->device.dev, &st);
    Coli__PlaceAck a = COLI__PLACE_ACK__INIT;
    a.status = ok ? COLI__STATUS__STATUS_OK : COLI__STATUS__STATUS_FAILED;
    a.reason = (char *)why;
    a.resident_experts = st.resident_experts;
    a.resident_bytes = st.resident_bytes;
    Coli__ExpertRef **held = NULL;
    Coli__RefusedExpert **refused = NULL;
    if (po && po->n_held + po->n_refused) {
        held = calloc(po->n_held + 1, sizeof *held);
        refused = calloc(po->n_refused + 1, sizeof *refused);
        if (!held || !refused) {
            free(held);
            free(refused);
            return s_send_place_ack(w, 0, "worker: out of memory for the place reply", NULL);
        }
        for (size_t i = 0; i < po->n_held; i++) held[i] = &po->held[i];
        for (size_t i = 0; i < po->n_refused; i++) refused[i] = &po->refused[i];
        a.n_resident = po->n_held;
        a.resident = held;
        a.n_refused = po->n_refused;
        a.refused = refused;
    }
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_PLACE_ACK;
    env.place_ack = &a;
    int rc = worker_send(w, &env, NULL, 0, 0);
    free(held);
    free(refused);
    return rc;
}

/* Map the model once and check it is the coordinator's file: the path of
 * the Place, or this host's own copy (-m, remote workers). A remote worker
 * serves one coordinator after another: one with another model starts afresh. */
static int s_map_model(worker *w, const Coli__Place *p, char *why, size_t why_len) {
    uint64_t size, hash;
    if (w->hold.model) {
        wire_model_identity(w->hold.model, &size, &hash);
        if (size == p->model_size && hash == p->header_hash) return 0;
        if (worker_reopen_device(w, why, why_len) != 0) return 1;
    }
    const char *path = w->a.model_path ? w->a.model_path : p->model_path;
    if (gguf_open(path, &w->hold.model) != 0) {
        snprintf(why, why_len, "%s", coli_last_error());
        return 1;
    }
    wire_model_identity(w->hold.model, &size, &hash);
    if (size != p->model_size || hash != p->header_hash) {
        snprintf(why, why_len, "model '%s': not the coordinator's file (size %llu vs %llu%s)", path,
                 (unsigned long long)size, (unsigned long long)p->model_size,
                 size == p->model_size ? ", header differs" : "");
        gguf_close(&w->hold.model);
        return 1;
    }
    worker_mem_advise_model(w);
    return 0;
}

/* Load one placed expert, or say why not (COLI_FAULT fail-expert stands in
 * for a device allocation failure, the plugin is then not asked). */
static int s_place_one(worker *w, int layer, int e, char *why, size_t why_len) {
    if (worker_fault_before_load(w, layer)) {
        snprintf(why, why_len, "expert %d.%d: device allocation failed: fault injection fail-expert", layer, e);
        return COLI_ENOMEM;
    }
    return s_load_expert(w, layer, e, why, why_len);
}

/* Fill the page tables of the held experts' weights in the background (the
 * plugin computes from the mapping: its first batches would fault them in;
 * a device plugin copied them at load, and the pass finds them mapped). A
 * Place replaces the previous pass's list. A cache worker's copies are its own. */
static void s_prefault_held(worker *w, const Coli__ExpertRef *held, size_t n) {
    coli_prefault_stop(&w->hold.prefault);
    if (!w->set.prefault || w->cache || n == 0) return;
    coli_byte_range *r = malloc(3 * n * sizeof *r);
    if (!r) return; /* the pages then fault on first use */
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        expert_weights ew;
        if (expert_weights_from_gguf(w->hold.model, held[i].layer, held[i].expert, &ew) != 0) continue;
        const expert_part_bytes b = expert_parts_bytes(&ew);
        r[k++] = (coli_byte_range){ew.gate, b.gate};
        r[k++] = (coli_byte_range){ew.up, b.up};
        r[k++] = (coli_byte_range){ew.down, b.down};
    }
    w->hold.prefault = coli_prefault_start(r, k);
    free(r);
}

/* Drop expert (layer, e): the plugin lets go, its pages leave the resident set. */
static void s_drop_one(worker *w, int layer, int e) {
    char err[256];
    expert_weights ew;
    if (w->device.plugin->unload_expert(w->device.dev, layer, e, err, sizeof err) != 0) return;
    worker_forget_expert(w, layer, e);
    if (expert_weights_from_gguf(w->hold.model, layer, e, &ew) != 0) return;
    const expert_part_bytes b = expert_parts_bytes(&ew);
    worker_mem_release(ew.gate, b.gate);
    worker_mem_release(ew.up, b.up);
    worker_mem_release(ew.down, b.down);
}

/* A Place is the whole set a home worker holds (docs/scheduler.md, "Remote
 * hosts"): the experts it held for a host that is back are not named any
 * more, so the plugin drops them and their pages leave the resident set. A
 * cache worker's set is the cache's business; a plugin without
 * unload_expert keeps them. */
static void s_drop_unlisted(worker *w, const Coli__Place *p) {
    if (w->cache || !w->device.plugin->unload_expert || !w->hold.resident.n) return;
    expert_table listed = {0};
    size_t n = 0, cap = w->hold.resident.cap;
    uint64_t *drop = malloc(w->hold.resident.n * sizeof *drop);
    for (size_t i = 0; drop && i < p->n_experts; i++)
        if (expert_table_put(&listed, expert_key(p->experts[i]->layer, p->experts[i]->expert), NULL) == COLI_ENOMEM)
            goto out;                        /* out of memory: keep what is held (only the pages stay) */
    for (size_t i = 0; drop && i < cap; i++) /* a snapshot first: removing re-seats the table */
        if (w->hold.resident.keys[i] && !expert_table_has(&listed, w->hold.resident.keys[i]))
            drop[n++] = w->hold.resident.keys[i];
    for (size_t i = 0; i < n; i++) {
        int32_t layer, e;
        expert_unkey(drop[i], &layer, &e);
        s_drop_one(w, layer, e);
    }
out:
    expert_table_free(&listed, NULL, NULL);
    free(drop);
}

/* Map the model (checking it is the coordinator's file) and load each expert
 * on its own: one that cannot be held (budget, allocation, upload) is refused
 * and stays on the CPU path; the rest are held. The plugin never keeps a part
 * of an expert (plugin_abi.h), so held and refused are the whole truth. */
int worker_on_place(worker *w, const Coli__Envelope *env) {
    const Coli__Place *p = env->place;
    char why[512] = "";
    if (s_map_model(w, p, why, sizeof why) != 0) return s_send_place_ack(w, 0, why, NULL);
    if (p->cache && worker_cache_enable(w, why, sizeof why) != 0) return s_send_place_ack(w, 0, why, NULL);
    size_t n = p->n_experts;
    place_outcome po = {calloc(n + 1, sizeof *po.held),
                        calloc(n + 1, sizeof *po.refused),
                        calloc(n + 1, sizeof *po.why),
                        calloc(n + 1, sizeof *po.code),
                        0,
                        0};
    if (!po.held || !po.refused || !po.why || !po.code) {
        free(po.held);
        free(po.refused);
        free(po.why);
        free(po.code);
        return s_send_place_ack(w, 0, "worker: out of memory for the place list", NULL);
    }
    for (size_t i = 0; i < n; i++) {
        int layer = p->experts[i]->layer, e = p->experts[i]->expert;
        char err[256] = "";
        int rc = s_place_one(w, layer, e, err, sizeof err);
        if (rc == 0) {
            coli__expert_ref__init(&po.held[po.n_held]);
            po.held[po.n_held].layer = layer;
            po.held[po.n_held++].expert = e;
            continue;
        }
        Coli__RefusedExpert *r = &po.refused[po.n_refused];
        coli__refused_expert__init(r);
        r->layer = layer;
        r->expert = e;
        r->kind = (char *)s_refusal_kind(rc, err, po.code[po.n_refused], sizeof po.code[0]);
        snprintf(po.why[po.n_refused], sizeof po.why[0], "%s", err[0] ? err : coli_status_str(rc));
        r->reason = po.why[po.n_refused++];
    }
    s_drop_unlisted(w, p);
    s_prefault_held(w, po.held, po.n_held);
    worker_mem_resample(w); /* the next heartbeats tell the memory of the new set */
    int rc = s_send_place_ack(w, 1, "", &po);
    free(po.held);
    free(po.refused);
    free(po.why);
    free(po.code);
    return rc;
}

// ---------------------------------------------------------------------------
int worker_send_result(worker *w, uint64_t id, const Coli__ExpertBatch *b, int ok, const char *why, const float *out,
                       int64_t n_rows, uint64_t ns) {
    Coli__ExpertResult r = COLI__EXPERT_RESULT__INIT;
    r.layer = b->layer;
    r.dtype = 0;
    r.n_embd = b->n_embd;
    r.n_rows = n_rows;
    r.status = ok ? COLI__STATUS__STATUS_OK : COLI__STATUS__STATUS_FAILED;
    r.reason = (char *)why;
    r.compute_ns = ns;
    moe_counter mc[MOE_MAX_COUNTERS];
    Coli__Counter cs[MOE_MAX_COUNTERS], *cp[MOE_MAX_COUNTERS];
    const struct moe_plugin *p = w->device.plugin;
    int nc = p->struct_size >= offsetof(struct moe_plugin, get_counters) + sizeof p->get_counters && p->get_counters
                 ? p->get_counters(w->device.dev, mc, MOE_MAX_COUNTERS)
                 : 0;
    for (int i = 0; i < nc && i < MOE_MAX_COUNTERS; i++) {
        coli__counter__init(&cs[i]);
        mc[i].name[sizeof mc[i].name - 1] = '\0';
        cs[i].name = mc[i].name;
        cs[i].value = mc[i].value;
        cp[r.n_counters++] = &cs[i];
    }
    r.counters = cp;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.request_id = id;
    env.body_case = COLI__ENVELOPE__BODY_RESULT;
    env.result = &r;
    size_t bytes = ok ? (size_t)n_rows * (size_t)b->n_embd * sizeof(float) : 0;
    if (w->loop.in_ring_request) {
        /* done with the input: the slot goes back before the reply is visible,
         * so the coordinator may send again as soon as it reads the reply */
        w->loop.in_ring_request = 0;
        ring_release(&w->loop.ring, RING_REQ);
        if (ring_send(&w->loop.ring, RING_REP, &env, ok ? out : NULL, bytes) == 0) return 0;
        /* the reply slot is not ours or too small: ZeroMQ carries it */
    }
    return worker_send(w, &env, ok ? out : NULL, bytes, 0);
}

void worker_send_garbage_frame(worker *w) {
    if (w->loop.in_ring_request) {
        w->loop.in_ring_request = 0;
        ring_release(&w->loop.ring, RING_REQ);
        if (ring_send_garbage(&w->loop.ring, RING_REP) == 0) return;
    }
    static const char junk[] = "\xff\xfe not an envelope";
    zmq_send(w->link.sock, junk, sizeof junk - 1, ZMQ_DONTWAIT);
}

/* Check the batch against its payload and our model; load missing experts
 * when allowed. Writes the reason and returns nonzero when it is refused. */
static int s_check_batch(worker *w, const Coli__ExpertBatch *b, size_t x_bytes, moe_batch_group *groups, char *why,
                         size_t why_len) {
    if (!w->hold.model) return snprintf(why, why_len, "batch before placement"), 1;
    if (b->dtype != 0 || b->n_embd <= 0 || b->n_embd > (1 << 20) || b->n_rows <= 0 ||
        b->n_rows > COLI_MAX_MSG_BYTES / 4 / b->n_embd)
        return snprintf(why, why_len, "batch: bad shape (%lld rows of %lld, dtype %u)", (long long)b->n_rows,
                        (long long)b->n_embd, b->dtype),
               1;
    if (x_bytes != (size_t)b->n_rows * (size_t)b->n_embd * sizeof(float))
        return snprintf(why, why_len, "batch: payload %zu bytes, header says %lld x %lld F32", x_bytes,
                        (long long)b->n_rows, (long long)b->n_embd),
               1;
    int64_t next = 0;
    for (size_t g = 0; g < b->n_groups; g++) {
        const Coli__Group *gr = b->groups[g];
        if (gr->row_begin != next || gr->n_rows <= 0 || gr->n_rows > b->n_rows - next)
            return snprintf(why, why_len, "batch: group %zu does not continue the rows", g), 1;
        next += gr->n_rows;
        if (!expert_table_has(&w->hold.resident, expert_key(b->layer, gr->expert))) {
            if (!b->allow_load)
                return snprintf(why, why_len, "expert %d of layer %d is not resident", gr->expert, b->layer), 1;
            if (s_load_expert(w, b->layer, gr->expert, why, why_len) != 0) return 1;
        }
        groups[g] = (moe_batch_group){b->layer, gr->expert, gr->row_begin, gr->n_rows};
    }
    if (next != b->n_rows)
        return snprintf(why, why_len, "batch: groups cover %lld of %lld rows", (long long)next, (long long)b->n_rows),
               1;
    return 0;
}

int worker_on_batch(worker *w, const Coli__Envelope *env, const void *x, size_t x_bytes) {
    const Coli__ExpertBatch *b = env->batch;
    w->loop.last_request_id = env->request_id;
    worker_fault *f = worker_fault_before_batch(w, b->layer);
    char why[512] = "";
    moe_batch_group *groups = calloc(b->n_groups ? b->n_groups : 1, sizeof *groups);
    if (!groups) return worker_send_result(w, env->request_id, b, 0, "worker: out of memory", NULL, 0, 0);
    int rc = s_check_batch(w, b, x_bytes, groups, why, sizeof why);
    size_t need = rc ? 0 : (size_t)b->n_rows * (size_t)b->n_embd;
    if (rc == 0 && need > w->loop.out_cap) {
        float *o = realloc(w->loop.out, need * sizeof(float));
        if (!o)
            rc = snprintf(why, sizeof why, "worker: out of memory for %zu outputs", need);
        else {
            w->loop.out = o;
            w->loop.out_cap = need;
        }
    }
    if (rc == 0 && ((uintptr_t)x % sizeof(float)) != 0) {
        /* a frame's bytes need not be aligned; the kernels read floats */
        if (need > w->loop.xin_cap) {
            float *c = realloc(w->loop.xin, need * sizeof(float));
            if (!c)
                rc = snprintf(why, sizeof why, "worker: out of memory for %zu inputs", need);
            else {
                w->loop.xin = c;
                w->loop.xin_cap = need;
            }
        }
        if (rc == 0) {
            memcpy(w->loop.xin, x, need * sizeof(float));
            x = w->loop.xin;
        }
    }
    uint64_t t0 = coli_now_ns();
    if (rc == 0 && w->device.plugin->run(w->device.dev, groups, (int32_t)b->n_groups, x, b->n_rows, b->n_embd,
                                         w->loop.out, why, sizeof why) != 0)
        rc = 1;
    uint64_t ns = coli_now_ns() - t0;
    free(groups);
    if (rc != 0) return worker_send_result(w, env->request_id, b, 0, why, NULL, 0, ns);
    w->loop.batches++;
    w->loop.rows += (uint64_t)b->n_rows;
    if (f) return worker_fault_reply(w, f, env->request_id, b, w->loop.out, ns);
    return worker_send_result(w, env->request_id, b, 1, "", w->loop.out, b->n_rows, ns);
}

// ---------------------------------------------------------------------------
void worker_heartbeat_fill(worker *w, Coli__Heartbeat *h) {
    h->seq = ++w->loop.hb_seq;
    h->last_request_id = w->loop.last_request_id;
    h->batches = w->loop.batches;
    h->rows = w->loop.rows;
    worker_mem_fill(w, h);
}

void worker_served_anew(worker *w) { w->loop.last_request_id = 0; }

static void s_heartbeat(worker *w) {
    Coli__Heartbeat h = COLI__HEARTBEAT__INIT;
    worker_heartbeat_fill(w, &h);
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &h;
    /* Never block on a heartbeat: a full queue means the coordinator is busy. */
    worker_send(w, &env, NULL, 0, ZMQ_DONTWAIT);
    w->loop.last_hb_ns = coli_now_ns();
}

static void s_send_stats(worker *w) {
    moe_stats st = {0};
    if (w->device.plugin->get_stats) w->device.plugin->get_stats(w->device.dev, &st);
    Coli__StatsReply r = COLI__STATS_REPLY__INIT;
    r.resident_experts = st.resident_experts;
    r.resident_bytes = st.resident_bytes;
    r.calls = st.calls;
    r.rows = st.rows;
    r.failed_loads = st.failed_loads;
    r.kernel_seconds = st.kernel_seconds;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_STATS;
    env.stats = &r;
    worker_send(w, &env, NULL, 0, ZMQ_DONTWAIT);
}

/* Take one waiting message. Returns 0 when one was handled, 1 when none waits. */
static int s_handle_one(worker *w) {
    wire_msg m;
    int rc = wire_recv(w->link.sock, w->link.listening, ZMQ_DONTWAIT, &m);
    if (rc == COLI_ETIMEOUT) return 1;
    if (rc == 0 && w->link.listening && worker_remote_gate(w, &m)) {
        wire_msg_clear(&m); /* a greeting, or a peer we do not serve */
        return 0;
    }
    if (rc != 0) {
        fprintf(stderr, "coli-worker %d: dropped a message: %s\n", w->link.worker_id, coli_last_error());
        return 0;
    }
    const void *x = wire_payload_data(&m);
    size_t xb = wire_payload_size(&m);
    switch (m.env->body_case) {
    case COLI__ENVELOPE__BODY_PLACE: worker_on_place(w, m.env); break;
    case COLI__ENVELOPE__BODY_BATCH: worker_on_batch(w, m.env, x, xb); break;
    case COLI__ENVELOPE__BODY_STATS_REQUEST: s_send_stats(w); break;
    case COLI__ENVELOPE__BODY_CACHE_LOAD: worker_cache_on_load(w, m.env); break;
    case COLI__ENVELOPE__BODY_CACHE_EVICT: worker_cache_on_evict(w, m.env); break;
    case COLI__ENVELOPE__BODY_SHUTDOWN: w->loop.stop = 1; break;
    default: break; /* nothing else is for us; ignore */
    }
    wire_msg_clear(&m);
    return 0;
}

/* Serve the batch waiting in the ring, if any. Returns 1 if one was served. */
static int s_handle_ring(worker *w) {
    if (!ring_ready(&w->loop.ring, RING_REQ)) return 0;
    wire_msg m;
    if (ring_recv(&w->loop.ring, RING_REQ, &m) != 0) {
        fprintf(stderr, "coli-worker %d: dropped a ring message: %s\n", w->link.worker_id, coli_last_error());
        ring_release(&w->loop.ring, RING_REQ);
        return 1;
    }
    if (m.env->body_case == COLI__ENVELOPE__BODY_BATCH) {
        w->loop.in_ring_request = 1;
        worker_on_batch(w, m.env, wire_payload_data(&m), wire_payload_size(&m));
    }
    if (w->loop.in_ring_request) { /* not a batch, or no reply was sent */
        w->loop.in_ring_request = 0;
        ring_release(&w->loop.ring, RING_REQ);
    }
    wire_msg_clear(&m);
    return 1;
}

/* Is the coordinator gone? Nobody writes to the lifeline, so readable means
 * EOF: every write end closed, which happens only when the coordinator
 * process ends (or frees the model). Also a new parent (reparented). */
static int s_coordinator_gone(const worker *w) {
    if (w->a.parent_pid && getppid() != w->a.parent_pid) return 1;
    if (w->a.lifeline_fd < 0) return 0;
    struct pollfd p = {w->a.lifeline_fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
}

/* Wait for the socket, the ring or the lifeline: spin first if a ring batch
 * just went by. Returns 1 when the lifeline woke it. */
static int s_wait(worker *w, int spin) {
    if (w->loop.ring.base && spin && ring_spin(&w->loop.ring, RING_REQ, w->loop.spin_ns)) return 0;
    zmq_pollitem_t it[4] = {{w->link.sock, 0, ZMQ_POLLIN, 0},
                            {NULL, w->a.lifeline_fd, ZMQ_POLLIN, 0},
                            {NULL, w->loop.ring.bell[RING_REQ], ZMQ_POLLIN, 0},
                            {NULL, worker_cache_fd(w), ZMQ_POLLIN, 0}};
    int n = w->loop.ring.base ? 3 : 2;
    if (w->cache) it[n++] = it[3]; /* the loader staged an expert: adopt it between batches */
    if (w->loop.ring.base && ring_sleep_begin(&w->loop.ring, RING_REQ)) return 0;
    int timeout = w->a.heartbeat_ms;
    /* nothing to serve: stage a load the loader has not started; look again soon while loads wait */
    if (worker_cache_idle(w) && timeout > 5) timeout = 5;
    zmq_poll(it, n, timeout);
    if (w->loop.ring.base) ring_sleep_end(&w->loop.ring, RING_REQ);
    return w->a.lifeline_fd >= 0 && it[1].revents != 0;
}

/* A coordinator killed with SIGKILL cannot remove its private ipc directory
 * (mkdtemp "coli-XXXXXX" holding the socket "coord"); the workers it leaves
 * behind do it on their way out. Only that exact shape is touched, and
 * unlink/rmdir fail harmlessly when another worker got there first. */
static void s_tidy_dead_coordinator(const worker *w) {
    const char *ep = w->a.connect;
    if (!ep || strncmp(ep, "ipc://", 6) != 0) return;
    const char *path = ep + 6, *slash = strrchr(path, '/');
    if (!slash || strcmp(slash, "/coord") != 0) return;
    char dir[512];
    size_t n = (size_t)(slash - path);
    if (n >= sizeof dir) return;
    memcpy(dir, path, n);
    dir[n] = '\0';
    const char *base = strrchr(dir, '/');
    if (!base || strncmp(base + 1, "coli-", 5) != 0) return;
    unlink(path);
    rmdir(dir);
}

int worker_serve(worker *w) {
    s_heartbeat(w);
    int spin = 0;
    while (!w->loop.stop) {
        int woke = s_wait(w, spin);
        if ((woke || coli_now_ns() - w->loop.last_hb_ns >= (uint64_t)w->a.heartbeat_ms * 1000000ULL) &&
            s_coordinator_gone(w)) {
            s_tidy_dead_coordinator(w);
            return 0; /* the coordinator is gone: so are we */
        }
        spin = w->loop.ring.base && s_handle_ring(w);
        worker_cache_poll(w);
        while (!w->loop.stop && s_handle_one(w) == 0)
            if (coli_now_ns() - w->loop.last_hb_ns >= (uint64_t)w->a.heartbeat_ms * 1000000ULL) s_heartbeat(w);
        if (coli_now_ns() - w->loop.last_hb_ns >= (uint64_t)w->a.heartbeat_ms * 1000000ULL) s_heartbeat(w);
    }
    return 0;
}
