// Control flow end to end (suite ControlFlow): ONNX If, Loop and Scan compiled to
// program-level instructions (JumpIfFalse/Jump/Copy, LoopInit/LoopTest/LoopNext/LoopExit)
// and run through the C API. Expected values are computed here in plain C++. Covers both
// branches, branches of different shapes, for/while loops, zero trips, loop-carried values
// whose shape changes every iteration, swapped state, nested loops with an If inside, Scan
// with reversed directions and non-zero axes, a loop that never ends (deadline), and loop
// records the package verifier must refuse (suite BadPackage).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/program.h"
#include "runtime/verifier.h"
#include "passes/infer_shapes.h"
#include "runtime_harness.h"

namespace cuvil {
namespace {

using Tp = onnx::TensorProto;
using test::compile;
using test::Fails;
using test::load;
using test::ModelPtr;
using test::Ok;
using test::open_session;
using test::output;
using test::SessionPtr;
using test::set_f32;

constexpr cuvil_dtype kBool = 9, kI64 = 7;

using test::typed;

// Input data is borrowed until the run returns, so scalars live in storage that outlives it.
cuvil_status set_bool(cuvil_session* s, const char* name, bool v) {
  static const uint8_t kValues[2] = {0, 1};
  return cuvil_session_set_input(s, name, kBool, 0, nullptr, &kValues[v ? 1 : 0], 1);
}
cuvil_status set_i64(cuvil_session* s, const char* name, const int64_t& v) {
  return cuvil_session_set_input(s, name, kI64, 0, nullptr, &v, sizeof v);
}
// set_f32 for data that must stay alive until the run: keeps a copy per input name.
cuvil_status set_f32_kept(cuvil_session* s, const char* name, const std::vector<int64_t>& dims,
                          const std::vector<float>& data) {
  static std::map<std::string, std::vector<float>> kept;
  kept[name] = data;
  return set_f32(s, name, dims, kept[name]);
}

onnx::TensorProto scalar_f32(const std::string& name, float v) {
  onnx::TensorProto t = test::make_float_tensor(name, {}, {v});
  return t;
}

// ---- If ----

// c: bool, x: f32[n] -> If(c) then x * 2 else x + 10
onnx::ModelProto if_model() {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "c", Tp::BOOL, {});
  test::add_input(g, "x", Tp::FLOAT, {"n"});
  auto* n = test::add_node(g, "If", {"c"}, {"y"}, "if");
  auto* then_g = test::set_attr_graph(n, "then_branch");
  then_g->set_name("then");
  *then_g->add_initializer() = scalar_f32("two", 2.f);
  test::add_node(then_g, "Mul", {"x", "two"}, {"y_then"}, "mul");
  typed(then_g->add_output(), "y_then", Tp::FLOAT);
  auto* else_g = test::set_attr_graph(n, "else_branch");
  else_g->set_name("else");
  test::add_constant(else_g, "ten", scalar_f32("ten", 10.f));
  test::add_node(else_g, "Add", {"x", "ten"}, {"y_else"}, "add");
  typed(else_g->add_output(), "y_else", Tp::FLOAT);
  test::add_output(g, "y", Tp::FLOAT, {"n"});
  return m;
}

TEST(ControlFlow, IfRunsTheChosenBranch) {
  for (bool fuse : {true, false}) {
    ModelPtr model = load(compile(if_model(), {}, fuse));
    ASSERT_TRUE(model);
    SessionPtr s = open_session(model.get());
    const std::vector<float> x = {1, -2, 3.5f};
    for (bool c : {true, false, true}) {
      ASSERT_TRUE(Ok(set_bool(s.get(), "c", c)));
      ASSERT_TRUE(Ok(set_f32(s.get(), "x", {3}, x)));
      ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
      std::vector<float> want;
      for (float v : x) want.push_back(c ? v * 2 : v + 10);
      EXPECT_EQ(output<float>(s.get(), 0), want) << "cond " << c << " fuse " << fuse;
    }
  }
}

// The branches give different shapes: then Concat(x, x) [2n], else x [n].
TEST(ControlFlow, IfBranchesOfDifferentShapes) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "c", Tp::BOOL, {});
  test::add_input(g, "x", Tp::FLOAT, {"n"});
  auto* n = test::add_node(g, "If", {"c"}, {"y"}, "if");
  auto* then_g = test::set_attr_graph(n, "then_branch");
  test::set_attr_int(test::add_node(then_g, "Concat", {"x", "x"}, {"xx"}, "concat"), "axis", 0);
  typed(then_g->add_output(), "xx", Tp::FLOAT);
  auto* else_g = test::set_attr_graph(n, "else_branch");
  test::add_node(else_g, "Identity", {"x"}, {"xi"}, "id");
  typed(else_g->add_output(), "xi", Tp::FLOAT);
  typed(g->add_output(), "y", Tp::FLOAT);
  ModelPtr model = load(compile(m));
  ASSERT_TRUE(model);
  SessionPtr s = open_session(model.get());
  for (bool c : {true, false}) {
    ASSERT_TRUE(Ok(set_bool(s.get(), "c", c)));
    ASSERT_TRUE(Ok(set_f32_kept(s.get(), "x", {2}, {5, 6})));
    ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
    std::vector<int64_t> dims;
    auto y = output<float>(s.get(), 0, &dims);
    EXPECT_EQ(y, c ? std::vector<float>({5, 6, 5, 6}) : std::vector<float>({5, 6}));
    EXPECT_EQ(dims, std::vector<int64_t>{c ? 4 : 2});
  }
}

