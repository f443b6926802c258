// Run control (docs/security.md, "Runtime: threads, deadlines, cancellation"):
// - RuntimeThreads: a worker thread the OS refuses is a status from cuvil_session_create,
//   quickly, with no thread left behind, and the next session works; threads above
//   CUVIL_MAX_THREADS are refused. Tests run as root, where RLIMIT_NPROC does not bite, so the
//   refusal is injected (runtime/testing_hooks.h).
// - RuntimeDeadline: the deadline is checked before every instruction and before every chunk
//   of a kernel's work. An injected clock that advances one millisecond per reading turns
//   "how late" into "how many checks": the run must stop at the first check past the
//   deadline (one per worker thread at most), and a straight-line program must stop long
//   before its end.
// - RuntimeCancel: cuvil_session_cancel from another thread stops a run that would never end;
//   the session stays usable; a cancel with no run in progress is dropped.
// Meant to be run under ThreadSanitizer too (-DCUVIL_SANITIZE=thread).
#include <gtest/gtest.h>
#include <dirent.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/testing_hooks.h"
#include "runtime_harness.h"

namespace cuvil {
namespace {

using namespace test;  // NOLINT: the harness
using Clock = std::chrono::steady_clock;
namespace hooks = rt::testing;

// x: f32[n] -> `ops` Adds of 1 -> y (so y = x + ops, exactly, for small integer x). Unfused,
// every Add is its own CallOp (a whole-tensor kernel); fused, the chain is one tile kernel.
onnx::ModelProto add_chain_model(int ops) {
  onnx::ModelProto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "x", Tp::FLOAT, {"n"});
  *g->add_initializer() = make_float_tensor("one", {}, {1.f});
  std::string prev = "x";
  for (int i = 0; i < ops; ++i) {
    const std::string out = i + 1 == ops ? "y" : "t" + std::to_string(i);
    add_node(g, "Add", {prev, "one"}, {out}, "add" + std::to_string(i));
    prev = out;
  }
  add_output(g, "y", Tp::FLOAT, {"n"});
  return m;
}

SessionPtr session_with(cuvil_model* model, int threads, int64_t deadline_ms) {
  cuvil_session_options o;
  cuvil_session_options_init(&o);
  o.threads = threads;
  o.deadline_ms = deadline_ms;
  cuvil_session* s = nullptr;
  EXPECT_TRUE(Ok(cuvil_session_create(model, &o, &s)));
  return SessionPtr(s);
}

std::vector<float> iota_floats(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000);
  return v;
}

// Runs the add chain on `x`; "" or the failed status's code and message.
std::string run_chain(cuvil_session* s, const std::vector<float>& x) {
  cuvil_status st = set_f32(s, "x", {static_cast<int64_t>(x.size())}, x);
  if (!st) st = cuvil_session_run(s);
  if (!st) return "";
  std::string msg = std::to_string(cuvil_status_code_of(st)) + ": " + cuvil_status_message(st);
  cuvil_status_free(st);
  return msg;
}

void expect_chain_output(cuvil_session* s, const std::vector<float>& x, int ops) {
  std::vector<float> y = output<float>(s, 0);
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i] + static_cast<float>(ops)) << "element " << i;
}

// ---- RuntimeThreads ----

// Threads of this process now (/proc/self/task).
int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

// A joined thread can linger in /proc for a moment after pthread_join returns.
int settled_thread_count(int want) {
  int n = thread_count();
  for (int i = 0; i < 100 && n != want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = thread_count();
  }
  return n;
}

