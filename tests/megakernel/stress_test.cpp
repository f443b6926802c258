// The megakernel's scheduler on the host grid emulator (runtime/gpu/grid_emulator.h), on
// programs built here by hand, so this file needs only the runtime: it is also the binary
// cuvil_megakernel_tests, built alone in a ThreadSanitizer directory (docs/ptx.md).
// Suite MegakernelStress: random elementwise programs whose intermediates share arena slots
// (RAW, WAR and WAW hazards through aliasing), run thousands of times with random block and
// thread counts and random per-tile delays, must give exactly the sequential result (a stale
// read or a missed wait changes it) and never hang; an injected device error and the stop
// word end every block. Suite MegakernelDeviceForm: the builder's waits (with the implied ones
// left out) and its refusals, each naming the problem.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/gpu/device_program.h"
#include "runtime/gpu/grid_emulator.h"

namespace cuvil::rt::gpu {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr int kRuns = 600;
#else
constexpr int kRuns = 3000;
#endif

uint32_t fbits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// A program of elementwise kernels over [rows, cols]: tensor 0 is the input x, tensor 1 the
// output y, then `slots` arena slots, each holding several intermediates (one per write).
struct Builder {
  Program p;
  int64_t rows, cols;
  uint32_t e_rows, e_cols, e_zero, e_one;
  explicit Builder(int64_t r, int64_t c) : rows(r), cols(c) {
    e_rows = konst(r);
    e_cols = konst(c);
    e_zero = konst(0);
    e_one = konst(1);
    tensor("x", TensorKind::kInput, kNone);
    tensor("y", TensorKind::kOutput, kNone);
    p.inputs = {0};
    p.outputs = {1};
    p.tensors[0].io_index = 0;
    p.tensors[1].io_index = 0;
  }
  uint32_t konst(int64_t v) {
    p.exprs.push_back(ExprRange{static_cast<uint32_t>(p.expr_code.size()), 1});
    p.expr_code.push_back(ExprOp{ExprOpKind::kConst, v});
    return static_cast<uint32_t>(p.exprs.size() - 1);
  }
  uint32_t tensor(const std::string& name, TensorKind kind, uint32_t arena_offset) {
    TensorDesc d;
    d.name = name;
    d.kind = kind;
    d.dims = {e_rows, e_cols};
    d.arena_offset = arena_offset;
    p.tensors.push_back(d);
    return static_cast<uint32_t>(p.tensors.size() - 1);
  }
  AccessMap map(uint32_t t) {
    AccessMap m;
    m.tensor = t;
    m.offset = e_zero;
    m.strides = {e_cols, e_one};
    return m;
  }
  // dst <- fn(src0, src1 * scale): Load, Load, Const, Binary Mul, Binary fn, Store.
  void kernel(uint32_t dst, uint32_t src0, uint32_t src1, BinaryFn fn, float scale) {
    TileKernel k;
    k.name = "k" + std::to_string(p.kernels.size());
    k.domain = {e_rows, e_cols};
    k.maps = {map(src0), map(src1), map(dst)};
    k.registers = 4;
    auto op = [&](TileOpcode o) { k.body.push_back(static_cast<uint32_t>(o)); };
    op(TileOpcode::Load), k.body.insert(k.body.end(), {0, 0});
    op(TileOpcode::Load), k.body.insert(k.body.end(), {1, 1});
    op(TileOpcode::Const), k.body.insert(k.body.end(), {2, fbits(scale)});
    op(TileOpcode::Binary), k.body.insert(k.body.end(), {static_cast<uint32_t>(BinaryFn::Mul), 1, 1, 2});
    op(TileOpcode::Binary), k.body.insert(k.body.end(), {static_cast<uint32_t>(fn), 3, 0, 1});
    op(TileOpcode::Store), k.body.insert(k.body.end(), {2, 3});
    p.code.push_back(static_cast<uint32_t>(Opcode::RunKernel));
    p.code.push_back(static_cast<uint32_t>(p.kernels.size()));
    p.kernels.push_back(std::move(k));
  }
  void end() { p.code.push_back(static_cast<uint32_t>(Opcode::End)); }
};

float apply(BinaryFn fn, float a, float b) {
  switch (fn) {
    case BinaryFn::Add: return a + b;
    case BinaryFn::Sub: return a - b;
    default: return a > b ? a : b;  // Max (no NaN here)
  }
}

// A random program over `slots` arena slots and its sequential result.
struct Case {
  Program program;
  std::vector<float> x, expected;
  int64_t arena_bytes = 0;
};
Case random_case(std::mt19937& rng, int64_t rows, int64_t cols, int slots, int kernels) {
  Builder b(rows, cols);
  const int64_t n = rows * cols;
  std::vector<uint32_t> slot_offset;
  for (int s = 0; s < slots; ++s) slot_offset.push_back(b.konst(s * n * 4));
  Case c;
  c.x.resize(static_cast<size_t>(n));
  for (auto& v : c.x) v = static_cast<float>(static_cast<int>(rng() % 17) - 8);
  // Memory the reference runs on: per slot its floats; "current tensor" of each slot.
  std::vector<std::vector<float>> mem(static_cast<size_t>(slots), std::vector<float>(static_cast<size_t>(n), 0.f));
  std::vector<uint32_t> holder(static_cast<size_t>(slots), kNone);  // tensor now in the slot
  std::vector<int> written;                                         // slots with a value
  const BinaryFn fns[] = {BinaryFn::Add, BinaryFn::Sub, BinaryFn::Max};
  auto pick_src = [&](uint32_t* tensor, const float** data) {
    if (written.empty() || rng() % 4 == 0) {
      *tensor = 0;
      *data = c.x.data();
      return;
    }
    const int s = written[rng() % written.size()];
    *tensor = holder[static_cast<size_t>(s)];
    *data = mem[static_cast<size_t>(s)].data();
  };
  for (int k = 0; k < kernels; ++k) {
    const bool last = k == kernels - 1;
    uint32_t s0, s1;
    const float *d0, *d1;
    pick_src(&s0, &d0);
    pick_src(&s1, &d1);
    const BinaryFn fn = fns[rng() % 3];
    const float scale = (rng() % 2) ? 0.5f : -1.f;
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = apply(fn, d0[i], d1[i] * scale);
    if (last) {
      b.kernel(1, s0, s1, fn, scale);
      c.expected = out;
      break;
    }
    const int s = static_cast<int>(rng() % static_cast<unsigned>(slots));
    const uint32_t t = b.tensor("t" + std::to_string(k), TensorKind::kIntermediate, slot_offset[static_cast<size_t>(s)]);
    b.kernel(t, s0, s1, fn, scale);
    mem[static_cast<size_t>(s)] = out;
    holder[static_cast<size_t>(s)] = t;
    bool seen = false;
    for (int w : written) seen = seen || w == s;
    if (!seen) written.push_back(s);
  }
  b.end();
  c.program = std::move(b.p);
  c.arena_bytes = slots * n * 4;
  return c;
}

// Binds the case's tensors (input, output, arena) and runs it on the emulator.
Status run_case(const Case& c, const DeviceFormOptions& form, const EmulatorOptions& emu, std::vector<float>* y,
                DeviceRun* run_out = nullptr, uint32_t fail_task = MK_NONE, bool stop = false,
                bool drop_waits = false) {
  DeviceProgram dp;
  CUVIL_RETURN_IF_ERROR(build_device_program(c.program, form, &dp));
  ExprEvaluator eval(c.program);
  std::vector<float> arena(static_cast<size_t>(c.arena_bytes / 4) + 1, -1.f);
  y->assign(c.x.size(), 0.f);
  std::vector<TensorView> views(c.program.tensors.size());
  for (size_t t = 0; t < views.size(); ++t) {
    const TensorDesc& d = c.program.tensors[t];
    views[t].dtype = DType::Float;
    for (uint32_t e : d.dims) views[t].dims.push_back(c.program.expr_code[c.program.exprs[e].begin].value);
    if (t == 0) views[t].data = const_cast<float*>(c.x.data());
    else if (t == 1) views[t].data = y->data();
    else views[t].data = reinterpret_cast<char*>(arena.data()) + c.program.expr_code[c.program.exprs[d.arena_offset].begin].value;
  }
  DeviceRun run;
  CUVIL_RETURN_IF_ERROR(bind_device_run(c.program, dp, eval, views, &run));
  run.fail_task = fail_task;
  run.stop = stop ? 1 : 0;
  if (drop_waits)
    for (MkTask& t : run.tasks) t.wait_count = 0;
  Status st = emulate_megakernel(dp, run, emu);
  if (run_out) *run_out = run;
  return st;
}

// Small registers, so every task has many tiles: 32 floats per register.
DeviceFormOptions small_registers() {
  DeviceFormOptions o;
  o.register_budget_bytes = (MK_HEADER_FLOATS + 4 * 32) * 4;
  return o;
}

// A per-tile delay without shared state: a hash of (run, task, tile) picks a short sleep
// (1 tile in 16) or a yield (1 in 4).
std::function<void(uint32_t, int64_t)> random_delays(uint32_t seed) {
  return [seed](uint32_t task, int64_t tile) {
    uint32_t h = seed ^ (task * 0x9e3779b9u) ^ static_cast<uint32_t>(tile * 0x85ebca6bu);
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    if (h % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(h % 20));
    else if (h % 4 == 1) std::this_thread::yield();
  };
}

TEST(MegakernelStress, RandomProgramsDelaysAndBlockCounts) {
  std::mt19937 rng(12345);
  int runs = 0;
  for (int r = 0; r < kRuns; ++r) {
    const int64_t rows = 1 + rng() % 24, cols = 1 + rng() % 40;
    const Case c = random_case(rng, rows, cols, 1 + static_cast<int>(rng() % 3), 2 + static_cast<int>(rng() % 10));
    EmulatorOptions emu;
    emu.blocks = 1 + static_cast<int>(rng() % 8);
    emu.threads_per_block = 1 + static_cast<int>(rng() % 3);
    if (rng() % 2 == 0) emu.tile_hook = random_delays(static_cast<uint32_t>(rng()));
    std::vector<float> y;
    Status st = run_case(c, small_registers(), emu, &y);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(y, c.expected) << "run " << r << ": " << emu.blocks << " blocks of " << emu.threads_per_block
                             << " threads, " << c.program.kernels.size() << " kernels";
    ++runs;
  }
  EXPECT_EQ(runs, kRuns);
}

// The stress test can fail: with the waits dropped, the same kind of runs read stale or
// not-yet-written memory and some result differs.
TEST(MegakernelStress, DroppedWaitsAreCaught) {
#if defined(__SANITIZE_THREAD__)
  // These runs race on purpose; ThreadSanitizer reports them (as it should) at the first one.
  GTEST_SKIP() << "races on purpose: not run under ThreadSanitizer";
#endif
  std::mt19937 rng(99);
  int wrong = 0;
  for (int r = 0; r < 200 && wrong == 0; ++r) {
    const Case c = random_case(rng, 16, 32, 2, 10);
    EmulatorOptions emu;
    emu.blocks = 8;
    emu.tile_hook = random_delays(static_cast<uint32_t>(rng()));
    std::vector<float> y;
    ASSERT_TRUE(run_case(c, small_registers(), emu, &y, nullptr, MK_NONE, false, /*drop_waits=*/true).is_ok());
    wrong += y != c.expected;
  }
  EXPECT_GT(wrong, 0) << "dropping every wait never changed a result: the stress test could not fail";
}

// The example of docs/ptx.md: a and c share slot A, b is in slot B.
//   t0: a = x + x      t1: b = a + a (RAW a)      t2: c = x - x (WAR with t1 on slot A; WAW
//   with t0, implied)  t3: y = b + c (RAW b, c; t1 and t0 implied by t2)
Case aliasing_case() {
  Builder b(8, 8);
  const uint32_t slot_a = b.konst(0), slot_b = b.konst(256);
  const uint32_t a = b.tensor("a", TensorKind::kIntermediate, slot_a);
  const uint32_t bb = b.tensor("b", TensorKind::kIntermediate, slot_b);
  const uint32_t c = b.tensor("c", TensorKind::kIntermediate, slot_a);
  b.kernel(a, 0, 0, BinaryFn::Add, 1.f);
  b.kernel(bb, a, a, BinaryFn::Add, 1.f);
  b.kernel(c, 0, 0, BinaryFn::Sub, 1.f);
  b.kernel(1, bb, c, BinaryFn::Add, 1.f);
  b.end();
  Case k;
  k.program = std::move(b.p);
  k.arena_bytes = 512;
  k.x.resize(64);
  for (size_t i = 0; i < 64; ++i) k.x[i] = static_cast<float>(i);
  for (size_t i = 0; i < 64; ++i) k.expected.push_back(4.f * k.x[i]);
  return k;
}

TEST(MegakernelDeviceForm, WaitsFollowMemoryAndOmitImpliedOnes) {
  const Case c = aliasing_case();
  std::vector<float> y;
  DeviceRun run;
  EmulatorOptions emu;
  emu.blocks = 4;
  ASSERT_TRUE(run_case(c, small_registers(), emu, &y, &run).is_ok());
  EXPECT_EQ(y, c.expected);
  ASSERT_EQ(run.tasks.size(), 4u);
  auto waits_of = [&](size_t t) {
    std::vector<uint32_t> w;
    for (uint32_t i = 0; i < run.tasks[t].wait_count; ++i) w.push_back(run.waits[run.tasks[t].wait_begin + i].task);
    return w;
  };
  EXPECT_EQ(waits_of(0), std::vector<uint32_t>{});
  EXPECT_EQ(waits_of(1), std::vector<uint32_t>{0});
  EXPECT_EQ(waits_of(2), std::vector<uint32_t>{1});  // WAR on slot A; WAW with t0 implied
  EXPECT_EQ(waits_of(3), std::vector<uint32_t>{2});  // t1 and t0 implied through t2
  EXPECT_EQ(run.waits[run.tasks[1].wait_begin].target, run.tasks[0].tiles);
  EXPECT_EQ(run.tasks[0].tiles, 2);  // 64 elements, 32-float registers
  for (const MkTask& t : run.tasks) EXPECT_EQ(run.counters[&t - run.tasks.data()], t.tiles);
}

TEST(MegakernelStress, DeviceErrorStopsEveryBlock) {
  std::mt19937 rng(7);
  for (int r = 0; r < kRuns / 20; ++r) {
    const Case c = random_case(rng, 16, 16, 2, 8);
    EmulatorOptions emu;
    emu.blocks = 1 + static_cast<int>(rng() % 8);
    emu.threads_per_block = 1 + static_cast<int>(rng() % 2);
    const uint32_t fail = static_cast<uint32_t>(rng() % c.program.kernels.size());
    std::vector<float> y;
    DeviceRun run;
    Status st = run_case(c, small_registers(), emu, &y, &run, fail);
    ASSERT_EQ(st.code(), StatusCode::kRuntime) << st.message();
    EXPECT_NE(st.message().find("injected device failure in kernel k" + std::to_string(fail)), std::string::npos)
        << st.message();
    // The failed task never completes (later independent tasks may have).
    EXPECT_LT(run.counters[fail], run.tasks[fail].tiles);
  }
}

TEST(MegakernelStress, StopWordCancels) {
  const Case c = aliasing_case();
  std::vector<float> y;
  EmulatorOptions emu;
  emu.blocks = 3;
  Status st = run_case(c, small_registers(), emu, &y, nullptr, MK_NONE, /*stop=*/true);
  EXPECT_EQ(st.code(), StatusCode::kCancelled);
  EXPECT_NE(st.message().find("run stopped in or before kernel k0"), std::string::npos) << st.message();
}

// The stop word set by another thread while blocks run and wait (the host's cancel and
// deadline): the run ends with kCancelled, or completes when it was already done.
TEST(MegakernelStress, StopWordFromAnotherThread) {
  std::mt19937 rng(5);
  int cancelled = 0;
  for (int r = 0; r < 20; ++r) {
    const Case c = random_case(rng, 24, 40, 2, 12);
    DeviceProgram dp;
    ASSERT_TRUE(build_device_program(c.program, small_registers(), &dp).is_ok());
    ExprEvaluator eval(c.program);
    std::vector<float> arena(static_cast<size_t>(c.arena_bytes / 4) + 1), y(c.x.size());
    std::vector<TensorView> views(c.program.tensors.size());
    for (size_t t = 0; t < views.size(); ++t) {
      const TensorDesc& d = c.program.tensors[t];
      views[t].dtype = DType::Float;
      views[t].dims = {24, 40};
      if (t == 0) views[t].data = const_cast<float*>(c.x.data());
      else if (t == 1) views[t].data = y.data();
      else views[t].data = reinterpret_cast<char*>(arena.data()) + c.program.expr_code[c.program.exprs[d.arena_offset].begin].value;
    }
    DeviceRun run;
    ASSERT_TRUE(bind_device_run(c.program, dp, eval, views, &run).is_ok());
    EmulatorOptions emu;
    emu.blocks = 4;
    emu.threads_per_block = 2;
    emu.tile_hook = [](uint32_t, int64_t) { std::this_thread::sleep_for(std::chrono::microseconds(200)); };
    std::thread stopper([&run] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      run.request_stop();
    });
    Status st = emulate_megakernel(dp, run, emu);
    stopper.join();
    if (st.is_ok()) {
      EXPECT_EQ(y, c.expected);
    } else {
      EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.message();
      ++cancelled;
    }
  }
  EXPECT_GT(cancelled, 0);
}

