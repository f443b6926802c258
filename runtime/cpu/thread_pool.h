// A small persistent thread pool (ggml-style): `parallel_for` splits [0, n) into chunks that
// the calling thread and the workers take from a shared atomic counter; it returns when every
// chunk taken is done. One pool per session; `parallel_for` is not re-entrant.
//
// The crew. A worker helps with a parallel_for only if it joins while chunks are left, and
// the caller waits only for the workers that joined. One 64-bit word holds the parallel_for's
// generation, a closed bit and the number of workers in its crew. The caller opens a
// generation (fields written first, then the word stored: generation g, open, nobody joined),
// takes chunks itself, and once it finds none left closes the word; then it waits until the
// count is 0. A worker joins by compare-and-swap of an open word (count + 1), runs chunks,
// and leaves (count - 1). So a worker the OS has not scheduled, or one that wakes after the
// chunks ran out, costs the caller nothing: with the second core busy, a 2-thread pool runs
// like a 1-thread one instead of waiting a time slice at every kernel. A successful join
// always lands in the live parallel_for (an open word is only ever the current one, and the
// CAS compares the whole word), so a worker that wakes late for a finished generation fails
// its CAS or sees the word closed and touches nothing; after 2^43 parallel_fors the generation
// wraps, which at worst makes one worker sit out one parallel_for.
//
// Waking a sleeping thread costs tens of microseconds, more than a small kernel takes, and a
// model runs kernels back to back. So a worker that finishes its share spins for a bounded
// while (a pause instruction per turn, about kSpinTurns of them, yielding the core every 64)
// watching for the next generation before it sleeps on the condition variable, and the
// caller spins the same way for its crew to leave before it sleeps. Publishing, joining and
// leaving are atomics; the mutex is taken only to put a thread to sleep or to wake one.
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
// once per parallel_for by each thread in the crew, so without spans no clock is read.
//
// Tests hold a worker before it joins with the worker gate of runtime/testing_hooks.h.
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
  // error; more than kMaxWorkers workers is kInvalidArgument. Call once, before the first
  // parallel_for.
  static constexpr int kMaxWorkers = (1 << 20) - 1;
  Status start(int threads);
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Asked before every chunk from now on; nullptr = never stop. Set while no parallel_for
  // runs; `check` must outlive the pool's use of it.
  void set_stop_check(StopCheck* check) { stop_check_ = check; }
  // The stop check's answer (false without one); for work that runs long inside one chunk.
  bool should_stop() const { return stop_check_ && stop_check_->should_stop(); }

  // fn(begin, end, worker) for chunks of `grain` items (the last may be shorter); worker in
  // [0, threads()), 0 being the caller, which may end up running every chunk. Returns true when every chunk ran; false when the stop check fired during
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
  // The crew word: generation in the high 43 bits, then the closed bit, then the count.
  static constexpr int kCountBits = 20;
  static constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
  static_assert(kMaxWorkers <= static_cast<int64_t>(kCountMask), "the crew count must hold every worker");
  static constexpr uint64_t kClosed = uint64_t{1} << kCountBits;
  static constexpr int kGenerationShift = kCountBits + 1;
  static uint64_t generation_of(uint64_t word) { return word >> kGenerationShift; }
  static int64_t crew_of(uint64_t word) { return static_cast<int64_t>(word & kCountMask); }

  void worker_loop(int index);
  bool join_crew(uint64_t generation);
  void leave_crew();
  void run_chunks(int worker);
  void run_chunks_traced(int worker, WorkerSpan& span);
  void stop_workers();

  std::vector<std::thread> workers_;
  StopCheck* stop_check_ = nullptr;
  WorkerSpan* spans_ = nullptr;
  std::atomic<int> spin_turns_{kSpinTurns};
  std::mutex mu_;  // guards only the sleeps: wake_ for workers, done_ for the caller
  std::condition_variable wake_, done_;
  // Generation 0, closed, nobody in it: what a worker that never saw a parallel_for expects.
  // Stored (seq_cst, so release) once the fields of a parallel_for below are written; a
  // worker that joins it (acquire) may read them until it leaves.
  std::atomic<uint64_t> crew_{kClosed};
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};  // workers asleep (or about to be) on wake_
  std::atomic<bool> caller_asleep_{false};
  // The parallel_for's fields: written by the caller only while nobody is in the crew.
  const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1, chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<bool> stopped_{false};  // this parallel_for was ended by the stop check
};

}  // namespace cuvil::rt
