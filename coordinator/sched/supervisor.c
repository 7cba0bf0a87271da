/*
 * supervisor.c - start, watch, restart and stop local worker processes.
 *
 * Each worker is a child (fork + exec of coli-worker) that inherits the read
 * end of the scheduler's lifeline pipe (--lifeline FD). The write end is
 * close-on-exec and held by the coordinator process alone, so it closes only
 * when the coordinator ends (however it ends, SIGKILL included) or frees the
 * model; the worker polls the read end in its main loop and exits at EOF.
 * Unlike PR_SET_PDEATHSIG, which follows the *thread* that forked, this is
 * tied to the process: a model loaded (or a worker restarted) from a
 * short-lived thread keeps its workers. Death is noticed through a pidfd that
 * sits in the same poll set as the ZeroMQ socket (no process-wide SIGCHLD
 * handler: a library must not take the application's signal disposition),
 * or by waitpid(WNOHANG) where pidfds are missing.
 *
 * Restart: exponential back-off from COLI_RESTART_BACKOFF_MS (100 ms) up to
 * 5 s; a worker that fails COLI_WORKER_MAX_FAILURES (3) times within
 * COLI_WORKER_FAIL_WINDOW_MS (60 s) stays down.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coordinator/sched/sched_internal.h"
#include "error.h"

//  bin/coli-worker next to this program (bin/coli, tests/x -> ../bin), or COLI_WORKER.
int sup_find_worker_bin(sched *s)
{
    const char *env = getenv("COLI_WORKER");
    if (env && *env) {
        if (access(env, X_OK) != 0)
            return coli_fail(COLI_EIO, "COLI_WORKER '%s': not an executable file", env);
        snprintf(s->worker_bin, sizeof s->worker_bin, "%s", env);
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        const char *rel[] = {"coli-worker", "../bin/coli-worker"};
        for (int i = 0; i < 2; i++) {
            snprintf(s->worker_bin, sizeof s->worker_bin, "%.4000s/%s", exe, rel[i]);
            if (access(s->worker_bin, X_OK) == 0)
                return 0;
        }
    }
    const char *build = getenv("COLI_BUILD");
    snprintf(s->worker_bin, sizeof s->worker_bin, "%s/bin/coli-worker", build && *build ? build : "build");
    if (access(s->worker_bin, X_OK) == 0)
        return 0;
    return coli_fail(COLI_EIO, "worker program coli-worker not found next to %s nor in %s/bin "
                     "(set COLI_WORKER)", n > 0 ? exe : "this program", build && *build ? build : "build");
}

// ---------------------------------------------------------------------------
//  A fresh ring for this generation (the old process is gone, so is its ring);
//  without one the worker is served over ZeroMQ alone.
static void s_make_ring(sched *s, worker_link *w, char *arg, size_t n)
{
    ring_close(&w->ring);
    if (!s->use_rings)
        return;
    if (ring_create(&w->ring, w->gen, s->ring_rows, s->n_embd) != 0) {
        if (s->verbose)
            fprintf(stderr, "colibri: worker %d: %s; using ZeroMQ for its data\n", w->id, coli_last_error());
        return;
    }
    snprintf(arg, n, "%d,%d,%d", w->ring.fd, w->ring.bell[RING_REQ], w->ring.bell[RING_REP]);
}

int sup_spawn(sched *s, worker_link *w)
{
    if (w->dev.endpoint[0]) /* a remote worker: (re)connect, there is no process of ours */
        return remote_connect(s, w);
    char id[16], gen[16], dev[16], thr[16], budget[32], ppid[16], hb[24];
    snprintf(hb, sizeof hb, "%llu", (unsigned long long)(s->hb_ns / 1000000ULL));
    snprintf(id, sizeof id, "%d", w->id);
    snprintf(gen, sizeof gen, "%u", w->gen);
    snprintf(dev, sizeof dev, "%d", w->is_cpu ? 0 : w->dev.index); /* cpu:N names the worker, not a device */
    snprintf(thr, sizeof thr, "%d", w->n_threads);
    snprintf(budget, sizeof budget, "%llu", (unsigned long long)w->dev.budget);
    pid_t parent = getpid();
    snprintf(ppid, sizeof ppid, "%d", (int)parent);
    char ring[64] = "";
    s_make_ring(s, w, ring, sizeof ring);
    char lifeline[16];
    snprintf(lifeline, sizeof lifeline, "%d", s->lifeline[0]);
    char *argv[] = {s->worker_bin, "--connect", s->endpoint, "--lifeline", lifeline,
                    "--id", id, "--gen", gen, "--plugin", w->dev.plugin, "--device", dev, "--threads", thr,
                    "--budget", budget, "--parent-pid", ppid, "--heartbeat-ms", hb,
                    ring[0] ? "--ring" : NULL, ring, NULL};
    w->routing_len = (size_t)snprintf(w->routing_id, sizeof w->routing_id, "w%d.%u", w->id, w->gen);
    pid_t pid = fork();
    if (pid < 0)
        return coli_fail(COLI_EIO, "worker %d: fork: %s", w->id, strerror(errno));
    if (pid == 0) {
        /* Only async-signal-safe calls between fork and exec. */
        fcntl(s->lifeline[0], F_SETFD, 0); /* the read end survives exec; the write end does not */
        if (w->ring.base) /* this child alone inherits its ring */
            for (int i = 0; i < 3; i++)
                fcntl(i == 0 ? w->ring.fd : w->ring.bell[i - 1], F_SETFD, 0);
        execv(argv[0], argv);
        _exit(127);
    }
    w->pid = pid;
    w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (w->pidfd < 0) w->pidfd = -1;
    w->req_id = 0;
    w->hung_req_id = 0;
    w->hello_ok = 0;
    w->exit_seen_ns = 0;
    link_set_state(w, LINK_STARTING, "");
    w->last_seen_ns = coli_now_ns();
    return 0;
}