TEST(RuntimeThreads, ThreadStartFailureIsAStatusNotAHang) {
  ModelPtr model = load(compile(add_chain_model(3)));
  ASSERT_TRUE(model);
  const std::string eagain = std::strerror(EAGAIN);
  for (int nth : {1, 3, 7}) {
    SCOPED_TRACE("the start of worker thread " + std::to_string(nth) + " fails");
    const int before = thread_count();
    hooks::inject_thread_start_failure(nth, EAGAIN);
    cuvil_session_options o;
    cuvil_session_options_init(&o);
    o.threads = 8;
    cuvil_session* s = reinterpret_cast<cuvil_session*>(&o);  // must come back NULL
    cuvil_status st = nullptr;
    // On its own thread, so that a hang (the old behaviour) fails here instead of stalling.
    std::atomic<bool> done{false};
    const auto t0 = Clock::now();
    std::thread creator([&] {
      st = cuvil_session_create(model.get(), &o, &s);
      done = true;
    });
    while (!done && Clock::now() - t0 < std::chrono::seconds(30))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!done) {
      std::fprintf(stderr, "cuvil_session_create hangs when a worker thread cannot start\n");
      std::_Exit(1);
    }
    creator.join();
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
    EXPECT_TRUE(Fails(st, CUVIL_OUT_OF_MEMORY,
                      {"cannot start worker thread " + std::to_string(nth) + " of 7", "threads = 8", eagain,
                       "errno " + std::to_string(EAGAIN)}));
    EXPECT_EQ(s, nullptr);
    // Nothing half-built: the workers started before the failure are gone again.
    EXPECT_EQ(settled_thread_count(before), before);
  }
  // The fault was one-shot: a later session starts all its threads and computes.
  const int before = thread_count();
  {
    SessionPtr s = session_with(model.get(), 8, 0);
    ASSERT_TRUE(s);
    EXPECT_EQ(thread_count(), before + 7);
    const std::vector<float> x = iota_floats(100000);
    ASSERT_EQ(run_chain(s.get(), x), "");
    expect_chain_output(s.get(), x, 3);
  }
  EXPECT_EQ(settled_thread_count(before), before);
}

TEST(RuntimeThreads, ThreadsAboveTheCapAreRefused) {
  ModelPtr model = load(compile(add_chain_model(2)));
  ASSERT_TRUE(model);
  for (int32_t threads : {CUVIL_MAX_THREADS + 1, 100000, INT32_MAX}) {
    cuvil_session_options o;
    cuvil_session_options_init(&o);
    o.threads = threads;
    cuvil_session* s = nullptr;
    EXPECT_TRUE(Fails(cuvil_session_create(model.get(), &o, &s), CUVIL_INVALID_ARGUMENT,
                      {"threads = " + std::to_string(threads), std::to_string(CUVIL_MAX_THREADS),
                       "CUVIL_MAX_THREADS"}));
    EXPECT_EQ(s, nullptr);
  }
  // The cap itself is allowed.
  SessionPtr s = session_with(model.get(), CUVIL_MAX_THREADS, 0);
  ASSERT_TRUE(s);
  const std::vector<float> x = iota_floats(1 << 20);
  ASSERT_EQ(run_chain(s.get(), x), "");
  expect_chain_output(s.get(), x, 2);
}

// ---- RuntimeDeadline ----

// The injected clock: every reading is one millisecond after the previous one, starting at
// 0 (the reading run() takes to set the deadline). Counts the readings past `g_deadline_ns`.
std::atomic<int64_t> g_readings{0};
std::atomic<int64_t> g_late_readings{0};
int64_t g_deadline_ns = 0;  // set before the run, read by its threads
int64_t stepping_clock() {
  const int64_t now = g_readings.fetch_add(1) * 1000000;
  if (now > g_deadline_ns) g_late_readings.fetch_add(1);
  return now;
}
void reset_stepping_clock(int64_t deadline_ms) {
  g_readings = 0;
  g_late_readings = 0;
  g_deadline_ns = deadline_ms * 1000000;
}
int64_t frozen_clock() { return 0; }  // never reaches a deadline

// The instruction index in "... stopped before instruction N (...)".
int stopped_before(const std::string& message) {
  const std::string key = "before instruction ";
  size_t at = message.find(key);
  return at == std::string::npos ? -1 : std::atoi(message.c_str() + at + key.size());
}

