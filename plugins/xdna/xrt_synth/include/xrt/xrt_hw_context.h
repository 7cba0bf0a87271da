/*
 * xrt/xrt_hw_context.h (synthetic XRT) - xrt::hw_context, the subset the helper uses.
 */
#ifndef COLI_XRT_SYNTH_HW_CONTEXT_H
#define COLI_XRT_SYNTH_HW_CONTEXT_H

#include <memory>

#include "xrt/xrt_device.h"
#include "xrt/xrt_uuid.h"

namespace xrt {

class hw_context_impl;
class hw_context
{
public:
  hw_context() = default;
  hw_context(const xrt::device& device, const xrt::uuid& xclbin_id);
  xrt::device get_device() const;
  xrt::uuid get_xclbin_uuid() const;
  const std::shared_ptr<hw_context_impl>& get_handle() const { return handle; }

private:
  std::shared_ptr<hw_context_impl> handle;
};

} // namespace xrt

#endif
