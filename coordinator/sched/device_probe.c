/*
 * device_probe.c - `--devices auto` (the default): one worker per GPU found,
 * plus the default CPU workers as their fallback target; with no GPU, NPU or
 * remote worker in the list, no workers: the experts run in-process.
 *
 * Each GPU plugin that is built (libcoli-<name>.so in the plugin directory)
 * is probed in a child process, `coli-worker --probe <name>`, which prints
 * one JSON line {"plugin":..,"devices":N,"reason":..}. A driver that crashes
 * or hangs in its probe takes only that child down (killed after
 * COLI_PROBE_TIMEOUT_MS, 10 s): the coordinator goes on without that plugin
 * and says so in one line. A plugin that is not built, or finds no device, is a
 * normal machine: no message (unless verbose) and no fallback counted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coordinator/sched/sched_internal.h"
#include "core/error.h"

static const char *s_gpu_plugins[] = {"cuda", "hip"};

/* Is libcoli-<name>.so where the worker will look (COLI_PLUGIN_DIR, else
 * <worker dir>/../lib)? */
static int s_plugin_built(const coli_settings *set, const char *worker_bin, const char *name) {
    char dir[PATH_MAX], path[PATH_MAX + 64];
    if (set->plugin_dir[0]) {
        snprintf(dir, sizeof dir, "%s", set->plugin_dir);
    } else {
        snprintf(dir, sizeof dir, "%s", worker_bin);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(dir, sizeof dir, ".");
        size_t len = strlen(dir);
        snprintf(dir + len, sizeof dir - len, "/../lib");
    }
    snprintf(path, sizeof path, "%s/libcoli-%s.so", dir, name);
    return access(path, R_OK) == 0;
}

/* Read the child's stdout until EOF or the deadline; 0 = EOF seen. */
static int s_read_until(int fd, char *buf, size_t cap, uint64_t deadline) {
    size_t len = 0;
    for (;;) {
        uint64_t now = coli_now_ns();
        if (now >= deadline) return -1;
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, (int)((deadline - now) / 1000000ULL) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        ssize_t k = read(fd, buf + len, cap - 1 - len);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            buf[len] = 0;
            return 0;
        }
        len += (size_t)k;
        if (len == cap - 1) {
            buf[len] = 0;
            return 0;
        }
    }
}

/* Wait for pid until the deadline, then SIGKILL it. The wait status, or -1 when killed. */
static int s_reap_until(pid_t pid, uint64_t deadline) {
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (coli_now_ns() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(2000);
    }
    return st;
}

/* "reason":"..." of the probe line, JSON escapes undone (\uXXXX as '?'). */
static void s_json_reason(const char *line, char *out, size_t n) {
    out[0] = 0;
    const char *p = strstr(line, "\"reason\":\"");
    if (!p) return;
    size_t k = 0;
    for (p += 10; *p && *p != '"' && k + 1 < n; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            if (*p == 'u') {
                out[k++] = '?';
                p += strnlen(p, 5) > 4 ? 4 : 0;
                continue;
            }
        }
        out[k++] = *p;
    }
    out[k] = 0;
}

/* Devices `name` has here (0 with why), probed in a child process. */
static int s_probe(const coli_settings *set, const char *worker_bin, const char *name, char *why, size_t why_len) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(why, why_len, "pipe: %s", strerror(errno));
        return -1;
    }
    char *argv[] = {(char *)worker_bin, "--probe", (char *)name, NULL};
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls between fork and exec. */
        int null = open("/dev/null", O_WRONLY);
        dup2(fds[1], 1);
        if (null >= 0) dup2(null, 2);          /* a driver's chatter is not ours to print */
        syscall(SYS_close_range, 3U, ~0U, 0U); /* nothing of the application's: a hung probe holds no pipe of it */
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        snprintf(why, why_len, "fork: %s", strerror(errno));
        return -1;
    }
    uint64_t deadline = coli_now_ns() + set->probe_timeout_ms * 1000000ULL;
    char line[1024];
    int rd = s_read_until(fds[0], line, sizeof line, deadline);
    close(fds[0]);
    int st = s_reap_until(pid, rd == 0 ? deadline : 0);
    if (rd != 0 || st == -1) {
        snprintf(why, why_len, "probe did not answer within %llu ms", (unsigned long long)set->probe_timeout_ms);
        return -1;
    }
    if (WIFSIGNALED(st)) {
        snprintf(why, why_len, "probe crashed (%s)", strsignal(WTERMSIG(st)));
        return -1;
    }
    const char *d = strstr(line, "\"devices\":");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !d) {
        snprintf(why, why_len, "probe failed (exit status %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return -1;
    }
    s_json_reason(line, why, why_len);
    long count = strtol(d + 10, NULL, 10);
    return count < 0 ? 0 : (int)(count > SCHED_MAX_WORKERS ? SCHED_MAX_WORKERS : count);
}

