// Pass: common subexpression elimination (passes/cse.h). Nodes are keyed by a byte string of
// everything that determines their results.
#include "passes/cse.h"

#include <cstring>
#include <map>

#include "passes/graph_edit.h"

namespace cuvil {
namespace {

// Initializers up to this size are merged by contents; larger ones are weights, which
// exporters do not duplicate, and hashing them would cost compile time for nothing.
constexpr size_t kMaxMergedConstantBytes = 4096;

template <typename T>
void put(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_string(std::string& key, const std::string& s) {
  put(key, s.size());
  key += s;
}
void put_tensor(std::string& key, const TensorData& t) {
  put(key, t.dtype);
  put(key, t.dims.size());
  for (int64_t d : t.dims) put(key, d);
  put(key, t.bytes.size());
  key.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  put(key, t.strings.size());
  for (const auto& s : t.strings) put_string(key, s);
}

// Appends the attribute to the key; false for attributes that make a node unmergeable.
bool put_attribute(std::string& key, const std::string& name, const Attribute& a) {
  if (a.g || !a.graphs.empty()) return false;
  put_string(key, name);
  put(key, a.kind);
  put(key, a.i);
  uint32_t bits;
  std::memcpy(&bits, &a.f, sizeof bits);
  put(key, bits);
  put_string(key, a.s);
  put(key, a.ints.size());
  for (int64_t v : a.ints) put(key, v);
  put(key, a.floats.size());
  for (float f : a.floats) {
    std::memcpy(&bits, &f, sizeof bits);
    put(key, bits);
  }
  put(key, a.strings.size());
  for (const auto& s : a.strings) put_string(key, s);
  put(key, a.t != nullptr);
  if (a.t) put_tensor(key, *a.t);
  put(key, a.tensors.size());
  for (const auto& t : a.tensors) put_tensor(key, *t);
  return true;
}

int64_t cse_graph(Graph& g) {
  int64_t merged = 0;
  for_each_subgraph(g, [&](Graph& s) { merged += cse_graph(s); });
  std::vector<bool> is_output(g.values.size(), false);
  for (ValueId o : g.outputs) is_output[static_cast<size_t>(o)] = true;
  // Equal small initializers first: later nodes then see one value id for them.
  std::map<std::string, ValueId> constant_of;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& value = g.values[v];
    if (!value.is_initializer || !value.data || value.data->bytes.size() > kMaxMergedConstantBytes ||
        is_output[v])
      continue;
    std::string key;
    put_tensor(key, *value.data);
    auto [it, fresh] = constant_of.emplace(std::move(key), static_cast<ValueId>(v));
    if (!fresh) {
      replace_uses(g, static_cast<ValueId>(v), it->second);
      ++merged;
    }
  }
  std::map<std::string, size_t> first_with;
  std::set<size_t> dead;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op == OpKind::Unknown || (op_flags(n.op) & kRandom) || n.outputs.empty()) continue;
    bool keep = false;
    for (ValueId o : n.outputs)
      if (o != kNoValue && is_output[static_cast<size_t>(o)]) keep = true;
    if (keep) continue;
    std::string key;
    put_string(key, n.domain);
    put_string(key, n.op_type);
    put(key, n.opset);
    put(key, n.inputs.size());
    for (ValueId in : n.inputs) put(key, in);
    put(key, n.outputs.size());
    for (ValueId o : n.outputs) put(key, o == kNoValue);
    bool mergeable = true;
    for (const auto& [name, a] : n.attrs) mergeable = mergeable && put_attribute(key, name, a);
    if (!mergeable) continue;
    auto [it, fresh] = first_with.emplace(std::move(key), i);
    if (fresh) continue;
    const Node& first = g.nodes[it->second];
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (n.outputs[k] != kNoValue) replace_uses(g, n.outputs[k], first.outputs[k]);
    dead.insert(i);
    ++merged;
  }
  erase_nodes(g, dead);
  return merged;
}

}  // namespace

int64_t eliminate_common_subexpressions(Model& model) { return cse_graph(*model.graph); }

}  // namespace cuvil
