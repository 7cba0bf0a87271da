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
#include "core/error.h"

int sup_find_worker_bin(const coli_settings *set, char *out, size_t cap) {
    if (set->worker_bin[0]) {
        if (access(set->worker_bin, X_OK) != 0)
            return coli_fail(COLI_EIO, "worker program '%s' (worker_path or COLI_WORKER): not an executable file",
                             set->worker_bin);
        snprintf(out, cap, "%s", set->worker_bin);
        return 0;
    }
    char exe[PATH_MAX];
    int have_exe = coli_exe_dir(exe, sizeof exe) == 0;
    if (have_exe) {
        const char *rel[] = {"coli-worker", "../bin/coli-worker"};
        for (int i = 0; i < 2; i++) {
            snprintf(out, cap, "%.4000s/%s", exe, rel[i]);
            if (access(out, X_OK) == 0) return 0;
        }
    }
    const char *build = set->build_dir[0] ? set->build_dir : "build";
    snprintf(out, cap, "%.4000s/bin/coli-worker", build);
    if (access(out, X_OK) == 0) return 0;
    return coli_fail(COLI_EIO,
                     "worker program coli-worker not found next to %s nor in %s/bin "
                     "(set COLI_WORKER)",
                     have_exe ? exe : "this program", build);
}

// ---------------------------------------------------------------------------
//  A fresh ring for this generation (the old process is gone, so is its ring);
//  without one the worker is served over ZeroMQ alone.
static void s_make_ring(sched *s, worker_link *w, char *arg, size_t n) {
    ring_close(&w->shm.ring);
    if (!s->lim.use_rings) return;
    if (ring_create(&w->shm.ring, w->proc.gen, s->lim.ring_rows, s->model.n_embd) != 0) {
        if (s->verbose)
            fprintf(stderr, "colibri: worker %d: %s; using ZeroMQ for its data\n", w->id, coli_last_error());
        return;
    }
    snprintf(arg, n, "%d,%d,%d", w->shm.ring.fd, w->shm.ring.bell[RING_REQ], w->shm.ring.bell[RING_REP]);
}

int sup_spawn(sched *s, worker_link *w) {
    if (w->dev.endpoint[0]) /* a remote worker: (re)connect, there is no process of ours */
        return remote_connect(s, w);
    char id[16], gen[16], dev[16], thr[16], budget[32], ppid[16], hb[24];
    snprintf(hb, sizeof hb, "%llu", (unsigned long long)(s->lim.hb_ns / 1000000ULL));
    snprintf(id, sizeof id, "%d", w->id);
    snprintf(gen, sizeof gen, "%u", w->proc.gen);
    snprintf(dev, sizeof dev, "%d", w->is_cpu ? 0 : w->dev.index); /* cpu:N names the worker, not a device */
    snprintf(thr, sizeof thr, "%d", w->proc.n_threads);
    snprintf(budget, sizeof budget, "%llu", (unsigned long long)w->dev.budget);
    pid_t parent = getpid();
    snprintf(ppid, sizeof ppid, "%d", (int)parent);
    char ring[64] = "";
    s_make_ring(s, w, ring, sizeof ring);
    char lifeline[16], id_fd[16];
    snprintf(lifeline, sizeof lifeline, "%d", s->net.lifeline[0]);
    int secret_fd = -1; /* the routing id with its secret, for this child alone (worker_identity.c) */
    if (ident_new_secret(w, &secret_fd) != 0) return COLI_EIO;
    snprintf(id_fd, sizeof id_fd, "%d", secret_fd);
    char *argv[] = {s->net.worker_bin,
                    "--connect",
                    s->net.endpoint,
                    "--lifeline",
                    lifeline,
                    "--id",
                    id,
                    "--gen",
                    gen,
                    "--plugin",
                    w->dev.plugin,
                    "--device",
                    dev,
                    "--threads",
                    thr,
                    "--budget",
                    budget,
                    "--parent-pid",
                    ppid,
                    "--heartbeat-ms",
                    hb,
                    "--id-fd",
                    id_fd,
                    ring[0] ? "--ring" : NULL,
                    ring,
                    NULL};
    /* the settings the worker reads itself, as this load has them (--xdna travels by params) */
    char **env = coli_settings_worker_env(&s->set);
    pid_t pid = env ? fork() : -1;
    if (pid < 0) {
        int e = errno;
        close(secret_fd);
        free(env);
        return env ? coli_fail(COLI_EIO, "worker %d: fork: %s", w->id, strerror(e))
                   : coli_fail(COLI_ENOMEM, "worker %d: out of memory", w->id);
    }
    if (pid == 0) {
        /* Only async-signal-safe calls between fork and exec. */
        fcntl(s->net.lifeline[0], F_SETFD, 0); /* the read end survives exec; the write end does not */
        fcntl(secret_fd, F_SETFD, 0);
        if (w->shm.ring.base) /* this child alone inherits its ring */
            for (int i = 0; i < 3; i++) fcntl(i == 0 ? w->shm.ring.fd : w->shm.ring.bell[i - 1], F_SETFD, 0);
        execve(argv[0], argv, env);
        _exit(127);
    }
    free(env);
    close(secret_fd);
    w->proc.pid = pid;
    w->proc.pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (w->proc.pidfd < 0) w->proc.pidfd = -1;
    w->proc.exit_seen_ns = 0;
    link_starting(w);
    return 0;
}

