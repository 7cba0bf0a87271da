/*
 * xrt_synth.cpp - a synthetic XRT runtime for tests: the subset of XRT's C++
 * API that the XDNA helper uses (xrt::device, xclbin, hw_context, kernel, bo,
 * run), with XRT's names and signatures, and no device. The "kernel" is a CPU
 * GEMM in BF16 with F32 accumulation: C (M x N F32) = A (M x K BF16) . B^T,
 * B being N x K BF16, the layout our artifacts declare.
 *
 * A synthetic xclbin is a text file:
 *     COLI-SYNTH-XCLBIN 1
 *     kernel MLIR_AIE
 *     m 64
 *     k 64
 *     n 128
 * and its instruction stream is little-endian uint32 words
 *     0x53495843 ('CXIS'), 1, M, K, N
 * which the kernel checks against its xclbin, so the helper must pass the
 * right stream with the right word count. Kernel arguments are those of the
 * NPU GEMM designs: (opcode 3, instr bo, instr words, A bo, B bo, C bo), each
 * buffer in the memory group kernel.group_id(argument index) names.
 *
 * Failure switches (COLI_XRT_SYNTH_FAULT, comma list of KIND or KIND@N; KIND@N
 * fires on the N-th such step of the process only, KIND alone on every one):
 *   device   xrt::device constructor throws
 *   xclbin   xrt::xclbin constructor throws
 *   hwctx    xrt::hw_context constructor throws
 *   bo       xrt::bo constructor throws (allocation)
 *   sync     bo::sync throws
 *   start    run::start throws
 *   timeout  run::wait returns ERT_CMD_STATE_TIMEOUT
 *   error    run::wait returns ERT_CMD_STATE_ERROR
 *   nan      the kernel writes a NaN into C
 *   crash    the kernel dereferences a null pointer (SIGSEGV inside execute)
 */
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "xrt/xrt_bo.h"
#include "xrt/xrt_device.h"
#include "xrt/xrt_hw_context.h"
#include "xrt/xrt_kernel.h"

namespace {

enum fault_kind {
    F_DEVICE,
    F_XCLBIN,
    F_HWCTX,
    F_BO,
    F_SYNC,
    F_START,
    F_TIMEOUT,
    F_ERROR,
    F_NAN,
    F_CRASH,
    F_KINDS
};
const char *const fault_names[F_KINDS] = {"device", "xclbin",  "hwctx", "bo",  "sync",
                                          "start",  "timeout", "error", "nan", "crash"};

struct fault_table {
    bool on[F_KINDS] = {};
    unsigned long at[F_KINDS] = {}; /* 0 = every time */
    unsigned long seen[F_KINDS] = {};
    std::mutex mu;

    fault_table() {
        const char *spec = std::getenv("COLI_XRT_SYNTH_FAULT");
        std::stringstream ss(spec ? spec : "");
        std::string item;
        while (std::getline(ss, item, ',')) {
            std::string name = item.substr(0, item.find('@'));
            unsigned long n =
                item.find('@') == std::string::npos ? 0 : std::strtoul(item.c_str() + item.find('@') + 1, nullptr, 10);
            for (int k = 0; k < F_KINDS; k++)
                if (name == fault_names[k]) {
                    on[k] = true;
                    at[k] = n;
                }
        }
    }

    bool fire(fault_kind k) {
        std::lock_guard<std::mutex> lock(mu);
        unsigned long n = ++seen[k];
        return on[k] && (at[k] == 0 || at[k] == n);
    }
};

fault_table &faults() {
    static fault_table t;
    return t;
}

void maybe_throw(fault_kind k, const char *what) {
    if (faults().fire(k))
        throw std::runtime_error(std::string("synthetic XRT: ") + what + " failed (fault switch '" + fault_names[k] +
                                 "')");
}

constexpr uint32_t INSTR_MAGIC = 0x53495843u;

float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

} // namespace

