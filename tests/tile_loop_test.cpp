// Tile kernels with a reduction loop (ReduceSum/Mean/Max/Min, MatMul and Gemm through Mma) and
// casts in fused chains (codegen/tile_kernels.h, runtime/cpu/tile_interpreter.cpp). Models are
// built here and compiled twice in-process, fused and with fusion off (only CallOps: the
// whole-tensor kernels); both packages run through the C API on the same inputs. Suite
// TileLoop: IR-level checks that the fused program really holds the loop kernel, a golden
// disassembly, numeric agreement (exact for max/min and casts, a tolerance for sums since the
// summation order differs) over odd and symbolic shapes, broadcasts, transposes, NaN and
// infinities, the Mma tests on every kernel path the CPU supports, a weight packed once per
// package for Mma, and the run-time bounds proof refusing a tampered map. Suite BadPackage:
// hand-built loop kernels the load-time verifier must refuse, each naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/lower.h"
#include "codegen/package_builder.h"
#include "compile_in_process.h"
#include "cuvil.h"
#include "onnx_builder.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/ops/gemm_micro.h"
#include "runtime/cpu/ops/packed_weights.h"
#include "runtime/disasm.h"
#include "runtime/verifier.h"

namespace cuvil {
namespace {

using Tp = onnx::TensorProto;
using test::DimSpec;

// ---- compiling and running ----

struct Compiled {
  codegen::LoweredModel lowered;
  std::vector<uint8_t> package;
};

Model import(const onnx::ModelProto& m, const std::vector<std::string>& dims) {
  return test::import_for_codegen(m, dims);
}

Compiled compile(const onnx::ModelProto& m, bool fuse, const std::vector<std::string>& dims = {}) {
  Model model = import(m, dims);
  codegen::LowerOptions lo;
  lo.fuse_elementwise = fuse;
  Compiled c;
  c.lowered = codegen::lower_model(model, lo);
  c.package = codegen::build_package(model, c.lowered);
  return c;
}

struct Tensor {
  cuvil_dtype dtype = 1;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
};

template <typename T> Tensor make_tensor(cuvil_dtype dtype, std::vector<int64_t> dims, const std::vector<T>& v) {
  Tensor t{dtype, std::move(dims), std::vector<uint8_t>(v.size() * sizeof(T))};
  if (!v.empty()) std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

std::string status_text(cuvil_status st) {
  if (!st) return "";
  std::string msg = cuvil_status_message(st);
  cuvil_status_free(st);
  return msg.empty() ? "error" : msg;
}

// Runs a package; returns the outputs, or sets *error.
std::vector<Tensor> run(const std::vector<uint8_t>& package,
                        const std::vector<std::pair<std::string, Tensor>>& inputs,
                        std::string* error = nullptr, int threads = 2) {
  std::vector<Tensor> outs;
  cuvil_model* model = nullptr;
  std::string e = status_text(cuvil_model_load_memory(package.data(), package.size(), &model));
  cuvil_session* s = nullptr;
  if (e.empty()) {
    cuvil_session_options o;
    cuvil_session_options_init(&o);
    o.threads = threads;
    e = status_text(cuvil_session_create(model, &o, &s));
  }
  for (size_t i = 0; e.empty() && i < inputs.size(); ++i) {
    const Tensor& t = inputs[i].second;
    e = status_text(cuvil_session_set_input(s, inputs[i].first.c_str(), t.dtype,
                                            static_cast<int32_t>(t.dims.size()), t.dims.data(),
                                            t.bytes.data(), t.bytes.size()));
  }
  if (e.empty()) e = status_text(cuvil_session_run(s));
  for (size_t i = 0; e.empty() && i < cuvil_model_output_count(model); ++i) {
    cuvil_tensor_info info;
    const void* data = nullptr;
    size_t bytes = 0;
    e = status_text(cuvil_session_get_output(s, i, &info, &data, &bytes));
    if (!e.empty()) break;
    Tensor t{info.dtype, std::vector<int64_t>(info.dims, info.dims + info.rank), std::vector<uint8_t>(bytes)};
    if (bytes) std::memcpy(t.bytes.data(), data, bytes);
    outs.push_back(std::move(t));
  }
  if (s) cuvil_session_release(s);
  if (model) cuvil_model_release(model);
  if (error) *error = e;
  else EXPECT_EQ(e, "");
  return outs;
}

// Kernels with a reduction loop, and instructions of an opcode, in a lowered program.
int loop_kernels(const rt::Program& p) {
  int n = 0;
  for (const rt::TileKernel& k : p.kernels) n += k.loop_extent != rt::kNone;
  return n;
}
int count_tile_opcode(const rt::Program& p, rt::TileOpcode op) {
  int n = 0;
  for (const rt::TileKernel& k : p.kernels)
    for (size_t pc = 0; pc < k.body.size();) {
      n += k.body[pc] == static_cast<uint32_t>(op);
      pc += 1 + std::strlen(rt::tile_opcode_operands(static_cast<rt::TileOpcode>(k.body[pc])));
    }
  return n;
}

std::vector<float> as_floats(const Tensor& t) {
  std::vector<float> v(t.bytes.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

// Random floats with a few specials when `specials` (NaN, +-inf, -0).
std::vector<float> random_floats(size_t n, uint32_t seed, bool specials = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  if (specials && n > 4) {
    v[rng() % n] = NAN;
    v[rng() % n] = INFINITY;
    v[rng() % n] = -INFINITY;
    v[rng() % n] = -0.f;
  }
  return v;
}

// Exact comparison (bitwise but any NaN equals any NaN), or within rtol * scale + atol where
// scale is the reference's magnitude.
::testing::AssertionResult Close(const std::vector<float>& got, const std::vector<float>& want,
                                 float rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const float a = got[i], b = want[i];
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) != std::isnan(b))
        return ::testing::AssertionFailure() << "element " << i << ": " << a << " vs " << b;
      continue;
    }
    if (rtol == 0.f) {
      if (std::memcmp(&a, &b, sizeof a) != 0)
        return ::testing::AssertionFailure() << "element " << i << ": " << a << " vs " << b << " (bitwise)";
      continue;
    }
    if (std::isinf(a) || std::isinf(b)) {
      if (a != b) return ::testing::AssertionFailure() << "element " << i << ": " << a << " vs " << b;
      continue;
    }
    if (std::fabs(a - b) > rtol * (1.f + std::fabs(b)))
      return ::testing::AssertionFailure() << "element " << i << ": " << a << " vs " << b;
  }
  return ::testing::AssertionSuccess();
}

int64_t numel(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

// Compiles fused and unfused, checks the fused one has `want_loops` loop kernels (and the
// unfused none), runs both over each input set and compares every output.
void expect_fused_matches(const onnx::ModelProto& m, const std::vector<std::string>& dims,
                          const std::vector<std::vector<std::pair<std::string, Tensor>>>& input_sets,
                          float rtol, int want_loops) {
  Compiled fused = compile(m, true, dims), plain = compile(m, false, dims);
  EXPECT_EQ(loop_kernels(fused.lowered.program), want_loops) << rt::disassemble(fused.lowered.program);
  EXPECT_TRUE(plain.lowered.program.kernels.empty());
  for (const auto& inputs : input_sets) {
    std::vector<Tensor> a = run(fused.package, inputs), b = run(plain.package, inputs);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].dims, b[i].dims);
      EXPECT_EQ(a[i].dtype, b[i].dtype);
      if (a[i].dtype == 1) EXPECT_TRUE(Close(as_floats(a[i]), as_floats(b[i]), rtol)) << "output " << i;
      else EXPECT_EQ(a[i].bytes, b[i].bytes) << "output " << i;
    }
  }
}

