// Run-time inputs through the public C API (RELIABILITY.md "Run-time inputs"): small ONNX
// models are built here, compiled in-process (import -> verify -> infer_shapes -> lower ->
// build_package) and loaded with cuvil_model_load_memory. Suite BadRuntimeInput: each bad
// input (dtype, rank, a dim outside the compiled range, a symbol two inputs disagree on,
// buffer size, missing/unknown inputs, a small output buffer, a data-dependent index out of
// range) gives the documented cuvil_status_code and a message naming the input with expected
// vs got, and never a crash; the session stays usable afterwards. Zero-size dims run and give
// empty outputs. NaN, +-Inf, -0.0 and denormals follow ONNX (IEEE) semantics through both the
// whole-tensor kernels and the fused tile kernels, and a run leaves the caller's
// floating-point environment untouched. Every C API entry point refuses null pointers.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "runtime_harness.h"

namespace cuvil {
namespace {

using Tp = onnx::TensorProto;
using test::compile;
using test::Fails;
using test::kF32;
using test::kI64;
using test::load;
using test::ModelPtr;
using test::Ok;
using test::open_session;
using test::output;
using test::SessionPtr;
using test::set_f32;

// ---- models ----

// x: f32[batch, 3] -> Relu -> y
onnx::ModelProto relu_model() {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 3});
  test::add_node(g, "Relu", {"x"}, {"y"}, "relu");
  test::add_output(g, "y", Tp::FLOAT, {"batch", 3});
  return m;
}

// x, y: f32[batch, 3] -> Add -> z
onnx::ModelProto add_model() {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 3});
  test::add_input(g, "y", Tp::FLOAT, {"batch", 3});
  test::add_node(g, "Add", {"x", "y"}, {"z"}, "add");
  test::add_output(g, "z", Tp::FLOAT, {"batch", 3});
  return m;
}

// data: f32[5, 2], idx: i64[n] -> Gather(axis 0) -> y: f32[n, 2]
onnx::ModelProto gather_model() {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "data", Tp::FLOAT, {5, 2});
  test::add_input(g, "idx", Tp::INT64, {"n"});
  auto* n = test::add_node(g, "Gather", {"data", "idx"}, {"y"}, "gather");
  test::set_attr_int(n, "axis", 0);
  test::add_output(g, "y", Tp::FLOAT, {"n", 2});
  return m;
}

// a, b: f32[n] -> relu(a), a + b, a * b, a / b, max(a, b), min(a, b); each op's result is a
// graph output, so with fusion on each becomes its own tile kernel.
onnx::ModelProto special_values_model() {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "a", Tp::FLOAT, {"n"});
  test::add_input(g, "b", Tp::FLOAT, {"n"});
  test::add_node(g, "Relu", {"a"}, {"relu"}, "relu");
  for (const char* op : {"Add", "Mul", "Div", "Max", "Min"}) {
    std::string out = std::string(op) + "_out";
    test::add_node(g, op, {"a", "b"}, {out}, op);
  }
  test::add_output(g, "relu", Tp::FLOAT, {"n"});
  for (const char* op : {"Add", "Mul", "Div", "Max", "Min"}) test::add_output(g, std::string(op) + "_out", Tp::FLOAT, {"n"});
  return m;
}

class BadRuntimeInput : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = load(compile(relu_model(), {"batch=1:4"}));
    ASSERT_TRUE(model_);
    session_ = open_session(model_.get());
    ASSERT_TRUE(session_);
  }
  // A valid run of the Relu model: the session must still work after any failure.
  void expect_valid_run() {
    std::vector<float> x = {-1, 2, -3, 4, -5, 6};
    ASSERT_TRUE(Ok(set_f32(session_.get(), "x", {2, 3}, x)));
    ASSERT_TRUE(Ok(cuvil_session_run(session_.get())));
    std::vector<int64_t> dims;
    EXPECT_EQ(output<float>(session_.get(), 0, &dims), (std::vector<float>{0, 2, 0, 4, 0, 6}));
    EXPECT_EQ(dims, (std::vector<int64_t>{2, 3}));
  }
  ModelPtr model_;
  SessionPtr session_;
};

