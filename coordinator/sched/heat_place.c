/*
 * heat_place.c - placement that follows the routing heat (docs/scheduler.md,
 * "Placement from heat"): pins first, then the hottest experts onto the
 * fastest device that has room, then the next device.
 *
 * Heat counts are comparable across layers (every layer routes the same
 * tokens, k each), so the order is global: with a budget that holds a
 * quarter of all experts, the fast device gets the quarter that serves the
 * most rows, wherever they are.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/sched/sched_internal.h"
#include "core/error.h"

long sched_device_speed(const device_spec *d, int threads) {
    long kind = 0;
    if (!strcmp(d->plugin, "cuda") || !strcmp(d->plugin, "hip"))
        kind = 3;
    else if (!strcmp(d->plugin, "xdna"))
        kind = 2;
    else if (!strcmp(d->plugin, "remote"))
        kind = 1;
    int t = d->threads > 0 ? d->threads : threads;
    return kind * 1000000L + (t > 0 ? t : 1);
}

/* The worker named dev: its name as `coli plan` and the stats show it
 * ("cpu:1", "cuda:0", "remote:0"), the same without the colon ("cpu1"), or
 * the bare plugin when it is the only worker of that plugin ("ram": the
 * disk tier's cache). -1 when none. */
static int s_worker_named(const device_spec *d, int n_w, const char *dev, size_t len) {
    int bare = -1, n_bare = 0;
    for (int w = 0; w < n_w; w++)
        if (strlen(d[w].plugin) == len && !strncmp(d[w].plugin, dev, len)) bare = w, n_bare++;
    if (n_bare == 1) return bare;
    for (int w = 0; w < n_w; w++) {
        char name[48], alias[48];
        int n = snprintf(name, sizeof name, "%s:%d", d[w].plugin, d[w].index);
        int a = snprintf(alias, sizeof alias, "%s%d", d[w].plugin, d[w].index);
        if (((size_t)n == len && !strncmp(name, dev, len)) || ((size_t)a == len && !strncmp(alias, dev, len))) return w;
    }
    return -1;
}