// ---- Loop ----

// Loop(M, cond?) over acc: f32[3]; body: acc += x (captured), scan out acc * i, cond passes.
onnx::ModelProto for_loop_model(bool with_cond) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "M", Tp::INT64, {});
  test::add_input(g, "x", Tp::FLOAT, {3});
  test::add_input(g, "acc0", Tp::FLOAT, {3});
  if (with_cond) test::add_input(g, "c0", Tp::BOOL, {});
  auto* n = test::add_node(g, "Loop", {"M", with_cond ? "c0" : "", "acc0"}, {"acc", "scan"}, "loop");
  auto* b = test::set_attr_graph(n, "body");
  b->set_name("body");
  typed(b->add_input(), "i", Tp::INT64);
  typed(b->add_input(), "cond_in", Tp::BOOL);
  typed(b->add_input(), "acc_in", Tp::FLOAT);
  test::add_node(b, "Identity", {"cond_in"}, {"cond_out"}, "cond");
  test::add_node(b, "Add", {"acc_in", "x"}, {"acc_out"}, "add");
  test::set_attr_int(test::add_node(b, "Cast", {"i"}, {"fi"}, "cast"), "to", Tp::FLOAT);
  test::add_node(b, "Mul", {"acc_out", "fi"}, {"scan_out"}, "mul");
  typed(b->add_output(), "cond_out", Tp::BOOL);
  typed(b->add_output(), "acc_out", Tp::FLOAT);
  typed(b->add_output(), "scan_out", Tp::FLOAT);
  test::add_output(g, "acc", Tp::FLOAT, {3});
  typed(g->add_output(), "scan", Tp::FLOAT);
  return m;
}

TEST(ControlFlow, ForLoopCarriesStateAndStacksScanOutputs) {
  ModelPtr model = load(compile(for_loop_model(false)));
  ASSERT_TRUE(model);
  SessionPtr s = open_session(model.get());
  const std::vector<float> x = {1, 2, 3}, acc0 = {10, 20, 30};
  for (int64_t trips : {4, 0, 1, -3, 4}) {
    ASSERT_TRUE(Ok(set_i64(s.get(), "M", trips)));
    ASSERT_TRUE(Ok(set_f32(s.get(), "x", {3}, x)));
    ASSERT_TRUE(Ok(set_f32(s.get(), "acc0", {3}, acc0)));
    ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
    std::vector<float> acc = acc0, scan;
    for (int64_t i = 0; i < trips; ++i)
      for (int k = 0; k < 3; ++k) {
        acc[k] += x[k];
        scan.push_back(acc[k] * static_cast<float>(i));
      }
    std::vector<int64_t> dims;
    EXPECT_EQ(output<float>(s.get(), 0), acc) << trips;
    EXPECT_EQ(output<float>(s.get(), 1, &dims), scan) << trips;
    EXPECT_EQ(dims, (std::vector<int64_t>{std::max<int64_t>(trips, 0), 3})) << trips;
  }
}

