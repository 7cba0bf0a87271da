/*
 * xdna_lane.c - the NPU lane's opt-in and the diagnostic names of plugin
 * reasons; see xdna_lane.h.
 */
#include "coordinator/xdna_lane.h"

#include <stdio.h>
#include <string.h>

#include "error.h"
#include "plugins/xdna/xdna_package.h"

int sched_xdna_optin(device_spec *d, int cap, int *n)
{
    if (!xdna_lane_requested()) return 0;
    for (int i = 0; i < *n; i++)
        if (!strcmp(d[i].plugin, "xdna")) return 0;
    if (*n >= cap) return coli_fail(COLI_EINVAL, "devices: more than %d workers with xdna", cap);
    device_spec *x = &d[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->plugin, sizeof x->plugin, "xdna");
    return 0;
}

static int s_upper(char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

const char *sched_reason_code(const char *why, char *buf, size_t n)
{
    if (!why) return NULL;
    for (const char *p = why; *p; p++) {
        if (!(*p >= 'A' && *p <= 'Z') || (p > why && (s_upper(p[-1]) || p[-1] == '_'))) continue;
        size_t len = 0;
        int underscore = 0;
        while (s_upper(p[len]) || p[len] == '_') underscore |= p[len++] == '_';
        if (underscore && p[len] == ':' && p[len - 1] != '_' && len < n) {
            memcpy(buf, p, len);
            buf[len] = '\0';
            return buf;
        }
        p += len ? len - 1 : 0;
    }
    return NULL;
}
