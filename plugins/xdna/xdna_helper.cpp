/*
 * xdna_helper.cpp - libcoli-xdna-helper.so: the only code of colibri that
 * uses XRT, behind the C ABI of xdna_helper_abi.h (generation 2).
 *
 * XRT's C++ API is used because the NPU needs a hardware context, which its C
 * API does not offer: xrt::device -> register_xclbin -> xrt::hw_context ->
 * xrt::kernel, buffers (xrt::bo) in the groups the kernel names, one xrt::run
 * per execution. Built against a real XRT (make XDNA=1 XRT_ROOT=...) or, for
 * the tests, against the synthetic runtime of plugins/xdna/xrt_synth; the
 * source is the same.
 *
 * Every entry point catches every exception: nothing C++ crosses the ABI. A
 * failure leaves the session usable for the next call.
 */
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "xrt/xrt_bo.h"
#include "xrt/xrt_device.h"
#include "xrt/xrt_hw_context.h"
#include "xrt/xrt_kernel.h"

#include "plugins/xdna/xdna_helper_abi.h"

namespace {

thread_local std::string t_last_error;

int fail(int code, const std::string &what) {
    t_last_error = what;
    return code;
}

/* The kernel's arguments, as the NPU GEMM designs define them. */
enum {
    ARG_OPCODE = 0,
    ARG_INSTR = 1,
    ARG_INSTR_WORDS = 2,
    ARG_A = 3,
    ARG_B = 4,
    ARG_C = 5
};
constexpr unsigned int GEMM_OPCODE = 3;

struct artifact {
    int64_t m = 0, k = 0, n = 0;
    xrt::xclbin bin;
    xrt::hw_context ctx;
    xrt::kernel kern;
    xrt::bo instr, a, c;
    uint32_t instr_words = 0;
};

std::vector<uint32_t> read_words(const char *path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw std::runtime_error(std::string("cannot open instruction stream ") + path);
    std::streamsize bytes = in.tellg();
    if (bytes <= 0 || bytes % 4 != 0)
        throw std::runtime_error(std::string("instruction stream ") + path + " is not a whole number of words");
    std::vector<uint32_t> w((size_t)bytes / 4);
    in.seekg(0);
    if (!in.read(reinterpret_cast<char *>(w.data()), bytes))
        throw std::runtime_error(std::string("cannot read instruction stream ") + path);
    return w;
}

} // namespace

struct xdna_session {
    xrt::device dev;
    std::vector<artifact> arts;
    uint32_t timeout_ms = 5000;
};

struct xdna_weight {
    int artifact = -1;
    xrt::bo b;
};

namespace {

/* One artifact: xclbin registered, hardware context, kernel, the instruction
 * stream in its buffer and the A and C buffers of its bucket. Each stage
 * fails with its own code. */
int open_artifact(xdna_session &s, const xdna_artifact_desc &d, artifact &a) {
    const std::string name = d.xclbin_path;
    a.m = d.m;
    a.k = d.k;
    a.n = d.n;
    try {
        a.bin = xrt::xclbin(name);
        xrt::uuid id = s.dev.register_xclbin(a.bin);
        try {
            a.ctx = xrt::hw_context(s.dev, id);
            a.kern = xrt::kernel(a.ctx, d.kernel_name);
        } catch (const std::exception &e) { return fail(XDNA_E_HWCTX, name + ": hardware context: " + e.what()); }
    } catch (const std::exception &e) { return fail(XDNA_E_XCLBIN, name + ": " + e.what()); }
    std::vector<uint32_t> words;
    try {
        words = read_words(d.instr_path);
    } catch (const std::exception &e) { return fail(XDNA_E_XCLBIN, e.what()); }
    try {
        a.instr = xrt::bo(s.dev, words.size() * 4, xrt::bo::flags::cacheable, a.kern.group_id(ARG_INSTR));
        a.a = xrt::bo(s.dev, (size_t)(d.m * d.k) * 2, xrt::bo::flags::host_only, a.kern.group_id(ARG_A));
        a.c = xrt::bo(s.dev, (size_t)(d.m * d.n) * 4, xrt::bo::flags::host_only, a.kern.group_id(ARG_C));
    } catch (const std::exception &e) { return fail(XDNA_E_BO, name + ": buffers: " + e.what()); }
    try {
        a.instr.write(words.data());
        a.instr.sync(XCL_BO_SYNC_BO_TO_DEVICE);
    } catch (const std::exception &e) { return fail(XDNA_E_SYNC, name + ": instruction stream: " + e.what()); }
    a.instr_words = (uint32_t)words.size();
    return XDNA_SUCCESS;
}

int open_session(const xdna_open_args *args, xdna_session **out) {
    if (!args || !out || args->n_artifacts <= 0 || !args->artifacts) return fail(XDNA_E_ARG, "open: no artifacts");
    *out = nullptr;
    std::unique_ptr<xdna_session> s(new xdna_session);
    if (args->timeout_ms) s->timeout_ms = args->timeout_ms;
    try {
        s->dev = xrt::device(args->device_index);
    } catch (const std::exception &e) {
        return fail(XDNA_E_DEVICE, std::string("xrt::device(") + std::to_string(args->device_index) + "): " + e.what());
    }
    s->arts.resize((size_t)args->n_artifacts);
    for (int i = 0; i < args->n_artifacts; i++) {
        const xdna_artifact_desc &d = args->artifacts[i];
        if (!d.xclbin_path || !d.instr_path || !d.kernel_name || d.m <= 0 || d.k <= 0 || d.n <= 0)
            return fail(XDNA_E_ARG, "open: artifact " + std::to_string(i) + " incompletely described");
        int rc = open_artifact(*s, d, s->arts[(size_t)i]);
        if (rc) return rc;
    }
    *out = s.release();
    return XDNA_SUCCESS;
}

int execute(xdna_session *s, xdna_weight *w, const uint16_t *a_bf16, float *c) {
    if (!s || !w || !a_bf16 || !c || w->artifact < 0 || (size_t)w->artifact >= s->arts.size())
        return fail(XDNA_E_ARG, "execute: bad arguments");
    artifact &a = s->arts[(size_t)w->artifact];
    try {
        a.a.write(a_bf16);
        a.a.sync(XCL_BO_SYNC_BO_TO_DEVICE);
    } catch (const std::exception &e) {
        return fail(XDNA_E_SYNC, std::string("execute: input to the device: ") + e.what());
    }
    xrt::run run;
    try {
        run = a.kern(GEMM_OPCODE, a.instr, a.instr_words, a.a, w->b, a.c);
    } catch (const std::exception &e) { return fail(XDNA_E_START, std::string("execute: run start: ") + e.what()); }
    ert_cmd_state st;
    try {
        st = run.wait(std::chrono::milliseconds(s->timeout_ms));
    } catch (const std::exception &e) { return fail(XDNA_E_RUN, std::string("execute: run wait: ") + e.what()); }
    if (st == ERT_CMD_STATE_TIMEOUT) {
        try {
            run.abort();
        } catch (...) {}
        return fail(XDNA_E_TIMEOUT, "execute: no completion within " + std::to_string(s->timeout_ms) + " ms");
    }
    if (st != ERT_CMD_STATE_COMPLETED)
        return fail(XDNA_E_RUN, "execute: run ended in state " + std::to_string((int)st));
    try {
        a.c.sync(XCL_BO_SYNC_BO_FROM_DEVICE);
        a.c.read(c);
    } catch (const std::exception &e) {
        return fail(XDNA_E_SYNC, std::string("execute: output from the device: ") + e.what());
    }
    return XDNA_SUCCESS;
}

} // namespace