TEST(ControlFlow, FalseInitialConditionRunsNoIteration) {
  ModelPtr model = load(compile(for_loop_model(true)));
  ASSERT_TRUE(model);
  SessionPtr s = open_session(model.get());
  for (bool c : {false, true}) {
    const int64_t two = 2;
    ASSERT_TRUE(Ok(set_i64(s.get(), "M", two)));
    ASSERT_TRUE(Ok(set_f32_kept(s.get(), "x", {3}, {1, 1, 1})));
    ASSERT_TRUE(Ok(set_f32_kept(s.get(), "acc0", {3}, {0, 0, 0})));
    ASSERT_TRUE(Ok(set_bool(s.get(), "c0", c)));
    ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
    std::vector<int64_t> dims;
    EXPECT_EQ(output<float>(s.get(), 0), c ? std::vector<float>({2, 2, 2}) : std::vector<float>({0, 0, 0}));
    output<float>(s.get(), 1, &dims);
    EXPECT_EQ(dims, (std::vector<int64_t>{c ? 2 : 0, 3}));
  }
}

// While loop: s *= 2 while s < limit (the body computes the condition); no trip count.
TEST(ControlFlow, WhileLoopStopsOnTheBodysCondition) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "s0", Tp::FLOAT, {});
  test::add_input(g, "limit", Tp::FLOAT, {});
  test::add_constant(g, "yes", test::make_raw_tensor("yes", Tp::BOOL, {}, std::string(1, '\1')));
  auto* n = test::add_node(g, "Loop", {"", "yes", "s0"}, {"s", "trace"}, "while");
  auto* b = test::set_attr_graph(n, "body");
  typed(b->add_input(), "i", Tp::INT64);
  typed(b->add_input(), "c", Tp::BOOL);
  typed(b->add_input(), "s_in", Tp::FLOAT);
  *b->add_initializer() = scalar_f32("two", 2.f);
  test::add_node(b, "Mul", {"s_in", "two"}, {"s_out"}, "double");
  test::add_node(b, "Less", {"s_out", "limit"}, {"c_out"}, "less");
  test::add_node(b, "Identity", {"s_out"}, {"s_trace"}, "trace");
  typed(b->add_output(), "c_out", Tp::BOOL);
  typed(b->add_output(), "s_out", Tp::FLOAT);
  typed(b->add_output(), "s_trace", Tp::FLOAT);
  test::add_output(g, "s", Tp::FLOAT, {});
  typed(g->add_output(), "trace", Tp::FLOAT);
  ModelPtr model = load(compile(m));
  ASSERT_TRUE(model);
  SessionPtr s = open_session(model.get());
  ASSERT_TRUE(Ok(set_f32_kept(s.get(), "s0", {}, {3})));
  ASSERT_TRUE(Ok(set_f32_kept(s.get(), "limit", {}, {100})));
  ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
  EXPECT_EQ(output<float>(s.get(), 0), std::vector<float>{192});
  EXPECT_EQ(output<float>(s.get(), 1), (std::vector<float>{6, 12, 24, 48, 96, 192}));
}

