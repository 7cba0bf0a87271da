/* cpu_features.c - run-time CPU feature detection; see cpu_features.h. */
#include "core/cpu_features.h"

#include <stdatomic.h>

#if COLI_X86
#include <cpuid.h>
#endif

int coli_cpu_avx2(void) {
    /* -1 = not asked yet; the answer never changes, so a race only repeats work */
    static atomic_int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v >= 0) return v;
#if COLI_X86
    /* F16C from CPUID leaf 1 (clang's __builtin_cpu_supports does not know
     * "f16c"); the avx2 test already covers the OS saving YMM state */
    unsigned a, b, c, d;
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __get_cpuid(1, &a, &b, &c, &d) &&
        (c & bit_F16C);
#else
    v = 0;
#endif
    atomic_store_explicit(&cached, v, memory_order_relaxed);
    return v;
}
