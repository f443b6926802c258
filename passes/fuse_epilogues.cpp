// Pass: linear ops with their epilogues become cuvil::FusedMatMul / FusedConv
// (passes/fuse_epilogues.h).
#include "passes/fuse_epilogues.h"

#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/fused_ops.h"
#include "passes/graph_edit.h"

namespace cuvil {
namespace {

bool is_float(DType t) { return t == DType::Float || t == DType::Double || t == DType::Float16 || t == DType::BFloat16; }

// Constants whose elements TensorData::float_at reads.
bool readable_constant(const Value& v) {
  return v.data && (v.data->dtype == DType::Float || v.data->dtype == DType::Double);
}

bool shape_known(const Value& v) {
  if (!v.shape) return false;
  for (const Dim& d : *v.shape)
    if (!d) return false;
  return true;
}

bool same_shape(const Value& a, const Value& b) {
  if (!shape_known(a) || !shape_known(b) || a.shape->size() != b.shape->size()) return false;
  for (size_t i = 0; i < a.shape->size(); ++i)
    if (!(*(*a.shape)[i] == *(*b.shape)[i])) return false;
  return true;
}

// Who reads each value of one graph; pinned values (graph outputs, subgraph captures) are read
// by something a rewrite cannot see, so no chain runs through them.
struct Readers {
  std::vector<std::vector<size_t>> nodes;
  std::vector<bool> pinned;
  explicit Readers(const Graph& g) : nodes(g.values.size()), pinned(g.values.size(), false) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (ValueId in : g.nodes[i].inputs)
        if (in != kNoValue) nodes[static_cast<size_t>(in)].push_back(i);
    for (ValueId o : g.outputs) pinned[static_cast<size_t>(o)] = true;
    for (const Node& n : g.nodes)
      for (const auto& [key, a] : n.attrs) {
        std::vector<const Graph*> subs;
        if (a.g) subs.push_back(a.g.get());
        for (const auto& sg : a.graphs) subs.push_back(sg.get());
        for (const Graph* s : subs)
          for (ValueId c : s->captures) {
            const ValueId outer = s->value(c).outer;
            if (outer >= 0 && static_cast<size_t>(outer) < pinned.size()) pinned[static_cast<size_t>(outer)] = true;
          }
      }
  }
};

// The chain being built from one MatMul, Gemm or Conv.
struct Chain {
  bool conv = false;
  std::vector<ValueId> operands;  // A, B (FusedMatMul) or X, W, B (FusedConv)
  int64_t trans_a = 0, trans_b = 0;
  double alpha = 1.0;
  ValueId bias = kNoValue, residual = kNoValue;
  std::string activation;
  float act_alpha = 0.f, act_beta = 0.f;
  bool has_act_params = false;
  std::set<size_t> nodes;  // every node of the chain
  size_t last = 0;         // the chain's last node: the fused node takes its place
  ValueId out = kNoValue;  // the chain's result
  // A Reshape between the product and its activation: the fused node takes the Reshape's place
  // and writes its input, and the Reshape moves to the activation's place, writing `out`.
  std::optional<size_t> reshape;
  ValueId reshape_in = kNoValue;
};

class Fuser {
 public:
  explicit Fuser(Graph& g) : g_(g), readers_(g), taken_(g.nodes.size(), false) {}

  FuseEpilogueStats run() {
    FuseEpilogueStats stats;
    std::vector<std::pair<size_t, Node>> replacements;
    std::set<size_t> dead;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (taken_[i]) continue;
      std::optional<Chain> c = start_chain(i);
      if (!c) continue;
      extend(*c);
      // A bare MatMul/Gemm keeps its own tile kernel; a bare Conv becomes FusedConv all the
      // same, so that a model's convolutions are one op (either runs as the same kernel).
      if (c->nodes.size() < 2 && !c->conv) continue;
      for (size_t n : c->nodes) {
        taken_[n] = true;
        if (n != c->last) dead.insert(n);
      }
      (c->conv ? stats.convs : stats.matmuls)++;
      if (c->reshape) {
        dead.erase(*c->reshape);
        Node fused = make_fused(*c, g_.nodes[i]);
        fused.outputs = {c->reshape_in};
        Node moved = g_.nodes[*c->reshape];
        moved.outputs = {c->out};
        replacements.emplace_back(*c->reshape, std::move(fused));
        replacements.emplace_back(c->last, std::move(moved));
        continue;
      }
      replacements.emplace_back(c->last, make_fused(*c, g_.nodes[i]));
    }
    for (auto& [at, node] : replacements) g_.nodes[at] = std::move(node);
    erase_nodes(g_, dead);
    return stats;
  }

