// Pass: loop-carried sequence accumulators become Loop scan outputs (passes/loop_sequences.h).
#include "passes/loop_sequences.h"

#include "passes/graph_edit.h"

#include <algorithm>
#include <set>

namespace cuvil {
namespace {

void make_tensor_value(Value& v) {
  v.kind = ValueKind::Tensor;
  v.dtype = DType::Undefined;
  v.shape.reset();
  v.sym_data.reset();
  v.data.reset();
}

// Tries to turn carried slot k of Loop node `li` of `g` into a scan output.
bool rewrite_slot(Graph& g, size_t li, size_t k, std::set<size_t>& dead) {
  Node& loop = g.nodes[li];
  Graph& body = *loop.attrs.at("body").g;
  const size_t n_carried = loop.inputs.size() - 2;
  // The initial value: a SequenceEmpty of this graph.
  const ValueId init = loop.inputs[2 + k];
  if (init == kNoValue || g.value(init).producer < 0) return false;
  const size_t empty_index = static_cast<size_t>(g.value(init).producer);
  if (g.nodes[empty_index].op != OpKind::SequenceEmpty) return false;
  // In the body: the carried sequence is read once, by SequenceInsert(seq, t) without a
  // position, whose result is read only as the carried output of the same slot.
  if (body.inputs.size() != 2 + n_carried || body.outputs.size() < 1 + n_carried) return false;
  const ValueId seq_in = body.inputs[2 + k], seq_out = body.outputs[1 + k];
  const Uses in_uses = uses_of(body, seq_in);
  if (in_uses.nodes.size() != 1 || in_uses.outputs || in_uses.captures) return false;
  const size_t insert_index = in_uses.nodes[0];
  const Node& insert = body.nodes[insert_index];
  if (insert.op != OpKind::SequenceInsert || insert.inputs.size() != 2 || insert.inputs[0] != seq_in ||
      insert.outputs.size() != 1 || insert.outputs[0] != seq_out)
    return false;
  const Uses out_uses = uses_of(body, seq_out);
  if (!out_uses.nodes.empty() || out_uses.outputs != 1 || out_uses.captures) return false;
  const ValueId element = insert.inputs[1];
  // After the loop: the final sequence is only stacked along axis 0.
  const ValueId final_seq = k < loop.outputs.size() ? loop.outputs[k] : kNoValue;
  std::vector<size_t> stacks;
  if (final_seq != kNoValue) {
    const Uses u = uses_of(g, final_seq);
    if (u.outputs || u.captures) return false;
    for (size_t ni : u.nodes) {
      const Node& c = g.nodes[ni];
      if (c.op != OpKind::ConcatFromSequence || c.attr_int("new_axis", 0) != 1 ||
          c.attr_int("axis", -1) != 0 || c.inputs.size() != 1)
        return false;
      stacks.push_back(ni);
    }
  }

  // Body: drop the insert and the carried slot; yield the element as a new scan output.
  body.nodes.erase(body.nodes.begin() + static_cast<std::ptrdiff_t>(insert_index));
  refresh_producers(body);
  body.inputs.erase(body.inputs.begin() + static_cast<std::ptrdiff_t>(2 + k));
  body.outputs.erase(body.outputs.begin() + static_cast<std::ptrdiff_t>(1 + k));
  body.outputs.push_back(element);
  // Node: carried outputs first (padded to the new count), then scan outputs, the new last.
  std::vector<ValueId> finals(loop.outputs.begin(), loop.outputs.begin() + static_cast<std::ptrdiff_t>(
                                                         std::min(loop.outputs.size(), n_carried)));
  std::vector<ValueId> scans;
  if (loop.outputs.size() > n_carried) scans.assign(loop.outputs.begin() + static_cast<std::ptrdiff_t>(n_carried), loop.outputs.end());
  finals.resize(n_carried, kNoValue);
  finals.erase(finals.begin() + static_cast<std::ptrdiff_t>(k));
  const size_t n_scans = body.outputs.size() - 1 - (n_carried - 1) - 1;  // before the new one
  scans.resize(n_scans, kNoValue);
  ValueId stacked = final_seq;
  if (stacked == kNoValue) {
    std::string name = g.value(init).name + "_stacked";
    while (g.find(name) != kNoValue) name += "_";
    stacked = g.add_value(name);
  }
  make_tensor_value(g.value(stacked));
  scans.push_back(stacked);
  loop.outputs = finals;
  loop.outputs.insert(loop.outputs.end(), scans.begin(), scans.end());
  loop.inputs.erase(loop.inputs.begin() + static_cast<std::ptrdiff_t>(2 + k));
  for (size_t ni : stacks) {
    Node& c = g.nodes[ni];
    c.op = OpKind::Identity;
    c.op_type = "Identity";
    c.attrs.clear();
  }
  // The SequenceEmpty goes when nothing else reads it.
  if (!uses_of(g, init).any()) dead.insert(empty_index);
  refresh_producers(g);
  return true;
}

void rewrite_graph(Graph& g) {
  for (Node& n : g.nodes)
    for (auto& [key, a] : n.attrs) {
      if (a.g) rewrite_graph(*a.g);
      for (auto& sg : a.graphs) rewrite_graph(*sg);
    }
  std::set<size_t> dead_all;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op != OpKind::Loop || g.nodes[i].inputs.size() < 2) continue;
    auto it = g.nodes[i].attrs.find("body");
    if (it == g.nodes[i].attrs.end() || !it->second.g) continue;
    for (size_t k = 0; k + 2 < g.nodes[i].inputs.size();) {
      std::set<size_t> dead;
      if (rewrite_slot(g, i, k, dead)) {
        dead_all.insert(dead.begin(), dead.end());
        continue;  // slot k now holds the next carried value
      }
      ++k;
    }
  }
  erase_nodes(g, dead_all);
}

}  // namespace

void loop_sequences_to_scans(Model& model) { rewrite_graph(*model.graph); }

}  // namespace cuvil