TEST(MegakernelDeviceForm, RefusesCallOpNamingTheNode) {
  Case c = aliasing_case();
  NodeRecord node;
  node.op_type = "TopK";
  node.name = "topk_0";
  c.program.nodes.push_back(node);
  c.program.code.insert(c.program.code.begin() + 4, {static_cast<uint32_t>(Opcode::CallOp), 0});
  DeviceProgram dp;
  Status st = build_device_program(c.program, {}, &dp);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_EQ(st.message(),
            "program instruction 4 (CallOp) is not lowerable to the megakernel yet: whole-tensor op TopK "
            "(node 'topk_0') runs only on the CPU");
}

TEST(MegakernelDeviceForm, RefusesControlFlowAndCopies) {
  Case c = aliasing_case();
  c.program.code.insert(c.program.code.begin() + 2, {static_cast<uint32_t>(Opcode::Jump), 4});
  DeviceProgram dp;
  Status st = build_device_program(c.program, {}, &dp);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_EQ(st.message(),
            "program instruction 2 (Jump) is not lowerable to the megakernel yet: program-level control flow "
            "runs only on the CPU");
  Case d = aliasing_case();
  d.program.code.insert(d.program.code.begin(), {static_cast<uint32_t>(Opcode::Copy), 1, 0});
  st = build_device_program(d.program, {}, &dp);
  EXPECT_NE(st.message().find("(Copy) is not lowerable to the megakernel yet: tensor copies run only on the CPU"),
            std::string::npos)
      << st.message();
}

