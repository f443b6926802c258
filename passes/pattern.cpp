// The pattern engine (passes/pattern.h): matching by walking producers from a root node, with
// backtracking over the input order of commutative ops; rewriting in sweeps of
// non-overlapping matches.
#include "passes/pattern.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "passes/graph_edit.h"

namespace cuvil {
namespace {

bool commutative(const std::string& op) { return op == "Add" || op == "Mul"; }

bool is_float(DType t) {
  return t == DType::Float || t == DType::Float16 || t == DType::BFloat16 || t == DType::Double;
}

struct Match {
  std::map<std::string, ValueId> vars;
  std::map<size_t, size_t> node_of;  // pattern node -> graph node
};

class Matcher {
 public:
  Matcher(const Graph& g, const Pattern& p, const std::vector<bool>& taken) : g_(g), p_(p), taken_(taken) {
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      producer_of_[p.nodes[i].output] = i;
      for (const std::string& o : p.nodes[i].more_outputs) producer_of_[o] = i;
    }
  }

  // Tries the pattern with its root at graph node `gi`.
  bool match_root(size_t gi, Match& m) {
    auto root = producer_of_.find(p_.root);
    if (root == producer_of_.end() || !match_node(root->second, gi, m)) return false;
    return internal_values_private(m) && constraints_hold(m);
  }

 private:
  bool match_node(size_t pi, size_t gi, Match& m) {
    if (auto it = m.node_of.find(pi); it != m.node_of.end()) return it->second == gi;
    for (const auto& [other_pi, other_gi] : m.node_of)
      if (other_gi == gi) return false;
    if (taken_[gi]) return false;
    const PatternNode& P = p_.nodes[pi];
    const Node& G = g_.nodes[gi];
    if (G.domain != P.domain || G.op_type != P.op || G.outputs.empty() || G.outputs[0] == kNoValue) return false;
    if (P.more_outputs.empty()) {
      for (size_t k = 1; k < G.outputs.size(); ++k)
        if (G.outputs[k] != kNoValue) return false;
    } else {
      if (G.outputs.size() != 1 + P.more_outputs.size()) return false;
      for (ValueId o : G.outputs)
        if (o == kNoValue) return false;
    }
    for (const PatternAttr& a : P.attrs)
      if (!has_attr(G, a)) return false;
    std::vector<ValueId> ins = G.inputs;
    if (P.reduce_last_axis) {
      if (!reduces_last_axis(G)) return false;
      ins.resize(std::min<size_t>(ins.size(), 1));
    }
    if (P.slice_first <= P.slice_last) {
      if (!slices_last_axis(G, P.slice_first, P.slice_last)) return false;
      ins.resize(std::min<size_t>(ins.size(), 1));
    }
    if (P.along_last_axis) {
      if (!along_last_axis(G)) return false;
      if (G.op_type == "Split") ins.resize(std::min<size_t>(ins.size(), 1));
    }
    while (!ins.empty() && ins.back() == kNoValue) ins.pop_back();
    if (ins.size() != P.inputs.size()) return false;
    for (ValueId v : ins)
      if (v == kNoValue) return false;
    m.node_of[pi] = gi;
    if (!bind(P.output, G.outputs[0], m)) return false;
    for (size_t k = 0; k < P.more_outputs.size(); ++k)
      if (!bind(P.more_outputs[k], G.outputs[k + 1], m)) return false;
    std::vector<std::vector<size_t>> orders = {{}};
    for (size_t k = 0; k < ins.size(); ++k) orders[0].push_back(k);
    if (commutative(P.op) && ins.size() == 2) orders.push_back({1, 0});
    for (const auto& order : orders) {
      Match trial = m;
      bool ok = true;
      for (size_t k = 0; k < ins.size() && ok; ++k) ok = bind_input(P.inputs[k], ins[order[k]], trial);
      if (ok) {
        m = std::move(trial);
        return true;
      }
    }
    return false;
  }

  bool bind(const std::string& var, ValueId v, Match& m) {
    auto [it, fresh] = m.vars.emplace(var, v);
    return fresh || it->second == v;
  }

