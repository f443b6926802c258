// Test harness for whole-tensor CPU kernels (runtime/op_kernel.h) without the compiler: runs
// one kernel over heap tensors, with attributes taken from an imported IR Node. Used by the
// kernel conformance test (single-node ONNX backend cases) and by kernel unit tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ir/graph.h"
#include "passes/node_attr_reader.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/op_kernel.h"
#include "support/checked.h"

namespace cuvil::testing {

using cuvil::NodeAttrReader;
using cuvil::view_of;


// Heap-backed context: outputs are allocated as asked, no compiled shapes to check against.
class HeapOpContext : public rt::OpContext {
 public:
  HeapOpContext(const Node& node, std::vector<const rt::TensorView*> inputs, size_t num_outputs,
                int threads = 1)
      : node_(node), attrs_(node), inputs_(std::move(inputs)), outputs_(num_outputs),
        storage_(num_outputs), threads_(threads) {}
  const char* op_name() const override { return node_.op_type.c_str(); }
  const char* node_name() const override { return node_.name.c_str(); }
  int opset() const override { return node_.opset; }
  const rt::AttrReader& attrs() const override { return attrs_; }
  size_t num_inputs() const override { return inputs_.size(); }
  const rt::TensorView* input(size_t i) const override {
    return i < inputs_.size() ? inputs_[i] : nullptr;
  }
  size_t num_outputs() const override { return outputs_.size(); }
  bool output_wanted(size_t i) const override {
    return i < node_.outputs.size() && node_.outputs[i] != kNoValue;
  }
  rt::Status allocate_output(size_t i, DType dtype, const std::vector<int64_t>& dims,
                             rt::TensorView** out) override {
    if (i >= outputs_.size())
      return rt::make_status(rt::StatusCode::kInvalidArgument, "output ", i, " out of range");
    outputs_[i].dtype = dtype;
    outputs_[i].dims = dims;
    storage_[i].assign(outputs_[i].bytes() + 64, 0);  // slack catches small overruns in tests
    outputs_[i].data = storage_[i].data();
    *out = &outputs_[i];
    return rt::Status::ok();
  }
  int threads() const override { return threads_; }
  void parallel_for(int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t),
                    void* arg) override {
    if (n > 0) fn(arg, 0, n);
  }
  const rt::TensorView& output(size_t i) const { return outputs_[i]; }

 private:
  const Node& node_;
  NodeAttrReader attrs_;
  std::vector<const rt::TensorView*> inputs_;
  std::vector<rt::TensorView> outputs_;
  std::vector<std::vector<uint8_t>> storage_;
  int threads_;
};

// A constant tensor of `bytes` raw bytes (dtype's elements in order) for an op kernel's inputs.
inline TensorData tensor_bytes(DType dtype, std::vector<int64_t> dims, const void* data, size_t bytes) {
  TensorData t;
  t.dtype = dtype;
  t.dims = std::move(dims);
  t.bytes.resize(bytes);
  if (bytes) std::memcpy(t.bytes.data(), data, bytes);
  return t;
}

// ONNX 1.12's backend test data stores the bfloat16 tensors of test_cast_BFLOAT16_to_FLOAT,
// test_cast_FLOAT_to_BFLOAT16 and test_castlike_*BFLOAT16* as TensorProtos of data_type UINT16
// holding the raw bit patterns, while the model declares the value bfloat16 (a quirk of that
// release; later ones store BFLOAT16). Retags such a tensor as bfloat16, bytes unchanged, exactly
// when the model declares it bfloat16, the tensor is uint16 with 2 bytes per element and, where
// the declared shape is static, the element counts agree. Anything else is left alone, so a
// genuine dtype mismatch still fails the comparison. Test code only: cuvil-run and the runtime
// take tensors as they are.
inline void adopt_uint16_as_bfloat16(TensorData& t, DType declared_dtype,
                                     const std::optional<Shape>& declared_shape) {
  if (declared_dtype != DType::BFloat16 || t.dtype != DType::UInt16) return;
  const int64_t n = t.numel();
  if (t.bytes.size() != static_cast<size_t>(n) * 2) return;
  if (declared_shape) {
    std::optional<int64_t> declared_n = 1;
    for (const Dim& d : *declared_shape) {
      auto c = d ? d->constant() : std::nullopt;
      declared_n = c && declared_n ? checked_mul(*declared_n, *c) : std::nullopt;
    }
    if (declared_n && *declared_n != n) return;  // symbolic or unknown dims: no count to compare
  }
  t.dtype = DType::BFloat16;
}
inline void adopt_uint16_as_bfloat16(TensorData& t, const Value& declared) {
  adopt_uint16_as_bfloat16(t, declared.dtype, declared.shape);
}

