// ONNX ops of opsets 23..28 as cuvil's fused ops at import (see newer_ops.h). Each expansion is
// checked against the ONNX reference implementation (onnx/reference/ops/op_*.py of onnx 1.23)
// by the wheel's node cases (ConformanceWheel) and by tests/frontend_newer_ops_test.cpp.
#include "frontend/newer_ops.h"

#include <cstdint>
#include <limits>

namespace cuvil::frontend {
namespace {

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const char* name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}
int64_t attr_int(const onnx::NodeProto& n, const char* name, int64_t def) {
  const auto* a = find_attr(n, name);
  return a ? a->i() : def;
}
float attr_float(const onnx::NodeProto& n, const char* name, float def) {
  const auto* a = find_attr(n, name);
  return a ? a->f() : def;
}
std::string input(const onnx::NodeProto& n, int i) { return i < n.input_size() ? n.input(i) : ""; }

// Appends nodes named and valued under one prefix.
class Emitter {
 public:
  Emitter(const std::string& prefix, std::vector<onnx::NodeProto>* out) : prefix_(prefix), out_(out) {}

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
    std::string out = value("const");
    onnx::NodeProto& n = node("Constant", {}, {out});
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    onnx::TensorProto* t = a->mutable_t();
    t->set_data_type(onnx::TensorProto::INT64);
    if (vector) t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return out;
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
  std::string prefix_;
  std::vector<onnx::NodeProto>* out_;
  int count_ = 0;
};

// Y = X / sqrt(mean(X^2 over [axis, rank)) + epsilon) * scale, in float (stash_type 1): exactly
// cuvil::RMSNorm.
bool rms_normalization(const onnx::NodeProto& n, Emitter& e, std::string* why) {
  if (attr_int(n, "stash_type", 1) != 1) {
    *why = "stash_type " + std::to_string(attr_int(n, "stash_type", 1)) + " (only 1, float, is supported)";
    return false;
  }
  onnx::NodeProto& r = e.node("RMSNorm", {input(n, 0), input(n, 1)}, {n.output(0)}, "cuvil");
  Emitter::set_int(r, "axis", attr_int(n, "axis", -1));
  Emitter::set_float(r, "epsilon", attr_float(n, "epsilon", 1e-5f));
  return true;
}

// Y = X * sigmoid(alpha * X): cuvil::SiLU.
bool swish(const onnx::NodeProto& n, Emitter& e, std::string*) {
  onnx::NodeProto& s = e.node("SiLU", {input(n, 0)}, {n.output(0)}, "cuvil");
  Emitter::set_float(s, "alpha", attr_float(n, "alpha", 1.0f));
  return true;
}

// Y = A * sigmoid(alpha * A) * B (A and B of one shape): cuvil::SwiGLU for alpha 1, else
// cuvil::SiLU and Mul.
bool swiglu(const onnx::NodeProto& n, Emitter& e, std::string*) {
  const float alpha = attr_float(n, "alpha", 1.0f);
  if (alpha == 1.0f) {
    e.node("SwiGLU", {input(n, 0), input(n, 1)}, {n.output(0)}, "cuvil");
    return true;
  }
  std::string gate = e.value("silu");
  Emitter::set_float(e.node("SiLU", {input(n, 0)}, {gate}, "cuvil"), "alpha", alpha);
  e.node("Mul", {gate, input(n, 1)}, {n.output(0)});
  return true;
}

// RotaryEmbedding(X, cos_cache, sin_cache, position_ids?): X is [B, H, S, D], or [B, S, H*D]
// with num_heads; the caches are [max_pos, r/2] indexed by position_ids [B, S], or [B, S, r/2]
// without them; the first r = rotary_embedding_dim (0: D) entries of each head rotate, pairing
// halves (interleaved 0) or neighbours (1). As cuvil::Rotary, whose cos and sin span the rotated
// width: the cache rows are repeated (halves: concatenated; neighbours: each entry twice) and get
// a heads axis of 1 ([B, 1, S, r] for 4-D X; for 3-D X the heads are split off as [B, S, H, D]
// and the caches are [B, S, 1, r]).
bool rotary_embedding(const onnx::NodeProto& n, Emitter& e, std::string* why) {
  const int64_t interleaved = attr_int(n, "interleaved", 0);
  const int64_t heads = attr_int(n, "num_heads", 0);
  const int64_t rdim = attr_int(n, "rotary_embedding_dim", 0);
  if (interleaved != 0 && interleaved != 1) {
    *why = "interleaved " + std::to_string(interleaved) + " (must be 0 or 1)";
    return false;
  }
  if (heads < 0 || rdim < 0 || (rdim % 2) != 0) {
    *why = "num_heads " + std::to_string(heads) + " / rotary_embedding_dim " + std::to_string(rdim) +
           " (must be >= 0, the rotated width even)";
    return false;
  }
  const std::string x = input(n, 0), pos = input(n, 3);
  // With num_heads the input is taken as 3-D; ONNX requires num_heads for 3-D inputs and
  // ignores it for 4-D ones, which the importer cannot tell apart without ranks: a 4-D input
  // with num_heads fails the Reshape's shape check at run time rather than being misread.
  const bool three_d = heads > 0;
  std::string caches[2];
  for (int k = 0; k < 2; ++k) {
    std::string c = input(n, 1 + k);
    if (!pos.empty()) c = e.op("Gather", {c, pos});  // [B, S, r/2]
    if (interleaved) {
      std::string u = e.op("Unsqueeze", {c, e.ints({-1})});  // [B, S, r/2, 1]
      std::string pairs = e.value("pairs");
      Emitter::set_int(e.node("Concat", {u, u}, {pairs}), "axis", -1);  // [B, S, r/2, 2]
      c = e.op("Reshape", {pairs, e.ints({0, 0, -1})});
    } else {
      std::string cc = e.value("halves");
      Emitter::set_int(e.node("Concat", {c, c}, {cc}), "axis", -1);
      c = cc;
    }
    caches[k] = e.op("Unsqueeze", {c, e.ints({three_d ? 2 : 1})});
  }
  std::string xs = three_d ? e.op("Reshape", {x, e.ints({0, 0, heads, -1})}) : x;
  std::string y = three_d ? e.value("rotated") : n.output(0);
  if (rdim == 0) {
    Emitter::set_int(e.node("Rotary", {xs, caches[0], caches[1]}, {y}, "cuvil"), "interleaved", interleaved);
  } else {
    const std::string axis = e.ints({-1});
    std::string head = e.op("Slice", {xs, e.ints({0}), e.ints({rdim}), axis});
    std::string tail = e.op("Slice", {xs, e.ints({rdim}), e.ints({std::numeric_limits<int64_t>::max()}), axis});
    std::string turned = e.value("turned");
    Emitter::set_int(e.node("Rotary", {head, caches[0], caches[1]}, {turned}, "cuvil"), "interleaved", interleaved);
    Emitter::set_int(e.node("Concat", {turned, tail}, {y}), "axis", -1);
  }
  if (three_d) e.node("Reshape", {y, e.ints({0, 0, -1})}, {n.output(0)});
  return true;
}

// TensorScatter(past_cache, update, write_indices?) (24): update's entries s along `axis` go to
// past_cache's entries write_indices[b] + s (mod the axis length when mode is "circular"), b
// the index along axis 0. As ScatterElements with those indices, made for every element of
// update: s counted by an exclusive CumSum of ones along the axis, write_indices reshaped to
// [B, 1, ...] (the rank taken from update's shape at run time: the importer knows no ranks).
bool tensor_scatter(const onnx::NodeProto& n, Emitter& e, std::string* why) {
  const auto* mode_attr = find_attr(n, "mode");
  const std::string mode = mode_attr ? mode_attr->s() : "linear";
  if (mode != "linear" && mode != "circular") {
    *why = "mode '" + mode + "' (must be 'linear' or 'circular')";
    return false;
  }
  const int64_t axis = attr_int(n, "axis", -2);
  const std::string past = input(n, 0), update = input(n, 1), writes = input(n, 2);
  const std::string shape = e.op("Shape", {update});
  const std::string one = e.value("one");
  {
    onnx::NodeProto& c = e.node("ConstantOfShape", {shape}, {one});
    onnx::AttributeProto* a = c.add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
    a->mutable_t()->add_dims(1);
    a->mutable_t()->add_int64_data(1);
  }
  std::string index = e.value("seq");
  Emitter::set_int(e.node("CumSum", {one, e.scalar(axis)}, {index}), "exclusive", 1);
  if (!writes.empty()) {
    const std::string rest = e.op("Sub", {e.op("Shape", {shape}), e.ints({1})});  // [rank - 1]
    const std::string ones = e.value("ones");
    {
      onnx::NodeProto& c = e.node("ConstantOfShape", {rest}, {ones});
      onnx::AttributeProto* a = c.add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
      a->mutable_t()->add_dims(1);
      a->mutable_t()->add_int64_data(1);
    }
    const std::string target = e.value("target");
    Emitter::set_int(e.node("Concat", {e.ints({-1}), ones}, {target}), "axis", 0);
    index = e.op("Add", {e.op("Reshape", {writes, target}), index});
  }
  if (mode == "circular") {
    const std::string length = e.value("length");
    e.node("Gather", {e.op("Shape", {past}), e.scalar(axis)}, {length});
    index = e.op("Mod", {index, length});
  }
  Emitter::set_int(e.node("ScatterElements", {past, index, update}, {n.output(0)}), "axis", axis);
  return true;
}

struct NewerOp {
  const char* op_type;
  int64_t since;  // the default-domain opset that introduced it
  bool (*expand)(const onnx::NodeProto&, Emitter&, std::string*);
  int min_inputs, max_inputs;
};

constexpr NewerOp kNewerOps[] = {
    {"RMSNormalization", 23, rms_normalization, 2, 2},
    {"RotaryEmbedding", 23, rotary_embedding, 3, 4},
    {"Swish", 24, swish, 1, 1},
    {"TensorScatter", 24, tensor_scatter, 2, 3},
    {"SwiGLU", 28, swiglu, 2, 2},
};

}  // namespace

bool expand_newer_op(const onnx::NodeProto& node, int64_t opset, const std::string& prefix,
                     std::vector<onnx::NodeProto>* out, std::string* why) {
  if (!(node.domain().empty() || node.domain() == "ai.onnx")) return false;
  for (const NewerOp& op : kNewerOps) {
    if (node.op_type() != op.op_type || opset < op.since) continue;
    int given = node.input_size();
    while (given > 0 && node.input(given - 1).empty()) --given;
    if (given < op.min_inputs || given > op.max_inputs || node.output_size() < 1 || node.output(0).empty()) {
      *why = "takes " + std::to_string(op.min_inputs) + " to " + std::to_string(op.max_inputs) +
             " inputs and one output";
      return false;
    }
    std::vector<onnx::NodeProto> made;
    Emitter e(prefix, &made);
    if (!op.expand(node, e, why)) return false;
    for (auto& m : made) out->push_back(std::move(m));
    return true;
  }
  return false;
}

}  // namespace cuvil::frontend
