/*
 * test_scheduler_remote.c - workers on another "host" (here 127.0.0.1 only,
 * on a port the worker picks itself: --listen tcp://127.0.0.1:*), reached
 * over tcp with CURVE keys (docs/scheduler.md, "Remote workers").
 *
 * A remote worker that computes gives the bytes of --inproc; one that refuses
 * our key is one fallback `auth` and the output is still the same; one
 * SIGKILLed mid-run is one `crash`, the same output; one whose model copy is
 * not the coordinator's file refuses the Place (`alloc`). `coli keygen`
 * writes secret keys 0600 and never overwrites. `coli bench` over two remote
 * workers reports each one (address, dispatch latency, rows, bytes per token
 * each way, fallbacks) in its JSON. A fake remote worker that greets with
 * another ABI or no weight type is refused at the greeting (`abi`, `caps`,
 * never Placed); one whose place reply names an expert outside the model or
 * has no body is `garbage`, not a start_timeout; an endpoint where nothing
 * listens (tcp://[::1]:1, tcp://127.0.0.1:1) is `connect` at once.
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <zmq.h>

#include <cjson/cJSON.h>
#include <math.h>

#include "proto/curve_keys.h"
#include "plugins/plugin_abi.h"
#include "proto/wire.h"
#include "tests/cli_run.h"
#include "tests/sched_util.h"

#define MODEL "tiny-llama-moe-f32.gguf"

static void s_env(void) {
    setenv("COLI_LAYER_DEADLINE_MS", "5000", 1);
    setenv("COLI_RESTART_BACKOFF_MS", "20", 1);
    unsetenv("COLI_FAULT");
    unsetenv("COLI_KEYS");
    stderr_quiet();
}

TestSuite(scheduler_remote, .init = s_env);

static const char *s_bin(const char *name) {
    static char path[2][1024];
    static int k;
    const char *b = getenv("COLI_BUILD");
    k ^= 1;
    snprintf(path[k], sizeof path[k], "%s/bin/%s", b && *b ? b : "build", name);
    return path[k];
}

static void s_need_curve(void) {
    if (!zmq_has("curve")) cr_skip_test("libzmq has no CURVE support (zmq_has(\"curve\") is 0)");
}

//  Directories made by this test process, removed when it exits (each
//  Criterion test runs in its own process) so that key files do not pile up.
static char s_made[8][512];
static int s_n_made;

static void s_remove_made(void) {
    for (int i = 0; i < s_n_made; i++) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_made[i]);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", s_made[i]);
    }
}

//  A fresh private directory.
static void s_tmpdir(char *out, size_t n) {
    snprintf(out, n, "%s/coli-remote-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    cr_assert(mkdtemp(out), "mkdtemp");
    if (s_n_made == 0) atexit(s_remove_made);
    if (s_n_made < 8) snprintf(s_made[s_n_made++], sizeof s_made[0], "%s", out);
}

//  `coli keygen dir [--role role]`; its exit status (stdout/stderr silenced).
static int s_keygen(const char *dir, const char *role) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        const char *coli = s_bin("coli");
        if (role)
            execl(coli, coli, "keygen", dir, "--role", role, (char *)NULL);
        else
            execl(coli, coli, "keygen", dir, (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void s_copy(const char *from, const char *to) {
    char buf[256];
    FILE *a = fopen(from, "r"), *b = fopen(to, "w");
    cr_assert(a && b, "copy %s -> %s", from, to);
    size_t n = fread(buf, 1, sizeof buf, a);
    fwrite(buf, 1, n, b);
    fclose(a);
    fclose(b);
}

typedef struct remote_worker {
    pid_t pid;
    char endpoint[256];
} remote_worker;

//  coli-worker --listen LISTEN ...; read the endpoint it prints.
static void s_worker_start_at(remote_worker *rw, const char *keys, const char *model, const char *listen) {
    int p[2];
    cr_assert_eq(pipe(p), 0);
    rw->pid = fork();
    cr_assert_geq(rw->pid, 0);
    if (rw->pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        const char *bin = s_bin("coli-worker");
        execl(bin, bin, "--listen", listen, "--keys", keys, "--plugin", "cpu", "--threads", "1", "-m", model,
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char line[512] = "";
    size_t len = 0;
    struct pollfd pf = {p[0], POLLIN, 0};
    while (len < sizeof line - 1 && !strchr(line, '\n') && poll(&pf, 1, 10000) > 0) {
        ssize_t r = read(p[0], line + len, sizeof line - 1 - len);
        if (r <= 0) break;
        len += (size_t)r;
        line[len] = 0;
    }
    close(p[0]);
    const char *ep = strstr(line, "listening on ");
    cr_assert(ep, "remote worker did not say where it listens: '%s'", line);
    snprintf(rw->endpoint, sizeof rw->endpoint, "%.*s", (int)strcspn(ep + 13, "\n"), ep + 13);
    cr_assert(!strncmp(rw->endpoint, "tcp://127.0.0.1:", 16), "endpoint %s", rw->endpoint);
}

//  coli-worker --listen tcp://127.0.0.1:* (any free port).
static void s_worker_start(remote_worker *rw, const char *keys, const char *model) {
    s_worker_start_at(rw, keys, model, "tcp://127.0.0.1:*");
}

static void s_worker_stop(remote_worker *rw) {
    if (rw->pid <= 0) return;
    kill(rw->pid, SIGKILL);
    sched_wait_dead(rw->pid, 5.0);
    waitpid(rw->pid, NULL, 0);
    rw->pid = 0;
}

//  --inproc, then `cpu:1,remote:EP` with COLI_KEYS=keys: same bytes; the stats.
static char *s_run_remote(const remote_worker *rw, const char *keys, step_hook hook, void *user) {
    const char *model = sched_fixture(MODEL);
    gen_result ref, got;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    char devices[320];
    snprintf(devices, sizeof devices, "cpu:1,remote:%s", rw->endpoint);
    setenv("COLI_KEYS", keys, 1);
    sched_generate(model, devices, hook, user, &got);
    unsetenv("COLI_KEYS");
    sched_assert_same(&ref, &got, devices);
    char *js = got.stats;
    got.stats = NULL;
    gen_free(&ref);
    gen_free(&got);
    return js;
}

// ---------------------------------------------------------------------------
static void s_read(const char *dir, const char *name, char *out, size_t n, mode_t *mode) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s missing", path);
    *mode = st.st_mode & 0777;
    FILE *f = fopen(path, "r");
    cr_assert(f);
    size_t len = fread(out, 1, n - 1, f);
    out[len] = 0;
    fclose(f);
}

Test(scheduler_remote, keygen_secret_files_0600_and_never_overwritten) {
    s_need_curve();
    char dir[512], before[4][64], after[64];
    s_tmpdir(dir, sizeof dir);
    cr_assert_eq(s_keygen(dir, NULL), 0);
    const char *names[4] = {"coordinator.key", "coordinator.pub", "worker.key", "worker.pub"};
    for (int i = 0; i < 4; i++) {
        mode_t mode;
        s_read(dir, names[i], before[i], sizeof before[i], &mode);
        cr_expect_eq(mode, i % 2 ? 0644 : 0600, "%s: mode %o", names[i], (unsigned)mode);
        cr_expect_eq(strlen(before[i]), 41, "%s: not 40 Z85 characters and a newline", names[i]);
    }
    cr_expect_neq(strcmp(before[0], before[2]), 0, "the two secret keys are the same");
    cr_expect_eq(s_keygen(dir, NULL), 1, "keygen overwrote an existing key pair");
    cr_expect_eq(s_keygen(dir, "worker"), 1, "keygen --role worker overwrote worker.key");
    for (int i = 0; i < 4; i++) {
        mode_t mode;
        s_read(dir, names[i], after, sizeof after, &mode);
        cr_expect_str_eq(after, before[i], "%s changed", names[i]);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

//  CURVE present, a fresh key dir (both roles) and a remote worker on the fixture.
static void s_start_with_keys(char *keys, size_t n, remote_worker *rw) {
    s_need_curve();
    s_tmpdir(keys, n);
    cr_assert_eq(s_keygen(keys, NULL), 0);
    s_worker_start(rw, keys, sched_fixture(MODEL));
}

//  The local worker is our child; the remote one is nobody's business of ours.
static void s_check_pids(coli_model *m, int step, void *user) {
    (void)user;
    if (step != 1) return;
    cr_expect_gt(sched_worker_pid(m, 0), 0);
    cr_expect_eq(sched_worker_pid(m, 1), 0, "a remote worker has no local process");
}

/* Does process pid have a thread named name? */
static int s_has_thread(pid_t pid, const char *name) {
    char path[320], comm[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    int found = 0;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        snprintf(path, sizeof path, "/proc/%d/task/%s/comm", (int)pid, e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof comm, f)) found = !strncmp(comm, name, strlen(name));
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return found;
}