TEST_F(BadRuntimeInput, WrongDtype) {
  std::vector<int64_t> x(6, 1), dims = {2, 3};
  EXPECT_TRUE(Fails(cuvil_session_set_input(session_.get(), "x", kI64, 2, dims.data(), x.data(), 48),
                    CUVIL_INVALID_ARGUMENT, {"'x'", "i64", "expected f32"}));
  // A dtype number that is no dtype at all.
  EXPECT_TRUE(Fails(cuvil_session_set_input(session_.get(), "x", 12345, 2, dims.data(), x.data(), 48),
                    CUVIL_INVALID_ARGUMENT, {"'x'", "expected f32"}));
  expect_valid_run();
}

TEST_F(BadRuntimeInput, WrongRank) {
  std::vector<float> x(6, 1.f);
  EXPECT_TRUE(Fails(set_f32(session_.get(), "x", {6}, x), CUVIL_INVALID_ARGUMENT, {"'x'", "rank 1", "expected 2"}));
  EXPECT_TRUE(Fails(set_f32(session_.get(), "x", {1, 2, 3}, x), CUVIL_INVALID_ARGUMENT, {"'x'", "rank 3", "expected 2"}));
  EXPECT_TRUE(Fails(cuvil_session_set_input(session_.get(), "x", kF32, CUVIL_MAX_RANK + 1, std::vector<int64_t>(17, 1).data(),
                                            x.data(), 4),
                    CUVIL_INVALID_ARGUMENT, {"rank"}));
  expect_valid_run();
}

TEST_F(BadRuntimeInput, NegativeDim) {
  std::vector<float> x(6, 1.f);
  EXPECT_TRUE(Fails(set_f32(session_.get(), "x", {-2, 3}, x), CUVIL_INVALID_ARGUMENT, {"'x'", "negative", "-2"}));
  expect_valid_run();
}

TEST_F(BadRuntimeInput, DimOutsideTheCompiledRange) {
  std::vector<float> x(15, 1.f);
  ASSERT_TRUE(Ok(set_f32(session_.get(), "x", {5, 3}, x)));
  EXPECT_TRUE(Fails(cuvil_session_run(session_.get()), CUVIL_SHAPE, {"'x'", "batch = 5", "[1, 4]"}));
  // Below the range too.
  ASSERT_TRUE(Ok(set_f32(session_.get(), "x", {0, 3}, {})));
  EXPECT_TRUE(Fails(cuvil_session_run(session_.get()), CUVIL_SHAPE, {"'x'", "batch = 0", "[1, 4]"}));
  // The top of the range works.
  x.resize(12);
  ASSERT_TRUE(Ok(set_f32(session_.get(), "x", {4, 3}, x)));
  EXPECT_TRUE(Ok(cuvil_session_run(session_.get())));
  expect_valid_run();
}

TEST_F(BadRuntimeInput, StaticDimMismatch) {
  std::vector<float> x(8, 1.f);
  ASSERT_TRUE(Ok(set_f32(session_.get(), "x", {2, 4}, x)));
  EXPECT_TRUE(Fails(cuvil_session_run(session_.get()), CUVIL_SHAPE, {"'x'", "dim 1 is 4", "requires 3"}));
  expect_valid_run();
}

TEST_F(BadRuntimeInput, SymbolInconsistentAcrossInputs) {
  ModelPtr model = load(compile(add_model()));
  SessionPtr s = open_session(model.get());
  std::vector<float> x(6, 1.f), y(9, 2.f);
  ASSERT_TRUE(Ok(set_f32(s.get(), "x", {2, 3}, x)));
  ASSERT_TRUE(Ok(set_f32(s.get(), "y", {3, 3}, y)));
  EXPECT_TRUE(Fails(cuvil_session_run(s.get()), CUVIL_SHAPE, {"'y'", "batch = 3", "already 2"}));
  y.resize(6);
  ASSERT_TRUE(Ok(set_f32(s.get(), "x", {2, 3}, x)));
  ASSERT_TRUE(Ok(set_f32(s.get(), "y", {2, 3}, y)));
  ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
  EXPECT_EQ(output<float>(s.get(), 0), std::vector<float>(6, 3.f));
}

