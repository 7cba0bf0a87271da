/*
 * gpu_emu.h - runs the kernels of gpu_kernels.cuh on the host, for tests on
 * machines without a GPU (tests/test_gpu_emu.cpp; selected in gpu_compat.h
 * by COLI_GPU_EMULATE, never in the plugin).
 *
 * Each GPU thread of a block is a ucontext coroutine with its own stack;
 * __syncthreads() switches to the next thread of the block, so a barrier
 * really waits for all of them. __shared__ becomes static: one copy, shared
 * by the block's threads (blocks run one after another). Slow and
 * single-threaded, but it executes the kernels' own indexing, shared-memory
 * use and barriers, which the per-element tests cannot reach. It checks
 * what the hardware would not forgive: a launch with 0 or more than 1024
 * threads fails (as the runtime's invalid configuration), and a barrier not
 * reached by every live thread of the block is reported as divergence.
 */
#ifndef COLI_GPU_EMU_H
#define COLI_GPU_EMU_H

#ifndef __cplusplus
#error "gpu_emu.h is C++ (the kernels are templates)"
#endif

#include <ucontext.h>

#include <functional>
#include <vector>

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

#define __global__
#define __device__
#define __host__
#define __shared__ static

static dim3 threadIdx(0, 0, 0), blockIdx(0, 0, 0), blockDim, gridDim;

/* Structure of the emulator: the block being run, one context per thread */
struct gpu_emu {
    ucontext_t sched;            /* the launcher's context */
    std::vector<ucontext_t> ctx; /* one per thread of the block */
    std::vector<std::vector<char>> stacks;
    std::vector<int> done;      /* thread returned from the kernel */
    std::vector<long> barriers; /* barriers passed, per thread */
    std::function<void()> body; /* the kernel call */
    int current;
    int divergent; /* a barrier not reached by every live thread */
};

static gpu_emu s_emu;

static void __syncthreads() {
    s_emu.barriers[s_emu.current]++;
    swapcontext(&s_emu.ctx[s_emu.current], &s_emu.sched);
}

static void gpu_emu_trampoline() {
    s_emu.body();
    s_emu.done[s_emu.current] = 1; /* then uc_link returns to the launcher */
}

/* A fresh context for thread i that starts at the kernel call. */
static __attribute__((noinline)) void gpu_emu_init_thread(unsigned i) {
    getcontext(&s_emu.ctx[i]);
    s_emu.ctx[i].uc_stack.ss_sp = s_emu.stacks[i].data();
    s_emu.ctx[i].uc_stack.ss_size = s_emu.stacks[i].size();
    s_emu.ctx[i].uc_link = &s_emu.sched;
    makecontext(&s_emu.ctx[i], gpu_emu_trampoline, 0);
    s_emu.done[i] = 0;
    s_emu.barriers[i] = 0;
}

/* Switch into thread i until its next barrier or its end. A function of its
 * own: the caller's loop variables stay clear of swapcontext's
 * returns-twice semantics. */
static __attribute__((noinline)) void gpu_emu_resume(unsigned i) {
    s_emu.current = (int)i;
    threadIdx = dim3(i % blockDim.x, (i / blockDim.x) % blockDim.y, i / (blockDim.x * blockDim.y));
    swapcontext(&s_emu.sched, &s_emu.ctx[i]);
}

/* Run every thread of the current block up to its next barrier (or its
 * end), round after round, until all have returned. */
static void gpu_emu_run_block(unsigned n) {
    for (unsigned i = 0; i < n; i++) gpu_emu_init_thread(i);
    for (;;) {
        unsigned alive = 0;
        for (unsigned i = 0; i < n; i++) {
            if (s_emu.done[i]) continue;
            gpu_emu_resume(i);
            alive++;
        }
        if (!alive) return;
        long at = -1;
        unsigned finished = 0, waiting = 0;
        for (unsigned i = 0; i < n; i++) {
            if (s_emu.done[i]) {
                finished++;
                continue;
            }
            waiting++;
            if (at >= 0 && s_emu.barriers[i] != at) s_emu.divergent = 1;
            at = s_emu.barriers[i];
        }
        if (waiting && finished && at > 0) {
            /* threads that returned while others wait at a barrier: the barrier
             * counts only if none of the finished ones ever reached it */
            for (unsigned i = 0; i < n; i++)
                if (s_emu.done[i] && s_emu.barriers[i] < at) s_emu.divergent = 1;
        }
    }
}

/* Launch f (a call of one kernel) on grid x block. 0, -1 for an invalid
 * configuration, -2 when a barrier diverged. */
template <typename F> static int gpu_emu_launch(dim3 grid, dim3 block, F f) {
    const unsigned n = block.x * block.y * block.z;
    if (n == 0 || n > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0) return -1;
    gridDim = grid;
    blockDim = block;
    s_emu.body = f;
    s_emu.divergent = 0;
    s_emu.ctx.resize(n);
    s_emu.done.resize(n);
    s_emu.barriers.resize(n);
    if (s_emu.stacks.size() < n) s_emu.stacks.resize(n, std::vector<char>(256 * 1024));
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                gpu_emu_run_block(n);
            }
    return s_emu.divergent ? -2 : 0;
}

#endif /* COLI_GPU_EMU_H */
