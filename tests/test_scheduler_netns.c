/*
 * test_scheduler_netns.c - remote workers on hosts of their own: each worker
 * runs in a Linux network namespace made here, reached over a veth pair with
 * private addresses (10.201.K.1 on our side, 10.201.K.2 on its side) that
 * exist only for this test; nothing leaves the machine. Then:
 *   - a link goes down mid-run: that host's experts fall back, the output is
 *     bit-identical to --inproc, and the host rejoins when the link is back;
 *   - a worker host's process is SIGKILLed and restarted on the same address:
 *     same output meanwhile, and it serves again.
 * Needs root and `ip netns` (iproute2); skips with the reason otherwise.
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
    char ns[32], veth_ours[16], veth_its[16], addr[32];
    pid_t worker;
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

static void s_cleanup(void) {
    for (int i = 0; i < s_n_made; i++) {
        if (s_hosts[i].worker > 0) {
            kill(s_hosts[i].worker, SIGKILL);
            waitpid(s_hosts[i].worker, NULL, 0);
            s_hosts[i].worker = 0;
        }
        s_sh("ip link del %s", s_hosts[i].veth_ours); /* takes its peer along */
        s_sh("ip netns del %s", s_hosts[i].ns);
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

static void s_need_netns(void) {
    if (geteuid() != 0) cr_skip_test("network namespaces need root (ip netns add); not root here");
    if (s_sh("ip -V") != 0) cr_skip_test("iproute2's ip is not installed");
    if (!zmq_has("curve")) cr_skip_test("libzmq has no CURVE support");
    char probe[32];
    snprintf(probe, sizeof probe, "colint-%d-probe", (int)getpid());
    if (s_sh("ip netns add %s", probe) != 0) cr_skip_test("ip netns add is not permitted here");
    s_sh("ip netns del %s", probe);
}

static void s_make_host(int i) {
    host *h = &s_hosts[i];
    int k = (int)(getpid() % 100) * 2 + i + 1; /* a subnet of this run */
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

//  coli-worker --listen on the host's address, inside its namespace; waits
//  for its "listening on" line.
static void s_start_worker(int i) {
    host *h = &s_hosts[i];
    char bin[1200], ep[64];
    snprintf(bin, sizeof bin, "%s/bin/coli-worker", sched_build_dir());
    snprintf(ep, sizeof ep, "tcp://%s:%d", h->addr, PORT);
    const char *model = sched_fixture(MODEL);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    h->worker = fork();
    cr_assert_geq(h->worker, 0);
    if (h->worker == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execlp("ip", "ip", "netns", "exec", h->ns, bin, "--listen", ep, "--keys", s_keys, "--plugin", "cpu",
               "--threads", "1", "-m", model, (char *)NULL);
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
    cr_assert(strstr(line, "listening on"), "worker in %s did not start: '%s'", h->ns, line);
}

static void s_setup(void) {
    s_need_netns();
    s_remove_stale();
    atexit(s_cleanup);
    snprintf(s_keys, sizeof s_keys, "/tmp/colint-keys-XXXXXX");
    cr_assert(mkdtemp(s_keys));
    char coli[1200];
    snprintf(coli, sizeof coli, "%s/bin/coli", sched_build_dir());
    cr_assert_eq(s_sh("'%s' keygen '%s'", coli, s_keys), 0, "coli keygen");
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
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = devices;
    mp.n_threads = 1;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(sched_fixture(MODEL), &mp, &m), 0, "load (%s): %s", devices, coli_last_error());
    return m;
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
