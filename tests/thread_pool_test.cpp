// RuntimeThreads, the worker pool alone (runtime/cpu/thread_pool.h): thousands of
// back-to-back parallel_fors run every chunk exactly once, whether the workers are caught
// spinning or asleep, with the caller taking chunks too; a stop still lands between chunks;
// and the caller never waits for a worker that has not joined: a worker held before it joins
// (the worker gate of runtime/testing_hooks.h, standing for one the OS has not scheduled)
// leaves every chunk to the caller, and once let go, late for a finished parallel_for, it
// disturbs none of the later ones. Needs only the runtime library, so a ThreadSanitizer
// build directory builds just this file's binary, cuvil_thread_pool_tests (docs/security.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cpu/thread_pool.h"
#include "runtime/testing_hooks.h"

namespace cuvil {
namespace {

namespace hooks = rt::testing;
using Clock = std::chrono::steady_clock;
using ChunkFn = std::function<void(int64_t, int64_t, int)>;

// Thousands of small parallel_fors back to back, each checked for every index exactly once
// and for the caller's share; spin_turns 0 makes every worker sleep between them (the wake
// path), the default catches them spinning.
void hammer_pool(int threads, int spin_turns, int rounds) {
  rt::ThreadPool pool;
  ASSERT_TRUE(pool.start(threads).is_ok());
  pool.set_spin_turns(spin_turns);
  constexpr int64_t kN = 64;
  std::vector<std::atomic<int>> hits(kN);
  std::atomic<int64_t> caller_chunks{0};
  for (int round = 0; round < rounds; ++round) {
    for (auto& h : hits) h.store(0, std::memory_order_relaxed);
    const bool all = pool.parallel_for(kN, 1, [&](int64_t b, int64_t e, int worker) {
      if (worker == 0) caller_chunks.fetch_add(1, std::memory_order_relaxed);
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
    });
    ASSERT_TRUE(all);
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "round " << round << " index " << i;
  }
  EXPECT_GT(caller_chunks.load(), 0) << "the caller took no chunk";
}

TEST(RuntimeThreads, PoolRunsEveryChunkWhenWorkersSleepBetweenCalls) { hammer_pool(4, 0, 3000); }
TEST(RuntimeThreads, PoolRunsEveryChunkWhenWorkersSpinBetweenCalls) {
  // Fewer rounds: on a machine with fewer free cores than threads each round waits for the
  // spinners' time slices.
  hammer_pool(4, rt::ThreadPool::kSpinTurns, 300);
}

struct StopAfter final : rt::StopCheck {
  std::atomic<int> left;
  explicit StopAfter(int n) : left(n) {}
  bool should_stop() override { return left.fetch_sub(1) <= 0; }
};

TEST(RuntimeThreads, PoolStopsBetweenChunksWhileWorkersSpin) {
  rt::ThreadPool pool;
  ASSERT_TRUE(pool.start(3).is_ok());
  StopAfter stop(10);  // ten chunks may start, counted over every thread
  pool.set_stop_check(&stop);
  std::atomic<int> chunks{0};
  EXPECT_FALSE(pool.parallel_for(1000, 1, [&](int64_t, int64_t, int) { chunks.fetch_add(1); }));
  EXPECT_LE(chunks.load(), 10);
  pool.set_stop_check(nullptr);
  // The pool is usable afterwards, with its workers spinning or asleep.
  chunks = 0;
  EXPECT_TRUE(pool.parallel_for(1000, 1, [&](int64_t, int64_t, int) { chunks.fetch_add(1); }));
  EXPECT_EQ(chunks.load(), 1000);
}

// ---- workers that join late, or not at all ----

// A worker gate that holds every worker until it is opened: by the test, or by a watchdog
// after kWatchdog, so that a pool that waits for a held worker (the old wait-for-every-worker
// behaviour) makes the test fail after a few seconds instead of hanging. Process-wide, as the
// hook is a plain function pointer.
struct HeldGate {
  static constexpr auto kWatchdog = std::chrono::seconds(5);
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  bool opened_by_watchdog = false;
  int waiting = 0;  // workers held in it now

