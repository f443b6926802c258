// The resource model (docs/security.md "Resource model", support/limits.def), suite
// BadInputResourceLimits: every cap refuses a model that exceeds it with exit 4 and a message
// naming the cap and how to raise it (each test lowers the cap through CompileLimits, as
// `--max-...` does), the node count is checked on the wire format before the parse, constant
// folding's limit folds less instead of refusing, and nested loops stay bounded: a 20-deep nest
// whose every level needs several widening passes completes with a bounded count of body
// inferences. cuvilc's options are checked to come from the table.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "frontend/onnx_import.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "onnx_builder.h"
#include "passes/infer_shapes.h"
#include "passes/pipeline.h"
#include "run_tool.h"

namespace cuvil {
namespace {

using Tp = onnx::TensorProto;
using test::FailsWith;

std::string serialize(const onnx::ModelProto& m) {
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  return bytes;
}

// Import, verify and the passes, under `limits`; returns what shape inference counted.
ShapeInferenceStats compile_ir(const onnx::ModelProto& m, const CompileLimits& limits = {},
                               Model* out = nullptr) {
  frontend::ImportOptions o;
  o.limits = limits;
  Model model = frontend::import_onnx_bytes(serialize(m), "", o, "model.onnx");
  verify_model(model);
  ShapeInferenceStats stats = infer_shapes(model, limits);
  if (out) *out = std::move(model);
  return stats;
}

std::string type_of_output(const Model& m) {
  return type_to_string(m.graph->value(m.graph->outputs[0]));
}

void typed(onnx::ValueInfoProto* vi, const std::string& name, int32_t elem,
           const std::vector<test::DimSpec>& dims = {}) {
  vi->set_name(name);
  test::set_tensor_type(vi, elem, dims);
}

// x -> Relu x n -> y.
onnx::ModelProto relu_chain(int n) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "v0");
  for (int i = 0; i < n; ++i)
    test::add_node(g, "Relu", {"v" + std::to_string(i)}, {"v" + std::to_string(i + 1)});
  test::add_output(g, "v" + std::to_string(n));
  return m;
}

// Functions F0..F<depth>: F<k> calls F<k+1> twice, F<depth> is one Relu (plus `payload`
// floats of a Constant attribute in each leaf, for the inlined-bytes cap).
onnx::ModelProto function_tree(int depth, int payload = 0) {
  onnx::ModelProto m = test::make_model(17);
  test::add_opset(m, "custom", 1);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "F0", {"x"}, {"y"}, "call", "custom");
  test::add_output(g, "y");
  for (int k = 0; k <= depth; ++k) {
    auto* f = m.add_functions();
    f->set_name("F" + std::to_string(k));
    f->set_domain("custom");
    f->add_input("X");
    f->add_output("Y");
    for (const char* d : {"", "custom"}) {
      auto* imp = f->add_opset_import();
      imp->set_domain(d);
      imp->set_version(d[0] ? 1 : 17);
    }
    if (k == depth) {
      auto* c = f->add_node();
      c->set_op_type("Constant");
      c->add_output("P");
      auto* a = c->add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      *a->mutable_t() = test::make_float_tensor("", {payload}, std::vector<float>(payload, 1.f));
      auto* n = f->add_node();
      n->set_op_type("Relu");
      n->add_input("X");
      n->add_output("Y");
      continue;
    }
    for (int c = 0; c < 2; ++c) {
      auto* n = f->add_node();
      n->set_op_type("F" + std::to_string(k + 1));
      n->set_domain("custom");
      n->add_input(c == 0 ? "X" : "T");
      n->add_output(c == 0 ? "T" : "Y");
    }
  }
  return m;
}

// ---- node count ----

