/*
 * bench_ring.c - the transport alone: round trips of one batch-sized
 * message between two processes over the shared-memory ring (spinning, and
 * sleeping on the doorbell every time) and over ZeroMQ DEALER/ROUTER ipc,
 * the two data paths of the scheduler (make bench-sched).
 *
 *   bench_ring [ROWS] [N_EMBD] [ITERS]     (default 2 4096 2000)
 *
 * Each round trip carries the real messages: a packed ExpertBatch envelope
 * + ROWS x N_EMBD floats there, an ExpertResult + the same back.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include "core/error.h"
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto/shm_ring.h"
#include "core/clock.h"
#include "proto/wire.h"

static int s_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void s_report(const char *what, double *us, int n) {
    qsort(us, (size_t)n, sizeof *us, s_cmp);
    printf("  %-28s p50 %8.2f us   p99 %8.2f us\n", what, us[n / 2], us[(int)(n * 0.99)]);
}

static void s_batch_env(Coli__Envelope *env, Coli__ExpertBatch *b, int64_t rows, int64_t e, uint64_t id) {
    coli__expert_batch__init(b);
    b->n_rows = rows;
    b->n_embd = e;
    coli__envelope__init(env);
    env->request_id = id;
    env->body_case = COLI__ENVELOPE__BODY_BATCH;
    env->batch = b;
}

/* Child: echo every ring request back as a reply. */
static void s_ring_echo(shm_ring *r, uint64_t spin_ns, int iters) {
    for (int i = 0; i < iters; i++) {
        if (!ring_spin(r, RING_REQ, spin_ns)) {
            zmq_pollitem_t it = {NULL, r->bell[RING_REQ], ZMQ_POLLIN, 0};
            if (!ring_sleep_begin(r, RING_REQ)) zmq_poll(&it, 1, 1000);
            ring_sleep_end(r, RING_REQ);
            if (!ring_ready(r, RING_REQ)) {
                i--;
                continue;
            }
        }
        wire_msg m;
        if (ring_recv(r, RING_REQ, &m) != 0) _exit(3);
        ring_release(r, RING_REQ);
        ring_send(r, RING_REP, m.env, wire_payload_data(&m), wire_payload_size(&m));
        wire_msg_clear(&m);
    }
    _exit(0);
}

static void s_bench_ring(int64_t rows, int64_t e, int iters, uint64_t spin_ns, const char *what) {
    shm_ring r;
    if (ring_create(&r, 0, rows, e) != 0) {
        fprintf(stderr, "%s\n", coli_last_error());
        return;
    }
    pid_t pid = fork();
    if (pid == 0) s_ring_echo(&r, spin_ns, iters);
    float *x = calloc((size_t)(rows * e), sizeof(float));
    double *us = malloc((size_t)iters * sizeof *us);
    for (int i = 0; i < iters; i++) {
        Coli__Envelope env;
        Coli__ExpertBatch b;
        s_batch_env(&env, &b, rows, e, (uint64_t)i + 1);
        uint64_t t0 = coli_now_ns();
        ring_send(&r, RING_REQ, &env, x, (size_t)(rows * e) * sizeof(float));
        while (!ring_spin(&r, RING_REP, spin_ns)) {
            zmq_pollitem_t it = {NULL, r.bell[RING_REP], ZMQ_POLLIN, 0};
            if (!ring_sleep_begin(&r, RING_REP)) zmq_poll(&it, 1, 1000);
            ring_sleep_end(&r, RING_REP);
            if (ring_ready(&r, RING_REP)) break;
        }
        wire_msg m;
        ring_recv(&r, RING_REP, &m);
        memcpy(x, wire_payload_data(&m), wire_payload_size(&m));
        wire_msg_clear(&m);
        ring_release(&r, RING_REP);
        us[i] = (double)(coli_now_ns() - t0) / 1e3;
    }
    waitpid(pid, NULL, 0);
    s_report(what, us, iters);
    free(x);
    free(us);
    ring_close(&r);
}

static void s_bench_zmq(int64_t rows, int64_t e, int iters) {
    char dir[] = "/tmp/coli-bench-XXXXXX", ep[64];
    if (!mkdtemp(dir)) return;
    snprintf(ep, sizeof ep, "ipc://%s/s", dir);
    pid_t pid = fork();
    if (pid == 0) {
        void *ctx = zmq_ctx_new(), *d = zmq_socket(ctx, ZMQ_DEALER);
        wire_socket_setup(d, 0);
        zmq_setsockopt(d, ZMQ_ROUTING_ID, "w0.0", 4);
        zmq_connect(d, ep);
        for (int i = 0; i < iters; i++) {
            wire_msg m;
            if (wire_recv(d, 0, 0, &m) != 0) _exit(3);
            wire_send(d, NULL, 0, m.env, wire_payload_data(&m), wire_payload_size(&m), 0);
            wire_msg_clear(&m);
        }
        usleep(100000);
        _exit(0);
    }
    void *ctx = zmq_ctx_new(), *r = zmq_socket(ctx, ZMQ_ROUTER);
    wire_socket_setup(r, 1);
    zmq_bind(r, ep);
    float *x = calloc((size_t)(rows * e), sizeof(float));
    double *us = malloc((size_t)iters * sizeof *us);
    for (int i = 0; i < iters; i++) {
        Coli__Envelope env;
        Coli__ExpertBatch b;
        s_batch_env(&env, &b, rows, e, (uint64_t)i + 1);
        uint64_t t0 = coli_now_ns();
        while (wire_send(r, "w0.0", 4, &env, x, (size_t)(rows * e) * sizeof(float), 0) != 0)
            usleep(1000); /* until the peer has connected */
        wire_msg m;
        wire_recv(r, 1, 0, &m);
        memcpy(x, wire_payload_data(&m), wire_payload_size(&m));
        wire_msg_clear(&m);
        us[i] = (double)(coli_now_ns() - t0) / 1e3;
    }
    waitpid(pid, NULL, 0);
    s_report("zmq ipc DEALER/ROUTER", us + 10, iters - 10);
    free(x);
    free(us);
    zmq_close(r);
    zmq_ctx_term(ctx);
    char sock[80];
    snprintf(sock, sizeof sock, "%s/s", dir);
    unlink(sock);
    rmdir(dir);
}

int main(int argc, char **argv) {
    int64_t rows = argc > 1 ? atoll(argv[1]) : 2, e = argc > 2 ? atoll(argv[2]) : 4096;
    int iters = argc > 3 ? atoi(argv[3]) : 2000;
    if (rows <= 0 || e <= 0 || iters < 100) {
        fprintf(stderr, "usage: bench_ring [ROWS>0] [N_EMBD>0] [ITERS>=100]\n");
        return 2;
    }
    printf("round trip of %lld x %lld F32 each way (%d iterations)\n", (long long)rows, (long long)e, iters);
    s_bench_ring(rows, e, iters, 50000, "shm ring, spin 50 us");
    s_bench_ring(rows, e, iters, 0, "shm ring, doorbell every time");
    s_bench_zmq(rows, e, iters);
    return 0;
}