  static HeldGate& get() {
    static HeldGate gate;
    return gate;
  }
  static void pass(int) {
    HeldGate& g = get();
    std::unique_lock<std::mutex> lock(g.mu);
    ++g.waiting;
    g.cv.notify_all();
    g.cv.wait(lock, [&] { return g.open; });
    --g.waiting;
  }
  void set_open(bool value, bool by_watchdog = false) {
    std::lock_guard<std::mutex> lock(mu);
    open = value;
    opened_by_watchdog = by_watchdog;
    cv.notify_all();
  }
  bool watchdog_opened() {
    std::lock_guard<std::mutex> lock(mu);
    return opened_by_watchdog;
  }
  // True once `n` workers are held, false if the gate opens or `limit` passes first.
  bool wait_until_holding(int n, std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, limit, [&] { return waiting >= n || open; }) && !open;
  }
};

// Closes the gate and installs it for the object's life; a watchdog thread opens it after
// HeldGate::kWatchdog unless the test did first. Declared after the pool, so the gate opens
// (and the watchdog is joined) before the pool joins its workers.
class ClosedGate {
 public:
  ClosedGate() : hook_(&HeldGate::pass) {
    HeldGate::get().set_open(false);
    watchdog_ = std::thread([] {
      HeldGate& g = HeldGate::get();
      std::unique_lock<std::mutex> lock(g.mu);
      if (!g.cv.wait_for(lock, HeldGate::kWatchdog, [&] { return g.open; })) {
        g.open = true;
        g.opened_by_watchdog = true;
        g.cv.notify_all();
      }
    });
  }
  ~ClosedGate() {
    open();
    watchdog_.join();
  }
  void open() {
    HeldGate& g = HeldGate::get();
    std::lock_guard<std::mutex> lock(g.mu);
    g.open = true;
    g.cv.notify_all();
  }
  ClosedGate(const ClosedGate&) = delete;
  ClosedGate& operator=(const ClosedGate&) = delete;