// ---- reductions ----

struct ReduceCase {
  std::vector<DimSpec> in;              // input dims (symbols allowed)
  std::vector<int64_t> axes;            // empty: all
  bool keepdims;
  std::vector<DimSpec> out;
  std::vector<std::vector<int64_t>> runs;  // concrete input dims per run
  bool tiled = true;                       // false: left to the whole-tensor kernel
};

onnx::ModelProto reduce_model(const std::string& op, const ReduceCase& c, int64_t opset) {
  onnx::ModelProto m = test::make_model(opset);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, c.in);
  const bool axes_input = opset >= (op == "ReduceSum" ? 13 : 18);
  std::vector<std::string> ins = {"x"};
  if (axes_input && !c.axes.empty()) {
    *g->add_initializer() = test::make_int64_tensor("axes", {static_cast<int64_t>(c.axes.size())}, c.axes);
    ins.push_back("axes");
  }
  auto* n = test::add_node(g, op, ins, {"y"}, "reduce");
  if (!axes_input && !c.axes.empty()) test::set_attr_ints(n, "axes", c.axes);
  test::set_attr_int(n, "keepdims", c.keepdims ? 1 : 0);
  test::add_output(g, "y", Tp::FLOAT, c.out);
  return m;
}

std::vector<ReduceCase> reduce_cases() {
  return {
      {{3, 17}, {-1}, false, {3}, {{3, 17}}},
      {{1, 4097}, {1}, true, {1, 1}, {{1, 4097}}},
      {{"n", 17}, {1}, false, {"n"}, {{1, 17}, {3, 17}, {17, 17}}},
      {{2, "n", 5}, {1, 2}, true, {2, 1, 1}, {{2, 1, 5}, {2, 3, 5}, {2, 70, 5}}},
      // Runs that end before the last axis (strided chunk loads) stay CallOps.
      {{4, 3, 5}, {1}, false, {4, 5}, {{4, 3, 5}}, false},
      {{4, 3, 5}, {0}, true, {1, 3, 5}, {{4, 3, 5}}, false},
      {{5}, {}, false, {}, {{5}}},  // all axes
      {{3, 1}, {1}, false, {3}, {{3, 1}}},
      {{"n", 300}, {-1}, true, {"n", 1}, {{1, 300}, {33, 300}}},  // chunks of 256 + 44
      {{3, "n"}, {1}, false, {3}, {{3, 0}, {3, 2}}},  // an empty reduced axis: the loop never runs
  };
}

void check_reduce(const std::string& op, float rtol) {
  uint32_t seed = 1;
  for (int64_t opset : {13, 18}) {
    for (const ReduceCase& c : reduce_cases()) {
      SCOPED_TRACE(op + " opset " + std::to_string(opset) + " case dims " + std::to_string(c.in.size()) +
                   " axes " + std::to_string(c.axes.size()));
      std::vector<std::vector<std::pair<std::string, Tensor>>> sets;
      for (const auto& d : c.runs)
        for (bool specials : {false, true})
          sets.push_back({{"x", make_tensor(1, d, random_floats(static_cast<size_t>(numel(d)), seed++, specials))}});
      bool symbolic = false;
      for (const DimSpec& d : c.in) symbolic = symbolic || !d.param.empty();
      expect_fused_matches(reduce_model(op, c, opset), symbolic ? std::vector<std::string>{"n=0:100"}
                                                                : std::vector<std::string>{},
                           sets, rtol, c.tiled ? 1 : 0);
    }
  }
}

TEST(TileLoop, ReduceSumMatchesTheKernel) { check_reduce("ReduceSum", 1e-5f); }
TEST(TileLoop, ReduceMeanMatchesTheKernel) { check_reduce("ReduceMean", 1e-5f); }
TEST(TileLoop, ReduceMaxMatchesTheKernelExactly) { check_reduce("ReduceMax", 0.f); }
TEST(TileLoop, ReduceMinMatchesTheKernelExactly) { check_reduce("ReduceMin", 0.f); }

TEST(TileLoop, ReduceMaxPropagatesNaNAndKeepsSignedZeroTies) {
  // Rows of 12 so ties sit in different lanes of the interpreter's eight-lane fold.
  ReduceCase c{{4, 12}, {1}, false, {4}, {}};
  Compiled fused = compile(reduce_model("ReduceMax", c, 13), true);
  ASSERT_EQ(loop_kernels(fused.lowered.program), 1);
  const float n = -1.f;
  std::vector<float> x = {1.f, NAN, 3.f, 2.f, n, n, n, n, n, n, n, n,           // NaN
                          0.f, -0.f, n, -0.f, n, n, n, n, n, n, n, n,          // first zero: +0
                          n, -0.f, n, n, n, n, n, n, n, 0.f, n, 0.f,           // first zero: -0
                          -INFINITY, n, n, n, n, n, n, n, n, n, n, -0.f};      // at the tail
  std::vector<Tensor> out = run(fused.package, {{"x", make_tensor(1, {4, 12}, x)}});
  ASSERT_EQ(out.size(), 1u);
  std::vector<float> y = as_floats(out[0]);
  ASSERT_EQ(y.size(), 4u);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 0.f);
  EXPECT_FALSE(std::signbit(y[1]));  // the first of the tied zeros stays
  EXPECT_EQ(y[2], 0.f);
  EXPECT_TRUE(std::signbit(y[2]));
  EXPECT_TRUE(std::signbit(y[3]));
  // And the whole-tensor kernel agrees bit for bit.
  EXPECT_EQ(out[0].bytes, run(compile(reduce_model("ReduceMax", c, 13), false).package,
                              {{"x", make_tensor(1, {4, 12}, x)}})[0].bytes);
}

TEST(TileLoop, ReductionsLeftToTheKernel) {
  // Axes that are not one contiguous run, noop_with_empty_axes, and an integer input.
  ReduceCase split{{2, 3, 4}, {0, 2}, false, {3}, {}};
  EXPECT_EQ(loop_kernels(compile(reduce_model("ReduceSum", split, 13), true).lowered.program), 0);
  onnx::ModelProto m = test::make_model(18);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {2, 3});
  test::set_attr_int(test::add_node(g, "ReduceMax", {"x"}, {"y"}, "noop"), "noop_with_empty_axes", 1);
  test::add_output(g, "y", Tp::FLOAT, {2, 3});
  test::add_input(g, "i", Tp::INT32, {2, 3});
  test::add_node(g, "ReduceMax", {"i"}, {"z"}, "ints");
  test::add_output(g, "z", Tp::INT32, {1, 1});
  EXPECT_EQ(loop_kernels(compile(m, true).lowered.program), 0);
}

