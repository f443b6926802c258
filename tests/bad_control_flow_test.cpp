// Malformed control flow and unsupported types, through the whole compile (suite
// BadInputControlFlow): import, verify, the passes, lowering, the package builder and the
// runtime's own loader, as `cuvilc compile` runs them. Each case is a crafted model that once
// reached an internal assertion (exit 70), a segmentation fault, or a package the loader
// rejects; each must now end in a diagnostic with exit 3 (invalid) or 4 (unsupported) that
// names the node or value. Valid edge cases (an endless Loop, an output that is a graph input)
// must compile into a package that loads.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "codegen/lower.h"
#include "codegen/package_builder.h"
#include "frontend/onnx_import.h"
#include "ir/verifier.h"
#include "onnx_builder.h"
#include "passes/pipeline.h"
#include "run_tool.h"
#include "runtime/package.h"

namespace cuvil {
namespace {

using Tp = onnx::TensorProto;
using test::FailsWith;

// The whole of `cuvilc compile`, in process. Throws Diagnostic like cuvilc; a package the
// loader rejects is a std::logic_error (which FailsWith reports as unexpected).
void compile_all(const onnx::ModelProto& m) {
  std::string bytes;
  if (!m.SerializeToString(&bytes)) throw std::runtime_error("cannot serialize the model");
  Model model = frontend::import_onnx_bytes(bytes, "", {}, "model.onnx");
  verify_model(model);
  run_passes(model);
  frontend::check_supported(model);
  codegen::LoweredModel lowered = codegen::lower_model(model, {});
  std::vector<uint8_t> package = codegen::build_package(model, lowered);
  std::shared_ptr<rt::LoadedPackage> loaded;
  rt::Status st = rt::LoadedPackage::open_memory(package.data(), package.size(), true, &loaded);
  if (!st.is_ok()) throw std::logic_error("the loader rejects the package: " + st.message());
}

void typed(onnx::ValueInfoProto* vi, const std::string& name, int32_t elem,
           const std::vector<test::DimSpec>& dims = {}) {
  vi->set_name(name);
  test::set_tensor_type(vi, elem, dims);
}

// ---- If ----
// c: bool[], x: f32[4] -> If(c) then Relu(x) else Neg(x) -> y: f32[4]. `edit` may change the
// node (its then/else branches are attributes 0 and 1) before the model is returned.
onnx::ModelProto if_model(const std::function<void(onnx::ModelProto&, onnx::NodeProto*)>& edit = {}) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "c", Tp::BOOL, {});
  test::add_input(g, "x");
  auto* n = test::add_node(g, "If", {"c"}, {"y"}, "branch");
  auto* t = test::set_attr_graph(n, "then_branch");
  t->set_name("then");
  test::add_node(t, "Relu", {"x"}, {"y_then"}, "relu");
  typed(t->add_output(), "y_then", Tp::FLOAT);
  auto* e = test::set_attr_graph(n, "else_branch");
  e->set_name("else");
  test::add_node(e, "Neg", {"x"}, {"y_else"}, "neg");
  typed(e->add_output(), "y_else", Tp::FLOAT);
  test::add_output(g, "y");
  if (edit) edit(m, n);
  return m;
}

TEST(BadInputControlFlow, ValidIfCompiles) { compile_all(if_model()); }