TEST_F(BadRuntimeInput, ZeroSizeDimsGiveEmptyOutputs) {
  for (bool fuse : {true, false}) {
    SCOPED_TRACE(fuse ? "fused" : "unfused");
    for (auto make : {relu_model, add_model}) {
      ModelPtr model = load(compile(make(), {}, fuse));
      SessionPtr s = open_session(model.get());
      size_t n_in = cuvil_model_input_count(model.get());
      for (size_t i = 0; i < n_in; ++i) {
        cuvil_tensor_info info;
        ASSERT_TRUE(Ok(cuvil_model_input_info(model.get(), i, &info)));
        std::vector<int64_t> dims = {0, 3};
        // Empty data may come with a null pointer.
        ASSERT_TRUE(Ok(cuvil_session_set_input(s.get(), info.name, kF32, 2, dims.data(), nullptr, 0)));
      }
      ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
      cuvil_tensor_info info;
      const void* data = nullptr;
      size_t bytes = 99;
      ASSERT_TRUE(Ok(cuvil_session_get_output(s.get(), 0, &info, &data, &bytes)));
      EXPECT_EQ(bytes, 0u);
      EXPECT_EQ(info.rank, 2);
      EXPECT_EQ(info.dims[0], 0);
      EXPECT_EQ(info.dims[1], 3);
      EXPECT_STREQ(info.shape, "[0, 3]");
      EXPECT_TRUE(Ok(cuvil_session_copy_output(s.get(), 0, nullptr, 0)));
      // And a non-empty run right after. The input data is borrowed until the run returns,
      // so it must outlive the set_input call (a temporary here was a use-after-free).
      const std::vector<float> x = {-1.f, 0.5f, 2.f};
      for (size_t i = 0; i < n_in; ++i) {
        cuvil_tensor_info in;
        ASSERT_TRUE(Ok(cuvil_model_input_info(model.get(), i, &in)));
        ASSERT_TRUE(Ok(set_f32(s.get(), in.name, {1, 3}, x)));
      }
      ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
      EXPECT_EQ(output<float>(s.get(), 0).size(), 3u);
    }
  }
}

TEST_F(BadRuntimeInput, BufferSizeDisagreesWithShape) {
  std::vector<float> x(6, 1.f);
  std::vector<int64_t> dims = {2, 3};
  EXPECT_TRUE(Fails(cuvil_session_set_input(session_.get(), "x", kF32, 2, dims.data(), x.data(), 20),
                    CUVIL_INVALID_ARGUMENT, {"'x'", "20 bytes", "[2, 3]", "needs 24"}));
  EXPECT_TRUE(Fails(cuvil_session_set_input(session_.get(), "x", kF32, 2, dims.data(), x.data(), 28),
                    CUVIL_INVALID_ARGUMENT, {"'x'", "28 bytes", "needs 24"}));
  // Dims whose byte size overflows.
  std::vector<int64_t> huge = {INT64_MAX / 2, 3};
  EXPECT_TRUE(Fails(cuvil_session_set_input(session_.get(), "x", kF32, 2, huge.data(), x.data(), 24),
                    CUVIL_INVALID_ARGUMENT, {"'x'", "overflow"}));
  // A non-empty buffer with a null pointer.
  EXPECT_TRUE(Fails(cuvil_session_set_input(session_.get(), "x", kF32, 2, dims.data(), nullptr, 24),
                    CUVIL_INVALID_ARGUMENT, {"'x'", "null"}));
  expect_valid_run();
}

TEST_F(BadRuntimeInput, MissingInput) {
  ModelPtr model = load(compile(add_model()));
  SessionPtr s = open_session(model.get());
  const std::vector<float> x = {1, 2, 3}, y = {1, 1, 1};
  ASSERT_TRUE(Ok(set_f32(s.get(), "x", {1, 3}, x)));
  EXPECT_TRUE(Fails(cuvil_session_run(s.get()), CUVIL_INVALID_ARGUMENT, {"'y'", "not set"}));
  cuvil_tensor_info info;
  const void* data = nullptr;
  size_t bytes = 0;
  EXPECT_TRUE(Fails(cuvil_session_get_output(s.get(), 0, &info, &data, &bytes), CUVIL_INVALID_ARGUMENT, {"no output"}));
  ASSERT_TRUE(Ok(set_f32(s.get(), "x", {1, 3}, x)));
  ASSERT_TRUE(Ok(set_f32(s.get(), "y", {1, 3}, y)));
  ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
  EXPECT_EQ(output<float>(s.get(), 0), (std::vector<float>{2, 3, 4}));
}

