// One loaded model run from many threads at once (RELIABILITY.md "Process faults"): every
// thread has its own session on the shared cuvil_model and runs a mix of batch sizes; every
// result must equal, bit for bit, the result of a sequential run of the same input. The model
// is a small MLP (MatMul/Add/Relu as whole-tensor kernels) ending in a fused elementwise chain
// (a tile kernel), so both interpreters and the per-session thread pools run concurrently.
// Meant to be run under ThreadSanitizer too (-DCUVIL_SANITIZE=thread).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "compile_in_process.h"
#include "cuvil.h"
#include "onnx_builder.h"

namespace cuvil {
namespace {

using Tp = onnx::TensorProto;
// The hidden layer is wide enough (batch x 2048 floats) that its fused Add+Relu kernel spans
// several tiles and the MatMuls split their work, so each session's own thread pool is busy
// while the other sessions run.
constexpr int kIn = 64, kHidden = 2048, kOut = 4, kMaxBatch = 4;

std::vector<float> pattern(size_t n, float seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(seed + 0.37f * static_cast<float>(i)) * 0.5f;
  return v;
}

// x: f32[batch, 64] -> MatMul(w1) -> Add(b1) -> Relu -> MatMul(w2) -> Add(b2) -> Mul(scale)
// -> Tanh -> Relu -> y: f32[batch, 4]; the hidden activations are a second output.
onnx::ModelProto mlp_model() {
  onnx::ModelProto m = test::make_model();
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", kIn});
  *g->add_initializer() = test::make_float_tensor("w1", {kIn, kHidden}, pattern(kIn * kHidden, 1.f));
  *g->add_initializer() = test::make_float_tensor("b1", {kHidden}, pattern(kHidden, 2.f));
  *g->add_initializer() = test::make_float_tensor("w2", {kHidden, kOut}, pattern(kHidden * kOut, 3.f));
  *g->add_initializer() = test::make_float_tensor("b2", {kOut}, pattern(kOut, 4.f));
  *g->add_initializer() = test::make_float_tensor("scale", {kOut}, {1.5f, -2.f, 0.25f, 3.f});
  test::add_node(g, "MatMul", {"x", "w1"}, {"h0"}, "mm1");
  test::add_node(g, "Add", {"h0", "b1"}, {"h1"}, "add1");
  test::add_node(g, "Relu", {"h1"}, {"hidden"}, "relu1");
  test::add_node(g, "MatMul", {"hidden", "w2"}, {"o0"}, "mm2");
  // The fused chain: add, multiply, tanh, relu.
  test::add_node(g, "Add", {"o0", "b2"}, {"o1"}, "add2");
  test::add_node(g, "Mul", {"o1", "scale"}, {"o2"}, "mul2");
  test::add_node(g, "Tanh", {"o2"}, {"o3"}, "tanh2");
  test::add_node(g, "Relu", {"o3"}, {"y"}, "relu2");
  test::add_output(g, "y", Tp::FLOAT, {"batch", kOut});
  test::add_output(g, "hidden", Tp::FLOAT, {"batch", kHidden});
  return m;
}

std::vector<uint8_t> compile(const onnx::ModelProto& m, const std::vector<std::string>& dims) {
  return test::compile_package(m, dims, true, "mlp.onnx");
}

// Text of a failed status (and frees it); "" for success.
std::string error_of(cuvil_status st) {
  if (!st) return "";
  std::string msg = std::to_string(cuvil_status_code_of(st)) + ": " + cuvil_status_message(st);
  cuvil_status_free(st);
  return msg.empty() ? "error" : msg;
}

struct Result {
  std::vector<float> y, hidden;
};

// Runs one input through `s`; returns "" or an error.
std::string run_once(cuvil_session* s, int64_t batch, Result* out) {
  std::vector<float> x = pattern(static_cast<size_t>(batch) * kIn, 10.f * static_cast<float>(batch));
  const int64_t dims[2] = {batch, kIn};
  if (auto e = error_of(cuvil_session_set_input(s, "x", 1, 2, dims, x.data(), x.size() * sizeof(float))); !e.empty())
    return "set_input: " + e;
  if (auto e = error_of(cuvil_session_run(s)); !e.empty()) return "run: " + e;
  out->y.assign(static_cast<size_t>(batch) * kOut, 0.f);
  out->hidden.assign(static_cast<size_t>(batch) * kHidden, 0.f);
  if (auto e = error_of(cuvil_session_copy_output(s, 0, out->y.data(), out->y.size() * sizeof(float))); !e.empty())
    return "copy_output 0: " + e;
  if (auto e = error_of(cuvil_session_copy_output(s, 1, out->hidden.data(), out->hidden.size() * sizeof(float)));
      !e.empty())
    return "copy_output 1: " + e;
  return "";
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

class RuntimeConcurrency : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<uint8_t> package = compile(mlp_model(), {"batch=1:" + std::to_string(kMaxBatch)});
    ASSERT_EQ(error_of(cuvil_model_load_memory(package.data(), package.size(), &model_)), "");
  }
  void TearDown() override { cuvil_model_release(model_); }

