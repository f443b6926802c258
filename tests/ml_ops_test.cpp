// The ai.onnx.ml ops: the tree ensembles (frontend/ml_ops.h -> cuvil::DecisionForest) against an
// independent walk of the ensemble as the model writes it (nodes found by (tree id, node id),
// ONNX Runtime's missing-value rule), for random forests in both encodings (TreeEnsemble of ml 5
// and TreeEnsembleRegressor/Classifier of ml 3), every aggregate and post transform, the
// binary classifier; the import's checks of malformed ensembles; Binarizer and
// ArrayFeatureExtractor. The wheel's node cases (ConformanceWheel) check them against the ONNX
// reference too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "onnx_builder.h"
#include "runtime_harness.h"

namespace cuvil {
namespace {

using test::add_input;
using test::add_node;
using test::add_output;

// A forest in the ml 3 encoding: nodes by (tree, id), leaves as nodes of mode LEAF.
struct OldForest {
  std::vector<int64_t> tree, id, feature, true_id, false_id, missing;
  std::vector<std::string> mode;
  std::vector<float> value;
  std::vector<int64_t> vote_tree, vote_node, vote_target;
  std::vector<float> vote_weight;
  size_t index(int64_t t, int64_t i) const {
    for (size_t k = 0; k < tree.size(); ++k)
      if (tree[k] == t && id[k] == i) return k;
    ADD_FAILURE() << "no node " << i << " in tree " << t;
    return 0;
  }
};

const char* kModes[] = {"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"};

// Appends a random subtree of tree t rooted at node id `*next` (preorder ids); returns its id.
int64_t grow(OldForest& f, std::mt19937& rng, int64_t t, int depth, int64_t* next, int64_t features, int64_t targets) {
  const int64_t me = (*next)++;
  const size_t at = f.tree.size();
  f.tree.push_back(t);
  f.id.push_back(me);
  const bool leaf = depth == 0 || (depth < 3 && rng() % 3 == 0);
  f.feature.push_back(leaf ? 0 : static_cast<int64_t>(rng() % features));
  f.mode.push_back(leaf ? "LEAF" : kModes[rng() % 6]);
  // Splits on a grid of quarters, which the features also hit, so ==/!= and ties matter.
  f.value.push_back(leaf ? 0.f : static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.25f);
  f.missing.push_back(leaf ? 0 : static_cast<int64_t>(rng() % 2));
  f.true_id.push_back(0);
  f.false_id.push_back(0);
  if (leaf) {
    for (int64_t v = 0, votes = 1 + static_cast<int64_t>(rng() % 2); v < votes; ++v) {
      f.vote_tree.push_back(t);
      f.vote_node.push_back(me);
      f.vote_target.push_back(static_cast<int64_t>(rng() % targets));
      f.vote_weight.push_back(static_cast<float>(static_cast<int>(rng() % 41) - 20) * 0.125f);
    }
    return me;
  }
  f.true_id[at] = grow(f, rng, t, depth - 1, next, features, targets);
  f.false_id[at] = grow(f, rng, t, depth - 1, next, features, targets);
  return me;
}

OldForest random_forest(uint32_t seed, int64_t trees, int64_t features, int64_t targets) {
  std::mt19937 rng(seed);
  OldForest f;
  for (int64_t t = 0; t < trees; ++t) {
    int64_t next = 0;
    grow(f, rng, t * 3 + 1, 4, &next, features, targets);  // tree ids need not be 0..T-1
  }
  return f;
}

// The scores of one row: every tree walked from its first node, votes aggregated per target,
// base values added, the binary columns and the post transform applied (ir/fused_ops.h).
std::vector<double> reference_scores(const OldForest& f, const float* x, int64_t targets, const std::string& aggregate,
                                     const std::string& post, const std::vector<float>& base, bool binary) {
  std::map<int64_t, size_t> roots;
  for (size_t k = 0; k < f.tree.size(); ++k) roots.emplace(f.tree[k], k);
  const double init = aggregate == "MIN" ? FLT_MAX : aggregate == "MAX" ? -FLT_MAX : 0.0;
  std::vector<double> s(static_cast<size_t>(std::max<int64_t>(targets, binary ? 2 : 1)), init);
  for (const auto& [t, root] : roots) {
    size_t k = root;
    while (f.mode[k] != "LEAF") {
      const double v = x[f.feature[k]], th = f.value[k];
      const std::string& m = f.mode[k];
      bool go = m == "BRANCH_LEQ" ? v <= th : m == "BRANCH_LT" ? v < th : m == "BRANCH_GTE" ? v >= th
              : m == "BRANCH_GT" ? v > th : m == "BRANCH_EQ" ? v == th : v != th;
      go = go || (f.missing[k] && std::isnan(v));
      k = f.index(t, go ? f.true_id[k] : f.false_id[k]);
    }
    for (size_t v = 0; v < f.vote_tree.size(); ++v)
      if (f.vote_tree[v] == t && f.vote_node[v] == f.id[k]) {
        double& a = s[static_cast<size_t>(f.vote_target[v])];
        const double w = f.vote_weight[v];
        a = aggregate == "MIN" ? std::min(a, w) : aggregate == "MAX" ? std::max(a, w) : a + w;
      }
  }
  for (int64_t c = 0; c < targets; ++c) {
    if (aggregate == "AVERAGE") s[c] /= static_cast<double>(roots.size());
    if (!base.empty()) s[c] += base[base.size() == 1 ? 0 : c];
  }
  if (binary) {
    s[1] = s[0];
    s[0] = post == "NONE" || post == "PROBIT" ? 1 - s[1] : -s[1];
  }
  if (post == "LOGISTIC")
    for (double& v : s) v = 1 / (1 + std::exp(-v));
  if (post == "SOFTMAX") {
    double mx = -INFINITY, sum = 0;
    for (double v : s) mx = std::max(mx, v);
    for (double& v : s) sum += (v = std::exp(v - mx));
    for (double& v : s) v /= sum;
  }
  return s;
}

void set_old_attrs(onnx::NodeProto* n, const OldForest& f, const std::string& votes) {
  test::set_attr_ints(n, "nodes_treeids", f.tree);
  test::set_attr_ints(n, "nodes_nodeids", f.id);
  test::set_attr_ints(n, "nodes_featureids", f.feature);
  test::set_attr_ints(n, "nodes_truenodeids", f.true_id);
  test::set_attr_ints(n, "nodes_falsenodeids", f.false_id);
  test::set_attr_ints(n, "nodes_missing_value_tracks_true", f.missing);
  auto* modes = test::add_attr(n, "nodes_modes", onnx::AttributeProto::STRINGS);
  for (const auto& m : f.mode) modes->add_strings(m);
  auto* values = test::add_attr(n, "nodes_values", onnx::AttributeProto::FLOATS);
  for (float v : f.value) values->add_floats(v);
  test::set_attr_ints(n, votes + "_treeids", f.vote_tree);
  test::set_attr_ints(n, votes + "_nodeids", f.vote_node);
  test::set_attr_ints(n, votes + "_ids", f.vote_target);
  auto* w = test::add_attr(n, votes + "_weights", onnx::AttributeProto::FLOATS);
  for (float v : f.vote_weight) w->add_floats(v);
}

// Rows on the splits' grid of quarters, some features NaN.
std::vector<float> random_rows(uint32_t seed, int64_t rows, int64_t features) {
  std::mt19937 rng(seed);
  std::vector<float> x(static_cast<size_t>(rows * features));
  for (float& v : x) v = rng() % 10 == 0 ? NAN : static_cast<float>(static_cast<int>(rng() % 11) - 5) * 0.25f;
  return x;
}

onnx::ModelProto ml_model(int64_t ml_opset) {
  onnx::ModelProto m = test::make_model(17, 8);
  test::add_opset(m, "ai.onnx.ml", ml_opset);
  return m;
}

// x [n, F] (n symbolic) -> TreeEnsembleRegressor of `f` with T targets -> y; returns the node.
onnx::NodeProto* add_regressor(onnx::ModelProto& m, const OldForest& f, int64_t F, int64_t T) {
  auto* g = m.mutable_graph();
  add_input(g, "x", onnx::TensorProto::FLOAT, {-1, F})->mutable_type()->mutable_tensor_type()->mutable_shape()
      ->mutable_dim(0)->set_dim_param("n");
  auto* n = add_node(g, "TreeEnsembleRegressor", {"x"}, {"y"}, "forest");
  n->set_domain("ai.onnx.ml");
  set_old_attrs(n, f, "target");
  test::set_attr_int(n, "n_targets", T);
  add_output(g, "y", onnx::TensorProto::FLOAT, {});
  return n;
}

// Compiles and runs `m` on x [rows, features] (float32); returns output `index` as doubles.
template <typename T>
std::vector<T> run(const onnx::ModelProto& m, const std::vector<float>& x, int64_t rows, int64_t features,
                   size_t index, std::vector<int64_t>* dims) {
  auto model = test::load(test::compile(m, {"n=1:64"}));
  auto session = test::open_session(model.get());
  EXPECT_TRUE(test::Ok(test::set_f32(session.get(), "x", {rows, features}, x)));
  EXPECT_TRUE(test::Ok(cuvil_session_run(session.get())));
  return test::output<T>(session.get(), index, dims);
}

TEST(MlOps, TreeEnsembleRegressorMatchesTheWalkForEveryAggregateAndTransform) {
  const int64_t F = 5, T = 3, N = 23;
  const OldForest f = random_forest(7, 9, F, T);
  const std::vector<float> x = random_rows(11, N, F);
  const std::vector<float> base = {0.5f, -1.f, 2.f};
  for (const char* aggregate : {"SUM", "AVERAGE", "MIN", "MAX"})
    for (const char* post : {"NONE", "LOGISTIC", "SOFTMAX"}) {
      SCOPED_TRACE(std::string(aggregate) + " " + post);
      onnx::ModelProto m = ml_model(3);
      auto* n = add_regressor(m, f, F, T);
      test::set_attr_string(n, "aggregate_function", aggregate);
      test::set_attr_string(n, "post_transform", post);
      auto* b = test::add_attr(n, "base_values", onnx::AttributeProto::FLOATS);
      for (float v : base) b->add_floats(v);
      std::vector<int64_t> dims;
      const std::vector<float> y = run<float>(m, x, N, F, 0, &dims);
      ASSERT_EQ(dims, (std::vector<int64_t>{N, T}));
      for (int64_t r = 0; r < N; ++r) {
        const std::vector<double> want = reference_scores(f, &x[r * F], T, aggregate, post, base, false);
        for (int64_t c = 0; c < T; ++c) EXPECT_NEAR(y[r * T + c], want[c], 1e-5 * (1 + std::abs(want[c]))) << r << "," << c;
      }
    }
}

// The kernel splits the work by trees for a few rows and by rows for many; the trees are
// summed in fixed groups either way, so a row's scores are the same bits in any batch and at
// any thread count.
TEST(MlOps, ScoresDoNotDependOnBatchOrThreads) {
  const int64_t F = 6, T = 2, N = 700;
  const OldForest f = random_forest(23, 40, F, T);
  onnx::ModelProto m = ml_model(3);
  add_regressor(m, f, F, T);
  auto model = test::load(test::compile(m, {"n=1:1024"}));
  const std::vector<float> x = random_rows(29, N, F);
  std::vector<float> first;
  for (int threads : {1, 2})
    for (int64_t rows : {N, int64_t{5}, int64_t{300}}) {
      auto session = test::open_session(model.get(), threads);
      const std::vector<float> part(x.begin(), x.begin() + rows * F);
      ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "x", {rows, F}, part)));
      ASSERT_TRUE(test::Ok(cuvil_session_run(session.get())));
      const std::vector<float> y = test::output<float>(session.get(), 0);
      if (first.empty()) first = y;
      for (int64_t i = 0; i < rows * T; ++i) ASSERT_EQ(y[i], first[i]) << threads << " threads, " << rows << " rows, " << i;
    }
  for (int64_t r = 0; r < N; ++r) {
    const std::vector<double> want = reference_scores(f, &x[r * F], T, "SUM", "NONE", {}, false);
    for (int64_t c = 0; c < T; ++c) ASSERT_NEAR(first[r * T + c], want[c], 1e-5 * (1 + std::abs(want[c]))) << r;
  }
}

