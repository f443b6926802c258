// Helpers shared by the shape-rule unit tests (tests/shape_rules_*_test.cpp): attribute and
// constant-tensor constructors, the printed form of a value's shape, and GraphBuilder, which
// builds a Model by hand (graph inputs, initializers, nodes), runs cuvil::infer_shapes on it and
// prints what it found. Header-only; everything is inline so several test files can include it
// into the one test binary.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/infer_shapes.h"
#include "support/error.h"

namespace cuvil::shape_test {

// ---- attributes --------------------------------------------------------------------------------

inline Attribute int_attr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::Int;
  a.i = v;
  return a;
}
inline Attribute ints_attr(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::Ints;
  a.ints = std::move(v);
  return a;
}
inline Attribute float_attr(float v) {
  Attribute a;
  a.kind = Attribute::Kind::Float;
  a.f = v;
  return a;
}
inline Attribute floats_attr(std::vector<float> v) {
  Attribute a;
  a.kind = Attribute::Kind::Floats;
  a.floats = std::move(v);
  return a;
}
inline Attribute string_attr(std::string v) {
  Attribute a;
  a.kind = Attribute::Kind::String;
  a.s = std::move(v);
  return a;
}
inline Attribute tensor_attr(std::shared_ptr<TensorData> t) {
  Attribute a;
  a.kind = Attribute::Kind::Tensor;
  a.t = std::move(t);
  return a;
}
inline Attribute graph_attr(std::shared_ptr<Graph> g) {
  Attribute a;
  a.kind = Attribute::Kind::Graph;
  a.g = std::move(g);
  return a;
}

// ---- printed shapes ----------------------------------------------------------------------------

// "[batch, 64, ?]" ("?" for an unknown dim), or "unranked".
inline std::string shape_string(const Value& v) {
  if (!v.shape) return "unranked";
  std::string out = "[";
  for (size_t k = 0; k < v.shape->size(); ++k) {
    if (k) out += ", ";
    out += (*v.shape)[k] ? (*v.shape)[k]->to_string() : "?";
  }
  return out + "]";
}

// ---- hand-built graphs -------------------------------------------------------------------------

// A dim in test notation: an integer, a symbol name, or "?" for unknown.
struct DimSpec {
  Dim d;
  DimSpec(int v) : d(DimExpr(static_cast<int64_t>(v))) {}  // NOLINT: test shorthand
  DimSpec(int64_t v) : d(DimExpr(v)) {}                     // NOLINT
  DimSpec(const char* s) : d(std::string(s) == "?" ? Dim() : Dim(DimExpr::symbol(s))) {}  // NOLINT
};

template <typename T>
inline std::shared_ptr<TensorData> tensor(DType dtype, std::vector<int64_t> dims, std::vector<T> v) {
  auto t = std::make_shared<TensorData>();
  t->dtype = dtype;
  t->dims = std::move(dims);
  t->bytes.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(t->bytes.data(), v.data(), t->bytes.size());
  return t;
}

// Builds a Model by hand: graph inputs, constant initializers and nodes (opset 17 unless
// stated), then runs shape inference and prints what it found.
class GraphBuilder {
 public:
  GraphBuilder() {
    model.graph = std::make_shared<Graph>();
    model.opset_imports[""] = 17;
  }
  Graph& g() { return *model.graph; }

  ValueId input(const std::string& name, DType t, std::vector<DimSpec> dims) {
    ValueId id = g().add_value(name);
    Value& v = g().value(id);
    v.dtype = t;
    v.shape = Shape{};
    for (const DimSpec& d : dims) v.shape->push_back(d.d);
    g().inputs.push_back(id);
    return id;
  }
  ValueId unranked(const std::string& name, DType t) {
    ValueId id = g().add_value(name);
    g().value(id).dtype = t;
    g().inputs.push_back(id);
    return id;
  }
  ValueId initializer(const std::string& name, std::shared_ptr<TensorData> t) {
    ValueId id = g().add_value(name);
    Value& v = g().value(id);
    v.dtype = t->dtype;
    v.shape = Shape{};
    for (int64_t d : t->dims) v.shape->push_back(DimExpr(d));
    v.data = std::move(t);
    v.is_initializer = true;
    return id;
  }
  ValueId i64(const std::string& name, std::vector<int64_t> v) {
    int64_t n = static_cast<int64_t>(v.size());
    return initializer(name, tensor<int64_t>(DType::Int64, {n}, std::move(v)));
  }
  ValueId i64_scalar(const std::string& name, int64_t v) {
    return initializer(name, tensor<int64_t>(DType::Int64, {}, {v}));
  }

  // Adds node `name`; its outputs are values "<name>:0", "<name>:1", ...
  std::vector<ValueId> node(const std::string& name, OpKind op, std::vector<ValueId> ins,
                            size_t n_out = 1, std::map<std::string, Attribute> attrs = {},
                            int opset = 17) {
    Node n;
    n.op = op;
    n.op_type = op_name(op);
    n.opset = opset;
    n.name = name;
    n.inputs = std::move(ins);
    n.attrs = std::move(attrs);
    for (size_t k = 0; k < n_out; ++k) {
      ValueId id = g().add_value(name + ":" + std::to_string(k));
      g().value(id).producer = static_cast<int32_t>(g().nodes.size());
      n.outputs.push_back(id);
    }
    g().nodes.push_back(std::move(n));
    return g().nodes.back().outputs;
  }
  ValueId op(const std::string& name, OpKind op, std::vector<ValueId> ins,
             std::map<std::string, Attribute> attrs = {}, int opset = 17) {
    return node(name, op, std::move(ins), 1, std::move(attrs), opset)[0];
  }

  void infer() { infer_shapes(model); }

  const Value& v(ValueId id) { return g().value(id); }
  std::string dims(ValueId id) { return shape_string(v(id)); }
  std::string data(ValueId id) {
    const Value& val = v(id);
    if (!val.sym_data) return "none";
    std::string out = "{";
    for (size_t k = 0; k < val.sym_data->size(); ++k) {
      if (k) out += ", ";
      out += (*val.sym_data)[k].to_string();
    }
    return out + "}";
  }

  Model model;
};

// Shape(x) -> Gather(index) as a scalar: how exporters read one dim.
inline ValueId dim_of(GraphBuilder& b, ValueId shape, int64_t index, const std::string& name) {
  return b.op(name, OpKind::Gather, {shape, b.i64_scalar(name + "_idx", index)});
}

// Expects infer_shapes to fail with an invalid-model diagnostic naming the node.
inline void expect_failure(GraphBuilder& b, const std::string& node, const std::string& detail) {
  try {
    b.infer();
    ADD_FAILURE() << "no diagnostic; expected one naming '" << node << "'";
  } catch (const Diagnostic& d) {
    std::string msg = d.what();
    EXPECT_EQ(d.code(), ExitCode::kInvalidModel) << msg;
    EXPECT_NE(msg.find("'" + node + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(detail), std::string::npos) << msg;
  }
}

}  // namespace cuvil::shape_test