/* Test builds only (xdna.mk): a helper of another generation, and one that
 * lacks an entry point, to show the plugin refuses both. */
#ifndef XDNA_HELPER_REPORTED_ABI
#define XDNA_HELPER_REPORTED_ABI XDNA_HELPER_ABI
#endif

extern "C" {

__attribute__((visibility("default"))) uint32_t coli_xdna_abi_version(void) { return XDNA_HELPER_REPORTED_ABI; }

__attribute__((visibility("default"))) int coli_xdna_open(const xdna_open_args *args, xdna_session **out) {
    try {
        return open_session(args, out);
    } catch (const std::exception &e) { return fail(XDNA_E_EXCEPTION, std::string("open: ") + e.what()); } catch (...) {
        return fail(XDNA_E_EXCEPTION, "open: unknown exception");
    }
}

__attribute__((visibility("default"))) int coli_xdna_wrap_weight(xdna_session *s, int art, const uint16_t *b,
                                                                 size_t n_elems, xdna_weight **out) {
    try {
        if (!s || !b || !out || art < 0 || (size_t)art >= s->arts.size())
            return fail(XDNA_E_ARG, "wrap_weight: bad arguments");
        *out = nullptr;
        artifact &a = s->arts[(size_t)art];
        if (n_elems != (size_t)(a.n * a.k))
            return fail(XDNA_E_ARG, "wrap_weight: " + std::to_string(n_elems) + " values, the artifact takes " +
                                        std::to_string(a.n * a.k));
        std::unique_ptr<xdna_weight> w(new xdna_weight);
        w->artifact = art;
        try {
            w->b = xrt::bo(s->dev, n_elems * 2, xrt::bo::flags::host_only, a.kern.group_id(ARG_B));
        } catch (const std::exception &e) { return fail(XDNA_E_BO, std::string("wrap_weight: ") + e.what()); }
        try {
            w->b.write(b);
            w->b.sync(XCL_BO_SYNC_BO_TO_DEVICE);
        } catch (const std::exception &e) { return fail(XDNA_E_SYNC, std::string("wrap_weight: ") + e.what()); }
        *out = w.release();
        return XDNA_SUCCESS;
    } catch (const std::exception &e) {
        return fail(XDNA_E_EXCEPTION, std::string("wrap_weight: ") + e.what());
    } catch (...) { return fail(XDNA_E_EXCEPTION, "wrap_weight: unknown exception"); }
}

__attribute__((visibility("default"))) int coli_xdna_execute(xdna_session *s, xdna_weight *w, const uint16_t *a,
                                                             float *c) {
    try {
        return execute(s, w, a, c);
    } catch (const std::exception &e) {
        return fail(XDNA_E_EXCEPTION, std::string("execute: ") + e.what());
    } catch (...) { return fail(XDNA_E_EXCEPTION, "execute: unknown exception"); }
}

__attribute__((visibility("default"))) void coli_xdna_release_weight(xdna_session *, xdna_weight **w) {
    try {
        if (w) {
            delete *w;
            *w = nullptr;
        }
    } catch (...) {}
}

__attribute__((visibility("default"))) void coli_xdna_shutdown(xdna_session **s) {
    try {
        if (s) {
            delete *s;
            *s = nullptr;
        }
    } catch (...) {}
}

#ifndef XDNA_HELPER_OMIT_LAST_ERROR
__attribute__((visibility("default"))) const char *coli_xdna_last_error(void) {
    try {
        return t_last_error.c_str();
    } catch (...) { return ""; }
}
#endif

} // extern "C"