// The bug this fixes: 40 instructions and no loop, so the old check (every 64 steps) never
// ran and a 1 ms deadline let a 2 s run finish with success.
TEST(RuntimeDeadline, StraightLineProgramStopsAtTheDeadline) {
  const int ops = 40;
  ModelPtr model = load(compile(add_chain_model(ops), {}, /*fuse=*/false));
  ASSERT_TRUE(model);
  const std::vector<float> big = iota_floats(int64_t{1} << 23);  // 32 MiB: each Add takes ms
  // The same run without a deadline, for scale.
  SessionPtr unbounded = session_with(model.get(), 2, 0);
  auto t0 = Clock::now();
  ASSERT_EQ(run_chain(unbounded.get(), big), "");
  const auto full = Clock::now() - t0;
  expect_chain_output(unbounded.get(), big, ops);

  SessionPtr s = session_with(model.get(), 2, 50);
  t0 = Clock::now();
  const std::string failed = run_chain(s.get(), big);
  const auto stopped = Clock::now() - t0;
  EXPECT_NE(failed.find(std::to_string(CUVIL_DEADLINE) + ": run exceeded its deadline of 50 ms"),
            std::string::npos)
      << failed;
  EXPECT_LT(stopped, full / 2) << "full run " << std::chrono::duration<double, std::milli>(full).count()
                               << " ms; stopped after " << std::chrono::duration<double, std::milli>(stopped).count()
                               << " ms";
  // The session stays usable: a small input runs well inside the deadline.
  const std::vector<float> small = iota_floats(16);
  ASSERT_EQ(run_chain(s.get(), small), "");
  expect_chain_output(s.get(), small, ops);
}

// Granularity between instructions: one thread, a 40-instruction straight-line program, a
// 10 ms deadline on a clock that advances 1 ms per reading. The run must stop at the first
// reading past the deadline, which comes within the first dozen instructions.
TEST(RuntimeDeadline, CheckedBeforeEveryInstruction) {
  const int ops = 40;
  ModelPtr model = load(compile(add_chain_model(ops), {}, /*fuse=*/false));
  ASSERT_TRUE(model);
  SessionPtr s = session_with(model.get(), 1, 10);
  const std::vector<float> x = iota_floats(64);
  {
    hooks::ScopedRunClock clock(stepping_clock);
    reset_stepping_clock(10);
    const std::string failed = run_chain(s.get(), x);
    EXPECT_NE(failed.find("deadline of 10 ms"), std::string::npos) << failed;
    EXPECT_EQ(g_late_readings.load(), 1) << "checks past the deadline before the run stopped";
    EXPECT_LE(g_readings.load(), 12) << "1 reading to start, then 1 ms per check";
    const int pc = stopped_before(failed);
    EXPECT_GT(pc, 0) << failed;
    EXPECT_LT(pc, 12 * 2) << "stopped late in the program: " << failed;  // 2 words per CallOp
  }
  // Usable afterwards, and a run that meets its deadline is unaffected by the checks.
  hooks::ScopedRunClock clock(frozen_clock);
  ASSERT_EQ(run_chain(s.get(), x), "");
  expect_chain_output(s.get(), x, ops);
}

// Granularity inside a tile kernel: the fused chain is one RunKernel over 2^20 elements (256
// tiles, so 16 chunks of 16 tiles with one thread, 32 of 8 with four). With a 5 ms deadline
// on the stepping clock the kernel must stop after about five chunks, each worker at most one
// check past the deadline, instead of running all of them.
TEST(RuntimeDeadline, TileKernelStopsBetweenChunks) {
  const int ops = 8;
  ModelPtr model = load(compile(add_chain_model(ops)));
  ASSERT_TRUE(model);
  const std::vector<float> x = iota_floats(int64_t{1} << 20);
  for (int threads : {1, 4}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    SessionPtr s = session_with(model.get(), threads, 5);
    {
      hooks::ScopedRunClock clock(stepping_clock);
      reset_stepping_clock(5);
      const std::string failed = run_chain(s.get(), x);
      EXPECT_NE(failed.find("deadline of 5 ms"), std::string::npos) << failed;
      EXPECT_GE(g_late_readings.load(), 1);
      EXPECT_LE(g_late_readings.load(), threads) << "a worker took a chunk after seeing the deadline";
      // 1 reading to start, 1 before the RunKernel, then one per chunk: at most 5 ms' worth
      // plus one late check per worker, far fewer than the kernel's chunks.
      EXPECT_LE(g_readings.load(), 1 + 5 + threads);
    }
    hooks::ScopedRunClock clock(frozen_clock);
    ASSERT_EQ(run_chain(s.get(), x), "");
    expect_chain_output(s.get(), x, ops);
  }
}

