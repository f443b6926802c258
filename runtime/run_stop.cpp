// RunStop (runtime/run_stop.h): a run's deadline and cancellation.
#include "runtime/run_stop.h"

#include "runtime/testing_hooks.h"
#include "support/checked.h"

namespace cuvil::rt {

void RunStop::begin(int64_t deadline_ms) {
  deadline_ms_ = deadline_ms;
  has_deadline_ = deadline_ms > 0;
  if (has_deadline_) {
    // A deadline too far to represent is no deadline at all (saturate instead of wrapping).
    auto span = checked_mul(deadline_ms, int64_t{1000000});
    auto at = span ? checked_add(testing::run_clock_now_ns(), *span) : std::nullopt;
    deadline_ns_ = at ? *at : INT64_MAX;
  }
  std::lock_guard<std::mutex> lock(mu_);
  running_ = true;
  reason_.store(kNone, std::memory_order_relaxed);
}

void RunStop::end() {
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
}

bool RunStop::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!running_) return false;
  int expected = kNone;
  reason_.compare_exchange_strong(expected, kCancelled, std::memory_order_relaxed);
  return true;
}

bool RunStop::should_stop() {
  if (reason_.load(std::memory_order_relaxed) != kNone) return true;
  if (!has_deadline_ || testing::run_clock_now_ns() <= deadline_ns_) return false;
  int expected = kNone;
  reason_.compare_exchange_strong(expected, kDeadline, std::memory_order_relaxed);
  return true;
}

Status RunStop::status(const std::string& where) const {
  if (reason_.load(std::memory_order_relaxed) == kCancelled)
    return make_status(StatusCode::kCancelled, "run cancelled (cuvil_session_cancel); stopped ", where);
  return make_status(StatusCode::kDeadline, "run exceeded its deadline of ", deadline_ms_, " ms; stopped ",
                     where);
}

}  // namespace cuvil::rt
