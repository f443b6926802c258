// When a run must stop early: its deadline has passed, or another thread cancelled it
// (cuvil_session_cancel). The session asks should_stop() before every bytecode instruction,
// and its thread pool asks before every chunk of a parallel_for (runtime/cpu/thread_pool.h),
// so the granularity is one instruction or one chunk per worker (docs/security.md, "Runtime:
// threads, deadlines, cancellation").
//
// Cancellation is scoped to one run: cancel() marks the run in progress, if any, and does
// nothing otherwise; begin() and end() bracket a run under the same mutex as cancel(), so a
// cancel either falls inside a run (and stops it at its next check) or outside every run (and
// is dropped), never into the next one. The stop reason is one atomic, sticky until the next
// begin(): any worker that sees it stops, and the run reports it once it unwinds.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "runtime/cpu/thread_pool.h"
#include "runtime/status.h"

namespace cuvil::rt {

class RunStop final : public StopCheck {
 public:
  // Called by the running thread. Starts a run with this deadline (0 = none); any stop or
  // cancel left from before is cleared.
  void begin(int64_t deadline_ms);
  // Called by the running thread when the run returns: cancels from now on are dropped.
  void end();
  // Any thread, any time: stops the run in progress at its next check. Returns whether a run
  // was in progress (a cancel outside a run is dropped).
  bool cancel();
  // Any thread of the run: true once the deadline has passed or a cancel has arrived; stays
  // true until the next begin(). Reads the clock only while no stop has been seen.
  bool should_stop() override;
  // Whether a stop has been seen in this run (no clock read).
  bool stopped() const { return reason_.load(std::memory_order_relaxed) != kNone; }
  // The status of a stopped run; `where` says where it stopped ("in instruction 12 (...)").
  Status status(const std::string& where) const;

 private:
  enum Reason : int { kNone = 0, kDeadline = 1, kCancelled = 2 };
  std::mutex mu_;          // orders begin() and end() against cancel()
  bool running_ = false;   // guarded by mu_
  std::atomic<int> reason_{kNone};
  // Written by begin() on the running thread before any check of that run; the pool's
  // workers read them after taking the pool mutex that hands them the work.
  bool has_deadline_ = false;
  int64_t deadline_ms_ = 0;
  int64_t deadline_ns_ = 0;  // on testing::run_clock_now_ns()'s scale; INT64_MAX if too far
};

}  // namespace cuvil::rt
