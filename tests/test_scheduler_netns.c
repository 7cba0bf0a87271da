/*
 * test_scheduler_netns.c - remote workers on hosts of their own: each worker
 * runs in a Linux network namespace made here, reached over a veth pair with
 * private addresses (10.201.K.1 on our side, 10.201.K.2 on its side) that
 * exist only for this test; nothing leaves the machine. Then:
 *   - a link goes down mid-run: that host's experts fall back, the output is
 *     bit-identical to --inproc, and the host rejoins when the link is back;
 *   - a worker host's process is SIGKILLed and restarted on the same address:
 *     same output meanwhile, and it serves again;
 *   - a slow link: tools/slowlink/slowlink.py (a userspace TCP proxy, no netem
 *     needed) sits between us and the worker host and delays every byte by D ms
 *     each way: the output is still --inproc's bytes and the worker's dispatch
 *     p50 is at least 2 D; with a delay past the layer deadline the rows fall
 *     back (counted as timeouts) and the output is still the same.
 * Needs root and `ip netns` (iproute2); skips with the reason otherwise, but
 * for the slow-link tests, which then run the worker on loopback (they skip
 * only when neither works: no CURVE, no /usr/bin/python3).
 * Every namespace made here is deleted at exit, on failure too (atexit in
 * the test's process; a run killed outright leaves namespaces named
 * colint-<pid>-*, which the next run deletes when that pid is gone).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <poll.h>
#include <sys/wait.h>
#include <zmq.h>

#include "tests/sched_util.h"

#define MODEL "tiny-llama-moe-f32.gguf"
#define N_HOSTS 2
#define PORT 7411

typedef struct host {
    char ns[32], veth_ours[16], veth_its[16], addr[32]; /* ns "" = on loopback, no namespace */
    char endpoint[80];                                  /* the worker's, as it printed it */
    char proxy_endpoint[80];                            /* the slow link's, when one runs */
    pid_t worker, proxy;
    int subnet; /* K of 10.201.K.0/24, claimed in s_claim_subnet (0: none) */
} host;

static host s_hosts[N_HOSTS];
static int s_n_made;
static char s_keys[256];

//  Run a shell command quietly; its exit status.
static int s_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int s_sh(const char *fmt, ...) {
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char quiet[1100];
    snprintf(quiet, sizeof quiet, "%s >/dev/null 2>&1", cmd);
    int st = system(quiet);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void s_reap(pid_t *pid) {
    if (*pid <= 0) return;
    kill(*pid, SIGKILL);
    waitpid(*pid, NULL, 0);
    *pid = 0;
}

//  The claim file of subnet k: it holds the pid of the test process using 10.201.K.0/24.
static void s_subnet_claim_path(char *out, size_t n, int k) { snprintf(out, n, "/tmp/colint-subnet-%d", k); }

static void s_release_subnet(host *h) {
    if (h->subnet <= 0) return;
    char path[64];
    s_subnet_claim_path(path, sizeof path, h->subnet);
    unlink(path);
    h->subnet = 0;
}

//  A /24 of 10.201.K.0 that no other test (of this run or of another one on the machine)
//  uses: claimed by creating its file with O_EXCL; a claim whose pid is gone is stale and
//  removed. (K from the pid alone collided: pids 100 apart got the same subnet, and the
//  coordinator then reached the other test's worker: "wrong worker public key".)
static int s_claim_subnet(void) {
    int start = (int)(getpid() % 254);
    for (int j = 0; j < 2 * 254; j++) {
        int k = 1 + (start + j) % 254;
        char path[64];
        s_subnet_claim_path(path, sizeof path, k);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            FILE *f = fopen(path, "r");
            int pid = 0;
            if (f && fscanf(f, "%d", &pid) != 1) pid = 0;
            if (f) fclose(f);
            if (pid > 0 && kill(pid, 0) != 0) unlink(path); /* stale: free on the next pass */
            continue;
        }
        dprintf(fd, "%d\n", (int)getpid());
        close(fd);
        if (s_sh("ip -o -4 addr show | grep -q ' 10\\.201\\.%d\\.'", k) == 0) { /* in use outside our claims */
            unlink(path);
            continue;
        }
        return k;
    }
    cr_assert_fail("no free subnet 10.201.K.0/24 (claims in /tmp/colint-subnet-*)");
    return 0;
}