/* Collect the exit status of w's process if it has ended. 1 = it has. */
static int s_reap(worker_link *w, int block) {
    if (w->proc.pid <= 0) return 1;
    int st;
    pid_t r = waitpid(w->proc.pid, &st, block ? 0 : WNOHANG);
    if (r == 0) return 0;
    /* r == pid, or ECHILD when someone else reaped it (SIGCHLD ignored). */
    w->proc.pid = 0;
    if (w->proc.pidfd >= 0) close(w->proc.pidfd);
    w->proc.pidfd = -1;
    return 1;
}

void sup_kill(sched *s, worker_link *w) {
    (void)s;
    remote_close(w);
    if (w->proc.pid > 0) {
        kill(w->proc.pid, SIGKILL);
        s_reap(w, 1);
    }
}

/* Remember a failure; 1 if the worker has now failed too often to restart. */
static int s_too_many_failures(sched *s, worker_link *w, uint64_t now) {
    if (w->proc.n_fail == SCHED_FAIL_TIMES) {
        memmove(w->proc.fail_ns, w->proc.fail_ns + 1, (SCHED_FAIL_TIMES - 1) * sizeof w->proc.fail_ns[0]);
        w->proc.n_fail--;
    }
    w->proc.fail_ns[w->proc.n_fail++] = now;
    int recent = 0;
    for (int i = 0; i < w->proc.n_fail; i++) recent += now - w->proc.fail_ns[i] <= s->lim.fail_window_ns;
    return recent > s->lim.max_failures;
}

/* Failed too often: down for a while, then one more try (half-open, like a
 * circuit breaker). The wait doubles with each failed trial, up to 16 times
 * the first; a trial batch that succeeds ends the probation (sup_batch_ok).
 * With COLI_WORKER_REPROBE_MS=0 the worker stays down for good. */
static void s_put_on_probation(sched *s, worker_link *w, uint64_t now) {
    if (!s->lim.reprobe_ns) {
        w->proc.restart_limited = 1;
        link_set_state(w, LINK_DOWN, "failed too often; stays down");
        if (s->verbose)
            fprintf(stderr, "colibri: worker %d (%s) failed %d times within %.0f s; it stays down\n", w->id, w->device,
                    w->proc.n_fail, (double)s->lim.fail_window_ns / 1e9);
        return;
    }
    int shift = w->proc.probation < 4 ? w->proc.probation : 4;
    uint64_t wait = s->lim.reprobe_ns << shift;
    w->proc.probation++;
    w->proc.restart_at_ns = now + wait;
    char why[128];
    snprintf(why, sizeof why, "failed too often; tried again in %.1f s", (double)wait / 1e9);
    link_set_state(w, LINK_DOWN, why);
    if (s->verbose) fprintf(stderr, "colibri: worker %d (%s) %s\n", w->id, w->device, why);
}

void sup_batch_ok(sched *s, worker_link *w) {
    if (!w->proc.probation) return;
    if (s->verbose)
        fprintf(stderr, "colibri: worker %d (%s) passed its trial batch; back in service\n", w->id, w->device);
    w->proc.probation = 0;
    w->proc.n_fail = 0;
}

