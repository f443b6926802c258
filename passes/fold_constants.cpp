// Pass: constant folding (passes/fold_constants.h). Nodes are evaluated with the runtime's
// whole-tensor kernels through a compile-time OpContext over the IR's constant data.
#include "passes/fold_constants.h"

#include <cstring>

#include "passes/graph_edit.h"
#include "passes/node_attr_reader.h"
#include "runtime/op_kernel.h"
#include "support/checked.h"

namespace cuvil {
namespace {

using rt::TensorView;

// Runs one node on constant inputs; outputs must come out with the dtype and static dims shape
// inference gave them, or the evaluation is abandoned.
class FoldOpContext : public rt::OpContext {
 public:
  FoldOpContext(const Graph& g, const Node& n) : g_(g), n_(n), attrs_(n) {
    inputs_.resize(n.inputs.size());
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i] != kNoValue) inputs_[i] = view_of(*g.value(n.inputs[i]).data);
    outputs_.resize(n.outputs.size());
  }
  const char* op_name() const override { return n_.op_type.c_str(); }
  const char* node_name() const override { return n_.name.c_str(); }
  int opset() const override { return n_.opset; }
  const rt::AttrReader& attrs() const override { return attrs_; }
  size_t num_inputs() const override { return n_.inputs.size(); }
  const TensorView* input(size_t i) const override {
    return i < n_.inputs.size() && n_.inputs[i] != kNoValue ? &inputs_[i] : nullptr;
  }
  size_t num_outputs() const override { return n_.outputs.size(); }
  bool output_wanted(size_t i) const override { return i < n_.outputs.size() && n_.outputs[i] != kNoValue; }
  rt::Status allocate_output(size_t i, DType dtype, const std::vector<int64_t>& dims,
                             TensorView** out) override {
    if (i >= outputs_.size()) return error(rt::StatusCode::kRuntime, "output ", i, " out of range");
    if (output_wanted(i)) {
      const Value& v = g_.value(n_.outputs[i]);
      if (dtype != v.dtype || !matches_static_shape(v, dims))
        return error(rt::StatusCode::kRuntime, "output ", i, " disagrees with its inferred type");
    }
    auto numel = checked_numel(dims);
    auto bits = numel ? checked_mul_u64(static_cast<uint64_t>(*numel), static_cast<uint64_t>(dtype_bits(dtype)))
                      : std::nullopt;
    if (!bits || (*bits + 7) / 8 > (uint64_t{1} << 32))
      return error(rt::StatusCode::kOutOfMemory, "output ", i, " too large to fold");
    Out& o = outputs_[i];
    o.data = std::make_shared<TensorData>();
    o.data->dtype = dtype;
    o.data->dims = dims;
    o.data->bytes.assign(static_cast<size_t>((*bits + 7) / 8), 0);
    o.view.dtype = dtype;
    o.view.dims = dims;
    o.view.data = o.data->bytes.data();
    *out = &o.view;
    return rt::Status::ok();
  }
  int threads() const override { return 1; }
  void parallel_for(int64_t n, int64_t, void (*fn)(void*, int64_t, int64_t), void* arg) override {
    if (n > 0) fn(arg, 0, n);
  }
  std::shared_ptr<TensorData> take_output(size_t i) { return std::move(outputs_[i].data); }

  static bool matches_static_shape(const Value& v, const std::vector<int64_t>& dims) {
    if (!v.shape || v.shape->size() != dims.size()) return false;
    for (size_t k = 0; k < dims.size(); ++k) {
      const auto c = (*v.shape)[k] ? (*v.shape)[k]->constant() : std::nullopt;
      if (!c || *c != dims[k]) return false;
    }
    return true;
  }

 private:
  struct Out {
    std::shared_ptr<TensorData> data;
    TensorView view;
  };
  const Graph& g_;
  const Node& n_;
  NodeAttrReader attrs_;
  std::vector<TensorView> inputs_;
  std::vector<Out> outputs_;
};

// Elements of a value's static shape, or nullopt when a dim is symbolic or unknown.
std::optional<int64_t> static_numel(const Value& v) {
  if (!v.shape) return std::nullopt;
  std::vector<int64_t> dims;
  for (const Dim& d : *v.shape) {
    auto c = d ? d->constant() : std::nullopt;
    if (!c) return std::nullopt;
    dims.push_back(*c);
  }
  return checked_numel(dims);
}