// The carried value grows by one element per iteration: v = Concat(v, [i]). Its length is a
// per-iteration fact that must be forgotten and bound again every iteration.
TEST(ControlFlow, CarriedValueChangesShapeEveryIteration) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "M", Tp::INT64, {});
  test::add_input(g, "v0", Tp::FLOAT, {"k"});
  auto* n = test::add_node(g, "Loop", {"M", "", "v0"}, {"v"}, "grow");
  auto* b = test::set_attr_graph(n, "body");
  typed(b->add_input(), "i", Tp::INT64);
  typed(b->add_input(), "c", Tp::BOOL);
  typed(b->add_input(), "v_in", Tp::FLOAT);
  test::add_node(b, "Identity", {"c"}, {"c_out"}, "cond");
  test::set_attr_int(test::add_node(b, "Cast", {"i"}, {"fi"}, "cast"), "to", Tp::FLOAT);
  b->add_initializer()->CopyFrom(test::make_int64_tensor("zero", {1}, {0}));
  test::add_node(b, "Unsqueeze", {"fi", "zero"}, {"fi1"}, "unsqueeze");
  test::add_node(b, "Neg", {"v_in"}, {"neg"}, "neg");  // an elementwise op over the varying length
  test::add_node(b, "Neg", {"neg"}, {"pos"}, "neg2");
  test::set_attr_int(test::add_node(b, "Concat", {"pos", "fi1"}, {"v_out"}, "concat"), "axis", 0);
  typed(b->add_output(), "c_out", Tp::BOOL);
  typed(b->add_output(), "v_out", Tp::FLOAT);
  typed(g->add_output(), "v", Tp::FLOAT);
  ModelPtr model = load(compile(m));
  ASSERT_TRUE(model);
  SessionPtr s = open_session(model.get());
  for (int64_t trips : {4, 2}) {
    ASSERT_TRUE(Ok(set_i64(s.get(), "M", trips)));
    ASSERT_TRUE(Ok(set_f32_kept(s.get(), "v0", {1}, {7})));
    ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
    std::vector<float> want = {7};
    for (int64_t i = 0; i < trips; ++i) want.push_back(static_cast<float>(i));
    std::vector<int64_t> dims;
    EXPECT_EQ(output<float>(s.get(), 0, &dims), want);
    EXPECT_EQ(dims, std::vector<int64_t>{1 + trips});
  }
}

// The body passes its state inputs through swapped: (a, b) -> (b, a).
TEST(ControlFlow, SwappedStateIsCarriedCorrectly) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "M", Tp::INT64, {});
  test::add_input(g, "a0", Tp::FLOAT, {2});
  test::add_input(g, "b0", Tp::FLOAT, {2});
  auto* n = test::add_node(g, "Loop", {"M", "", "a0", "b0"}, {"a", "b"}, "swap");
  auto* b = test::set_attr_graph(n, "body");
  typed(b->add_input(), "i", Tp::INT64);
  typed(b->add_input(), "c", Tp::BOOL);
  typed(b->add_input(), "a_in", Tp::FLOAT);
  typed(b->add_input(), "b_in", Tp::FLOAT);
  typed(b->add_output(), "c", Tp::BOOL);
  typed(b->add_output(), "b_in", Tp::FLOAT);
  typed(b->add_output(), "a_in", Tp::FLOAT);
  test::add_output(g, "a", Tp::FLOAT, {2});
  test::add_output(g, "b", Tp::FLOAT, {2});
  ModelPtr model = load(compile(m));
  ASSERT_TRUE(model);
  SessionPtr s = open_session(model.get());
  for (int64_t trips : {3, 2}) {
    ASSERT_TRUE(Ok(set_i64(s.get(), "M", trips)));
    ASSERT_TRUE(Ok(set_f32_kept(s.get(), "a0", {2}, {1, 2})));
    ASSERT_TRUE(Ok(set_f32_kept(s.get(), "b0", {2}, {3, 4})));
    ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
    const bool odd = trips % 2;
    EXPECT_EQ(output<float>(s.get(), 0), odd ? std::vector<float>({3, 4}) : std::vector<float>({1, 2}));
    EXPECT_EQ(output<float>(s.get(), 1), odd ? std::vector<float>({1, 2}) : std::vector<float>({3, 4}));
  }
}