// The same forest in TreeEnsemble's (ml 5) encoding, where interior nodes and leaves are two
// lists (one vote per leaf), gives the same scores in float and double.
TEST(MlOps, TreeEnsembleOfMl5MatchesTheWalk) {
  const int64_t F = 4, T = 2, N = 17;
  const OldForest f = random_forest(3, 6, F, T);
  // Interior nodes in list order; every vote its own leaf.
  std::map<size_t, int64_t> interior;
  std::map<size_t, std::vector<size_t>> votes_of;
  for (size_t k = 0; k < f.tree.size(); ++k)
    if (f.mode[k] != "LEAF") interior.emplace(k, static_cast<int64_t>(interior.size()));
  for (size_t v = 0; v < f.vote_tree.size(); ++v) votes_of[f.index(f.vote_tree[v], f.vote_node[v])].push_back(v);
  // A leaf of ml 5 has one vote: both encodings keep each leaf's first vote.
  OldForest g = f;
  g.vote_tree.clear(), g.vote_node.clear(), g.vote_target.clear(), g.vote_weight.clear();
  std::map<size_t, int64_t> leaf_of;
  for (auto& [k, vs] : votes_of) {
    leaf_of[k] = static_cast<int64_t>(leaf_of.size());
    g.vote_tree.push_back(f.vote_tree[vs[0]]);
    g.vote_node.push_back(f.vote_node[vs[0]]);
    g.vote_target.push_back(f.vote_target[vs[0]]);
    g.vote_weight.push_back(f.vote_weight[vs[0]]);
  }
  std::vector<int64_t> feat, tid, fid, tleaf, fleaf, miss, roots, leaf_target;
  std::vector<uint8_t> modes;
  std::vector<double> splits, leaf_weight(leaf_of.size());
  leaf_target.resize(leaf_of.size());
  for (size_t v = 0; v < g.vote_tree.size(); ++v) {
    const int64_t l = leaf_of[g.index(g.vote_tree[v], g.vote_node[v])];
    leaf_target[l] = g.vote_target[v];
    leaf_weight[l] = g.vote_weight[v];
  }
  for (const auto& [k, i] : interior) {
    feat.push_back(f.feature[k]);
    modes.push_back(static_cast<uint8_t>(std::find(std::begin(kModes), std::end(kModes), f.mode[k]) - std::begin(kModes)));
    splits.push_back(f.value[k]);
    miss.push_back(f.missing[k]);
    for (int b = 0; b < 2; ++b) {
      const size_t c = f.index(f.tree[k], b == 0 ? f.true_id[k] : f.false_id[k]);
      const bool leaf = f.mode[c] == "LEAF";
      (b == 0 ? tid : fid).push_back(leaf ? leaf_of.at(c) : interior.at(c));
      (b == 0 ? tleaf : fleaf).push_back(leaf);
    }
    if (f.id[k] == 0) roots.push_back(i);
  }
  const std::vector<float> x = random_rows(5, N, F);
  for (int dbl = 0; dbl < 2; ++dbl) {
    SCOPED_TRACE(dbl ? "double" : "float");
    const int32_t type = dbl ? onnx::TensorProto::DOUBLE : onnx::TensorProto::FLOAT;
    onnx::ModelProto m = ml_model(5);
    auto* gr = m.mutable_graph();
    add_input(gr, "x", onnx::TensorProto::FLOAT, {N, F});
    onnx::NodeProto* cast = add_node(gr, "Cast", {"x"}, {"xt"}, "cast");
    test::set_attr_int(cast, "to", type);
    auto* n = add_node(gr, "TreeEnsemble", {"xt"}, {"yt"}, "forest");
    n->set_domain("ai.onnx.ml");
    test::set_attr_ints(n, "nodes_featureids", feat);
    test::set_attr_ints(n, "nodes_truenodeids", tid);
    test::set_attr_ints(n, "nodes_falsenodeids", fid);
    test::set_attr_ints(n, "nodes_trueleafs", tleaf);
    test::set_attr_ints(n, "nodes_falseleafs", fleaf);
    test::set_attr_ints(n, "nodes_missing_value_tracks_true", miss);
    test::set_attr_ints(n, "tree_roots", roots);
    test::set_attr_ints(n, "leaf_targetids", leaf_target);
    test::set_attr_int(n, "n_targets", T);
    test::set_attr_tensor(n, "nodes_modes", test::make_raw_tensor("", onnx::TensorProto::UINT8, {static_cast<int64_t>(modes.size())}, test::raw_of(modes)));
    std::vector<float> splits_f(splits.begin(), splits.end()), weights_f(leaf_weight.begin(), leaf_weight.end());
    test::set_attr_tensor(n, "nodes_splits", dbl ? test::make_raw_tensor("", type, {static_cast<int64_t>(splits.size())}, test::raw_of(splits))
                                                 : test::make_float_tensor("", {static_cast<int64_t>(splits.size())}, splits_f));
    test::set_attr_tensor(n, "leaf_weights", dbl ? test::make_raw_tensor("", type, {static_cast<int64_t>(leaf_weight.size())}, test::raw_of(leaf_weight))
                                                  : test::make_float_tensor("", {static_cast<int64_t>(leaf_weight.size())}, weights_f));
    onnx::NodeProto* back = add_node(gr, "Cast", {"yt"}, {"y"}, "back");
    test::set_attr_int(back, "to", onnx::TensorProto::FLOAT);
    add_output(gr, "y", onnx::TensorProto::FLOAT, {N, T});
    auto model = test::load(test::compile(m));
    auto session = test::open_session(model.get());
    ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "x", {N, F}, x)));
    ASSERT_TRUE(test::Ok(cuvil_session_run(session.get())));
    const std::vector<float> y = test::output<float>(session.get(), 0);
    ASSERT_EQ(y.size(), static_cast<size_t>(N * T));
    for (int64_t r = 0; r < N; ++r) {
      const std::vector<double> want = reference_scores(g, &x[r * F], T, "SUM", "NONE", {}, false);
      for (int64_t c = 0; c < T; ++c) EXPECT_NEAR(y[r * T + c], want[c], 1e-5) << r << "," << c;
    }
  }
}

