/*
 * placement.c - which worker holds which expert.
 *
 * --devices is a comma list: cpu:N[@T] (N cpu workers, T threads each), cpu (= cpu:1),
 * cuda:I[=BUDGET], hip:I[=BUDGET], xdna, remote:tcp://HOST:PORT[=BUDGET],
 * auto, inproc; a cpu, cuda or hip item may end in @cache=SIZE (a live
 * expert cache of SIZE bytes or P% of the experts: cache_link.c). BUDGET is bytes with
 * an optional K/M/G suffix. Without heat, placement balances expert bytes
 * across the workers of each layer, within each worker's budget; with a
 * heat file or pins, heat_place.c decides.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/sched/sched_internal.h"
#include "core/error.h"
#include "core/kernels/expert_ffn.h"
#include "plugins/plugin_abi.h"

int sched_default_cpu_workers(void) {
    /* One worker per 16 cores: more processes on one socket do not add
     * bandwidth, they only split the same threads. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)(cores / 16);
    return n < 1 ? 1 : (n > 4 ? 4 : n);
}

static int s_budget(const char *s, uint64_t *out) {
    char *end;
    double v = strtod(s, &end);
    double mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1048576.0, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1073741824.0, end++;
    if (end == s || *end || v <= 0 || v * mul > 1.8e19)
        return coli_fail(COLI_EINVAL, "devices: bad memory budget '%s' (want e.g. 8G)", s);
    *out = (uint64_t)(v * mul);
    return 0;
}

int sched_parse_budget(const char *s, uint64_t *out) { return s_budget(s, out); }

int sched_add_device(device_spec *out, int cap, int *n, const char *plugin, int index, uint64_t budget) {
    if (*n >= cap) return coli_fail(COLI_EINVAL, "devices: more than %d workers", cap);
    device_spec *d = &out[(*n)++];
    memset(d, 0, sizeof *d);
    snprintf(d->plugin, sizeof d->plugin, "%s", plugin);
    d->index = index;
    d->budget = budget;
    return 0;
}

/* The NPU lane's opt-in: when it is requested (set->xdna: COLI_XDNA a
 * non-zero integer, or coli_model_params.xdna, the CLI's --xdna) and the
 * list has no xdna entry, append xdna:0. `auto` never adds it by itself
 * (docs/xdna.md). 0 or COLI_EINVAL (list full). */
static int s_xdna_optin(const coli_settings *set, device_spec *d, int cap, int *n) {
    if (!set->xdna) return 0;
    for (int i = 0; i < *n; i++)
        if (!strcmp(d[i].plugin, "xdna")) return 0;
    return sched_add_device(d, cap, n, "xdna", 0, 0);
}

int sched_workers_of(const coli_settings *set, const char *devices, device_spec *d, int cap, sched_workers *out,
                     int verbose) {
    out->n = out->inproc = 0;
    out->worker_bin[0] = '\0';
    int rc = sched_parse_devices(devices, d, cap, &out->n, &out->inproc);
    if (rc || out->inproc) return rc;
    if (sup_find_worker_bin(set, out->worker_bin, sizeof out->worker_bin) != 0) out->worker_bin[0] = '\0';
    rc = sched_expand_auto(set, out->worker_bin[0] ? out->worker_bin : NULL, d, cap, &out->n, verbose);
    return rc ? rc : s_xdna_optin(set, d, cap, &out->n);
}