TEST(TileLoop, GoldenReduceMeanDisassembly) {
  ReduceCase c{{"n", 8}, {1}, false, {"n"}, {}};
  Compiled fused = compile(reduce_model("ReduceMean", c, 13), true, {"n=1:64"});
  const std::string text = rt::disassemble(fused.lowered.program);
  const std::string kernel = text.substr(text.find("kernels 1"), text.find("loops ") - text.find("kernels 1"));
  EXPECT_EQ(kernel,
            "kernels 1\n"
            "  k0 \"reduce\" domain [n] registers 2 loop 8 chunk 256\n"
            "    m0 = t0 \"x\" offset 0 strides [8] loop stride 1\n"
            "    m1 = t1 \"y\" offset 0 strides [1]\n"
            "    0: r0 = Const 0\n"
            "    loop:\n"
            "    3: r1 = Load m0\n"
            "    6: r0 += ReduceSum r1\n"
            "    finish:\n"
            "    9: r1 = LoopExtent\n"
            "    11: r0 = Binary.Div r0, r1\n"
            "    16: Store m1, r0\n")
      << text;
}

// The bounds proof covers the loop: a map whose loop stride reaches past the tensor is refused
// when the kernel runs (the verifier cannot know the shapes), and nothing is read.
TEST(TileLoop, BoundsProofRefusesATamperedLoopStride) {
  ReduceCase c{{"n", 8}, {1}, false, {"n"}, {}};
  onnx::ModelProto m = reduce_model("ReduceSum", c, 13);
  Model model = import(m, {"n=1:64"});
  codegen::LoweredModel lowered = codegen::lower_model(model);
  ASSERT_EQ(loop_kernels(lowered.program), 1);
  rt::Program& p = lowered.program;
  // A new constant expression 9 as the input map's loop stride: row n-1 reaches 9 * 7 past it.
  p.expr_code.push_back({rt::ExprOpKind::kConst, 9});
  p.exprs.push_back({static_cast<uint32_t>(p.expr_code.size() - 1), 1});
  p.kernels[0].maps[0].loop_stride = static_cast<uint32_t>(p.exprs.size() - 1);
  std::vector<uint8_t> package = codegen::build_package(model, lowered);
  std::string error;
  run(package, {{"x", make_tensor(1, {2, 8}, random_floats(16, 7))}}, &error);
  EXPECT_NE(error.find("reaches elements"), std::string::npos) << error;
  // The same tampering with the loop extent instead (8 -> 9 steps).
  codegen::LoweredModel again = codegen::lower_model(model);
  rt::Program& q = again.program;
  q.expr_code.push_back({rt::ExprOpKind::kConst, 9});
  q.exprs.push_back({static_cast<uint32_t>(q.expr_code.size() - 1), 1});
  q.kernels[0].loop_extent = static_cast<uint32_t>(q.exprs.size() - 1);
  package = codegen::build_package(model, again);
  run(package, {{"x", make_tensor(1, {1, 8}, random_floats(8, 8))}}, &error);
  EXPECT_NE(error.find("reaches elements"), std::string::npos) << error;
}

// ---- MatMul and Gemm ----

// The Mma tests run once per kernel path this CPU supports (runtime/cpu/cpu_features.h): the
// tile Mma and the whole-tensor GEMM both take the active path's micro kernel and blocking.
void for_each_cpu_path(void (*body)()) {
  const rt::CpuPath saved = rt::active_cpu_path();
  for (rt::CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    SCOPED_TRACE(std::string("path ") + rt::cpu_path_name(path));
    body();
    if (::testing::Test::HasFatalFailure()) break;
  }
  rt::set_cpu_path_for_testing(saved);
}

onnx::ModelProto matmul_model(const std::vector<DimSpec>& a, const std::vector<DimSpec>& b,
                              const std::vector<DimSpec>& y) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "a", Tp::FLOAT, a);
  test::add_input(g, "b", Tp::FLOAT, b);
  test::add_node(g, "MatMul", {"a", "b"}, {"y"}, "matmul");
  test::add_output(g, "y", Tp::FLOAT, y);
  return m;
}

void MatMulMatchesTheKernel_body();
TEST(TileLoop, MatMulMatchesTheKernel) { for_each_cpu_path(MatMulMatchesTheKernel_body); }
void MatMulMatchesTheKernel_body() {
  struct Case {
    std::vector<DimSpec> a, b, y;
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> runs;
  };
  const std::vector<Case> cases = {
      {{1, 1}, {1, 1}, {1, 1}, {{{1, 1}, {1, 1}}}},
      {{3, 17}, {17, 5}, {3, 5}, {{{3, 17}, {17, 5}}}},
      {{3, 4097}, {4097, 5}, {3, 5}, {{{3, 4097}, {4097, 5}}}},
      {{65, 300}, {300, 70}, {65, 70}, {{{65, 300}, {300, 70}}}},  // tile edges, K chunks
      {{2, 1, 5, 7}, {3, 7, 4}, {2, 3, 5, 4}, {{{2, 1, 5, 7}, {3, 7, 4}}}},  // batch broadcast
      {{4, 5, 7}, {7, 6}, {4, 5, 6}, {{{4, 5, 7}, {7, 6}}}},
      {{"m", 33}, {33, 20}, {"m", 20}, {{{1, 33}, {33, 20}}, {{3, 33}, {33, 20}}, {{300, 33}, {33, 20}}}},
      {{"m", 17}, {17, 3}, {"m", 3}, {{{0, 17}, {17, 3}}}},  // an empty domain
      {{3, "m"}, {"m", 4}, {3, 4}, {{{3, 0}, {0, 4}}, {{3, 2}, {2, 4}}}},  // K = 0: zeros
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    std::vector<std::vector<std::pair<std::string, Tensor>>> sets;
    for (const auto& [da, db] : c.runs)
      for (bool specials : {false, true})
        sets.push_back({{"a", make_tensor(1, da, random_floats(static_cast<size_t>(numel(da)), seed++, specials))},
                        {"b", make_tensor(1, db, random_floats(static_cast<size_t>(numel(db)), seed++))}});
    SCOPED_TRACE("case " + std::to_string(&c - cases.data()));
    const bool symbolic = !c.a[0].param.empty() || !c.a[1].param.empty();
    expect_fused_matches(matmul_model(c.a, c.b, c.y),
                         symbolic ? std::vector<std::string>{"m=0:300"} : std::vector<std::string>{},
                         sets, 1e-4f, 1);
  }
}

// Tiling depends on the thread count (a product with few tiles splits rows per worker); the
// sum over k of each element must not.
void MatMulIsBitwiseTheSameForAnyThreadCount_body();
TEST(TileLoop, MatMulIsBitwiseTheSameForAnyThreadCount) { for_each_cpu_path(MatMulIsBitwiseTheSameForAnyThreadCount_body); }
void MatMulIsBitwiseTheSameForAnyThreadCount_body() {
  Compiled fused = compile(matmul_model({"m", 300}, {300, 40}, {"m", 40}), true, {"m=1:100"});
  ASSERT_EQ(loop_kernels(fused.lowered.program), 1);
  for (int64_t m : {1, 37, 100}) {
    const std::vector<std::pair<std::string, Tensor>> in = {
        {"a", make_tensor(1, {m, 300}, random_floats(static_cast<size_t>(m * 300), 3))},
        {"b", make_tensor(1, {300, 40}, random_floats(300 * 40, 4))}};
    std::vector<Tensor> one = run(fused.package, in, nullptr, 1), three = run(fused.package, in, nullptr, 3);
    ASSERT_EQ(one.size(), 1u);
    ASSERT_EQ(three.size(), 1u);
    EXPECT_EQ(one[0].bytes, three[0].bytes) << "m = " << m;
  }
}

