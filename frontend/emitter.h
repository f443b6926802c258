// The node builder the import-time expansions share (frontend/newer_ops.cpp for opsets 23..28,
// frontend/ml_ops.cpp for ai.onnx.ml): nodes and values named under one prefix, constants, and
// readers of a NodeProto's attributes with ONNX's defaults.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cuvil::frontend {

inline const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const char* name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}
inline int64_t attr_int(const onnx::NodeProto& n, const char* name, int64_t def) {
  const auto* a = find_attr(n, name);
  return a ? a->i() : def;
}
inline float attr_float(const onnx::NodeProto& n, const char* name, float def) {
  const auto* a = find_attr(n, name);
  return a ? a->f() : def;
}
inline std::string input(const onnx::NodeProto& n, int i) { return i < n.input_size() ? n.input(i) : ""; }

// Appends nodes named and valued under one prefix.
class Emitter {
 public:
  Emitter(const std::string& prefix, int64_t opset, std::vector<onnx::NodeProto>* out)
      : opset(opset), prefix_(prefix), out_(out) {}
  const int64_t opset;  // of the default-domain nodes made

  onnx::NodeProto& node(const char* op, std::vector<std::string> ins, std::vector<std::string> outs,
                        const char* domain = "") {
    onnx::NodeProto& p = out_->emplace_back();
    p.set_op_type(op);
    p.set_domain(domain);
    p.set_name(prefix_ + op + "_" + std::to_string(out_->size()));
    for (auto& i : ins) p.add_input(i);
    for (auto& o : outs) p.add_output(o);
    return p;
  }
  // A fresh value name.
  std::string value(const std::string& what) { return prefix_ + what + "_" + std::to_string(count_++); }
  // One node making `op(ins...)`, returning its output's name.
  std::string op(const char* op, std::vector<std::string> ins, const char* domain = "") {
    std::string out = value(op);
    node(op, std::move(ins), {out}, domain);
    return out;
  }
  std::string ints(const std::vector<int64_t>& v) { return constant(v, true); }
  std::string scalar(int64_t v) { return constant({v}, false); }
  std::string constant(const std::vector<int64_t>& v, bool vector) {
    std::string out;
    onnx::TensorProto* t = constant_node(&out);
    t->set_data_type(onnx::TensorProto::INT64);
    if (vector) t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return out;
  }
  // A constant of ONNX element type `elem` and shape `dims` whose elements are the
  // little-endian bytes `raw` (raw_data).
  std::string raw_constant(int elem, const std::vector<int64_t>& dims, std::string raw) {
    std::string out;
    onnx::TensorProto* t = constant_node(&out);
    t->set_data_type(elem);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::move(raw));
    return out;
  }
  // A float32 scalar constant.
  std::string float_scalar(float v) {
    std::string out = value("constf");
    onnx::NodeProto& n = node("Constant", {}, {out});
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name("value_float");
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
    return out;
  }
  static void set_ints(onnx::NodeProto& n, const char* name, const std::vector<int64_t>& v) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void set_int(onnx::NodeProto& n, const char* name, int64_t v) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void set_float(onnx::NodeProto& n, const char* name, float v) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }

 private:
  // A Constant node writing a fresh value (*out): its `value` tensor, to fill.
  onnx::TensorProto* constant_node(std::string* out) {
    *out = value("const");
    onnx::AttributeProto* a = node("Constant", {}, {*out}).add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    return a->mutable_t();
  }

  std::string prefix_;
  std::vector<onnx::NodeProto>* out_;
  int count_ = 0;
};

}  // namespace cuvil::frontend