 private:
  hooks::ScopedWorkerGate hook_;
  std::thread watchdog_;
};

// Runs parallel_for(n, grain) and returns, per item, the worker that ran it (-1: none, -2:
// more than once).
std::vector<int> who_ran_each_item(rt::ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> ran(static_cast<size_t>(n));
  for (auto& r : ran) r.store(-1);
  EXPECT_TRUE(pool.parallel_for(n, grain, [&](int64_t b, int64_t e, int worker) {
    for (int64_t i = b; i < e; ++i) {
      int none = -1;
      if (!ran[static_cast<size_t>(i)].compare_exchange_strong(none, worker)) ran[static_cast<size_t>(i)].store(-2);
    }
  }));
  std::vector<int> out;
  for (auto& r : ran) out.push_back(r.load());
  return out;
}

TEST(RuntimeThreads, PoolDoesNotWaitForAWorkerThatHasNotStarted) {
  for (int spin_turns : {rt::ThreadPool::kSpinTurns, 0}) {
    SCOPED_TRACE("spin turns " + std::to_string(spin_turns));
    rt::ThreadPool pool;
    ASSERT_TRUE(pool.start(2).is_ok());
    pool.set_spin_turns(spin_turns);
    const std::vector<int> all_on_caller(1000, 0);
    {
      ClosedGate gate;
      // The worker is held before it joins, wherever it is: not yet past the gate, or not
      // even awake. The caller runs every chunk and returns without waiting for it.
      EXPECT_EQ(who_ran_each_item(pool, 1000, 1), all_on_caller);
      EXPECT_FALSE(HeldGate::get().watchdog_opened())
          << "parallel_for waited for a worker held before it joined until the watchdog let it go";
      // Now held at the gate for that finished parallel_for: another one runs on the caller
      // alone too, and then the worker is let go, late for both.
      ASSERT_TRUE(HeldGate::get().wait_until_holding(1, std::chrono::seconds(10)))
          << "the worker never reached the gate";
      EXPECT_EQ(who_ran_each_item(pool, 1000, 7), all_on_caller);
      EXPECT_FALSE(HeldGate::get().watchdog_opened());
      gate.open();
    }
    // The late worker touched nothing of the later parallel_fors: they stay exact...
    for (int round = 0; round < 200; ++round) {
      const std::vector<int> ran = who_ran_each_item(pool, 257, 3);
      for (size_t i = 0; i < ran.size(); ++i) ASSERT_GE(ran[i], 0) << "round " << round << " item " << i;
    }
    // ...and the worker joins again: the caller's chunks wait (a bounded while) for it.
    std::atomic<int64_t> worker_chunks{0};
    const auto t0 = Clock::now();
    EXPECT_TRUE(pool.parallel_for(1 << 20, 1, [&](int64_t, int64_t, int worker) {
      if (worker != 0) {
        worker_chunks.fetch_add(1, std::memory_order_relaxed);
      } else if (worker_chunks.load(std::memory_order_relaxed) == 0 && Clock::now() - t0 < std::chrono::seconds(20)) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }));
    EXPECT_GT(worker_chunks.load(), 0) << "the worker let go of the gate never joined again";
  }
}

// Random delays before a worker joins: none, a yield, or a sleep of up to 200 us.
std::atomic<uint32_t> g_delay_seed{1};
void random_delay_gate(int worker) {
  thread_local std::minstd_rand rng(g_delay_seed.fetch_add(1) * 7919u + static_cast<uint32_t>(worker));
  const uint32_t r = rng() % 16;
  if (r == 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
  } else if (r < 4) {
    std::this_thread::yield();
  }
}

// Thousands of parallel_fors of random sizes and grains (from one item per chunk to a grain
// past n) with workers late at random; every item runs exactly once, in chunks that start on
// a multiple of the grain and end at the grain or at n.
void stress_pool(int threads, int spin_turns, int rounds, uint32_t seed) {
  SCOPED_TRACE("threads " + std::to_string(threads) + ", spin turns " + std::to_string(spin_turns));
  hooks::ScopedWorkerGate hook(&random_delay_gate);
  rt::ThreadPool pool;
  ASSERT_TRUE(pool.start(threads).is_ok());
  pool.set_spin_turns(spin_turns);
  std::mt19937 rng(seed);
  constexpr int64_t kMaxN = 3000;
  std::vector<std::atomic<int>> hits(kMaxN);
  std::atomic<int> bad_chunks{0};
  std::atomic<int64_t> worker_chunks{0};
  for (int round = 0; round < rounds; ++round) {
    const int64_t n = rng() % 4 == 0 ? 1 + rng() % 8 : 1 + rng() % kMaxN;
    const int64_t grain = rng() % 8 == 0 ? 1 + rng() % (n + 2) : 1 + rng() % 16;
    // In a quarter of the rounds whoever takes the first chunk sleeps in it, freeing its core:
    // time for sleeping workers to wake and join (else, on a busy machine, the caller can
    // finish every round before any worker wakes, which is right but tests less).
    const bool slow_first_chunk = rng() % 4 == 0;
    for (int64_t i = 0; i < n; ++i) hits[static_cast<size_t>(i)].store(0, std::memory_order_relaxed);
    ASSERT_TRUE(pool.parallel_for(n, grain, [&](int64_t b, int64_t e, int worker) {
      if (b % grain != 0 || e != std::min(n, b + grain) || worker < 0 || worker >= threads)
        bad_chunks.fetch_add(1, std::memory_order_relaxed);
      if (worker != 0) worker_chunks.fetch_add(1, std::memory_order_relaxed);
      if (slow_first_chunk && b == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
    }));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
          << "round " << round << ": n " << n << ", grain " << grain << ", item " << i;
  }
  EXPECT_EQ(bad_chunks.load(), 0);
  EXPECT_GT(worker_chunks.load(), 0) << "no worker ever joined: the test ran everything on the caller";
}

TEST(RuntimeThreads, PoolRunsEveryChunkOnceWithWorkersLateAtRandom) {
  uint32_t seed = 1;
  for (int threads : {2, 3, 8})
    for (int spin_turns : {rt::ThreadPool::kSpinTurns, 0}) stress_pool(threads, spin_turns, 2000, seed++);
}

TEST(RuntimeThreads, PoolRefusesMoreWorkersThanTheCrewCounts) {
  rt::ThreadPool pool;
  const rt::Status st = pool.start(rt::ThreadPool::kMaxWorkers + 2);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("above the pool's maximum"), std::string::npos) << st.message();
  EXPECT_EQ(pool.threads(), 1);
}

}  // namespace
}  // namespace cuvil
