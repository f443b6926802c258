// Helpers for tests that compile small ONNX models in-process (tests/compile_in_process.h),
// load them through the public C API and run them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "compile_in_process.h"
#include "cuvil.h"
#include "onnx_builder.h"

namespace cuvil::test {

using Tp = onnx::TensorProto;
inline constexpr cuvil_dtype kF32 = 1, kI64 = 7;

// A graph input/output with an element type and no shape (subgraph bodies leave their shapes
// to inference).
inline void typed(onnx::ValueInfoProto* vi, const std::string& name, int32_t elem) {
  vi->set_name(name);
  vi->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
}

// ---- compiling and loading ----

// Compiles `m` the way `cuvilc compile` does. `dims` are --dim options ("batch=1:4").
inline std::vector<uint8_t> compile(const onnx::ModelProto& m, const std::vector<std::string>& dims = {},
                                    bool fuse = true) {
  return compile_package(m, dims, fuse);
}

// Checks a status (and frees it): its code, and that its message names every needle.
inline ::testing::AssertionResult Fails(cuvil_status st, cuvil_status_code code,
                                 std::initializer_list<std::string> needles = {}) {
  if (!st) return ::testing::AssertionFailure() << "succeeded; expected status code " << code;
  cuvil_status_code got = cuvil_status_code_of(st);
  std::string msg = cuvil_status_message(st);
  cuvil_status_free(st);
  if (got != code)
    return ::testing::AssertionFailure() << "expected status code " << code << ", got " << got << ": " << msg;
  for (const auto& n : needles)
    if (msg.find(n) == std::string::npos)
      return ::testing::AssertionFailure() << "message does not mention '" << n << "': " << msg;
  return ::testing::AssertionSuccess() << msg;
}

inline ::testing::AssertionResult Ok(cuvil_status st) {
  if (!st) return ::testing::AssertionSuccess();
  std::string msg = cuvil_status_message(st);
  int code = cuvil_status_code_of(st);
  cuvil_status_free(st);
  return ::testing::AssertionFailure() << "status " << code << ": " << msg;
}

struct ModelDeleter {
  void operator()(cuvil_model* m) const { cuvil_model_release(m); }
};
struct SessionDeleter {
  void operator()(cuvil_session* s) const { cuvil_session_release(s); }
};
using ModelPtr = std::unique_ptr<cuvil_model, ModelDeleter>;
using SessionPtr = std::unique_ptr<cuvil_session, SessionDeleter>;

inline ModelPtr load(const std::vector<uint8_t>& package) {
  cuvil_model* m = nullptr;
  cuvil_status st = cuvil_model_load_memory(package.data(), package.size(), &m);
  EXPECT_TRUE(Ok(st));
  return ModelPtr(m);
}

inline SessionPtr open_session(cuvil_model* model, int threads = 2) {
  cuvil_session_options o;
  cuvil_session_options_init(&o);
  o.threads = threads;
  cuvil_session* s = nullptr;
  EXPECT_TRUE(Ok(cuvil_session_create(model, &o, &s)));
  return SessionPtr(s);
}

inline cuvil_status set_f32(cuvil_session* s, const char* name, const std::vector<int64_t>& dims,
                     const std::vector<float>& data) {
  return cuvil_session_set_input(s, name, kF32, static_cast<int32_t>(dims.size()), dims.data(), data.data(),
                                 data.size() * sizeof(float));
}

template <typename T>
std::vector<T> output(cuvil_session* s, size_t index, std::vector<int64_t>* dims = nullptr) {
  cuvil_tensor_info info;
  const void* data = nullptr;
  size_t bytes = 0;
  EXPECT_TRUE(Ok(cuvil_session_get_output(s, index, &info, &data, &bytes)));
  if (dims) dims->assign(info.dims, info.dims + info.rank);
  std::vector<T> v(bytes / sizeof(T));
  if (bytes) std::memcpy(v.data(), data, bytes);
  return v;
}

}  // namespace cuvil::test