// Whole-tensor kernels that use the pool stop between their chunks too: one Add over 2^22
// elements is 128 chunks of 2^15 (kGrainElements), on four threads.
TEST(RuntimeDeadline, WholeTensorKernelStopsBetweenChunks) {
  ModelPtr model = load(compile(add_chain_model(1), {}, /*fuse=*/false));
  ASSERT_TRUE(model);
  const std::vector<float> x = iota_floats(int64_t{1} << 22);
  SessionPtr s = session_with(model.get(), 4, 5);
  hooks::ScopedRunClock clock(stepping_clock);
  reset_stepping_clock(5);
  const std::string failed = run_chain(s.get(), x);
  EXPECT_NE(failed.find("deadline of 5 ms"), std::string::npos) << failed;
  EXPECT_LE(g_late_readings.load(), 4);
  EXPECT_LE(g_readings.load(), 1 + 5 + 4);
}

// Inside one tile: x[16, 4096] x w[4096, 16] is one Mma tile whose reduction loop has 16
// chunks of 256 k steps; the tile is checked before every chunk but the first, so with one
// thread and a 5 ms deadline it stops after about five of them.
TEST(RuntimeDeadline, MatMulTileStopsInsideItsReductionLoop) {
  const int64_t m = 16, k = 4096, n = 16;
  onnx::ModelProto model_proto = make_model();
  auto* g = model_proto.mutable_graph();
  add_input(g, "x", Tp::FLOAT, {m, k});
  std::vector<float> w(static_cast<size_t>(k * n));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) * 0.125f;
  *g->add_initializer() = make_float_tensor("w", {k, n}, w);
  add_node(g, "MatMul", {"x", "w"}, {"y"}, "mm");
  add_output(g, "y", Tp::FLOAT, {m, n});
  ModelPtr model = load(compile(model_proto));
  ASSERT_TRUE(model);
  SessionPtr s = session_with(model.get(), 1, 5);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) * 0.25f;
  auto run = [&] {
    cuvil_status st = set_f32(s.get(), "x", {m, k}, x);
    return st ? st : cuvil_session_run(s.get());
  };
  {
    hooks::ScopedRunClock clock(stepping_clock);
    reset_stepping_clock(5);
    EXPECT_TRUE(Fails(run(), CUVIL_DEADLINE, {"deadline of 5 ms"}));
    EXPECT_EQ(g_late_readings.load(), 1);
    EXPECT_LE(g_readings.load(), 1 + 5 + 1) << "the tile ran on past the deadline";
  }
  hooks::ScopedRunClock clock(frozen_clock);
  ASSERT_TRUE(Ok(run()));
  const std::vector<float> y = output<float>(s.get(), 0);
  ASSERT_EQ(y.size(), static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;  // exact: every product and partial sum is a small multiple of 1/32
      for (int64_t q = 0; q < k; ++q) want += double(x[i * k + q]) * double(w[q * n + j]);
      ASSERT_EQ(y[i * n + j], static_cast<float>(want)) << i << ", " << j;
    }
}

// ---- RuntimeCancel ----

// x: f32[n], M: i64 -> a Loop of M iterations adding 1 to x -> y = x + M. With M = INT64_MAX
// it does not end in any reasonable time.
onnx::ModelProto counting_loop_model() {
  onnx::ModelProto m = make_model(17);
  auto* g = m.mutable_graph();
  add_input(g, "M", Tp::INT64, {});
  add_input(g, "x", Tp::FLOAT, {"n"});
  *g->add_initializer() = make_float_tensor("one", {}, {1.f});
  auto* loop = add_node(g, "Loop", {"M", "", "x"}, {"y"}, "count");
  auto* b = set_attr_graph(loop, "body");
  typed(b->add_input(), "i", Tp::INT64);
  typed(b->add_input(), "c", Tp::BOOL);
  typed(b->add_input(), "x_in", Tp::FLOAT);
  add_node(b, "Identity", {"c"}, {"c_out"}, "keep");
  add_node(b, "Add", {"x_in", "one"}, {"x_out"}, "inc");
  typed(b->add_output(), "c_out", Tp::BOOL);
  typed(b->add_output(), "x_out", Tp::FLOAT);
  add_output(g, "y", Tp::FLOAT, {"n"});
  return m;
}

std::string run_loop(cuvil_session* s, const int64_t& trips, const std::vector<float>& x) {
  cuvil_status st = cuvil_session_set_input(s, "M", kI64, 0, nullptr, &trips, sizeof trips);
  if (!st) st = set_f32(s, "x", {static_cast<int64_t>(x.size())}, x);
  if (!st) st = cuvil_session_run(s);
  if (!st) return "";
  std::string msg = std::to_string(cuvil_status_code_of(st)) + ": " + cuvil_status_message(st);
  cuvil_status_free(st);
  return msg;
}

