/*
 * gpu_host.c - host-side bookkeeping of the GPU plugin; see gpu_host.h.
 * Plain C on purpose: no runtime calls, so it is tested without a device.
 */
#include "plugins/gpu/gpu_host.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colibri.h"

#define GPU_TABLE_EMPTY UINT64_MAX

static const char *const s_kind_names[GPU_FAULT_KINDS] = {"alloc", "h2d", "launch"};

const char *gpu_fault_kind_name(gpu_fault_kind k) { return (unsigned)k < GPU_FAULT_KINDS ? s_kind_names[k] : "?"; }

//  ---------------------------------------------------------------------------
//  One "KIND@N[+]" entry of len bytes.
static int s_parse_entry(const char *s, size_t len, gpu_faults *f, char *err, size_t err_len) {
    char buf[64];
    if (len == 0 || len >= sizeof buf) goto bad;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *at = strchr(buf, '@');
    if (!at) goto bad;
    *at = '\0';
    int kind = -1;
    for (int k = 0; k < GPU_FAULT_KINDS; k++)
        if (!strcmp(buf, s_kind_names[k])) kind = k;
    if (kind < 0) goto bad;
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(at + 1, &end, 10);
    if (errno || end == at + 1 || n == 0 || at[1] == '-') goto bad;
    int from_on = 0;
    if (*end == '+') {
        from_on = 1;
        end++;
    }
    if (*end != '\0') goto bad;
    if (f->n_at[kind] == GPU_FAULT_MAX_AT) {
        snprintf(err, err_len, "fault spec: more than %d '%s' entries", GPU_FAULT_MAX_AT, buf);
        return COLI_EINVAL;
    }
    f->at[kind][f->n_at[kind]] = n;
    f->from_on[kind][f->n_at[kind]] = (uint8_t)from_on;
    f->n_at[kind]++;
    return 0;
bad:
    snprintf(err, err_len, "fault spec: bad entry '%.*s' (expected alloc|h2d|launch@N or @N+)",
             (int)(len > 40 ? 40 : len), s);
    return COLI_EINVAL;
}

int gpu_faults_parse(const char *spec, gpu_faults *f, char *err, size_t err_len) {
    memset(f, 0, sizeof *f);
    if (!spec || !*spec) return 0;
    for (const char *p = spec;;) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int rc = s_parse_entry(p, len, f, err, err_len);
        if (rc) {
            memset(f, 0, sizeof *f);
            return rc;
        }
        if (!comma) return 0;
        p = comma + 1; /* "alloc@1," ends with an empty entry: refused above */
    }
}

int gpu_faults_next(gpu_faults *f, gpu_fault_kind k) {
    if (!f || (unsigned)k >= GPU_FAULT_KINDS) return 0;
    const uint64_t n = ++f->seen[k];
    for (int i = 0; i < f->n_at[k]; i++) {
        if (n == f->at[k][i] || (f->from_on[k][i] && n > f->at[k][i])) {
            f->fired[k]++;
            return 1;
        }
    }
    return 0;
}

//  ---------------------------------------------------------------------------
//  Resident experts. Keys are (layer, expert) packed into 64 bits.
static uint64_t s_key(int32_t layer, int32_t expert) { return (uint64_t)(uint32_t)layer << 32 | (uint32_t)expert; }

static size_t s_slot(uint64_t key, size_t cap) {
    uint64_t h = key * 0x9e3779b97f4a7c15ull; /* Fibonacci hashing spreads (l, e) pairs */
    return (size_t)(h >> 17) & (cap - 1);
}

void *gpu_table_get(const gpu_table *t, int32_t layer, int32_t expert) {
    if (!t->cap) return NULL;
    const uint64_t key = s_key(layer, expert);
    for (size_t i = s_slot(key, t->cap);; i = (i + 1) & (t->cap - 1)) {
        if (t->keys[i] == key) return t->vals[i];
        if (t->keys[i] == GPU_TABLE_EMPTY) return NULL;
    }
}

static void s_insert(uint64_t *keys, void **vals, size_t cap, uint64_t key, void *val) {
    size_t i = s_slot(key, cap);
    while (keys[i] != GPU_TABLE_EMPTY) i = (i + 1) & (cap - 1);
    keys[i] = key;
    vals[i] = val;
}

static int s_grow(gpu_table *t) {
    const size_t cap = t->cap ? t->cap * 2 : 64;
    uint64_t *keys = malloc(cap * sizeof *keys);
    void **vals = malloc(cap * sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return COLI_ENOMEM;
    }
    memset(keys, 0xff, cap * sizeof *keys); /* GPU_TABLE_EMPTY everywhere */
    for (size_t i = 0; i < t->cap; i++)
        if (t->keys[i] != GPU_TABLE_EMPTY) s_insert(keys, vals, cap, t->keys[i], t->vals[i]);
    free(t->keys);
    free(t->vals);
    t->keys = keys;
    t->vals = vals;
    t->cap = cap;
    return 0;
}

int gpu_table_put(gpu_table *t, int32_t layer, int32_t expert, void *val) {
    if ((t->n + 1) * 2 > t->cap && s_grow(t)) return COLI_ENOMEM;
    s_insert(t->keys, t->vals, t->cap, s_key(layer, expert), val);
    t->n++;
    return 0;
}

void *gpu_table_remove(gpu_table *t, int32_t layer, int32_t expert) {
    if (!t->cap) return NULL;
    const uint64_t key = s_key(layer, expert);
    size_t hole = s_slot(key, t->cap);
    while (t->keys[hole] != key) {
        if (t->keys[hole] == GPU_TABLE_EMPTY) return NULL;
        hole = (hole + 1) & (t->cap - 1);
    }
    void *val = t->vals[hole];
    t->keys[hole] = GPU_TABLE_EMPTY;
    t->n--;
    for (size_t i = (hole + 1) & (t->cap - 1); t->keys[i] != GPU_TABLE_EMPTY; i = (i + 1) & (t->cap - 1)) {
        const size_t home = s_slot(t->keys[i], t->cap);
        /* an entry whose home lies in (hole, i], cyclically, must stay */
        const int stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (stays) continue;
        t->keys[hole] = t->keys[i];
        t->vals[hole] = t->vals[i];
        t->keys[i] = GPU_TABLE_EMPTY;
        hole = i;
    }
    return val;
}

void gpu_table_free(gpu_table *t, void (*fn)(void *val, void *arg), void *arg) {
    for (size_t i = 0; i < t->cap; i++)
        if (t->keys[i] != GPU_TABLE_EMPTY && fn) fn(t->vals[i], arg);
    free(t->keys);
    free(t->vals);
    memset(t, 0, sizeof *t);
}

//  ---------------------------------------------------------------------------
uint64_t gpu_reserve_bytes(uint64_t total_bytes) {
    const uint64_t gib = 1ull << 30, pct = total_bytes / 20;
    return pct > gib ? pct : gib;
}

uint64_t gpu_default_budget(uint64_t free_bytes, uint64_t total_bytes) {
    const uint64_t reserve = gpu_reserve_bytes(total_bytes);
    return free_bytes > reserve ? free_bytes - reserve : 0;
}

const char *gpu_fmt_bytes(char *buf, size_t n, uint64_t bytes) {
    if (bytes >= (1ull << 30))
        snprintf(buf, n, "%.2f GiB", (double)bytes / (double)(1ull << 30));
    else if (bytes >= (1ull << 20))
        snprintf(buf, n, "%.1f MiB", (double)bytes / (double)(1ull << 20));
    else
        snprintf(buf, n, "%llu B", (unsigned long long)bytes);
    return buf;
}