onnx::ModelProto classifier(const OldForest& f, int64_t F, const std::vector<int64_t>& labels, const char* post,
                            const std::vector<float>& base) {
  onnx::ModelProto m = ml_model(3);
  auto* g = m.mutable_graph();
  add_input(g, "x", onnx::TensorProto::FLOAT, {-1, F})->mutable_type()->mutable_tensor_type()->mutable_shape()
      ->mutable_dim(0)->set_dim_param("n");
  auto* n = add_node(g, "TreeEnsembleClassifier", {"x"}, {"label", "scores"}, "forest");
  n->set_domain("ai.onnx.ml");
  set_old_attrs(n, f, "class");
  test::set_attr_ints(n, "classlabels_int64s", labels);
  test::set_attr_string(n, "post_transform", post);
  if (!base.empty()) {
    auto* b = test::add_attr(n, "base_values", onnx::AttributeProto::FLOATS);
    for (float v : base) b->add_floats(v);
  }
  add_output(g, "label", onnx::TensorProto::INT64, {});
  add_output(g, "scores", onnx::TensorProto::FLOAT, {});
  return m;
}

// Multi-class (votes for every class) and binary (every vote for class 0, as gradient boosting
// writes it): the scores and the label of the highest score.
TEST(MlOps, TreeEnsembleClassifierScoresAndLabels) {
  const int64_t F = 5, N = 19;
  const std::vector<float> x = random_rows(13, N, F);
  struct Case {
    int64_t classes;
    std::vector<int64_t> labels;
    const char* post;
    std::vector<float> base;
  };
  for (const Case& c : {Case{3, {10, 20, 30}, "SOFTMAX", {0.25f, 0, -0.5f}}, Case{3, {7, 8, 9}, "NONE", {}},
                        Case{1, {4, 5}, "LOGISTIC", {0.75f}}, Case{1, {4, 5}, "NONE", {}}, Case{1, {1}, "LOGISTIC", {}}}) {
    SCOPED_TRACE(std::to_string(c.labels.size()) + " labels, " + c.post);
    const OldForest f = random_forest(17, 5, F, c.classes);
    const bool binary = c.classes == 1;
    std::vector<int64_t> dims;
    const std::vector<float> scores = run<float>(classifier(f, F, c.labels, c.post, c.base), x, N, F, 1, &dims);
    const int64_t cols = binary ? 2 : c.classes;
    ASSERT_EQ(dims, (std::vector<int64_t>{N, cols}));
    const std::vector<int64_t> label = run<int64_t>(classifier(f, F, c.labels, c.post, c.base), x, N, F, 0, &dims);
    ASSERT_EQ(dims, (std::vector<int64_t>{N}));
    const std::vector<int64_t> names = c.labels.size() == 1 ? std::vector<int64_t>{0, 1} : c.labels;
    for (int64_t r = 0; r < N; ++r) {
      const std::vector<double> want = reference_scores(f, &x[r * F], c.classes, "SUM", c.post, c.base, binary);
      for (int64_t k = 0; k < cols; ++k) EXPECT_NEAR(scores[r * cols + k], want[k], 1e-5) << r << "," << k;
      const size_t best = static_cast<size_t>(std::max_element(want.begin(), want.begin() + cols) - want.begin());
      EXPECT_EQ(label[r], names[best]) << r;
    }
  }
}