TEST(BadInputResourceLimits, NodeCountIsScannedBeforeParsing) {
  CompileLimits limits;
  limits.max_nodes = 50;
  // The scan counts every NodeProto: graph, subgraphs and functions.
  frontend::WireCounts c = frontend::scan_model_wire(serialize(function_tree(2)), limits, "m");
  EXPECT_EQ(c.nodes, 1 + 2 + 2 + 2);
  EXPECT_EQ(frontend::scan_model_wire(serialize(relu_chain(50)), limits, "m").nodes, 50);
  EXPECT_TRUE(FailsWith([&] { compile_ir(relu_chain(51), limits); }, ExitCode::kUnsupported,
                        {"model.onnx (counted before parsing)", "max_nodes = 50", "--max-nodes N",
                         "limits.max_nodes"}));
  compile_ir(relu_chain(50), limits);
}

TEST(BadInputResourceLimits, NodeCountAfterInlining) {
  // 7 NodeProtos in the file, 2^3 Relu and 4 Constant nodes after inlining.
  CompileLimits limits;
  limits.max_nodes = 10;
  EXPECT_TRUE(FailsWith([&] { compile_ir(function_tree(3), limits); }, ExitCode::kUnsupported,
                        {"graph 'main' (after inlining functions)", "max_nodes = 10"}));
  limits.max_nodes = 16;
  compile_ir(function_tree(3), limits);
}

TEST(BadInputResourceLimits, InlinedNodesCap) {
  CompileLimits limits;
  limits.max_inlined_nodes = 5;
  EXPECT_TRUE(FailsWith([&] { compile_ir(function_tree(3), limits); }, ExitCode::kUnsupported,
                        {"node 'call' (custom::F0): inlining 'custom::F", "max_inlined_nodes = 5",
                         "--max-inlined-nodes"}));
}

// Bytes, not nodes: four copies of a 4 KB Constant attribute exceed a 10 KB cap although the
// node count is small.
TEST(BadInputResourceLimits, InlinedBytesCapCountsAttributes) {
  CompileLimits limits;
  limits.max_inlined_bytes = 10000;
  EXPECT_TRUE(FailsWith([&] { compile_ir(function_tree(2, 1000), limits); }, ExitCode::kUnsupported,
                        {"node 'call' (custom::F0)", "max_inlined_bytes = 10000",
                         "--max-inlined-bytes"}));
  limits.max_inlined_bytes = 40000;
  compile_ir(function_tree(2, 1000), limits);
}

// The default caps on the doubling family (30 levels): frontend_bad_input_test.cpp,
// BadInputGraph.FunctionInliningBlowUpIsCapped.

TEST(BadInputResourceLimits, NestingDepthCountsFunctionCalls) {
  CompileLimits limits;
  limits.max_nesting_depth = 3;
  EXPECT_TRUE(FailsWith([&] { compile_ir(function_tree(3), limits); }, ExitCode::kUnsupported,
                        {"node 'call' (custom::F0): function 'custom::F3' inlined 4 calls deep",
                         "max_nesting_depth = 3", "--max-nesting-depth"}));
  limits.max_nesting_depth = 4;
  compile_ir(function_tree(3), limits);
}

// ---- tensor elements ----

TEST(BadInputResourceLimits, InitializerBeyondTheElementCap) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  *g->add_initializer() = test::make_float_tensor("w", {4}, {1, 2, 3, 4});
  test::add_node(g, "Add", {"x", "w"}, {"y"}, "add");
  test::add_output(g, "y");
  CompileLimits limits;
  limits.max_tensor_elements = 3;
  EXPECT_TRUE(FailsWith([&] { compile_ir(m, limits); }, ExitCode::kUnsupported,
                        {"initializer 'w' has 4 elements", "max_tensor_elements = 3",
                         "--max-tensor-elements"}));
}

TEST(BadInputResourceLimits, ConstantAttributeBeyondTheElementCap) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_constant(g, "w", test::make_float_tensor("w", {4}, {1, 2, 3, 4}), "konst");
  test::add_node(g, "Add", {"x", "w"}, {"y"}, "add");
  test::add_output(g, "y");
  CompileLimits limits;
  limits.max_tensor_elements = 3;
  EXPECT_TRUE(FailsWith([&] { compile_ir(m, limits); }, ExitCode::kUnsupported,
                        {"node 'konst' attribute 'value' has 4 elements", "max_tensor_elements = 3"}));
}