/* Index after "name:" (or 0 with no colon); -1 when not a number. */
static int s_index(const char *item, size_t name_len, const char *end_of_index) {
    if (item[name_len] != ':') return 0;
    const char *p = item + name_len + 1;
    if (p == end_of_index) return -1;
    int v = 0;
    for (; p < end_of_index; p++) {
        if (*p < '0' || *p > '9' || v > 100000) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

/* remote:tcp://HOST:PORT - a worker on another host that we connect to
 * (docs/scheduler.md, "Remote workers"); numbered remote:0, remote:1, ... */
static int s_add_remote(device_spec *out, int cap, int *n, const char *ep, uint64_t budget) {
    const char *port = strrchr(ep, ':');
    if (strncmp(ep, "tcp://", 6) || !port || port < ep + 7 || !port[1] ||
        strspn(port + 1, "0123456789") != strlen(port + 1))
        return coli_fail(COLI_EINVAL, "devices: remote endpoint '%s': want tcp://HOST:PORT", ep);
    long port_no = strlen(port + 1) > 5 ? 65536 : strtol(port + 1, NULL, 10);
    if (port_no < 1 || port_no > 65535)
        return coli_fail(COLI_EINVAL, "devices: remote endpoint '%s': port %s is not in 1..65535", ep, port + 1);
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)(port - ep - 6), ep + 6);
    struct in_addr v4;
    if (host[strspn(host, "0123456789.")] == '\0' && inet_pton(AF_INET, host, &v4) != 1)
        return coli_fail(COLI_EINVAL, "devices: remote endpoint '%s': '%s' is not an IPv4 address", ep, host);
    if (strlen(ep) >= sizeof out->endpoint)
        return coli_fail(COLI_EINVAL, "devices: remote endpoint '%s' longer than %zu characters", ep,
                         sizeof out->endpoint - 1);
    int index = 0;
    for (int i = 0; i < *n; i++) index += !strcmp(out[i].plugin, "remote");
    int rc = sched_add_device(out, cap, n, "remote", index, budget);
    if (rc == 0) snprintf(out[*n - 1].endpoint, sizeof out->endpoint, "%s", ep);
    return rc;
}

static int s_parse_device(char *item, device_spec *out, int cap, int *n, int *inproc);

/* "@cache=SIZE" cut off the end of item (NUL-terminated copy): SIZE is bytes
 * (K/M/G) or P% of the model's expert bytes. *is_cache 0 when absent. */
static int s_cache_suffix(char *item, int *is_cache, uint64_t *bytes, double *pct) {
    char *c = strstr(item, "@cache=");
    *is_cache = 0;
    if (!c) return 0;
    const char *v = c + 7;
    size_t len = strlen(v);
    if (len && v[len - 1] == '%') {
        char *end;
        double p = strtod(v, &end);
        if (end != v + len - 1 || !(p > 0 && p <= 100))
            return coli_fail(COLI_EINVAL,
                             "devices: bad cache size '%s' in '%s' (want @cache=BYTES[K|M|G] or P%% with 0 < P <= 100)",
                             v, item);
        *pct = p;
    } else if (s_budget(v, bytes) != 0) {
        return coli_fail(COLI_EINVAL,
                         "devices: bad cache size '%s' in '%s' (want @cache=BYTES[K|M|G] or P%% with 0 < P <= 100)", v,
                         item);
    }
    *c = 0;
    if (strchr(item, '=') || strncmp(item, "cpu", 3) * strncmp(item, "cuda", 4) * strncmp(item, "hip", 3) != 0) {
        *c = '@';
        return coli_fail(COLI_EINVAL, "devices: '%s': @cache goes on a cpu, cuda or hip worker without =BUDGET", item);
    }
    *is_cache = 1;
    return 0;
}

/* One item of the list (NUL-terminated copy). */
static int s_parse_item(char *item, device_spec *out, int cap, int *n, int *inproc) {
    int is_cache = 0, first = *n;
    uint64_t cache_bytes = 0;
    double cache_pct = 0;
    int rc = s_cache_suffix(item, &is_cache, &cache_bytes, &cache_pct);
    if (rc == 0) rc = s_parse_device(item, out, cap, n, inproc);
    for (int i = first; rc == 0 && is_cache && i < *n; i++) {
        out[i].cache = 1;
        out[i].budget = cache_bytes;
        out[i].cache_pct = cache_pct;
    }
    return rc;
}