TEST_F(BadRuntimeInput, UnknownInputName) {
  std::vector<float> x(6, 1.f);
  EXPECT_TRUE(Fails(set_f32(session_.get(), "z", {2, 3}, x), CUVIL_INVALID_ARGUMENT, {"unknown input 'z'", "x"}));
  EXPECT_TRUE(Fails(set_f32(session_.get(), "", {2, 3}, x), CUVIL_INVALID_ARGUMENT, {"unknown input ''"}));
  expect_valid_run();
}

// Input data is borrowed only until the run returns (cuvil.h), so every run needs its inputs
// set again; a run without them fails cleanly instead of reading a buffer that may be gone.
TEST_F(BadRuntimeInput, InputsMustBeSetAgainForEachRun) {
  expect_valid_run();
  EXPECT_TRUE(Fails(cuvil_session_run(session_.get()), CUVIL_INVALID_ARGUMENT, {"'x'", "not set"}));
  // Also after a failed run.
  const std::vector<float> too_many(15, 1.f);  // borrowed until the run returns
  ASSERT_TRUE(Ok(set_f32(session_.get(), "x", {5, 3}, too_many)));
  EXPECT_TRUE(Fails(cuvil_session_run(session_.get()), CUVIL_SHAPE));
  EXPECT_TRUE(Fails(cuvil_session_run(session_.get()), CUVIL_INVALID_ARGUMENT, {"'x'", "not set"}));
  expect_valid_run();
}

TEST_F(BadRuntimeInput, RebindingAnInputReplacesIt) {
  ASSERT_TRUE(Ok(set_f32(session_.get(), "x", {1, 3}, {9, 9, 9})));
  expect_valid_run();  // binds x again with other dims and data
}

TEST_F(BadRuntimeInput, OutputBufferTooSmall) {
  expect_valid_run();
  std::vector<float> out(6, -7.f);
  EXPECT_TRUE(Fails(cuvil_session_copy_output(session_.get(), 0, out.data(), 23), CUVIL_INVALID_ARGUMENT,
                    {"'y'", "needs 24 bytes", "buffer has 23"}));
  EXPECT_EQ(out, std::vector<float>(6, -7.f));  // nothing written
  EXPECT_TRUE(Fails(cuvil_session_copy_output(session_.get(), 0, nullptr, 24), CUVIL_INVALID_ARGUMENT, {"null"}));
  EXPECT_TRUE(Fails(cuvil_session_copy_output(session_.get(), 1, out.data(), 24), CUVIL_INVALID_ARGUMENT,
                    {"output index 1"}));
  ASSERT_TRUE(Ok(cuvil_session_copy_output(session_.get(), 0, out.data(), 24)));
  EXPECT_EQ(out, (std::vector<float>{0, 2, 0, 4, 0, 6}));
}

TEST_F(BadRuntimeInput, DataDependentIndexOutOfRangeKeepsTheSessionUsable) {
  ModelPtr model = load(compile(gather_model()));
  SessionPtr s = open_session(model.get());
  std::vector<float> data = {0, 1, 10, 11, 20, 21, 30, 31, 40, 41};
  auto set_idx = [&](const std::vector<int64_t>& idx) {
    EXPECT_TRUE(Ok(set_f32(s.get(), "data", {5, 2}, data)));
    std::vector<int64_t> dims = {static_cast<int64_t>(idx.size())};
    return cuvil_session_set_input(s.get(), "idx", kI64, 1, dims.data(), idx.data(), idx.size() * 8);
  };
  for (const std::vector<int64_t>& bad : {std::vector<int64_t>{0, 5}, {-6}, {INT64_MAX}, {INT64_MIN, 1}}) {
    ASSERT_TRUE(Ok(set_idx(bad)));
    EXPECT_TRUE(Fails(cuvil_session_run(s.get()), CUVIL_RUNTIME, {"gather", "index", "out of range", "[-5, 4]"}));
    cuvil_tensor_info info;
    const void* out = nullptr;
    size_t bytes = 0;
    EXPECT_TRUE(Fails(cuvil_session_get_output(s.get(), 0, &info, &out, &bytes), CUVIL_INVALID_ARGUMENT));
    // The same session then runs a valid input (kept alive until the run returns).
    const std::vector<int64_t> good = {4, -1, 0};
    ASSERT_TRUE(Ok(set_idx(good)));
    ASSERT_TRUE(Ok(cuvil_session_run(s.get())));
    std::vector<int64_t> dims;
    EXPECT_EQ(output<float>(s.get(), 0, &dims), (std::vector<float>{40, 41, 40, 41, 0, 1}));
    EXPECT_EQ(dims, (std::vector<int64_t>{3, 2}));
  }
}