// A node whose output has a huge static shape from a tiny file: refused by shape inference,
// naming the node, without materialising anything (the default cap, 2^34 elements).
void expect_huge_output_refused(const std::string& op, const std::vector<std::string>& inputs,
                                const std::function<void(onnx::GraphProto*)>& consts) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {1});
  consts(g);
  test::add_node(g, op, inputs, {"y"}, "huge");
  auto* out = g->add_output();
  out->set_name("y");
  EXPECT_TRUE(FailsWith([&] { compile_ir(m); }, ExitCode::kUnsupported,
                        {"node 'huge' (" + op + ")", "output 'y' has", "max_tensor_elements"}))
      << op;
}

TEST(BadInputResourceLimits, ConstantOfShapeBeyondTheElementCap) {
  expect_huge_output_refused("ConstantOfShape", {"shape"}, [](onnx::GraphProto* g) {
    test::add_constant(g, "shape", test::make_int64_tensor("shape", {2}, {1 << 20, 1 << 20}));
  });
}

TEST(BadInputResourceLimits, ExpandBeyondTheElementCap) {
  expect_huge_output_refused("Expand", {"x", "shape"}, [](onnx::GraphProto* g) {
    test::add_constant(g, "shape", test::make_int64_tensor("shape", {3}, {1 << 20, 1 << 20, 1}));
  });
}

TEST(BadInputResourceLimits, TileBeyondTheElementCap) {
  expect_huge_output_refused("Tile", {"x", "reps"}, [](onnx::GraphProto* g) {
    test::add_constant(g, "reps", test::make_int64_tensor("reps", {1}, {int64_t{1} << 40}));
  });
}

TEST(BadInputResourceLimits, RangeBeyondTheElementCap) {
  expect_huge_output_refused("Range", {"start", "limit", "delta"}, [](onnx::GraphProto* g) {
    test::add_constant(g, "start", test::make_int64_tensor("start", {}, {0}));
    test::add_constant(g, "limit", test::make_int64_tensor("limit", {}, {int64_t{1} << 40}));
    test::add_constant(g, "delta", test::make_int64_tensor("delta", {}, {1}));
  });
}

// max_fold_elements is not a refusal: over it, constant contents are not read at compile time
// and the result stays symbolic (run-time work).
TEST(BadInputResourceLimits, FoldLimitFoldsLessInsteadOfRefusing) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {6});
  *g->add_initializer() = test::make_int64_tensor("shape", {2}, {2, 3});
  test::add_node(g, "Reshape", {"x", "shape"}, {"y"}, "reshape");
  auto* out = g->add_output();
  out->set_name("y");
  Model folded, unfolded;
  compile_ir(m, {}, &folded);
  EXPECT_EQ(type_of_output(folded), "f32[2, 3]");
  CompileLimits limits;
  limits.max_fold_elements = 1;
  compile_ir(m, limits, &unfolded);
  EXPECT_NE(type_of_output(unfolded), "f32[2, 3]");
}

// ---- nested loops: bounded widening ----

// Loop bodies nested `depth` deep; each level carries x and doubles it (Concat(x, x)), so every
// level's fixpoint needs three passes: 3^depth body inferences without the shared budget.
onnx::GraphProto doubling_body(int level, int depth) {
  onnx::GraphProto b;
  b.set_name("body" + std::to_string(level));
  const std::string l = std::to_string(level);
  typed(b.add_input(), "i" + l, Tp::INT64);
  typed(b.add_input(), "cond" + l, Tp::BOOL);
  typed(b.add_input(), "x" + l, Tp::FLOAT);
  std::string inner = "x" + l;
  if (level < depth) {
    inner = "y" + l;
    auto* n = test::add_node(&b, "Loop", {"trips", "", "x" + l}, {inner}, "loop" + std::to_string(level + 1));
    *test::set_attr_graph(n, "body") = doubling_body(level + 1, depth);
  }
  test::set_attr_int(test::add_node(&b, "Concat", {inner, inner}, {"x" + l + "_next"}, "concat" + l),
                     "axis", 0);
  test::add_node(&b, "Identity", {"cond" + l}, {"cond" + l + "_out"}, "cond_id" + l);
  typed(b.add_output(), "cond" + l + "_out", Tp::BOOL);
  typed(b.add_output(), "x" + l + "_next", Tp::FLOAT);
  return b;
}

