// Pass: shape arithmetic becomes expressions (passes/shape_arithmetic.h).
#include "passes/shape_arithmetic.h"

#include <map>

#include "ir/symbolic_ints.h"
#include "passes/graph_edit.h"

namespace cuvil {
namespace {

struct SymbolSource {
  ValueId value = kNoValue;
  int64_t axis = 0;
  int64_t defined_at = -1;  // node index; -1 for graph inputs, captures and initializers
};

void note_symbols(const Value& v, ValueId id, int64_t defined_at, std::map<std::string, SymbolSource>& out) {
  if (v.kind != ValueKind::Tensor || !v.shape) return;
  for (size_t axis = 0; axis < v.shape->size(); ++axis) {
    const Dim& d = (*v.shape)[axis];
    if (!d) continue;
    if (auto name = d->as_symbol()) out.emplace(*name, SymbolSource{id, static_cast<int64_t>(axis), defined_at});
  }
}

int64_t code_of(sym::PostfixOp::Kind k) {
  using K = sym::PostfixOp::Kind;
  switch (k) {
    case K::kConst: return symints::kConst;
    case K::kSymbol: return symints::kSlot;
    case K::kAdd: return symints::kAdd;
    case K::kMul: return symints::kMul;
    case K::kFloorDiv: return symints::kFloorDiv;
    case K::kMod: return symints::kMod;
    case K::kMin: return symints::kMin;
    case K::kMax: return symints::kMax;
  }
  return -1;
}

Attribute ints_attr(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::Ints;
  a.ints = std::move(v);
  return a;
}

// The SymbolicInts node computing `v` (output of node `index`), or nothing when a symbol has
// no source defined before it.
std::optional<Node> expressions_node(const Graph& g, const Node& n, size_t index, const Value& v,
                                     const std::map<std::string, SymbolSource>& sources) {
  std::vector<ValueId> inputs;
  std::map<std::string, int64_t> slot_of;
  std::vector<int64_t> dims, code, lengths;
  for (const DimExpr& e : *v.sym_data) {
    const std::vector<sym::PostfixOp> postfix = sym::to_postfix(e);
    for (const sym::PostfixOp& op : postfix) {
      int64_t value = op.value;
      if (op.kind == sym::PostfixOp::Kind::kSymbol) {
        auto slot = slot_of.find(op.symbol);
        if (slot == slot_of.end()) {
          auto src = sources.find(op.symbol);
          if (src == sources.end() || src->second.defined_at >= static_cast<int64_t>(index)) return std::nullopt;
          size_t input = 0;
          while (input < inputs.size() && inputs[input] != src->second.value) ++input;
          if (input == inputs.size()) inputs.push_back(src->second.value);
          slot = slot_of.emplace(op.symbol, static_cast<int64_t>(dims.size() / 2)).first;
          dims.insert(dims.end(), {static_cast<int64_t>(input), src->second.axis});
        }
        value = slot->second;
      }
      code.insert(code.end(), {code_of(op.kind), value});
    }
    lengths.push_back(static_cast<int64_t>(postfix.size()));
  }
  Node out;
  out.op = OpKind::SymbolicInts;
  out.op_type = "SymbolicInts";
  out.domain = "cuvil";
  out.opset = 1;
  out.name = n.name;
  out.inputs = inputs;
  out.outputs = {n.outputs[0]};
  out.attrs["dims"] = ints_attr(dims);
  out.attrs["code"] = ints_attr(code);
  out.attrs["lengths"] = ints_attr(lengths);
  std::vector<int64_t> shape;
  if (v.shape->size() == 1) shape.push_back(static_cast<int64_t>(v.sym_data->size()));
  out.attrs["shape"] = ints_attr(shape);
  Attribute to;
  to.kind = Attribute::Kind::Int;
  to.i = static_cast<int64_t>(v.dtype);
  out.attrs["to"] = to;
  (void)g;
  return out;
}

bool rewritable(const Graph& g, const Node& n, const std::vector<bool>& is_output) {
  if (n.op == OpKind::SymbolicInts || n.op == OpKind::Unknown || (op_flags(n.op) & (kControlFlow | kRandom)))
    return false;
  if (n.outputs.size() != 1 || n.outputs[0] == kNoValue || is_output[static_cast<size_t>(n.outputs[0])]) return false;
  const Value& v = g.value(n.outputs[0]);
  if (v.kind != ValueKind::Tensor || !v.sym_data || !v.shape || v.shape->size() > 1) return false;
  if (v.dtype != DType::Int64 && v.dtype != DType::Int32) return false;
  if (v.shape->size() == 1) {
    const Dim& len = (*v.shape)[0];
    if (!len || len->constant() != static_cast<int64_t>(v.sym_data->size())) return false;
  } else if (v.sym_data->size() != 1) {
    return false;
  }
  bool all_numbers = true;
  for (const DimExpr& e : *v.sym_data) all_numbers = all_numbers && e.is_constant();
  return !all_numbers;
}

int64_t rewrite_graph(Graph& g) {
  int64_t rewritten = 0;
  for_each_subgraph(g, [&](Graph& s) { rewritten += rewrite_graph(s); });
  std::map<std::string, SymbolSource> sources;
  for (ValueId id : g.inputs) note_symbols(g.value(id), id, -1, sources);
  for (ValueId id : g.captures) note_symbols(g.value(id), id, -1, sources);
  std::vector<bool> is_output(g.values.size(), false);
  for (ValueId o : g.outputs) is_output[static_cast<size_t>(o)] = true;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (rewritable(g, g.nodes[i], is_output)) {
      if (auto node = expressions_node(g, g.nodes[i], i, g.value(g.nodes[i].outputs[0]), sources)) {
        g.nodes[i] = std::move(*node);
        ++rewritten;
      }
    }
    for (ValueId o : g.nodes[i].outputs)
      if (o != kNoValue) note_symbols(g.value(o), o, static_cast<int64_t>(i), sources);
  }
  return rewritten;
}

}  // namespace

int64_t shape_arithmetic_to_expressions(Model& model) { return rewrite_graph(*model.graph); }

}  // namespace cuvil