Test(scheduler_remote, remote_worker_computes_bit_identical, .timeout = 120) {
    char keys[512];
    remote_worker rw;
    s_start_with_keys(keys, sizeof keys, &rw);
    char *js = s_run_remote(&rw, keys, s_check_pids, NULL);
    /* its memory is sampled by a thread of its own, not between batches (workers/worker_mem.c) */
    cr_expect(s_has_thread(rw.pid, "coli-mem"), "the host has no coli-mem sampler thread");
    s_worker_stop(&rw);
    char v[256];
    sched_worker_field(js, 1, "device", v, sizeof v);
    cr_expect_str_eq(v, "remote:0");
    sched_worker_field(js, 1, "status", v, sizeof v);
    cr_expect_str_eq(v, "up", "%s", js);
    sched_worker_field(js, 1, "endpoint", v, sizeof v);
    cr_expect_str_eq(v, rw.endpoint);
    sched_worker_field(js, 1, "batches", v, sizeof v);
    cr_expect_gt(atol(v), 0, "the remote worker did no work: %s", js);
    sched_worker_field(js, 1, "resident_experts", v, sizeof v);
    cr_expect_gt(atol(v), 0, "the remote worker holds no experts");
    cr_expect_eq(sched_field(js, "fallbacks_total"), 0, "%s", js);
    free(js);
    sched_assert_no_orphans();
}