static void s_cleanup(void) {
    for (int i = 0; i < s_n_made; i++) {
        s_reap(&s_hosts[i].worker);
        s_reap(&s_hosts[i].proxy);
        if (!s_hosts[i].ns[0]) continue;
        s_sh("ip link del %s", s_hosts[i].veth_ours); /* takes its peer along */
        s_sh("ip netns del %s", s_hosts[i].ns);
        s_release_subnet(&s_hosts[i]);
    }
    s_n_made = 0;
    if (s_keys[0]) s_sh("rm -rf '%s'", s_keys);
    s_keys[0] = 0;
}

//  Namespaces of earlier runs whose process is gone (a run killed outright).
static void s_remove_stale(void) {
    FILE *f = popen("ip netns list 2>/dev/null", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        int pid;
        char name[64];
        if (sscanf(line, "%63s", name) != 1 || sscanf(name, "colint-%d-", &pid) != 1) continue;
        if (kill(pid, 0) != 0) s_sh("ip netns del %s", name);
    }
    pclose(f);
}

//  Why this process cannot make network namespaces, or NULL when it can.
static const char *s_netns_unavailable(void) {
    if (geteuid() != 0) return "network namespaces need root (ip netns add); not root here";
    if (s_sh("ip -V") != 0) return "iproute2's ip is not installed";
    char probe[32];
    snprintf(probe, sizeof probe, "colint-%d-probe", (int)getpid());
    if (s_sh("ip netns add %s", probe) != 0) return "ip netns add is not permitted here";
    s_sh("ip netns del %s", probe);
    return NULL;
}

static void s_need_netns(void) {
    if (!zmq_has("curve")) cr_skip_test("libzmq has no CURVE support");
    const char *why = s_netns_unavailable();
    if (why) cr_skip_test("%s", why);
}

static void s_make_host(int i) {
    host *h = &s_hosts[i];
    int k = h->subnet = s_claim_subnet();
    snprintf(h->ns, sizeof h->ns, "colint-%d-%d", (int)getpid(), i);
    snprintf(h->veth_ours, sizeof h->veth_ours, "cnt%d%c", (int)(getpid() % 100000), 'a' + i);
    snprintf(h->veth_its, sizeof h->veth_its, "cnw%d%c", (int)(getpid() % 100000), 'a' + i);
    snprintf(h->addr, sizeof h->addr, "10.201.%d.2", k);
    s_n_made = i + 1;
    cr_assert_eq(s_sh("ip netns add %s", h->ns), 0, "ip netns add %s", h->ns);
    cr_assert_eq(s_sh("ip link add %s type veth peer name %s", h->veth_ours, h->veth_its), 0, "veth pair");
    cr_assert_eq(s_sh("ip link set %s netns %s", h->veth_its, h->ns), 0);
    cr_assert_eq(s_sh("ip addr add 10.201.%d.1/24 dev %s", k, h->veth_ours), 0);
    cr_assert_eq(s_sh("ip link set %s up", h->veth_ours), 0);
    cr_assert_eq(s_sh("ip -n %s addr add %s/24 dev %s", h->ns, h->addr, h->veth_its), 0);
    cr_assert_eq(s_sh("ip -n %s link set %s up", h->ns, h->veth_its), 0);
    cr_assert_eq(s_sh("ip -n %s link set lo up", h->ns), 0);
}

//  Start argv[0] (searched in PATH) with its stdout on a pipe and wait up to
//  10 s for its first line, which must say "listening on "; the text after
//  that (up to the line's end) goes to `listening`. Returns the child's pid.
static pid_t s_spawn_listening(char *const argv[], char *listening, size_t n) {
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execvp(argv[0], argv);
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
    const char *at = strstr(line, "listening on ");
    cr_assert(at, "%s did not start: '%s'", argv[0], line);
    at += strlen("listening on ");
    snprintf(listening, n, "%.*s", (int)strcspn(at, "\r\n"), at);
    return pid;
}