/* One device item, without its @cache suffix. */
static int s_parse_device(char *item, device_spec *out, int cap, int *n, int *inproc) {
    char *eq = strchr(item, '=');
    uint64_t budget = 0;
    if (eq) {
        *eq = 0;
        if (s_budget(eq + 1, &budget) != 0) /* name the item: a list of hosts has several budgets */
            return coli_fail(COLI_EINVAL,
                             "devices: '%s=%s': bad memory budget '%s' (want bytes > 0 with K, M or G, e.g. 20G)", item,
                             eq + 1, eq + 1);
    }
    if (!strcmp(item, "inproc@ram") && eq) { /* the disk tier (disk_tier.c): its budget was checked above */
        *inproc = 1;
        return 0;
    }
    int threads = 0;
    char *at = strncmp(item, "remote:", 7) ? strchr(item, '@') : NULL;
    if (at) { /* cpu:N@T: T compute threads each */
        char *end;
        long t = strtol(at + 1, &end, 10);
        if (end == at + 1 || *end || t < 1 || t > 4096 || strncmp(item, "cpu", 3))
            return coli_fail(COLI_EINVAL, "devices: bad '@%s' in '%s' (want cpu[:N]@THREADS)", at + 1, item);
        *at = 0;
        threads = (int)t;
    }
    size_t name_len = strcspn(item, ":");
    const char *idx_end = item + strlen(item);
    if (!strcmp(item, "inproc")) {
        *inproc = 1;
        return 0;
    }
    if (!strncmp(item, "remote:", 7)) return s_add_remote(out, cap, n, item + 7, budget);
    if (!strcmp(item, "auto")) /* expanded by sched_expand_auto (device_probe.c) */
        return sched_add_device(out, cap, n, "auto", 0, 0);
    static const char *known[] = {"cpu", "cuda", "hip", "xdna"};
    int which = -1;
    for (int k = 0; k < 4; k++)
        if (strlen(known[k]) == name_len && !strncmp(item, known[k], name_len)) which = k;
    if (which < 0)
        return coli_fail(COLI_EINVAL,
                         "devices: unknown device '%s' (known: cpu[:N], cuda:I[=BUDGET], "
                         "hip:I[=BUDGET], xdna, remote:tcp://HOST:PORT[=BUDGET], auto, inproc, inproc@ram=SIZE)",
                         item);
    int v = s_index(item, name_len, idx_end);
    if (v < 0 || (which == 0 && item[name_len] == ':' && v == 0))
        return coli_fail(COLI_EINVAL, "devices: bad number in '%s'", item);
    if (which == 0) { /* cpu:N = N workers */
        int count = item[name_len] == ':' ? v : 1, base = 0;
        for (int i = 0; i < *n; i++) base += !strcmp(out[i].plugin, "cpu");
        for (int i = 0; i < count; i++) {
            if (sched_add_device(out, cap, n, "cpu", base + i, budget)) return COLI_EINVAL;
            out[*n - 1].threads = threads;
        }
        return 0;
    }
    return sched_add_device(out, cap, n, known[which], v, budget);
}

/* A device named twice: auto (each already takes every GPU), the same GPU
 * or NPU as two homes, the same remote endpoint. CPU workers are counted
 * (cpu:2,cpu:1 is three) and a cache may share a device with a home. */
static int s_check_twice(const device_spec *d, int n) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) {
            const device_spec *a = &d[i], *b = &d[j];
            if (strcmp(a->plugin, b->plugin) || !strcmp(a->plugin, "cpu") || a->cache != b->cache) continue;
            if (!strcmp(a->plugin, "auto"))
                return coli_fail(COLI_EINVAL, "devices: 'auto' named twice (one auto already takes every device)");
            if (!strcmp(a->plugin, "remote") && !strcmp(a->endpoint, b->endpoint))
                return coli_fail(COLI_EINVAL, "devices: remote:%s named twice", a->endpoint);
            if (strcmp(a->plugin, "remote") && a->index == b->index)
                return coli_fail(COLI_EINVAL, "devices: %s:%d named twice (one worker per device)", a->plugin,
                                 a->index);
        }
    return 0;
}