//  Collect the exit status of w's process if it has ended. 1 = it has.
static int s_reap(worker_link *w, int block)
{
    if (w->pid <= 0)
        return 1;
    int st;
    pid_t r = waitpid(w->pid, &st, block ? 0 : WNOHANG);
    if (r == 0)
        return 0;
    /* r == pid, or ECHILD when someone else reaped it (SIGCHLD ignored). */
    w->pid = 0;
    if (w->pidfd >= 0) close(w->pidfd);
    w->pidfd = -1;
    return 1;
}

void sup_kill(sched *s, worker_link *w)
{
    (void)s;
    remote_close(w);
    if (w->pid > 0) {
        kill(w->pid, SIGKILL);
        s_reap(w, 1);
    }
}

//  Remember a failure; 1 if the worker has now failed too often to restart.
static int s_too_many_failures(sched *s, worker_link *w, uint64_t now)
{
    if (w->n_fail == SCHED_FAIL_TIMES) {
        memmove(w->fail_ns, w->fail_ns + 1, (SCHED_FAIL_TIMES - 1) * sizeof w->fail_ns[0]);
        w->n_fail--;
    }
    w->fail_ns[w->n_fail++] = now;
    int recent = 0;
    for (int i = 0; i < w->n_fail; i++)
        recent += now - w->fail_ns[i] <= s->fail_window_ns;
    return recent > s->max_failures;
}