//  coli-worker --listen on the host's address, inside its namespace (or on
//  loopback, any port, for a host without one); waits for its "listening on".
static void s_start_worker(int i) {
    host *h = &s_hosts[i];
    char bin[1200], ep[64];
    snprintf(bin, sizeof bin, "%s/bin/coli-worker", sched_build_dir());
    if (h->ns[0])
        snprintf(ep, sizeof ep, "tcp://%s:%d", h->addr, PORT);
    else
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:*");
    char *model = (char *)sched_fixture(MODEL);
    char *in_ns[] = {"ip",   "netns",    "exec", h->ns,       bin, "--listen", ep,    "--keys",
                     s_keys, "--plugin", "cpu",  "--threads", "1", "-m",       model, NULL};
    char **argv = h->ns[0] ? in_ns : in_ns + 4;
    h->worker = s_spawn_listening(argv, h->endpoint, sizeof h->endpoint);
}

//  A fresh CURVE key directory (coli keygen) in s_keys, removed by s_cleanup.
static void s_make_keys(void) {
    snprintf(s_keys, sizeof s_keys, "/tmp/colint-keys-XXXXXX");
    cr_assert(mkdtemp(s_keys));
    char coli[1200];
    snprintf(coli, sizeof coli, "%s/bin/coli", sched_build_dir());
    cr_assert_eq(s_sh("'%s' keygen '%s'", coli, s_keys), 0, "coli keygen");
}

static void s_setup(void) {
    s_need_netns();
    s_remove_stale();
    atexit(s_cleanup);
    s_make_keys();
    for (int i = 0; i < N_HOSTS; i++) {
        s_make_host(i);
        s_start_worker(i);
    }
    sched_env_defaults();
    setenv("COLI_KEYS", s_keys, 1);
    setenv("COLI_LAYER_DEADLINE_MS", "1500", 1);
    setenv("COLI_HANG_KILL_MS", "300", 1);
    setenv("COLI_WORKER_START_MS", "1500", 1);
    setenv("COLI_RESTART_BACKOFF_MS", "50", 1);
    setenv("COLI_WORKER_MAX_FAILURES", "1000", 1); /* a partition must not retire the host */
}

static coli_model *s_load(void) {
    char devices[256];
    snprintf(devices, sizeof devices, "cpu:1,remote:tcp://%s:%d,remote:tcp://%s:%d", s_hosts[0].addr, PORT,
             s_hosts[1].addr, PORT);
    return sched_load(sched_fixture(MODEL), devices);
}

static long s_worker_long(const char *js, int id, const char *field) {
    char v[64];
    sched_worker_field(js, id, field, v, sizeof v);
    return atol(v);
}

//  Poll the stats (which drives reconnects) until worker id is up; bounded.
static int s_wait_up(coli_model *m, int id, double seconds) {
    double until = sched_now() + seconds;
    while (sched_now() < until) {
        char *js = NULL, v[32];
        cr_assert_eq(coli_model_stats_json(m, &js), 0);
        sched_worker_field(js, id, "status", v, sizeof v);
        free(js);
        if (!strcmp(v, "up")) return 1;
        usleep(50000);
    }
    return 0;
}

static void s_link_down(coli_model *m, int step, void *user) {
    (void)m;
    if (step == 2) cr_assert_eq(s_sh("ip link set %s down", s_hosts[*(int *)user].veth_ours), 0);
}

