/*
 * xrt/xrt_bo.h (synthetic XRT) - xrt::bo, the subset the helper uses. A
 * buffer has a host side and a device side; sync copies between them, and
 * the synthetic kernel reads and writes only the device side, so a missing
 * sync shows as a wrong answer.
 */
#ifndef COLI_XRT_SYNTH_BO_H
#define COLI_XRT_SYNTH_BO_H

#include <cstddef>
#include <cstdint>
#include <memory>

#include "xrt/deprecated/xrt.h"
#include "xrt/detail/xrt_mem.h"
#include "xrt/xrt_device.h"

namespace xrt {

using memory_group = xrtMemoryGroup;

class bo_impl;
class bo
{
public:
  enum class flags : uint32_t
  {
    normal       = 0,
    cacheable    = XRT_BO_FLAGS_CACHEABLE,
    device_only  = XRT_BO_FLAGS_DEV_ONLY,
    host_only    = XRT_BO_FLAGS_HOST_ONLY,
    p2p          = XRT_BO_FLAGS_P2P,
    svm          = XRT_BO_FLAGS_SVM,
    carveout     = XRT_BO_FLAGS_CARVEOUT,
  };

  bo() {}
  bo(const xrt::device& device, size_t sz, bo::flags flags, memory_group grp);
  bo(const xrt::device& device, size_t sz, memory_group grp) : bo(device, sz, flags::normal, grp) {}
  size_t size() const;
  void sync(xclBOSyncDirection dir, size_t sz, size_t offset);
  void sync(xclBOSyncDirection dir) { sync(dir, size(), 0); }
  void* map();
  template<typename MapType>
  MapType map() { return reinterpret_cast<MapType>(map()); }
  void write(const void* src, size_t size, size_t seek);
  void write(const void* src) { write(src, size(), 0); }
  void read(void* dst, size_t size, size_t skip);
  void read(void* dst) { read(dst, size(), 0); }
  explicit operator bool() const { return handle != nullptr; }
  const std::shared_ptr<bo_impl>& get_handle() const { return handle; }

private:
  std::shared_ptr<bo_impl> handle;
};

} // namespace xrt

#endif