// Outer loop i = 0..M-1: an inner loop adds 1 to the total (i + 1) times, then an If adds 100
// when i == 1. Total for M = 3: 1 + 2 + 3 + 100.
TEST(ControlFlow, NestedLoopsWithAnIfInside) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "M", Tp::INT64, {});
  test::add_input(g, "t0", Tp::FLOAT, {});
  g->add_initializer()->CopyFrom(test::make_int64_tensor("one_i", {}, {1}));
  g->add_initializer()->CopyFrom(scalar_f32("one_f", 1.f));
  auto* outer = test::add_node(g, "Loop", {"M", "", "t0"}, {"t"}, "outer");
  auto* ob = test::set_attr_graph(outer, "body");
  typed(ob->add_input(), "i", Tp::INT64);
  typed(ob->add_input(), "c", Tp::BOOL);
  typed(ob->add_input(), "t_in", Tp::FLOAT);
  test::add_node(ob, "Add", {"i", "one_i"}, {"inner_trips"}, "trips");
  auto* inner = test::add_node(ob, "Loop", {"inner_trips", "", "t_in"}, {"t_mid"}, "inner");
  auto* ib = test::set_attr_graph(inner, "body");
  typed(ib->add_input(), "j", Tp::INT64);
  typed(ib->add_input(), "cj", Tp::BOOL);
  typed(ib->add_input(), "u_in", Tp::FLOAT);
  test::add_node(ib, "Add", {"u_in", "one_f"}, {"u_out"}, "inc");
  typed(ib->add_output(), "cj", Tp::BOOL);
  typed(ib->add_output(), "u_out", Tp::FLOAT);
  test::add_node(ob, "Equal", {"i", "one_i"}, {"is_one"}, "eq");
  auto* branch = test::add_node(ob, "If", {"is_one"}, {"t_out"}, "bonus");
  auto* then_g = test::set_attr_graph(branch, "then_branch");
  *then_g->add_initializer() = scalar_f32("hundred", 100.f);
  test::add_node(then_g, "Add", {"t_mid", "hundred"}, {"t_plus"}, "plus");
  typed(then_g->add_output(), "t_plus", Tp::FLOAT);
  auto* else_g = test::set_attr_graph(branch, "else_branch");
  test::add_node(else_g, "Identity", {"t_mid"}, {"t_same"}, "same");
  typed(else_g->add_output(), "t_same", Tp::FLOAT);
  typed(ob->add_output(), "c", Tp::BOOL);
  typed(ob->add_output(), "t_out", Tp::FLOAT);
  test::add_output(g, "t", Tp::FLOAT, {});
  ModelPtr model = load(compile(m));
  ASSERT_TRUE(model);
  SessionPtr s = open_session(model.get());
  for (int64_t trips : {3, 1, 0}) {
    ASSERT_TRUE(Ok(set_i64(s.get(), "M", trips)));
    ASSERT_TRUE(Ok(set_f32_kept(s.get(), "t0", {}, {0})));
    ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
    float want = 0;
    for (int64_t i = 0; i < trips; ++i) want += static_cast<float>(i + 1) + (i == 1 ? 100.f : 0.f);
    EXPECT_EQ(output<float>(s.get(), 0), std::vector<float>{want}) << trips;
  }
}

TEST(ControlFlow, EndlessLoopStopsAtTheDeadline) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {2});
  auto* n = test::add_node(g, "Loop", {"", "", "x"}, {"y"}, "forever");
  auto* b = test::set_attr_graph(n, "body");
  typed(b->add_input(), "i", Tp::INT64);
  typed(b->add_input(), "c", Tp::BOOL);
  typed(b->add_input(), "x_in", Tp::FLOAT);
  test::add_node(b, "Neg", {"x_in"}, {"x_out"}, "neg");
  typed(b->add_output(), "c", Tp::BOOL);
  typed(b->add_output(), "x_out", Tp::FLOAT);
  test::add_output(g, "y", Tp::FLOAT, {2});
  ModelPtr model = load(compile(m));
  ASSERT_TRUE(model);
  cuvil_session_options o;
  cuvil_session_options_init(&o);
  o.threads = 1;
  o.deadline_ms = 50;
  cuvil_session* raw = nullptr;
  ASSERT_TRUE(Ok(cuvil_session_create(model.get(), &o, &raw)));
  SessionPtr s(raw);
  ASSERT_TRUE(Ok(set_f32_kept(s.get(), "x", {2}, {1, 2})));
  EXPECT_TRUE(Fails(cuvil_session_run(s.get()), CUVIL_DEADLINE, {"deadline"}));
}

// ---- Scan ----