// Contents of a small integer tensor from its symbolic contents, when they are all numbers.
std::shared_ptr<const TensorData> data_from_sym(const Value& v) {
  if (!v.sym_data || v.kind != ValueKind::Tensor || !v.shape || v.shape->size() > 1) return nullptr;
  if (v.dtype != DType::Int64 && v.dtype != DType::Int32) return nullptr;
  auto n = static_numel(v);
  if (!n || *n != static_cast<int64_t>(v.sym_data->size())) return nullptr;
  auto d = std::make_shared<TensorData>();
  d->dtype = v.dtype;
  for (const Dim& dim : *v.shape) d->dims.push_back(*dim->constant());
  for (const DimExpr& e : *v.sym_data) {
    auto c = e.constant();
    if (!c) return nullptr;
    if (v.dtype == DType::Int64) {
      const auto x = static_cast<int64_t>(*c);
      const auto* p = reinterpret_cast<const uint8_t*>(&x);
      d->bytes.insert(d->bytes.end(), p, p + sizeof x);
    } else {
      if (*c < INT32_MIN || *c > INT32_MAX) return nullptr;
      const auto x = static_cast<int32_t>(*c);
      const auto* p = reinterpret_cast<const uint8_t*>(&x);
      d->bytes.insert(d->bytes.end(), p, p + sizeof x);
    }
  }
  return d;
}

bool foldable_op(const Node& n) {
  if (n.op == OpKind::Unknown) return false;
  return (op_flags(n.op) & (kTraining | kRandom | kSequenceTypes | kControlFlow)) == 0;
}

void fold_graph(Graph& g, int64_t max_fold_elements, FoldStats& stats) {
  for_each_subgraph(g, [&](Graph& s) { fold_graph(s, max_fold_elements, stats); });
  std::vector<bool> is_output(g.values.size(), false);
  for (ValueId o : g.outputs) is_output[static_cast<size_t>(o)] = true;
  std::set<size_t> dead;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!foldable_op(n) || n.outputs.empty()) continue;
    bool blocked = false;
    for (ValueId o : n.outputs)
      if (o != kNoValue && (is_output[static_cast<size_t>(o)] || g.value(o).kind != ValueKind::Tensor))
        blocked = true;
    if (blocked) continue;
    // 1. Contents shape inference already knows.
    std::vector<std::shared_ptr<const TensorData>> results(n.outputs.size());
    bool known = true;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k] == kNoValue) continue;
      const Value& v = g.value(n.outputs[k]);
      results[k] = v.data ? v.data : data_from_sym(v);
      if (!results[k]) known = false;
    }
    // 2. Evaluation with the kernel, over constant inputs only.
    if (!known) {
      bool constant_inputs = true;
      for (ValueId in : n.inputs)
        if (in != kNoValue && !g.value(in).data) constant_inputs = false;
      if (!constant_inputs || n.inputs.empty()) continue;
      bool small = true;
      for (ValueId o : n.outputs) {
        if (o == kNoValue) continue;
        auto numel = static_numel(g.value(o));
        if (!numel || *numel > max_fold_elements) small = false;
      }
      if (!small) {
        ++stats.too_large;
        continue;
      }
      rt::OpKernelFn kernel = rt::find_op_kernel(n.domain, n.op_type);
      if (!kernel) continue;
      FoldOpContext ctx(g, n);
      if (!kernel(ctx).is_ok()) continue;
      bool complete = true;
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        if (n.outputs[k] == kNoValue) continue;
        results[k] = ctx.take_output(k);
        if (!results[k]) complete = false;
      }
      if (!complete) continue;
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k] == kNoValue) continue;
      Value& v = g.value(n.outputs[k]);
      v.data = results[k];
      v.is_initializer = true;
    }
    dead.insert(i);
    ++stats.folded_nodes;
  }
  erase_nodes(g, dead);
}

}  // namespace

FoldStats fold_constants(Model& model, int64_t max_fold_elements) {
  FoldStats stats;
  fold_graph(*model.graph, max_fold_elements, stats);
  return stats;
}

}  // namespace cuvil