void GemmMatchesTheKernelForTransposesAndBiases_body();
TEST(TileLoop, GemmMatchesTheKernelForTransposesAndBiases) { for_each_cpu_path(GemmMatchesTheKernelForTransposesAndBiases_body); }
void GemmMatchesTheKernelForTransposesAndBiases_body() {
  const int64_t M = 19, N = 37, K = 70;
  uint32_t seed = 500;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int bias = 0; bias < 5; ++bias) {  // none, [N], [M, 1], [M, N], scalar
        SCOPED_TRACE("transA " + std::to_string(ta) + " transB " + std::to_string(tb) + " bias " + std::to_string(bias));
        onnx::ModelProto m = test::make_model(13);
        auto* g = m.mutable_graph();
        const std::vector<int64_t> da = ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K};
        const std::vector<int64_t> db = tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N};
        const std::vector<std::vector<int64_t>> bias_dims = {{}, {N}, {M, 1}, {M, N}, {}};
        test::add_input(g, "a", Tp::FLOAT, {da[0], da[1]});
        test::add_input(g, "b", Tp::FLOAT, {db[0], db[1]});
        std::vector<std::string> ins = {"a", "b"};
        if (bias) {
          const auto& dc = bias_dims[static_cast<size_t>(bias)];
          *g->add_initializer() =
              test::make_float_tensor("c", dc, random_floats(static_cast<size_t>(numel(dc)), seed++, bias == 3));
          ins.push_back("c");
        }
        auto* n = test::add_node(g, "Gemm", ins, {"y"}, "gemm");
        test::set_attr_int(n, "transA", ta);
        test::set_attr_int(n, "transB", tb);
        test::set_attr_float(n, "alpha", bias == 2 ? 1.f : 0.75f);
        test::set_attr_float(n, "beta", bias == 4 ? 0.f : -1.5f);
        test::add_output(g, "y", Tp::FLOAT, {M, N});
        expect_fused_matches(m, {}, {{{"a", make_tensor(1, da, random_floats(static_cast<size_t>(M * K), seed++, true))},
                                      {"b", make_tensor(1, db, random_floats(static_cast<size_t>(K * N), seed++))}}},
                             1e-4f, 1);
      }
}

// Elementwise ops after a loop kernel join it as an epilogue in the finish section: MatMul +
// bias Add + Relu, and ReduceMean + Sqrt, are one kernel each, with no intermediate stored.
TEST(TileLoop, ElementwiseEpiloguesJoinLoopKernels) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "a", Tp::FLOAT, {"m", 70});
  *g->add_initializer() = test::make_float_tensor("w", {70, 33}, random_floats(70 * 33, 21));
  *g->add_initializer() = test::make_float_tensor("bias", {33}, random_floats(33, 22));
  test::add_node(g, "MatMul", {"a", "w"}, {"mm"}, "mm");
  test::add_node(g, "Add", {"mm", "bias"}, {"pre"}, "bias_add");
  test::add_node(g, "Relu", {"pre"}, {"h"}, "relu");
  auto* r = test::add_node(g, "ReduceMean", {"h"}, {"mean"}, "mean");
  test::set_attr_ints(r, "axes", {-1});
  test::set_attr_int(r, "keepdims", 0);
  test::add_node(g, "Sqrt", {"mean"}, {"y"}, "sqrt");
  test::add_output(g, "y", Tp::FLOAT, {"m"});
  Compiled fused = compile(m, true, {"m=1:300"});
  const rt::Program& p = fused.lowered.program;
  EXPECT_EQ(fused.lowered.call_ops, 0);
  EXPECT_EQ(fused.lowered.fused_kernels, 2) << rt::disassemble(p);
  // MatMul + bias Add + Relu is one cuvil::FusedMatMul after pass fuse-epilogues; its kernel
  // holds the same epilogue. Sqrt joins the ReduceMean kernel in the lowering.
  EXPECT_EQ(fused.lowered.fused_nodes, 3);
  ASSERT_EQ(p.kernels.size(), 2u);
  EXPECT_EQ(p.kernels[0].name, "mm");
  EXPECT_EQ(p.kernels[1].name, "sqrt");
  const std::string text = rt::disassemble(p);
  EXPECT_NE(text.find("    3: r0 += Mma m0, m1\n    finish:\n    7: r1 = Load m2\n"
                      "    10: r0 = Binary.Add r0, r1\n    15: r0 = Unary.Relu r0\n    19: Store m3, r0\n"),
            std::string::npos)
      << text;
  std::vector<std::vector<std::pair<std::string, Tensor>>> sets;
  for (int64_t rows : {1, 3, 257})
    sets.push_back({{"a", make_tensor(1, {rows, 70}, random_floats(static_cast<size_t>(rows * 70), 23, true))}});
  expect_fused_matches(m, {"m=1:300"}, sets, 1e-4f, 2);
}

// cuvil::FusedMatMul (made by pass fuse-epilogues from the ONNX ops) as a tile Mma kernel with
// its transposes, alpha, bias, residual and activation, against its whole-tensor kernel
// (--no-fusion), NaN and infinities included.
void FusedMatMulMatchesItsKernel_body();
TEST(TileLoop, FusedMatMulMatchesItsKernel) { for_each_cpu_path(FusedMatMulMatchesItsKernel_body); }
void FusedMatMulMatchesItsKernel_body() {
  const int64_t N = 35, K = 70;
  uint32_t seed = 900;
  struct Act {
    const char* op;
    int64_t opset;
  };
  for (const Act& act : {Act{"", 13}, Act{"Relu", 13}, Act{"Clip", 13}, Act{"Sigmoid", 13}, Act{"Tanh", 13},
                         Act{"LeakyRelu", 13}, Act{"Gelu", 20}})
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE(std::string("activation '") + act.op + "' transposed B " + std::to_string(tb));
      onnx::ModelProto m = test::make_model(act.opset);
      auto* g = m.mutable_graph();
      test::add_input(g, "a", Tp::FLOAT, {2, "m", K});
      test::add_input(g, "r", Tp::FLOAT, {"m", N});
      *g->add_initializer() = test::make_float_tensor("w", tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N},
                                                      random_floats(static_cast<size_t>(K * N), seed++));
      *g->add_initializer() = test::make_float_tensor("bias", {N}, random_floats(static_cast<size_t>(N), seed++));
      *g->add_initializer() = test::make_float_tensor("s", {}, {0.25f});
      *g->add_initializer() = test::make_float_tensor("lo", {}, {-0.5f});
      *g->add_initializer() = test::make_float_tensor("hi", {}, {1.f});
      std::string b = "w";
      if (tb) {
        auto* t = test::add_node(g, "Transpose", {"w"}, {"wt"}, "transpose");
        test::set_attr_ints(t, "perm", {1, 0});
        b = "wt";
      }
      test::add_node(g, "MatMul", {"a", b}, {"mm"}, "mm");
      test::add_node(g, "Mul", {"mm", "s"}, {"scaled"}, "scale");
      test::add_node(g, "Add", {"scaled", "bias"}, {"biased"}, "bias_add");
      const std::string pre = std::string(act.op).empty() ? "y" : "pre";
      test::add_node(g, "Add", {"biased", "r"}, {pre}, "residual_add");
      if (!std::string(act.op).empty()) {
        std::vector<std::string> ins = {"pre"};
        if (std::string(act.op) == "Clip") ins = {"pre", "lo", "hi"};
        auto* n = test::add_node(g, act.op, ins, {"y"}, "act");
        if (std::string(act.op) == "LeakyRelu") test::set_attr_float(n, "alpha", 0.3f);
      }
      test::add_output(g, "y", Tp::FLOAT, {2, "m", N});
      Model ir = import(m, {"m=1:64"});
      ASSERT_EQ(ir.graph->nodes.size(), 1u) << "the passes fuse the chain into one FusedMatMul";
      EXPECT_EQ(ir.graph->nodes[0].op, OpKind::FusedMatMul);
      std::vector<std::vector<std::pair<std::string, Tensor>>> sets;
      for (int64_t rows : {1, 5, 64})
        sets.push_back({{"a", make_tensor(1, {2, rows, K}, random_floats(static_cast<size_t>(2 * rows * K), seed++, true))},
                        {"r", make_tensor(1, {rows, N}, random_floats(static_cast<size_t>(rows * N), seed++, true))}});
      expect_fused_matches(m, {"m=1:64"}, sets, 1e-4f, 1);
    }
}