TEST(MegakernelDeviceForm, RefusesARegisterFileOverTheBudget) {
  Case c = aliasing_case();
  TileKernel& k = c.program.kernels[1];
  // A reduction loop whose chunk registers need 1024 floats each.
  k.loop_extent = c.program.kernels[1].domain[0];
  k.loop_chunk = 1024;
  k.init_end = 0;
  k.loop_end = static_cast<uint32_t>(k.body.size()) - 3;  // Store in the finish section
  DeviceProgram dp;
  DeviceFormOptions o;
  o.register_budget_bytes = 8 * 1024;
  Status st = build_device_program(c.program, o, &dp);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_EQ(st.message(),
            "kernel k1: its register file (4 registers of 1024 floats, 16448 bytes with the block header) does "
            "not fit the megakernel's register budget of 8192 bytes");
  o.register_budget_bytes = kDefaultRegisterBudget;
  EXPECT_TRUE(build_device_program(c.program, o, &dp).is_ok());
}

TEST(MegakernelDeviceForm, RefusesBadEmulatorShapes) {
  const Case c = aliasing_case();
  std::vector<float> y;
  EmulatorOptions emu;
  emu.blocks = 0;
  Status st = run_case(c, {}, emu, &y);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "megakernel emulator: 0 blocks of 1 threads (each must be in [1, 1024])");
}

}  // namespace
}  // namespace cuvil::rt::gpu
