// Runtime overheads (issue 8): what a run does besides its kernels.
// - RuntimeDispatch: every CallOp's kernel is found when the session is made, attribute
//   lookups are remembered per node, and message prefixes are spelled once, so that a steady
//   run looks nothing up by name (runtime/testing_hooks.h counts the lookups) and allocates
//   nothing of its own (counted by replacing operator new in this binary, on the running
//   thread only) on a program whose kernels allocate nothing either.
// - RuntimeRunStats: cuvil_session_get_run_stats splits a run into binding, dispatch and
//   kernels, and reports nothing timed while disabled.
// The worker pool's own tests (RuntimeThreads) are in thread_pool_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "runtime/testing_hooks.h"
#include "runtime_harness.h"

// GCC sees free() on a pointer from operator new and warns; here operator new is malloc.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
thread_local bool t_counting = false;
std::atomic<int64_t> g_allocations{0};
}  // namespace

// Counting every allocation the running thread makes while t_counting is set. Replacing the
// global operator new is the one way to see allocations made anywhere in the library; the
// other threads and the rest of the time it is a plain malloc.
void* operator new(std::size_t size) {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, std::align_val_t align) {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (size + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
// Every other replaceable form too, so that no allocation comes from the toolchain's operator
// new and goes back through this free() (AddressSanitizer reports such a pair as a mismatch:
// std::stable_sort's buffer is allocated by the nothrow form).
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size ? size : 1);
}
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t a = static_cast<std::size_t>(align);
  return std::aligned_alloc(a, (size + a - 1) / a * a);
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new[](std::size_t size, std::align_val_t align) { return operator new(size, align); }
void* operator new[](std::size_t size, const std::nothrow_t& t) noexcept { return operator new(size, t); }
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t& t) noexcept {
  return operator new(size, align, t);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace cuvil {
namespace {

using namespace test;  // NOLINT: the harness
namespace hooks = rt::testing;

// x: f32[n] -> LeakyRelu(alpha 0.5) -> Relu -> LeakyRelu(alpha 0.25) -> Neg -> y. Node names
// longer than a short-string buffer, so that a message prefix spelled per run would allocate.
onnx::ModelProto pointwise_chain_model() {
  onnx::ModelProto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "x", Tp::FLOAT, {"n"});
  set_attr_float(add_node(g, "LeakyRelu", {"x"}, {"t0"}, "first_leaky_relu_node"), "alpha", 0.5f);
  add_node(g, "Relu", {"t0"}, {"t1"}, "the_relu_in_the_middle");
  set_attr_float(add_node(g, "LeakyRelu", {"t1"}, {"t2"}, "second_leaky_relu_node"), "alpha", 0.25f);
  add_node(g, "Neg", {"t2"}, {"y"}, "negation_at_the_end_of_it");
  add_output(g, "y", Tp::FLOAT, {"n"});
  return m;
}

constexpr int kChainNodes = 4;

void run_chain(cuvil_session* s, const std::vector<float>& x) {
  ASSERT_TRUE(Ok(set_f32(s, "x", {static_cast<int64_t>(x.size())}, x)));
  ASSERT_TRUE(Ok(cuvil_session_run(s)));
}

void expect_chain_output(cuvil_session* s, const std::vector<float>& x) {
  std::vector<float> y = output<float>(s, 0);
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = x[i] > 0 ? -x[i] : 0.f;  // relu(leaky(x)) = max(x, 0); leaky keeps it
    ASSERT_EQ(y[i], want) << "element " << i;
  }
}

// ---- RuntimeDispatch ----

TEST(RuntimeDispatch, KernelsAreFoundWhenTheSessionIsMadeNotPerRun) {
  ModelPtr model = load(compile(pointwise_chain_model(), {}, /*fuse=*/false));
  ASSERT_TRUE(model);
  const int64_t before_session = hooks::name_lookup_count();
  SessionPtr s = open_session(model.get(), 1);
  ASSERT_TRUE(s);
  // One kernel lookup per node, at creation.
  EXPECT_EQ(hooks::name_lookup_count() - before_session, kChainNodes);
  const std::vector<float> x = {-2.f, -0.5f, 0.f, 0.25f, 3.f};
  run_chain(s.get(), x);  // the first run fills each node's attribute cache
  const int64_t after_first_run = hooks::name_lookup_count();
  for (int i = 0; i < 5; ++i) run_chain(s.get(), x);
  EXPECT_EQ(hooks::name_lookup_count(), after_first_run) << "a steady run looked something up by name";
  expect_chain_output(s.get(), x);
}

TEST(RuntimeDispatch, SteadyRunAllocatesNothing) {
  ModelPtr model = load(compile(pointwise_chain_model(), {}, /*fuse=*/false));
  ASSERT_TRUE(model);
  SessionPtr s = open_session(model.get(), 1);
  ASSERT_TRUE(s);
  const std::vector<float> x = {-2.f, -0.5f, 0.f, 0.25f, 3.f, 7.f};
  for (int i = 0; i < 2; ++i) run_chain(s.get(), x);  // storage sized by the first runs
  ASSERT_TRUE(Ok(set_f32(s.get(), "x", {static_cast<int64_t>(x.size())}, x)));
  g_allocations.store(0);
  t_counting = true;
  cuvil_status st = cuvil_session_run(s.get());
  t_counting = false;
  ASSERT_TRUE(Ok(st));
  EXPECT_EQ(g_allocations.load(), 0) << "allocations in a steady run of " << kChainNodes << " op calls";
  expect_chain_output(s.get(), x);
}

// ---- RuntimeRunStats ----

TEST(RuntimeRunStats, SplitsTheRunIntoBindingDispatchAndKernels) {
  ModelPtr model = load(compile(pointwise_chain_model(), {}, /*fuse=*/false));
  ASSERT_TRUE(model);
  SessionPtr s = open_session(model.get(), 2);
  ASSERT_TRUE(s);
  const std::vector<float> x(4096, 1.5f);
  cuvil_run_stats stats;
  run_chain(s.get(), x);
  ASSERT_TRUE(Ok(cuvil_session_get_run_stats(s.get(), &stats)));
  EXPECT_EQ(stats.total_ns, 0) << "timed while disabled";
  EXPECT_EQ(stats.kernel_ns, 0);
  EXPECT_EQ(stats.kernel_calls, kChainNodes);  // counts are kept either way
  ASSERT_TRUE(Ok(cuvil_session_enable_run_stats(s.get(), 1)));
  run_chain(s.get(), x);
  ASSERT_TRUE(Ok(cuvil_session_get_run_stats(s.get(), &stats)));
  EXPECT_EQ(stats.kernel_calls, kChainNodes);
  EXPECT_GT(stats.instructions, stats.kernel_calls);  // and End
  EXPECT_GT(stats.total_ns, 0);
  EXPECT_GT(stats.kernel_ns, 0);
  EXPECT_GE(stats.bind_ns, 0);
  EXPECT_GE(stats.dispatch_ns, 0);
  EXPECT_EQ(stats.bind_ns + stats.kernel_ns + stats.dispatch_ns, stats.total_ns);
  expect_chain_output(s.get(), x);
  ASSERT_TRUE(Ok(cuvil_session_enable_run_stats(s.get(), 0)));
  run_chain(s.get(), x);
  ASSERT_TRUE(Ok(cuvil_session_get_run_stats(s.get(), &stats)));
  EXPECT_EQ(stats.total_ns, 0);
}

TEST(RuntimeRunStats, NullArgumentsAreRefused) {
  cuvil_run_stats stats;
  EXPECT_TRUE(Fails(cuvil_session_get_run_stats(nullptr, &stats), CUVIL_INVALID_ARGUMENT,
                    {"cuvil_session_get_run_stats: null session or stats"}));
  EXPECT_TRUE(Fails(cuvil_session_enable_run_stats(nullptr, 1), CUVIL_INVALID_ARGUMENT,
                    {"cuvil_session_enable_run_stats: null session"}));
  ModelPtr model = load(compile(pointwise_chain_model(), {}, /*fuse=*/false));
  ASSERT_TRUE(model);
  SessionPtr s = open_session(model.get(), 1);
  ASSERT_TRUE(s);
  EXPECT_TRUE(Fails(cuvil_session_get_run_stats(s.get(), nullptr), CUVIL_INVALID_ARGUMENT,
                    {"null session or stats"}));
}

}  // namespace
}  // namespace cuvil
