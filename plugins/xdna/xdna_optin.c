/*
 * xdna_optin.c - whether the NPU lane was asked for (xdna_package.h). On its
 * own so that the coordinator's opt-in needs nothing else of the lane (no
 * libsodium for programs that never touch a package).
 */
#include <errno.h>
#include <stdlib.h>

#include "plugins/xdna/xdna_package.h"

int xdna_lane_requested(void)
{
    const char *v = getenv("COLI_XDNA");
    if (!v || !(*v == '-' || *v == '+' || (*v >= '0' && *v <= '9'))) return 0; /* no blanks, no text */
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    return !errno && *end == '\0' && x != 0;
}
