// Pass: Identity and inference-mode Dropout removal (passes/remove_identities.h).
#include "passes/remove_identities.h"

#include "passes/graph_edit.h"

namespace cuvil {
namespace {

bool is_constant_false(const Graph& g, ValueId v) {
  if (v == kNoValue) return true;
  const Value& value = g.value(v);
  return value.data && value.data->numel() == 1 && value.data->int_at(0) == 0;
}

// The input the node's output 0 equals, or kNoValue when the node is not a pass-through.
ValueId pass_through_input(const Graph& g, const Node& n) {
  if (n.inputs.empty() || n.inputs[0] == kNoValue || n.outputs.empty() || n.outputs[0] == kNoValue)
    return kNoValue;
  if (n.op == OpKind::Identity && n.inputs.size() == 1 && n.outputs.size() == 1) return n.inputs[0];
  // OptionalGetElement of a plain tensor (opset 18) is an Identity.
  if (n.op == OpKind::OptionalGetElement && n.inputs.size() == 1 && n.outputs.size() == 1 &&
      g.value(n.inputs[0]).kind == ValueKind::Tensor)
    return n.inputs[0];
  // A Cast to the type its input already has (torch's .to(torch.float32) on a float32 model).
  if (n.op == OpKind::Cast && n.inputs.size() == 1 && n.outputs.size() == 1) {
    const DType from = g.value(n.inputs[0]).dtype;
    return from != DType::Undefined && n.attrs.count("to") && static_cast<int64_t>(from) == n.attr_int("to", 0)
               ? n.inputs[0]
               : kNoValue;
  }
  // A Reshape/Flatten/Squeeze/Unsqueeze whose output shape is the input's, dim for dim (gpt2's
  // Reshape(input_ids, [-1, seq]) of an input [batch, seq]): shape inference read the shape
  // operand's contents, so at run time it is exactly the input's dims and nothing moves.
  if (n.op == OpKind::Reshape || n.op == OpKind::Flatten || n.op == OpKind::Squeeze || n.op == OpKind::Unsqueeze) {
    const Value& in = g.value(n.inputs[0]);
    const Value& out = g.value(n.outputs[0]);
    if (n.outputs.size() != 1 || !in.shape || !out.shape || in.shape->size() != out.shape->size() ||
        in.dtype != out.dtype)
      return kNoValue;
    for (size_t k = 0; k < in.shape->size(); ++k)
      if (!(*in.shape)[k] || !(*out.shape)[k] || !(*(*in.shape)[k] == *(*out.shape)[k])) return kNoValue;
    return n.inputs[0];
  }
  if (n.op != OpKind::Dropout) return kNoValue;
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.outputs[i] != kNoValue && uses_of(g, n.outputs[i]).any()) return kNoValue;
  // Opset 12+: training_mode is input 2; before, the is_test attribute (opset < 7) or
  // nothing: inference always passes the data through.
  if (n.inputs.size() > 2 && !is_constant_false(g, n.inputs[2])) return kNoValue;
  if (n.attr_int("is_test", 1) == 0) return kNoValue;
  return n.inputs[0];
}

void remove_in_graph(Graph& g) {
  for_each_subgraph(g, remove_in_graph);
  std::vector<bool> is_output(g.values.size(), false);
  for (ValueId o : g.outputs) is_output[static_cast<size_t>(o)] = true;
  std::set<size_t> dead;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const ValueId in = pass_through_input(g, n);
    if (in == kNoValue) continue;
    const ValueId out = n.outputs[0];
    if (g.value(in).kind != g.value(out).kind) continue;
    if (is_output[static_cast<size_t>(out)]) {
      // The graph output keeps its name: when the input is a node's result read only here,
      // that node writes the output directly instead.
      const int32_t producer = g.value(in).producer;
      const Uses u = uses_of(g, in);
      if (producer < 0 || dead.count(static_cast<size_t>(producer)) || u.outputs || u.captures || u.nodes.size() != 1)
        continue;
      for (ValueId& o : g.nodes[static_cast<size_t>(producer)].outputs)
        if (o == in) o = out;
      dead.insert(i);
      continue;
    }
    replace_uses(g, out, in);
    dead.insert(i);
  }
  erase_nodes(g, dead);
}

}  // namespace

void remove_identities(Model& model) { remove_in_graph(*model.graph); }

}  // namespace cuvil
