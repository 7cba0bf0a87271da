/*
 * worker_main.c - coli-worker: the per-device worker process.
 *
 *   coli-worker --connect ipc:///tmp/coli-XXXX/coord --id 0 --plugin cpu \
 *               [--device 0] [--budget BYTES] [--threads N] [--gen G]
 *               [--parent-pid PID] [--lifeline FD] [--plugin-dir DIR] [--heartbeat-ms MS]
 *   coli-worker --probe NAME [--plugin-dir DIR]
 *   coli-worker --listen tcp://ADDR:PORT --keys DIR --plugin NAME [-m MODEL] ...
 *               (a remote worker: worker_remote.c)
 *
 * --probe loads plugin NAME, asks it how many devices there are and prints
 * one line {"plugin":"cuda","devices":N,"reason":"..."} (exit 0; a plugin
 * that does not load is 0 devices with the loader's reason). The coordinator
 * runs it in a child for --devices auto, so a driver that crashes in its
 * probe takes only this process down.
 *
 * Local workers are started by the coordinator (coordinator/sched/supervisor.c),
 * which passes --parent-pid and --lifeline: the read end of a pipe whose
 * write end only the coordinator process holds. The main loop polls it and
 * exits at EOF (the coordinator ended, however), and checks getppid() every
 * heartbeat as well. Both are tied to the coordinator process, not to the
 * thread that forked the worker (as PR_SET_PDEATHSIG would be).
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "workers/worker.h"

static void s_usage(void) {
    fprintf(stderr, "usage: coli-worker (--connect EP | --listen EP) --plugin NAME [--device I]\n"
                    "       [--id N] [--gen G] [--budget BYTES] [--threads N]\n"
                    "       [--parent-pid PID] [--lifeline FD] [--plugin-dir DIR] [--heartbeat-ms MS]\n"
                    "       [--id-fd FD] [--ring FD,BELL_REQ,BELL_REP]   (given by the coordinator)\n"
                    "       --listen tcp://ADDR:PORT --keys DIR [-m MODEL] [--takeover]   (a remote worker;\n"
                    "       --takeover: a coordinator that greets takes the worker from the one served)\n"
                    "       coli-worker --probe NAME [--plugin-dir DIR]\n");
}

/* Integer option value, or -1 (with a message) when it is not a number. */
static int s_num(const char *opt, const char *v, long long lo, long long *out) {
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || errno || *end || x < lo)
        return coli_fail(COLI_EINVAL, "coli-worker: %s: bad value '%s'", opt, v ? v : "");
    *out = x;
    return 0;
}