  bool bind_input(const std::string& var, ValueId v, Match& m) {
    if (auto it = m.vars.find(var); it != m.vars.end()) return it->second == v;
    if (auto prod = producer_of_.find(var); prod != producer_of_.end()) {
      const int32_t gi = g_.value(v).producer;
      // The value must be the very output the variable names (a Split has several).
      if (gi < 0 || !match_node(prod->second, static_cast<size_t>(gi), m)) return false;
      auto bound = m.vars.find(var);
      return bound != m.vars.end() && bound->second == v;
    }
    if (auto c = p_.constants.find(var); c != p_.constants.end() && !constant_is(v, c->second)) return false;
    return bind(var, v, m);
  }

  bool constant_is(ValueId v, const PatternConstant& c) const {
    const Value& value = g_.value(v);
    if (!value.data || value.data->numel() < 1 || (!is_float(value.data->dtype) && !dtype_is_integer(value.data->dtype)))
      return false;
    const double expected = c.any_value ? value.data->float_at(0) : c.value;
    const double tol = c.tolerance * std::max(1.0, std::fabs(expected));
    for (int64_t i = 0; i < value.data->numel(); ++i)
      if (!(std::fabs(value.data->float_at(i) - expected) <= tol)) return false;
    return true;
  }

  bool reduces_last_axis(const Node& n) const {
    if (n.inputs.empty() || n.inputs[0] == kNoValue) return false;
    const Value& x = g_.value(n.inputs[0]);
    if (!x.shape || x.shape->empty()) return false;
    const int64_t rank = static_cast<int64_t>(x.shape->size());
    if (n.attr_int("keepdims", 1) != 1) return false;
    std::optional<std::vector<int64_t>> axes = n.attr_ints("axes");
    if (!axes && n.inputs.size() > 1 && n.inputs[1] != kNoValue) {
      const Value& a = g_.value(n.inputs[1]);
      if (!a.data) return false;
      axes.emplace();
      for (int64_t i = 0; i < a.data->numel(); ++i) axes->push_back(a.data->int_at(i));
    }
    return axes && axes->size() == 1 && ((*axes)[0] == -1 || (*axes)[0] == rank - 1);
  }

  static bool has_attr(const Node& n, const PatternAttr& a) {
    auto it = n.attrs.find(a.name);
    if (it == n.attrs.end()) return false;
    const Attribute& v = it->second;
    switch (a.kind) {
      case PatternAttr::Kind::Int: return v.kind == Attribute::Kind::Int && v.i == a.i;
      case PatternAttr::Kind::Float: return v.kind == Attribute::Kind::Float && v.f == static_cast<float>(a.f);
      case PatternAttr::Kind::String: return v.kind == Attribute::Kind::String && v.s == a.s;
      case PatternAttr::Kind::FloatOfConstant: return false;  // check_pattern refuses it here
    }
    return false;
  }

  // The constant length of the last axis of value v, or nullopt.
  std::optional<int64_t> last_dim(ValueId v) const {
    if (v == kNoValue) return std::nullopt;
    const Value& x = g_.value(v);
    if (!x.shape || x.shape->empty() || !x.shape->back()) return std::nullopt;
    return x.shape->back()->constant();
  }

  bool is_last_axis(int64_t axis, ValueId of) const {
    const Value& x = g_.value(of);
    if (!x.shape || x.shape->empty()) return false;
    const int64_t rank = static_cast<int64_t>(x.shape->size());
    return axis == -1 || axis == rank - 1;
  }

  // The integers of a constant input (nullopt when absent or not a known constant).
  std::optional<std::vector<int64_t>> constant_ints(const Node& n, size_t i) const {
    if (i >= n.inputs.size() || n.inputs[i] == kNoValue) return std::nullopt;
    const Value& v = g_.value(n.inputs[i]);
    if (!v.data || !dtype_is_integer(v.data->dtype)) return std::nullopt;
    std::vector<int64_t> out;
    for (int64_t k = 0; k < v.data->numel(); ++k) out.push_back(v.data->int_at(k));
    return out;
  }

  // Concat along the last axis; Split of the last axis into equal parts, one per output.
  bool along_last_axis(const Node& n) const {
    if (n.inputs.empty() || n.inputs[0] == kNoValue) return false;
    if (n.op_type == "Concat") return is_last_axis(n.attr_int("axis", 0), n.inputs[0]);
    if (n.op_type != "Split" || !is_last_axis(n.attr_int("axis", 0), n.inputs[0])) return false;
    const int64_t parts = static_cast<int64_t>(n.outputs.size());
    const std::optional<int64_t> d = last_dim(n.inputs[0]);
    if (!d || parts < 1 || *d % parts != 0) return false;
    if (n.attrs.count("num_outputs") && n.attr_int("num_outputs", 0) != parts) return false;
    std::optional<std::vector<int64_t>> sizes = n.opset >= 13 ? constant_ints(n, 1) : n.attr_ints("split");
    if (n.opset >= 13 && n.inputs.size() > 1 && n.inputs[1] != kNoValue && !sizes) return false;
    if (!sizes) return true;  // no sizes: equal parts
    if (static_cast<int64_t>(sizes->size()) != parts) return false;
    for (int64_t s : *sizes)
      if (s != *d / parts) return false;
    return true;
  }

