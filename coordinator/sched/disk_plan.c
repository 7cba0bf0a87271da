/*
 * disk_plan.c - what `coli plan` says of the disk tier (disk_tier.c): the
 * RAM budget, the experts resident when it starts (pins, then the heat's
 * hottest, as the tier's own cache chooses them: expert_cache.c) and the
 * reads a decoded token should expect once the cache has filled.
 *
 * Expected reads: each token routes k distinct experts in each MoE layer;
 * expert e of layer l is chosen with probability p(l,e) (its share of the
 * layer's heat; without a heat file 1/n_expert). Once the cache is full it
 * holds the likeliest experts that fit (the live-cache policy converges on
 * them), so a token reads sum over layers of k * (1 - the resident share).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/heat.h"
#include "coordinator/moe_exec.h"
#include "coordinator/sched/expert_cache.h"
#include "coordinator/sched/sched_internal.h"
#include "core/error.h"
#include "core/gguf/gguf.h"
#include "core/kernels/expert_ffn.h"
#include "core/settings.h"
#include "core/strbuf.h"

typedef struct dp_model {
    int n_layer, n_expert, k;
    uint64_t *eb;     /* (n_layer) bytes of one expert, 0 for a dense layer */
    uint64_t all;     /* bytes of every expert */
    double *p;        /* (slots) chance a token routes to the slot */
    uint64_t *weight; /* (slots) the order the cache fills in: heat, or 1 each */
} dp_model;

static void s_model_free(dp_model *m) {
    free(m->eb);
    free(m->p);
    free(m->weight);
}

/* The shape, the experts' bytes and the routing chances (heat h or uniform). */
static int s_model(const gguf_file *f, int n_layer, int n_expert, int k, const heat_table *h, dp_model *m) {
    const size_t n = (size_t)n_layer * (size_t)n_expert;
    *m = (dp_model){.n_layer = n_layer, .n_expert = n_expert, .k = k};
    m->eb = calloc((size_t)n_layer, sizeof *m->eb);
    m->p = calloc(n, sizeof *m->p);
    m->weight = calloc(n, sizeof *m->weight);
    if (!m->eb || !m->p || !m->weight) return coli_fail(COLI_ENOMEM, "plan: out of memory");
    for (int l = 0; l < n_layer; l++) {
        expert_weights w;
        if (!expert_layer_present(f, l)) continue;
        int rc = expert_weights_from_gguf(f, l, 0, &w);
        if (rc) return rc;
        m->eb[l] = expert_weights_bytes(&w);
        m->all += m->eb[l] * (uint64_t)n_expert;
        uint64_t total = 0;
        for (int e = 0; h && e < n_expert; e++) total += h->count[(size_t)l * (size_t)n_expert + (size_t)e];
        for (int e = 0; e < n_expert; e++) {
            const size_t s = (size_t)l * (size_t)n_expert + (size_t)e;
            m->p[s] = total ? (double)h->count[s] / (double)total : 1.0 / n_expert;
            m->weight[s] = total ? h->count[s] : 1;
        }
    }
    return 0;
}

typedef struct dp_slot {
    uint64_t weight;
    size_t rank, slot; /* rank: the order before sorting (ties keep it) */
} dp_slot;