// The tile Unary functions with a runtime/cpu/vec_math.h form (Exp, Sigmoid, Tanh, Erf, Gelu,
// Gelu tanh) equal their whole-tensor kernels bit for bit, on every CPU path this machine
// supports, over a wide spread of inputs (both signs, tiny to overflowing, NaN, infinities, -0)
// and lengths with vector tails.
TEST(TileLoop, VecMathUnaryOpsMatchTheirKernelsBitForBit) {
  struct Op {
    const char* op;
    int64_t opset;
    const char* approximate;
  };
  std::vector<float> spread = {0.f, -0.f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-30f, 88.72f, 89.f, -104.f};
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> mag(-12.f, 7.f);
  while (spread.size() < 1003) spread.push_back((rng() % 2 ? 1.f : -1.f) * std::pow(2.f, mag(rng)));
  const rt::CpuPath before = rt::active_cpu_path();
  for (const Op& op : {Op{"Exp", 13, ""}, Op{"Sigmoid", 13, ""}, Op{"Tanh", 13, ""}, Op{"Erf", 13, ""},
                       Op{"Gelu", 20, "none"}, Op{"Gelu", 20, "tanh"}}) {
    SCOPED_TRACE(std::string(op.op) + " " + op.approximate);
    onnx::ModelProto m = test::make_model(op.opset);
    auto* g = m.mutable_graph();
    test::add_input(g, "x", Tp::FLOAT, {"n"});
    *g->add_initializer() = test::make_float_tensor("s", {}, {1.5f});
    test::add_node(g, "Mul", {"x", "s"}, {"xs"}, "scale");
    auto* n = test::add_node(g, op.op, {"xs"}, {"y"}, "f");
    if (*op.approximate) test::set_attr_string(n, "approximate", op.approximate);
    test::add_output(g, "y", Tp::FLOAT, {"n"});
    const Compiled fused = compile(m, true, {"n=1:2000"});
    EXPECT_EQ(count_tile_opcode(fused.lowered.program, rt::TileOpcode::Unary), 1) << rt::disassemble(fused.lowered.program);
    for (rt::CpuPath path : rt::supported_cpu_paths()) {
      SCOPED_TRACE(rt::cpu_path_name(path));
      ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
      std::vector<std::vector<std::pair<std::string, Tensor>>> sets;
      for (int64_t len : {1, 37, 1003})
        sets.push_back({{"x", make_tensor(1, {len}, std::vector<float>(spread.begin(), spread.begin() + len))}});
      expect_fused_matches(m, {"n=1:2000"}, sets, 0.f, 0);
    }
  }
  ASSERT_TRUE(rt::set_cpu_path_for_testing(before));
}

// Kernels that only map one tensor through unary functions (Load, Unary..., Store) run their
// rows straight from source to destination (tile_interpreter.cpp, direct_unary_chain): the
// same bits as the whole-tensor kernels on every path, with tiles of several rows, rows wider
// than a tile (two column tiles, the second at an offset) and chains of several functions.
TEST(TileLoop, UnaryChainKernelsMatchTheirKernelsBitForBit) {
  const std::vector<std::vector<const char*>> chains = {{"Gelu"}, {"Erf"}, {"Exp", "Erf"}, {"Sigmoid", "Tanh", "Gelu"}};
  const rt::CpuPath before = rt::active_cpu_path();
  for (const auto& chain : chains) {
    SCOPED_TRACE(std::string(chain.front()) + " chain of " + std::to_string(chain.size()));
    onnx::ModelProto m = test::make_model(20);
    auto* g = m.mutable_graph();
    test::add_input(g, "x", Tp::FLOAT, {"r", "c"});
    std::string prev = "x";
    for (size_t i = 0; i < chain.size(); ++i) {
      const std::string out = i + 1 == chain.size() ? "y" : "t" + std::to_string(i);
      test::add_node(g, chain[i], {prev}, {out}, "f" + std::to_string(i));
      prev = out;
    }
    test::add_output(g, "y", Tp::FLOAT, {"r", "c"});
    const std::vector<std::string> dims = {"r=1:64", "c=1:6000"};
    const Compiled fused = compile(m, true, dims);
    EXPECT_EQ(count_tile_opcode(fused.lowered.program, rt::TileOpcode::Unary), static_cast<int>(chain.size()))
        << rt::disassemble(fused.lowered.program);
    EXPECT_EQ(count_tile_opcode(fused.lowered.program, rt::TileOpcode::Binary), 0);
    for (rt::CpuPath path : rt::supported_cpu_paths()) {
      SCOPED_TRACE(rt::cpu_path_name(path));
      ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
      std::vector<std::vector<std::pair<std::string, Tensor>>> sets;
      uint32_t seed = 5;
      for (std::vector<int64_t> d : {std::vector<int64_t>{1, 1003}, {7, 768}, {3, 5000}})
        sets.push_back({{"x", make_tensor(1, d, random_floats(static_cast<size_t>(d[0] * d[1]), seed++, true))}});
      expect_fused_matches(m, dims, sets, 0.f, 0);
    }
  }
  ASSERT_TRUE(rt::set_cpu_path_for_testing(before));
}

// Gemm with both transposes, alpha and C, then Sigmoid: FusedMatMul with transA and transB.
void FusedMatMulFromGemmWithTransposes_body();
TEST(TileLoop, FusedMatMulFromGemmWithTransposes) { for_each_cpu_path(FusedMatMulFromGemmWithTransposes_body); }
void FusedMatMulFromGemmWithTransposes_body() {
  const int64_t M = 19, N = 37, K = 70;
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "a", Tp::FLOAT, {K, M});
  test::add_input(g, "b", Tp::FLOAT, {N, K});
  *g->add_initializer() = test::make_float_tensor("c", {M, 1}, random_floats(M, 31));
  auto* n = test::add_node(g, "Gemm", {"a", "b", "c"}, {"pre"}, "gemm");
  test::set_attr_int(n, "transA", 1);
  test::set_attr_int(n, "transB", 1);
  test::set_attr_float(n, "alpha", 0.75f);
  test::add_node(g, "Sigmoid", {"pre"}, {"y"}, "sigmoid");
  test::add_output(g, "y", Tp::FLOAT, {M, N});
  Model ir = import(m, {});
  ASSERT_EQ(ir.graph->nodes.size(), 1u);
  EXPECT_EQ(ir.graph->nodes[0].attr_int("transA", 0), 1);
  EXPECT_EQ(ir.graph->nodes[0].attr_int("transB", 0), 1);
  expect_fused_matches(m, {}, {{{"a", make_tensor(1, {K, M}, random_floats(static_cast<size_t>(M * K), 32, true))},
                                {"b", make_tensor(1, {N, K}, random_floats(static_cast<size_t>(K * N), 33))}}},
                       1e-4f, 1);
}

