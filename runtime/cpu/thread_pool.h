// A small persistent thread pool (ggml-style): `parallel_for` splits [0, n) into chunks that
// the workers and the calling thread take from a shared atomic counter; it returns when every
// chunk taken is done. One pool per session; `parallel_for` is not re-entrant.
//
// Waking a sleeping thread costs tens of microseconds, more than a small kernel takes, and a
// model runs kernels back to back. So a worker that finishes its share spins for a bounded
// while (a pause instruction per turn, about kSpinTurns of them, yielding the core every 64)
// watching for the next parallel_for before it sleeps on the condition variable, and the
// caller spins the same way for the workers to finish before it sleeps. Publishing work and finishing it are atomics;
// the mutex is taken only to put a thread to sleep or to wake one that is asleep.
//
// Starting is separate from constructing so that a thread the OS refuses is a Status, not an
// exception or a half-started pool: start() either starts every worker or none (the ones it
// started are stopped and joined again before it returns the error).
//
// A StopCheck (the session's deadline and cancellation, runtime/run_stop.h) is asked before
// every chunk, by whichever thread is about to take it; once it answers true no thread takes
// another chunk of that parallel_for, each finishes the chunk it is in, and parallel_for
// returns false. The pool never decides why to stop; the owner reports that.
//
// Tracing (runtime/trace.h): with spans set, each thread notes, per parallel_for, when it
// started its first chunk and ended its last into its own WorkerSpan; the pointer is read
// once per parallel_for by each thread, so without spans no clock is read.
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

// What one thread did in the parallel_fors since its span was last reset (tracing only).
struct WorkerSpan {
  int64_t begin_ns = 0, end_ns = 0;  // start of its first chunk, end of its last
  int64_t chunks = 0;                // 0: it took no chunk
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

  // Per-thread spans (threads() entries, indexed by worker) that every following parallel_for
  // fills in; nullptr = none. Set while no parallel_for runs; the owner resets and reads them
  // between parallel_fors.
  void set_spans(WorkerSpan* spans) { spans_ = spans; }

  // Pause-instruction turns a waiting thread spins before it sleeps (default kSpinTurns);
  // 0 sleeps at once. Set while no parallel_for runs (tests use 0 to exercise the sleep path).
  static constexpr int kSpinTurns = 1 << 13;
  void set_spin_turns(int turns) { spin_turns_.store(turns < 0 ? 0 : turns, std::memory_order_relaxed); }

 private:
  void worker_loop(int index);
  void run_chunks(int worker);
  void run_chunks_traced(int worker, WorkerSpan& span);
  void stop_workers();

  std::vector<std::thread> workers_;
  StopCheck* stop_check_ = nullptr;
  WorkerSpan* spans_ = nullptr;
  std::atomic<int> spin_turns_{kSpinTurns};
  std::mutex mu_;  // guards only the sleeps: wake_ for workers, done_ for the caller
  std::condition_variable wake_, done_;
  // Incremented (release) once the fields of a parallel_for below are written; a worker that
  // sees a new value (acquire) may read them.
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};       // workers asleep (or about to be) on wake_
  std::atomic<int> active_{0};         // workers not yet done with this parallel_for
  std::atomic<bool> caller_asleep_{false};
  const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<int64_t> next_{0};
  std::atomic<bool> stopped_{false};  // this parallel_for was ended by the stop check
};

}  // namespace cuvil::rt
