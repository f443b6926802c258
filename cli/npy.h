// Reading and writing tensors for cuvil-run: NumPy .npy files (format 1.0-3.0, little-endian,
// C order) and ONNX TensorProto .pb files (decoded from the protobuf wire format directly, so
// cuvil-run needs no protobuf library). Every header field and length is checked
// (RELIABILITY.md: huge header length, unknown or big-endian dtype, Fortran order, shape
// product overflow, truncated data); errors name the file. read_npy parses the header and
// checks the size it asks for against the file's before reading or allocating the data;
// read_tensor_pb refuses files over 2 GiB - 1 (protobuf's message limit) before reading them.
// write_npy writes atomically (support/output_file.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cuvil::tools {

struct HostTensor {
  int32_t dtype = 0;  // ONNX TensorProto.DataType
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
};

// Return "" on success, else a message naming the file and the problem.
std::string read_npy(const std::string& path, HostTensor* out);
std::string parse_npy(const std::string& name, const uint8_t* data, size_t size, HostTensor* out);
std::string write_npy(const std::string& path, const HostTensor& t);
std::string read_tensor_pb(const std::string& path, HostTensor* out);
std::string parse_tensor_pb(const std::string& name, const uint8_t* data, size_t size, HostTensor* out);

}  // namespace cuvil::tools