TEST(RuntimeCancel, CancelFromAnotherThreadStopsTheRun) {
  ModelPtr model = load(compile(counting_loop_model()));
  ASSERT_TRUE(model);
  // A deadline far beyond the test's patience only guards against a cancel that never lands.
  SessionPtr s = session_with(model.get(), 2, 60000);
  const std::vector<float> x = iota_floats(4096);
  const int64_t forever = INT64_MAX;
  std::atomic<bool> run_done{false};
  std::atomic<int64_t> first_cancel_ns{0};
  // The canceller starts while the run may not have begun yet; a cancel before the run is
  // dropped, so it keeps cancelling until the run returns.
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    while (!run_done) {
      const int64_t now = Clock::now().time_since_epoch().count();
      int64_t unset = 0;
      first_cancel_ns.compare_exchange_strong(unset, now);
      EXPECT_TRUE(Ok(cuvil_session_cancel(s.get())));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const std::string failed = run_loop(s.get(), forever, x);
  const int64_t returned_ns = Clock::now().time_since_epoch().count();
  run_done = true;
  canceller.join();
  EXPECT_NE(failed.find(std::to_string(CUVIL_CANCELLED) + ": run cancelled"), std::string::npos) << failed;
  EXPECT_NE(failed.find("cuvil_session_cancel"), std::string::npos) << failed;
  const Clock::duration late(returned_ns - first_cancel_ns.load());
  EXPECT_LT(late, std::chrono::seconds(2)) << "the run went on long after the first cancel";
  // The session stays usable and the next run is not cancelled.
  const int64_t three = 3;
  ASSERT_EQ(run_loop(s.get(), three, x), "");
  std::vector<float> y = output<float>(s.get(), 0);
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i] + 3.f);
}

TEST(RuntimeCancel, CancelWithoutARunDoesNotCancelTheNextRun) {
  ModelPtr model = load(compile(add_chain_model(4)));
  ASSERT_TRUE(model);
  SessionPtr s = session_with(model.get(), 2, 0);
  const std::vector<float> x = iota_floats(1 << 16);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Ok(cuvil_session_cancel(s.get())));
  ASSERT_EQ(run_chain(s.get(), x), "");
  expect_chain_output(s.get(), x, 4);
  EXPECT_TRUE(Ok(cuvil_session_cancel(s.get())));  // after a run: dropped as well
  ASSERT_EQ(run_chain(s.get(), x), "");
  expect_chain_output(s.get(), x, 4);
  EXPECT_TRUE(Fails(cuvil_session_cancel(nullptr), CUVIL_INVALID_ARGUMENT, {"cuvil_session_cancel", "null"}));
}

// Where a cancel lands: the clock hook cancels the session during the fourth reading (inside
// the tile kernel, between chunks); the run must stop at the very next check, so the clock
// is not read again.
cuvil_session* g_cancel_target = nullptr;
int64_t cancelling_clock() {
  const int64_t n = g_readings.fetch_add(1);
  if (n == 3) cuvil_status_free(cuvil_session_cancel(g_cancel_target));
  return n;  // nanoseconds: never near the deadline
}

TEST(RuntimeCancel, CancelStopsAKernelAtTheNextChunk) {
  ModelPtr model = load(compile(add_chain_model(8)));
  ASSERT_TRUE(model);
  SessionPtr s = session_with(model.get(), 1, 1000000);  // a deadline only to read the clock
  const std::vector<float> x = iota_floats(int64_t{1} << 20);
  g_cancel_target = s.get();
  {
    hooks::ScopedRunClock clock(cancelling_clock);
    g_readings = 0;
    const std::string failed = run_chain(s.get(), x);
    EXPECT_NE(failed.find(std::to_string(CUVIL_CANCELLED) + ": run cancelled"), std::string::npos) << failed;
    EXPECT_EQ(g_readings.load(), 4) << "the run read the clock again after the cancel";
  }
  ASSERT_EQ(run_chain(s.get(), x), "");
  expect_chain_output(s.get(), x, 8);
}

}  // namespace
}  // namespace cuvil