// Malformed ensembles are refused at import with the node and what is wrong.
TEST(MlOps, MalformedEnsemblesAreRefused) {
  const int64_t F = 3;
  auto regressor = [&](const std::function<void(OldForest&)>& spoil) {
    OldForest f = random_forest(1, 2, F, 1);
    spoil(f);
    onnx::ModelProto m = ml_model(3);
    auto* g = m.mutable_graph();
    add_input(g, "x", onnx::TensorProto::FLOAT, {2, F});
    auto* n = add_node(g, "TreeEnsembleRegressor", {"x"}, {"y"}, "trees");
    n->set_domain("ai.onnx.ml");
    set_old_attrs(n, f, "target");
    test::set_attr_int(n, "n_targets", 1);
    add_output(g, "y", onnx::TensorProto::FLOAT, {});
    return m;
  };
  auto fails = [](const onnx::ModelProto& m, ExitCode code, std::initializer_list<std::string> needles) {
    return test::FailsWith([&] { test::compile(m); }, code, needles);
  };
  // A branch back to the root: a cycle.
  EXPECT_TRUE(fails(regressor([](OldForest& f) { f.false_id[0] = 0; }), ExitCode::kInvalidModel,
                    {"node 'trees' (ai.onnx.ml::TreeEnsembleRegressor)", "acyclic"}));
  EXPECT_TRUE(fails(regressor([](OldForest& f) { f.true_id[0] = 99; }), ExitCode::kInvalidModel,
                    {"node 'trees'", "true branch, node 99, is not in the tree"}));
  EXPECT_TRUE(fails(regressor([](OldForest& f) { f.vote_node[0] = 0; }), ExitCode::kInvalidModel,
                    {"which is not a leaf"}));
  EXPECT_TRUE(fails(regressor([](OldForest& f) { f.vote_target[0] = 1; }), ExitCode::kInvalidModel,
                    {"target_ids[0] = 1 is not below 1"}));
  EXPECT_TRUE(fails(regressor([](OldForest& f) { f.mode[0] = "BRANCH_SOMETIMES"; }), ExitCode::kInvalidModel,
                    {"nodes_modes[0] = 'BRANCH_SOMETIMES' is not a mode"}));
  onnx::ModelProto m = classifier(random_forest(1, 2, F, 2), F, {1, 2}, "NONE", {});
  auto* n = m.mutable_graph()->mutable_node(0);
  auto* s = test::add_attr(n, "classlabels_strings", onnx::AttributeProto::STRINGS);
  s->add_strings("a");
  s->add_strings("b");
  EXPECT_TRUE(fails(m, ExitCode::kUnsupported, {"node 'forest' (ai.onnx.ml::TreeEnsembleClassifier)", "string class labels"}));
}

