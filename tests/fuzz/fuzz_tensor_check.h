// What cuvil-run relies on in a tensor its readers accepted (fuzz_npy.cpp, fuzz_pb.cpp): no
// negative dim, a shape product that fits, and exactly numel x element size bytes.
#pragma once

#include <cstdint>
#include <string>

#include "cli/npy.h"

namespace cuvil::fuzz {

// Element sizes of the ONNX data types the readers accept (cli/npy.cpp kTypes); 0 = other.
inline uint64_t host_element_size(int32_t onnx_dtype) {
  switch (onnx_dtype) {
    case 2: case 3: case 9: return 1;
    case 4: case 5: case 10: return 2;
    case 1: case 6: case 12: return 4;
    case 7: case 11: case 13: case 14: return 8;
    case 15: return 16;
    default: return 0;
  }
}

inline std::string check_host_tensor(const tools::HostTensor& t) {
  const uint64_t elem = host_element_size(t.dtype);
  if (elem == 0) return "accepted data_type " + std::to_string(t.dtype);
  uint64_t numel = 1;
  for (int64_t d : t.dims) {
    if (d < 0) return "accepted a negative dim " + std::to_string(d);
    if (d != 0 && numel > UINT64_MAX / static_cast<uint64_t>(d)) return "accepted an overflowing shape";
    numel *= static_cast<uint64_t>(d);
  }
  if (numel > UINT64_MAX / elem || t.bytes.size() != numel * elem)
    return "accepted " + std::to_string(t.bytes.size()) + " bytes for " + std::to_string(numel) +
           " elements of size " + std::to_string(elem);
  return "";
}

}  // namespace cuvil::fuzz