static int s_likelier(const void *a, const void *b) {
    const dp_slot *x = a, *y = b;
    if (x->weight != y->weight) return x->weight < y->weight ? 1 : -1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The cache as the tier starts it (pins, then heat); then, for the steady
 * state, the likeliest of the rest while they fit (layer by layer in turn
 * when all are alike). *pinned and *seeded: how many of each at start. */
static int s_fill(const dp_model *m, uint64_t ram, const char *pins, const uint64_t *heat, expert_cache **out,
                  size_t *pinned, size_t *seeded) {
    const size_t n = (size_t)m->n_layer * (size_t)m->n_expert;
    expert_cache *ec = ec_new(m->n_layer, m->n_expert, m->eb, ram, NULL);
    int32_t *pin = malloc(n * sizeof *pin);
    int rc = ec && pin ? disk_tier_parse_pins(pins, m->n_layer, m->n_expert, pin)
                       : coli_fail(COLI_ENOMEM, "plan: out of memory");
    *pinned = 0;
    for (size_t s = 0; s < n && !rc; s++)
        if (pin[s] >= 0 && ec_pin(ec, s) == 0)
            ++*pinned;
        else if (pin[s] >= 0)
            rc = coli_fail(COLI_EINVAL, "--pin %zu:%zu=ram: the RAM budget has no room left for it",
                           s / (size_t)m->n_expert, s % (size_t)m->n_expert);
    free(pin);
    *seeded = rc ? 0 : ec_seed(ec, heat);
    dp_slot *order = rc ? NULL : malloc(n * sizeof *order);
    if (!rc && !order) rc = coli_fail(COLI_ENOMEM, "plan: out of memory");
    size_t n_order = 0;
    for (int e = 0; !rc && e < m->n_expert; e++) /* the steady state: likeliest first, (expert, layer) order on ties */
        for (int l = 0; l < m->n_layer; l++) {
            const size_t s = (size_t)l * (size_t)m->n_expert + (size_t)e;
            if (ec->state[s] == EC_NONE && m->eb[l]) order[n_order] = (dp_slot){m->weight[s], n_order, s}, n_order++;
        }
    if (!rc) qsort(order, n_order, sizeof *order, s_likelier);
    for (size_t i = 0; !rc && i < n_order; i++) {
        const uint64_t b = m->eb[order[i].slot / (size_t)m->n_expert];
        if (ec->used + b <= ram) ec->state[order[i].slot] = EC_RESIDENT, ec->used += b;
    }
    free(order);
    if (rc) ec_free(ec);
    *out = rc ? NULL : ec;
    return rc;
}

static int s_render(const dp_model *m, const expert_cache *ec, uint64_t ram, const char *why, size_t pinned,
                    size_t seeded, int by_heat, char **text) {
    coli_strbuf b = {0};
    uint64_t start_bytes = 0, per_tok = 0;
    double reads = 0, read_bytes = 0;
    int moe_layers = 0;
    for (int l = 0; l < m->n_layer; l++) {
        if (!m->eb[l]) continue;
        double hit = 0;
        for (int e = 0; e < m->n_expert; e++) {
            const size_t s = (size_t)l * (size_t)m->n_expert + (size_t)e;
            if (ec->state[s] == EC_LOADING) start_bytes += m->eb[l];
            if (ec->state[s] != EC_NONE) hit += m->p[s];
        }
        moe_layers++;
        per_tok += (uint64_t)m->k * m->eb[l];
        reads += m->k * (1 - hit);
        read_bytes += m->k * (1 - hit) * (double)m->eb[l];
    }
    const double mib = 1048576.0;
    coli_strbuf_appendf(&b, "placement: in-process with the disk tier (%s)\n", why);
    coli_strbuf_appendf(&b,
                        "  RAM expert cache: %.1f MiB for %.1f MiB of experts (%.1f%%); the others are read from the "
                        "file on demand, one read per expert per layer call (O_DIRECT where the file system allows)\n",
                        (double)ram / mib, (double)m->all / mib, m->all ? 100.0 * (double)ram / (double)m->all : 0.0);
    coli_strbuf_appendf(&b,
                        "  resident at start: %zu experts, %.1f MiB (%zu pinned, %zu the hottest of the heat file); "
                        "then the live-cache policy (decayed frequency, hysteresis; pins never leave)\n",
                        pinned + seeded, (double)start_bytes / mib, pinned, seeded);
    coli_strbuf_appendf(&b, "  per token: %d experts x %d MoE layers = %d experts, %.1f MiB\n", m->k, moe_layers,
                        m->k * moe_layers, (double)per_tok / mib);
    coli_strbuf_appendf(&b,
                        "  expected reads per decoded token, the cache full: %.1f experts, %.1f MiB (hit rate %.1f%%; "
                        "routing %s)\n",
                        reads, read_bytes / mib, per_tok ? 100.0 * (1 - read_bytes / (double)per_tok) : 0.0,
                        by_heat ? "from the heat file" : "taken as uniform: give --heat for a closer figure");
    if (b.failed || !b.s) {
        free(b.s);
        return coli_fail(COLI_ENOMEM, "plan: out of memory");
    }
    *text = b.s;
    return 0;
}

/* Why the tier applies: the budget asked for, or the file's size against memory. */
static void s_why(const char *devices, const gguf_file *f, char *why, size_t cap) {
    if (devices && !strncmp(devices, "inproc@ram=", 11)) {
        snprintf(why, cap, "--devices %s", devices);
        return;
    }
    snprintf(why, cap,
             "chosen: the file's %.2f GiB exceed 90%% of the %.2f GiB this process may use; "
             "COLI_DISK_AUTO=0 maps it instead",
             (double)gguf_size(f) / 1073741824.0, (double)sched_memory_allowed() / 1073741824.0);
}

int disk_plan_text(const char *model_path, const coli_model_params *p, int n_layer, int n_expert, int k, char **text) {
    *text = NULL;
    coli_settings *set = malloc(sizeof *set);
    gguf_file *f = NULL;
    int rc = set ? gguf_open(model_path, &f) : coli_fail(COLI_ENOMEM, "plan: out of memory");
    uint64_t ram = 0;
    if (!rc) coli_settings_load(set, p);
    if (!rc) rc = moe_exec_ram_budget(p->devices, f, set, &ram);
    free(set);
    heat_table h = {0};
    const int by_heat = p->heat_path && *p->heat_path;
    if (!rc && ram && by_heat) rc = heat_read(p->heat_path, &h);
    if (!rc && ram && by_heat && (h.n_layer != n_layer || h.n_expert != n_expert))
        rc = coli_fail(COLI_EFORMAT, "heat file %s: %d layers x %d experts, the model has %d x %d", p->heat_path,
                       h.n_layer, h.n_expert, n_layer, n_expert);
    dp_model m = {0};
    expert_cache *ec = NULL;
    size_t pinned = 0, seeded = 0;
    char why[256];
    if (!rc && ram) rc = s_model(f, n_layer, n_expert, k, by_heat ? &h : NULL, &m);
    if (!rc && ram) rc = s_fill(&m, ram, p->pins, by_heat ? h.count : NULL, &ec, &pinned, &seeded);
    if (!rc && ram) s_why(p->devices, f, why, sizeof why);
    if (!rc && ram) rc = s_render(&m, ec, ram, why, pinned, seeded, by_heat, text);
    ec_free(ec);
    s_model_free(&m);
    heat_free(&h);
    gguf_close(&f);
    return rc;
}
