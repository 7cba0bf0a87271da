/*
 * test_scheduler_procs.c - processes and peers around the scheduler:
 * plugins that cannot load (missing library, missing symbol, wrong ABI),
 * a foreign peer sending garbage to the coordinator's endpoint, no worker
 * left behind when the coordinator is SIGKILLed, and workers that outlive
 * the (short-lived) thread that loaded the model or restarted them.
 */
#include <pthread.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <zmq.h>

#include "tests/sched_util.h"

#define MODEL "tiny-llama-moe-f32.gguf"

static void s_env(void) { sched_env_defaults(); }

TestSuite(scheduler_procs, .init = s_env);

//  A plugin directory holding the real cpu plugin plus `extra` as libcoli-cuda.so.
static void s_plugin_dir(char *dir, size_t n, const char *extra) {
    sched_plugin_dir(dir, n, "/tmp/coli-plugtest-XXXXXX", extra, NULL);
}

//  cpu + cuda:0 where cuda cannot load: same output, one plugin_load fallback.
static void s_expect_cuda_fails(const char *reason_part) {
    const char *model = sched_fixture(MODEL);
    gen_result ref, got;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    sched_generate(model, "cpu,cuda:0", NULL, NULL, &got);
    sched_assert_same(&ref, &got, "cpu,cuda:0 with a broken cuda plugin");
    cr_expect_eq(sched_fallbacks(got.stats, "cuda:0", "plugin_load"), 1, "%s", got.stats);
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), 1, "%s", got.stats);
    char v[256];
    sched_worker_field(got.stats, 1, "status", v, sizeof v);
    cr_expect_str_eq(v, "failed");
    sched_worker_field(got.stats, 1, "reason", v, sizeof v);
    cr_expect(strstr(v, reason_part), "reason '%s' lacks '%s'", v, reason_part);
    gen_free(&ref);
    gen_free(&got);
    sched_assert_no_orphans();
}

Test(scheduler_procs, plugin_missing_library) {
    char dir[64];
    s_plugin_dir(dir, sizeof dir, NULL);
    s_expect_cuda_fails("plugin 'cuda': libcoli-cuda.so: cannot open shared object file");
    sched_rm_plugin_dir(dir);
}

Test(scheduler_procs, plugin_missing_symbol) {
    char dir[64];
    const char *libm =
        access("/lib/x86_64-linux-gnu/libm.so.6", R_OK) == 0 ? "/lib/x86_64-linux-gnu/libm.so.6" : "/usr/lib/libm.so.6";
    if (access(libm, R_OK) != 0) cr_skip_test("no libm.so.6 to stand in for a plugin");
    s_plugin_dir(dir, sizeof dir, libm);
    s_expect_cuda_fails("has no symbol moe_plugin_get");
    sched_rm_plugin_dir(dir);
}

//  A real shared library that says ABI 99: compiled here (skipped without cc).
Test(scheduler_procs, plugin_wrong_abi) {
    char dir[64], src[128], so[128], cmd[512];
    snprintf(dir, sizeof dir, "/tmp/coli-abi-XXXXXX");
    cr_assert(mkdtemp(dir));
    snprintf(src, sizeof src, "%s/abi99.c", dir);
    snprintf(so, sizeof so, "%s/libabi99.so", dir);
    FILE *f = fopen(src, "w");
    cr_assert(f);
    fputs("#include \"plugins/plugin_abi.h\"\n"
          "static const struct moe_plugin p = {99, 0, sizeof(struct moe_plugin), \"cuda\"};\n"
          "const struct moe_plugin *moe_plugin_get(void) { return &p; }\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -I. -o %s %s 2>/dev/null", so, src);
    if (system(cmd) != 0) cr_skip_test("no C compiler to build a wrong-ABI plugin");
    char pdir[64];
    s_plugin_dir(pdir, sizeof pdir, so);
    s_expect_cuda_fails("ABI version 99.0");
    sched_rm_plugin_dir(pdir);
    sched_rm_plugin_dir(dir);
}

// ---------------------------------------------------------------------------
typedef struct peer_plan {
    int done;
} peer_plan;

