// A small persistent thread pool (ggml-style): `parallel_for` splits [0, n) into chunks that
// the workers and the calling thread take from a shared atomic counter; it returns when every
// chunk taken is done. One pool per session; `parallel_for` is not re-entrant.
//
// Starting is separate from constructing so that a thread the OS refuses is a Status, not an
// exception or a half-started pool: start() either starts every worker or none (the ones it
// started are stopped and joined again before it returns the error).
//
// A StopCheck (the session's deadline and cancellation, runtime/run_stop.h) is asked before
// every chunk, by whichever thread is about to take it; once it answers true no thread takes
// another chunk of that parallel_for, each finishes the chunk it is in, and parallel_for
// returns false. The pool never decides why to stop; the owner reports that.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/status.h"

namespace cuvil::rt {

class StopCheck {
 public:
  // Thread-safe; once true, stays true until the owner starts its next run.
  virtual bool should_stop() = 0;

 protected:
  ~StopCheck() = default;
};

class ThreadPool {
 public:
  ThreadPool() = default;  // no workers yet: parallel_for runs on the caller
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Starts threads - 1 workers (threads counts the caller; <= 1 starts none). On a refused
  // start (EAGAIN, ENOMEM, or the fault of runtime/testing_hooks.h) it stops and joins the
  // workers it started and returns kOutOfMemory naming the thread, the count and the OS
  // error. Call once, before the first parallel_for.
  Status start(int threads);
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Asked before every chunk from now on; nullptr = never stop. Set while no parallel_for
  // runs; `check` must outlive the pool's use of it.
  void set_stop_check(StopCheck* check) { stop_check_ = check; }
  // The stop check's answer (false without one); for work that runs long inside one chunk.
  bool should_stop() const { return stop_check_ && stop_check_->should_stop(); }

  // fn(begin, end, worker) for chunks of `grain` items (the last may be shorter); worker in
  // [0, threads()). Returns true when every chunk ran; false when the stop check fired during
  // it, and then chunks may have been skipped (the pool never cuts a chunk short; fn may, by
  // asking should_stop() itself).
  bool parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker_loop(int index);
  void run_chunks(int worker);
  void stop_workers();

  std::vector<std::thread> workers_;
  StopCheck* stop_check_ = nullptr;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int active_ = 0;
  const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<int64_t> next_{0};
  std::atomic<bool> stopped_{false};  // this parallel_for was ended by the stop check
};

}  // namespace cuvil::rt
