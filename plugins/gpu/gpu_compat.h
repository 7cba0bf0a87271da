/*
 * gpu_compat.h - the one place where CUDA and HIP differ.
 *
 * CONTRIBUTORS' RULE: vendor differences go here only. The kernels and the
 * plugin (gpu_experts.cu) are written once, with the CUDA runtime names and
 * syntax both nvcc and hipcc accept (templates, __global__, __shared__,
 * <<<grid, block, shmem, stream>>>, __syncthreads); no vendor #ifdef anywhere
 * else. A runtime call the plugin starts using gets its HIP name below.
 *
 * Compiled by hipcc (-x hip): HIP runtime, cuda* names mapped 1:1 to hip*.
 * Compiled by nvcc: the CUDA runtime (linked statically, so the plugin loads
 * where only the driver is installed). With COLI_GPU_EMULATE (tests only):
 * the kernels on the host, one coroutine per GPU thread (gpu_emu.h).
 */
#ifndef COLI_GPU_COMPAT_H
#define COLI_GPU_COMPAT_H

#include <stddef.h>
#include <stdio.h>

#if defined(COLI_GPU_EMULATE)

/* Tests only: the kernels run on the host (gpu_emu.h, tests/test_gpu_emu.cpp). */
#include "plugins/gpu/gpu_emu.h"
#define COLI_GPU_VENDOR "emu"

#elif defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)

#if defined(__has_include)
#if !__has_include(<hip/hip_runtime.h>)
#error "hip/hip_runtime.h not found: install Debian's libamdhip64-dev (make deps-hip) or build without HIP=1"
#endif
#endif
#include <hip/hip_runtime.h>
#include <unistd.h>

#define COLI_GPU_VENDOR "hip"
#define COLI_DEVICE_VAR __device__ /* a variable in device memory (gpu_blocks_iq.h's grid pointers) */
/* Reads a COLI_DEVICE_VAR: the variable in the device pass; a zero value in
 * the host pass of a COLI_HD function (the plugin's host code never decodes
 * grid types, so that value is never used). */
#ifdef __HIP_DEVICE_COMPILE__
#define COLI_DEVICE_READ(v) (v)
#else
#define COLI_DEVICE_READ(v) (decltype(v){})
#endif
#define COLI_GPU_RUNTIME_NAME "HIP"

#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorNoDevice hipErrorNoDevice
#define cudaErrorInsufficientDriver hipErrorInsufficientDriver
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaGetErrorString hipGetErrorString
#define cudaGetErrorName hipGetErrorName
#define cudaGetLastError hipGetLastError
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaSetDevice hipSetDevice
#define cudaDeviceProp hipDeviceProp_t
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaMemGetInfo hipMemGetInfo
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaStream_t hipStream_t
#define cudaStreamCreate hipStreamCreate
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaEvent_t hipEvent_t
#define cudaEventCreate hipEventCreate
#define cudaEventDestroy hipEventDestroy
#define cudaEventRecord hipEventRecord
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaRuntimeGetVersion hipRuntimeGetVersion

/* The kernel driver check: HIP has no separate user-space driver library to
 * look for (libamdhip64 is a link dependency of the plugin, so a missing one
 * already fails the dlopen with the loader's message); what can be missing
 * at run time is the amdgpu kernel driver's /dev/kfd. 0 = present. */
static inline int gpu_driver_check(char *why, size_t why_len) {
    if (access("/dev/kfd", R_OK | W_OK) == 0) return 0;
    snprintf(why, why_len, "no /dev/kfd (amdgpu kernel driver not loaded or no permission)");
    return -1;
}

/* hipDriverGetVersion / hipRuntimeGetVersion: major * 10^7 + minor * 10^5 + patch. */
static inline void gpu_fmt_version(int v, char *buf, size_t n) {
    snprintf(buf, n, "%d.%d", v / 10000000, (v / 100000) % 100);
}

#else /* CUDA */

#if defined(__has_include)
#if !__has_include(<cuda_runtime.h>)
#error "cuda_runtime.h not found: install the CUDA toolkit (nvcc) or build without CUDA=1"
#endif
#endif
#include <cuda_runtime.h>
#include <dlfcn.h>

#define COLI_GPU_VENDOR "cuda"
#define COLI_DEVICE_VAR __device__ /* a variable in device memory (gpu_blocks_iq.h's grid pointers) */
/* Reads a COLI_DEVICE_VAR: the variable in the device pass; a zero value in
 * the host pass of a COLI_HD function (the plugin's host code never decodes
 * grid types, so that value is never used). */
#ifdef __CUDA_ARCH__
#define COLI_DEVICE_READ(v) (v)
#else
#define COLI_DEVICE_READ(v) (decltype(v){})
#endif
#define COLI_GPU_RUNTIME_NAME "CUDA"

/* The CUDA runtime is linked statically; the user-space driver
 * (libcuda.so.1) comes with the NVIDIA driver package and is loaded by the
 * runtime at first use. Looking for it first gives a precise reason instead
 * of the runtime's generic "insufficient driver". 0 = present. */
static inline int gpu_driver_check(char *why, size_t why_len) {
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (h) {
        dlclose(h);
        return 0;
    }
    const char *e = dlerror();
    snprintf(why, why_len, "NVIDIA driver library libcuda.so.1 not found (%s)", e ? e : "dlopen failed");
    return -1;
}

/* cudaDriverGetVersion / cudaRuntimeGetVersion: 1000 * major + 10 * minor. */
static inline void gpu_fmt_version(int v, char *buf, size_t n) { snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10); }

#endif

/* Host+device qualifier of the shared per-element math (gpu_math.h). */
#define COLI_HD __host__ __device__

#endif /* COLI_GPU_COMPAT_H */