Test(scheduler_remote, unauthorized_coordinator_key_is_one_auth_fallback, .timeout = 120) {
    s_need_curve();
    char worker_keys[512], our_keys[512], a[1100], b[1100];
    s_tmpdir(worker_keys, sizeof worker_keys);
    s_tmpdir(our_keys, sizeof our_keys);
    cr_assert_eq(s_keygen(worker_keys, NULL), 0);
    cr_assert_eq(s_keygen(our_keys, "coordinator"), 0); /* a key the worker never heard of */
    snprintf(a, sizeof a, "%s/worker.pub", worker_keys);
    snprintf(b, sizeof b, "%s/worker.pub", our_keys);
    s_copy(a, b); /* we know the worker; it does not know us */
    remote_worker rw;
    s_worker_start(&rw, worker_keys, sched_fixture(MODEL));
    char *js = s_run_remote(&rw, our_keys, NULL, NULL);
    s_worker_stop(&rw);
    cr_expect_eq(sched_fallbacks(js, "remote:0", "auth"), 1, "%s", js);
    cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "%s", js);
    char v[64];
    sched_worker_field(js, 1, "status", v, sizeof v);
    cr_expect_str_eq(v, "failed");
    sched_worker_field(js, 1, "batches", v, sizeof v);
    cr_expect_eq(atol(v), 0);
    free(js);
}

static void s_kill_at_step(coli_model *m, int step, void *user) {
    (void)m;
    remote_worker *rw = user;
    if (step == 3) s_worker_stop(rw);
}

Test(scheduler_remote, remote_worker_sigkilled_mid_run, .timeout = 120) {
    char keys[512];
    remote_worker rw;
    s_start_with_keys(keys, sizeof keys, &rw);
    char *js = s_run_remote(&rw, keys, s_kill_at_step, &rw);
    s_worker_stop(&rw);
    cr_expect_eq(sched_fallbacks(js, "remote:0", "crash"), 1, "%s", js);
    cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "%s", js);
    free(js);
    sched_assert_no_orphans();
}

Test(scheduler_remote, model_copy_not_the_coordinators_refuses_place, .timeout = 120) {
    s_need_curve();
    char keys[512];
    s_tmpdir(keys, sizeof keys);
    cr_assert_eq(s_keygen(keys, NULL), 0);
    remote_worker rw;
    s_worker_start(&rw, keys, sched_fixture("tiny-llama-moe-f16.gguf")); /* same shape, other bytes */
    char *js = s_run_remote(&rw, keys, NULL, NULL);
    s_worker_stop(&rw);
    cr_expect_eq(sched_fallbacks(js, "remote:0", "alloc"), 1, "%s", js);
    cr_expect_eq(sched_field(js, "fallbacks_total"), 1, "%s", js);
    char v[256];
    sched_worker_field(js, 1, "reason", v, sizeof v);
    cr_expect(strstr(v, "not the coordinator's file"), "reason: %s", v);
    free(js);
}

Test(scheduler_remote, remote_without_keys_is_a_clear_error) {
    s_need_curve();
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "cpu:1,remote:tcp://127.0.0.1:9";
    coli_model *m = NULL;
    cr_assert_neq(coli_model_load(sched_fixture(MODEL), &mp, &m), 0);
    cr_expect(strstr(coli_last_error(), "COLI_KEYS"), "%s", coli_last_error());
    mp.devices = "remote:udp://127.0.0.1:9";
    cr_assert_neq(coli_model_load(sched_fixture(MODEL), &mp, &m), 0);
    cr_expect(strstr(coli_last_error(), "tcp://HOST:PORT"), "%s", coli_last_error());
    sched_assert_no_orphans();
}