 private:
  const Value& value(ValueId v) const { return g_.value(v); }

  // The one node that reads v, when nothing else does and it is not yet in a chain.
  std::optional<size_t> single_reader(ValueId v) const {
    const size_t i = static_cast<size_t>(v);
    if (readers_.pinned[i] || readers_.nodes[i].size() != 1) return std::nullopt;
    const size_t r = readers_.nodes[i][0];
    if (taken_[r]) return std::nullopt;
    return r;
  }

  bool float_tensor(ValueId v, DType dtype) const {
    if (v == kNoValue) return false;
    const Value& x = value(v);
    return x.kind == ValueKind::Tensor && x.dtype == dtype && shape_known(x);
  }

  // The node's only output, a float tensor of known shape, else kNoValue.
  ValueId sole_output(const Node& n) const {
    if (n.outputs.size() != 1 || n.outputs[0] == kNoValue) return kNoValue;
    const Value& y = value(n.outputs[0]);
    if (y.kind != ValueKind::Tensor || !is_float(y.dtype) || !shape_known(y)) return kNoValue;
    return n.outputs[0];
  }

  // A Transpose that swaps exactly the last two axes of its rank >= 2 input.
  bool swaps_last_two(const Node& t) const {
    if (t.op != OpKind::Transpose || t.inputs.size() != 1 || t.outputs.size() != 1) return false;
    const Value& in = value(t.inputs[0]);
    if (!in.shape || in.shape->size() < 2) return false;
    const int64_t r = static_cast<int64_t>(in.shape->size());
    std::vector<int64_t> want;
    for (int64_t d = 0; d < r - 2; ++d) want.push_back(d);
    want.push_back(r - 1);
    want.push_back(r - 2);
    auto perm = t.attr_ints("perm");
    if (!perm) return r == 2;  // no perm reverses the axes
    return *perm == want;
  }

  std::optional<Chain> start_chain(size_t i) {
    const Node& n = g_.nodes[i];
    const ValueId y = sole_output(n);
    if (y == kNoValue || !n.domain.empty()) return std::nullopt;
    const DType dt = value(y).dtype;
    Chain c;
    c.nodes.insert(i);
    c.last = i;
    c.out = y;
    if (n.op == OpKind::Conv) {
      if (n.inputs.size() < 2 || n.inputs.size() > 3) return std::nullopt;
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if ((k < 2 || n.inputs[k] != kNoValue) && !float_tensor(n.inputs[k], dt)) return std::nullopt;
      c.conv = true;
      c.operands = {n.inputs[0], n.inputs[1], n.input(2)};
      return c;
    }
    if (n.op == OpKind::MatMul) {
      if (n.inputs.size() != 2) return std::nullopt;
    } else if (n.op == OpKind::Gemm) {
      // Before opset 7 Gemm had a "broadcast" attribute; beta other than 1 scales C, which
      // FusedMatMul's bias does not.
      if (n.opset < 7 || n.inputs.size() < 2 || n.inputs.size() > 3) return std::nullopt;
      if (n.attr_float("beta", 1.f) != 1.f && n.input(2) != kNoValue) return std::nullopt;
      c.trans_a = n.attr_int("transA", 0) != 0;
      c.trans_b = n.attr_int("transB", 0) != 0;
      c.alpha = n.attr_float("alpha", 1.f);
      if (n.input(2) != kNoValue) {
        if (!float_tensor(n.inputs[2], dt)) return std::nullopt;
        c.bias = n.inputs[2];
      }
    } else {
      return std::nullopt;
    }
    for (size_t k = 0; k < 2; ++k)
      if (!float_tensor(n.inputs[k], dt) || value(n.inputs[k]).shape->size() < 2) return std::nullopt;
    c.operands = {n.inputs[0], n.inputs[1]};
    // B = Transpose(B0) over the last two axes: read B0 with transB flipped.
    const int32_t bp = value(n.inputs[1]).producer;
    if (bp >= 0 && single_reader(n.inputs[1]) == i && swaps_last_two(g_.nodes[static_cast<size_t>(bp)])) {
      const Node& t = g_.nodes[static_cast<size_t>(bp)];
      if (float_tensor(t.inputs[0], dt)) {
        c.operands[1] = t.inputs[0];
        c.trans_b = !c.trans_b;
        c.nodes.insert(static_cast<size_t>(bp));
      }
    }
    return c;
  }

