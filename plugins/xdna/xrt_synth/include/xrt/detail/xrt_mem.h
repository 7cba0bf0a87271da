/*
 * xrt/detail/xrt_mem.h (synthetic XRT) - buffer flags and memory groups with
 * XRT's names and values.
 */
#ifndef COLI_XRT_SYNTH_XRT_MEM_H
#define COLI_XRT_SYNTH_XRT_MEM_H

#include <stdint.h>

typedef uint32_t xrtBufferFlags;
typedef uint32_t xrtMemoryGroup;

#define XRT_BO_FLAGS_CACHEABLE (1U << 24)
#define XRT_BO_FLAGS_SVM       (1U << 27)
#define XRT_BO_FLAGS_DEV_ONLY  (1U << 28)
#define XRT_BO_FLAGS_HOST_ONLY (1U << 29)
#define XRT_BO_FLAGS_P2P       (1U << 30)
#define XRT_BO_FLAGS_CARVEOUT  (1U << 31)

#endif