// ---- special floating-point values ----

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

const std::vector<float>& special_values() {
  static const std::vector<float> v = {
      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
      0.0f, -0.0f,
      from_bits(0x00000001), from_bits(0x80000001),  // smallest denormals
      from_bits(0x007fffff), from_bits(0x00400000),  // largest denormal, a middle one
      std::numeric_limits<float>::min(), -std::numeric_limits<float>::min(),
      std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
      1.0f, -1.0f, 0.5f, 2.0f, 3.0f, 1e-30f};
  return v;
}

enum class Op { Relu, Add, Mul, Div, Max, Min };
const char* op_name(Op op) {
  switch (op) {
    case Op::Relu: return "Relu";
    case Op::Add: return "Add";
    case Op::Mul: return "Mul";
    case Op::Div: return "Div";
    case Op::Max: return "Max";
    case Op::Min: return "Min";
  }
  return "?";
}

// The expected result under ONNX semantics: IEEE 754 binary32 arithmetic, round to nearest,
// denormals kept; Relu/Max/Min propagate NaN. The sign of a zero chosen by Relu(-0) and by
// Max/Min of (+0, -0) is left open by ONNX (its numpy reference returns the first operand,
// IEEE 754-2019 maximum prefers +0); `either_zero_sign` marks those cases. Inputs come
// through volatile so that nothing is folded at compile time.
float expected(Op op, volatile float a, volatile float b, bool* either_zero_sign) {
  *either_zero_sign = false;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  switch (op) {
    case Op::Relu:
      if (std::isnan(a)) return nan;
      if (a == 0.f) *either_zero_sign = true;
      return a > 0.f ? a : 0.f;
    case Op::Add: return a + b;
    case Op::Mul: return a * b;
    case Op::Div: return a / b;
    case Op::Max:
      if (std::isnan(a) || std::isnan(b)) return nan;
      if (a == 0.f && b == 0.f) *either_zero_sign = true;
      return a > b ? a : b;
    case Op::Min:
      if (std::isnan(a) || std::isnan(b)) return nan;
      if (a == 0.f && b == 0.f) *either_zero_sign = true;
      return a < b ? a : b;
  }
  return nan;
}

// Runs the special-values model over every pair of special values; returns the six outputs.
std::vector<std::vector<float>> run_special(cuvil_model* model, std::vector<float>* a_out,
                                            std::vector<float>* b_out) {
  const std::vector<float>& v = special_values();
  std::vector<float> a, b;
  for (float x : v)
    for (float y : v) {
      a.push_back(x);
      b.push_back(y);
    }
  SessionPtr s = open_session(model);
  const int64_t n = static_cast<int64_t>(a.size());
  EXPECT_TRUE(Ok(set_f32(s.get(), "a", {n}, a)));
  EXPECT_TRUE(Ok(set_f32(s.get(), "b", {n}, b)));
  EXPECT_TRUE(Ok(cuvil_session_run(s.get())));
  std::vector<std::vector<float>> outs;
  for (size_t i = 0; i < 6; ++i) outs.push_back(output<float>(s.get(), i));
  *a_out = a;
  *b_out = b;
  return outs;
}