// Scan body: state s_in plus one slice -> s_out = s_in + slice, also yielded as a scan output.
void add_running_sum_body(onnx::GraphProto* b) {
  typed(b->add_input(), "s_in", Tp::FLOAT);
  typed(b->add_input(), "slice", Tp::FLOAT);
  test::add_node(b, "Add", {"s_in", "slice"}, {"s_out"}, "add");
  test::add_node(b, "Identity", {"s_out"}, {"r_out"}, "id");
  typed(b->add_output(), "s_out", Tp::FLOAT);
  typed(b->add_output(), "r_out", Tp::FLOAT);
}

// Scan over x: f32[2, T] along axis 1, last column first; state sum: f32[2]; the running sums
// are stacked along output axis 1 (so the output is [2, T]), in iteration order.
TEST(ControlFlow, ScanWithAxesAndReversedInput) {
  onnx::ModelProto m = test::make_model(17);
  auto* g = m.mutable_graph();
  test::add_input(g, "sum0", Tp::FLOAT, {2});
  test::add_input(g, "x", Tp::FLOAT, {2, "T"});
  auto* n = test::add_node(g, "Scan", {"sum0", "x"}, {"sum", "running"}, "scan");
  test::set_attr_int(n, "num_scan_inputs", 1);
  test::set_attr_ints(n, "scan_input_axes", {1});
  test::set_attr_ints(n, "scan_input_directions", {1});
  test::set_attr_ints(n, "scan_output_axes", {-1});
  test::set_attr_ints(n, "scan_output_directions", {1});
  add_running_sum_body(test::set_attr_graph(n, "body"));
  test::add_output(g, "sum", Tp::FLOAT, {2});
  typed(g->add_output(), "running", Tp::FLOAT);
  ModelPtr model = load(compile(m));
  ASSERT_TRUE(model);
  SessionPtr s = open_session(model.get());
  const int64_t T = 4;
  const std::vector<float> x = {1, 2, 3, 4, 10, 20, 30, 40};  // rows [1 2 3 4], [10 20 30 40]
  ASSERT_TRUE(Ok(set_f32_kept(s.get(), "sum0", {2}, {0, 0})));
  ASSERT_TRUE(Ok(set_f32(s.get(), "x", {2, T}, x)));
  ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
  // Iteration j reads column T-1-j; running[r][p] with p = T-1-j (reversed output).
  std::vector<float> sum = {0, 0}, running(2 * T);
  for (int64_t j = 0; j < T; ++j)
    for (int r = 0; r < 2; ++r) {
      sum[r] += x[r * T + (T - 1 - j)];
      running[r * T + (T - 1 - j)] = sum[r];
    }
  std::vector<int64_t> dims;
  EXPECT_EQ(output<float>(s.get(), 0), sum);
  EXPECT_EQ(output<float>(s.get(), 1, &dims), running);
  EXPECT_EQ(dims, (std::vector<int64_t>{2, T}));
}

// Scan-8: a leading batch axis on states, scan inputs and outputs; each batch element is
// scanned on its own (reversed here).
onnx::ModelProto scan8_model(bool with_lengths) {
  onnx::ModelProto m = test::make_model(8, 3);
  auto* g = m.mutable_graph();
  if (with_lengths) test::add_input(g, "lens", Tp::INT64, {"B"});
  test::add_input(g, "sum0", Tp::FLOAT, {"B", 2});
  test::add_input(g, "x", Tp::FLOAT, {"B", "T", 2});
  auto* n = test::add_node(g, "Scan", {with_lengths ? "lens" : "", "sum0", "x"}, {"sum", "running"}, "scan8");
  test::set_attr_int(n, "num_scan_inputs", 1);
  test::set_attr_ints(n, "directions", {1});
  add_running_sum_body(test::set_attr_graph(n, "body"));
  test::add_output(g, "sum", Tp::FLOAT, {"B", 2});
  typed(g->add_output(), "running", Tp::FLOAT);
  return m;
}