//  At step 1, a foreign DEALER sends garbage and a raw socket sends non-ZMTP bytes.
static void s_foreign_hook(coli_model *m, int step, void *user) {
    peer_plan *pp = user;
    if (step != 1 || pp->done) return;
    pp->done = 1;
    char *js = NULL, ep[600];
    cr_assert_eq(coli_model_stats_json(m, &js), 0);
    sched_worker_field(js, 0, "endpoint", ep, sizeof ep);
    free(js);
    /* raw bytes on the unix socket: ZeroMQ's handshake rejects them */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%.100s", ep + strlen("ipc://"));
    socklen_t len = sizeof sa;
    if (sa.sun_path[0] == '@') { /* a Linux abstract address, as ZeroMQ spells it */
        sa.sun_path[0] = 0;
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(sa.sun_path + 1));
    }
    if (connect(fd, (struct sockaddr *)&sa, len) == 0)
        cr_expect_gt(write(fd, "GET / HTTP/1.0\r\n\r\n\xff\x00\x01", 21), 0);
    close(fd);
    /* well-framed ZeroMQ messages that are not our protocol */
    void *ctx = zmq_ctx_new(), *d = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    cr_assert_eq(zmq_connect(d, ep), 0);
    zmq_send(d, "\xff\xfe garbage", 10, 0); /* not protobuf */
    zmq_send(d, "", 0, ZMQ_SNDMORE);
    zmq_send(d, "x", 1, 0);        /* empty header + payload */
    zmq_send(d, "\x08\x01", 2, 0); /* valid envelope, unknown peer */
    /* wait until the coordinator has counted all three */
    double until = sched_now() + 10;
    long n = 0;
    while (n < 3 && sched_now() < until) {
        usleep(10000);
        cr_assert_eq(coli_model_stats_json(m, &js), 0);
        n = sched_field(js, "foreign_messages_dropped");
        free(js);
    }
    zmq_close(d);
    zmq_ctx_term(ctx);
}

Test(scheduler_procs, foreign_peer_garbage_is_dropped) {
    const char *model = sched_fixture(MODEL);
    gen_result ref, got;
    peer_plan pp = {0};
    sched_generate(model, "inproc", NULL, NULL, &ref);
    sched_generate(model, "cpu:2", s_foreign_hook, &pp, &got);
    sched_assert_same(&ref, &got, "cpu:2 with a foreign peer");
    cr_expect_eq(sched_field(got.stats, "foreign_messages_dropped"), 3, "%s", got.stats);
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), 0, "%s", got.stats);
    gen_free(&ref);
    gen_free(&got);
    sched_assert_no_orphans();
}

// ---------------------------------------------------------------------------
//  Fork a coordinator child that loads model on cpu:2 (heartbeat_ms, if not
//  NULL, as COLI_HEARTBEAT_MS there) and stays; pids gets its two workers.
static pid_t s_fork_coordinator(const char *model, const char *heartbeat_ms, int pids[2]) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        close(fds[0]);
        if (heartbeat_ms) setenv("COLI_HEARTBEAT_MS", heartbeat_ms, 1);
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
    pids[0] = pids[1] = 0;
    cr_assert_eq(read(fds[0], pids, 2 * sizeof *pids), (ssize_t)(2 * sizeof *pids), "coordinator child failed");
    close(fds[0]);
    return child;
}

//  A coordinator in a child process starts 2 workers, reports their pids,
//  then is SIGKILLed: the workers must exit within 2 s.
Test(scheduler_procs, coordinator_sigkill_leaves_no_worker, .timeout = 60) {
    int pids[2];
    pid_t child = s_fork_coordinator(sched_fixture(MODEL), NULL, pids);
    cr_assert(!sched_proc_dead(pids[0]) && !sched_proc_dead(pids[1]));
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    sched_wait_dead(pids[0], 2.0);
    sched_wait_dead(pids[1], 2.0);
}

Test(scheduler_procs, model_free_leaves_no_worker) {
    const char *model = sched_fixture(MODEL);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "cpu:3";
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(model, &mp, &m), 0, "%s", coli_last_error());
    cr_expect_eq(sched_count_workers_of(getpid()), 3);
    coli_model_free(&m);
    sched_assert_no_orphans();
}

Test(scheduler_procs, unknown_device_is_named) {
    const char *model = sched_fixture(MODEL);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "cpu:1,tpu:0";
    coli_model *m = NULL;
    cr_assert_neq(coli_model_load(model, &mp, &m), 0);
    cr_expect(strstr(coli_last_error(), "unknown device 'tpu:0'"), "%s", coli_last_error());
    sched_assert_no_orphans();
}

//  As above with heartbeats 10 s apart, so the getppid() check cannot be what
//  ends them: the lifeline pipe's EOF alone must, at once.
Test(scheduler_procs, coordinator_sigkill_lifeline_alone, .timeout = 60) {
    int pids[2];
    pid_t child = s_fork_coordinator(sched_fixture(MODEL), "10000", pids);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    sched_wait_dead(pids[0], 1.0);
    sched_wait_dead(pids[1], 1.0);
}

// ---------------------------------------------------------------------------
// Worker lifetime is tied to the coordinator process, not to the thread that
// forked the worker (PR_SET_PDEATHSIG would kill it when that thread ends).

typedef struct on_thread {
    const char *model;
    coli_model *m;
    int rc, kill_pid, new_pid;
} on_thread;

static void *s_load_thread(void *p) {
    on_thread *t = p;
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "cpu:2";
    mp.n_threads = 1;
    t->rc = coli_model_load(t->model, &mp, &t->m);
    return NULL;
}