onnx::ModelProto nested_doubling_loops(int depth) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "trips", Tp::INT64, {});
  test::add_input(g, "x", Tp::FLOAT, {1});
  auto* n = test::add_node(g, "Loop", {"trips", "", "x"}, {"y"}, "loop1");
  *test::set_attr_graph(n, "body") = doubling_body(1, depth);
  auto* out = g->add_output();
  out->set_name("y");
  return m;
}

TEST(BadInputResourceLimits, ShallowNestedLoopsKeepFullPrecision) {
  ShapeInferenceStats s = compile_ir(nested_doubling_loops(2));
  EXPECT_FALSE(s.budget_spent);
  // The outer fixpoint takes three passes (x: [1], then a fresh symbol, then unknown); the
  // inner one three, three and one (an unknown extent is already a fixed point).
  EXPECT_EQ(s.body_inferences, 3 + 3 + 3 + 1);
}

TEST(BadInputResourceLimits, DeeplyNestedLoopsAreBounded) {
  const int depth = 20;
  ShapeInferenceStats s = compile_ir(nested_doubling_loops(depth));
  EXPECT_TRUE(s.budget_spent);
  // Without the budget: 3 + 3^2 + ... + 3^20 (about 5e9) body inferences.
  EXPECT_LE(s.rule_applications, s.widening_budget + 4 * (depth + 1) * 4 * depth);
  EXPECT_LT(s.body_inferences, 100000);
}

TEST(BadInputResourceLimits, NestedLoopsBeyondTheDepthCap) {
  CompileLimits limits;
  limits.max_nesting_depth = 5;
  EXPECT_TRUE(FailsWith([&] { compile_ir(nested_doubling_loops(6), limits); }, ExitCode::kUnsupported,
                        {"nested 6 levels deep", "max_nesting_depth = 5"}));
}

// ---- cuvilc ----

TEST(BadInputResourceLimits, CuvilcHasOneOptionPerCap) {
  test::TempDir tmp;
  for (const char* sub : {"compile", "inspect"}) {
    test::RunResult r = test::run_tool(tmp.path(), CUVIL_CUVILC, {sub, "--help"});
    EXPECT_EQ(r.exit_code, 0);
    for (size_t i = 0; i < static_cast<size_t>(LimitId::kCount); ++i) {
      const LimitInfo& info = limit_info(static_cast<LimitId>(i));
      EXPECT_NE(r.out.find(info.cli_flag), std::string::npos) << sub << " " << info.cli_flag;
      EXPECT_NE(r.out.find(std::string("limits.") + info.yaml_key), std::string::npos) << info.yaml_key;
    }
  }
}

TEST(BadInputResourceLimits, CuvilcRefusesWithExit4AndRaisingTheCapCompiles) {
  test::TempDir tmp;
  const std::string model = test::write_model(tmp.path(), relu_chain(8));
  const std::string out = tmp.file("out.cuvir");
  test::RunResult r = test::run_tool(tmp.path(), CUVIL_CUVILC, {"compile", model, "-o", out, "--max-nodes", "4"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("max_nodes = 4 (raise it with --max-nodes N"), std::string::npos) << r.err;
  r = test::run_tool(tmp.path(), CUVIL_CUVILC, {"compile", model, "-o", out, "--max-nodes", "8"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = test::run_tool(tmp.path(), CUVIL_CUVILC, {"compile", model, "--max-nodes", "-1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

}  // namespace
}  // namespace cuvil