void check_special(const std::vector<std::vector<float>>& outs, const std::vector<float>& a,
                   const std::vector<float>& b) {
  const Op ops[] = {Op::Relu, Op::Add, Op::Mul, Op::Div, Op::Max, Op::Min};
  ASSERT_EQ(outs.size(), 6u);
  int failures = 0;
  for (size_t o = 0; o < 6; ++o) {
    ASSERT_EQ(outs[o].size(), a.size());
    int reported = 0;  // per op, so that one broken op does not hide another
    for (size_t i = 0; i < a.size(); ++i) {
      bool either_sign = false;
      float want = expected(ops[o], a[i], b[i], &either_sign);
      float got = outs[o][i];
      bool ok = std::isnan(want) ? std::isnan(got)  // NaN payloads are not specified
                : either_sign    ? got == 0.f
                                 : bits_of(got) == bits_of(want);
      if (!ok) ++failures;
      if (!ok && ++reported <= 4)
        ADD_FAILURE() << op_name(ops[o]) << "(" << a[i] << " [0x" << std::hex << bits_of(a[i]) << "], " << b[i]
                      << " [0x" << bits_of(b[i]) << "]) = " << got << " [0x" << bits_of(got) << "], expected "
                      << want << " [0x" << bits_of(want) << "]" << std::dec;
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_F(BadRuntimeInput, SpecialFloatValuesFollowOnnxSemantics) {
  for (bool fuse : {false, true}) {
    SCOPED_TRACE(fuse ? "tile kernels (fused)" : "whole-tensor kernels (unfused)");
    ModelPtr model = load(compile(special_values_model(), {}, fuse));
    ASSERT_TRUE(model);
    std::vector<float> a, b;
    check_special(run_special(model.get(), &a, &b), a, b);
  }
}

TEST_F(BadRuntimeInput, FusedAndUnfusedKernelsAgreeBitwise) {
  ModelPtr fused = load(compile(special_values_model(), {}, true));
  ModelPtr unfused = load(compile(special_values_model(), {}, false));
  std::vector<float> a, b;
  auto f = run_special(fused.get(), &a, &b);
  auto u = run_special(unfused.get(), &a, &b);
  ASSERT_EQ(f.size(), u.size());
  const char* names[] = {"Relu", "Add", "Mul", "Div", "Max", "Min"};
  int failures = 0;
  for (size_t o = 0; o < f.size(); ++o)
    for (size_t i = 0, reported = 0; i < f[o].size(); ++i) {
      bool same = std::isnan(f[o][i]) ? std::isnan(u[o][i]) : bits_of(f[o][i]) == bits_of(u[o][i]);
      if (!same) ++failures;
      if (!same && ++reported <= 4)
        ADD_FAILURE() << names[o] << ": " << "output " << o << " (" << a[i] << ", " << b[i] << "): fused 0x" << std::hex
                      << bits_of(f[o][i]) << ", unfused 0x" << bits_of(u[o][i]) << std::dec;
    }
  EXPECT_EQ(failures, 0);
}

// The parts of the floating-point environment a run must leave alone: rounding mode, the
// sticky exception flags and (x86) the SSE control/status register with FTZ/DAZ.
struct FloatState {
  int round = 0;
  int flags = 0;
  unsigned mxcsr = 0;
  bool operator==(const FloatState& o) const { return round == o.round && flags == o.flags && mxcsr == o.mxcsr; }
};
FloatState float_state() {
  FloatState s;
  s.round = std::fegetround();
  s.flags = std::fetestexcept(FE_ALL_EXCEPT);
#if defined(__x86_64__) || defined(__i386__)
  s.mxcsr = _mm_getcsr();
#endif
  return s;
}
std::ostream& operator<<(std::ostream& os, const FloatState& s) {
  return os << "{round " << s.round << ", flags 0x" << std::hex << s.flags << ", mxcsr 0x" << s.mxcsr << std::dec
            << "}";
}

// Restores the test thread's environment however the test ends.
class SavedFloatEnv {
 public:
  SavedFloatEnv() { std::fegetenv(&env_); }
  ~SavedFloatEnv() { std::fesetenv(&env_); }

 private:
  std::fenv_t env_;
};

TEST_F(BadRuntimeInput, CallerFloatEnvironmentIsUnchanged) {
  SavedFloatEnv restore;
  ModelPtr models[] = {load(compile(special_values_model(), {}, true)), load(compile(special_values_model(), {}, false))};
  // Reference results in the default environment.
  std::vector<float> a, b;
  std::vector<std::vector<float>> ref[2];
  for (int k = 0; k < 2; ++k) ref[k] = run_special(models[k].get(), &a, &b);

  // A caller with another rounding mode and no flags raised: the run divides by zero,
  // computes Inf - Inf and overflows, yet the caller sees no flag, the same rounding mode and
  // results that do not depend on its rounding mode.
  for (int mode : {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO}) {
    SCOPED_TRACE("rounding mode " + std::to_string(mode));
    ASSERT_EQ(std::fesetround(mode), 0);
    std::feclearexcept(FE_ALL_EXCEPT);
    for (int k = 0; k < 2; ++k) {
      FloatState before = float_state();
      auto got = run_special(models[k].get(), &a, &b);
      FloatState after = float_state();
      EXPECT_EQ(before, after);
      for (size_t o = 0; o < got.size(); ++o)
        for (size_t i = 0; i < got[o].size(); ++i)
          if (!(std::isnan(got[o][i]) && std::isnan(ref[k][o][i])) && bits_of(got[o][i]) != bits_of(ref[k][o][i])) {
            ADD_FAILURE() << "output " << o << " element " << i << " depends on the caller's rounding mode";
            break;
          }
    }
    std::fesetround(FE_TONEAREST);
  }

  // Flags the caller has raised stay raised.
  std::feclearexcept(FE_ALL_EXCEPT);
  std::feraiseexcept(FE_INEXACT);
  FloatState before = float_state();
  run_special(models[0].get(), &a, &b);
  EXPECT_EQ(before, float_state());
  std::feclearexcept(FE_ALL_EXCEPT);
}

#if defined(__x86_64__) || defined(__i386__)
// A caller that runs with flush-to-zero / denormals-are-zero (common in audio and game code):
// the session still keeps denormals (ONNX semantics), and the caller's MXCSR is unchanged.
TEST_F(BadRuntimeInput, CallerFlushToZeroModeDoesNotLeakIn) {
  SavedFloatEnv restore;
  const unsigned ftz_daz = 0x8040;
  for (bool fuse : {true, false}) {
    SCOPED_TRACE(fuse ? "fused" : "unfused");
    ModelPtr model = load(compile(special_values_model(), {}, fuse));
    std::vector<float> a, b;
    const auto ref = run_special(model.get(), &a, &b);  // in the default environment
    _mm_setcsr(_mm_getcsr() | ftz_daz);  // before the session (and its threads) exist
    std::feclearexcept(FE_ALL_EXCEPT);
    FloatState before = float_state();
    auto outs = run_special(model.get(), &a, &b);
    FloatState after = float_state();
    EXPECT_EQ(before, after);
    _mm_setcsr(_mm_getcsr() & ~ftz_daz);
    // Denormal results are kept: the smallest denormal plus zero, and FLT_MIN * 0.5.
    int denormals = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (bits_of(a[i]) == 0x00000001 && bits_of(b[i]) == 0 && bits_of(outs[1][i]) == 0x00000001) ++denormals;
      if (a[i] == std::numeric_limits<float>::min() && b[i] == 0.5f && bits_of(outs[2][i]) == 0x00400000) ++denormals;
    }
    EXPECT_EQ(denormals, 2);
    // And every result equals the one computed in the default environment.
    for (size_t o = 0; o < outs.size(); ++o)
      for (size_t i = 0; i < outs[o].size(); ++i)
        if (!(std::isnan(outs[o][i]) && std::isnan(ref[o][i])) && bits_of(outs[o][i]) != bits_of(ref[o][i])) {
          ADD_FAILURE() << "output " << o << " (" << a[i] << ", " << b[i] << ") = " << outs[o][i]
                        << " with flush-to-zero, " << ref[o][i] << " without";
          break;
        }
  }
}
#endif

// ---- null pointers and bad arguments to every C API function ----

TEST_F(BadRuntimeInput, NullArgumentsToEveryApiFunction) {
  cuvil_model* m = nullptr;
  cuvil_session* s = nullptr;
  cuvil_tensor_info info;
  const void* data = nullptr;
  size_t bytes = 0;
  std::vector<uint8_t> package = compile(relu_model());
  const int64_t dims[2] = {1, 3};
  const float x[3] = {1, 2, 3};

  // Status helpers accept NULL (= success).
  EXPECT_EQ(cuvil_status_code_of(nullptr), CUVIL_OK);
  EXPECT_STREQ(cuvil_status_message(nullptr), "");
  cuvil_status_free(nullptr);
  // dtype helpers accept any number.
  EXPECT_STREQ(cuvil_dtype_name(1), "f32");
  ASSERT_NE(cuvil_dtype_name(-1), nullptr);
  ASSERT_NE(cuvil_dtype_name(9999), nullptr);
  EXPECT_EQ(cuvil_dtype_size(-1), 0u);
  EXPECT_EQ(cuvil_dtype_size(9999), 0u);

  // Loading.
  EXPECT_TRUE(Fails(cuvil_model_load_file(nullptr, &m), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_model_load_file("/nonexistent/x.cuvir", nullptr), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_model_load_memory(nullptr, 10, &m), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_model_load_memory(package.data(), package.size(), nullptr), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_model_load_memory(nullptr, 0, &m), CUVIL_INVALID_PACKAGE));
  EXPECT_EQ(m, nullptr);
  EXPECT_TRUE(Fails(cuvil_model_load_file("/nonexistent/x.cuvir", &m), CUVIL_IO, {"/nonexistent/x.cuvir"}));
  cuvil_model_release(nullptr);

  // Model queries.
  EXPECT_EQ(cuvil_model_input_count(nullptr), 0u);
  EXPECT_EQ(cuvil_model_output_count(nullptr), 0u);
  EXPECT_TRUE(Fails(cuvil_model_input_info(nullptr, 0, &info), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_model_input_info(model_.get(), 0, nullptr), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_model_input_info(model_.get(), 1, &info), CUVIL_INVALID_ARGUMENT, {"input index 1"}));
  EXPECT_TRUE(Fails(cuvil_model_output_info(nullptr, 0, &info), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_model_output_info(model_.get(), 0, nullptr), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_model_output_info(model_.get(), SIZE_MAX, &info), CUVIL_INVALID_ARGUMENT));

  // Sessions.
  cuvil_session_options_init(nullptr);
  cuvil_session_options opts;
  cuvil_session_options_init(&opts);
  EXPECT_TRUE(Fails(cuvil_session_create(nullptr, &opts, &s), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_session_create(model_.get(), &opts, nullptr), CUVIL_INVALID_ARGUMENT));
  opts.threads = -1;
  EXPECT_TRUE(Fails(cuvil_session_create(model_.get(), &opts, &s), CUVIL_INVALID_ARGUMENT, {"threads"}));
  EXPECT_EQ(s, nullptr);
  cuvil_session_options_init(&opts);
  opts.deadline_ms = -5;
  EXPECT_TRUE(Fails(cuvil_session_create(model_.get(), &opts, &s), CUVIL_INVALID_ARGUMENT, {"deadline_ms"}));
  cuvil_session_options_init(&opts);
  EXPECT_EQ(opts.device, CUVIL_DEVICE_CPU);
  opts.device = 7;
  EXPECT_TRUE(Fails(cuvil_session_create(model_.get(), &opts, &s), CUVIL_INVALID_ARGUMENT, {"device = 7"}));
  EXPECT_EQ(cuvil_session_device(nullptr), CUVIL_DEVICE_CPU);
  EXPECT_STREQ(cuvil_session_device_note(nullptr), "");
  ASSERT_TRUE(Ok(cuvil_session_create(model_.get(), nullptr, &s)));  // NULL options = defaults
  EXPECT_EQ(cuvil_session_device(s), CUVIL_DEVICE_CPU);
  SessionPtr owned(s);
  cuvil_session_release(nullptr);

  EXPECT_TRUE(Fails(cuvil_session_set_input(nullptr, "x", kF32, 2, dims, x, 12), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_session_set_input(s, nullptr, kF32, 2, dims, x, 12), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_session_set_input(s, "x", kF32, 2, nullptr, x, 12), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_session_set_input(s, "x", kF32, 2, dims, nullptr, 12), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_session_set_input(s, "x", kF32, -1, dims, x, 12), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_session_run(nullptr), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_session_run(s), CUVIL_INVALID_ARGUMENT, {"'x'", "not set"}));

  ASSERT_TRUE(Ok(cuvil_session_set_input(s, "x", kF32, 2, dims, x, 12)));
  ASSERT_TRUE(Ok(cuvil_session_run(s)));
  EXPECT_TRUE(Fails(cuvil_session_get_output(nullptr, 0, &info, &data, &bytes), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_session_get_output(s, 0, nullptr, &data, &bytes), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_session_get_output(s, 0, &info, nullptr, &bytes), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_session_get_output(s, 0, &info, &data, nullptr), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_session_get_output(s, 7, &info, &data, &bytes), CUVIL_INVALID_ARGUMENT, {"output index 7"}));
  float out[3];
  EXPECT_TRUE(Fails(cuvil_session_copy_output(nullptr, 0, out, sizeof out), CUVIL_INVALID_ARGUMENT));
  EXPECT_TRUE(Fails(cuvil_session_copy_output(s, 0, nullptr, sizeof out), CUVIL_INVALID_ARGUMENT));
  ASSERT_TRUE(Ok(cuvil_session_copy_output(s, 0, out, sizeof out)));
  EXPECT_EQ(out[2], 3.f);
}

}  // namespace
}  // namespace cuvil