  // A one-element float constant of the chain's dtype that broadcasting leaves the output's shape.
  std::optional<double> scalar_constant(ValueId v, const Value& out) const {
    const Value& x = value(v);
    if (!readable_constant(x) || x.dtype != out.dtype || x.data->numel() != 1) return std::nullopt;
    if (x.data->dims.size() > out.shape->size()) return std::nullopt;
    return x.data->float_at(0);
  }

  // A constant of shape [N] or [1, ..., 1, N] with N the output's last dim.
  bool last_axis_vector(ValueId v, const Value& out) const {
    const Value& x = value(v);
    if (!x.data || x.dtype != out.dtype || out.shape->empty()) return false;
    const std::vector<int64_t>& d = x.data->dims;
    if (d.empty() || d.size() > out.shape->size()) return false;
    for (size_t k = 0; k + 1 < d.size(); ++k)
      if (d[k] != 1) return false;
    return out.shape->back()->constant() == d.back();
  }

  // The activation node n computes, in FusedMatMul's spelling; false when it is not one.
  bool read_activation(const Node& n, DType dt, Chain& c) const {
    if (n.op == OpKind::SiLU) {
      if (n.inputs.size() != 1 || n.attr_float("alpha", 1.f) != 1.f) return false;
      c.activation = "silu";
      return true;
    }
    if (!n.domain.empty() || (n.op != OpKind::Clip && n.inputs.size() != 1)) return false;
    switch (n.op) {
      case OpKind::Relu: c.activation = "relu"; break;
      case OpKind::Sigmoid: c.activation = "sigmoid"; break;
      case OpKind::Tanh: c.activation = "tanh"; break;
      case OpKind::Gelu: {
        const std::string a = n.attr_string("approximate", "none");
        if (a == "none") c.activation = "gelu";
        else if (a == "tanh") c.activation = "gelu_tanh";
        else return false;
        break;
      }
      case OpKind::LeakyRelu:
        c.activation = "leaky_relu";
        c.act_alpha = n.attr_float("alpha", 0.01f);
        c.has_act_params = true;
        break;
      case OpKind::Clip: {
        // ONNX Clip's absent bounds are the dtype's extremes; opset < 11 has them as attributes.
        double lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
        if (n.opset < 11) {
          lo = n.attr_float("min", static_cast<float>(lo));
          hi = n.attr_float("max", static_cast<float>(hi));
        } else {
          if (n.inputs.size() > 3) return false;
          for (size_t k = 1; k < n.inputs.size(); ++k) {
            if (n.inputs[k] == kNoValue) continue;
            const Value& b = value(n.inputs[k]);
            if (!readable_constant(b) || b.dtype != dt || b.data->numel() != 1) return false;
            (k == 1 ? lo : hi) = b.data->float_at(0);
          }
        }
        if (!(lo <= hi)) return false;  // Clip's min > max (or NaN) case is the kernel's to define
        c.activation = "clip";
        c.act_alpha = static_cast<float>(lo);
        c.act_beta = static_cast<float>(hi);
        c.has_act_params = true;
        break;
      }
      default: return false;
    }
    return true;
  }