TEST(BadInputControlFlow, IfWithoutElseBranch) {
  auto m = if_model([](onnx::ModelProto&, onnx::NodeProto* n) { n->mutable_attribute()->RemoveLast(); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'branch'", "'else_branch' is missing"}));
}

TEST(BadInputControlFlow, IfBranchWithWrongOutputCount) {
  auto m = if_model([](onnx::ModelProto&, onnx::NodeProto* n) {
    auto* e = n->mutable_attribute(1)->mutable_g();
    typed(e->add_output(), "x", Tp::FLOAT);
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'branch'", "'else' has 2 outputs but the node has 1"}));
}

// Found by fuzz_onnx (tests/fuzz/regressions/fuzz_onnx/if_branch_with_inputs_has_no_tensor):
// a branch declaring an input reached lowering, which has no tensor for it (exit 70).
TEST(BadInputControlFlow, IfBranchWithInputs) {
  auto m = if_model([](onnx::ModelProto&, onnx::NodeProto* n) {
    typed(n->mutable_attribute(0)->mutable_g()->add_input(), "z", Tp::FLOAT);
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'branch'", "branch 'then' declares 1 inputs; If branches take none"}));
}

TEST(BadInputControlFlow, IfWithoutConditionInput) {
  auto m = if_model([](onnx::ModelProto&, onnx::NodeProto* n) { n->clear_input(); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'branch'", "has 0 inputs, expected 1 (the condition)"}));
}

// The segmentation fault of issue 6, through the real binary: exit 3, nothing written.
TEST(BadInputControlFlow, IfWithoutConditionThroughCuvilc) {
  test::TempDir tmp;
  const std::string model = test::write_model(
      tmp.path(), if_model([](onnx::ModelProto&, onnx::NodeProto* n) { n->clear_input(); }));
  test::RunResult r = test::run_tool(tmp.path(), CUVIL_CUVILC, {"compile", model, "-o", tmp.file("out.cuvir")});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("node 'branch' (If): If has 0 inputs"), std::string::npos) << r.err;
  EXPECT_NE(access(tmp.file("out.cuvir").c_str(), F_OK), 0);
}

TEST(BadInputControlFlow, IfWithEmptyConditionName) {
  auto m = if_model([](onnx::ModelProto&, onnx::NodeProto* n) { n->set_input(0, ""); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'branch'", "condition", "missing"}));
}

TEST(BadInputControlFlow, IfWithTwoInputs) {
  auto m = if_model([](onnx::ModelProto&, onnx::NodeProto* n) { n->add_input("x"); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'branch'", "has 2 inputs, expected 1"}));
}

TEST(BadInputControlFlow, IfConditionIsNotBool) {
  auto m = if_model([](onnx::ModelProto& mm, onnx::NodeProto*) {
    test::set_tensor_type(mm.mutable_graph()->mutable_input(0), Tp::FLOAT, {});
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'branch'", "condition 'c' has dtype f32, expected bool"}));
}

TEST(BadInputControlFlow, IfConditionHasSeveralElements) {
  auto m = if_model([](onnx::ModelProto& mm, onnx::NodeProto*) {
    test::set_tensor_type(mm.mutable_graph()->mutable_input(0), Tp::BOOL, {3});
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'branch'", "condition 'c'", "one element"}));
}

TEST(BadInputControlFlow, IfConditionOfSymbolicSize) {
  auto m = if_model([](onnx::ModelProto& mm, onnx::NodeProto*) {
    test::set_tensor_type(mm.mutable_graph()->mutable_input(0), Tp::BOOL, {"n"});
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported,
                        {"'branch'", "condition 'c'", "one element"}));
}

TEST(BadInputControlFlow, IfConditionOfUnknownRank) {
  auto m = if_model([](onnx::ModelProto& mm, onnx::NodeProto*) {
    mm.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported,
                        {"'c'", "unknown rank"}));
}

// A rank-1 condition of one element is valid ONNX.
TEST(BadInputControlFlow, IfConditionOfShapeOneCompiles) {
  compile_all(if_model([](onnx::ModelProto& mm, onnx::NodeProto*) {
    test::set_tensor_type(mm.mutable_graph()->mutable_input(0), Tp::BOOL, {1});
  }));
}

TEST(BadInputControlFlow, IfBranchesYieldStrings) {
  auto m = if_model([](onnx::ModelProto& mm, onnx::NodeProto* n) {
    for (int b = 0; b < 2; ++b) {
      auto* g = n->mutable_attribute(b)->mutable_g();
      auto* cast = test::add_node(g, "Cast", {g->output(0).name()}, {"s" + std::to_string(b)},
                                  "to_string" + std::to_string(b));
      test::set_attr_int(cast, "to", Tp::STRING);
      g->mutable_output(0)->set_name("s" + std::to_string(b));
      test::set_tensor_type(g->mutable_output(0), Tp::STRING, {});
    }
    test::set_tensor_type(mm.mutable_graph()->mutable_output(0), Tp::STRING, {4});
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported, {"string"}));
}

// A branch may yield an enclosing value directly (a capture) or an initializer of its own.
TEST(BadInputControlFlow, IfBranchYieldsACaptureOrAnInitializer) {
  compile_all(if_model([](onnx::ModelProto&, onnx::NodeProto* n) {
    auto* t = n->mutable_attribute(0)->mutable_g();
    t->clear_node();
    t->mutable_output(0)->set_name("x");
    auto* e = n->mutable_attribute(1)->mutable_g();
    e->clear_node();
    *e->add_initializer() = test::make_float_tensor("k", {4}, {1, 2, 3, 4});
    e->mutable_output(0)->set_name("k");
  }));
}

TEST(BadInputControlFlow, IfWithoutOutputs) {
  auto m = if_model([](onnx::ModelProto& mm, onnx::NodeProto* n) {
    n->clear_output();
    for (int b = 0; b < 2; ++b) n->mutable_attribute(b)->mutable_g()->clear_output();
    auto* g = mm.mutable_graph();
    g->clear_output();
    test::add_node(g, "Relu", {"x"}, {"r"}, "relu_main");
    test::add_output(g, "r");
  });
  compile_all(m);
}

TEST(BadInputControlFlow, IfBranchesOfDifferentRanks) {
  auto m = if_model([](onnx::ModelProto& mm, onnx::NodeProto* n) {
    auto* e = n->mutable_attribute(1)->mutable_g();
    test::set_attr_int(test::add_node(e, "ReduceSum", {"y_else"}, {"s"}, "sum"), "keepdims", 0);
    e->mutable_output(0)->set_name("s");
    mm.mutable_graph()->mutable_output(0)->clear_type();
  });
  // Ranks that differ between branches leave the output's rank unknown, which lowering refuses.
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported, {"value 'y'", "unknown rank"}));
}

TEST(BadInputControlFlow, IfBranchYieldsASequence) {
  auto m = if_model([](onnx::ModelProto& mm, onnx::NodeProto* n) {
    for (int b = 0; b < 2; ++b) {
      auto* g = n->mutable_attribute(b)->mutable_g();
      test::add_node(g, "SequenceConstruct", {"x"}, {"seq" + std::to_string(b)}, "construct" + std::to_string(b));
      g->mutable_output(0)->set_name("seq" + std::to_string(b));
      g->mutable_output(0)->clear_type();
    }
    auto* g = mm.mutable_graph();
    g->mutable_output(0)->set_name("y_seq");
    n->set_output(0, "y_seq");
    g->mutable_output(0)->clear_type();
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported, {"seq"}));
}

// ---- Loop ----
// trips: i64[], x: f32[4] -> Loop(trips, cond_in, x) with body (i, c, x_in) -> (c, -x_in).
// `cond_in` "" omits the condition. `edit` may change the model, the node and the body.
using LoopEdit = std::function<void(onnx::ModelProto&, onnx::NodeProto*, onnx::GraphProto*)>;
onnx::ModelProto loop_model(const LoopEdit& edit = {}) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "trips", Tp::INT64, {});
  test::add_input(g, "go", Tp::BOOL, {});
  test::add_input(g, "x");
  auto* n = test::add_node(g, "Loop", {"trips", "go", "x"}, {"y"}, "loop");
  auto* b = test::set_attr_graph(n, "body");
  b->set_name("body");
  typed(b->add_input(), "i", Tp::INT64);
  typed(b->add_input(), "c", Tp::BOOL);
  typed(b->add_input(), "x_in", Tp::FLOAT);
  test::add_node(b, "Neg", {"x_in"}, {"x_out"}, "neg");
  typed(b->add_output(), "c", Tp::BOOL);
  typed(b->add_output(), "x_out", Tp::FLOAT);
  test::add_output(g, "y");
  if (edit) edit(m, n, b);
  return m;
}

TEST(BadInputControlFlow, ValidLoopCompiles) { compile_all(loop_model()); }

// ONNX allows a Loop with neither a trip count nor a condition (it runs until the session's
// deadline, tests/control_flow_test.cpp EndlessLoopStopsAtTheDeadline): not an error.
TEST(BadInputControlFlow, LoopWithoutTripCountAndConditionCompiles) {
  compile_all(loop_model([](onnx::ModelProto&, onnx::NodeProto* n, onnx::GraphProto*) {
    n->set_input(0, "");
    n->set_input(1, "");
  }));
}

TEST(BadInputControlFlow, LoopWithOneInput) {
  auto m = loop_model([](onnx::ModelProto&, onnx::NodeProto* n, onnx::GraphProto*) {
    n->clear_input();
    n->add_input("trips");
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'loop'", "expected at least 2"}));
}

TEST(BadInputControlFlow, LoopBodyWithTooFewInputs) {
  auto m = loop_model([](onnx::ModelProto&, onnx::NodeProto*, onnx::GraphProto* b) {
    b->mutable_input()->DeleteSubrange(0, 1);
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'loop'", "graph has 2 inputs, expected 3"}));
}

TEST(BadInputControlFlow, LoopBodyWithoutOutputs) {
  auto m = loop_model([](onnx::ModelProto&, onnx::NodeProto*, onnx::GraphProto* b) {
    b->clear_output();
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'loop'", "graph has 0 outputs, expected at least 2"}));
}

TEST(BadInputControlFlow, LoopBodyOutputDisagreesWithCarriedType) {
  auto m = loop_model([](onnx::ModelProto&, onnx::NodeProto*, onnx::GraphProto* b) {
    auto* cast = test::add_node(b, "Cast", {"x_out"}, {"x_int"}, "cast");
    test::set_attr_int(cast, "to", Tp::INT64);
    b->mutable_output(1)->set_name("x_int");
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'loop'", "'x_int' has dtype i64", "'x' has f32"}));
}

TEST(BadInputControlFlow, LoopBodyInputTypeDisagreesWithCarriedValue) {
  auto m = loop_model([](onnx::ModelProto&, onnx::NodeProto*, onnx::GraphProto* b) {
    test::set_tensor_type(b->mutable_input(2), Tp::INT64, {});
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'loop'", "body input 'x_in' is declared i64 but carried value 'x' is f32"}));
}

TEST(BadInputControlFlow, LoopBodyIterationInputIsNotInt64) {
  auto m = loop_model([](onnx::ModelProto&, onnx::NodeProto*, onnx::GraphProto* b) {
    b->mutable_input(0)->clear_type();
    test::set_tensor_type(b->mutable_input(0), Tp::FLOAT, {});
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'loop'", "body input 'i' is declared f32 but the iteration number is i64"}));
}

TEST(BadInputControlFlow, LoopTripCountIsNotAnInteger) {
  auto m = loop_model([](onnx::ModelProto& mm, onnx::NodeProto*, onnx::GraphProto*) {
    test::set_tensor_type(mm.mutable_graph()->mutable_input(0), Tp::FLOAT, {});
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'loop'", "trip count 'trips' has dtype f32, expected i64"}));
}

TEST(BadInputControlFlow, LoopTripCountHasSeveralElements) {
  auto m = loop_model([](onnx::ModelProto& mm, onnx::NodeProto*, onnx::GraphProto*) {
    test::set_tensor_type(mm.mutable_graph()->mutable_input(0), Tp::INT64, {2});
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'loop'", "trip count 'trips'", "one element"}));
}

TEST(BadInputControlFlow, LoopConditionIsNotBool) {
  auto m = loop_model([](onnx::ModelProto& mm, onnx::NodeProto*, onnx::GraphProto*) {
    test::set_tensor_type(mm.mutable_graph()->mutable_input(1), Tp::INT64, {});
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'loop'", "condition 'go' has dtype i64, expected bool"}));
}

TEST(BadInputControlFlow, LoopConditionOfSymbolicSize) {
  auto m = loop_model([](onnx::ModelProto& mm, onnx::NodeProto*, onnx::GraphProto*) {
    test::set_tensor_type(mm.mutable_graph()->mutable_input(1), Tp::BOOL, {"n"});
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported,
                        {"'loop'", "condition 'go'", "one element"}));
}

TEST(BadInputControlFlow, LoopBodyConditionOutputIsNotBool) {
  auto m = loop_model([](onnx::ModelProto&, onnx::NodeProto*, onnx::GraphProto* b) {
    auto* cast = test::add_node(b, "Cast", {"c"}, {"c_float"}, "cast");
    test::set_attr_int(cast, "to", Tp::FLOAT);
    b->mutable_output(0)->set_name("c_float");
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'loop'", "body condition 'c_float' has dtype f32, expected bool"}));
}

TEST(BadInputControlFlow, LoopBodyConditionOutputHasSeveralElements) {
  auto m = loop_model([](onnx::ModelProto&, onnx::NodeProto*, onnx::GraphProto* b) {
    test::add_constant(b, "cc", test::make_raw_tensor("cc", Tp::BOOL, {2}, std::string("\1\1", 2)));
    b->mutable_output(0)->set_name("cc");
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'loop'", "body condition 'cc'", "one element"}));
}

TEST(BadInputControlFlow, LoopBodyReadsEmptyName) {
  auto m = loop_model([](onnx::ModelProto&, onnx::NodeProto*, onnx::GraphProto* b) {
    b->mutable_node(0)->set_input(0, "");
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'neg'", "required input 0 is missing"}));
}

// Body outputs that are body inputs, initializers of the body, or enclosing values.
TEST(BadInputControlFlow, LoopBodyYieldsInputsAndInitializers) {
  compile_all(loop_model([](onnx::ModelProto& mm, onnx::NodeProto* n, onnx::GraphProto* b) {
    b->clear_node();
    b->mutable_output(1)->set_name("x_in");  // carried unchanged
    *b->add_initializer() = test::make_float_tensor("k", {4}, {1, 2, 3, 4});
    typed(b->add_output(), "k", Tp::FLOAT);   // scan output: an initializer
    typed(b->add_output(), "x", Tp::FLOAT);   // scan output: an enclosing value
    n->add_output("ks");
    n->add_output("xs");
    test::add_output(mm.mutable_graph(), "ks", Tp::FLOAT, {});
    mm.mutable_graph()->mutable_output(1)->clear_type();
    test::add_output(mm.mutable_graph(), "xs", Tp::FLOAT, {});
    mm.mutable_graph()->mutable_output(2)->clear_type();
  }));
}

TEST(BadInputControlFlow, LoopCarriesAnInitializer) {
  compile_all(loop_model([](onnx::ModelProto& mm, onnx::NodeProto* n, onnx::GraphProto*) {
    *mm.mutable_graph()->add_initializer() = test::make_float_tensor("k", {4}, {1, 2, 3, 4});
    n->set_input(2, "k");
  }));
}

TEST(BadInputControlFlow, LoopWithoutOutputs) {
  compile_all(loop_model([](onnx::ModelProto& mm, onnx::NodeProto* n, onnx::GraphProto*) {
    n->clear_output();
    auto* g = mm.mutable_graph();
    g->clear_output();
    test::add_node(g, "Relu", {"x"}, {"r"}, "relu_main");
    test::add_output(g, "r");
  }));
}

TEST(BadInputControlFlow, LoopWithMoreOutputsThanTheBodyYields) {
  auto m = loop_model([](onnx::ModelProto&, onnx::NodeProto* n, onnx::GraphProto*) { n->add_output("extra"); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'loop'", "2 outputs but its body yields only 1"}));
}

// ---- Scan ----
// s: f32[4], xs: f32[3, 4] -> Scan(s, xs) running sum -> (s_final, sums).
onnx::ModelProto scan_model(const std::function<void(onnx::NodeProto*, onnx::GraphProto*)>& edit = {},
                            int64_t opset = 17) {
  onnx::ModelProto m = test::make_model(opset);
  auto* g = m.mutable_graph();
  test::add_input(g, "s");
  test::add_input(g, "xs", Tp::FLOAT, {3, 4});
  auto* n = test::add_node(g, "Scan", {"s", "xs"}, {"s_final", "sums"}, "scan");
  test::set_attr_int(n, "num_scan_inputs", 1);
  auto* b = test::set_attr_graph(n, "body");
  b->set_name("body");
  typed(b->add_input(), "s_in", Tp::FLOAT);
  typed(b->add_input(), "slice", Tp::FLOAT);
  test::add_node(b, "Add", {"s_in", "slice"}, {"s_out"}, "add");
  test::add_node(b, "Identity", {"s_out"}, {"r_out"}, "id");
  typed(b->add_output(), "s_out", Tp::FLOAT);
  typed(b->add_output(), "r_out", Tp::FLOAT);
  test::add_output(g, "s_final");
  test::add_output(g, "sums", Tp::FLOAT, {3, 4});
  if (edit) edit(n, b);
  return m;
}

void set_int_attr(onnx::NodeProto* n, const std::string& key, int64_t v) {
  for (auto& a : *n->mutable_attribute())
    if (a.name() == key) {
      a.set_i(v);
      return;
    }
  test::set_attr_int(n, key, v);
}

TEST(BadInputControlFlow, ValidScanCompiles) { compile_all(scan_model()); }

TEST(BadInputControlFlow, ScanNumScanInputsZero) {
  auto m = scan_model([](onnx::NodeProto* n, onnx::GraphProto*) { set_int_attr(n, "num_scan_inputs", 0); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'scan'", "'num_scan_inputs' is 0"}));
}

TEST(BadInputControlFlow, ScanNumScanInputsBeyondTheInputs) {
  for (int64_t v : {int64_t{3}, int64_t{-1}, INT64_MAX, INT64_MIN}) {
    auto m = scan_model([&](onnx::NodeProto* n, onnx::GraphProto*) { set_int_attr(n, "num_scan_inputs", v); });
    EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                          {"'scan'", "'num_scan_inputs' is " + std::to_string(v)}));
  }
}

TEST(BadInputControlFlow, ScanInputAxesOfWrongLength) {
  auto m = scan_model([](onnx::NodeProto* n, onnx::GraphProto*) { test::set_attr_ints(n, "scan_input_axes", {0, 1}); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'scan'", "'scan_input_axes' has 2 entries, expected 1"}));
}

TEST(BadInputControlFlow, ScanInputAxisOutOfRange) {
  auto m = scan_model([](onnx::NodeProto* n, onnx::GraphProto*) { test::set_attr_ints(n, "scan_input_axes", {5}); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'scan'", "5 is out of range for rank 2"}));
}

TEST(BadInputControlFlow, ScanInputDirectionsOfWrongLength) {
  auto m = scan_model([](onnx::NodeProto* n, onnx::GraphProto*) { test::set_attr_ints(n, "scan_input_directions", {0, 0}); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'scan'", "'scan_input_directions' has 2 entries, expected 1"}));
}

TEST(BadInputControlFlow, ScanInputDirectionOutOfRange) {
  auto m = scan_model([](onnx::NodeProto* n, onnx::GraphProto*) { test::set_attr_ints(n, "scan_input_directions", {2}); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'scan'", "entry 2 must be 0 or 1"}));
}

TEST(BadInputControlFlow, ScanOutputAxisOutOfRange) {
  auto m = scan_model([](onnx::NodeProto* n, onnx::GraphProto*) { test::set_attr_ints(n, "scan_output_axes", {-3}); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'scan'", "-3 is out of range for rank 2"}));
}

TEST(BadInputControlFlow, ScanOutputDirectionsOfWrongLength) {
  auto m = scan_model([](onnx::NodeProto* n, onnx::GraphProto*) { test::set_attr_ints(n, "scan_output_directions", {}); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'scan'", "'scan_output_directions' has 0 entries, expected 1"}));
}

TEST(BadInputControlFlow, ScanBodyInputTypeDisagreesWithScanInput) {
  auto m = scan_model([](onnx::NodeProto*, onnx::GraphProto* b) {
    b->mutable_input(1)->clear_type();
    test::set_tensor_type(b->mutable_input(1), Tp::DOUBLE, {});
  });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'scan'", "body input 'slice' is declared f64 but scan input 'xs' is f32"}));
}

TEST(BadInputControlFlow, ScanBodyWithTooManyInputs) {
  auto m = scan_model([](onnx::NodeProto*, onnx::GraphProto* b) { typed(b->add_input(), "extra", Tp::FLOAT); });
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'scan'", "graph has 3 inputs, expected 2"}));
}

TEST(BadInputControlFlow, ScanWithOmittedOutputs) {
  auto m = scan_model([](onnx::NodeProto* n, onnx::GraphProto*) { n->set_output(0, ""); });
  m.mutable_graph()->mutable_output()->DeleteSubrange(0, 1);
  compile_all(m);
}

TEST(BadInputControlFlow, ScanInputsOfDifferentLengths) {
  auto m = scan_model([](onnx::NodeProto* n, onnx::GraphProto* b) {
    set_int_attr(n, "num_scan_inputs", 2);
    n->add_input("ys");
    typed(b->add_input(), "slice2", Tp::FLOAT);
  });
  test::add_input(m.mutable_graph(), "ys", Tp::FLOAT, {5, 4});
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'scan'", "'ys' has sequence length 5, expected 3"}));
}

// Scan-8: a leading batch axis on every input; the batch sizes must agree.
onnx::ModelProto scan8_model(const std::vector<test::DimSpec>& s_dims,
                             const std::vector<test::DimSpec>& xs_dims) {
  onnx::ModelProto m = scan_model(
      [](onnx::NodeProto* n, onnx::GraphProto*) {
        n->clear_input();
        for (const char* in : {"", "s", "xs"}) n->add_input(in);
      },
      8);
  auto* g = m.mutable_graph();
  for (int i : {0, 1}) g->mutable_input(i)->clear_type();
  test::set_tensor_type(g->mutable_input(0), Tp::FLOAT, s_dims);
  test::set_tensor_type(g->mutable_input(1), Tp::FLOAT, xs_dims);
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  g->mutable_output(1)->mutable_type()->mutable_tensor_type()->clear_shape();
  return m;
}

TEST(BadInputControlFlow, Scan8Compiles) { compile_all(scan8_model({2, 4}, {2, 3, 4})); }

TEST(BadInputControlFlow, Scan8BatchSizesDisagree) {
  auto m = scan8_model({2, 4}, {5, 3, 4});
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'scan'", "batch", "'xs'", "5", "2"}));
}

TEST(BadInputControlFlow, Scan8InputWithoutBatchAxis) {
  auto m = scan8_model({}, {2, 3, 4});
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'scan'", "'s' is a scalar", "batch axis"}));
}

// ---- graph inputs and outputs ----
// x (elem_type `in_type`) -> Identity -> y (declared `out_type`).
onnx::ModelProto identity_model(int32_t in_type, int32_t out_type) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", in_type);
  test::add_node(g, "Identity", {"x"}, {"y"}, "id");
  test::add_output(g, "y", out_type);
  return m;
}

TEST(BadInputControlFlow, StringGraphInput) {
  EXPECT_TRUE(FailsWith([&] { compile_all(identity_model(Tp::STRING, Tp::STRING)); },
                        ExitCode::kUnsupported, {"graph input 'x'", "string"}));
}

TEST(BadInputControlFlow, StringGraphOutput) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  auto* cast = test::add_node(g, "Cast", {"x"}, {"y"}, "to_string");
  test::set_attr_int(cast, "to", Tp::STRING);
  test::add_output(g, "y", Tp::STRING);
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported,
                        {"'y'", "string"}));
}

// A string tensor in the middle of the graph (not an input or output): refused by name.
TEST(BadInputControlFlow, StringIntermediate) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::set_attr_int(test::add_node(g, "Cast", {"x"}, {"s"}, "to_string"), "to", Tp::STRING);
  test::set_attr_int(test::add_node(g, "Cast", {"s"}, {"y"}, "from_string"), "to", Tp::FLOAT);
  test::add_output(g, "y");
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported,
                        {"value 's'", "string tensor"}));
}

TEST(BadInputControlFlow, StringTensorAttribute) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_constant(g, "shape", test::make_int64_tensor("shape", {1}, {4}));
  auto* n = test::add_node(g, "ConstantOfShape", {"shape"}, {"c"}, "fill");
  onnx::TensorProto v;
  v.set_data_type(Tp::STRING);
  v.add_dims(1);
  v.add_string_data("a");
  test::set_attr_tensor(n, "value", v);
  test::add_node(g, "Shape", {"c"}, {"y"}, "shape_of");
  test::add_output(g, "y", Tp::INT64, {1});
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported, {"string tensor"}));
}

TEST(BadInputControlFlow, ComplexGraphInput) {
  EXPECT_TRUE(FailsWith([&] { compile_all(identity_model(Tp::COMPLEX64, Tp::COMPLEX64)); },
                        ExitCode::kUnsupported, {"graph input 'x'", "c64", "complex"}));
}

TEST(BadInputControlFlow, UndefinedGraphInputType) {
  EXPECT_TRUE(FailsWith([&] { compile_all(identity_model(Tp::UNDEFINED, Tp::FLOAT)); },
                        ExitCode::kInvalidModel, {"graph input 'x'", "no element type"}));
}

TEST(BadInputControlFlow, SequenceGraphInput) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(Tp::FLOAT);
  test::add_node(g, "SequenceLength", {"x"}, {"y"}, "len");
  test::add_output(g, "y", Tp::INT64, {});
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported,
                        {"graph input 'x'", "is not a tensor (kind seq)"}));
}

TEST(BadInputControlFlow, OptionalGraphInput) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_optional_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(Tp::FLOAT);
  test::add_node(g, "OptionalHasElement", {"x"}, {"y"}, "has");
  test::add_output(g, "y", Tp::BOOL, {});
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported,
                        {"graph input 'x'", "is not a tensor (kind opt)"}));
}

TEST(BadInputControlFlow, MapGraphInput) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  auto* mt = in->mutable_type()->mutable_map_type();
  mt->set_key_type(Tp::INT64);
  mt->mutable_value_type()->mutable_tensor_type()->set_elem_type(Tp::FLOAT);
  test::add_input(g, "z");
  test::add_node(g, "Relu", {"z"}, {"y"}, "relu");
  test::add_output(g, "y");
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported,
                        {"graph input 'x'", "is not a tensor (kind map)"}));
}

TEST(BadInputControlFlow, SequenceGraphOutput) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "SequenceConstruct", {"x", "x"}, {"seq"}, "construct");
  auto* out = g->add_output();
  out->set_name("seq");
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kUnsupported,
                        {"graph output 'seq'", "is not a tensor (kind seq)"}));
}

TEST(BadInputControlFlow, OutputIsAnInitializer) {
  onnx::ModelProto m = test::make_relu_model();
  auto* g = m.mutable_graph();
  *g->add_initializer() = test::make_float_tensor("w", {4}, {1, 2, 3, 4});
  test::add_output(g, "w");
  compile_all(m);
}

TEST(BadInputControlFlow, OutputIsAGraphInput) {
  onnx::ModelProto m = test::make_relu_model();
  test::add_output(m.mutable_graph(), "x");
  compile_all(m);
}

TEST(BadInputControlFlow, OutputIsOnlyAGraphInput) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_output(g, "x");
  compile_all(m);
}

TEST(BadInputControlFlow, DuplicateOutputNames) {
  onnx::ModelProto m = test::make_relu_model();
  test::add_output(m.mutable_graph(), "y");
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"output 'y' is listed twice"}));
}

TEST(BadInputControlFlow, RequiredInputWithEmptyName) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "x");
  test::add_node(g, "Add", {"x", ""}, {"y"}, "add");
  test::add_output(g, "y");
  EXPECT_TRUE(FailsWith([&] { compile_all(m); }, ExitCode::kInvalidModel,
                        {"'add'", "required input 1 is missing"}));
}

}  // namespace
}  // namespace cuvil