//  Poll the executor until worker 0 is up again under a new pid: its restart
//  is forked from this thread, which then ends.
static void *s_restart_thread(void *p) {
    on_thread *t = p;
    double until = sched_now() + 10;
    while (sched_now() < until) {
        char *js = NULL, v[32];
        if (coli_model_stats_json(t->m, &js) != 0) break;
        sched_worker_field(js, 0, "status", v, sizeof v);
        int up = !strcmp(v, "up");
        free(js);
        int pid = sched_worker_pid(t->m, 0);
        if (up && pid > 0 && pid != t->kill_pid) {
            t->new_pid = pid;
            break;
        }
        usleep(5000);
    }
    return NULL;
}

Test(scheduler_procs, workers_outlive_the_thread_that_loaded_the_model, .timeout = 60) {
    on_thread t = {.model = sched_fixture(MODEL)};
    gen_result ref, got;
    sched_generate(t.model, "inproc", NULL, NULL, &ref);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, s_load_thread, &t), 0);
    pthread_join(th, NULL);
    cr_assert_eq(t.rc, 0, "load on a thread: %s", coli_last_error());
    int pids[2] = {sched_worker_pid(t.m, 0), sched_worker_pid(t.m, 1)};
    usleep(300 * 1000); /* PDEATHSIG would have struck at the thread's exit */
    cr_expect(!sched_proc_dead(pids[0]) && !sched_proc_dead(pids[1]), "a worker died with the loading thread");
    sched_generate_on(t.m, "cpu:2", NULL, NULL, &got);
    sched_assert_same(&ref, &got, "cpu:2 loaded on a short-lived thread");
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), 0, "%s", got.stats);
    char v[32];
    for (int w = 0; w < 2; w++) {
        sched_worker_field(got.stats, w, "restarts", v, sizeof v);
        cr_expect_eq(atol(v), 0, "worker %d restarted: %s", w, got.stats);
        cr_expect_eq(sched_worker_pid(t.m, w), pids[w], "worker %d was replaced", w);
    }
    coli_model_free(&t.m);
    gen_free(&ref);
    gen_free(&got);
    sched_assert_no_orphans();
}

//  A worker restarted from a short-lived thread survives that thread too.
Test(scheduler_procs, worker_restarted_from_a_short_lived_thread_survives_it, .timeout = 60) {
    setenv("COLI_RESTART_BACKOFF_MS", "20", 1);
    on_thread t = {.model = sched_fixture(MODEL)};
    gen_result ref, got;
    sched_generate(t.model, "inproc", NULL, NULL, &ref);
    s_load_thread(&t);
    cr_assert_eq(t.rc, 0, "%s", coli_last_error());
    t.kill_pid = sched_worker_pid(t.m, 0);
    kill(t.kill_pid, SIGKILL);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, s_restart_thread, &t), 0);
    pthread_join(th, NULL);
    cr_assert_gt(t.new_pid, 0, "worker 0 was not restarted");
    usleep(300 * 1000);
    cr_expect(!sched_proc_dead(t.new_pid), "the restarted worker died with the thread that forked it");
    sched_generate_on(t.m, "cpu:2", NULL, NULL, &got);
    sched_assert_same(&ref, &got, "cpu:2 after a restart from a short-lived thread");
    cr_expect_eq(sched_fallbacks(got.stats, "cpu:0", "crash"), 1, "%s", got.stats);
    cr_expect_eq(sched_field(got.stats, "fallbacks_total"), 1, "%s", got.stats);
    char v[32];
    sched_worker_field(got.stats, 0, "restarts", v, sizeof v);
    cr_expect_eq(atol(v), 1, "%s", got.stats);
    cr_expect_eq(sched_worker_pid(t.m, 0), t.new_pid);
    coli_model_free(&t.m);
    gen_free(&ref);
    gen_free(&got);
    unsetenv("COLI_RESTART_BACKOFF_MS");
    sched_assert_no_orphans();
}

//  coli_model_params.worker_path wins over COLI_WORKER: the program named is
//  the one started, and a path that is no program fails the load naming it.
Test(scheduler_procs, worker_path_param_wins_over_the_environment) {
    const char *model = sched_fixture(MODEL);
    char worker[1200];
    snprintf(worker, sizeof worker, "%s/bin/coli-worker", sched_build_dir());
    setenv("COLI_WORKER", "/nonexistent/coli-worker", 1);
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "cpu:1";
    mp.worker_path = worker;
    coli_model *m = NULL;
    int rc = coli_model_load(model, &mp, &m);
    unsetenv("COLI_WORKER");
    cr_assert_eq(rc, 0, "%s", coli_last_error());
    coli_model_free(&m);
    mp.worker_path = "/nonexistent/other-worker";
    cr_assert_eq(coli_model_load(model, &mp, &m), COLI_EIO);
    cr_expect(strstr(coli_last_error(), "/nonexistent/other-worker"), "%s", coli_last_error());
    sched_assert_no_orphans();
}