// ---------------------------------------------------------------------------
// A fake remote worker (a CURVE server ROUTER in a child process) that says
// what a real one never would: the coordinator refuses it at the greeting
// or at its place reply, with a named reason, and the work goes elsewhere
// (issue 28: a Hello with ABI 99 and an empty type mask was given experts;
// a garbage place reply ended as a silent start_timeout).

typedef enum fake_lie {
    LIE_ABI,          /* hello: plugin ABI 99 */
    LIE_NO_TYPES,     /* hello: empty type mask */
    LIE_ACT_MASK,     /* hello: an act_mask bit the ABI does not define */
    LIE_PLACE_RANGE,  /* place reply: an expert outside the model */
    LIE_PLACE_NOBODY, /* place reply: an envelope without a body */
} fake_lie;

typedef struct fake_worker {
    pid_t pid;
    int report; /* read end: one 'P' per Place the fake worker got */
    char endpoint[256];
} fake_worker;

static void s_fake_reply(void *r, const wire_msg *m, fake_lie lie) {
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    Coli__Hello h = COLI__HELLO__INIT;
    Coli__PlaceAck a = COLI__PLACE_ACK__INIT;
    Coli__ExpertRef far = COLI__EXPERT_REF__INIT, *refs[1] = {&far};
    if (m->env->body_case == COLI__ENVELOPE__BODY_HELLO) {
        h.plugin = "cpu", h.device = "cpu:0", h.abi_major = lie == LIE_ABI ? 99 : 1, h.abi_minor = 2;
        h.dtype_mask = lie == LIE_NO_TYPES ? 0 : 1; /* F32 */
        h.act_mask = lie == LIE_ACT_MASK ? 1u << 5 | MOE_ACT_BIASES : 0;
        env.body_case = COLI__ENVELOPE__BODY_HELLO, env.hello = &h;
    } else if (lie == LIE_PLACE_RANGE) {
        far.layer = 99, far.expert = 99;
        a.n_resident = 1, a.resident = refs;
        env.body_case = COLI__ENVELOPE__BODY_PLACE_ACK, env.place_ack = &a;
    } /* else LIE_PLACE_NOBODY: the envelope as it is, no body */
    wire_send(r, m->peer, m->peer_len, &env, NULL, 0, ZMQ_DONTWAIT);
}

//  The child: answer greetings and Places as `lie` says, until killed.
static void s_fake_serve(const char *keys, fake_lie lie, int ep_fd, int report_fd) {
    void *ctx = zmq_ctx_new(), *r = zmq_socket(ctx, ZMQ_ROUTER);
    char ep[256];
    size_t len = sizeof ep;
    if (wire_socket_setup(r, 1) || curve_server_setup(r, keys) || zmq_bind(r, "tcp://127.0.0.1:*") ||
        zmq_getsockopt(r, ZMQ_LAST_ENDPOINT, ep, &len))
        _exit(3);
    if (write(ep_fd, ep, strlen(ep) + 1) < 0) _exit(3);
    for (;;) {
        wire_msg m;
        if (wire_recv(r, 1, 0, &m) != 0) continue;
        if (m.env->body_case == COLI__ENVELOPE__BODY_PLACE && write(report_fd, "P", 1) < 0) _exit(3);
        if (m.env->body_case == COLI__ENVELOPE__BODY_HELLO || m.env->body_case == COLI__ENVELOPE__BODY_PLACE)
            s_fake_reply(r, &m, lie);
        wire_msg_clear(&m);
    }
}

static void s_fake_start(fake_worker *fw, const char *keys, fake_lie lie) {
    int ep[2], rep[2];
    cr_assert_eq(pipe(ep), 0);
    cr_assert_eq(pipe(rep), 0);
    fw->pid = fork();
    cr_assert_geq(fw->pid, 0);
    if (fw->pid == 0) {
        close(ep[0]);
        close(rep[0]);
        s_fake_serve(keys, lie, ep[1], rep[1]);
    }
    close(ep[1]);
    close(rep[1]);
    fw->report = rep[0];
    struct pollfd pf = {ep[0], POLLIN, 0};
    cr_assert_gt(poll(&pf, 1, 10000), 0, "the fake worker did not say where it listens");
    ssize_t n = read(ep[0], fw->endpoint, sizeof fw->endpoint - 1);
    close(ep[0]);
    cr_assert_gt(n, 0);
    fw->endpoint[n] = 0;
}

//  Stop the fake worker; the number of Places it got.
static int s_fake_stop(fake_worker *fw) {
    kill(fw->pid, SIGKILL);
    waitpid(fw->pid, NULL, 0);
    char buf[64];
    int places = 0;
    fcntl(fw->report, F_SETFL, O_NONBLOCK);
    for (ssize_t n; (n = read(fw->report, buf, sizeof buf)) > 0;) places += (int)n;
    close(fw->report);
    return places;
}