void sched_worker_names(const device_spec *d, int n_w, char *out, size_t cap) {
    size_t len = 0;
    out[0] = 0;
    for (int w = 0; w < n_w && len < cap; w++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s:%d", w ? ", " : "", d[w].plugin, d[w].index);
    if (n_w == 0) snprintf(out, cap, "none");
}

/* A number below limit (limit 0: any of up to 9 digits, the model is not known yet). */
static int s_number(const char *s, size_t len, int limit, int *out) {
    if (!len || len > 9 || strspn(s, "0123456789") < len) return -1;
    long v = strtol(s, NULL, 10);
    if (limit > 0 && v >= limit) return -1;
    *out = (int)v;
    return 0;
}

/* One "L:E=DEV" or "L:*=DEV" item (len bytes at it). */
static int s_pin_item(const char *it, size_t len, const device_spec *d, int n_w, int n_layer, int n_expert,
                      int32_t *pin) {
    const char *colon = memchr(it, ':', len), *eq = memchr(it, '=', len);
    int layer, expert = -1;
    if (!colon || !eq || eq < colon || s_number(it, (size_t)(colon - it), n_layer, &layer) ||
        (!(eq - colon == 2 && colon[1] == '*') && s_number(colon + 1, (size_t)(eq - colon - 1), n_expert, &expert))) {
        if (!pin) return coli_fail(COLI_EINVAL, "pin '%.*s': want LAYER:EXPERT=WORKER or LAYER:*=WORKER", (int)len, it);
        return coli_fail(COLI_EINVAL,
                         "pin '%.*s': want LAYER:EXPERT=WORKER or LAYER:*=WORKER with layer < %d, "
                         "expert < %d",
                         (int)len, it, n_layer, n_expert);
    }
    const char *name = eq + 1;
    const int name_len = (int)(len - (size_t)(eq + 1 - it));
    int w = s_worker_named(d, n_w, name, (size_t)name_len);
    char names[512];
    sched_worker_names(d, n_w, names, sizeof names);
    if (w < 0)
        return coli_fail(COLI_EINVAL, "pin '%.*s': no worker '%.*s' (the workers: %s)", (int)len, it, name_len, name,
                         names);
    if (d[w].cache)
        return coli_fail(COLI_EINVAL,
                         "pin '%.*s': %.*s is a live expert cache (@cache), not a home for pinned experts (the "
                         "workers: %s)",
                         (int)len, it, name_len, name, names);
    for (int e = 0; pin && e < n_expert; e++)
        if (expert < 0 || e == expert) pin[(size_t)layer * (size_t)n_expert + (size_t)e] = w;
    return 0;
}

int sched_parse_pins(const char *pins, const device_spec *d, int n_w, int n_layer, int n_expert, int32_t *pin) {
    for (size_t i = 0; pin && i < (size_t)n_layer * (size_t)n_expert; i++) pin[i] = -1;
    for (const char *p = pins ? pins : ""; *p;) {
        size_t len = strcspn(p, ",");
        if (len) {
            int rc = s_pin_item(p, len, d, n_w, n_layer, n_expert, pin);
            if (rc) return rc;
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

typedef struct heat_slot {
    uint64_t heat;
    int32_t slot; /* layer * n_expert + expert */
} heat_slot;

/* Hottest first; equal heat in (layer, expert) order, so the plan is deterministic. */
static int s_hotter(const void *a, const void *b) {
    const heat_slot *x = a, *y = b;
    if (x->heat != y->heat) return x->heat > y->heat ? -1 : 1;
    return (x->slot > y->slot) - (x->slot < y->slot);
}

typedef struct place_acc {
    uint64_t *total;       /* (n_w) bytes placed on each worker */
    uint64_t *layer_heat;  /* (n_w * n_layer) rows each worker is expected to serve per layer */
    uint64_t *layer_bytes; /* (n_w * n_layer) */
} place_acc;

static void s_take(const placement_in *in, place_acc *a, int w, int layer, uint64_t heat) {
    a->total[w] += in->expert_bytes[layer];
    a->layer_heat[(size_t)w * (size_t)in->n_layer + (size_t)layer] += heat;
    a->layer_bytes[(size_t)w * (size_t)in->n_layer + (size_t)layer] += in->expert_bytes[layer];
}

/* The fastest usable worker with room for one expert of layer; among equals
 * the fewest expected rows of the layer, then bytes of the layer, then bytes, then index. */
static int s_pick(const placement_in *in, const place_acc *a, const long *speed, int layer) {
    const uint64_t eb = in->expert_bytes[layer];
    int best = -1;
    for (int w = 0; w < in->n_workers; w++) {
        if (!placement_may(in, w, layer) || (in->budget[w] && a->total[w] + eb > in->budget[w])) continue;
        if (best < 0 || speed[w] > speed[best]) {
            best = w;
            continue;
        }
        if (speed[w] < speed[best]) continue;
        size_t iw = (size_t)w * (size_t)in->n_layer + (size_t)layer,
               ib = (size_t)best * (size_t)in->n_layer + (size_t)layer;
        if (a->layer_heat[iw] != a->layer_heat[ib]) {
            if (a->layer_heat[iw] < a->layer_heat[ib]) best = w;
        } else if (a->layer_bytes[iw] != a->layer_bytes[ib]) {
            if (a->layer_bytes[iw] < a->layer_bytes[ib]) best = w;
        } else if (a->total[w] < a->total[best]) {
            best = w;
        }
    }
    return best;
}

/* Pinned experts onto their workers (budgets counted); the rest into order, hottest first. */
static int s_pins_then_order(const placement_in *in, const uint64_t *heat, const int32_t *pin, place_acc *a,
                             int32_t *owner, heat_slot *order, size_t *n_order) {
    const size_t X = (size_t)in->n_expert;
    *n_order = 0;
    for (int l = 0; l < in->n_layer; l++)
        for (size_t e = 0; e < X; e++) {
            size_t i = (size_t)l * X + e;
            owner[i] = -1;
            if (!in->expert_bytes[l]) continue; /* dense layer */
            int w = pin ? pin[i] : -1;
            /* a pin onto a worker that cannot compute the layer (its hello's
               caps) is dropped: the expert is placed as if not pinned */
            if (w >= 0 && placement_may(in, w, l)) {
                if (in->budget[w] && a->total[w] + in->expert_bytes[l] > in->budget[w])
                    return coli_fail(COLI_EINVAL, "pin %d:%zu: worker %d's budget of %llu bytes has no room left", l, e,
                                     w, (unsigned long long)in->budget[w]);
                owner[i] = w;
                s_take(in, a, w, l, heat[i]);
                continue;
            }
            order[(*n_order)++] = (heat_slot){heat[i], (int32_t)i};
        }
    qsort(order, *n_order, sizeof *order, s_hotter);
    return 0;
}

int placement_plan_heat(const placement_in *in, const uint64_t *heat, const long *speed, const int32_t *pin,
                        int32_t *owner) {
    const size_t n_slots = (size_t)in->n_layer * (size_t)in->n_expert, wl = (size_t)in->n_workers * (size_t)in->n_layer;
    place_acc a = {calloc((size_t)in->n_workers + 1, 8), calloc(wl + 1, 8), calloc(wl + 1, 8)};
    heat_slot *order = malloc((n_slots + 1) * sizeof *order);
    int rc = (!a.total || !a.layer_heat || !a.layer_bytes || !order)
                 ? coli_fail(COLI_ENOMEM, "placement: out of memory")
                 : 0;
    size_t n_order = 0;
    if (rc == 0) rc = s_pins_then_order(in, heat, pin, &a, owner, order, &n_order);
    for (size_t j = 0; rc == 0 && j < n_order; j++) {
        int l = order[j].slot / in->n_expert;
        int w = s_pick(in, &a, speed, l);
        owner[order[j].slot] = w;
        if (w >= 0) s_take(in, &a, w, l, order[j].heat);
    }
    free(a.total);
    free(a.layer_heat);
    free(a.layer_bytes);
    free(order);
    return rc;
}

void placement_row_share(const placement_in *in, const uint64_t *heat, const int32_t *owner, double *share) {
    uint64_t total = 0;
    for (int w = 0; w <= in->n_workers; w++) share[w] = 0;
    for (size_t i = 0; i < (size_t)in->n_layer * (size_t)in->n_expert; i++) {
        if (!in->expert_bytes[i / (size_t)in->n_expert]) continue;
        total += heat[i];
        share[owner[i] >= 0 ? owner[i] : in->n_workers] += (double)heat[i];
    }
    for (int w = 0; w <= in->n_workers; w++) share[w] = total ? share[w] / (double)total : 0;
}