// A scikit-learn style pipeline, Imputer -> Scaler -> Normalizer -> LinearClassifier, and a
// LinearRegressor, against the formulas written out here (ONNX Runtime's semantics: Normalizer
// MAX divides by the largest element, not the largest |x|, and leaves a row whose largest is 0).
TEST(MlOps, LinearModelsAndPreprocessing) {
  const int64_t F = 3, C = 3;
  const std::vector<float> x = {1, NAN, -2, 0.5f, 4, 3, -1, -3, -2, 0, 2, NAN};
  const std::vector<float> imputed = {9, 8, 7}, offset = {0.5f, -1, 0}, scale = {2, 0.5f, 1};
  const std::vector<float> coef = {1, -1, 0.5f, 0, 2, -1, -0.5f, 0.25f, 1}, icpt = {0.1f, -0.2f, 0.3f};
  const std::vector<int64_t> labels = {5, 6, 7};
  for (const char* norm : {"MAX", "L1", "L2"}) {
    SCOPED_TRACE(norm);
    onnx::ModelProto m = ml_model(1);
    auto* g = m.mutable_graph();
    add_input(g, "x", onnx::TensorProto::FLOAT, {4, F});
    auto ml = [&](const char* op, std::vector<std::string> in, std::vector<std::string> out) {
      auto* n = add_node(g, op, in, out, op);
      n->set_domain("ai.onnx.ml");
      return n;
    };
    auto floats = [](onnx::NodeProto* n, const char* name, const std::vector<float>& v) {
      auto* a = test::add_attr(n, name, onnx::AttributeProto::FLOATS);
      for (float f : v) a->add_floats(f);
    };
    auto* imp = ml("Imputer", {"x"}, {"xi"});
    floats(imp, "imputed_value_floats", imputed);
    test::set_attr_float(imp, "replaced_value_float", NAN);
    auto* sc = ml("Scaler", {"xi"}, {"xs"});
    floats(sc, "offset", offset);
    floats(sc, "scale", scale);
    test::set_attr_string(ml("Normalizer", {"xs"}, {"xn"}), "norm", norm);
    auto* lc = ml("LinearClassifier", {"xn"}, {"label", "prob"});
    floats(lc, "coefficients", coef);
    floats(lc, "intercepts", icpt);
    test::set_attr_ints(lc, "classlabels_ints", labels);
    test::set_attr_string(lc, "post_transform", "SOFTMAX");
    auto* lr = ml("LinearRegressor", {"xi"}, {"reg"});
    floats(lr, "coefficients", {1, 2, 3, -1, 0, 1});
    floats(lr, "intercepts", {10, 20});
    test::set_attr_int(lr, "targets", 2);
    add_output(g, "label", onnx::TensorProto::INT64, {});
    add_output(g, "prob", onnx::TensorProto::FLOAT, {});
    add_output(g, "reg", onnx::TensorProto::FLOAT, {});
    auto model = test::load(test::compile(m));
    auto session = test::open_session(model.get());
    ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "x", {4, F}, x)));
    ASSERT_TRUE(test::Ok(cuvil_session_run(session.get())));
    const std::vector<int64_t> label = test::output<int64_t>(session.get(), 0);
    const std::vector<float> prob = test::output<float>(session.get(), 1), reg = test::output<float>(session.get(), 2);
    ASSERT_EQ(label.size(), 4u);
    for (int64_t r = 0; r < 4; ++r) {
      double xi[F], xs[F], d = 0;
      for (int64_t f = 0; f < F; ++f) {
        xi[f] = std::isnan(x[r * F + f]) ? imputed[f] : x[r * F + f];
        xs[f] = (xi[f] - offset[f]) * scale[f];
      }
      if (std::string(norm) == "MAX") {
        d = *std::max_element(xs, xs + F);
        if (d == 0) d = 1;
      } else {
        for (double v : xs) d += std::string(norm) == "L1" ? std::abs(v) : v * v;
        if (std::string(norm) == "L2") d = std::sqrt(d);
      }
      double s[C], mx = -INFINITY, sum = 0;
      for (int64_t c = 0; c < C; ++c) {
        s[c] = icpt[c];
        for (int64_t f = 0; f < F; ++f) s[c] += coef[c * F + f] * xs[f] / d;
        mx = std::max(mx, s[c]);
      }
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(prob[r * C + c], s[c] / sum, 1e-5) << r << "," << c;
      EXPECT_EQ(label[r], labels[std::max_element(s, s + C) - s]) << r;
      EXPECT_NEAR(reg[r * 2], 10 + xi[0] + 2 * xi[1] + 3 * xi[2], 1e-4) << r;
      EXPECT_NEAR(reg[r * 2 + 1], 20 - xi[0] + xi[2], 1e-4) << r;
    }
  }
}

