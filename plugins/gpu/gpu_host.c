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
#include "core/quant/quant_blocks.h"

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

void gpu_grid_sources(const void *src[GPU_HOST_GRIDS], size_t bytes[GPU_HOST_GRIDS]) {
    const void *s[GPU_HOST_GRIDS] = {coli_iq2xxs_grid, coli_iq2xs_grid,  coli_iq2s_grid,
                                     coli_iq1s_grid,   coli_iq3xxs_grid, coli_iq3s_grid};
    const size_t b[GPU_HOST_GRIDS] = {sizeof coli_iq2xxs_grid, sizeof coli_iq2xs_grid,  sizeof coli_iq2s_grid,
                                      sizeof coli_iq1s_grid,   sizeof coli_iq3xxs_grid, sizeof coli_iq3s_grid};
    for (int i = 0; i < GPU_HOST_GRIDS; i++) src[i] = s[i], bytes[i] = b[i];
}
