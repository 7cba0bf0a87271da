/*
 * cpu_features.h - what the CPU we run on offers, decided once per process.
 *
 * Kernels are compiled for the baseline target plus functions marked
 * COLI_TARGET_AVX2; those may only be called when coli_cpu_avx2() is 1.
 */
#ifndef COLI_CORE_CPU_FEATURES_H
#define COLI_CORE_CPU_FEATURES_H

#if defined(__x86_64__) || defined(__i386__)
#define COLI_X86 1
#define COLI_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define COLI_X86 0
#define COLI_TARGET_AVX2
#endif

/* 1 if AVX2, FMA and F16C are all present (and the build is x86). */
int coli_cpu_avx2(void);

/* Which 256-bit int8 dot instruction (vpdpbusd) the CPU offers on top of
 * coli_cpu_avx2(): COLI_VNNI_NONE, COLI_VNNI_VEX (AVX-VNNI) or
 * COLI_VNNI_EVEX (AVX512-VNNI with AVX512VL, the OS saving its state).
 * VEX is preferred where both exist. Always COLI_VNNI_NONE without AVX2. */
enum {
    COLI_VNNI_NONE = 0,
    COLI_VNNI_VEX = 1,
    COLI_VNNI_EVEX = 2
};
int coli_cpu_vnni(void);
/* 1 if that flavour (a COLI_VNNI_* value) can run here (NONE always can). */
int coli_cpu_has_vnni(int kind);

#endif
