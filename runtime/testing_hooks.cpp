// The test hooks of runtime/testing_hooks.h: process-wide atomics, read on the thread start
// and deadline paths and by pool workers, and a counter of lookups by name.
#include "runtime/testing_hooks.h"

#include <atomic>
#include <chrono>

namespace cuvil::rt::testing {
namespace {

std::atomic<int> g_fault_countdown{0};  // thread starts left until the fault; 0 = none armed
std::atomic<int> g_fault_error{0};
std::atomic<RunClock> g_clock{nullptr};
std::atomic<int64_t> g_name_lookups{0};
std::atomic<WorkerGate> g_worker_gate{nullptr};
std::atomic<int64_t> g_cache_bytes_copied{0};

}  // namespace

void inject_thread_start_failure(int nth, int error) {
  g_fault_error.store(error, std::memory_order_relaxed);
  g_fault_countdown.store(nth > 0 ? nth : 0, std::memory_order_release);
}

int take_thread_start_fault() {
  int left = g_fault_countdown.load(std::memory_order_acquire);
  // Count down without going below zero; the start that takes the count from 1 to 0 fails.
  while (left > 0 && !g_fault_countdown.compare_exchange_weak(left, left - 1, std::memory_order_acq_rel)) {
  }
  return left == 1 ? g_fault_error.load(std::memory_order_relaxed) : 0;
}

int64_t name_lookup_count() { return g_name_lookups.load(std::memory_order_relaxed); }
void count_name_lookup() { g_name_lookups.fetch_add(1, std::memory_order_relaxed); }

int64_t cache_bytes_copied() { return g_cache_bytes_copied.load(std::memory_order_relaxed); }
void count_cache_bytes_copied(int64_t bytes) {
  if (bytes > 0) g_cache_bytes_copied.fetch_add(bytes, std::memory_order_relaxed);
}

void set_run_clock(RunClock clock) { g_clock.store(clock, std::memory_order_release); }

int64_t run_clock_now_ns() {
  if (RunClock clock = g_clock.load(std::memory_order_acquire)) return clock();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void set_worker_gate(WorkerGate gate) { g_worker_gate.store(gate, std::memory_order_release); }

void pass_worker_gate(int worker) {
  if (WorkerGate gate = g_worker_gate.load(std::memory_order_acquire)) gate(worker);
}

}  // namespace cuvil::rt::testing
