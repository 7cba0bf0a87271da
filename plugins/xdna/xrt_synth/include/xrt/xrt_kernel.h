/*
 * xrt/xrt_kernel.h (synthetic XRT) - xrt::kernel and xrt::run, the subset the
 * helper uses: kernel(hw_context, name), group_id, operator() (set the
 * arguments in order, start), run::wait with a timeout, run::abort.
 */
#ifndef COLI_XRT_SYNTH_KERNEL_H
#define COLI_XRT_SYNTH_KERNEL_H

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "xrt/detail/ert.h"
#include "xrt/xrt_bo.h"
#include "xrt/xrt_device.h"
#include "xrt/xrt_hw_context.h"
#include "xrt/xrt_uuid.h"

namespace xrt {

class kernel;
class run_impl;
class run
{
public:
  run() = default;
  explicit run(const kernel& krnl);
  void start();
  void abort();
  ert_cmd_state wait(const std::chrono::milliseconds& timeout = std::chrono::milliseconds{0}) const;
  ert_cmd_state wait(unsigned int timeout_ms) const { return wait(timeout_ms * std::chrono::milliseconds{1}); }
  ert_cmd_state state() const;
  explicit operator bool() const { return handle != nullptr; }

  void set_arg(int index, const xrt::bo& boh);
  void set_arg(int index, xrt::bo& boh) { set_arg(index, static_cast<const xrt::bo&>(boh)); }
  void set_arg(int index, xrt::bo&& boh) { set_arg(index, static_cast<const xrt::bo&>(boh)); }
  template <typename ArgType,
            typename = std::enable_if_t<std::is_arithmetic<std::decay_t<ArgType>>::value>>
  void set_arg(int index, ArgType&& arg)
  {
    std::decay_t<ArgType> v = arg;
    set_arg_at_index(index, &v, sizeof v);
  }

  template <typename... Args>
  void operator()(Args&&... args)
  {
    set_args_from(0, std::forward<Args>(args)...);
    start();
  }

private:
  void set_arg_at_index(int index, const void* value, size_t bytes);
  void set_args_from(int) {}
  template <typename A, typename... Rest>
  void set_args_from(int index, A&& a, Rest&&... rest)
  {
    set_arg(index, std::forward<A>(a));
    set_args_from(index + 1, std::forward<Rest>(rest)...);
  }
  std::shared_ptr<run_impl> handle;
};

class kernel_impl;
class kernel
{
public:
  kernel() = default;
  kernel(const xrt::hw_context& ctx, const std::string& name);
  template <typename... Args>
  run operator()(Args&&... args)
  {
    run r(*this);
    r(std::forward<Args>(args)...);
    return r;
  }
  int group_id(int argno) const;
  std::string get_name() const;
  const std::shared_ptr<kernel_impl>& get_handle() const { return handle; }

private:
  std::shared_ptr<kernel_impl> handle;
};

} // namespace xrt

#endif
