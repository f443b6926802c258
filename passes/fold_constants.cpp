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

// The branch an If takes when its condition is a compile-time constant (a frozen input, a
// test on a static shape), or null.
std::shared_ptr<Graph> taken_branch(const Graph& g, const Node& n) {
  if (n.op != OpKind::If || n.inputs.empty() || n.inputs[0] == kNoValue) return nullptr;
  const Value& cond = g.value(n.inputs[0]);
  std::shared_ptr<const TensorData> data = cond.data ? cond.data : data_from_sym(cond);
  if (!data || data->numel() != 1 || data->bytes.empty()) return nullptr;
  const Attribute* a = n.attr(data->int_at(0) != 0 ? "then_branch" : "else_branch");
  if (!a || a->kind != Attribute::Kind::Graph || !a->g || !a->g->inputs.empty() ||
      a->g->outputs.size() != n.outputs.size())
    return nullptr;
  return a->g;
}

// Appends the nodes of `branch` (a subgraph of `g`) to `out`, their values copied into `g`
// under fresh names; captures become the enclosing values they name. Returns, per branch
// output, the value of `g` that holds it.
std::vector<ValueId> inline_branch(Graph& g, Graph& branch, std::vector<Node>& out) {
  std::vector<ValueId> map(branch.values.size(), kNoValue);
  for (ValueId c : branch.captures) map[static_cast<size_t>(c)] = branch.value(c).outer;
  for (size_t i = 0; i < branch.values.size(); ++i) {
    if (map[i] != kNoValue) continue;
    Value v = branch.values[i];
    const ValueId id = g.add_value(unique_value_name(g, v.name));
    v.name = g.value(id).name;
    v.producer = -1;
    g.value(id) = std::move(v);
    map[i] = id;
  }
  for (Node& n : branch.nodes) {
    Node copy = n;
    for (ValueId& in : copy.inputs)
      if (in != kNoValue) in = map[static_cast<size_t>(in)];
    for (ValueId& o : copy.outputs)
      if (o != kNoValue) o = map[static_cast<size_t>(o)];
    // The node's own subgraphs now hang off `g`: their captures name `g`'s values.
    for (auto& [key, a] : copy.attrs) {
      std::vector<std::shared_ptr<Graph>*> subs;
      if (a.g) subs.push_back(&a.g);
      for (auto& sg : a.graphs) subs.push_back(&sg);
      for (std::shared_ptr<Graph>* sub : subs) {
        (*sub)->parent = &g;
        for (ValueId c : (*sub)->captures) {
          Value& local = (*sub)->value(c);
          if (local.outer != kNoValue) local.outer = map[static_cast<size_t>(local.outer)];
        }
      }
    }
    out.push_back(std::move(copy));
  }
  std::vector<ValueId> outputs;
  for (ValueId o : branch.outputs) outputs.push_back(map[static_cast<size_t>(o)]);
  return outputs;
}

// Replaces every If of `g` (and of its subgraphs) whose condition is constant by the nodes of
// the branch it takes; each If output becomes an Identity of the branch's result, which
// remove-identities takes away. The branch not taken is dropped (it may not even be valid for
// these shapes). Returns how many Ifs went.
int64_t inline_constant_ifs(Graph& g) {
  int64_t inlined = 0;
  for_each_subgraph(g, [&](Graph& s) { inlined += inline_constant_ifs(s); });
  bool any = false;
  for (const Node& n : g.nodes) any = any || taken_branch(g, n);
  if (!any) return inlined;
  std::vector<Node> nodes;
  std::vector<Node> old = std::move(g.nodes);
  g.nodes.clear();
  for (Node& n : old) {
    std::shared_ptr<Graph> branch = taken_branch(g, n);
    if (!branch) {
      nodes.push_back(std::move(n));
      continue;
    }
    const std::vector<ValueId> results = inline_branch(g, *branch, nodes);
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k] == kNoValue) continue;
      Node id = make_node(OpKind::Identity, unique_value_name(g, n.name + ".taken_" + std::to_string(k)), n.opset);
      id.inputs = {results[k]};
      id.outputs = {n.outputs[k]};
      nodes.push_back(std::move(id));
    }
    ++inlined;
  }
  g.nodes = std::move(nodes);
  refresh_producers(g);
  return inlined;
}

}  // namespace

FoldStats fold_constants(Model& model, int64_t max_fold_elements) {
  FoldStats stats;
  fold_graph(*model.graph, max_fold_elements, stats);
  stats.inlined_ifs = inline_constant_ifs(*model.graph);
  if (stats.inlined_ifs) fold_graph(*model.graph, max_fold_elements, stats);
  return stats;
}

}  // namespace cuvil
