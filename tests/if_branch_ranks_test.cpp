// If nodes whose branches give different ranks (suite IfBranchRanks): the nodes after the If
// move into both branches (pass sink-into-branches), so a model whose later nodes agree on a
// rank compiles and runs either way; a graph output whose rank still differs is refused, and
// `cuvilc inspect` names the node and the cause of every value it could not shape; --freeze
// on the condition folds the If away. Compiled and run with the real cuvilc and cuvil-run.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cli/npy.h"
#include "npy_test_util.h"
#include "onnx_builder.h"
#include "run_tool.h"

namespace cuvil {
namespace {

using test::RunResult;
using test::TempDir;
using test::run_tool;
using Tp = onnx::TensorProto;

#define EXPECT_MENTIONS(text, needle) \
  EXPECT_NE((text).find(needle), std::string::npos) << "missing '" << (needle) << "' in:\n" << (text)

// A float32 value_info without a shape.
void typed(onnx::ValueInfoProto* vi, const std::string& name) {
  vi->set_name(name);
  vi->mutable_type()->mutable_tensor_type()->set_elem_type(Tp::FLOAT);
}

// out = If(cond) then Unsqueeze(src, 0) (one rank more) else <else_op>(src); node `name`.
void add_if_of_two_ranks(onnx::GraphProto* g, const std::string& cond, const std::string& src,
                         const std::string& out, const std::string& else_op, const std::string& name) {
  auto* n = test::add_node(g, "If", {cond}, {out}, name);
  auto* then_g = test::set_attr_graph(n, "then_branch");
  then_g->set_name(name + "_then");
  *then_g->add_initializer() = test::make_int64_tensor(name + "_zero", {1}, {0});
  test::add_node(then_g, "Unsqueeze", {src, name + "_zero"}, {out + "_then"}, name + "_unsq");
  typed(then_g->add_output(), out + "_then");
  auto* else_g = test::set_attr_graph(n, "else_branch");
  else_g->set_name(name + "_else");
  test::add_node(else_g, else_op, {src}, {out + "_else"}, name + "_" + else_op);
  typed(else_g->add_output(), out + "_else");
}

// Inputs c: bool, x: f32[n]; y = If(c) then Unsqueeze(x, 0) [1, n] else <else_op>(x) [n]; the
// caller adds the nodes after it and the graph's outputs.
onnx::ModelProto if_of_two_ranks(const std::string& else_op) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "c", Tp::BOOL, {});
  test::add_input(g, "x", Tp::FLOAT, {"n"});
  add_if_of_two_ranks(g, "c", "x", "y", else_op, "pick");
  return m;
}

