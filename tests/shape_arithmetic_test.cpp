// Pass shape-arithmetic and the op cuvil::SymbolicInts: exporters' Shape/Gather/Unsqueeze/
// Concat chains over symbolic dims become one node that computes the same integers at run time;
// the kernel refuses malformed attributes (packages are untrusted) with a status, never a crash.
#include <gtest/gtest.h>

#include <map>

#include "ir/symbolic_ints.h"
#include "kernel_harness.h"
#include "runtime_harness.h"

namespace cuvil {
namespace {

using test::Tp;

// y = Reshape(x, [Shape(x)[0] * Shape(x)[1], 8]) over x: f32[batch, seq, 8], as torch exports
// x.view(-1 ... ) with explicit sizes.
onnx::ModelProto reshape_chain_model() {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", "seq", 8});
  test::add_output(g, "y", Tp::FLOAT, {"?", 8});
  *g->add_initializer() = test::make_int64_tensor("zero", {}, {0});
  *g->add_initializer() = test::make_int64_tensor("one", {}, {1});
  *g->add_initializer() = test::make_int64_tensor("eight", {1}, {8});
  *g->add_initializer() = test::make_int64_tensor("axes0", {1}, {0});
  test::add_node(g, "Shape", {"x"}, {"s"});
  test::add_node(g, "Gather", {"s", "zero"}, {"b"});
  test::add_node(g, "Shape", {"x"}, {"s2"});
  test::add_node(g, "Gather", {"s2", "one"}, {"t"});
  test::add_node(g, "Mul", {"b", "t"}, {"bt"});
  test::add_node(g, "Unsqueeze", {"bt", "axes0"}, {"bt1"});
  test::set_attr_int(test::add_node(g, "Concat", {"bt1", "eight"}, {"shape"}), "axis", 0);
  test::add_node(g, "Reshape", {"x", "shape"}, {"y"});
  return m;
}

TEST(ShapeArithmetic, ChainBecomesOneSymbolicIntsAndRuns) {
  Model ir = test::import_for_codegen(reshape_chain_model(), {"batch=1:4", "seq=1:16"});
  std::map<std::string, int> h;
  for (const Node& n : ir.graph->nodes) h[n.op_type]++;
  EXPECT_EQ(h["SymbolicInts"], 1);
  EXPECT_EQ(h["Reshape"], 1);
  EXPECT_EQ(ir.graph->nodes.size(), 2u) << "Shape, Gather, Mul, Unsqueeze and Concat are gone";

  test::ModelPtr model = test::load(test::compile(reshape_chain_model(), {"batch=1:4", "seq=1:16"}));
  ASSERT_TRUE(model);
  test::SessionPtr s = test::open_session(model.get(), 1);
  for (int64_t batch : {1, 3}) {
    for (int64_t seq : {1, 5}) {
      std::vector<float> x(static_cast<size_t>(batch * seq * 8));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
      ASSERT_TRUE(test::Ok(test::set_f32(s.get(), "x", {batch, seq, 8}, x)));
      ASSERT_TRUE(test::Ok(cuvil_session_run(s.get())));
      std::vector<int64_t> dims;
      EXPECT_EQ(test::output<float>(s.get(), 0, &dims), x);
      EXPECT_EQ(dims, (std::vector<int64_t>{batch * seq, 8}));
    }
  }
}

// Runs the SymbolicInts kernel over one input of `dims` with the given attributes.
rt::Status run_kernel(const std::vector<int64_t>& in_dims, const std::map<std::string, std::vector<int64_t>>& ints,
                      int64_t to, std::vector<int64_t>* out) {
  Node n;
  n.op = OpKind::SymbolicInts;
  n.op_type = "SymbolicInts";
  n.domain = "cuvil";
  n.name = "s";
  n.outputs = {0};
  for (const auto& [k, v] : ints) {
    Attribute a;
    a.kind = Attribute::Kind::Ints;
    a.ints = v;
    n.attrs[k] = a;
  }
  Attribute t;
  t.kind = Attribute::Kind::Int;
  t.i = to;
  n.attrs["to"] = t;
  rt::TensorView x;
  x.dtype = DType::Float;
  x.dims = in_dims;
  testing::HeapOpContext ctx(n, {&x}, 1);
  rt::OpKernelFn k = rt::find_op_kernel("cuvil", "SymbolicInts");
  EXPECT_NE(k, nullptr);
  rt::Status st = k(ctx);
  if (st.is_ok() && out) {
    const rt::TensorView& o = ctx.output(0);
    out->clear();
    for (int64_t i = 0; i < o.numel(); ++i)
      out->push_back(o.dtype == DType::Int64 ? o.as<int64_t>()[i] : o.as<int32_t>()[i]);
  }
  return st;
}

TEST(ShapeArithmetic, KernelEvaluatesWithPythonDivision) {
  using namespace symints;
  std::vector<int64_t> out;
  // [d0 * d1, floordiv(d1, 2), mod(d0 - 7, 3) with Python signs, min(d0, 4), max(d1, 100)]
  ASSERT_TRUE(run_kernel({5, 6}, {{"dims", {0, 0, 0, 1}},
                                  {"code", {kSlot, 0, kSlot, 1, kMul, 0,
                                            kSlot, 1, kConst, 2, kFloorDiv, 0,
                                            kSlot, 0, kConst, -7, kAdd, 0, kConst, 3, kMod, 0,
                                            kSlot, 0, kConst, 4, kMin, 0,
                                            kSlot, 1, kConst, 100, kMax, 0}},
                                  {"lengths", {3, 3, 5, 3, 3}},
                                  {"shape", {5}}},
                         7, &out)
                  .is_ok());
  EXPECT_EQ(out, (std::vector<int64_t>{30, 3, 1, 4, 100}));
  ASSERT_TRUE(run_kernel({5, 6}, {{"dims", {0, 1}}, {"code", {kSlot, 0}}, {"lengths", {1}}, {"shape", {}}}, 6, &out).is_ok());
  EXPECT_EQ(out, (std::vector<int64_t>{6}));
}

TEST(ShapeArithmetic, KernelRefusesMalformedAttributes) {
  using namespace symints;
  struct Case {
    const char* what;
    std::map<std::string, std::vector<int64_t>> ints;
    int64_t to;
    const char* needle;
  } cases[] = {
      {"slot reads a missing input", {{"dims", {3, 0}}, {"code", {kSlot, 0}}, {"lengths", {1}}, {"shape", {1}}}, 7, "input 3"},
      {"slot reads a missing axis", {{"dims", {0, 9}}, {"code", {kSlot, 0}}, {"lengths", {1}}, {"shape", {1}}}, 7, "axis 9"},
      {"code names a missing slot", {{"dims", {0, 0}}, {"code", {kSlot, 4}}, {"lengths", {1}}, {"shape", {1}}}, 7, "slot out of range"},
      {"unknown step", {{"code", {kConst, 1, 99, 0}}, {"lengths", {2}}, {"shape", {1}}}, 7, "unknown step"},
      {"binary step without operands", {{"code", {kAdd, 0}}, {"lengths", {1}}, {"shape", {1}}}, 7, "without operands"},
      {"lengths past the code", {{"code", {kConst, 1}}, {"lengths", {5}}, {"shape", {1}}}, 7, "lengths"},
      {"odd code", {{"code", {kConst}}, {"lengths", {1}}, {"shape", {1}}}, 7, "odd"},
      {"two values left", {{"code", {kConst, 1, kConst, 2}}, {"lengths", {2}}, {"shape", {1}}}, 7, "more than one"},
      {"shape disagrees", {{"code", {kConst, 1}}, {"lengths", {1}}, {"shape", {3}}}, 7, "shape"},
      {"bad dtype", {{"code", {kConst, 1}}, {"lengths", {1}}, {"shape", {1}}}, 1, "int64 or int32"},
      {"division by zero", {{"code", {kConst, 1, kConst, 0, kFloorDiv, 0}}, {"lengths", {3}}, {"shape", {1}}}, 7, "divides by zero"},
      {"overflow", {{"code", {kConst, INT64_MAX, kConst, 2, kMul, 0}}, {"lengths", {3}}, {"shape", {1}}}, 7, "overflows"},
      {"int32 overflow", {{"code", {kConst, int64_t{1} << 40}}, {"lengths", {1}}, {"shape", {1}}}, 6, "int32"},
  };
  for (const Case& c : cases) {
    rt::Status st = run_kernel({2, 3}, c.ints, c.to, nullptr);
    EXPECT_FALSE(st.is_ok()) << c.what;
    EXPECT_NE(st.message().find(c.needle), std::string::npos) << c.what << ": " << st.message();
  }
  // A stack deeper than the evaluator's is refused, not overrun.
  std::vector<int64_t> deep;
  for (size_t i = 0; i <= kMaxStack; ++i) deep.insert(deep.end(), {kConst, 1});
  rt::Status st = run_kernel({2}, {{"code", deep}, {"lengths", {static_cast<int64_t>(kMaxStack + 1)}}, {"shape", {1}}}, 7, nullptr);
  EXPECT_NE(st.message().find("stack"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace cuvil