// A weight b of an Mma kernel is packed into panels once per loaded package (and kernel path),
// on the first run; later runs reuse the panels, unloading the package frees them, and the
// result is bitwise the one per-tile packing gives (cache off by a zero cap).
void MmaPacksAWeightOncePerPackage_body();
TEST(TileLoop, MmaPacksAWeightOncePerPackage) { for_each_cpu_path(MmaPacksAWeightOncePerPackage_body); }
void MmaPacksAWeightOncePerPackage_body() {
  const int64_t M = 50, K = 300, N = 70;
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "a", Tp::FLOAT, {M, K});
  *g->add_initializer() = test::make_float_tensor("w", {K, N}, random_floats(static_cast<size_t>(K * N), 61));
  test::add_node(g, "MatMul", {"a", "w"}, {"y"}, "matmul");
  test::add_output(g, "y", Tp::FLOAT, {M, N});
  Compiled fused = compile(m, true);
  ASSERT_EQ(count_tile_opcode(fused.lowered.program, rt::TileOpcode::Mma), 1);
  const std::vector<std::pair<std::string, Tensor>> in = {
      {"a", make_tensor(1, {M, K}, random_floats(static_cast<size_t>(M * K), 62))}};

  rt::ops::set_packed_weight_cap_for_testing(0);
  const std::vector<Tensor> uncached = run(fused.package, in);
  rt::ops::set_packed_weight_cap_for_testing(size_t(4) << 30);
  ASSERT_EQ(uncached.size(), 1u);

  const size_t before = rt::ops::packed_weight_bytes();
  const int64_t nr = rt::ops::gemm_micro_kernel().nr;
  const size_t panels = static_cast<size_t>((N + nr - 1) / nr * nr * K) * sizeof(float);
  cuvil_model* model = nullptr;
  ASSERT_EQ(status_text(cuvil_model_load_memory(fused.package.data(), fused.package.size(), &model)), "");
  for (int round = 0; round < 2; ++round) {
    cuvil_session* s = nullptr;
    cuvil_session_options o;
    cuvil_session_options_init(&o);
    o.threads = 1 + round;
    ASSERT_EQ(status_text(cuvil_session_create(model, &o, &s)), "");
    const Tensor& a = in[0].second;
    ASSERT_EQ(status_text(cuvil_session_set_input(s, "a", a.dtype, 2, a.dims.data(), a.bytes.data(), a.bytes.size())), "");
    ASSERT_EQ(status_text(cuvil_session_run(s)), "");
    EXPECT_EQ(rt::ops::packed_weight_bytes(), before + panels) << "round " << round;
    cuvil_tensor_info info;
    const void* data = nullptr;
    size_t bytes = 0;
    ASSERT_EQ(status_text(cuvil_session_get_output(s, 0, &info, &data, &bytes)), "");
    ASSERT_EQ(bytes, uncached[0].bytes.size());
    EXPECT_EQ(0, std::memcmp(data, uncached[0].bytes.data(), bytes)) << "round " << round;
    cuvil_session_release(s);
  }
  cuvil_model_release(model);
  EXPECT_EQ(rt::ops::packed_weight_bytes(), before);
}

// A session packs the panels of the Mma weights whose keys are known before a run when it is
// made (runtime/session.cpp), so that the first run of a shape never seen packs none: here a
// MatMul weight and a transposed Gemm weight under a run-time row count m. The outputs are
// bitwise the ones per-tile packing gives (cache off by a zero cap).
void WeightPanelsArePackedWhenTheSessionIsMade_body();
TEST(FirstRun, WeightPanelsArePackedWhenTheSessionIsMade) {
  for_each_cpu_path(WeightPanelsArePackedWhenTheSessionIsMade_body);
}
void WeightPanelsArePackedWhenTheSessionIsMade_body() {
  const int64_t K = 90, N = 70, N2 = 33;
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "a", Tp::FLOAT, {"m", K});
  *g->add_initializer() = test::make_float_tensor("w", {K, N}, random_floats(static_cast<size_t>(K * N), 71));
  *g->add_initializer() = test::make_float_tensor("w2", {N2, N}, random_floats(static_cast<size_t>(N * N2), 72));
  test::add_node(g, "MatMul", {"a", "w"}, {"h"}, "matmul");
  auto* gemm = test::add_node(g, "Gemm", {"h", "w2"}, {"y"}, "gemm");
  test::set_attr_int(gemm, "transB", 1);
  test::add_output(g, "y", Tp::FLOAT, {"m", N2});
  Compiled fused = compile(m, true, {"m=1:64"});
  ASSERT_EQ(count_tile_opcode(fused.lowered.program, rt::TileOpcode::Mma), 2);
  const int64_t nr = rt::ops::gemm_micro_kernel().nr;
  const size_t panels =
      static_cast<size_t>((N + nr - 1) / nr * nr * K + (N2 + nr - 1) / nr * nr * N) * sizeof(float);
  cuvil_model* model = nullptr;
  ASSERT_EQ(status_text(cuvil_model_load_memory(fused.package.data(), fused.package.size(), &model)), "");
  const size_t before = rt::ops::packed_weight_bytes();
  for (int64_t rows : {5, 37}) {
    const std::vector<std::pair<std::string, Tensor>> in = {
        {"a", make_tensor(1, {rows, K}, random_floats(static_cast<size_t>(rows * K), 73 + rows))}};
    rt::ops::set_packed_weight_cap_for_testing(0);
    const std::vector<Tensor> uncached = run(fused.package, in);
    rt::ops::set_packed_weight_cap_for_testing(size_t(4) << 30);
    ASSERT_EQ(uncached.size(), 1u);

    cuvil_session* s = nullptr;
    cuvil_session_options o;
    cuvil_session_options_init(&o);
    o.threads = 2;
    ASSERT_EQ(status_text(cuvil_session_create(model, &o, &s)), "");
    EXPECT_EQ(rt::ops::packed_weight_bytes(), before + panels) << "rows " << rows;
    const Tensor& a = in[0].second;
    ASSERT_EQ(status_text(cuvil_session_set_input(s, "a", a.dtype, 2, a.dims.data(), a.bytes.data(), a.bytes.size())), "");
    ASSERT_EQ(status_text(cuvil_session_run(s)), "");
    EXPECT_EQ(rt::ops::packed_weight_bytes(), before + panels) << "the first run packed, rows " << rows;
    cuvil_tensor_info info;
    const void* data = nullptr;
    size_t bytes = 0;
    ASSERT_EQ(status_text(cuvil_session_get_output(s, 0, &info, &data, &bytes)), "");
    ASSERT_EQ(bytes, uncached[0].bytes.size());
    EXPECT_EQ(0, std::memcmp(data, uncached[0].bytes.data(), bytes)) << "rows " << rows;
    cuvil_session_release(s);
  }
  cuvil_model_release(model);
  EXPECT_EQ(rt::ops::packed_weight_bytes(), before);
}