  // A Slice of [first * D, last * D) of its input's last axis, step 1 (ONNX's clamping of
  // out-of-range starts and ends applied, so torch's INT64_MAX end reads as D).
  bool slices_last_axis(const Node& n, double first, double last) const {
    if (n.op_type != "Slice" || n.inputs.empty() || n.inputs[0] == kNoValue) return false;
    const std::optional<int64_t> d = last_dim(n.inputs[0]);
    if (!d) return false;
    std::optional<std::vector<int64_t>> starts, ends, axes, steps;
    if (n.opset >= 10) {
      starts = constant_ints(n, 1);
      ends = constant_ints(n, 2);
      if (n.input(3) != kNoValue && !(axes = constant_ints(n, 3))) return false;
      if (n.input(4) != kNoValue && !(steps = constant_ints(n, 4))) return false;
    } else {
      starts = n.attr_ints("starts");
      ends = n.attr_ints("ends");
      axes = n.attr_ints("axes");
    }
    if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return false;
    if (steps && (steps->size() != 1 || (*steps)[0] != 1)) return false;
    if (axes ? axes->size() != 1 || !is_last_axis((*axes)[0], n.inputs[0]) : !is_last_axis(0, n.inputs[0]))
      return false;
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + *d : v, 0, *d); };
    const double lo = first * static_cast<double>(*d), hi = last * static_cast<double>(*d);
    return static_cast<double>(clamp((*starts)[0])) == lo && static_cast<double>(clamp((*ends)[0])) == hi;
  }

  // Outputs of matched nodes other than the root are read only inside the match, and no
  // leaf variable names one of them.
  bool internal_values_private(const Match& m) const {
    std::set<size_t> matched;
    for (const auto& [pi, gi] : m.node_of) matched.insert(gi);
    const ValueId root_value = m.vars.at(p_.root);
    std::set<ValueId> internal;
    for (const auto& [pi, gi] : m.node_of)
      for (const ValueId out : g_.nodes[gi].outputs) {
        if (out == root_value || out == kNoValue) continue;
        internal.insert(out);
        const Uses u = uses_of(g_, out);
        if (u.outputs || u.captures) return false;
        for (size_t reader : u.nodes)
          if (!matched.count(reader)) return false;
      }
    for (const auto& [var, v] : m.vars)
      if (!producer_of_.count(var) && internal.count(v)) return false;
    return true;
  }

  bool constraints_hold(const Match& m) const {
    const Value& root = g_.value(m.vars.at(p_.root));
    if (root.kind != ValueKind::Tensor || !is_float(root.dtype)) return false;
    if (p_.action == Pattern::Action::Rewrite && p_.rewrite_domain == "cuvil" && root.dtype != DType::Float) return false;
    if (!p_.root_shape_of.empty() && !same_shape(root, g_.value(m.vars.at(p_.root_shape_of)))) return false;
    for (const std::string& var : p_.broadcasting)
      if (!broadcasts_onto(g_.value(m.vars.at(var)), g_.value(m.vars.at(p_.broadcast_onto)))) return false;
    if (p_.last_axis_vectors.empty()) return true;
    auto of = m.vars.find(p_.last_axis_of);
    if (of == m.vars.end()) return false;
    const Value& x = g_.value(of->second);
    if (!x.shape || x.shape->empty() || !x.shape->back()) return false;
    for (const std::string& var : p_.last_axis_vectors) {
      auto it = m.vars.find(var);
      if (it == m.vars.end()) return false;
      const Value& v = g_.value(it->second);
      if (!v.shape || v.shape->size() != 1 || !(*v.shape)[0] || !(*(*v.shape)[0] == *x.shape->back()) ||
          v.dtype != x.dtype)
        return false;
    }
    return true;
  }

  static bool same_shape(const Value& a, const Value& b) {
    if (!a.shape || !b.shape || a.shape->size() != b.shape->size()) return false;
    for (size_t i = 0; i < a.shape->size(); ++i)
      if (!(*a.shape)[i] || !(*b.shape)[i] || !(*(*a.shape)[i] == *(*b.shape)[i])) return false;
    return true;
  }

  // Every dim of `v` is 1 or equal to the aligned dim of `target`, and v's rank is not larger.
  static bool broadcasts_onto(const Value& v, const Value& target) {
    if (!v.shape || !target.shape || v.shape->size() > target.shape->size()) return false;
    const size_t off = target.shape->size() - v.shape->size();
    for (size_t i = 0; i < v.shape->size(); ++i) {
      const Dim& d = (*v.shape)[i];
      const Dim& t = (*target.shape)[off + i];
      if (!d) return false;
      if (d->constant() == 1) continue;
      if (!t || !(*d == *t)) return false;
    }
    return true;
  }

  const Graph& g_;
  const Pattern& p_;
  const std::vector<bool>& taken_;
  std::map<std::string, size_t> producer_of_;
};

