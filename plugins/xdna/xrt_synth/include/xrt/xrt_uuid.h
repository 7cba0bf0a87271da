/*
 * xrt/xrt_uuid.h (synthetic XRT) - xrt::uuid, the subset the helper uses.
 */
#ifndef COLI_XRT_SYNTH_UUID_H
#define COLI_XRT_SYNTH_UUID_H

#include <cstring>
#include <string>

typedef unsigned char xuid_t[16];

namespace xrt {

class uuid
{
public:
  uuid() { std::memset(m_uuid, 0, sizeof m_uuid); }
  uuid(const xuid_t val) { std::memcpy(m_uuid, val, sizeof m_uuid); }
  uuid(const uuid& rhs) { std::memcpy(m_uuid, rhs.m_uuid, sizeof m_uuid); }
  uuid& operator=(const uuid& rhs) { std::memcpy(m_uuid, rhs.m_uuid, sizeof m_uuid); return *this; }
  const xuid_t& get() const { return m_uuid; }
  std::string to_string() const;
  operator bool() const { static const xuid_t z = {0}; return std::memcmp(m_uuid, z, sizeof z) != 0; }
  bool operator==(const uuid& rhs) const { return std::memcmp(m_uuid, rhs.m_uuid, sizeof m_uuid) == 0; }
  bool operator!=(const uuid& rhs) const { return !(*this == rhs); }

private:
  xuid_t m_uuid;
};

} // namespace xrt

#endif