int worker_parse_args(int argc, char **argv, worker_args *a) {
    memset(a, 0, sizeof *a);
    a->heartbeat_ms = 200;
    a->lifeline_fd = -1;
    a->id_fd = -1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x = 0;
        int rc = 0;
        if (!strcmp(o, "--connect"))
            a->connect = v;
        else if (!strcmp(o, "--listen"))
            a->listen = v;
        else if (!strcmp(o, "--plugin"))
            a->plugin = v;
        else if (!strcmp(o, "--plugin-dir"))
            a->plugin_dir = v;
        else if (!strcmp(o, "--ring"))
            a->ring = v;
        else if (!strcmp(o, "--keys"))
            a->keys = v;
        else if (!strcmp(o, "-m") || !strcmp(o, "--model"))
            a->model_path = v;
        else if (!strcmp(o, "--probe"))
            a->probe = a->plugin = v;
        else if (!strcmp(o, "--takeover")) {
            a->takeover = 1;
            continue;
        } /* a flag: no value */
        else if (!strcmp(o, "--device")) {
            rc = s_num(o, v, 0, &x);
            a->device_index = (int)x;
        } else if (!strcmp(o, "--id")) {
            rc = s_num(o, v, 0, &x);
            a->worker_id = (int)x;
        } else if (!strcmp(o, "--gen")) {
            rc = s_num(o, v, 0, &x);
            a->generation = (unsigned)x;
        } else if (!strcmp(o, "--threads")) {
            rc = s_num(o, v, 0, &x);
            a->n_threads = (int)x;
        } else if (!strcmp(o, "--budget")) {
            rc = s_num(o, v, 0, &x);
            a->budget = (uint64_t)x;
        } else if (!strcmp(o, "--parent-pid")) {
            rc = s_num(o, v, 1, &x);
            a->parent_pid = (int)x;
        } else if (!strcmp(o, "--lifeline")) {
            rc = s_num(o, v, 0, &x);
            a->lifeline_fd = (int)x;
        } else if (!strcmp(o, "--id-fd")) {
            rc = s_num(o, v, 0, &x);
            a->id_fd = (int)x;
        } else if (!strcmp(o, "--heartbeat-ms")) {
            rc = s_num(o, v, 10, &x);
            a->heartbeat_ms = (int)x;
        } else
            return coli_fail(COLI_EINVAL, "coli-worker: unknown option '%s'", o);
        if (rc != 0) return rc;
        if (!v) return coli_fail(COLI_EINVAL, "coli-worker: %s needs a value", o);
        i++;
    }
    if (a->probe) return 0;
    if (!a->connect == !a->listen)
        return coli_fail(COLI_EINVAL, "coli-worker: give exactly one of --connect and --listen");
    if (!a->plugin) return coli_fail(COLI_EINVAL, "coli-worker: --plugin is required");
    return 0;
}

// ---------------------------------------------------------------------------
//  <dir of this executable>/../lib, where the Makefile puts the plugins.
static void s_default_plugin_dir(char *out, size_t n) {
    char exe[PATH_MAX];
    if (coli_exe_dir(exe, sizeof exe) != 0)
        snprintf(out, n, "lib");
    else
        snprintf(out, n, "%.4000s/../lib", exe);
}

int worker_load_plugin(worker *w, char *why, size_t why_len) {
    const char *name = w->a.plugin;
    if (worker_fault_fail_load(w)) {
        snprintf(why, why_len, "plugin '%s': init failed: fault injection fail-load", name);
        return COLI_EDEVICE;
    }
    char dir[PATH_MAX], path[PATH_MAX + 64];
    if (w->a.plugin_dir)
        snprintf(dir, sizeof dir, "%s", w->a.plugin_dir);
    else if (w->set.plugin_dir[0])
        snprintf(dir, sizeof dir, "%s", w->set.plugin_dir);
    else
        s_default_plugin_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/libcoli-%s.so", dir, name);
    w->device.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!w->device.dl) {
        const char *e = dlerror();
        const char *base = e ? strstr(e, "libcoli-") : NULL; /* drop the directory */
        snprintf(why, why_len, "plugin '%s': %s", name, base ? base : (e ? e : "dlopen failed"));
        return COLI_EDEVICE;
    }
    moe_plugin_get_fn get = (moe_plugin_get_fn)dlsym(w->device.dl, MOE_PLUGIN_SYMBOL);
    if (!get) {
        snprintf(why, why_len, "plugin '%s': libcoli-%s.so has no symbol %s", name, name, MOE_PLUGIN_SYMBOL);
        return COLI_EDEVICE;
    }
    const struct moe_plugin *p = get();
    if (!p || p->abi_major != MOE_PLUGIN_ABI_MAJOR) {
        snprintf(why, why_len, "plugin '%s': ABI version %u.%u, this worker speaks %d.%d", name, p ? p->abi_major : 0,
                 p ? p->abi_minor : 0, MOE_PLUGIN_ABI_MAJOR, MOE_PLUGIN_ABI_MINOR);
        return COLI_EDEVICE;
    }
    if (p->struct_size < offsetof(struct moe_plugin, close) + sizeof p->close || !p->open || !p->get_caps ||
        !p->load_expert || !p->run || !p->close) {
        snprintf(why, why_len, "plugin '%s': function table incomplete", name);
        return COLI_EDEVICE;
    }
    w->device.plugin = p;
    return 0;
}

