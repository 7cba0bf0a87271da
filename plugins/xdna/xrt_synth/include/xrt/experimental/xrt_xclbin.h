/*
 * xrt/experimental/xrt_xclbin.h (synthetic XRT) - xrt::xclbin, the subset the
 * helper uses. A synthetic xclbin is a small text file (plugins/xdna/xrt_synth/
 * xrt_synth.cpp says its format); anything else is refused as XRT refuses a
 * file that is not an axlf.
 */
#ifndef COLI_XRT_SYNTH_XCLBIN_H
#define COLI_XRT_SYNTH_XCLBIN_H

#include <memory>
#include <string>

#include "xrt/xrt_uuid.h"

namespace xrt {

class xclbin_impl;
class xclbin
{
public:
  xclbin() = default;
  explicit xclbin(const std::string& filename);
  uuid get_uuid() const;
  const std::shared_ptr<xclbin_impl>& get_handle() const { return handle; }

private:
  std::shared_ptr<xclbin_impl> handle;
};

} // namespace xrt

#endif
