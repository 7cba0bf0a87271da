/*
 * clock.h - the monotonic clock every timer, deadline and latency here reads
 * (CLOCK_MONOTONIC: never steps back, unaffected by wall-clock changes).
 */
#ifndef COLI_CORE_CLOCK_H
#define COLI_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Now, in nanoseconds since an arbitrary fixed point (boot). */
static inline uint64_t coli_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Now, in seconds (same clock), for durations printed to people. */
static inline double coli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
