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

/* CPUID leaf 7 sub-leaf 1, EAX bit 4: AVX-VNNI (older cpuid.h lack the name) */
#define AVXVNNI_EAX_BIT (1u << 4)

int coli_cpu_has_vnni(int kind) {
    if (kind == COLI_VNNI_NONE) return 1;
#if COLI_X86
    if (!coli_cpu_avx2()) return 0;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (kind == COLI_VNNI_VEX) return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & AVXVNNI_EAX_BIT);
    /* __builtin_cpu_supports checks that the OS saves the AVX-512 state */
    if (kind == COLI_VNNI_EVEX) return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
#endif
    return 0;
}

int coli_cpu_vnni(void) {
    static atomic_int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v >= 0) return v;
    v = coli_cpu_has_vnni(COLI_VNNI_VEX)    ? COLI_VNNI_VEX
        : coli_cpu_has_vnni(COLI_VNNI_EVEX) ? COLI_VNNI_EVEX
                                            : COLI_VNNI_NONE;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
    return v;
}