void sup_worker_lost(sched *s, worker_link *w, const char *reason, int count_it)
{
    link_state was = w->state;
    /* a remote reconnect that gets no answer: the worker was counted when it left */
    if (w->remote && was == LINK_STARTING && w->gen > 0 && !w->hello_ok)
        count_it = 0;
    if (count_it && (was == LINK_UP || was == LINK_STARTING || was == LINK_PLACING))
        stats_fallback(s, w, reason);
    if (w->req_id)
        sched_rows_lost(s, w);
    sup_kill(s, w);
    if (was == LINK_FAILED || was == LINK_QUARANTINED)
        return; /* permanent states stay */
    uint64_t now = coli_now_ns();
    if (s_too_many_failures(s, w, now)) {
        w->restart_limited = 1;
        link_set_state(w, LINK_DOWN, "failed too often; stays down");
        if (s->verbose)
            fprintf(stderr, "colibri: worker %d (%s) failed %d times within %.0f s; it stays down\n",
                    w->id, w->device, w->n_fail, (double)s->fail_window_ns / 1e9);
        return;
    }
    uint64_t backoff = s->backoff_ns;
    for (int i = 1; i < w->n_fail && backoff < s->backoff_max_ns; i++)
        backoff *= 2;
    if (backoff > s->backoff_max_ns) backoff = s->backoff_max_ns;
    w->restart_at_ns = now + backoff;
    link_set_state(w, LINK_DOWN, reason);
}

// ---------------------------------------------------------------------------
void sup_tick(sched *s)
{
    uint64_t now = coli_now_ns();
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        if (w->pid > 0 && s_reap(w, 0)) {
            if (w->state == LINK_STARTING && !w->hello_ok) {
                /* A worker whose plugin failed says so and exits; its hello
                 * may still be on the way. Judge it a little later. */
                w->exit_seen_ns = now;
                continue;
            }
            if (w->state != LINK_DOWN)
                sup_worker_lost(s, w, "crash", 1);
            continue;
        }
        if (w->exit_seen_ns && (w->state != LINK_STARTING || now - w->exit_seen_ns > 200000000ULL)) {
            w->exit_seen_ns = 0;
            if (w->state == LINK_STARTING)
                sup_worker_lost(s, w, "crash", 1);
            continue;
        }
        if (w->state == LINK_UP && !w->req_id && s->hb_miss &&
            now - w->last_seen_ns > s->hb_ns * s->hb_miss) {
            /* idle and silent: its main loop is stuck (a batch in flight is the deadline's job) */
            if (s->verbose)
                fprintf(stderr, "colibri: worker %d (%s) missed %llu heartbeats\n", w->id, w->device,
                        (unsigned long long)s->hb_miss);
            sup_worker_lost(s, w, "heartbeat", 1);
            continue;
        }
        if (w->state == LINK_HUNG && now - w->state_since_ns > s->hang_kill_ns) {
            sup_worker_lost(s, w, "timeout", 0); /* counted when it missed the deadline */
            continue;
        }
        if ((w->state == LINK_STARTING || w->state == LINK_PLACING) &&
            now - w->state_since_ns > s->start_ns) {
            sup_worker_lost(s, w, "start_timeout", 1);
            continue;
        }
        if (w->state == LINK_DOWN && !w->restart_limited && w->pid == 0 && now >= w->restart_at_ns) {
            w->gen++;
            w->restarts++;
            if (sup_spawn(s, w) != 0) {
                w->restart_limited = 1;
                link_set_state(w, LINK_DOWN, coli_last_error());
            }
        }
    }
}

//  Ask every worker to stop, give them a moment, then SIGKILL the rest.
void sup_shutdown_all(sched *s)
{
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        if (w->pid <= 0) continue;
        Coli__Shutdown sd = COLI__SHUTDOWN__INIT;
        sd.reason = "coordinator exits";
        Coli__Envelope env = COLI__ENVELOPE__INIT;
        env.body_case = COLI__ENVELOPE__BODY_SHUTDOWN;
        env.shutdown = &sd;
        wire_send(s->router, w->routing_id, w->routing_len, &env, NULL, 0, ZMQ_DONTWAIT);
    }
    uint64_t until = coli_now_ns() + 500000000ULL;
    for (int left = 1; left && coli_now_ns() < until;) {
        left = 0;
        for (int i = 0; i < s->n_w; i++)
            if (s->w[i].pid > 0 && !s_reap(&s->w[i], 0)) left = 1;
        if (left) usleep(2000);
    }
    for (int i = 0; i < s->n_w; i++)
        sup_kill(s, &s->w[i]);
}