  cuvil_session* new_session(int threads) {
    cuvil_session_options o;
    cuvil_session_options_init(&o);
    o.threads = threads;
    cuvil_session* s = nullptr;
    EXPECT_EQ(error_of(cuvil_session_create(model_, &o, &s)), "");
    return s;
  }

  // Sequential reference results for batch 1..kMaxBatch.
  std::vector<Result> reference(int threads) {
    std::vector<Result> ref(kMaxBatch + 1);
    cuvil_session* s = new_session(threads);
    for (int64_t b = 1; b <= kMaxBatch; ++b) EXPECT_EQ(run_once(s, b, &ref[static_cast<size_t>(b)]), "");
    cuvil_session_release(s);
    return ref;
  }

  cuvil_model* model_ = nullptr;
};

TEST_F(RuntimeConcurrency, ThreadsWithOwnSessionsMatchSequentialRunsBitwise) {
  constexpr int kThreads = 4, kIterations = 50, kPoolThreads = 2;
  const std::vector<Result> ref = reference(kPoolThreads);
  // Sanity: the reference is not trivially zero.
  double sum = 0;
  for (float v : ref[kMaxBatch].y) sum += std::fabs(v);
  EXPECT_GT(sum, 0.0);

  std::atomic<int> mismatches{0};
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      cuvil_session* s = new_session(kPoolThreads);  // sessions are created concurrently too
      if (!s) {
        errors[static_cast<size_t>(t)] = "no session";
        return;
      }
      for (int i = 0; i < kIterations; ++i) {
        const int64_t batch = 1 + (t * 3 + i * 5 + i / 7) % kMaxBatch;
        Result r;
        std::string e = run_once(s, batch, &r);
        if (!e.empty()) {
          errors[static_cast<size_t>(t)] = "iteration " + std::to_string(i) + ": " + e;
          break;
        }
        const Result& want = ref[static_cast<size_t>(batch)];
        if (!same_bits(r.y, want.y) || !same_bits(r.hidden, want.hidden)) ++mismatches;
      }
      cuvil_session_release(s);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[static_cast<size_t>(t)], "") << "thread " << t;
  EXPECT_EQ(mismatches.load(), 0);
}

// The same, with failing runs mixed in: a thread whose run fails (batch outside the range)
// must not disturb the others, and its own session must keep working.
TEST_F(RuntimeConcurrency, FailingRunsDoNotDisturbOtherSessions) {
  constexpr int kThreads = 4, kIterations = 30;
  const std::vector<Result> ref = reference(1);
  std::atomic<int> mismatches{0}, wrong_failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      cuvil_session* s = new_session(1);
      if (!s) return;
      for (int i = 0; i < kIterations; ++i) {
        const int64_t batch = (t + i) % (kMaxBatch + 2);  // 0 and kMaxBatch + 1 are out of range
        Result r;
        std::string e = run_once(s, batch, &r);
        if (batch < 1 || batch > kMaxBatch) {
          if (e.rfind("run: 5:", 0) != 0) ++wrong_failures;  // CUVIL_SHAPE
          continue;
        }
        const Result& want = ref[static_cast<size_t>(batch)];
        if (!e.empty() || !same_bits(r.y, want.y) || !same_bits(r.hidden, want.hidden)) ++mismatches;
      }
      cuvil_session_release(s);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(wrong_failures.load(), 0);
}

// Results do not depend on the session's thread count.
TEST_F(RuntimeConcurrency, ThreadCountDoesNotChangeResults) {
  const std::vector<Result> one = reference(1);
  for (int threads : {2, 3, 4}) {
    const std::vector<Result> many = reference(threads);
    for (int b = 1; b <= kMaxBatch; ++b) {
      EXPECT_TRUE(same_bits(one[static_cast<size_t>(b)].y, many[static_cast<size_t>(b)].y))
          << "batch " << b << ", " << threads << " threads";
      EXPECT_TRUE(same_bits(one[static_cast<size_t>(b)].hidden, many[static_cast<size_t>(b)].hidden))
          << "batch " << b << ", " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace cuvil
