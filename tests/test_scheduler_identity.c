/*
 * test_scheduler_identity.c - a local worker proves it is the process the
 * coordinator spawned (coordinator/sched/worker_identity.c), and a killed
 * coordinator leaves nothing in the file system.
 *
 * The impostor: a process of the same user that connects to the
 * coordinator's socket with the routing id a restarting worker would have
 * had before ("w<id>.<gen+1>"), first, and greets it. It must receive nothing
 * (no Place, no batch), be counted, and not keep the real worker out.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <sys/wait.h>
#include <zmq.h>

#include "proto/wire.h"
#include "tests/sched_util.h"

#define MODEL "tiny-llama-moe-f32.gguf"

/* It claims the next few generations at once: a restart that takes two
 * tries (a start timeout on a loaded machine) must still meet an impostor. */
#define IMPOSTOR_GENERATIONS 3

typedef struct impostor {
    char endpoint[600];
    volatile int stop;
    int connected;
    int received; /* messages the coordinator sent it */
    int hellos;
} impostor;

static void s_send_hello(void *sock, int gen) {
    Coli__Hello h = COLI__HELLO__INIT;
    h.plugin = "cpu";
    h.device = "cpu:0";
    h.status = COLI__STATUS__STATUS_OK;
    h.reason = "";
    h.device_name = "impostor";
    h.worker_id = 0;
    h.generation = (uint32_t)gen;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    wire_send(sock, NULL, 0, &env, NULL, 0, ZMQ_DONTWAIT);
}

//  Connect with the predictable ids "w0.<g>", greet every 10 ms from each,
//  count what comes back.
static void *s_impostor(void *p) {
    impostor *im = p;
    void *ctx = zmq_ctx_new(), *d[IMPOSTOR_GENERATIONS];
    int zero = 0;
    im->connected = 1;
    for (int g = 0; g < IMPOSTOR_GENERATIONS; g++) {
        char id[32];
        snprintf(id, sizeof id, "w0.%d", g + 1);
        d[g] = zmq_socket(ctx, ZMQ_DEALER);
        zmq_setsockopt(d[g], ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(d[g], ZMQ_ROUTING_ID, id, strlen(id));
        im->connected &= zmq_connect(d[g], im->endpoint) == 0;
    }
    while (!im->stop) {
        zmq_pollitem_t it[IMPOSTOR_GENERATIONS];
        for (int g = 0; g < IMPOSTOR_GENERATIONS; g++) {
            s_send_hello(d[g], g + 1);
            im->hellos++;
            it[g] = (zmq_pollitem_t){d[g], 0, ZMQ_POLLIN, 0};
        }
        if (zmq_poll(it, IMPOSTOR_GENERATIONS, 10) > 0) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            for (int g = 0; g < IMPOSTOR_GENERATIONS; g++)
                while (zmq_msg_recv(&m, d[g], ZMQ_DONTWAIT) >= 0)
                    if (!zmq_msg_more(&m)) im->received++;
            zmq_msg_close(&m);
        }
    }
    for (int g = 0; g < IMPOSTOR_GENERATIONS; g++) zmq_close(d[g]);
    zmq_ctx_term(ctx);
    return NULL;
}

//  Poll the stats (which drives the executor) until worker 0 is up under a
//  pid other than old_pid, or `seconds` pass. 1 when it is.
static int s_wait_restarted(coli_model *m, int old_pid, double seconds) {
    double until = sched_now() + seconds;
    while (sched_now() < until) {
        char *js = NULL, v[32];
        cr_assert_eq(coli_model_stats_json(m, &js), 0);
        sched_worker_field(js, 0, "status", v, sizeof v);
        int up = !strcmp(v, "up");
        free(js);
        if (up && sched_worker_pid(m, 0) != old_pid) return 1;
        usleep(5000);
    }
    return 0;
}

