// Pass: QDQ import, DequantizeLinear operands of MatMul/Gemm/Conv run as int8 products
// (passes/qdq_to_int8.h).
#include "passes/qdq_to_int8.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "passes/graph_edit.h"

namespace cuvil {
namespace {

bool is_8bit(DType t) { return t == DType::Int8 || t == DType::UInt8; }

// A DequantizeLinear(q, scale, zero?) with a constant float scale and constant zero point.
struct Dq {
  ValueId q = kNoValue, scale = kNoValue, zero = kNoValue;
  int64_t axis = 1;
};

std::optional<Dq> dq_of(const Graph& g, ValueId v) {
  if (v == kNoValue) return std::nullopt;
  const int32_t p = g.value(v).producer;
  if (p < 0) return std::nullopt;
  const Node& n = g.nodes[static_cast<size_t>(p)];
  if (n.op != OpKind::DequantizeLinear || !n.domain.empty() || n.inputs.size() < 2 ||
      n.attr_int("block_size", 0) != 0)
    return std::nullopt;
  Dq d{n.inputs[0], n.inputs[1], n.input(2), n.attr_int("axis", 1)};
  const Value& s = g.value(d.scale);
  if (!s.data || s.data->dtype != DType::Float || d.q == kNoValue) return std::nullopt;
  if (d.zero != kNoValue && !g.value(d.zero).data) return std::nullopt;
  return d;
}

// An 8-bit activation with one scale and zero point.
std::optional<Dq> activation_dq(const Graph& g, ValueId v) {
  std::optional<Dq> d = dq_of(g, v);
  if (!d || !is_8bit(g.value(d->q).dtype) || g.value(d->scale).data->numel() != 1) return std::nullopt;
  if (d->zero != kNoValue && g.value(d->zero).data->numel() != 1) return std::nullopt;
  return d;
}

// An 8-bit constant weight of `rank` dims, scaled per tensor or per `channels` along
// `channel_axis`.
std::optional<Dq> weight_dq(const Graph& g, ValueId v, size_t rank, int64_t channel_axis) {
  std::optional<Dq> d = dq_of(g, v);
  if (!d) return std::nullopt;
  const Value& q = g.value(d->q);
  if (!is_8bit(q.dtype) || !q.data || q.data->dims.size() != rank) return std::nullopt;
  const int64_t channels = q.data->dims[static_cast<size_t>(channel_axis)];
  const int64_t ns = g.value(d->scale).data->numel();
  const int64_t nz = d->zero != kNoValue ? g.value(d->zero).data->numel() : 1;
  const int64_t axis = d->axis < 0 ? d->axis + static_cast<int64_t>(rank) : d->axis;
  for (int64_t count : {ns, nz})
    if (count != 1 && (count != channels || axis != channel_axis)) return std::nullopt;
  return d;
}

// The QuantizeLinear that alone reads y (with one constant scale and zero point), possibly
// through a Relu that alone reads y and whose output only that QuantizeLinear reads, when the
// zero point is the type's minimum (0 for uint8, -128 for int8): then clamp(round(y/s) + z)
// already maps every y <= 0 to z, so Q(Relu(y)) == Q(y) exactly and the QLinear op absorbs
// the Relu. (cuvil's own QDQ models quantize the Relu's output, whose range starts at 0.)
struct QAfter {
  size_t node = 0;
  ValueId scale = kNoValue, zero = kNoValue, out = kNoValue;
  std::optional<size_t> relu;  // the absorbed Relu, removed with the QuantizeLinear
};

std::optional<QAfter> q_only_after(const Graph& g, ValueId y) {
  const Uses u = uses_of(g, y);
  if (u.nodes.size() != 1 || u.outputs || u.captures) return std::nullopt;
  const Node& n = g.nodes[u.nodes[0]];
  if (n.op != OpKind::QuantizeLinear || !n.domain.empty() || n.inputs.size() < 2 || n.inputs[0] != y ||
      n.outputs.size() != 1 || !is_8bit(g.value(n.outputs[0]).dtype))
    return std::nullopt;
  const Value& s = g.value(n.inputs[1]);
  if (!s.data || s.data->dtype != DType::Float || s.data->numel() != 1) return std::nullopt;
  const ValueId z = n.input(2);
  if (z != kNoValue && (!g.value(z).data || g.value(z).data->numel() != 1)) return std::nullopt;
  return QAfter{u.nodes[0], n.inputs[1], z, n.outputs[0], std::nullopt};
}

std::optional<QAfter> q_after(const Graph& g, ValueId y) {
  if (std::optional<QAfter> q = q_only_after(g, y)) return q;
  const Uses u = uses_of(g, y);
  if (u.nodes.size() != 1 || u.outputs || u.captures) return std::nullopt;
  const Node& r = g.nodes[u.nodes[0]];
  if (r.op != OpKind::Relu || !r.domain.empty() || r.inputs.size() != 1 || r.outputs.size() != 1)
    return std::nullopt;
  std::optional<QAfter> q = q_only_after(g, r.outputs[0]);
  if (!q) return std::nullopt;
  const DType qt = g.value(q->out).dtype;
  const int64_t zero = q->zero != kNoValue ? g.value(q->zero).data->int_at(0) : 0;
  if (zero != (qt == DType::UInt8 ? 0 : -128)) return std::nullopt;
  q->relu = u.nodes[0];
  return q;
}

// Builds the replacement nodes and their constants inside one graph.
class Rewriter {
 public:
  Rewriter(Graph& g, int64_t opset) : g_(g), opset_(static_cast<int>(opset)) {}