/* The GPU workers of one "auto": one per device the built plugins find. */
static int s_expand_gpus(const coli_settings *set, const char *worker_bin, device_spec *out, int cap, int *n,
                         int verbose) {
    for (size_t g = 0; worker_bin && g < sizeof s_gpu_plugins / sizeof s_gpu_plugins[0]; g++) {
        const char *name = s_gpu_plugins[g];
        if (!s_plugin_built(set, worker_bin, name)) continue;
        char why[512] = "";
        int count = s_probe(set, worker_bin, name, why, sizeof why);
        if (count < 0)
            fprintf(stderr, "colibri: devices auto: %s: %s; no %s workers\n", name, why, name);
        else if (count == 0 && verbose)
            fprintf(stderr, "colibri: devices auto: %s: no device (%s)\n", name, why);
        for (int i = 0; i < count; i++)
            if (sched_add_device(out, cap, n, name, i, 0)) return COLI_EINVAL;
    }
    return 0;
}

/* Does the list hold a worker that is not a local CPU worker (a GPU, the
 * NPU lane, a remote host), or will --xdna add one? */
static int s_has_device_worker(const coli_settings *set, const device_spec *d, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(d[i].plugin, "cpu") != 0) return 1;
    return set->xdna != 0;
}

/* Drop the entries marked in from_auto (auto's CPU workers), keeping the order. */
static int s_drop_marked(device_spec *d, int n, const unsigned char *from_auto) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!from_auto[i]) d[m++] = d[i];
    return m;
}

/* auto's CPU workers are the fallback target of device workers. Without
 * any device worker they are dropped: on a machine without accelerators
 * the experts run in-process, measured faster than local CPU workers on a
 * 2-core machine (docs/scheduler.md, "--devices auto without accelerators"). */
static int s_expand(const coli_settings *set, const char *worker_bin, const device_spec *d, int n, device_spec *out,
                    int cap, int *m, int verbose) {
    unsigned char *from_auto = calloc((size_t)cap, 1);
    if (!from_auto) return coli_fail(COLI_ENOMEM, "devices: out of memory");
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        if (strcmp(d[i].plugin, "auto") != 0) {
            rc = *m >= cap ? coli_fail(COLI_EINVAL, "devices: more than %d workers", cap) : 0;
            if (rc == 0) out[(*m)++] = d[i];
            continue;
        }
        rc = s_expand_gpus(set, worker_bin, out, cap, m, verbose);
        for (int k = 0, c = sched_default_cpu_workers(); rc == 0 && k < c; k++)
            if ((rc = sched_add_device(out, cap, m, "cpu", 0, 0)) == 0) from_auto[*m - 1] = 1;
    }
    if (rc == 0 && !s_has_device_worker(set, out, *m)) {
        *m = s_drop_marked(out, *m, from_auto);
        if (verbose && *m == 0) fprintf(stderr, "colibri: devices auto: no GPU or NPU; the experts run in-process\n");
    }
    free(from_auto);
    return rc;
}

int sched_expand_auto(const coli_settings *set, const char *worker_bin, device_spec *d, int cap, int *n, int verbose) {
    int any = 0;
    for (int i = 0; i < *n; i++) any |= !strcmp(d[i].plugin, "auto");
    if (!any) return 0;
    device_spec *out = calloc((size_t)cap, sizeof *out);
    if (!out) return coli_fail(COLI_ENOMEM, "devices: out of memory");
    int m = 0;
    int rc = s_expand(set, worker_bin, d, *n, out, cap, &m, verbose);
    for (int i = 0, cpu = 0; rc == 0 && i < m; i++) /* cpu:N names workers: number them in order */
        if (!strcmp(out[i].plugin, "cpu")) out[i].index = cpu++;
    if (rc == 0) {
        memcpy(d, out, (size_t)m * sizeof *d);
        *n = m;
    }
    free(out);
    return rc;
}