Node make_replacement(const Graph& g, const Pattern& p, const Match& m, const Node& root) {
  Node n = make_node(*op_from_name(p.rewrite_domain, p.rewrite_op), root.name, p.rewrite_opset);
  for (const std::string& var : p.rewrite_inputs) n.inputs.push_back(var.empty() ? kNoValue : m.vars.at(var));
  n.outputs = {m.vars.at(p.root)};
  for (const PatternAttr& a : p.rewrite_attrs) {
    Attribute attr;
    switch (a.kind) {
      case PatternAttr::Kind::Int: attr.kind = Attribute::Kind::Int; attr.i = a.i; break;
      case PatternAttr::Kind::Float: attr.kind = Attribute::Kind::Float; attr.f = static_cast<float>(a.f); break;
      case PatternAttr::Kind::String: attr.kind = Attribute::Kind::String; attr.s = a.s; break;
      case PatternAttr::Kind::FloatOfConstant:
        attr.kind = Attribute::Kind::Float;
        attr.f = static_cast<float>(g.value(m.vars.at(a.s)).data->float_at(0));
        break;
    }
    n.attrs[a.name] = attr;
  }
  return n;
}

// One sweep of one pattern over one graph; returns the rewrites made.
int64_t sweep(Graph& g, const Pattern& p) {
  std::vector<bool> taken(g.nodes.size(), false);
  std::map<size_t, Node> replacement;  // root graph node -> its replacement
  std::set<size_t> dead;
  for (size_t gi = 0; gi < g.nodes.size(); ++gi) {
    Matcher matcher(g, p, taken);
    Match m;
    if (!matcher.match_root(gi, m)) continue;
    for (const auto& [pi, node] : m.node_of) {
      taken[node] = true;
      if (node != gi) dead.insert(node);
    }
    replacement.emplace(gi, make_replacement(g, p, m, g.nodes[gi]));
  }
  if (replacement.empty()) return 0;
  for (auto& [gi, node] : replacement) g.nodes[gi] = std::move(node);
  erase_nodes(g, dead);
  return static_cast<int64_t>(replacement.size());
}

void find_in_graph(const Graph& g, const Pattern& p, std::vector<std::vector<std::string>>& out) {
  for (const Node& n : g.nodes)
    for (const auto& [key, a] : n.attrs) {
      if (a.g) find_in_graph(*a.g, p, out);
      for (const auto& sg : a.graphs) find_in_graph(*sg, p, out);
    }
  std::vector<bool> taken(g.nodes.size(), false);
  for (size_t gi = 0; gi < g.nodes.size(); ++gi) {
    Matcher matcher(g, p, taken);
    Match m;
    if (!matcher.match_root(gi, m)) continue;
    std::vector<std::string> names;
    for (const auto& [pi, node] : m.node_of) {
      taken[node] = true;
      names.push_back(g.nodes[node].name);
    }
    out.push_back(std::move(names));
  }
}

void apply_in_graph(Graph& g, const std::vector<Pattern>& patterns, std::map<std::string, int64_t>& counts) {
  for_each_subgraph(g, [&](Graph& s) { apply_in_graph(s, patterns, counts); });
  // A rewrite can complete another pattern's match; a few rounds reach the fixed point of
  // every realistic rule set, and the bound keeps a pathological one from looping.
  for (int round = 0; round < 8; ++round) {
    int64_t changed = 0;
    for (const Pattern& p : patterns) {
      if (p.action != Pattern::Action::Rewrite) continue;
      const int64_t n = sweep(g, p);
      if (n) counts[p.name] += n;
      changed += n;
    }
    if (!changed) break;
  }
}

}  // namespace