Test(scheduler_netns, partitioned_host_falls_back_and_rejoins, .timeout = 240) {
    s_setup();
    gen_result ref, cut, back;
    sched_generate(sched_fixture(MODEL), "inproc", NULL, NULL, &ref);
    coli_model *m = s_load();
    cr_assert(s_wait_up(m, 1, 20) && s_wait_up(m, 2, 20), "remote hosts not up at start");
    int victim = 0;
    sched_generate_on(m, "a host partitioned", s_link_down, &victim, &cut);
    sched_assert_same(&ref, &cut, "a host partitioned mid-run");
    cr_expect_gt(sched_fallbacks(cut.stats, "remote:0", "timeout") + sched_fallbacks(cut.stats, "remote:0", "crash"), 0,
                 "the partitioned host's experts did not fall back: %s", cut.stats);
    long batches_before = s_worker_long(cut.stats, 1, "batches");
    cr_assert_eq(s_sh("ip link set %s up", s_hosts[0].veth_ours), 0);
    cr_expect(s_wait_up(m, 1, 60), "the host did not rejoin after the link came back");
    sched_generate_on(m, "after the partition", NULL, NULL, &back);
    sched_assert_same(&ref, &back, "after the partition");
    cr_expect_gt(s_worker_long(back.stats, 1, "batches"), batches_before, "the rejoined host got no batches: %s",
                 back.stats);
    cr_expect_gt(s_worker_long(back.stats, 2, "batches"), 0, "the other host did no work");
    coli_model_free(&m);
    gen_free(&ref);
    gen_free(&cut);
    gen_free(&back);
    s_cleanup();
}

static void s_kill_host(coli_model *m, int step, void *user) {
    (void)m;
    host *h = &s_hosts[*(int *)user];
    if (step != 2 || h->worker <= 0) return;
    kill(h->worker, SIGKILL);
    waitpid(h->worker, NULL, 0);
    h->worker = 0;
}

Test(scheduler_netns, worker_host_killed_and_restarted, .timeout = 240) {
    s_setup();
    gen_result ref, cut, back;
    sched_generate(sched_fixture(MODEL), "inproc", NULL, NULL, &ref);
    coli_model *m = s_load();
    cr_assert(s_wait_up(m, 1, 20) && s_wait_up(m, 2, 20), "remote hosts not up at start");
    int victim = 1;
    sched_generate_on(m, "a host killed", s_kill_host, &victim, &cut);
    sched_assert_same(&ref, &cut, "a worker host killed mid-run");
    cr_expect_eq(sched_fallbacks(cut.stats, "remote:1", "crash"), 1, "%s", cut.stats);
    long batches_before = s_worker_long(cut.stats, 2, "batches");
    s_start_worker(1);
    cr_expect(s_wait_up(m, 2, 60), "the restarted host did not come back");
    sched_generate_on(m, "after the restart", NULL, NULL, &back);
    sched_assert_same(&ref, &back, "after the host restarted");
    cr_expect_gt(s_worker_long(back.stats, 2, "batches"), batches_before, "the restarted host got no batches");
    coli_model_free(&m);
    gen_free(&ref);
    gen_free(&cut);
    gen_free(&back);
    s_cleanup();
}

/* ---- slow link ------------------------------------------------------------ */

//  The slow link's proxy script, tools/slowlink/slowlink.py of the tree the
//  build directory is in; skips when it or /usr/bin/python3 is missing.
static void s_slowlink_script(char *out, size_t n) {
    if (access("/usr/bin/python3", X_OK) != 0) cr_skip_test("/usr/bin/python3 is missing (the slow-link proxy)");
    snprintf(out, n, "%s/../tools/slowlink/slowlink.py", sched_build_dir());
    if (access(out, R_OK) != 0) cr_skip_test("%s not found (a build directory outside the source tree)", out);
}

