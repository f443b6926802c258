// Calling one op kernel directly from a benchmark (no compiler, one thread): attribute and
// tensor-view helpers and a heap context whose output lives in a buffer allocated once (the
// tests' heap context zero-fills a new output on every call, which would be timed with the
// kernel). Shared by bench/depthwise_conv.cpp and bench/dense_conv.cpp.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tests/kernel_harness.h"

namespace cuvil::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline Attribute ints(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::Ints;
  a.ints = std::move(v);
  return a;
}
inline Attribute integer(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::Int;
  a.i = v;
  return a;
}
inline Attribute text(std::string v) {
  Attribute a;
  a.kind = Attribute::Kind::String;
  a.s = std::move(v);
  return a;
}
inline Attribute real(float v) {
  Attribute a;
  a.kind = Attribute::Kind::Float;
  a.f = v;
  return a;
}

inline rt::TensorView view(std::vector<float>& data, std::vector<int64_t> dims) {
  rt::TensorView v;
  v.dtype = DType::Float;
  v.dims = std::move(dims);
  v.data = data.data();
  return v;
}

class ReusedOutputContext : public cuvil::testing::HeapOpContext {
 public:
  ReusedOutputContext(const Node& node, std::vector<const rt::TensorView*> inputs, std::vector<float>* out)
      : HeapOpContext(node, std::move(inputs), 1, 1), out_(out) {}
  rt::Status allocate_output(size_t i, DType dtype, const std::vector<int64_t>& dims, rt::TensorView** view) override {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    if (i != 0 || dtype != DType::Float || static_cast<size_t>(n) > out_->size())
      return rt::make_status(rt::StatusCode::kInvalidArgument, "unexpected output");
    view_.dtype = dtype;
    view_.dims = dims;
    view_.data = out_->data();
    *view = &view_;
    return rt::Status::ok();
  }

 private:
  std::vector<float>* out_;
  rt::TensorView view_;
};

}  // namespace cuvil::bench
