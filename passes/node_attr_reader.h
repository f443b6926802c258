// The attributes of an IR Node as the runtime's kernels read them (runtime/op_kernel.h), so a
// whole-tensor kernel can run on IR constants: constant folding (passes/fold_constants.h)
// evaluates nodes this way, and the kernel tests run single nodes with it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "runtime/op_kernel.h"

namespace cuvil {

inline rt::TensorView view_of(const TensorData& t) {
  rt::TensorView v;
  v.dtype = t.dtype;
  v.dims = t.dims;
  v.data = const_cast<uint8_t*>(t.bytes.data());
  return v;
}

class NodeAttrReader : public rt::AttrReader {
 public:
  explicit NodeAttrReader(const Node& node) : node_(node) {
    for (const auto& [k, a] : node.attrs)
      if (a.kind == Attribute::Kind::Tensor && a.t) tensors_.emplace_back(k, view_of(*a.t));
  }
  bool has(const char* name) const override { return node_.attr(name) != nullptr; }
  int64_t get_int(const char* name, int64_t fallback) const override {
    const Attribute* a = node_.attr(name);
    return a && a->kind == Attribute::Kind::Int ? a->i : fallback;
  }
  float get_float(const char* name, float fallback) const override {
    const Attribute* a = node_.attr(name);
    if (!a) return fallback;
    if (a->kind == Attribute::Kind::Float) return a->f;
    if (a->kind == Attribute::Kind::Int) return static_cast<float>(a->i);
    return fallback;
  }
  std::string get_string(const char* name, const std::string& fallback) const override {
    const Attribute* a = node_.attr(name);
    return a && a->kind == Attribute::Kind::String ? a->s : fallback;
  }
  std::vector<int64_t> get_ints(const char* name) const override {
    const Attribute* a = node_.attr(name);
    return a && a->kind == Attribute::Kind::Ints ? a->ints : std::vector<int64_t>{};
  }
  std::vector<float> get_floats(const char* name) const override {
    const Attribute* a = node_.attr(name);
    return a && a->kind == Attribute::Kind::Floats ? a->floats : std::vector<float>{};
  }
  std::vector<std::string> get_strings(const char* name) const override {
    const Attribute* a = node_.attr(name);
    return a && a->kind == Attribute::Kind::Strings ? a->strings : std::vector<std::string>{};
  }
  const rt::TensorView* get_tensor(const char* name) const override {
    for (const auto& [k, v] : tensors_)
      if (k == name) return &v;
    return nullptr;
  }

 private:
  const Node& node_;
  std::vector<std::pair<std::string, rt::TensorView>> tensors_;
};

}  // namespace cuvil