// A classifier exported with ZipMap (skl2onnx's default) is refused with the way around it.
TEST(MlOps, ZipMapIsRefusedWithTheWayAroundIt) {
  onnx::ModelProto m = classifier(random_forest(2, 2, 3, 2), 3, {0, 1}, "NONE", {});
  auto* g = m.mutable_graph();
  g->mutable_output(1)->set_name("zipped");
  add_node(g, "ZipMap", {"scores"}, {"zipped"}, "zip")->set_domain("ai.onnx.ml");
  EXPECT_TRUE(test::FailsWith([&] { test::compile(m); }, ExitCode::kUnsupported,
                              {"ai.onnx.ml::ZipMap (1): 'zip'", "'zipmap': False"}));
}

// FeatureVectorizer: each input as float columns, cut or zero-padded to its inputdimensions
// entry, joined.
TEST(MlOps, FeatureVectorizerCutsPadsAndJoins) {
  onnx::ModelProto m = ml_model(1);
  auto* g = m.mutable_graph();
  add_input(g, "x", onnx::TensorProto::FLOAT, {2, 3});
  add_input(g, "k", onnx::TensorProto::INT64, {2});
  auto* n = add_node(g, "FeatureVectorizer", {"x", "k"}, {"y"}, "join");
  n->set_domain("ai.onnx.ml");
  test::set_attr_ints(n, "inputdimensions", {2, 3});
  add_output(g, "y", onnx::TensorProto::FLOAT, {});
  auto model = test::load(test::compile(m));
  auto session = test::open_session(model.get());
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // bound, not copied: it must outlive the run
  ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "x", {2, 3}, x)));
  const std::vector<int64_t> k = {7, -8}, kd = {2};
  ASSERT_TRUE(test::Ok(cuvil_session_set_input(session.get(), "k", test::kI64, 1, kd.data(), k.data(), 16)));
  ASSERT_TRUE(test::Ok(cuvil_session_run(session.get())));
  std::vector<int64_t> dims;
  EXPECT_EQ(test::output<float>(session.get(), 0, &dims), (std::vector<float>{1, 2, 7, 0, 0, 4, 5, -8, 0, 0}));
  EXPECT_EQ(dims, (std::vector<int64_t>{2, 5}));
}