/* probe + open + caps; the reason lands in why. */
static int s_open_device(worker *w, char *why, size_t why_len) {
    const struct moe_plugin *p = w->device.plugin;
    if (p->probe) {
        int n_dev = 0;
        char pw[256] = "";
        if (p->probe(&n_dev, pw, sizeof pw) != 0 || n_dev <= 0) {
            snprintf(why, why_len, "plugin '%s': no device: %s", p->name, pw[0] ? pw : "none found");
            return COLI_EDEVICE;
        }
        if (w->a.device_index >= n_dev) {
            snprintf(why, why_len, "plugin '%s': no device %d (%d found)", p->name, w->a.device_index, n_dev);
            return COLI_EDEVICE;
        }
    }
    moe_open_opts o = {.device_index = w->a.device_index,
                       .n_threads = w->a.n_threads,
                       .memory_budget = w->a.budget,
                       .fault = w->set.plugin_fault[0] ? w->set.plugin_fault : NULL};
    char err[256] = "";
    int rc = p->open(&o, &w->device.dev, err, sizeof err);
    if (rc != 0 || !w->device.dev) {
        snprintf(why, why_len, "plugin '%s': open device %d: %s", p->name, w->a.device_index,
                 err[0] ? err : coli_status_str(rc));
        return rc ? rc : COLI_EDEVICE;
    }
    memset(&w->device.caps, 0, sizeof w->device.caps);
    p->get_caps(w->device.dev, &w->device.caps);
    if (worker_fault_no_act(w)) w->device.caps.act_mask = 0;
    return 0;
}

int worker_reopen_device(worker *w, char *why, size_t why_len) {
    if (w->device.dev) w->device.plugin->close(&w->device.dev);
    w->device.dev = NULL;
    worker_cache_close(w); /* its copies: the plugin no longer holds them */
    worker_hold_close(w);
    return s_open_device(w, why, why_len);
}

// ---------------------------------------------------------------------------
int worker_send_hello(worker *w, int ok, const char *why) {
    Coli__Hello h = COLI__HELLO__INIT;
    char device[64];
    snprintf(device, sizeof device, "%s:%d", w->a.plugin, w->a.device_index);
    h.plugin = (char *)w->a.plugin;
    h.device = device;
    h.status = ok ? COLI__STATUS__STATUS_OK : COLI__STATUS__STATUS_FAILED;
    h.reason = (char *)(why ? why : "");
    h.abi_major = MOE_PLUGIN_ABI_MAJOR;
    h.abi_minor = MOE_PLUGIN_ABI_MINOR;
    h.dtype_mask = w->device.caps.dtype_mask;
    h.dtype_mask_hi = w->device.caps.dtype_mask_hi;
    /* 0 under the no-act fault: placement sends it none; a bit this build does
       not know is not claimed (the coordinator refuses a hello with one) */
    h.act_mask = w->device.caps.act_mask & MOE_ACT_KNOWN;
    h.max_rows = w->device.caps.max_rows;
    h.memory_total = w->device.caps.memory_total;
    h.memory_budget = w->device.caps.memory_budget;
    h.device_name = w->device.caps.device_name;
    h.pid = (int32_t)getpid();
    h.worker_id = w->link.worker_id;
    h.generation = w->link.generation;
    Coli__Envelope env = COLI__ENVELOPE__INIT;
    env.body_case = COLI__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    return worker_send(w, &env, NULL, 0, 0);
}

/* The routing id the coordinator made for this spawn (worker_identity.c
 * there): read to EOF from the inherited pipe, which is then closed; without
 * --id-fd, "w<id>.<gen>" (a coordinator that checks identities drops it). */
