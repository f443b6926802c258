// A minimal .npy writer for tests (format 1.0, little-endian, C order) and the raw-bytes
// helpers that go with it, shared by the tests that feed cuvil-run inputs as files.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace cuvil::test {

// The bytes of a .npy file: `descr` is numpy's dtype string ("<f4", "<i8"), `data` the raw
// elements in C order; the header is padded so the data starts on a 64-byte boundary.
inline std::string npy_file(const std::string& descr, const std::vector<int64_t>& dims, const std::string& data) {
  std::string shape = "(";
  for (size_t i = 0; i < dims.size(); ++i) shape += (i ? ", " : "") + std::to_string(dims[i]);
  if (dims.size() == 1) shape += ",";
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
std::vector<T> values(const std::string& data) {
  std::vector<T> v(data.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), data.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace cuvil::test