  // Follows the chain's result through single readers while each is the next epilogue step.
  void extend(Chain& c) {
    enum Stage { kProduct, kBias, kResidual, kActivation };
    Stage stage = c.bias != kNoValue ? kBias : kProduct;
    while (stage != kActivation) {
      const std::optional<size_t> r = single_reader(c.out);
      if (!r) return;
      const Node& n = g_.nodes[*r];
      const ValueId y = sole_output(n);
      if (y == kNoValue) return;
      const Value& cur = value(c.out);
      if (value(y).dtype != cur.dtype) return;
      const bool binary = n.domain.empty() && n.inputs.size() == 2;
      const ValueId other = binary ? (n.inputs[0] == c.out ? n.inputs[1] : n.inputs[0]) : kNoValue;
      if (binary && (n.op == OpKind::Mul || n.op == OpKind::Div) && !c.conv && stage == kProduct) {
        if (n.op == OpKind::Div && n.inputs[0] != c.out) return;
        const std::optional<double> s = scalar_constant(other, cur);
        // A zero or non-finite scale would turn an overflowing or NaN sum into something else
        // once it multiplies the operand instead of the sum.
        if (!s || *s == 0.0 || !std::isfinite(*s) || !same_shape(value(y), cur)) return;
        if (n.op == OpKind::Mul) c.alpha *= *s;
        else c.alpha /= *s;
      } else if (binary && n.op == OpKind::Add && stage < kResidual) {
        if (!same_shape(value(y), cur) || value(other).dtype != cur.dtype || !value(other).shape) return;
        if (!c.conv && stage < kBias && last_axis_vector(other, cur)) {
          c.bias = other;
          stage = kBias;
        } else {
          c.residual = other;
          stage = kResidual;
        }
      } else if (read_activation(n, cur.dtype, c)) {
        stage = kActivation;
      } else if (n.op == OpKind::Reshape && n.input(0) == c.out && !c.conv && !c.reshape) {
        // GPT-2's Conv1D (addmm on a 2-D view, viewed back) then gelu: the activation is
        // elementwise, so it may as well run before the Reshape, in the fused op, which then
        // writes the Reshape's input; the Reshape moves after it.
        const std::optional<size_t> a = single_reader(y);
        if (!a) return;
        const Node& act = g_.nodes[*a];
        const ValueId z = sole_output(act);
        if (z == kNoValue || value(z).dtype != cur.dtype || !same_shape(value(z), value(y))) return;
        Chain with = c;
        if (!read_activation(act, cur.dtype, with)) return;
        c = with;
        c.reshape = *r;
        c.reshape_in = c.out;
        c.nodes.insert(*r);
        c.nodes.insert(*a);
        c.last = *a;
        c.out = z;
        return;
      } else {
        return;
      }
      c.nodes.insert(*r);
      c.last = *r;
      c.out = y;
    }
  }

  Node make_fused(const Chain& c, const Node& product) const {
    Node n = make_node(c.conv ? OpKind::FusedConv : OpKind::FusedMatMul, product.name);
    n.inputs = c.operands;
    if (c.conv) {
      for (const auto& [key, a] : product.attrs) n.attrs[key] = a;
    } else {
      n.inputs.push_back(c.bias);
    }
    n.inputs.push_back(c.residual);
    while (!n.inputs.empty() && n.inputs.back() == kNoValue) n.inputs.pop_back();
    n.outputs = {c.out};
    auto set_int = [&](const char* key, int64_t v) {
      Attribute a;
      a.kind = Attribute::Kind::Int;
      a.i = v;
      n.attrs[key] = a;
    };
    auto set_float = [&](const char* key, float v) {
      Attribute a;
      a.kind = Attribute::Kind::Float;
      a.f = v;
      n.attrs[key] = a;
    };
    if (c.trans_a) set_int("transA", 1);
    if (c.trans_b) set_int("transB", 1);
    if (static_cast<float>(c.alpha) != 1.f) set_float("alpha", static_cast<float>(c.alpha));
    if (!c.activation.empty()) {
      Attribute a;
      a.kind = Attribute::Kind::String;
      a.s = c.activation;
      n.attrs["activation"] = a;
    }
    if (c.has_act_params) {
      set_float("activation_alpha", c.act_alpha);
      if (c.activation == "clip") set_float("activation_beta", c.act_beta);
    }
    return n;
  }

  Graph& g_;
  Readers readers_;
  std::vector<bool> taken_;
};

void fuse_in_graph(Graph& g, FuseEpilogueStats& stats) {
  for_each_subgraph(g, [&](Graph& s) { fuse_in_graph(s, stats); });
  const FuseEpilogueStats s = Fuser(g).run();
  stats.matmuls += s.matmuls;
  stats.convs += s.convs;
}

}  // namespace

FuseEpilogueStats fuse_epilogues(Model& model) {
  FuseEpilogueStats stats;
  fuse_in_graph(*model.graph, stats);
  return stats;
}

}  // namespace cuvil