//  A run against the fake worker: the bytes of --inproc, one fallback of
//  `reason` for remote:0 and no start_timeout; the number of Places it got.
static int s_run_against_fake(fake_lie lie, const char *reason, const char *why_part) {
    s_need_curve();
    setenv("COLI_WORKER_START_MS", "8000", 1); /* the old silent end, within the test's time */
    char keys[512];
    s_tmpdir(keys, sizeof keys);
    cr_assert_eq(s_keygen(keys, NULL), 0);
    fake_worker fw;
    s_fake_start(&fw, keys, lie);
    remote_worker rw = {fw.pid, ""};
    snprintf(rw.endpoint, sizeof rw.endpoint, "%s", fw.endpoint);
    char *js = s_run_remote(&rw, keys, NULL, NULL);
    int places = s_fake_stop(&fw);
    cr_expect_eq(sched_fallbacks(js, "remote:0", reason), 1, "%s", js);
    cr_expect_eq(sched_fallbacks(js, "remote:0", "start_timeout"), 0, "%s", js);
    char v[256];
    sched_worker_field(js, 1, "reason", v, sizeof v);
    cr_expect(strstr(v, why_part), "reason '%s', want '%s'", v, why_part);
    free(js);
    return places;
}

Test(scheduler_remote, hello_with_another_abi_is_refused_naming_both, .timeout = 120) {
    int places = s_run_against_fake(LIE_ABI, "abi", "speaks ABI 99.2");
    cr_expect_eq(places, 0, "a worker of another ABI was given experts");
}

Test(scheduler_remote, hello_with_no_weight_type_is_refused, .timeout = 120) {
    int places = s_run_against_fake(LIE_NO_TYPES, "caps", "empty type mask");
    cr_expect_eq(places, 0, "a worker that computes no type was given experts");
}

//  A malformed act_mask (a bit no ABI 1.4 activation has) is refused at the
//  greeting: trusting it could hand the worker experts it computes wrongly.
Test(scheduler_remote, hello_with_an_unknown_activation_bit_is_refused, .timeout = 120) {
    int places = s_run_against_fake(LIE_ACT_MASK, "caps", "act_mask 0x80000020 has bits 0x20");
    cr_expect_eq(places, 0, "a worker with a malformed act_mask was given experts");
}

Test(scheduler_remote, place_reply_outside_the_model_is_garbage, .timeout = 120) {
    s_run_against_fake(LIE_PLACE_RANGE, "garbage", "outside the model");
}

Test(scheduler_remote, place_reply_without_a_body_is_garbage_not_a_timeout, .timeout = 120) {
    s_run_against_fake(LIE_PLACE_NOBODY, "garbage", "a message of kind 0");
}

//  Nothing listens at the endpoint: a `connect` fallback at once (the load
//  used to wait out the start deadline and count a start_timeout), the
//  output that of --inproc, for an IPv6 and an IPv4 address.
Test(scheduler_remote, refused_connection_fails_fast, .timeout = 120) {
    s_need_curve();
    setenv("COLI_WORKER_START_MS", "60000", 1); /* longer than this test may take */
    /* the reconnect starts at once, while the cpu worker may still be starting:
     * the load must not wait for it (it waits out the start deadline by design) */
    setenv("COLI_RESTART_BACKOFF_MS", "1", 1);
    char keys[512];
    s_tmpdir(keys, sizeof keys);
    cr_assert_eq(s_keygen(keys, NULL), 0);
    const char *eps[2] = {"tcp://[::1]:1", "tcp://127.0.0.1:1"};
    for (int i = 0; i < 2; i++) {
        remote_worker rw = {0, ""};
        snprintf(rw.endpoint, sizeof rw.endpoint, "%s", eps[i]);
        char *js = s_run_remote(&rw, keys, NULL, NULL);
        cr_expect_eq(sched_fallbacks(js, "remote:0", "connect"), 1, "%s: %s", eps[i], js);
        cr_expect_eq(sched_fallbacks(js, "remote:0", "start_timeout"), 0, "%s: %s", eps[i], js);
        free(js);
    }
}

// ---------------------------------------------------------------------------
// One coordinator at a time: a second one is refused "busy" (one `busy`
// fallback, its experts computed elsewhere, no stall), and the first keeps
// the worker; neither takes it from the other.

static coli_model *s_load_remote(const remote_worker *rw) {
    char devices[320];
    snprintf(devices, sizeof devices, "cpu:1,remote:%s", rw->endpoint);
    return sched_load(sched_fixture(MODEL), devices);
}