TEST(TileLoop, MatMulDisassemblyShowsMma) {
  Compiled fused = compile(matmul_model({2, "m", 8}, {8, 3}, {2, "m", 3}), true, {"m=1:10"});
  const std::string text = rt::disassemble(fused.lowered.program);
  EXPECT_NE(text.find("loop 8 chunk 256"), std::string::npos) << text;
  EXPECT_NE(text.find(", 8, 0] loop stride 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("m1 = t1 \"b\" offset 0 strides [0, 0, 1] loop stride 3"), std::string::npos) << text;
  EXPECT_NE(text.find("r0 += Mma m0, m1"), std::string::npos) << text;
  EXPECT_EQ(count_tile_opcode(fused.lowered.program, rt::TileOpcode::Mma), 1);
}

// ---- casts ----

uint16_t f16_bits(float f) {  // round to nearest even, finite normal values only (test data)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffffu;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

TEST(TileLoop, CastChainsFuseAndMatchTheKernelExactly) {
  // x f32 -> Cast f16 -> Cast f32 -> Relu -> Cast i8 (y8); x -> Cast u8 (yu); x -> Cast bool
  // -> Cast f32 (yb); q i8 -> Cast f32 -> Add x -> Cast i32 (yi); h f16 -> Cast f32 -> Neg (yh);
  // u u8 -> Cast i64 (yl).
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  const std::vector<DimSpec> d = {"n", 7};
  test::add_input(g, "x", Tp::FLOAT, d);
  test::add_input(g, "q", Tp::INT8, d);
  test::add_input(g, "h", Tp::FLOAT16, d);
  test::add_input(g, "u", Tp::UINT8, d);
  auto cast = [&](const std::string& in, const std::string& out, int to) {
    test::set_attr_int(test::add_node(g, "Cast", {in}, {out}, "cast_" + out), "to", to);
  };
  cast("x", "x16", Tp::FLOAT16);
  cast("x16", "x32", Tp::FLOAT);
  test::add_node(g, "Relu", {"x32"}, {"r"}, "relu");
  cast("r", "y8", Tp::INT8);
  cast("x", "yu", Tp::UINT8);
  cast("x", "xb", Tp::BOOL);
  cast("xb", "yb", Tp::FLOAT);
  cast("q", "qf", Tp::FLOAT);
  test::add_node(g, "Add", {"qf", "x"}, {"s"}, "add");
  cast("s", "yi", Tp::INT32);
  cast("h", "hf", Tp::FLOAT);
  test::add_node(g, "Neg", {"hf"}, {"yh"}, "neg");
  cast("u", "yl", Tp::INT64);
  test::add_output(g, "y8", Tp::INT8, d);
  test::add_output(g, "yu", Tp::UINT8, d);
  test::add_output(g, "yb", Tp::FLOAT, d);
  test::add_output(g, "yi", Tp::INT32, d);
  test::add_output(g, "yh", Tp::FLOAT, d);
  test::add_output(g, "yl", Tp::INT64, d);
  Compiled fused = compile(m, true, {"n=1:2000"});
  EXPECT_EQ(fused.lowered.call_ops, 0) << rt::disassemble(fused.lowered.program);
  EXPECT_EQ(fused.lowered.fused_kernels, 6);
  EXPECT_GE(count_tile_opcode(fused.lowered.program, rt::TileOpcode::Cast), 9);
  std::vector<std::vector<std::pair<std::string, Tensor>>> sets;
  for (int64_t n : {1, 3, 1000}) {
    std::vector<float> x = random_floats(static_cast<size_t>(n * 7), static_cast<uint32_t>(n), true);
    const float specials[] = {300.f, -300.f, 127.5f, -128.9f, 2.7f, -2.7f, 255.9f, 65504.f, 1e6f, 0.5f};
    for (size_t i = 0; i < x.size() && i < 10 * static_cast<size_t>(n); i += 3) x[i] = specials[(i / 3) % 10] * (i % 2 ? 1.f : -1.f);
    std::vector<int8_t> q(x.size());
    std::vector<uint16_t> h(x.size());
    std::vector<uint8_t> u(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      q[i] = static_cast<int8_t>(static_cast<int>(i * 37) % 256 - 128);
      h[i] = f16_bits(static_cast<float>(i % 100) * 0.37f - 10.f);
      u[i] = static_cast<uint8_t>(i * 11);
    }
    sets.push_back({{"x", make_tensor(1, {n, 7}, x)},
                    {"q", make_tensor(3, {n, 7}, q)},
                    {"h", make_tensor(10, {n, 7}, h)},
                    {"u", make_tensor(2, {n, 7}, u)}});
  }
  expect_fused_matches(m, {"n=1:2000"}, sets, 0.f, 0);
}

TEST(TileLoop, CastsThatAreNotExactThroughFloatStayCallOps) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "i", Tp::INT64, {4});
  test::add_input(g, "q", Tp::INT8, {4});
  test::add_input(g, "u", Tp::UINT8, {4});
  // int64 -> int32 wraps in the kernel; a float32 register would round first. (int64 -> float32
  // is exact through the register: Load's conversion is the kernel's, see LowerGenerators.)
  test::set_attr_int(test::add_node(g, "Cast", {"i"}, {"a"}, "i64_i32"), "to", Tp::INT32);
  test::set_attr_int(test::add_node(g, "Cast", {"q"}, {"b"}, "i8_u8"), "to", Tp::UINT8);
  test::set_attr_int(test::add_node(g, "Cast", {"u"}, {"c"}, "u8_i8"), "to", Tp::INT8);
  test::add_output(g, "a", Tp::INT32, {4});
  test::add_output(g, "b", Tp::UINT8, {4});
  test::add_output(g, "c", Tp::INT8, {4});
  Compiled fused = compile(m, true);
  EXPECT_EQ(fused.lowered.call_ops, 3);
  EXPECT_EQ(fused.lowered.fused_kernels, 0);
  // And they wrap as the kernel does: -1 -> 255, 200 -> -56.
  std::vector<Tensor> out = run(fused.package, {{"i", make_tensor<int64_t>(7, {4}, {1, 2, 3, 4})},
                                                {"q", make_tensor<int8_t>(3, {4}, {-1, 0, 1, 127})},
                                                {"u", make_tensor<uint8_t>(2, {4}, {200, 0, 1, 255})}});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].bytes, (std::vector<uint8_t>{255, 0, 1, 127}));
  EXPECT_EQ(out[2].bytes, (std::vector<uint8_t>{200, 0, 1, 255}));
}

// ---- the verifier on hand-built loop kernels ----

uint32_t w(rt::TileOpcode op) { return static_cast<uint32_t>(op); }