// The pass that makes a cuvil op only after canonicalize (where rewrite patterns run), or
// nullptr: a rewrite matching such an op could never fire, so check_pattern refuses it.
static const char* made_after_canonicalize(const PatternNode& n) {
  if (n.domain != "cuvil") return nullptr;
  if (n.op == "Attention" || n.op == "MaskedSoftmax") return "fuse-attention";
  if (n.op == "FusedMatMul" || n.op == "FusedConv") return "fuse-epilogues";
  return nullptr;
}

std::string check_pattern(const Pattern& p) {
  if (p.nodes.empty()) return "pattern '" + p.name + "' matches no nodes";
  std::set<std::string> produced, vars;
  for (const PatternNode& n : p.nodes) {
    if (!op_from_name(n.domain, n.op))
      return "pattern '" + p.name + "': unknown op '" + (n.domain.empty() ? "" : n.domain + "::") + n.op + "'";
    if (p.action == Pattern::Action::Rewrite && made_after_canonicalize(n))
      return "pattern '" + p.name + "': a rewrite runs in the canonicalize pass, before any cuvil::" + n.op +
             " exists (the " + made_after_canonicalize(n) + " pass makes it later); match it with action fuse or "
             "keep, which see the graph after all passes";
    if (n.output.empty()) return "pattern '" + p.name + "': a '" + n.op + "' node has no output variable";
    std::vector<std::string> outs = {n.output};
    outs.insert(outs.end(), n.more_outputs.begin(), n.more_outputs.end());
    for (const std::string& o : outs)
      if (o.empty() || !produced.insert(o).second)
        return "pattern '" + p.name + "': variable '" + o + "' is the output of two nodes";
    for (const PatternAttr& a : n.attrs)
      if (a.kind == PatternAttr::Kind::FloatOfConstant)
        return "pattern '" + p.name + "': node attribute '" + a.name + "' must be a plain value";
    for (const std::string& in : n.inputs) vars.insert(in);
  }
  if (!produced.count(p.root)) return "pattern '" + p.name + "': root '" + p.root + "' is no node's output";
  auto bound = [&](const std::string& v) { return vars.count(v) || produced.count(v); };
  for (const auto& [var, c] : p.constants)
    if (!vars.count(var)) return "pattern '" + p.name + "': constant '" + var + "' is no node's input";
  std::vector<std::string> named = p.last_axis_vectors;
  named.insert(named.end(), p.broadcasting.begin(), p.broadcasting.end());
  if (!p.broadcasting.empty()) named.push_back(p.broadcast_onto);
  if (!p.root_shape_of.empty()) named.push_back(p.root_shape_of);
  for (const std::string& v : named)
    if (!bound(v)) return "pattern '" + p.name + "': '" + v + "' is not a variable of the match";
  if (p.action != Pattern::Action::Rewrite) return "";
  auto rewrite = op_from_name(p.rewrite_domain, p.rewrite_op);
  if (!rewrite) return "pattern '" + p.name + "': unknown rewrite op '" + p.rewrite_op + "'";
  if (p.rewrite_opset < 1 && p.rewrite_domain.empty()) return "pattern '" + p.name + "': the rewrite needs an opset";
  for (const std::string& v : p.rewrite_inputs)
    if (!v.empty() && (!bound(v) || produced.count(v)))
      return "pattern '" + p.name + "': rewrite input '" + v + "' is not an input variable of the match";
  for (const PatternAttr& a : p.rewrite_attrs)
    if (a.kind == PatternAttr::Kind::FloatOfConstant && !p.constants.count(a.s))
      return "pattern '" + p.name + "': attribute '" + a.name + "' takes '" + a.s + "', which is not a constant";
  return "";
}

std::vector<std::vector<std::string>> find_matches(const Model& model, const Pattern& pattern) {
  std::vector<std::vector<std::string>> out;
  find_in_graph(*model.graph, pattern, out);
  return out;
}

std::map<std::string, int64_t> apply_patterns(Model& model, const std::vector<Pattern>& patterns) {
  std::map<std::string, int64_t> counts;
  apply_in_graph(*model.graph, patterns, counts);
  return counts;
}

}  // namespace cuvil