Test(scheduler_remote, second_coordinator_is_refused_busy, .timeout = 120) {
    char keys[512];
    remote_worker rw;
    s_start_with_keys(keys, sizeof keys, &rw);
    gen_result ref, a1, b, a2;
    sched_generate(sched_fixture(MODEL), "inproc", NULL, NULL, &ref);
    setenv("COLI_KEYS", keys, 1);
    coli_model *ma = s_load_remote(&rw);
    sched_generate_on(ma, "first coordinator", NULL, NULL, &a1);
    double t0 = sched_now();
    coli_model *mb = s_load_remote(&rw);
    double load_s = sched_now() - t0;
    sched_generate_on(mb, "second coordinator", NULL, NULL, &b);
    sched_generate_on(ma, "first coordinator again", NULL, NULL, &a2);
    coli_model_free(&mb);
    coli_model_free(&ma);
    unsetenv("COLI_KEYS");
    s_worker_stop(&rw);
    sched_assert_same(&ref, &a1, "first coordinator");
    sched_assert_same(&ref, &b, "second coordinator");
    sched_assert_same(&ref, &a2, "first coordinator again");
    cr_expect_lt(load_s, 5.0, "the refused coordinator took %.1f s to load", load_s);
    cr_expect_eq(sched_fallbacks(b.stats, "remote:0", "busy"), 1, "%s", b.stats);
    char v[256];
    sched_worker_field(b.stats, 1, "status", v, sizeof v);
    cr_expect_str_eq(v, "failed", "%s", b.stats);
    sched_worker_field(b.stats, 1, "reason", v, sizeof v);
    cr_expect(!strncmp(v, "busy", 4), "reason: %s", v);
    cr_expect_eq(sched_field(a2.stats, "fallbacks_total"), 0, "the first coordinator lost its worker: %s", a2.stats);
    sched_worker_field(a2.stats, 1, "status", v, sizeof v);
    cr_expect_str_eq(v, "up", "%s", a2.stats);
    long before = 0, after = 0;
    sched_worker_field(a1.stats, 1, "batches", v, sizeof v);
    before = atol(v);
    sched_worker_field(a2.stats, 1, "batches", v, sizeof v);
    after = atol(v);
    cr_expect_gt(after, before, "the remote worker served the first coordinator no more batches");
    gen_free(&ref);
    gen_free(&a1);
    gen_free(&b);
    gen_free(&a2);
    sched_assert_no_orphans();
}

// ---------------------------------------------------------------------------
// A remote worker does not obey Shutdown (coordinators never send it one):
// an authorized peer that greets and says Shutdown leaves it serving.

static void s_send_env(void *sock, Coli__Envelope *env) {
    cr_assert_eq(wire_send(sock, NULL, 0, env, NULL, 0, 0), 0, "%s", coli_last_error());
}

Test(scheduler_remote, remote_worker_ignores_shutdown, .timeout = 120) {
    char keys[512];
    remote_worker rw;
    s_start_with_keys(keys, sizeof keys, &rw);
    void *ctx = zmq_ctx_new(), *d = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    cr_assert_eq(curve_client_setup(d, keys, rw.endpoint), 0, "%s", coli_last_error());
    cr_assert_eq(zmq_connect(d, rw.endpoint), 0);
    Coli__Hello h = COLI__HELLO__INIT;
    h.status = COLI__STATUS__STATUS_OK;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    s_send_env(d, &env);
    wire_msg m; /* its hello back: we are the coordinator it serves */
    zmq_pollitem_t it = {d, 0, ZMQ_POLLIN, 0};
    cr_assert_gt(zmq_poll(&it, 1, 10000), 0, "no hello from the remote worker");
    cr_assert_eq(wire_recv(d, 0, 0, &m), 0);
    cr_expect_eq(m.env->body_case, COLI__ENVELOPE__BODY_HELLO);
    wire_msg_clear(&m);
    Coli__Shutdown sd = COLI__SHUTDOWN__INIT;
    sd.reason = "test";
    Coli__Envelope env2 = COLI__ENVELOPE__INIT;
    env2.body_case = COLI__ENVELOPE__BODY_SHUTDOWN;
    env2.shutdown = &sd;
    s_send_env(d, &env2);
    usleep(500000);
    zmq_close(d);
    zmq_ctx_term(ctx);
    cr_expect(!sched_proc_dead(rw.pid), "the remote worker obeyed Shutdown");
    if (!sched_proc_dead(rw.pid)) { /* and still serves a coordinator */
        char *js = s_run_remote(&rw, keys, NULL, NULL);
        cr_expect_eq(sched_field(js, "fallbacks_total"), 0, "%s", js);
        free(js);
    }
    s_worker_stop(&rw);
}

// ---------------------------------------------------------------------------
// `coli bench --devices "remote:A,remote:B"`: one report per worker.

static double s_jnum(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "bench JSON: no number '%s'", key);
    return v->valuedouble;
}