// y[N] = sum over 8 of x[N, 8]: expressions 0: N, 1: 8, 2: 1, 3: 0.
rt::Program loop_program() {
  using K = rt::ExprOpKind;
  rt::Program p;
  p.symbols = {{"N", 1, 64, false}};
  p.expr_code = {{K::kSymbol, 0}, {K::kConst, 8}, {K::kConst, 1}, {K::kConst, 0}};
  p.exprs = {{0, 1}, {1, 1}, {2, 1}, {3, 1}};
  rt::TensorDesc x{"x", rt::TensorKind::kInput, DType::Float, {0, 1}, 0, 0, 0, rt::kNone};
  rt::TensorDesc y{"y", rt::TensorKind::kOutput, DType::Float, {0}, 0, 0, 0, rt::kNone};
  p.tensors = {x, y};
  p.inputs = {0};
  p.outputs = {1};
  rt::TileKernel k;
  k.name = "sum";
  k.domain = {0};
  k.maps = {{0, 3, {1}, 2}, {1, 3, {2}, rt::kNone}};
  k.registers = 2;
  k.body = {w(rt::TileOpcode::Const), 0, 0,                  // 0
            w(rt::TileOpcode::Load), 1, 0,                   // 3  (loop)
            w(rt::TileOpcode::ReduceSum), 0, 1,              // 6  (loop)
            w(rt::TileOpcode::Store), 1, 0};                 // 9
  k.loop_extent = 1;
  k.loop_chunk = 4;
  k.init_end = 3;
  k.loop_end = 9;
  p.kernels = {k};
  p.code = {static_cast<uint32_t>(rt::Opcode::RunKernel), 0, static_cast<uint32_t>(rt::Opcode::End)};
  return p;
}

::testing::AssertionResult Refused(const rt::Program& p, const std::string& needle) {
  // Through the encoder and decoder too, so the new fields survive the round trip.
  std::vector<uint8_t> bytes = rt::encode_program(p);
  rt::Program decoded;
  std::string error;
  if (!rt::decode_program(bytes.data(), bytes.size(), &decoded, &error))
    return ::testing::AssertionFailure() << "does not decode: " << error;
  rt::Status st = rt::verify_program(decoded, 0);
  if (st.is_ok()) return ::testing::AssertionFailure() << "accepted; expected '" << needle << "'";
  if (st.message().find(needle) == std::string::npos)
    return ::testing::AssertionFailure() << "message does not mention '" << needle << "': " << st.message();
  return ::testing::AssertionSuccess() << st.message();
}

TEST(TileLoop, HandBuiltLoopKernelVerifiesAndRoundTrips) {
  const rt::Program p = loop_program();
  EXPECT_TRUE(rt::verify_program(p, 0).is_ok()) << rt::verify_program(p, 0).message();
  std::vector<uint8_t> bytes = rt::encode_program(p);
  rt::Program q;
  std::string error;
  ASSERT_TRUE(rt::decode_program(bytes.data(), bytes.size(), &q, &error)) << error;
  EXPECT_EQ(rt::encode_program(q), bytes);
  EXPECT_EQ(q.kernels[0].maps[0].loop_stride, 2u);
  EXPECT_EQ(q.kernels[0].loop_end, 9u);
}

// loop_program() changed by `mutate` must be refused with a message naming `needle`.
::testing::AssertionResult RefusedAfter(const std::function<void(rt::TileKernel&)>& mutate,
                                        const std::string& needle) {
  rt::Program p = loop_program();
  mutate(p.kernels[0]);
  return Refused(p, needle);
}

TEST(BadPackage, LoopKernelRegisterOutOfRange) {
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.body[7] = 5; },  // ReduceSum's accumulator
                           "accumulator register 5 out of range"));
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.body[8] = 2; },  // ReduceSum's chunk
                           "register 2 out of range"));
}

TEST(BadPackage, LoopKernelMapOutOfRange) {
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.body[5] = 7; },  // the Load's map
                           "access map 7 out of range"));
}

TEST(BadPackage, LoopKernelSectionsOutOfRangeOrInsideAnInstruction) {
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.loop_end = 40; }, "not in order"));
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.init_end = 10; }, "not in order"));
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.init_end = 4; }, "not an instruction start"));
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.loop_extent = rt::kNone; }, "has no loop"));
}

TEST(BadPackage, LoopKernelBadLoopStrideOrExtentExpression) {
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.maps[0].loop_stride = 99; },
                           "loop stride expression 99 out of range"));
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.loop_extent = 42; },
                           "loop extent expression 42 out of range"));
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.loop_chunk = 0; }, "loop chunk 0"));
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.loop_chunk = rt::kMaxLoopChunk + 1; }, "loop chunk"));
}

TEST(BadPackage, LoopKernelInstructionsInTheWrongSection) {
  // The Load moves to init, with a map that moves with the loop.
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.init_end = 6; }, "map 0 moves with the loop"));
  // ReduceSum folds its own (tile-shaped) accumulator as a chunk.
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.body[8] = 0; }, "as a chunk register"));
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.loop_end = 6; }, "only allowed in the loop section"));
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.loop_end = 12; }, "store inside the loop"));
  // An Iota (the Load's slot: register 1, start 0.0, delta 1.0) in the loop section.
  EXPECT_TRUE(RefusedAfter(
      [](rt::TileKernel& k) {
        k.body = {w(rt::TileOpcode::Const), 0, 0, w(rt::TileOpcode::Iota), 1, 0, 0x3f800000u, w(rt::TileOpcode::ReduceSum), 0, 1,
                  w(rt::TileOpcode::Store), 1, 0};
        k.loop_end = 10;
      },
      "Iota numbers the domain's elements, which the loop section does not walk"));
  // A loop instruction after the ReduceSum overwrites its accumulator.
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) {
    k.body.insert(k.body.begin() + 9, {w(rt::TileOpcode::Load), 0, 0});
    k.loop_end = 12;
  }, "which the loop section accumulates into"));
  // The finish section stores the chunk register.
  EXPECT_TRUE(RefusedAfter([](rt::TileKernel& k) { k.body[11] = 1; }, "as a tile register"));
}

TEST(BadPackage, LoopKernelMmaNeedsFloatMaps) {
  rt::Program p = loop_program();
  p.tensors[0].dtype = DType::Int8;
  rt::TileKernel& k = p.kernels[0];
  k.body = {w(rt::TileOpcode::Const), 0, 0, w(rt::TileOpcode::Mma), 0, 0, 0, w(rt::TileOpcode::Store), 1, 0};
  k.init_end = 3;
  k.loop_end = 7;
  EXPECT_TRUE(Refused(p, "is not float32"));
  p.tensors[0].dtype = DType::Float;
  EXPECT_TRUE(rt::verify_program(p, 0).is_ok()) << rt::verify_program(p, 0).message();
  p.tensors[0].dtype = DType::String;
  EXPECT_TRUE(Refused(p, "string tensors"));
}

TEST(BadPackage, TileCastToAnUnsupportedDtype) {
  rt::Program p = loop_program();
  rt::TileKernel& k = p.kernels[0];
  k.body.insert(k.body.begin() + 9, {w(rt::TileOpcode::Cast), 0, 0, 17});  // float8e4m3fn
  EXPECT_TRUE(Refused(p, "dtype 17 is not one a tile conversion supports"));
  k.body[12] = static_cast<uint32_t>(DType::Float16);
  EXPECT_TRUE(rt::verify_program(p, 0).is_ok()) << rt::verify_program(p, 0).message();
}

}  // namespace
}  // namespace cuvil