TEST(ControlFlow, Scan8ScansEachBatchElement) {
  ModelPtr model = load(compile(scan8_model(false)));
  ASSERT_TRUE(model);
  SessionPtr s = open_session(model.get());
  const int64_t B = 2, T = 3;
  const std::vector<float> sum0 = {0, 100, 0, 200};
  std::vector<float> x(B * T * 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
  ASSERT_TRUE(Ok(set_f32(s.get(), "sum0", {B, 2}, sum0)));
  ASSERT_TRUE(Ok(set_f32(s.get(), "x", {B, T, 2}, x)));
  ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
  std::vector<float> sum = sum0, running(B * T * 2);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < T; ++j)  // iteration j reads step T-1-j, output in iteration order
      for (int c = 0; c < 2; ++c) {
        sum[b * 2 + c] += x[(b * T + (T - 1 - j)) * 2 + c];
        running[(b * T + j) * 2 + c] = sum[b * 2 + c];
      }
  std::vector<int64_t> dims;
  EXPECT_EQ(output<float>(s.get(), 0), sum);
  EXPECT_EQ(output<float>(s.get(), 1, &dims), running);
  EXPECT_EQ(dims, (std::vector<int64_t>{B, T, 2}));
}

TEST(ControlFlow, Scan8SequenceLengthsAreRefusedClearly) {
  EXPECT_TRUE(test::FailsWith([] { compile(scan8_model(true)); }, ExitCode::kUnsupported, {"sequence_lens", "scan8"}));
}

// ---- the verifier refuses broken loop records ----

rt::Program lowered_loop_program(uint64_t* weights_size) {
  std::string bytes;
  for_loop_model(false).SerializeToString(&bytes);
  Model model = frontend::import_onnx_bytes(bytes, "", {}, "loop.onnx");
  infer_shapes(model);
  codegen::LoweredModel lowered = codegen::lower_model(model);
  *weights_size = lowered.weights_size;
  return lowered.program;
}

TEST(BadPackage, LoopRecordsAreVerified) {
  uint64_t wsize = 0;
  const rt::Program good = lowered_loop_program(&wsize);
  ASSERT_EQ(good.loops.size(), 1u);
  ASSERT_TRUE(rt::verify_program(good, wsize).is_ok());
  struct Case {
    const char* what;
    std::function<void(rt::Program&)> tamper;
    const char* needle;
  };
  const uint32_t huge = 1u << 30;
  const std::vector<Case> cases = {
      {"counter out of range", [&](rt::Program& p) { p.loops[0].counter = huge; }, "out of range"},
      {"state list lengths", [](rt::Program& p) { p.loops[0].next.clear(); }, "must be equal"},
      {"state writes an input", [](rt::Program& p) { p.loops[0].state[0] = p.inputs[1]; }, "read-only"},
      {"counter is not int64", [](rt::Program& p) { p.loops[0].counter = p.loops[0].state[0]; }, "counter"},
      {"per-iteration symbol", [&](rt::Program& p) { p.loops[0].symbols.push_back(huge); }, "symbol"},
      {"per-iteration weight", [](rt::Program& p) { p.loops[0].tensors.push_back(p.inputs[0]); }, "read-only"},
      {"scan output axis", [](rt::Program& p) { p.loops[0].scan_outputs[0].axis = 1; }, "axis"},
      {"loop operand", [](rt::Program& p) { p.loops.clear(); }, "loop record"},
      {"kind", [](rt::Program& p) { p.loops[0].kind = static_cast<rt::LoopKind>(7); }, "kind"},
  };
  for (const Case& c : cases) {
    rt::Program p = good;
    c.tamper(p);
    rt::Status st = rt::verify_program(p, wsize);
    EXPECT_FALSE(st.is_ok()) << c.what;
    EXPECT_NE(st.message().find(c.needle), std::string::npos) << c.what << ": " << st.message();
  }
  // Encoding round-trips the loop record exactly.
  rt::Program back;
  std::string error;
  const auto bytes = rt::encode_program(good);
  ASSERT_TRUE(rt::decode_program(bytes.data(), bytes.size(), &back, &error)) << error;
  EXPECT_EQ(rt::encode_program(back), bytes);
}

}  // namespace
}  // namespace cuvil