  ValueId constant(const std::string& base, DType dtype, const std::vector<int64_t>& dims,
                   std::vector<uint8_t> bytes) {
    return add_initializer(g_, base, dtype, dims, std::move(bytes));
  }
  ValueId floats(const std::string& base, const std::vector<int64_t>& dims, const std::vector<float>& f) {
    std::vector<uint8_t> b(f.size() * sizeof(float));
    if (!f.empty()) std::memcpy(b.data(), f.data(), b.size());
    return constant(base, DType::Float, dims, std::move(b));
  }
  // A zero point of `dtype` (0) when the DequantizeLinear had none.
  ValueId zero_or_default(ValueId z, DType dtype, const std::string& base) {
    return z != kNoValue ? z : constant(base, dtype, {}, {0});
  }
  // A value like `like` (its shape) of dtype.
  ValueId temp(const std::string& base, DType dtype, ValueId like) {
    const std::optional<Shape> shape = g_.value(like).shape;
    const ValueId id = g_.add_value(unique_value_name(g_, base));
    g_.value(id).dtype = dtype;
    g_.value(id).shape = shape;
    return id;
  }
  Node node(OpKind op, const std::string& name, std::vector<ValueId> in, ValueId out) {
    Node n = make_node(op, name, opset_);
    n.inputs = std::move(in);
    n.outputs = {out};
    return n;
  }

