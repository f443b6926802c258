// Pass: chains of FusedConv and their pools run channels-last, with Transposes at the chain's boundaries
// (passes/choose_layout.h).
#include "passes/choose_layout.h"

#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "passes/graph_edit.h"
#include "support/error.h"

namespace cuvil {
namespace {

bool is_float(DType t) { return t == DType::Float || t == DType::Double || t == DType::Float16 || t == DType::BFloat16; }

std::optional<size_t> rank_of(const Value& v) {
  if (!v.shape) return std::nullopt;
  return v.shape->size();
}

bool is_pool(OpKind op) {
  return op == OpKind::MaxPool || op == OpKind::AveragePool || op == OpKind::GlobalAveragePool ||
         op == OpKind::GlobalMaxPool;
}

// The input slots through which a chain passes NHWC values: X, and a conv's residual.
std::vector<size_t> chain_slots(const Node& n) {
  return n.op == OpKind::FusedConv ? std::vector<size_t>{0, 3} : std::vector<size_t>{0};
}

bool eligible(const Graph& g, const Node& n) {
  if (n.op != OpKind::FusedConv && !is_pool(n.op)) return false;
  if (n.attr_string("layout", "NCHW") != "NCHW" || n.outputs.empty() || n.outputs[0] == kNoValue) return false;
  // MaxPool's Indices address NCHW positions: only a MaxPool whose Indices nobody reads moves.
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.op != OpKind::MaxPool || i > 1 || (n.outputs[i] != kNoValue && uses_of(g, n.outputs[i]).any())) return false;
  const Value& x = g.values.at(static_cast<size_t>(n.input(0)));
  const Value& y = g.values.at(static_cast<size_t>(n.outputs[0]));
  const auto r = rank_of(y);
  if (!r || *r < 3 || rank_of(x) != r) return false;
  // The NHWC pool kernels take float32 only (runtime/cpu/ops/pool_nhwc.h).
  if (n.op == OpKind::FusedConv ? !is_float(x.dtype) : x.dtype != DType::Float) return false;
  if (n.input(3) != kNoValue && rank_of(g.values.at(static_cast<size_t>(n.input(3)))) != r) return false;
  return true;
}

// perm applied to a shape: out[i] = in[perm[i]].
Shape permuted(const Shape& s, const std::vector<int64_t>& perm) {
  Shape out;
  for (int64_t p : perm) out.push_back(s[static_cast<size_t>(p)]);
  return out;
}

std::vector<int64_t> to_nhwc_perm(size_t r) {
  std::vector<int64_t> p = {0};
  for (size_t i = 2; i < r; ++i) p.push_back(static_cast<int64_t>(i));
  p.push_back(1);
  return p;
}

std::vector<int64_t> to_nchw_perm(size_t r) {
  std::vector<int64_t> p = {0, static_cast<int64_t>(r - 1)};
  for (size_t i = 1; i + 1 < r; ++i) p.push_back(static_cast<int64_t>(i));
  return p;
}

std::string fresh_name(const Graph& g, const std::string& base) {
  if (g.find(base) == kNoValue) return base;
  for (int i = 1;; ++i) {
    const std::string n = base + "_" + std::to_string(i);
    if (g.find(n) == kNoValue) return n;
  }
}

struct UnionFind {
  std::vector<size_t> parent;
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), size_t{0}); }
  size_t find(size_t a) { return parent[a] == a ? a : parent[a] = find(parent[a]); }
  void join(size_t a, size_t b) { parent[find(a)] = find(b); }
};

class LayoutChooser {
 public:
  LayoutChooser(Graph& g, int64_t opset, LayoutChoice choice) : g_(g), opset_(opset), choice_(choice) {}

