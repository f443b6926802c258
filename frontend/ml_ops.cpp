// ai.onnx.ml tree ensembles expanded at import (see ml_ops.h). Semantics follow the ONNX
// reference implementation (onnx/reference/ops/aionnxml/op_tree_ensemble*.py of onnx 1.23) and,
// where it refuses or is silent, ONNX Runtime's CPU kernels: a missing value (NaN) goes to the
// true branch when the node's missing_value_tracks_true is set and otherwise where its
// comparison sends it (so BRANCH_NEQ sends NaN to the true branch); post transforms of the
// regressors are applied as the classifier's are.
#include "frontend/ml_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "frontend/emitter.h"
#include "frontend/tensor_proto.h"

namespace cuvil::frontend {
namespace {

// The forest tables of cuvil::DecisionForest (ir/fused_ops.h).
enum Mode : int32_t { kLeq = 0, kLt, kGte, kGt, kEq, kNeq, kMember };
constexpr int64_t kColumns = 6;  // feature, true ref, false ref, mode | missing << 3, member begin, end

struct Forest {
  std::vector<int32_t> nodes;
  std::vector<double> splits;
  std::vector<double> members;
  std::vector<int32_t> roots;
  std::vector<int32_t> leaf_offsets{0};
  std::vector<int32_t> leaf_targets;
  std::vector<double> leaf_weights;
  int64_t node_count() const { return static_cast<int64_t>(nodes.size()) / kColumns; }
};

struct Refused {
  MlExpansion kind;
  std::string why;
};
template <typename... Parts>
[[noreturn]] void invalid(const Parts&... parts) {
  std::string s;
  ((s += parts), ...);
  throw Refused{MlExpansion::kInvalid, s};
}
template <typename... Parts>
[[noreturn]] void unsupported(const Parts&... parts) {
  std::string s;
  ((s += parts), ...);
  throw Refused{MlExpansion::kUnsupported, s};
}
std::string str(int64_t v) { return std::to_string(v); }

constexpr int64_t kMaxEntries = std::numeric_limits<int32_t>::max() - 1;

std::vector<int64_t> ints(const onnx::NodeProto& n, const char* name) {
  const auto* a = find_attr(n, name);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
}
std::vector<std::string> strings(const onnx::NodeProto& n, const char* name) {
  const auto* a = find_attr(n, name);
  return a ? std::vector<std::string>(a->strings().begin(), a->strings().end()) : std::vector<std::string>{};
}
std::string string_attr(const onnx::NodeProto& n, const char* name, const char* def) {
  const auto* a = find_attr(n, name);
  return a ? a->s() : def;
}
// A tensor attribute's elements as doubles (float, double, float16, integer types).
std::vector<double> tensor_values(const onnx::NodeProto& n, const char* name) {
  const auto* a = find_attr(n, name);
  if (!a) return {};
  if (a->type() != onnx::AttributeProto::TENSOR) invalid("attribute '", name, "' must be a tensor");
  auto t = import_tensor(a->t(), "", std::string("attribute '") + name + "'");
  std::vector<double> v(static_cast<size_t>(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i) v[static_cast<size_t>(i)] = t->float_at(i);
  return v;
}
// `name` (floats) or `name`_as_tensor (a double tensor), whichever is given.
std::vector<double> floats_or_tensor(const onnx::NodeProto& n, const char* name, const char* tensor_name) {
  if (find_attr(n, tensor_name)) return tensor_values(n, tensor_name);
  const auto* a = find_attr(n, name);
  return a ? std::vector<double>(a->floats().begin(), a->floats().end()) : std::vector<double>{};
}
void check_length(const char* name, size_t got, size_t want, const char* of) {
  if (got != want) invalid("attribute '", name, "' has ", str(static_cast<int64_t>(got)), " entries; ", of, " has ",
                           str(static_cast<int64_t>(want)));
}

// Every tree reachable from a root is acyclic (shared subtrees are allowed): a cycle would make
// the walk endless. Iterative, so a deep chain cannot overflow the stack.
void check_acyclic(const Forest& f) {
  const int64_t m = f.node_count();
  std::vector<uint8_t> color(static_cast<size_t>(m), 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int32_t, int>> path;
  for (int32_t root : f.roots) {
    if (root < 0 || color[static_cast<size_t>(root)] == 2) continue;
    color[static_cast<size_t>(root)] = 1;
    path.push_back({root, 0});
    while (!path.empty()) {
      const int32_t v = path.back().first;
      const int k = path.back().second++;
      if (k == 2) {
        color[static_cast<size_t>(v)] = 2;
        path.pop_back();
        continue;
      }
      const int32_t c = f.nodes[static_cast<size_t>(v * kColumns + 1 + k)];
      if (c < 0) continue;
      if (color[static_cast<size_t>(c)] == 1)
        invalid("node ", str(c), " is reached again from its own subtree (the trees must be acyclic)");
      if (color[static_cast<size_t>(c)] == 0) {
        color[static_cast<size_t>(c)] = 1;
        path.push_back({c, 0});
      }
    }
  }
}

int32_t leaf_ref(int64_t leaf) { return static_cast<int32_t>(-(leaf + 1)); }

// Sets of BRANCH_MEMBER nodes: membership_values lists them in node order, each set ended by
// a NaN (the last one's NaN may be left out).
void add_member_sets(Forest& f, const std::vector<int64_t>& member_nodes, const std::vector<double>& values) {
  size_t pos = 0;
  for (int64_t node : member_nodes) {
    if (pos >= values.size())
      invalid("membership_values holds fewer NaN-delimited sets than there are BRANCH_MEMBER nodes (",
              str(static_cast<int64_t>(member_nodes.size())), ")");
    const size_t begin = f.members.size();
    for (; pos < values.size() && !std::isnan(values[pos]); ++pos) f.members.push_back(values[pos]);
    ++pos;  // the NaN
    if (f.members.size() > static_cast<size_t>(kMaxEntries)) invalid("membership_values is too long");
    f.nodes[static_cast<size_t>(node * kColumns + 4)] = static_cast<int32_t>(begin);
    f.nodes[static_cast<size_t>(node * kColumns + 5)] = static_cast<int32_t>(f.members.size());
  }
}

// TreeEnsemble (ml 5): interior nodes and leaves in separate lists.
Forest forest_of_tree_ensemble(const onnx::NodeProto& n, int64_t n_targets) {
  const std::vector<int64_t> features = ints(n, "nodes_featureids"), tids = ints(n, "nodes_truenodeids"),
                             fids = ints(n, "nodes_falsenodeids"), tleaf = ints(n, "nodes_trueleafs"),
                             fleaf = ints(n, "nodes_falseleafs"), missing = ints(n, "nodes_missing_value_tracks_true"),
                             leaf_targets = ints(n, "leaf_targetids"), roots = ints(n, "tree_roots");
  const std::vector<double> modes = tensor_values(n, "nodes_modes"), splits = tensor_values(n, "nodes_splits"),
                            weights = tensor_values(n, "leaf_weights");
  const size_t m = features.size(), leaves = leaf_targets.size();
  if (m > static_cast<size_t>(kMaxEntries) || leaves > static_cast<size_t>(kMaxEntries)) invalid("the ensemble is too large");
  for (auto [name, v] : {std::pair{"nodes_truenodeids", &tids}, {"nodes_falsenodeids", &fids},
                         {"nodes_trueleafs", &tleaf}, {"nodes_falseleafs", &fleaf}})
    check_length(name, v->size(), m, "nodes_featureids");
  check_length("nodes_modes", modes.size(), m, "nodes_featureids");
  check_length("nodes_splits", splits.size(), m, "nodes_featureids");
  if (!missing.empty()) check_length("nodes_missing_value_tracks_true", missing.size(), m, "nodes_featureids");
  check_length("leaf_weights", weights.size(), leaves, "leaf_targetids");
  if (roots.empty()) invalid("attribute 'tree_roots' is empty (no trees)");
  Forest f;
  std::vector<int64_t> member_nodes;
  auto ref = [&](int64_t id, int64_t is_leaf, const char* what, size_t i) -> int32_t {
    const int64_t bound = is_leaf ? static_cast<int64_t>(leaves) : static_cast<int64_t>(m);
    if (id < 0 || id >= bound)
      invalid(what, "[", str(static_cast<int64_t>(i)), "] = ", str(id), " is not a ", is_leaf ? "leaf" : "node",
              " index (", str(bound), " ", is_leaf ? "leaves" : "nodes", ")");
    return is_leaf ? leaf_ref(id) : static_cast<int32_t>(id);
  };
  for (size_t i = 0; i < m; ++i) {
    const double mode = modes[i];
    if (!(mode >= kLeq && mode <= kMember) || mode != std::floor(mode))
      invalid("nodes_modes[", str(static_cast<int64_t>(i)), "] is not a mode (0 BRANCH_LEQ .. 6 BRANCH_MEMBER)");
    if (features[i] < 0 || features[i] > kMaxEntries)
      invalid("nodes_featureids[", str(static_cast<int64_t>(i)), "] = ", str(features[i]), " is not a feature index");
    if (mode == kMember) member_nodes.push_back(static_cast<int64_t>(i));
    const int32_t miss = !missing.empty() && missing[i] != 0;
    f.nodes.insert(f.nodes.end(), {static_cast<int32_t>(features[i]), ref(tids[i], tleaf[i], "nodes_truenodeids", i),
                                   ref(fids[i], fleaf[i], "nodes_falsenodeids", i),
                                   static_cast<int32_t>(mode) | (miss << 3), 0, 0});
    f.splits.push_back(splits[i]);
  }
  add_member_sets(f, member_nodes, tensor_values(n, "membership_values"));
  for (size_t i = 0; i < roots.size(); ++i) f.roots.push_back(ref(roots[i], 0, "tree_roots", i));
  for (size_t j = 0; j < leaves; ++j) {
    if (leaf_targets[j] < 0 || leaf_targets[j] >= n_targets)
      invalid("leaf_targetids[", str(static_cast<int64_t>(j)), "] = ", str(leaf_targets[j]), " is not below n_targets (",
              str(n_targets), ")");
    f.leaf_targets.push_back(static_cast<int32_t>(leaf_targets[j]));
    f.leaf_weights.push_back(weights[j]);
    f.leaf_offsets.push_back(static_cast<int32_t>(j + 1));
  }
  return f;
}

// TreeEnsembleRegressor / TreeEnsembleClassifier (ml 1 and 3): nodes named by (tree id, node
// id), leaves are nodes of mode LEAF, and the votes (`votes`: "target" or "class") name their
// leaf by (tree id, node id). A tree's root is its first node in the lists.
Forest forest_of_old_ensemble(const onnx::NodeProto& n, const std::string& votes, int64_t n_targets) {
  const std::vector<int64_t> trees = ints(n, "nodes_treeids"), ids = ints(n, "nodes_nodeids"),
                             features = ints(n, "nodes_featureids"), tids = ints(n, "nodes_truenodeids"),
                             fids = ints(n, "nodes_falsenodeids"), missing = ints(n, "nodes_missing_value_tracks_true");
  const std::vector<std::string> modes = strings(n, "nodes_modes");
  const std::vector<double> values = floats_or_tensor(n, "nodes_values", "nodes_values_as_tensor");
  const size_t m = trees.size();
  if (m == 0) invalid("attribute 'nodes_treeids' is empty (no trees)");
  if (m > static_cast<size_t>(kMaxEntries)) invalid("the ensemble is too large");
  for (auto [name, v] : {std::pair{"nodes_nodeids", &ids}, {"nodes_featureids", &features}}) check_length(name, v->size(), m, "nodes_treeids");
  check_length("nodes_modes", modes.size(), m, "nodes_treeids");
  if (!missing.empty()) check_length("nodes_missing_value_tracks_true", missing.size(), m, "nodes_treeids");
  std::map<std::pair<int64_t, int64_t>, size_t> index;
  std::map<int64_t, size_t> root_of;  // tree id -> its first node
  for (size_t i = 0; i < m; ++i) {
    if (!index.emplace(std::pair{trees[i], ids[i]}, i).second)
      invalid("node id ", str(ids[i]), " appears twice in tree ", str(trees[i]));
    root_of.emplace(trees[i], i);
  }
  // Interior nodes and leaves numbered in list order.
  std::vector<int32_t> number(m);
  int64_t interior = 0, leaves = 0;
  static const std::map<std::string, int32_t> kModes = {{"BRANCH_LEQ", kLeq}, {"BRANCH_LT", kLt}, {"BRANCH_GTE", kGte},
                                                        {"BRANCH_GT", kGt},   {"BRANCH_EQ", kEq}, {"BRANCH_NEQ", kNeq}};
  for (size_t i = 0; i < m; ++i) number[i] = static_cast<int32_t>(modes[i] == "LEAF" ? leaves++ : interior++);
  auto ref_of = [&](size_t i) { return modes[i] == "LEAF" ? leaf_ref(number[i]) : number[i]; };
  Forest f;
  for (size_t i = 0; i < m; ++i) {
    if (modes[i] == "LEAF") continue;
    auto mode = kModes.find(modes[i]);
    if (mode == kModes.end()) {
      if (modes[i] == "BRANCH_MEMBER") unsupported("mode BRANCH_MEMBER in nodes_modes (TreeEnsemble of ai.onnx.ml 5 has set membership)");
      invalid("nodes_modes[", str(static_cast<int64_t>(i)), "] = '", modes[i], "' is not a mode");
    }
    if (i >= values.size()) invalid("nodes_values has no value for node ", str(static_cast<int64_t>(i)));
    if (features[i] < 0 || features[i] > kMaxEntries)
      invalid("nodes_featureids[", str(static_cast<int64_t>(i)), "] = ", str(features[i]), " is not a feature index");
    int32_t child[2];
    for (int b = 0; b < 2; ++b) {
      const int64_t id = b == 0 ? (i < tids.size() ? tids[i] : -1) : (i < fids.size() ? fids[i] : -1);
      auto it = index.find({trees[i], id});
      if (it == index.end())
        invalid("node ", str(ids[i]), " of tree ", str(trees[i]), ": its ", b == 0 ? "true" : "false", " branch, node ",
                str(id), ", is not in the tree");
      child[b] = ref_of(it->second);
    }
    const int32_t miss = !missing.empty() && missing[i] != 0;
    f.nodes.insert(f.nodes.end(), {static_cast<int32_t>(features[i]), child[0], child[1], mode->second | (miss << 3), 0, 0});
    f.splits.push_back(values[i]);
  }
  for (const auto& [tree, i] : root_of) f.roots.push_back(ref_of(i));
  // Votes, grouped by leaf in list order.
  const std::vector<int64_t> vtrees = ints(n, (votes + "_treeids").c_str()), vnodes = ints(n, (votes + "_nodeids").c_str()),
                             vids = ints(n, (votes + "_ids").c_str());
  const std::vector<double> vweights = floats_or_tensor(n, (votes + "_weights").c_str(), (votes + "_weights_as_tensor").c_str());
  const std::string tn = votes + "_treeids";
  check_length((votes + "_nodeids").c_str(), vnodes.size(), vtrees.size(), tn.c_str());
  check_length((votes + "_ids").c_str(), vids.size(), vtrees.size(), tn.c_str());
  check_length((votes + "_weights").c_str(), vweights.size(), vtrees.size(), tn.c_str());
  if (vtrees.size() > static_cast<size_t>(kMaxEntries)) invalid("the ensemble is too large");
  std::vector<std::vector<size_t>> of_leaf(static_cast<size_t>(leaves));
  for (size_t v = 0; v < vtrees.size(); ++v) {
    auto it = index.find({vtrees[v], vnodes[v]});
    if (it == index.end() || modes[it->second] != "LEAF")
      invalid(votes, " vote ", str(static_cast<int64_t>(v)), " names node ", str(vnodes[v]), " of tree ", str(vtrees[v]),
              ", which is not a leaf of the ensemble");
    if (vids[v] < 0 || vids[v] >= n_targets)
      invalid(votes, "_ids[", str(static_cast<int64_t>(v)), "] = ", str(vids[v]), " is not below ", str(n_targets));
    of_leaf[static_cast<size_t>(number[it->second])].push_back(v);
  }
  for (const auto& votes_of : of_leaf) {
    for (size_t v : votes_of) {
      f.leaf_targets.push_back(static_cast<int32_t>(vids[v]));
      f.leaf_weights.push_back(vweights[v]);
    }
    f.leaf_offsets.push_back(static_cast<int32_t>(f.leaf_targets.size()));
  }
  return f;
}

template <typename T>
std::string raw_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));  // little-endian hosts
}

int64_t aggregate_code(const std::string& s) {
  static const std::map<std::string, int64_t> kCodes = {{"AVERAGE", 0}, {"SUM", 1}, {"MIN", 2}, {"MAX", 3}};
  auto it = kCodes.find(s);
  if (it == kCodes.end()) invalid("aggregate_function '", s, "' (AVERAGE, SUM, MIN or MAX)");
  return it->second;
}
int64_t post_transform_code(const std::string& s) {
  static const std::map<std::string, int64_t> kCodes = {
      {"NONE", 0}, {"SOFTMAX", 1}, {"LOGISTIC", 2}, {"SOFTMAX_ZERO", 3}, {"PROBIT", 4}};
  auto it = kCodes.find(s);
  if (it == kCodes.end()) invalid("post_transform '", s, "' (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO or PROBIT)");
  return it->second;
}

// The DecisionForest node over `x` writing `out`.
void emit_forest(Emitter& e, Forest f, const std::string& x, const std::string& out, int64_t n_targets,
                 int64_t aggregate, int64_t post_transform, int64_t to_float, int64_t binary,
                 const std::vector<double>& base_values) {
  check_acyclic(f);
  if (f.nodes.empty()) {  // every tree is one leaf: a row no root refers to keeps the table non-empty
    f.nodes.assign(kColumns, 0);
    f.splits.push_back(0);
  }
  if (f.leaf_targets.empty()) {  // no votes: an entry no leaf's range covers
    f.leaf_targets.push_back(0);
    f.leaf_weights.push_back(0);
  }
  const int64_t m = f.node_count();
  std::vector<std::string> ins = {
      x,
      e.raw_constant(onnx::TensorProto::INT32, {m, kColumns}, raw_bytes(f.nodes)),
      e.raw_constant(onnx::TensorProto::DOUBLE, {m}, raw_bytes(f.splits)),
      e.raw_constant(onnx::TensorProto::INT32, {static_cast<int64_t>(f.roots.size())}, raw_bytes(f.roots)),
      e.raw_constant(onnx::TensorProto::INT32, {static_cast<int64_t>(f.leaf_offsets.size())}, raw_bytes(f.leaf_offsets)),
      e.raw_constant(onnx::TensorProto::INT32, {static_cast<int64_t>(f.leaf_targets.size())}, raw_bytes(f.leaf_targets)),
      e.raw_constant(onnx::TensorProto::DOUBLE, {static_cast<int64_t>(f.leaf_weights.size())}, raw_bytes(f.leaf_weights)),
      f.members.empty() ? std::string()
                        : e.raw_constant(onnx::TensorProto::DOUBLE, {static_cast<int64_t>(f.members.size())}, raw_bytes(f.members)),
      base_values.empty() ? std::string()
                          : e.raw_constant(onnx::TensorProto::DOUBLE, {static_cast<int64_t>(base_values.size())}, raw_bytes(base_values)),
  };
  while (ins.back().empty()) ins.pop_back();
  onnx::NodeProto& node = e.node("DecisionForest", ins, {out}, "cuvil");
  Emitter::set_int(node, "n_targets", n_targets);
  Emitter::set_int(node, "aggregate_function", aggregate);
  Emitter::set_int(node, "post_transform", post_transform);
  Emitter::set_int(node, "to_float", to_float);
  Emitter::set_int(node, "binary", binary);
}

void need_one_input(const onnx::NodeProto& n) {
  if (n.input_size() != 1 || n.input(0).empty()) invalid("takes one input, X");
}

void tree_ensemble(const onnx::NodeProto& n, Emitter& e) {
  need_one_input(n);
  if (n.output_size() != 1 || n.output(0).empty()) invalid("has one output, Y");
  const int64_t n_targets = attr_int(n, "n_targets", 0);
  if (n_targets < 1 || n_targets > kMaxEntries) invalid("n_targets ", str(n_targets), " (a positive count is required)");
  const int64_t aggregate = attr_int(n, "aggregate_function", 1), post = attr_int(n, "post_transform", 0);
  if (aggregate < 0 || aggregate > 3) invalid("aggregate_function ", str(aggregate), " (0 AVERAGE .. 3 MAX)");
  if (post < 0 || post > 4) invalid("post_transform ", str(post), " (0 NONE .. 4 PROBIT)");
  emit_forest(e, forest_of_tree_ensemble(n, n_targets), n.input(0), n.output(0), n_targets, aggregate, post, 0, 0, {});
}

std::vector<double> base_values_of(const onnx::NodeProto& n, int64_t count) {
  std::vector<double> base = floats_or_tensor(n, "base_values", "base_values_as_tensor");
  if (base.size() > 1 && static_cast<int64_t>(base.size()) != count)
    invalid("base_values has ", str(static_cast<int64_t>(base.size())), " entries; it must have one per target or class (",
            str(count), "), one for all, or none");
  return base;
}

void tree_ensemble_regressor(const onnx::NodeProto& n, Emitter& e) {
  need_one_input(n);
  if (n.output_size() != 1 || n.output(0).empty()) invalid("has one output, Y");
  int64_t n_targets = attr_int(n, "n_targets", 0);
  if (!find_attr(n, "n_targets"))
    for (int64_t t : ints(n, "target_ids")) n_targets = std::max(n_targets, t + 1);
  if (n_targets < 1 || n_targets > kMaxEntries) invalid("n_targets ", str(n_targets), " (a positive count is required)");
  emit_forest(e, forest_of_old_ensemble(n, "target", n_targets), n.input(0), n.output(0), n_targets,
              aggregate_code(string_attr(n, "aggregate_function", "SUM")),
              post_transform_code(string_attr(n, "post_transform", "NONE")), 1, 0, base_values_of(n, n_targets));
}

// A classifier's outputs Y (labels) and Z (scores) and its integer labels (`attr`); string
// labels are refused, cuvil having no string tensors.
std::vector<int64_t> classifier_labels(const onnx::NodeProto& n, const char* attr) {
  need_one_input(n);
  if (n.output_size() < 1 || n.output_size() > 2) invalid("has outputs Y (labels) and Z (scores)");
  if (find_attr(n, "classlabels_strings"))
    unsupported("string class labels (classlabels_strings): cuvil has no string tensors; integer labels (", attr,
                ") are supported");
  return ints(n, attr);
}
// The value the scores go to: output Z, or a fresh value when Z is not asked for.
std::string scores_value(const onnx::NodeProto& n, Emitter& e) {
  return n.output_size() > 1 && !n.output(1).empty() ? n.output(1) : e.value("scores");
}
// Y = labels[argmax over each row of `scores`], when Y is asked for.
void emit_labels(const onnx::NodeProto& n, Emitter& e, const std::string& scores, const std::vector<int64_t>& labels) {
  if (n.output(0).empty()) return;
  std::string best = e.value("best");
  onnx::NodeProto& am = e.node("ArgMax", {scores}, {best});
  Emitter::set_int(am, "axis", 1);
  Emitter::set_int(am, "keepdims", 0);
  e.node("Gather", {e.raw_constant(onnx::TensorProto::INT64, {static_cast<int64_t>(labels.size())}, raw_bytes(labels)), best},
         {n.output(0)});
}

// Scores as the reference computes them (the sums of the class votes plus base_values, then
// the post transform), the label the class of the highest score. With every vote for one class
// (binary), the score s becomes the two columns (1 - s, s) (NONE, PROBIT) or (-s, s) before the
// transform.
void tree_ensemble_classifier(const onnx::NodeProto& n, Emitter& e) {
  std::vector<int64_t> labels = classifier_labels(n, "classlabels_int64s");
  if (labels.empty()) invalid("classlabels_int64s is empty (one of classlabels_int64s or classlabels_strings is required)");
  if (labels.size() > static_cast<size_t>(kMaxEntries)) invalid("the ensemble is too large");
  const int64_t n_classes = static_cast<int64_t>(labels.size());
  const std::vector<int64_t> class_ids = ints(n, "class_ids");
  const bool binary = !class_ids.empty() && std::set<int64_t>(class_ids.begin(), class_ids.end()).size() == 1;
  if (n_classes == 1) {
    if (labels[0] != 1 || !binary)
      unsupported("one class label other than a binary ensemble's label 1 (classlabels_int64s = [", str(labels[0]), "])");
    labels = {0, 1};  // the reference's labels of the two score columns
  }
  const std::string scores = scores_value(n, e);
  emit_forest(e, forest_of_old_ensemble(n, "class", n_classes), n.input(0), scores, n_classes, 1,
              post_transform_code(string_attr(n, "post_transform", "NONE")), 1, binary ? 1 : 0,
              base_values_of(n, n_classes));
  emit_labels(n, e, scores, labels);
}

// ---- linear models and preprocessing: plain ONNX ops ----

std::vector<float> floats(const onnx::NodeProto& n, const char* name) {
  const auto* a = find_attr(n, name);
  return a ? std::vector<float>(a->floats().begin(), a->floats().end()) : std::vector<float>{};
}
std::string float_constant(Emitter& e, const std::vector<float>& v, const std::vector<int64_t>& dims) {
  return e.raw_constant(onnx::TensorProto::FLOAT, dims, raw_bytes(v));
}
std::string as_float(Emitter& e, const std::string& x) {
  std::string out = e.value("xf");
  Emitter::set_int(e.node("Cast", {x}, {out}), "to", onnx::TensorProto::FLOAT);
  return out;
}
// A reduction over axis 1 keeping it: axes as an attribute before the opset that made it an
// input (13 for ReduceSum, 18 for the others).
std::string reduce_rows(Emitter& e, const char* op, const std::string& x) {
  const bool input = e.opset >= (std::string(op) == "ReduceSum" ? 13 : 18);
  std::string out = e.value(op);
  onnx::NodeProto& n = e.node(op, input ? std::vector<std::string>{x, e.ints({1})} : std::vector<std::string>{x}, {out});
  if (!input) Emitter::set_ints(n, "axes", {1});
  Emitter::set_int(n, "keepdims", 1);
  return out;
}
void one_input_one_output(const onnx::NodeProto& n) {
  need_one_input(n);
  if (n.output_size() != 1 || n.output(0).empty()) invalid("has one output, Y");
}

// Scaler: Y = (float(X) - offset) * scale, offset and scale one per feature or one for all.
void scaler(const onnx::NodeProto& n, Emitter& e) {
  one_input_one_output(n);
  const std::vector<float> offset = floats(n, "offset"), scale = floats(n, "scale");
  std::string y = as_float(e, n.input(0));
  if (!offset.empty()) y = e.op("Sub", {y, float_constant(e, offset, {static_cast<int64_t>(offset.size())})});
  e.node("Mul", {y, scale.empty() ? e.float_scalar(1.f) : float_constant(e, scale, {static_cast<int64_t>(scale.size())})},
         {n.output(0)});
}

// Normalizer: each row of float(X) [N, C] divided by its L1 or L2 norm (at least 1e-30), or
// for MAX by its largest element, as the spec says and ONNX Runtime computes (not the largest
// |x| of the ONNX reference and scikit-learn; a row whose largest element is 0 stays as it is).
void normalizer(const onnx::NodeProto& n, Emitter& e) {
  one_input_one_output(n);
  const std::string norm = string_attr(n, "norm", "MAX");
  const std::string x = as_float(e, n.input(0));
  std::string d;
  if (norm == "MAX") {
    const std::string m = reduce_rows(e, "ReduceMax", x);
    d = e.op("Where", {e.op("Equal", {m, e.float_scalar(0.f)}), e.float_scalar(1.f), m});
  } else if (norm == "L1") {
    d = e.op("Max", {reduce_rows(e, "ReduceSum", e.op("Abs", {x})), e.float_scalar(1e-30f)});
  } else if (norm == "L2") {
    d = e.op("Max", {e.op("Sqrt", {reduce_rows(e, "ReduceSum", e.op("Mul", {x, x}))}), e.float_scalar(1e-30f)});
  } else {
    invalid("norm '", norm, "' (MAX, L1 or L2)");
  }
  e.node("Div", {x, d}, {n.output(0)});
}

// The scores of a linear model: float(X) [N, F] times coefficients read as [outputs, F],
// transposed, plus intercepts (one per output).
std::string linear_scores(const onnx::NodeProto& n, Emitter& e, int64_t outputs) {
  const std::vector<float> coef = floats(n, "coefficients"), icpt = floats(n, "intercepts");
  if (coef.empty() || outputs < 1 || coef.size() % static_cast<size_t>(outputs) != 0)
    invalid("coefficients has ", str(static_cast<int64_t>(coef.size())), " entries, not a multiple of the ", str(outputs),
            " outputs");
  if (!icpt.empty() && static_cast<int64_t>(icpt.size()) != outputs)
    invalid("intercepts has ", str(static_cast<int64_t>(icpt.size())), " entries; the model has ", str(outputs), " outputs");
  const int64_t features = static_cast<int64_t>(coef.size()) / outputs;
  std::vector<float> t(coef.size());  // [F, outputs]
  for (int64_t o = 0; o < outputs; ++o)
    for (int64_t f = 0; f < features; ++f) t[static_cast<size_t>(f * outputs + o)] = coef[static_cast<size_t>(o * features + f)];
  std::string y = e.op("MatMul", {as_float(e, n.input(0)), float_constant(e, t, {features, outputs})});
  if (!icpt.empty()) y = e.op("Add", {y, float_constant(e, icpt, {outputs})});
  return y;
}

void linear_regressor(const onnx::NodeProto& n, Emitter& e) {
  one_input_one_output(n);
  const std::string post = string_attr(n, "post_transform", "NONE");
  if (post != "NONE") unsupported("post_transform '", post, "' (LinearRegressor computes NONE)");
  e.node("Identity", {linear_scores(n, e, attr_int(n, "targets", 1))}, {n.output(0)});
}

// LinearClassifier -> (labels, scores): one score column with two labels is the binary model,
// whose scores become (-s, s); then the post transform, and the label of the highest score.
void linear_classifier(const onnx::NodeProto& n, Emitter& e) {
  const std::vector<int64_t> labels = classifier_labels(n, "classlabels_ints");
  const std::vector<float> icpt = floats(n, "intercepts");
  const int64_t classes = static_cast<int64_t>(labels.size());
  if (classes < 2) unsupported("a classifier of ", str(classes), " class labels (at least 2 are supported)");
  const int64_t outputs = !icpt.empty() ? static_cast<int64_t>(icpt.size()) : classes;
  if (outputs != classes && !(outputs == 1 && classes == 2))
    invalid(str(outputs), " score columns for ", str(classes), " class labels");
  std::string s = linear_scores(n, e, outputs);
  if (outputs == 1) {
    std::string both = e.value("binary");
    Emitter::set_int(e.node("Concat", {e.op("Neg", {s}), s}, {both}), "axis", 1);
    s = both;
  }
  const std::string post = string_attr(n, "post_transform", "NONE");
  const std::string scores = scores_value(n, e);
  if (post == "NONE") {
    e.node("Identity", {s}, {scores});
  } else if (post == "LOGISTIC") {
    e.node("Sigmoid", {s}, {scores});
  } else if (post == "SOFTMAX") {
    Emitter::set_int(e.node("Softmax", {s}, {scores}), "axis", 1);
  } else {
    unsupported("post_transform '", post, "' (NONE, LOGISTIC and SOFTMAX are supported)");
  }
  emit_labels(n, e, scores, labels);
}

// Imputer: every X equal to the replaced value (NaN: every NaN) becomes the imputed value of
// its column (one per column, or one for all). Float imputed values for float32 X, int64 ones
// for int64 X.
void imputer(const onnx::NodeProto& n, Emitter& e) {
  one_input_one_output(n);
  const std::vector<float> fv = floats(n, "imputed_value_floats");
  const std::vector<int64_t> iv = ints(n, "imputed_value_int64s");
  const std::string x = n.input(0);
  std::string values, mask;
  if (!fv.empty()) {
    values = float_constant(e, fv, {static_cast<int64_t>(fv.size())});
    const float replaced = attr_float(n, "replaced_value_float", 0.f);
    mask = std::isnan(replaced) ? e.op("IsNaN", {x}) : e.op("Equal", {x, e.float_scalar(replaced)});
  } else if (!iv.empty()) {
    values = e.raw_constant(onnx::TensorProto::INT64, {static_cast<int64_t>(iv.size())}, raw_bytes(iv));
    mask = e.op("Equal", {x, e.scalar(attr_int(n, "replaced_value_int64", 0))});
  } else {
    invalid("neither imputed_value_floats nor imputed_value_int64s is given");
  }
  e.node("Where", {mask, values, x}, {n.output(0)});
}

// FeatureVectorizer(X1, X2, ...): each input as float32 [N, C] (a 1-D [N] is one column), cut
// or zero-padded to its inputdimensions entry, then joined along the columns.
void feature_vectorizer(const onnx::NodeProto& n, Emitter& e) {
  if (n.output_size() != 1 || n.output(0).empty()) invalid("has one output, Y");
  const std::vector<int64_t> dims = ints(n, "inputdimensions");
  if (n.input_size() < 1 || static_cast<int64_t>(dims.size()) != n.input_size())
    invalid("inputdimensions has ", str(static_cast<int64_t>(dims.size())), " entries for ", str(n.input_size()), " inputs");
  if (e.opset < 11) unsupported("needs the default-domain opset 11 or later (Pad with pads as an input)");
  std::vector<std::string> parts;
  for (int i = 0; i < n.input_size(); ++i) {
    if (n.input(i).empty()) invalid("input ", str(i), " is omitted");
    if (dims[static_cast<size_t>(i)] < 0) invalid("inputdimensions[", str(i), "] is negative");
    const int64_t cut = dims[static_cast<size_t>(i)];
    const std::string x = e.op("Reshape", {as_float(e, n.input(i)), e.ints({0, -1})});
    const std::string padded = e.op("Pad", {x, e.ints({0, 0, 0, cut})});
    parts.push_back(e.op("Slice", {padded, e.ints({0}), e.ints({cut}), e.ints({1})}));
  }
  Emitter::set_int(e.node("Concat", parts, {n.output(0)}), "axis", 1);
}

struct MlOp {
  const char* op_type;
  int64_t since;
  void (*expand)(const onnx::NodeProto&, Emitter&);
};
constexpr MlOp kMlOps[] = {
    {"FeatureVectorizer", 1, feature_vectorizer},
    {"Imputer", 1, imputer},
    {"LinearClassifier", 1, linear_classifier},
    {"LinearRegressor", 1, linear_regressor},
    {"Normalizer", 1, normalizer},
    {"Scaler", 1, scaler},
    {"TreeEnsemble", 5, tree_ensemble},
    {"TreeEnsembleClassifier", 1, tree_ensemble_classifier},
    {"TreeEnsembleRegressor", 1, tree_ensemble_regressor},
};

}  // namespace

MlExpansion expand_ml_op(const onnx::NodeProto& node, int64_t ml_opset, int64_t default_opset,
                         const std::string& prefix, std::vector<onnx::NodeProto>* out, std::string* why) {
  if (node.domain() != "ai.onnx.ml") return MlExpansion::kNotHandled;
  for (const MlOp& op : kMlOps) {
    if (node.op_type() != op.op_type || ml_opset < op.since) continue;
    std::vector<onnx::NodeProto> made;
    Emitter e(prefix, default_opset, &made);
    try {
      op.expand(node, e);
    } catch (const Refused& r) {
      *why = r.why;
      return r.kind;
    }
    for (auto& m : made) out->push_back(std::move(m));
    return MlExpansion::kExpanded;
  }
  return MlExpansion::kNotHandled;
}

}  // namespace cuvil::frontend