//  What one worker's entry must say after a healthy run: where it is, that it
//  served rows, and bytes each way of about rows x n_embd floats (the rows out,
//  the results back) plus small headers.
static void s_check_host(const cJSON *h, const remote_worker *rw, double tokens, int n_embd) {
    const cJSON *addr = cJSON_GetObjectItemCaseSensitive(h, "address");
    cr_expect(cJSON_IsString(addr) && !strcmp(addr->valuestring, rw->endpoint), "address of %s", rw->endpoint);
    double rows = s_jnum(h, "rows"), batches = s_jnum(h, "batches");
    cr_expect_gt(rows, 0, "%s served no rows", rw->endpoint);
    const cJSON *lat = cJSON_GetObjectItemCaseSensitive(h, "dispatch_latency_ms");
    cr_expect_gt(s_jnum(lat, "p50"), 0);
    cr_expect_geq(s_jnum(lat, "p99"), s_jnum(lat, "p50"));
    cr_expect_eq(s_jnum(h, "fallbacks_total"), 0, "fallbacks on a healthy run");
    /* its memory: what it holds (half the experts each) and nothing for a lost host */
    cr_expect_gt(s_jnum(h, "resident_experts"), 0, "%s holds nothing", rw->endpoint);
    cr_expect_gt(s_jnum(h, "owned_bytes"), 0);
    cr_expect_eq(s_jnum(h, "guest_experts"), 0);
    cr_expect_geq(s_jnum(h, "rss_bytes"), 0);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(h, "fallbacks")), 0);
    double payload = rows * n_embd * 4.0;
    const char *dir[2] = {"sent", "received"};
    for (int d = 0; d < 2; d++) {
        char key[64];
        snprintf(key, sizeof key, "bytes_%s", dir[d]);
        double bytes = s_jnum(h, key);
        cr_expect_geq(bytes, payload, "%s %s %.0f < rows x n_embd x 4 = %.0f", rw->endpoint, key, bytes, payload);
        cr_expect_leq(bytes, payload + 512 * batches + 16384, "%s %s %.0f: far more than the rows' %.0f", rw->endpoint,
                      key, bytes, payload);
        snprintf(key, sizeof key, "bytes_%s_per_token", dir[d]);
        cr_expect(fabs(s_jnum(h, key) - bytes / tokens) < 1e-6 * bytes, "%s", key);
    }
}

Test(scheduler_remote, bench_reports_each_remote_worker, .timeout = 180) {
    char keys[512], dir[512], json[600], devices[600], coli[1100];
    remote_worker rw[2];
    s_start_with_keys(keys, sizeof keys, &rw[0]);
    const char *model = sched_fixture(MODEL);
    s_worker_start(&rw[1], keys, model);
    s_tmpdir(dir, sizeof dir);
    snprintf(json, sizeof json, "%s/bench.json", dir);
    snprintf(devices, sizeof devices, "remote:%s,remote:%s", rw[0].endpoint, rw[1].endpoint);
    const int repeat = 2, n_prompt = 8, n_decode = 8; /* as the arguments below say */
    cli_build_path(coli, sizeof coli, "bin/coli");
    char *argv[] = {coli, "bench", "-m", (char *)model, "-t",    "1",      "-p", "8", "-n",
                    "8",  "-r",    "2",  "--devices",   devices, "--json", json, NULL};
    setenv("COLI_KEYS", keys, 1);
    cli_result r = cli_run(argv);
    unsetenv("COLI_KEYS");
    s_worker_stop(&rw[0]);
    s_worker_stop(&rw[1]);
    cr_assert_eq(r.status, 0, "coli bench: %s", r.err);
    cr_expect(strstr(r.out, "per worker") && strstr(r.out, rw[0].endpoint) && strstr(r.out, rw[1].endpoint),
              "no per-worker lines: %s", r.out);
    cr_expect(strstr(r.out, "memory: resident") && strstr(r.out, "expert moves: 0 hosts lost"), "%s", r.out);
    cli_result_free(&r);
    coli_model *m = NULL;
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc";
    cr_assert_eq(coli_model_load(model, &mp, &m), 0);
    coli_model_info info;
    coli_model_get_info(m, &info);
    coli_model_free(&m);
    char *text = cli_slurp(json, NULL);
    cJSON *js = text ? cJSON_Parse(text) : NULL;
    free(text);
    cr_assert(js, "%s is not JSON", json);
    const cJSON *cfg = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(js, "configs"), 0);
    double tokens = s_jnum(cfg, "tokens");
    cr_expect_eq(tokens, repeat * (n_prompt + 1 + n_decode), "tokens evaluated");
    const cJSON *hosts = cJSON_GetObjectItemCaseSensitive(cfg, "workers");
    cr_assert_eq(cJSON_GetArraySize(hosts), 2, "one entry per remote worker");
    double rows = 0;
    for (int i = 0; i < 2; i++) {
        s_check_host(cJSON_GetArrayItem(hosts, i), &rw[i], tokens, info.n_embd);
        rows += s_jnum(cJSON_GetArrayItem(hosts, i), "rows");
    }
    /* every routed (token, layer, expert) pair went to one of them */
    cr_expect_eq(rows, tokens * info.n_layer * info.n_expert_used, "rows %.0f", rows);
    const cJSON *moves = cJSON_GetObjectItemCaseSensitive(cfg, "expert_moves");
    cr_expect(cJSON_IsObject(moves), "no expert_moves in the bench JSON");
    cr_expect_eq(s_jnum(moves, "hosts_lost"), 0);
    cr_expect_eq(s_jnum(moves, "bytes_moved"), 0);
    cJSON_Delete(js);
}