  ChooseLayoutStats run() {
    ChooseLayoutStats stats;
    const size_t count = g_.nodes.size();
    std::vector<bool> chosen(count, false);
    // Chains: union of eligible convs linked through their X / residual slots.
    UnionFind uf(count);
    std::map<ValueId, size_t> first_reader;  // a value read as X/residual -> an eligible conv
    std::vector<bool> ok(count, false);
    // A pool moves only behind a conv or pool that moves (nodes are in order: its producer's
    // ok is known): a pool in front of the first conv would make the entry Transpose move the
    // larger, unpooled tensor, so a pool never starts a chain.
    for (size_t i = 0; i < count; ++i) {
      ok[i] = eligible(g_, g_.nodes[i]);
      if (!ok[i] || !is_pool(g_.nodes[i].op)) continue;
      const int32_t p = g_.value(g_.nodes[i].input(0)).producer;
      ok[i] = p >= 0 && ok[static_cast<size_t>(p)];
    }
    // A pool joins the chain of its producer only (two pools reading one value join through it).
    for (size_t i = 0; i < count; ++i) {
      if (!ok[i]) continue;
      const bool pool = is_pool(g_.nodes[i].op);
      for (size_t slot : chain_slots(g_.nodes[i])) {
        const ValueId v = g_.nodes[i].input(slot);
        if (v == kNoValue) continue;
        const int32_t p = g_.value(v).producer;
        if (p >= 0 && ok[static_cast<size_t>(p)]) uf.join(i, static_cast<size_t>(p));
        if (pool) continue;
        auto [it, fresh] = first_reader.emplace(v, i);
        if (!fresh) uf.join(i, it->second);
      }
    }
    // A chain's size counts its convs; a chain without one (pools alone) stays NCHW.
    std::map<size_t, int64_t> chain_size;
    for (size_t i = 0; i < count; ++i)
      if (ok[i]) chain_size[uf.find(i)] += g_.nodes[i].op == OpKind::FusedConv ? 1 : 0;
    for (size_t i = 0; i < count; ++i) {
      if (!ok[i]) continue;
      const int64_t size = chain_size[uf.find(i)];
      chosen[i] = size > 0 && (choice_ == LayoutChoice::kNhwc || (choice_ == LayoutChoice::kAuto && size >= kAutoNhwcMinChain));
    }
    for (const auto& [root, size] : chain_size)
      if (chosen[root]) ++stats.chains;

    // Each chosen conv writes an NHWC twin of its output.
    std::map<ValueId, ValueId> nhwc;  // NCHW value -> its NHWC twin
    for (size_t i = 0; i < count; ++i) {
      if (!chosen[i]) continue;
      Node& n = g_.nodes[i];
      const ValueId y = n.outputs[0];
      const Value yv = g_.value(y);
      const ValueId t = g_.add_value(fresh_name(g_, yv.name + "_nhwc"));
      g_.value(t).dtype = yv.dtype;
      g_.value(t).shape = permuted(*yv.shape, to_nhwc_perm(yv.shape->size()));
      nhwc[y] = t;
      n.outputs[0] = t;
      n.outputs.resize(1);  // a MaxPool's unread Indices
      Attribute a;
      a.kind = Attribute::Kind::String;
      a.s = "NHWC";
      n.attrs["layout"] = a;
      ++(n.op == OpKind::FusedConv ? stats.convs : stats.pools);
    }
    // Inputs from outside the chain go through one shared Transpose, placed before its first reader.
    std::map<size_t, std::vector<Node>> before, after;
    for (size_t i = 0; i < count; ++i) {
      if (!chosen[i]) continue;
      for (size_t slot : chain_slots(g_.nodes[i])) {
        const ValueId v = g_.nodes[i].input(slot);
        if (v == kNoValue) continue;
        auto it = nhwc.find(v);
        if (it == nhwc.end()) {
          const Value vv = g_.value(v);
          const ValueId t = g_.add_value(fresh_name(g_, vv.name + "_nhwc"));
          g_.value(t).dtype = vv.dtype;
          g_.value(t).shape = permuted(*vv.shape, to_nhwc_perm(vv.shape->size()));
          before[i].push_back(transpose(vv.name + "/to_nhwc", v, t, to_nhwc_perm(vv.shape->size())));
          it = nhwc.emplace(v, t).first;
          ++stats.transposes;
        }
        g_.nodes[i].inputs[slot] = it->second;
      }
    }
    // Outputs anything else still reads come back to NCHW under their own name.
    for (size_t i = 0; i < count; ++i) {
      if (!chosen[i]) continue;
      const ValueId t = g_.nodes[i].outputs[0];
      ValueId y = kNoValue;
      for (const auto& [from, to] : nhwc)
        if (to == t) y = from;
      CUVIL_ASSERT(y != kNoValue, "choose-layout lost the NCHW value of node '" << g_.nodes[i].name << "'");
      if (!uses_of(g_, y).any()) continue;
      after[i].push_back(transpose(g_.nodes[i].name + "/to_nchw", t, y, to_nchw_perm(g_.value(y).shape->size())));
      ++stats.transposes;
    }
    if (stats.convs == 0) return stats;
    std::vector<Node> nodes;
    nodes.reserve(count + static_cast<size_t>(stats.transposes));
    for (size_t i = 0; i < count; ++i) {
      for (Node& t : before[i]) nodes.push_back(std::move(t));
      nodes.push_back(std::move(g_.nodes[i]));
      for (Node& t : after[i]) nodes.push_back(std::move(t));
    }
    g_.nodes = std::move(nodes);
    refresh_producers(g_);
    return stats;
  }

 private:
  Node transpose(const std::string& name, ValueId in, ValueId out, const std::vector<int64_t>& perm) const {
    Node n = make_node(OpKind::Transpose, name, static_cast<int>(opset_));
    n.inputs = {in};
    n.outputs = {out};
    Attribute a;
    a.kind = Attribute::Kind::Ints;
    a.ints = perm;
    n.attrs["perm"] = a;
    return n;
  }

  Graph& g_;
  int64_t opset_;
  LayoutChoice choice_;
};

void choose_in_graph(Graph& g, int64_t opset, LayoutChoice choice, ChooseLayoutStats& stats) {
  for_each_subgraph(g, [&](Graph& s) { choose_in_graph(s, opset, choice, stats); });
  const ChooseLayoutStats s = LayoutChooser(g, opset, choice).run();
  stats.chains += s.chains;
  stats.convs += s.convs;
  stats.pools += s.pools;
  stats.transposes += s.transposes;
}

}  // namespace

std::optional<LayoutChoice> parse_layout_choice(const std::string& s) {
  if (s == "auto") return LayoutChoice::kAuto;
  if (s == "nchw") return LayoutChoice::kNchw;
  if (s == "nhwc") return LayoutChoice::kNhwc;
  return std::nullopt;
}

const char* layout_choice_name(LayoutChoice c) {
  switch (c) {
    case LayoutChoice::kAuto: return "auto";
    case LayoutChoice::kNchw: return "nchw";
    case LayoutChoice::kNhwc: return "nhwc";
  }
  return "?";
}

ChooseLayoutStats choose_layout(Model& model, LayoutChoice choice) {
  ChooseLayoutStats stats;
  if (choice == LayoutChoice::kNchw) return stats;
  const int64_t opset = opset_of(model, "");
  choose_in_graph(*model.graph, opset > 0 ? opset : 13, choice, stats);
  return stats;
}

}  // namespace cuvil
