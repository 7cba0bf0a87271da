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

#if COLI_X86
/* CPUID leaf 7 sub-leaf sub: register r (0 eax, 1 ebx, 2 ecx) has bit. */
static int s_leaf7_bit(unsigned sub, int r, int bit) {
    unsigned v[4];
    if (!__get_cpuid_count(7, sub, &v[0], &v[1], &v[2], &v[3])) return 0;
    return (v[r] >> bit) & 1;
}

/* The OS saves the opmask and upper ZMM state (XCR0 bits 5..7) as well as
 * SSE/AVX (1, 2): checked through OSXSAVE and xgetbv. */
static int s_os_saves_avx512(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0xe6) == 0xe6;
}
#endif

/* feature: 0 AVX-VNNI, 1 AVX512-VNNI (with F and VL), 2 that and BW + DQ;
 * cached like coli_cpu_avx2. */
static int s_vnni_present(int feature) {
    static atomic_int cached[3] = {-1, -1, -1};
    int v = atomic_load_explicit(&cached[feature], memory_order_relaxed);
    if (v >= 0) return v;
#if COLI_X86
    if (feature == 0)
        v = coli_cpu_avx2() && s_leaf7_bit(1, 0, 4); /* leaf 7.1 eax bit 4: AVX-VNNI */
    else if (feature == 1)                           /* leaf 7.0: ebx 16 AVX512F, ebx 31 AVX512VL, ecx 11 AVX512-VNNI */
        v = coli_cpu_avx2() && s_leaf7_bit(0, 1, 16) && s_leaf7_bit(0, 1, 31) && s_leaf7_bit(0, 2, 11) &&
            s_os_saves_avx512();
    else /* leaf 7.0: ebx 30 AVX512BW, ebx 17 AVX512DQ */
        v = s_vnni_present(1) && s_leaf7_bit(0, 1, 30) && s_leaf7_bit(0, 1, 17);
#else
    v = 0;
#endif
    atomic_store_explicit(&cached[feature], v, memory_order_relaxed);
    return v;
}

int coli_cpu_avxvnni(void) { return s_vnni_present(0); }
int coli_cpu_avx512vnni(void) { return s_vnni_present(1); }
int coli_cpu_avx512(void) { return s_vnni_present(2); }
