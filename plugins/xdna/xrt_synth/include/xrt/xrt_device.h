/*
 * xrt/xrt_device.h (synthetic XRT) - xrt::device, the subset the helper uses.
 */
#ifndef COLI_XRT_SYNTH_DEVICE_H
#define COLI_XRT_SYNTH_DEVICE_H

#include <memory>
#include <string>

#include "xrt/deprecated/xrt.h"
#include "xrt/experimental/xrt_xclbin.h"
#include "xrt/xrt_uuid.h"

namespace xrt {

class device_impl;
class device
{
public:
  device() = default;
  explicit device(unsigned int didx);
  explicit device(int didx) : device(static_cast<unsigned int>(didx)) {}
  uuid register_xclbin(const xrt::xclbin& xclbin);
  explicit operator bool() const { return handle != nullptr; }
  const std::shared_ptr<device_impl>& get_handle() const { return handle; }

private:
  std::shared_ptr<device_impl> handle;
};

} // namespace xrt

#endif