namespace xrt {

std::string uuid::to_string() const {
    char buf[40];
    for (int i = 0; i < 16; i++) std::snprintf(buf + 2 * i, 3, "%02x", m_uuid[i]);
    return buf;
}

class xclbin_impl {
  public:
    std::string kernel;
    int64_t m = 0, k = 0, n = 0;
    xuid_t id = {0};
};

class device_impl {
  public:
    unsigned index = 0;
    std::map<std::string, std::shared_ptr<xclbin_impl>> registered; /* by uuid text */
};

class hw_context_impl {
  public:
    xrt::device dev;
    xrt::uuid id;
    std::shared_ptr<xclbin_impl> bin;
};

class kernel_impl {
  public:
    xrt::hw_context ctx;
    std::string name;
};

class bo_impl {
  public:
    std::vector<unsigned char> host, dev;
    uint32_t flags = 0;
    memory_group grp = 0;
};

class run_impl {
  public:
    std::shared_ptr<kernel_impl> k;
    std::map<int, std::vector<unsigned char>> scalars;
    std::map<int, std::shared_ptr<bo_impl>> bos;
    ert_cmd_state st = ERT_CMD_STATE_NEW;
};

xclbin::xclbin(const std::string &filename) {
    maybe_throw(F_XCLBIN, "xclbin load");
    std::ifstream in(filename);
    if (!in) throw std::runtime_error("synthetic XRT: cannot open xclbin '" + filename + "'");
    std::string magic;
    int version = 0;
    in >> magic >> version;
    if (magic != "COLI-SYNTH-XCLBIN" || version != 1)
        throw std::runtime_error("synthetic XRT: '" + filename + "' is not a synthetic xclbin");
    auto impl = std::make_shared<xclbin_impl>();
    std::string key;
    while (in >> key) {
        if (key == "kernel")
            in >> impl->kernel;
        else if (key == "m")
            in >> impl->m;
        else if (key == "k")
            in >> impl->k;
        else if (key == "n")
            in >> impl->n;
        else
            throw std::runtime_error("synthetic XRT: '" + filename + "': unknown key " + key);
    }
    if (impl->kernel.empty() || impl->m <= 0 || impl->k <= 0 || impl->n <= 0)
        throw std::runtime_error("synthetic XRT: '" + filename + "': incomplete");
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the description: the uuid */
    std::string desc =
        impl->kernel + ":" + std::to_string(impl->m) + ":" + std::to_string(impl->k) + ":" + std::to_string(impl->n);
    for (unsigned char c : desc) h = (h ^ c) * 1099511628211ull;
    for (int i = 0; i < 16; i++) impl->id[i] = (unsigned char)(h >> (8 * (i % 8))) ^ (unsigned char)i;
    handle = impl;
}

uuid xclbin::get_uuid() const { return handle ? uuid(handle->id) : uuid(); }

device::device(unsigned int didx) {
    maybe_throw(F_DEVICE, "device open");
    if (didx != 0) throw std::runtime_error("synthetic XRT: no device " + std::to_string(didx));
    handle = std::make_shared<device_impl>();
    handle->index = didx;
}

uuid device::register_xclbin(const xrt::xclbin &xclbin) {
    if (!handle || !xclbin.get_handle()) throw std::runtime_error("synthetic XRT: register_xclbin on an empty object");
    uuid id = xclbin.get_uuid();
    handle->registered[id.to_string()] = xclbin.get_handle();
    return id;
}

hw_context::hw_context(const xrt::device &device, const xrt::uuid &xclbin_id) {
    maybe_throw(F_HWCTX, "hardware context");
    if (!device) throw std::runtime_error("synthetic XRT: hw_context on an empty device");
    auto it = device.get_handle()->registered.find(xclbin_id.to_string());
    if (it == device.get_handle()->registered.end())
        throw std::runtime_error("synthetic XRT: hw_context: xclbin " + xclbin_id.to_string() + " not registered");
    handle = std::make_shared<hw_context_impl>();
    handle->dev = device;
    handle->id = xclbin_id;
    handle->bin = it->second;
}

xrt::device hw_context::get_device() const { return handle ? handle->dev : xrt::device(); }
xrt::uuid hw_context::get_xclbin_uuid() const { return handle ? handle->id : xrt::uuid(); }

kernel::kernel(const xrt::hw_context &ctx, const std::string &name) {
    if (!ctx.get_handle()) throw std::runtime_error("synthetic XRT: kernel on an empty hw_context");
    if (ctx.get_handle()->bin->kernel != name)
        throw std::runtime_error("synthetic XRT: no kernel '" + name + "' in the xclbin");
    handle = std::make_shared<kernel_impl>();
    handle->ctx = ctx;
    handle->name = name;
}

/* group of argument i: the argument index itself (what the GEMM designs use) */
int kernel::group_id(int argno) const {
    if (!handle || argno < 0 || argno > 5) throw std::runtime_error("synthetic XRT: group_id: bad argument index");
    return argno;
}

std::string kernel::get_name() const { return handle ? handle->name : std::string(); }

bo::bo(const xrt::device &device, size_t sz, bo::flags flags, memory_group grp) {
    maybe_throw(F_BO, "buffer allocation");
    if (!device) throw std::runtime_error("synthetic XRT: bo on an empty device");
    if (sz == 0) throw std::runtime_error("synthetic XRT: bo of 0 bytes");
    handle = std::make_shared<bo_impl>();
    handle->host.assign(sz, 0);
    handle->dev.assign(sz, 0xa5); /* device memory starts as junk: only a sync makes it right */
    handle->flags = static_cast<uint32_t>(flags);
    handle->grp = grp;
}

size_t bo::size() const { return handle ? handle->host.size() : 0; }

void bo::sync(xclBOSyncDirection dir, size_t sz, size_t offset) {
    maybe_throw(F_SYNC, "buffer sync");
    if (!handle || offset > handle->host.size() || sz > handle->host.size() - offset)
        throw std::runtime_error("synthetic XRT: sync out of range");
    if (dir == XCL_BO_SYNC_BO_TO_DEVICE)
        std::memcpy(handle->dev.data() + offset, handle->host.data() + offset, sz);
    else if (dir == XCL_BO_SYNC_BO_FROM_DEVICE)
        std::memcpy(handle->host.data() + offset, handle->dev.data() + offset, sz);
    else
        throw std::runtime_error("synthetic XRT: sync direction not supported");
}

void *bo::map() {
    if (!handle) throw std::runtime_error("synthetic XRT: map of an empty bo");
    return handle->host.data();
}

void bo::write(const void *src, size_t size, size_t seek) {
    if (!handle || seek > handle->host.size() || size > handle->host.size() - seek)
        throw std::runtime_error("synthetic XRT: write out of range");
    std::memcpy(handle->host.data() + seek, src, size);
}

void bo::read(void *dst, size_t size, size_t skip) {
    if (!handle || skip > handle->host.size() || size > handle->host.size() - skip)
        throw std::runtime_error("synthetic XRT: read out of range");
    std::memcpy(dst, handle->host.data() + skip, size);
}

run::run(const kernel &krnl) {
    if (!krnl.get_handle()) throw std::runtime_error("synthetic XRT: run of an empty kernel");
    handle = std::make_shared<run_impl>();
    handle->k = krnl.get_handle();
}

void run::set_arg(int index, const xrt::bo &boh) {
    if (!handle || !boh) throw std::runtime_error("synthetic XRT: set_arg: empty run or bo");
    handle->bos[index] = boh.get_handle();
}

void run::set_arg_at_index(int index, const void *value, size_t bytes) {
    if (!handle) throw std::runtime_error("synthetic XRT: set_arg on an empty run");
    const unsigned char *p = static_cast<const unsigned char *>(value);
    handle->scalars[index] = std::vector<unsigned char>(p, p + bytes);
}

namespace {

uint64_t scalar(const run_impl &r, int index) {
    auto it = r.scalars.find(index);
    if (it == r.scalars.end() || it->second.size() > 8)
        throw std::runtime_error("synthetic XRT: scalar argument missing");
    uint64_t v = 0;
    std::memcpy(&v, it->second.data(), it->second.size());
    return v;
}

const std::shared_ptr<bo_impl> &buffer(const run_impl &r, int index, size_t min_bytes) {
    auto it = r.bos.find(index);
    if (it == r.bos.end())
        throw std::runtime_error("synthetic XRT: buffer argument " + std::to_string(index) + " missing");
    if (it->second->grp != static_cast<memory_group>(index) || it->second->dev.size() < min_bytes)
        throw std::runtime_error("synthetic XRT: buffer argument " + std::to_string(index) +
                                 " in the wrong group or too small");
    return it->second;
}

/* The GEMM on the device sides of the buffers, after checking the instructions. */
void synth_gemm(const run_impl &r) {
    const xclbin_impl &bin = *r.k->ctx.get_handle()->bin;
    const int64_t M = bin.m, K = bin.k, N = bin.n;
    if (scalar(r, 0) != 3) throw std::runtime_error("synthetic XRT: opcode is not 3");
    const uint64_t words = scalar(r, 2);
    const auto &instr = buffer(r, 1, (size_t)words * 4);
    uint32_t w[5];
    if (words < 5) throw std::runtime_error("synthetic XRT: instruction stream too short");
    std::memcpy(w, instr->dev.data(), sizeof w);
    if (w[0] != INSTR_MAGIC || w[1] != 1 || w[2] != (uint32_t)M || w[3] != (uint32_t)K || w[4] != (uint32_t)N)
        throw std::runtime_error("synthetic XRT: the instruction stream is not this xclbin's");
    const auto &a = buffer(r, 3, (size_t)(M * K) * 2);
    const auto &b = buffer(r, 4, (size_t)(N * K) * 2);
    const auto &c = buffer(r, 5, (size_t)(M * N) * 4);
    const uint16_t *A = reinterpret_cast<const uint16_t *>(a->dev.data());
    const uint16_t *B = reinterpret_cast<const uint16_t *>(b->dev.data());
    float *C = reinterpret_cast<float *>(c->dev.data());
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) acc += bf16_to_f32(A[i * K + k]) * bf16_to_f32(B[j * K + k]);
            C[i * N + j] = acc;
        }
    if (faults().fire(F_NAN)) C[0] = NAN;
    if (faults().fire(F_CRASH)) {
        volatile int *null_page = nullptr;
        *null_page = 1; /* what a crashing driver does to the worker: SIGSEGV */
    }
}

} // namespace

void run::start() {
    if (!handle) throw std::runtime_error("synthetic XRT: start of an empty run");
    maybe_throw(F_START, "run start");
    handle->st = ERT_CMD_STATE_RUNNING;
    try {
        synth_gemm(*handle);
        handle->st = ERT_CMD_STATE_COMPLETED;
    } catch (...) {
        handle->st = ERT_CMD_STATE_ERROR;
        throw;
    }
}

void run::abort() {
    if (handle && handle->st == ERT_CMD_STATE_RUNNING) handle->st = ERT_CMD_STATE_ABORT;
}

ert_cmd_state run::wait(const std::chrono::milliseconds &) const {
    if (!handle) throw std::runtime_error("synthetic XRT: wait on an empty run");
    if (faults().fire(F_TIMEOUT)) return ERT_CMD_STATE_TIMEOUT;
    if (faults().fire(F_ERROR)) return ERT_CMD_STATE_ERROR;
    return handle->st;
}

ert_cmd_state run::state() const { return handle ? handle->st : ERT_CMD_STATE_NEW; }

} // namespace xrt
