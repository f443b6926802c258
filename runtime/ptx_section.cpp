#include "runtime/ptx_section.h"

#include <cstring>

#include "runtime/byte_reader.h"

namespace cuvil::rt {

std::vector<uint8_t> encode_ptx_section(const std::vector<PtxRecord>& records) {
  std::vector<uint8_t> out;
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  u32(static_cast<uint32_t>(records.size()));
  for (const PtxRecord& r : records) {
    u32(r.target);
    u32(r.ptx_version);
    u32(static_cast<uint32_t>(r.text.size()));
    out.insert(out.end(), r.text.begin(), r.text.end());
  }
  return out;
}

Status decode_ptx_section(const uint8_t* data, size_t size, std::vector<PtxRecord>* out) {
  ByteReader r(data, size);
  const uint32_t n = r.count(12);  // target, version, text length
  if (r.failed()) return make_status(StatusCode::kInvalidPackage, "PTX section: truncated record count");
  if (n == 0 || n > kMaxPtxRecords)
    return make_status(StatusCode::kInvalidPackage, "PTX section: ", n, " records (must be 1 to ", kMaxPtxRecords, ")");
  std::vector<PtxRecord> records(n);
  for (uint32_t i = 0; i < n; ++i) {
    records[i].target = r.u32();
    records[i].ptx_version = r.u32();
    records[i].text = r.str();
    if (r.failed()) return make_status(StatusCode::kInvalidPackage, "PTX section: record ", i, " is truncated");
    if (records[i].text.empty() || std::memchr(records[i].text.data(), 0, records[i].text.size()))
      return make_status(StatusCode::kInvalidPackage, "PTX section: record ", i, " text is empty or holds a NUL byte");
    if (records[i].target < 80)
      return make_status(StatusCode::kInvalidPackage, "PTX section: record ", i, " targets sm_", records[i].target,
                         " (the megakernel needs sm_80 or newer)");
  }
  if (r.remaining() != 0)
    return make_status(StatusCode::kInvalidPackage, "PTX section: ", r.remaining(), " bytes after the last record");
  *out = std::move(records);
  return Status::ok();
}

}  // namespace cuvil::rt
