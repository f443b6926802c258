// Pass: Conv + inference BatchNormalization folded into one Conv (passes/fold_batch_norm.h).
#include "passes/fold_batch_norm.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "passes/graph_edit.h"

namespace cuvil {
namespace {

bool is_float_constant(const Value& v) {
  return v.data && (v.data->dtype == DType::Float || v.data->dtype == DType::Double);
}

// A new initializer named after `base` (made unique in g) holding `values` as dtype.
ValueId add_weight(Graph& g, const std::string& base, DType dtype, const std::vector<int64_t>& dims,
                   const std::vector<double>& values) {
  std::vector<uint8_t> bytes;
  if (dtype == DType::Float) {
    bytes.resize(values.size() * sizeof(float));
    for (size_t i = 0; i < values.size(); ++i) {
      const float f = static_cast<float>(values[i]);
      std::memcpy(bytes.data() + i * sizeof f, &f, sizeof f);
    }
  } else {
    bytes.resize(values.size() * sizeof(double));
    std::memcpy(bytes.data(), values.data(), bytes.size());
  }
  return add_initializer(g, base, dtype, dims, std::move(bytes));
}

// The BatchNormalization reads only its first output in inference mode.
bool inference_only(const Graph& g, const Node& bn) {
  if (bn.opset < 7 || bn.attr_int("spatial", 1) != 1) return false;
  if (bn.opset >= 14 && bn.attr_int("training_mode", 0) != 0) return false;
  if (bn.inputs.size() != 5 || bn.outputs.empty() || bn.outputs[0] == kNoValue) return false;
  for (size_t o = 1; o < bn.outputs.size(); ++o)
    if (bn.outputs[o] != kNoValue && uses_of(g, bn.outputs[o]).any()) return false;
  return true;
}

int64_t fold_in_graph(Graph& g) {
  int64_t folded = 0;
  for_each_subgraph(g, [&](Graph& s) { folded += fold_in_graph(s); });
  std::set<size_t> dead;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& bn = g.nodes[i];
    if (bn.op != OpKind::BatchNormalization || !bn.domain.empty() || !inference_only(g, bn)) continue;
    const ValueId x = bn.inputs[0];
    const int32_t p = g.value(x).producer;
    if (p < 0 || dead.count(static_cast<size_t>(p))) continue;
    Node& conv = g.nodes[static_cast<size_t>(p)];
    if (conv.op != OpKind::Conv || !conv.domain.empty() || conv.outputs.size() != 1 || conv.inputs.size() < 2 ||
        conv.inputs.size() > 3)
      continue;
    const Uses u = uses_of(g, x);
    if (u.nodes.size() != 1 || u.outputs || u.captures) continue;
    const Value& w = g.value(conv.inputs[1]);  // not used after add_weight grows g.values
    if (!is_float_constant(w) || w.data->dims.empty()) continue;
    const DType dt = w.data->dtype;
    const int64_t m = w.data->dims[0];
    const ValueId b = conv.input(2);
    if (b != kNoValue && (!is_float_constant(g.value(b)) || g.value(b).data->numel() != m)) continue;
    bool params_ok = true;
    for (size_t k = 1; k < 5; ++k) {
      const Value& v = g.value(bn.inputs[k]);
      if (!is_float_constant(v) || v.data->numel() != m) params_ok = false;
    }
    if (!params_ok || g.value(bn.outputs[0]).dtype != dt) continue;
    auto param = [&](size_t k, int64_t c) { return g.value(bn.inputs[k]).data->float_at(c); };
    // Computed as the BatchNormalization kernel does, in double: epsilon is the float attribute.
    const double eps = bn.attr_float("epsilon", 1e-5f);
    const int64_t per_channel = w.data->numel() / m;
    std::vector<double> wv(static_cast<size_t>(w.data->numel())), bv(static_cast<size_t>(m));
    for (int64_t c = 0; c < m; ++c) {
      const double s = param(1, c) / std::sqrt(param(4, c) + eps);
      for (int64_t j = 0; j < per_channel; ++j)
        wv[static_cast<size_t>(c * per_channel + j)] = w.data->float_at(c * per_channel + j) * s;
      const double b0 = b != kNoValue ? g.value(b).data->float_at(c) : 0.0;
      bv[static_cast<size_t>(c)] = (b0 - param(3, c)) * s + param(2, c);
    }
    const std::vector<int64_t> wdims = w.data->dims;
    const std::string base = conv.name.empty() ? g.value(x).name : conv.name;
    const ValueId new_w = add_weight(g, base + "/folded_weight", dt, wdims, wv);
    const ValueId new_b = add_weight(g, base + "/folded_bias", dt, {m}, bv);
    conv.inputs.resize(3);
    conv.inputs[1] = new_w;
    conv.inputs[2] = new_b;
    conv.outputs[0] = g.nodes[i].outputs[0];
    dead.insert(i);
    ++folded;
  }
  erase_nodes(g, dead);
  return folded;
}

}  // namespace

int64_t fold_batch_norm(Model& model) { return fold_in_graph(*model.graph); }

}  // namespace cuvil
