/* cpu_features.c - run-time CPU feature detection; see cpu_features.h. */
#include "cpu_features.h"

#include <stdatomic.h>

int coli_cpu_avx2(void) {
    /* -1 = not asked yet; the answer never changes, so a race only repeats work */
    static atomic_int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v >= 0) return v;
#if COLI_X86
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c");
#else
    v = 0;
#endif
    atomic_store_explicit(&cached, v, memory_order_relaxed);
    return v;
}