// ---------------------------------------------------------------------------
// Hosts as a memory tier (docs/scheduler.md): a host lost mid-answer, its
// experts moved to the other host (within its budget) and to the coordinator,
// then back. The netns test measures memory; this one runs anywhere.

#define TIER_EB 98304 /* bytes of one expert of the fixture (3 x 64 x 128 x 4) */

static long s_worker_num(const char *js, int id, const char *name) {
    char v[64];
    sched_worker_field(js, id, name, v, sizeof v);
    return atol(v);
}

Test(scheduler_remote, lost_hosts_experts_move_and_return, .timeout = 180) {
    char keys[512], devices[640], again[300];
    remote_worker rw[2];
    s_start_with_keys(keys, sizeof keys, &rw[0]);
    const char *model = sched_fixture(MODEL);
    s_worker_start(&rw[1], keys, model);
    gen_result ref, cut, back;
    sched_generate(model, "inproc", NULL, NULL, &ref);
    /* 576K: the 4 experts the plan gives each host and room for 2 more */
    snprintf(devices, sizeof devices, "remote:%s=576K,remote:%s=576K", rw[0].endpoint, rw[1].endpoint);
    snprintf(again, sizeof again, "%s", rw[0].endpoint);
    setenv("COLI_KEYS", keys, 1);
    setenv("COLI_RESTART_BACKOFF_MS", "50", 1);
    setenv("COLI_WORKER_MAX_FAILURES", "1000", 1);
    coli_model *m = sched_load(model, devices);
    sched_generate_on(m, "a host killed", s_kill_at_step, &rw[0], &cut);
    sched_assert_same(&ref, &cut, "a host killed mid-answer");
    cr_expect(sched_wait_field(m, "to_hosts", 2, 10), "the moved experts were not acknowledged");
    char *js = NULL;
    cr_assert_eq(coli_model_stats_json(m, &js), 0);
    cr_expect_eq(sched_fallbacks(js, "remote:0", "crash"), 1, "%s", js);
    cr_expect_eq(sched_field(js, "hosts_lost"), 1, "%s", js);
    cr_expect_eq(sched_field(js, "to_hosts_bytes"), 2 * TIER_EB, "%s", js);
    cr_expect_eq(sched_field(js, "to_coordinator"), 2, "%s", js);
    cr_expect_eq(sched_field(js, "to_coordinator_bytes"), 2 * TIER_EB, "%s", js);
    cr_expect_eq(s_worker_num(js, 1, "guest_experts"), 2, "%s", js);
    cr_expect_eq(s_worker_num(js, 1, "resident_experts"), 6, "host 1 does not hold its guests: %s", js);
    free(js);
    s_worker_start_at(&rw[0], keys, model, again); /* the host comes back on its address */
    cr_expect(sched_wait_field(m, "returned", 4, 30), "its experts did not return");
    sched_generate_on(m, "after the host returned", NULL, NULL, &back);
    sched_assert_same(&ref, &back, "after the host returned");
    cr_expect_eq(sched_field(back.stats, "returned_bytes"), 4 * TIER_EB, "%s", back.stats);
    cr_expect_eq(s_worker_num(back.stats, 1, "guest_experts"), 0, "%s", back.stats);
    /* the other host's re-Place left its guests out: its plugin dropped them */
    cr_expect_eq(s_worker_num(back.stats, 1, "resident_experts"), 4, "%s", back.stats);
    cr_expect_gt(s_worker_num(back.stats, 0, "batches"), s_worker_num(cut.stats, 0, "batches"), "%s", back.stats);
    coli_model_free(&m);
    unsetenv("COLI_KEYS");
    s_worker_stop(&rw[0]);
    s_worker_stop(&rw[1]);
    gen_free(&ref);
    gen_free(&cut);
    gen_free(&back);
}
