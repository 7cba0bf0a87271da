/*
 * cpu_features.h - what the CPU we run on offers, decided once per process.
 *
 * Kernels are compiled for the baseline target plus functions marked
 * COLI_TARGET_AVX2; those may only be called when coli_cpu_avx2() is 1
 * (and the VNNI ones when coli_cpu_avxvnni() / coli_cpu_avx512vnni() is).
 */
#ifndef COLI_CORE_CPU_FEATURES_H
#define COLI_CORE_CPU_FEATURES_H

#if defined(__x86_64__) || defined(__i386__)
#define COLI_X86 1
#define COLI_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define COLI_TARGET_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define COLI_TARGET_AVX512VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
#define COLI_TARGET_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#else
#define COLI_X86 0
#define COLI_TARGET_AVX2
#define COLI_TARGET_AVXVNNI
#define COLI_TARGET_AVX512VNNI
#define COLI_TARGET_AVX512
#endif

/* 1 if AVX2, FMA and F16C are all present (and the build is x86). */
int coli_cpu_avx2(void);
/* 1 if coli_cpu_avx2() and the 256-bit vpdpbusd of AVX-VNNI (VEX) is
 * present: functions marked COLI_TARGET_AVXVNNI may run. */
int coli_cpu_avxvnni(void);
/* 1 if coli_cpu_avx2() and AVX512F + AVX512VL + AVX512-VNNI are present and
 * the OS saves the AVX-512 state: COLI_TARGET_AVX512VNNI may run. */
int coli_cpu_avx512vnni(void);
/* 1 if coli_cpu_avx512vnni() and AVX512BW + AVX512DQ are present: the
 * 512-bit tiles (COLI_TARGET_AVX512) may run. */
int coli_cpu_avx512(void);

#endif