static void s_impostor_case(const char *data_path) {
    const char *model = sched_fixture(MODEL);
    sched_env_defaults();
    setenv("COLI_DATA_PATH", data_path, 1);
    gen_result ref, got;
    sched_generate(model, "inproc", NULL, NULL, &ref);

    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "cpu:1";
    mp.n_threads = 1;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(model, &mp, &m), 0, "%s", coli_last_error());
    impostor im = {0};
    char *js = NULL;
    cr_assert_eq(coli_model_stats_json(m, &js), 0);
    sched_worker_field(js, 0, "endpoint", im.endpoint, sizeof im.endpoint);
    free(js);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, s_impostor, &im), 0);
    usleep(100000); /* it connects first */
    int pid = sched_worker_pid(m, 0);
    kill(pid, SIGKILL);
    sched_wait_dead(pid, 5.0);
    int back = s_wait_restarted(m, pid, 20.0);
    usleep(200000); /* a few more of its hellos reach the new generation */
    sched_generate_on(m, "cpu:1 after an impostor", NULL, NULL, &got);
    im.stop = 1;
    pthread_join(th, NULL);
    unsetenv("COLI_DATA_PATH");

    cr_expect(im.connected, "the impostor could not connect to %s", im.endpoint);
    cr_expect(back, "the real worker did not come back up: %s", got.stats);
    cr_expect_eq(im.received, 0, "the impostor received %d messages", im.received);
    cr_expect_gt(sched_field(got.stats, "impostor_messages_refused"), 0,
                 "none of %d hellos refused as an impostor's: %s", im.hellos, got.stats);
    char v[32];
    sched_worker_field(got.stats, 0, "status", v, sizeof v);
    cr_expect_str_eq(v, "up", "%s", got.stats);
    sched_assert_same(&ref, &got, "cpu:1 after an impostor");
    coli_model_free(&m);
    gen_free(&ref);
    gen_free(&got);
    sched_assert_no_orphans();
}

Test(scheduler_identity, impostor_gets_nothing_socket_path, .timeout = 90) { s_impostor_case("zmq"); }

Test(scheduler_identity, impostor_gets_nothing_ring_path, .timeout = 90) { s_impostor_case("shm"); }

// ---------------------------------------------------------------------------
//  Entries in dir (not . and ..); the first one's name in first.
static int s_count_entries(const char *dir, char *first, size_t cap) {
    DIR *d = opendir(dir);
    cr_assert(d, "%s", dir);
    int n = 0;
    first[0] = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!n++) snprintf(first, cap, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

//  A coordinator child (TMPDIR = a fresh directory) loads on cpu:2 and
//  reports its workers; they are SIGKILLed (none can tidy up after it), then
//  it is: the directory must be empty.
Test(scheduler_identity, coordinator_sigkill_leaves_nothing_in_tmp, .timeout = 60) {
    const char *model = sched_fixture(MODEL);
    char tmp[] = "/tmp/coli-test-tmpdir-XXXXXX";
    cr_assert(mkdtemp(tmp));
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        close(fds[0]);
        setenv("TMPDIR", tmp, 1);
        coli_model_params mp;
        coli_model_default_params(&mp);
        mp.devices = "cpu:2";
        coli_model *m = NULL;
        if (coli_model_load(model, &mp, &m) != 0) _exit(3);
        int got[2] = {sched_worker_pid(m, 0), sched_worker_pid(m, 1)};
        if (write(fds[1], got, sizeof got) != sizeof got) _exit(4);
        for (;;) pause();
    }
    close(fds[1]);
    int pids[2] = {0, 0};
    ssize_t n = read(fds[0], pids, sizeof pids);
    close(fds[0]);
    cr_assert_eq(n, (ssize_t)sizeof pids, "coordinator child failed");
    /* no live worker: the child only pauses, so nothing polls and restarts them */
    for (int i = 0; i < 2; i++) {
        kill(pids[i], SIGKILL);
        sched_wait_dead(pids[i], 5.0);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    char first[256];
    int left = s_count_entries(tmp, first, sizeof first);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    cr_expect_eq(system(cmd), 0);
    cr_expect_eq(left, 0, "a SIGKILLed coordinator left %d entries in its TMPDIR (%s, ...)", left, first);
}

/* A shared expert (qwen2moe) runs in the coordinator while the worker computes
 * the routed experts (moe_exec.side), and the bytes stay those of --inproc:
 * it is still added after the routed sum. */
Test(scheduler_identity, shared_expert_overlaps_the_workers_same_bytes, .timeout = 90) {
    const char *model = sched_fixture("tiny-qwen2moe-f32.gguf");
    sched_env_defaults();
    gen_result ref, got;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    sched_generate(model, "cpu:1", NULL, NULL, &got);
    sched_assert_same(&ref, &got, "qwen2moe, shared expert beside a cpu worker");
    cr_expect_gt(sched_field(got.stats, "side_overlapped_layers"), 0, "the shared expert never overlapped: %s",
                 got.stats);
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), 0, "%s", got.stats);
    gen_free(&ref);
    gen_free(&got);
    sched_assert_no_orphans();
}