void sup_worker_lost(sched *s, worker_link *w, const char *reason, int count_it) {
    link_state was = w->state;
    /* a remote reconnect that gets no answer: the worker was counted when it left */
    if (w->tcp.on && was == LINK_STARTING && w->proc.gen > 0 && !w->place.hello_ok) count_it = 0;
    if (count_it && (was == LINK_UP || was == LINK_STARTING || was == LINK_PLACING)) stats_fallback(s, w, reason);
    if (w->req.id) sched_rows_lost(s, w);
    sup_kill(s, w);
    if (was == LINK_FAILED || was == LINK_QUARANTINED) return; /* permanent states stay */
    uint64_t now = coli_now_ns();
    int too_many = s_too_many_failures(s, w, now);
    if (too_many || w->proc.probation) { /* a failed trial counts as failing too often again */
        s_put_on_probation(s, w, now);
        host_on_lost(s, w);
        return;
    }
    uint64_t backoff = s->lim.backoff_ns;
    for (int i = 1; i < w->proc.n_fail && backoff < s->lim.backoff_max_ns; i++) backoff *= 2;
    if (backoff > s->lim.backoff_max_ns) backoff = s->lim.backoff_max_ns;
    w->proc.restart_at_ns = now + backoff;
    link_set_state(w, LINK_DOWN, reason);
    host_on_lost(s, w); /* a remote host's experts go where there is room meanwhile */
}

// ---------------------------------------------------------------------------
void sup_tick(sched *s) {
    uint64_t now = coli_now_ns();
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        if (w->proc.pid > 0 && s_reap(w, 0)) {
            if (w->state == LINK_STARTING && !w->place.hello_ok) {
                /* A worker whose plugin failed says so and exits; its hello
                 * may still be on the way. Judge it a little later. */
                w->proc.exit_seen_ns = now;
                continue;
            }
            if (w->state != LINK_DOWN) sup_worker_lost(s, w, "crash", 1);
            continue;
        }
        if (w->proc.exit_seen_ns && (w->state != LINK_STARTING || now - w->proc.exit_seen_ns > 200000000ULL)) {
            w->proc.exit_seen_ns = 0;
            if (w->state == LINK_STARTING) sup_worker_lost(s, w, "crash", 1);
            continue;
        }
        if (w->state == LINK_UP && !w->req.id && s->lim.hb_miss &&
            now - w->last_seen_ns > s->lim.hb_ns * s->lim.hb_miss) {
            /* idle and silent: its main loop is stuck (a batch in flight is the deadline's job) */
            if (s->verbose)
                fprintf(stderr, "colibri: worker %d (%s) missed %llu heartbeats\n", w->id, w->device,
                        (unsigned long long)s->lim.hb_miss);
            sup_worker_lost(s, w, "heartbeat", 1);
            continue;
        }
        if (w->state == LINK_HUNG && now - w->state_since_ns > s->lim.hang_kill_ns) {
            sup_worker_lost(s, w, "timeout", 0); /* counted when it missed the deadline */
            continue;
        }
        if ((w->state == LINK_STARTING || w->state == LINK_PLACING) && now - w->state_since_ns > s->lim.start_ns) {
            sup_worker_lost(s, w, "start_timeout", 1);
            continue;
        }
        if (w->state == LINK_DOWN && !w->proc.restart_limited && w->proc.pid == 0 && now >= w->proc.restart_at_ns) {
            w->proc.gen++;
            w->proc.restarts++;
            if (sup_spawn(s, w) != 0) {
                w->proc.restart_limited = 1;
                link_set_state(w, LINK_DOWN, coli_last_error());
            }
        }
    }
}

/* Ask every worker to stop, give them a moment, then SIGKILL the rest. */
void sup_shutdown_all(sched *s) {
    for (int i = 0; i < s->n_w; i++) {
        worker_link *w = &s->w[i];
        if (w->proc.pid <= 0) continue;
        Coli__Shutdown sd = COLI__SHUTDOWN__INIT;
        sd.reason = "coordinator exits";
        Coli__Envelope env = COLI__ENVELOPE__INIT;
        env.body_case = COLI__ENVELOPE__BODY_SHUTDOWN;
        env.shutdown = &sd;
        wire_send(s->net.router, w->proc.routing_id, w->proc.routing_len, &env, NULL, 0, ZMQ_DONTWAIT);
    }
    uint64_t until = coli_now_ns() + 500000000ULL;
    for (int left = 1; left && coli_now_ns() < until;) {
        left = 0;
        for (int i = 0; i < s->n_w; i++)
            if (s->w[i].proc.pid > 0 && !s_reap(&s->w[i], 0)) left = 1;
        if (left) usleep(2000);
    }
    for (int i = 0; i < s->n_w; i++) sup_kill(s, &s->w[i]);
}