// Compares an actual output with the expected tensor: rtol 1e-3 / atol 1e-7 for floats (NaN
// equals NaN, infinities must match), exact for integers and bools. Returns "" when equal.
inline double element_as_double(DType t, const void* data, int64_t i) {
  auto half_to_float = [](uint16_t h) {
    uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float f;
    if (exp == 0) f = std::ldexp(static_cast<float>(mant), -24);
    else if (exp == 31) f = mant ? NAN : INFINITY;
    else f = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
    return sign ? -f : f;
  };
  const uint8_t* p = static_cast<const uint8_t*>(data);
  switch (t) {
    case DType::Float: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::Double: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
    case DType::Float16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return half_to_float(v); }
    case DType::BFloat16: {
      uint16_t v; std::memcpy(&v, p + 2 * i, 2);
      uint32_t bits = static_cast<uint32_t>(v) << 16; float f; std::memcpy(&f, &bits, 4); return f;
    }
    case DType::Int8: return static_cast<int8_t>(p[i]);
    case DType::UInt8: case DType::Bool: return p[i];
    case DType::Int16: { int16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case DType::UInt16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case DType::Int32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::UInt32: { uint32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::Int64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    case DType::UInt64: { uint64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    default: return NAN;
  }
}

inline std::string compare_tensors(const rt::TensorView& actual, const TensorData& expected) {
  if (actual.dtype != expected.dtype)
    return std::string("dtype ") + dtype_name(actual.dtype) + " vs expected " + dtype_name(expected.dtype);
  if (actual.dims != expected.dims) {
    std::string s = "shape [";
    for (size_t i = 0; i < actual.dims.size(); ++i) s += (i ? "," : "") + std::to_string(actual.dims[i]);
    s += "] vs expected [";
    for (size_t i = 0; i < expected.dims.size(); ++i) s += (i ? "," : "") + std::to_string(expected.dims[i]);
    return s + "]";
  }
  if (expected.dtype == DType::String) return "string tensors are not compared";
  const int64_t n = expected.numel();
  const bool exact = !dtype_is_float(expected.dtype);
  if (exact || dtype_bits(expected.dtype) < 8) {
    if (actual.bytes() != expected.bytes.size() ||
        (n > 0 && std::memcmp(actual.data, expected.bytes.data(), expected.bytes.size()) != 0)) {
      for (int64_t i = 0; i < n; ++i) {
        double a = element_as_double(actual.dtype, actual.data, i);
        double e = element_as_double(expected.dtype, expected.bytes.data(), i);
        if (a != e) return "element " + std::to_string(i) + ": " + std::to_string(a) + " vs expected " + std::to_string(e);
      }
      return "bytes differ";
    }
    return "";
  }
  for (int64_t i = 0; i < n; ++i) {
    double a = element_as_double(actual.dtype, actual.data, i);
    double e = element_as_double(expected.dtype, expected.bytes.data(), i);
    if (std::isnan(e) && std::isnan(a)) continue;
    if (std::isinf(e) || std::isinf(a)) {
      if (a == e) continue;
    } else if (std::fabs(a - e) <= 1e-7 + 1e-3 * std::fabs(e)) {
      continue;
    }
    return "element " + std::to_string(i) + ": " + std::to_string(a) + " vs expected " + std::to_string(e);
  }
  return "";
}

// The heap context, but parallel_for hands the range out in `chunks` pieces, last first (as
// workers could), so that task splits inside a kernel are exercised (threads() says chunks).
class ChunkedContext : public HeapOpContext {
 public:
  ChunkedContext(const Node& node, std::vector<const rt::TensorView*> inputs, int chunks)
      : HeapOpContext(node, std::move(inputs), 1, chunks), chunks_(chunks) {}
  void parallel_for(int64_t n, int64_t, void (*fn)(void*, int64_t, int64_t), void* arg) override {
    const int64_t step = std::max<int64_t>(1, (n + chunks_ - 1) / chunks_);
    for (int64_t begin = ((n - 1) / step) * step; begin >= 0; begin -= step) fn(arg, begin, std::min(n, begin + step));
  }

 private:
  int chunks_;
};

// Restores the active CPU kernel path when the scope ends (tests force each path in turn).
struct CpuPathGuard {
  rt::CpuPath saved = rt::active_cpu_path();
  ~CpuPathGuard() { rt::set_cpu_path_for_testing(saved); }
};

// fn(n) on every CPU path this machine supports, for n = 1 and 3 (threads or chunks).
template <typename Fn> void on_every_cpu_path(Fn&& fn) {
  CpuPathGuard guard;
  for (rt::CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    SCOPED_TRACE(rt::cpu_path_name(path));
    for (int n : {1, 3}) {
      SCOPED_TRACE(n);
      fn(n);
    }
  }
}

}  // namespace cuvil::testing