//  One worker host behind a slow link of delay_ms each way: in a network
//  namespace of its own when this process can make one, else on loopback
//  (said on stderr, with the reason); the proxy listens on 127.0.0.1.
static void s_setup_slow(int delay_ms, int deadline_ms) {
    if (!zmq_has("curve")) cr_skip_test("libzmq has no CURVE support");
    char script[1200];
    s_slowlink_script(script, sizeof script);
    const char *why = s_netns_unavailable();
    if (!why) s_remove_stale();
    atexit(s_cleanup);
    s_make_keys();
    host *h = &s_hosts[0];
    if (why) {
        fprintf(stderr, "slow link on loopback: %s\n", why);
        memset(h, 0, sizeof *h);
        s_n_made = 1;
    } else {
        s_make_host(0);
    }
    s_start_worker(0);
    const char *to = strncmp(h->endpoint, "tcp://", 6) ? h->endpoint : h->endpoint + 6;
    char delay[32], listening[64];
    snprintf(delay, sizeof delay, "%d", delay_ms);
    char *argv[] = {"/usr/bin/python3", script,       "--listen", "127.0.0.1:0", "--to",
                    (char *)to,         "--delay-ms", delay,      NULL};
    h->proxy = s_spawn_listening(argv, listening, sizeof listening);
    snprintf(h->proxy_endpoint, sizeof h->proxy_endpoint, "tcp://%s", listening);
    char deadline[32];
    snprintf(deadline, sizeof deadline, "%d", deadline_ms);
    sched_env_defaults();
    setenv("COLI_KEYS", s_keys, 1);
    setenv("COLI_LAYER_DEADLINE_MS", deadline, 1);
    setenv("COLI_HANG_KILL_MS", "60000", 1);    /* a slow link is late, not hung: keep the connection */
    setenv("COLI_WORKER_START_MS", "60000", 1); /* CURVE's handshake takes several delayed round trips */
    setenv("COLI_WORKER_MAX_FAILURES", "1000", 1);
}

//  The model with its experts on the slow host only (worker 0, through the proxy).
static coli_model *s_load_slow(void) {
    char devices[128];
    snprintf(devices, sizeof devices, "remote:%s", s_hosts[0].proxy_endpoint);
    return sched_load(sched_fixture(MODEL), devices);
}

static double s_json_double(const char *js, const char *name) {
    char key[96];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *p = strstr(js, key);
    cr_assert(p, "stats JSON has no %s: %s", name, js);
    return strtod(p + strlen(key), NULL);
}

#define SLOW_DELAY_MS 40

Test(scheduler_netns, slow_link_shows_in_dispatch_latency, .timeout = 240) {
    gen_result ref, slow;
    sched_generate(sched_fixture(MODEL), "inproc", NULL, NULL, &ref);
    s_setup_slow(SLOW_DELAY_MS, 5000);
    coli_model *m = s_load_slow();
    cr_assert(s_wait_up(m, 0, 60), "the host behind the slow link is not up");
    sched_generate_on(m, "over a slow link", NULL, NULL, &slow);
    sched_assert_same(&ref, &slow, "over a slow link");
    char v[64];
    sched_worker_field(slow.stats, 0, "batch_latency_p50_ms", v, sizeof v);
    cr_expect_gt(s_worker_long(slow.stats, 0, "batches"), 0, "no batch went over the slow link: %s", slow.stats);
    cr_expect_geq(atof(v), 2.0 * SLOW_DELAY_MS, "worker dispatch p50 %s ms < 2 x %d ms: %s", v, SLOW_DELAY_MS,
                  slow.stats);
    cr_expect_geq(s_json_double(slow.stats, "dispatch_latency_p50_ms"), 2.0 * SLOW_DELAY_MS, "%s", slow.stats);
    coli_model_free(&m);
    gen_free(&ref);
    gen_free(&slow);
    s_cleanup();
}

Test(scheduler_netns, link_slower_than_deadline_falls_back, .timeout = 240) {
    gen_result ref, slow;
    sched_generate(sched_fixture(MODEL), "inproc", NULL, NULL, &ref);
    const int deadline_ms = 200, delay_ms = 500; /* a round trip takes 1 s: past the deadline */
    s_setup_slow(delay_ms, deadline_ms);
    coli_model *m = s_load_slow();
    cr_assert(s_wait_up(m, 0, 90), "the host behind the slow link is not up");
    sched_generate_on(m, "over a link slower than the deadline", NULL, NULL, &slow);
    sched_assert_same(&ref, &slow, "over a link slower than the deadline");
    cr_expect_gt(sched_fallbacks(slow.stats, "remote:0", "timeout"), 0, "no timeout counted: %s", slow.stats);
    cr_expect_gt(sched_field(slow.stats, "inproc_rows"), 0, "no row fell back: %s", slow.stats);
    coli_model_free(&m);
    gen_free(&ref);
    gen_free(&slow);
    s_cleanup();
}
