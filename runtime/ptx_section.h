// The PTX section of a package (kind 9, runtime/sections.def; docs/format.md "PTX"): per GPU
// target the megakernel's PTX text (docs/ptx.md). Optional: a package without it runs on the
// CPU, and a runtime may use the megakernel built into it instead. PTX is code, so the loader
// checks the section's structure with the rest of the package and keeps it only from a
// package that verified completely.
//
// Layout (little-endian): u32 record count (1..16); per record u32 target (SM number, 80 for
// sm_80), u32 PTX ISA version (major x 10 + minor, 70 for 7.0), then the text as u32 length
// (>= 1) and that many bytes, with no NUL among them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace cuvil::rt {

struct PtxRecord {
  uint32_t target = 80;       // SM number
  uint32_t ptx_version = 70;  // major * 10 + minor
  std::string text;
};

constexpr uint32_t kMaxPtxRecords = 16;

std::vector<uint8_t> encode_ptx_section(const std::vector<PtxRecord>& records);
// kInvalidPackage with a message starting "PTX section: " on malformed bytes.
Status decode_ptx_section(const uint8_t* data, size_t size, std::vector<PtxRecord>* out);

}  // namespace cuvil::rt