 private:
  Graph& g_;
  int opset_;
};

// Per-channel float values of a constant bias: a float tensor or DequantizeLinear(int32
// constant), possibly behind Identity nodes, with `channels` elements (or one, repeated).
// nullopt when it is neither. The Identity case: PyTorch exports of ResNet share one bias
// tensor between convolutions through Identity nodes (bench/models/resnet18.onnx: 16 of its
// 20 Conv), which fold-constants only removes after this pass.
std::optional<std::vector<double>> bias_values(const Graph& g, ValueId b, int64_t channels) {
  for (int hops = 0; hops < 16 && !g.value(b).data; ++hops) {
    const int32_t p = g.value(b).producer;
    if (p < 0) break;
    const Node& n = g.nodes[static_cast<size_t>(p)];
    if (n.op != OpKind::Identity || !n.domain.empty() || n.inputs.size() != 1 || n.inputs[0] == kNoValue) break;
    b = n.inputs[0];
  }
  std::vector<double> out(static_cast<size_t>(channels));
  const Value& v = g.value(b);
  if (v.data && (v.data->dtype == DType::Float)) {
    const int64_t n = v.data->numel();
    if (n != 1 && n != channels) return std::nullopt;
    for (int64_t c = 0; c < channels; ++c) out[c] = v.data->float_at(n == 1 ? 0 : c);
    return out;
  }
  std::optional<Dq> d = dq_of(g, b);
  if (!d || !g.value(d->q).data || g.value(d->q).dtype != DType::Int32) return std::nullopt;
  const TensorData& q = *g.value(d->q).data;
  const TensorData& s = *g.value(d->scale).data;
  const TensorData* z = d->zero != kNoValue ? g.value(d->zero).data.get() : nullptr;
  if ((q.numel() != 1 && q.numel() != channels) || (s.numel() != 1 && s.numel() != channels) ||
      (z && z->numel() != 1 && z->numel() != channels))
    return std::nullopt;
  auto at = [&](const TensorData& t, int64_t c) { return t.numel() == 1 ? 0 : c; };
  for (int64_t c = 0; c < channels; ++c) {
    const double zero = z ? static_cast<double>(z->int_at(at(*z, c))) : 0.0;
    out[c] = (static_cast<double>(q.int_at(at(q, c))) - zero) * s.float_at(at(s, c));
  }
  return out;
}

// sx * sw[c] in float, as the integer kernels' epilogues multiply.
std::vector<float> product_scales(const Graph& g, const Dq& x, const Dq& w, int64_t channels) {
  const float sx = static_cast<float>(g.value(x.scale).data->float_at(0));
  const TensorData& sw = *g.value(w.scale).data;
  std::vector<float> s(static_cast<size_t>(sw.numel() == 1 ? 1 : channels));
  for (size_t c = 0; c < s.size(); ++c) s[c] = sx * static_cast<float>(sw.float_at(static_cast<int64_t>(c)));
  return s;
}

std::string base_name(const Graph& g, const Node& n) {
  return n.name.empty() ? g.value(n.outputs[0]).name : n.name;
}

// Conv(DQ(x), DQ(w), B?): the replacement nodes, or empty.
std::vector<Node> rewrite_conv(Graph& g, Rewriter& rw, size_t i, std::set<size_t>* dead,
                               QdqImportStats* stats) {
  const Node conv = g.nodes[i];
  if (conv.inputs.size() < 2 || conv.inputs.size() > 3 || conv.outputs.size() != 1) return {};
  const std::optional<Dq> x = activation_dq(g, conv.inputs[0]);
  if (!x) return {};
  const Value& wv = g.value(conv.inputs[1]);
  if (!wv.shape || wv.shape->size() < 3) return {};
  const std::optional<Dq> w = weight_dq(g, conv.inputs[1], wv.shape->size(), 0);
  if (!w) return {};
  const std::vector<int64_t> wdims = g.value(w->q).data->dims;
  const int64_t m = wdims[0];
  std::optional<std::vector<double>> bias;
  if (conv.input(2) != kNoValue) {
    bias = bias_values(g, conv.inputs[2], m);
    if (!bias) return {};
  }
  const std::vector<float> scales = product_scales(g, *x, *w, m);
  const std::string base = base_name(g, conv);
  const ValueId y = conv.outputs[0];
  std::vector<Node> out;
  if (const std::optional<QAfter> q = q_after(g, y)) {
    std::vector<ValueId> in = {
        x->q, x->scale, rw.zero_or_default(x->zero, g.value(x->q).dtype, base + "/x_zero_point"),
        w->q, w->scale, rw.zero_or_default(w->zero, g.value(w->q).dtype, base + "/w_zero_point"),
        q->scale, rw.zero_or_default(q->zero, g.value(q->out).dtype, base + "/y_zero_point")};
    if (bias) {
      // As ONNX Runtime does: the bias at the accumulator's scale sx * sw[c], rounded.
      std::vector<uint8_t> bytes(static_cast<size_t>(m) * 4);
      for (int64_t c = 0; c < m; ++c) {
        const double v = std::nearbyint((*bias)[c] / static_cast<double>(scales[scales.size() == 1 ? 0 : c]));
        const int32_t b32 = static_cast<int32_t>(std::max(-2147483648.0, std::min(2147483647.0, v)));
        std::memcpy(bytes.data() + c * 4, &b32, 4);
      }
      in.push_back(rw.constant(base + "/bias_int32", DType::Int32, {m}, std::move(bytes)));
    }
    Node n = rw.node(OpKind::QLinearConv, base, std::move(in), q->out);
    n.attrs = conv.attrs;
    out.push_back(std::move(n));
    dead->insert(q->node);
    if (q->relu) dead->insert(*q->relu);
    ++stats->qlinear;
    return out;
  }
  std::vector<ValueId> in = {x->q, w->q, x->zero, w->zero};
  while (!in.empty() && in.back() == kNoValue) in.pop_back();
  // w's zero point without x's: x's is 0 (an omitted input in the middle would read as absent).
  if (in.size() == 4 && in[2] == kNoValue) in[2] = rw.zero_or_default(kNoValue, g.value(x->q).dtype, base + "/x_zero_point");
  const ValueId acc = rw.temp(base + "/int32", DType::Int32, y);
  Node n = rw.node(OpKind::ConvInteger, base, in, acc);
  n.attrs = conv.attrs;
  out.push_back(std::move(n));
  // The per-channel constants broadcast over [N, M, spatial...]: [M, 1, ...].
  std::vector<int64_t> cdims(wdims.size() - 1, 1);
  cdims[0] = scales.size() == 1 ? 1 : m;
  const ValueId f = rw.temp(base + "/float", DType::Float, y);
  Node cast = rw.node(OpKind::Cast, base + "/to_float", {acc}, f);
  Attribute to;
  to.kind = Attribute::Kind::Int;
  to.i = static_cast<int64_t>(DType::Float);
  cast.attrs["to"] = to;
  out.push_back(std::move(cast));
  const ValueId scaled = bias ? rw.temp(base + "/dequantized", DType::Float, y) : y;
  out.push_back(rw.node(OpKind::Mul, base + "/dequantize",
                        {f, rw.floats(base + "/scale", cdims, scales)}, scaled));
  if (bias) {
    std::vector<float> bf(bias->begin(), bias->end());
    std::vector<int64_t> bdims(wdims.size() - 1, 1);
    bdims[0] = m;
    out.push_back(rw.node(OpKind::Add, base + "/bias", {scaled, rw.floats(base + "/bias", bdims, bf)}, y));
  }
  ++stats->integer;
  return out;
}

// MatMul(DQ(x), DQ(w)) or Gemm(DQ(x), DQ(w), C?): the replacement nodes, or empty.
std::vector<Node> rewrite_linear(Graph& g, Rewriter& rw, size_t i, std::set<size_t>* dead,
                                 QdqImportStats* stats) {
  const Node mm = g.nodes[i];
  const bool gemm = mm.op == OpKind::Gemm;
  if (mm.outputs.size() != 1 || mm.inputs.size() < 2 || mm.inputs.size() > (gemm ? 3u : 2u)) return {};
  bool trans_b = false;
  if (gemm) {
    if (mm.attr_int("transA", 0) != 0 || mm.attr_float("alpha", 1.f) != 1.f ||
        (mm.input(2) != kNoValue && mm.attr_float("beta", 1.f) != 1.f))
      return {};
    trans_b = mm.attr_int("transB", 0) != 0;
  }
  const Value& av = g.value(mm.inputs[0]);
  if (!av.shape || av.shape->size() < 2 || (gemm && av.shape->size() != 2)) return {};
  const std::optional<Dq> x = activation_dq(g, mm.inputs[0]);
  if (!x) return {};
  std::optional<Dq> w = weight_dq(g, mm.inputs[1], 2, trans_b ? 0 : 1);
  // MatMul of two quantized activations (attention's products in a QDQ transformer): B is
  // packed per call, its scale and zero point are one value each.
  const Value& bv = g.value(mm.inputs[1]);
  if (!w && !gemm && bv.shape && bv.shape->size() >= 2) w = activation_dq(g, mm.inputs[1]);
  if (!w) return {};
  const bool constant_b = g.value(w->q).data && g.value(w->q).data->dims.size() == 2;
  std::vector<int64_t> wdims = constant_b ? g.value(w->q).data->dims : std::vector<int64_t>{0, 1};
  const int64_t n_out = trans_b ? wdims[0] : wdims[1], k = trans_b ? wdims[1] : wdims[0];
  std::optional<std::vector<double>> bias;
  if (mm.input(2) != kNoValue) {
    bias = bias_values(g, mm.inputs[2], n_out);
    if (!bias) return {};
  }
  const std::string base = base_name(g, mm);
  ValueId wq = w->q;
  if (trans_b) {
    // w_q [N, K] -> [K, N]: the int8 products read B as k x n.
    const std::vector<uint8_t>& src = g.value(w->q).data->bytes;
    std::vector<uint8_t> t(src.size());
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t c = 0; c < k; ++c) t[c * n_out + r] = src[r * k + c];
    wq = rw.constant(g.value(w->q).name + "/transposed", g.value(w->q).dtype, {k, n_out}, std::move(t));
  }
  const ValueId y = mm.outputs[0];
  std::vector<Node> out;
  const std::optional<QAfter> q = bias ? std::nullopt : q_after(g, y);
  if (q) {
    std::vector<ValueId> in = {
        x->q, x->scale, rw.zero_or_default(x->zero, g.value(x->q).dtype, base + "/a_zero_point"),
        wq, w->scale, rw.zero_or_default(w->zero, g.value(w->q).dtype, base + "/b_zero_point"),
        q->scale, rw.zero_or_default(q->zero, g.value(q->out).dtype, base + "/y_zero_point")};
    out.push_back(rw.node(OpKind::QLinearMatMul, base, std::move(in), q->out));
    dead->insert(q->node);
    if (q->relu) dead->insert(*q->relu);
    ++stats->qlinear;
    return out;
  }
  std::vector<ValueId> in = {x->q, wq, x->zero, w->zero};
  while (!in.empty() && in.back() == kNoValue) in.pop_back();
  const ValueId acc = rw.temp(base + "/int32", DType::Int32, y);
  // b's zero point without a's: a's is 0, as for ConvInteger above.
  if (in.size() == 4 && in[2] == kNoValue) in[2] = rw.zero_or_default(kNoValue, g.value(x->q).dtype, base + "/a_zero_point");
  out.push_back(rw.node(OpKind::MatMulInteger, base, in, acc));
  const std::vector<float> scales = product_scales(g, *x, *w, n_out);
  const ValueId f = rw.temp(base + "/float", DType::Float, y);
  Node cast = rw.node(OpKind::Cast, base + "/to_float", {acc}, f);
  Attribute to;
  to.kind = Attribute::Kind::Int;
  to.i = static_cast<int64_t>(DType::Float);
  cast.attrs["to"] = to;
  out.push_back(std::move(cast));
  const ValueId scaled = bias ? rw.temp(base + "/dequantized", DType::Float, y) : y;
  const int64_t sn = static_cast<int64_t>(scales.size());
  out.push_back(rw.node(OpKind::Mul, base + "/dequantize", {f, rw.floats(base + "/scale", {sn}, scales)}, scaled));
  if (bias) {
    std::vector<float> bf(bias->begin(), bias->end());
    out.push_back(rw.node(OpKind::Add, base + "/bias", {scaled, rw.floats(base + "/bias", {n_out}, bf)}, y));
  }
  ++stats->integer;
  return out;
}

void rewrite_graph(Graph& g, int64_t opset, QdqImportStats* stats) {
  for_each_subgraph(g, [&](Graph& s) { rewrite_graph(s, opset, stats); });
  Rewriter rw(g, opset);
  std::map<size_t, std::vector<Node>> replaced;
  std::set<size_t> dead;
  const size_t count = g.nodes.size();
  for (size_t i = 0; i < count; ++i) {
    const Node& n = g.nodes[i];
    if (!n.domain.empty() || dead.count(i)) continue;
    std::vector<Node> r;
    if (n.op == OpKind::Conv) r = rewrite_conv(g, rw, i, &dead, stats);
    else if (n.op == OpKind::MatMul || n.op == OpKind::Gemm) r = rewrite_linear(g, rw, i, &dead, stats);
    if (!r.empty()) replaced[i] = std::move(r);
  }
  if (replaced.empty()) return;
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size() + 4 * replaced.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (dead.count(i)) continue;
    auto it = replaced.find(i);
    if (it == replaced.end()) {
      nodes.push_back(std::move(g.nodes[i]));
      continue;
    }
    for (Node& r : it->second) nodes.push_back(std::move(r));
  }
  g.nodes = std::move(nodes);
  refresh_producers(g);
}

}  // namespace

QdqImportStats qdq_to_int8(Model& model) {
  QdqImportStats stats;
  rewrite_graph(*model.graph, std::max<int64_t>(opset_of(model, ""), 10), &stats);
  return stats;
}

}  // namespace cuvil