// Runs `pkg` on x = [1, -2, 3] and the given bool inputs; returns the scalar output s.
float run_scalar(const TempDir& tmp, const std::string& pkg, const std::vector<std::pair<std::string, bool>>& conds) {
  test::write_bytes(tmp.file("x.npy"), test::npy_file("<f4", {3}, test::raw(std::vector<float>{1, -2, 3})));
  std::vector<std::string> args = {pkg, "--input", "x=" + tmp.file("x.npy"), "--output-dir", tmp.file("out")};
  for (const auto& [name, value] : conds) {
    test::write_bytes(tmp.file(name + ".npy"), test::npy_file("|b1", {}, std::string(1, value ? 1 : 0)));
    args.insert(args.end(), {"--input", name + "=" + tmp.file(name + ".npy")});
  }
  const RunResult r = run_tool(tmp.path(), CUVIL_RUN, args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  tools::HostTensor s;
  EXPECT_EQ(tools::read_npy(tmp.file("out") + "/s.npy", &s), "");
  EXPECT_TRUE(s.dims.empty());
  if (s.bytes.size() != 4) return NAN;
  return test::values<float>(std::string(s.bytes.begin(), s.bytes.end()))[0];
}

// The branches give different ranks: then Unsqueeze(x) [1, n], else x [n], and the graph
// output Relu(y) keeps them different. Inference cannot give it a rank; inspect says which
// node and why, compile refuses naming the same cause, and --freeze c=true folds the If so it
// compiles.
TEST(IfBranchRanks, GraphOutputOfDifferentRanksIsExplainedAndFoldsWhenFrozen) {
  TempDir tmp;
  onnx::ModelProto m = if_of_two_ranks("Identity");
  auto* g = m.mutable_graph();
  test::add_node(g, "Relu", {"y"}, {"z"}, "relu");
  typed(g->add_output(), "z");
  const std::string path = test::write_model(tmp.path(), m);
  const RunResult inspect = run_tool(tmp.path(), CUVIL_CUVILC, {"inspect", path});
  // Relu moved into the branches (sink-into-branches): z is now the If's output.
  EXPECT_MENTIONS(inspect.out, "main/z (If 'pick'): rank unknown; the branches give different ranks "
                               "(then_branch 2, else_branch 1)");
  const RunResult c = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", path, "-o", tmp.file("m.cuvir")});
  EXPECT_EQ(c.exit_code, 4) << c.err;
  EXPECT_MENTIONS(c.err, "the branches give different ranks");
  const RunResult frozen =
      run_tool(tmp.path(), CUVIL_CUVILC, {"compile", path, "--freeze", "c=true", "-o", tmp.file("m.cuvir")});
  EXPECT_EQ(frozen.exit_code, 0) << frozen.err;
  const RunResult shown = run_tool(tmp.path(), CUVIL_CUVILC, {"inspect", path, "--freeze", "c=1"});
  EXPECT_MENTIONS(shown.out, "z: f32[1, n]");
}

// c ? Unsqueeze(x, 0) [1, n] : Neg(x) [n]; then s = ReduceSum(y * x, keepdims 0), a scalar
// either way: Mul and ReduceSum move into both branches, and s is the If's output.
TEST(IfBranchRanks, NodesAfterTheIfMoveIntoBothBranchesAndRun) {
  TempDir tmp;
  onnx::ModelProto m = if_of_two_ranks("Neg");
  auto* g = m.mutable_graph();
  test::add_node(g, "Mul", {"y", "x"}, {"p"}, "mul");
  test::set_attr_int(test::add_node(g, "ReduceSum", {"p"}, {"s"}, "sum"), "keepdims", 0);
  typed(g->add_output(), "s");
  const std::string path = test::write_model(tmp.path(), m);
  const std::string pkg = tmp.file("m.cuvir");
  const RunResult c = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", path, "-o", pkg, "--report", tmp.file("r.json")});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_MENTIONS(test::read_bytes(tmp.file("r.json")), "1 If nodes took the nodes after them into their branches");
  // x = [1, -2, 3]: sum(x * x) = 14 through the then branch, sum(-x * x) = -14 through the else.
  EXPECT_EQ(run_scalar(tmp, pkg, {{"c", true}}), 14.f);
  EXPECT_EQ(run_scalar(tmp, pkg, {{"c", false}}), -14.f);
}

// Two such Ifs in a row: the second (on Relu of the first's output) moves into both branches
// of the first and takes its own tail in the next round; all four paths run.
TEST(IfBranchRanks, SecondIfOfDifferentRanksMovesAndSinksInTurn) {
  TempDir tmp;
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "c1", Tp::BOOL, {});
  test::add_input(g, "c2", Tp::BOOL, {});
  test::add_input(g, "x", Tp::FLOAT, {"n"});
  add_if_of_two_ranks(g, "c1", "x", "y1", "Neg", "first");
  test::add_node(g, "Relu", {"y1"}, {"r"}, "relu");
  add_if_of_two_ranks(g, "c2", "r", "y2", "Neg", "second");
  test::set_attr_int(test::add_node(g, "ReduceSum", {"y2"}, {"s"}, "sum"), "keepdims", 0);
  typed(g->add_output(), "s");
  const std::string pkg = tmp.file("m.cuvir");
  const RunResult c = run_tool(tmp.path(), CUVIL_CUVILC, {"compile", test::write_model(tmp.path(), m), "-o", pkg});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  // relu(x) = [1, 0, 3], relu(-x) = [0, 2, 0]; the second If keeps or negates the sum.
  EXPECT_EQ(run_scalar(tmp, pkg, {{"c1", true}, {"c2", true}}), 4.f);
  EXPECT_EQ(run_scalar(tmp, pkg, {{"c1", true}, {"c2", false}}), -4.f);
  EXPECT_EQ(run_scalar(tmp, pkg, {{"c1", false}, {"c2", true}}), 2.f);
  EXPECT_EQ(run_scalar(tmp, pkg, {{"c1", false}, {"c2", false}}), -2.f);
}

}  // namespace
}  // namespace cuvil
