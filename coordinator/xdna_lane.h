/*
 * xdna_lane.h - the coordinator's two touches of the NPU lane: the opt-in
 * (an xdna worker joins the device list only when the lane was asked for)
 * and the diagnostic names that plugins put in their reasons, which become
 * the fallback reasons counted in stats.
 */
#ifndef COLI_COORD_XDNA_LANE_H
#define COLI_COORD_XDNA_LANE_H

#include <stddef.h>

#include "coordinator/sched_internal.h"

/* When the lane is requested (COLI_XDNA a non-zero integer; `--xdna` sets it)
 * and the list has no xdna entry, append xdna:0. `auto` never adds it by
 * itself. 0 or COLI_EINVAL (list full). */
int sched_xdna_optin(device_spec *d, int cap, int *n);

/* The first diagnostic name in a reason: an upper-case word with at least one
 * underscore, followed by ':' ("plugin 'xdna': open device 0: PACKAGE_MISSING:
 * no package" -> "PACKAGE_MISSING"), copied into buf (n bytes, truncated
 * names are not names: NULL). NULL when there is none. */
const char *sched_reason_code(const char *why, char *buf, size_t n);

#endif