static int s_routing_id(worker *w, char *id, size_t cap) {
    if (w->a.id_fd < 0) return snprintf(id, cap, "w%d.%u", w->a.worker_id, w->a.generation);
    size_t n = 0;
    for (;;) {
        ssize_t r = read(w->a.id_fd, id + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
        if (n == cap - 1) break;
    }
    close(w->a.id_fd);
    w->a.id_fd = -1;
    if (n == 0 || n == cap - 1)
        return coli_fail(COLI_EINVAL, "coli-worker: --id-fd: no routing id (empty or longer than %zu bytes)", cap - 2);
    id[n] = 0;
    return (int)n;
}

static int s_connect(worker *w) {
    if (w->a.listen) return worker_connect(w, NULL, 0); /* a remote worker: CURVE server (worker_remote.c) */
    char id[64];
    int n = s_routing_id(w, id, sizeof id);
    if (n < 0) return n;
    return worker_connect(w, id, (size_t)n);
}

/* Each part is closed by the file that owns it, in this order: the device
 * first (it computes from the copies and the mapping), the library last. */
void worker_close(worker *w) {
    if (w->device.plugin && w->device.dev) w->device.plugin->close(&w->device.dev);
    worker_cache_close(w);
    worker_hold_close(w);
    worker_loop_close(w);
    worker_link_close(w);
    if (w->device.dl) dlclose(w->device.dl);
    memset(&w->device, 0, sizeof w->device);
}

// ---------------------------------------------------------------------------
//  A JSON string body on stdout: quotes, backslashes, control characters escaped.
static void s_put_json_str(const char *v) {
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
}

/* --probe NAME: the plugin's device count (0 with the reason), one JSON line. */
static int s_probe_main(worker *w) {
    char why[512] = "";
    int n_dev = 0;
    if (worker_load_plugin(w, why, sizeof why) == 0) {
        if (!w->device.plugin->probe)
            n_dev = 1; /* a plugin without probe serves the host itself */
        else if (w->device.plugin->probe(&n_dev, why, sizeof why) != 0 || n_dev < 0)
            n_dev = 0;
    }
    printf("{\"plugin\":\"");
    s_put_json_str(w->a.probe);
    printf("\",\"devices\":%d,\"reason\":\"", n_dev);
    s_put_json_str(n_dev > 0 ? "" : (why[0] ? why : "no device found"));
    printf("\"}\n");
    fflush(stdout);
    worker_close(w);
    return 0;
}

int main(int argc, char **argv) {
    static worker w;
    coli_settings_from_env(&w.set);
    if (worker_parse_args(argc, argv, &w.a) != 0) {
        fprintf(stderr, "%s\n", coli_last_error());
        s_usage();
        return 2;
    }
    if (w.a.probe) return s_probe_main(&w);
    if (w.a.parent_pid && getppid() != w.a.parent_pid) return 1; /* the coordinator is gone already */
    if (worker_faults_init(&w) != 0) {
        fprintf(stderr, "coli-worker: %s\n", coli_last_error());
        return 2;
    }
    if (s_connect(&w) != 0) {
        fprintf(stderr, "%s\n", coli_last_error());
        worker_close(&w);
        return 1;
    }
    char why[512] = "";
    int rc = worker_attach_ring(&w, why, sizeof why);
    if (rc == 0) rc = worker_load_plugin(&w, why, sizeof why);
    if (rc == 0) rc = s_open_device(&w, why, sizeof why);
    int sent = worker_send_hello(&w, rc == 0, why);
    if (sent != 0 || rc != 0) {
        /* Give the FAILED hello time to leave before the socket closes. */
        worker_link_linger(&w, 2000);
        /* a local coordinator prints the reason of a FAILED hello (once, on
         * the same terminal); say it here when it may not get there */
        if (rc != 0 && (sent != 0 || w.a.listen)) fprintf(stderr, "coli-worker %d: %s\n", w.link.worker_id, why);
        worker_close(&w);
        return 1;
    }
    rc = worker_serve(&w);
    worker_close(&w);
    return rc == 0 ? 0 : 1;
}