TEST(MlOps, BinarizerAndArrayFeatureExtractor) {
  onnx::ModelProto m = ml_model(1);
  auto* g = m.mutable_graph();
  add_input(g, "x", onnx::TensorProto::FLOAT, {2, 4});
  *g->add_initializer() = test::make_int64_tensor("idx", {3}, {3, 0, 3});
  auto* b = add_node(g, "Binarizer", {"x"}, {"bin"}, "bin");
  b->set_domain("ai.onnx.ml");
  test::set_attr_float(b, "threshold", 0.5f);
  add_node(g, "ArrayFeatureExtractor", {"x", "idx"}, {"picked"}, "pick")->set_domain("ai.onnx.ml");
  add_output(g, "bin", onnx::TensorProto::FLOAT, {});
  add_output(g, "picked", onnx::TensorProto::FLOAT, {});
  auto model = test::load(test::compile(m));
  auto session = test::open_session(model.get());
  const std::vector<float> x = {0.5f, 0.75f, -1, NAN, 2, 0, 0.25f, 1};
  ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "x", {2, 4}, x)));
  ASSERT_TRUE(test::Ok(cuvil_session_run(session.get())));
  std::vector<int64_t> dims;
  EXPECT_EQ(test::output<float>(session.get(), 0), (std::vector<float>{0, 1, 0, 0, 1, 0, 0, 1}));
  const std::vector<float> picked = test::output<float>(session.get(), 1, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(picked.size(), 6u);
  EXPECT_TRUE(std::isnan(picked[0]) && std::isnan(picked[2]));
  EXPECT_EQ(picked[1], 0.5f);
  EXPECT_EQ(picked[3], 1.f);
  EXPECT_EQ(picked[4], 2.f);
  EXPECT_EQ(picked[5], 1.f);
}

}  // namespace
}  // namespace cuvil