int sched_parse_devices(const char *devices, device_spec *out, int cap, int *n, int *inproc) {
    *n = 0;
    *inproc = 0;
    char buf[1024];
    if (!devices || !*devices)
        snprintf(buf, sizeof buf, "auto");
    else if (strlen(devices) >= sizeof buf)
        return coli_fail(COLI_EINVAL, "devices: list longer than %zu characters", sizeof buf - 1);
    else
        snprintf(buf, sizeof buf, "%s", devices);
    size_t len = strlen(buf);
    if (buf[0] == ',' || (len && buf[len - 1] == ',') || strstr(buf, ",,"))
        return coli_fail(COLI_EINVAL, "devices: '%s' has an empty item (two commas, or one at an end)", buf);
    for (char *save = NULL, *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
        int rc = s_parse_item(it, out, cap, n, inproc);
        if (rc) return rc;
    }
    if (*inproc && *n) return coli_fail(COLI_EINVAL, "devices: 'inproc' cannot be combined with workers");
    int rc = s_check_twice(out, *n);
    if (rc) return rc;
    if (!*inproc && !*n) return coli_fail(COLI_EINVAL, "devices: '%s' names no device", devices ? devices : "");
    return 0;
}

// ---------------------------------------------------------------------------
void placement_need_of(const expert_weights *ew, place_need *out) {
    out->types = 0;
    const coli_dtype t[3] = {ew->gate_type, ew->up_type, ew->down_type};
    for (int i = 0; i < 3; i++) out->types |= (unsigned)t[i] < 64 ? 1ULL << t[i] : 0;
    out->acts = ew->act == EXPERT_ACT_SILU ? 0 : 1u << ew->act;
    if (ew->gate_bias || ew->up_bias || ew->down_bias) out->acts |= MOE_ACT_BIASES;
}

int placement_fits(const place_need *need, uint64_t types, uint32_t acts) {
    return (need->types & ~types) == 0 && (need->acts & ~acts) == 0;
}

int placement_may(const placement_in *in, int w, int l) {
    return in->usable[w] && (!in->able || in->able[(size_t)w * (size_t)in->n_layer + (size_t)l]);
}

int placement_plan(const placement_in *in, int32_t *owner) {
    uint64_t *total = calloc((size_t)in->n_workers + 1, sizeof *total);
    uint64_t *layer_bytes = calloc((size_t)in->n_workers + 1, sizeof *layer_bytes);
    if (!total || !layer_bytes) {
        free(total);
        free(layer_bytes);
        return coli_fail(COLI_ENOMEM, "placement: out of memory");
    }
    for (int l = 0; l < in->n_layer; l++) {
        memset(layer_bytes, 0, (size_t)in->n_workers * sizeof *layer_bytes);
        uint64_t eb = in->expert_bytes[l];
        for (int e = 0; e < in->n_expert; e++) {
            int best = -1;
            if (eb == 0) { /* a layer without experts (dense): nothing to place */
                owner[(size_t)l * (size_t)in->n_expert + (size_t)e] = -1;
                continue;
            }
            for (int w = 0; w < in->n_workers; w++) {
                if (!placement_may(in, w, l) || (in->budget[w] && total[w] + eb > in->budget[w])) continue;
                /* fewest bytes in this layer, then fewest overall, then lowest index */
                if (best < 0 || layer_bytes[w] < layer_bytes[best] ||
                    (layer_bytes[w] == layer_bytes[best] && total[w] < total[best]))
                    best = w;
            }
            owner[(size_t)l * (size_t)in->n_expert + (size_t)e] = best;
            if (best >= 0) {
                layer_bytes[best] += eb;
                total[best] += eb;
            }
        }
    }
    free(total);
    free(layer_bytes);
    return 0;
}
