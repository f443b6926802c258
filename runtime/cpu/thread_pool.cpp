#include "runtime/cpu/thread_pool.h"

#include <algorithm>
#include <new>
#include <system_error>

#include "runtime/testing_hooks.h"
#include "runtime/trace.h"

namespace cuvil::rt {
namespace {

// One turn of a spin-wait: the pause tells the core this is a spin (saving power and the
// sibling hyperthread's issue slots) and keeps the loop from flooding the memory system.
// Every kYieldEvery turns the spinner also yields its core: with more runnable threads than
// cores (a loaded machine, or more session threads than cores) a pure spin would hold the
// core that the thread with the work needs.
constexpr int kYieldEvery = 64;
inline void spin_turn(int turn) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
  if (turn % kYieldEvery == 0) std::this_thread::yield();
}

}  // namespace

Status ThreadPool::start(int threads) {
  const int wanted = std::max(1, threads) - 1;
  if (wanted > kMaxWorkers)
    return make_status(StatusCode::kInvalidArgument, "threads = ", threads, " is above the pool's maximum of ",
                       kMaxWorkers + 1, " threads");
  workers_.reserve(static_cast<size_t>(wanted));  // no reallocation while threads run
  for (int i = 1; i <= wanted; ++i) {
    std::error_code error;
    if (int injected = testing::take_thread_start_fault()) {
      error = std::error_code(injected, std::generic_category());
    } else {
      try {
        workers_.emplace_back([this, i] { worker_loop(i); });
        continue;
      } catch (const std::system_error& e) {
        error = e.code();
      } catch (const std::bad_alloc&) {
        error = std::make_error_code(std::errc::not_enough_memory);
      }
    }
    stop_workers();
    return make_status(StatusCode::kOutOfMemory, "cannot start worker thread ", i, " of ", wanted,
                       " (threads = ", threads, ", counting the calling thread): ", error.message(),
                       " (errno ", error.value(), ")");
  }
  return Status::ok();
}

void ThreadPool::stop_workers() {
  {
    // Under the mutex, so that a worker between its check and its sleep cannot miss it.
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  stop_.store(false);
}

ThreadPool::~ThreadPool() { stop_workers(); }

// Chunk c covers [c * grain, c * grain + grain) cut at n; counting chunks rather than items
// keeps the counter far from overflow however many threads overshoot it.
void ThreadPool::run_chunks(int worker) {
  if (spans_) return run_chunks_traced(worker, spans_[worker]);
  for (;;) {
    if (stopped_.load(std::memory_order_relaxed)) return;
    if (stop_check_ && stop_check_->should_stop()) {
      stopped_.store(true, std::memory_order_relaxed);
      return;
    }
    const int64_t chunk = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (chunk >= chunks_) return;
    const int64_t begin = chunk * grain_;
    (*fn_)(begin, begin + std::min(grain_, n_ - begin), worker);
  }
}

// run_chunks with a clock read around every chunk, into this thread's span.
void ThreadPool::run_chunks_traced(int worker, WorkerSpan& span) {
  for (;;) {
    if (stopped_.load(std::memory_order_relaxed)) return;
    if (stop_check_ && stop_check_->should_stop()) {
      stopped_.store(true, std::memory_order_relaxed);
      return;
    }
    const int64_t chunk = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (chunk >= chunks_) return;
    const int64_t begin = chunk * grain_;
    const int64_t t0 = trace_clock_ns();
    (*fn_)(begin, begin + std::min(grain_, n_ - begin), worker);
    if (span.chunks++ == 0) span.begin_ns = t0;
    span.end_ns = trace_clock_ns();
  }
}

// Joins the crew of `generation` if it is still open; false if it closed or a newer one
// opened (the caller of this loops back and looks again). The CAS compares the whole word, so
// a success means the word was open at that instant: the parallel_for it names is live and
// its fields, stored before the word (release), are visible (acquire).
bool ThreadPool::join_crew(uint64_t generation) {
  uint64_t word = crew_.load(std::memory_order_relaxed);
  while (generation_of(word) == generation && !(word & kClosed)) {
    if (crew_.compare_exchange_weak(word, word + 1)) return true;
  }
  return false;
}

// The last worker out of a closed crew wakes the caller if it went to sleep; the release of
// the decrement publishes this worker's chunks to the caller, which reads the word (acquire)
// before it returns.
void ThreadPool::leave_crew() {
  const uint64_t before = crew_.fetch_sub(1);
  if ((before & kClosed) && crew_of(before) == 1 && caller_asleep_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    done_.notify_one();
  }
}

// The sleeps pair a seq_cst store with a seq_cst load on each side (a worker: sleepers_ up,
// then crew_; the caller: crew_ stored, then sleepers_), so at least one side sees the other:
// either the worker sees the new generation and does not sleep, or the caller sees a sleeper
// and wakes it, taking the mutex first so that the wake cannot fall between the worker's
// check and its wait. caller_asleep_ and the crew's count pair the same way for the caller.
void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;  // the last generation this worker looked at
  for (;;) {
    uint64_t g = generation_of(crew_.load(std::memory_order_acquire));
    for (int turn = spin_turns_.load(std::memory_order_relaxed);
         g == seen && turn > 0 && !stop_.load(std::memory_order_relaxed); --turn) {
      spin_turn(turn);
      g = generation_of(crew_.load(std::memory_order_acquire));
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      while (!stop_.load() && (g = generation_of(crew_.load())) == seen) wake_.wait(lock);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;  // only ever set while no parallel_for runs
    seen = g;
    testing::pass_worker_gate(index);
    if (!join_crew(g)) continue;  // too late: its chunks ran out, or a newer one is open
    run_chunks(index);
    leave_crew();
  }
}

bool ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return true;
  grain = std::max<int64_t>(1, grain);
  if (workers_.empty() || n <= grain) {
    // On the caller alone, still one chunk at a time, so that a stop lands between chunks.
    if (!stop_check_) {
      fn(0, n, 0);
      return true;
    }
    for (int64_t begin = 0; begin < n; begin += grain) {
      if (stop_check_->should_stop()) return false;
      fn(begin, std::min(n, begin + grain), 0);
      if (n - begin <= grain) break;  // begin + grain would pass n (and could overflow)
    }
    return true;
  }
  // The previous crew is closed and empty (the caller waited for that), and nobody joins a
  // closed crew, so no worker reads these fields while they are written.
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  chunks_ = (n - 1) / grain + 1;
  next_chunk_.store(0, std::memory_order_relaxed);
  stopped_.store(false, std::memory_order_relaxed);
  const uint64_t generation = generation_of(crew_.load(std::memory_order_relaxed)) + 1;
  crew_.store(generation << kGenerationShift);  // open, nobody in it; publishes the fields
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    wake_.notify_all();
  }
  run_chunks(0);  // the caller takes chunks too, and returns only when none is left to take
  // From here on nobody joins; wait only for those who did.
  if (crew_of(crew_.fetch_or(kClosed)) != 0) {
    for (int turn = spin_turns_.load(std::memory_order_relaxed);
         turn > 0 && crew_of(crew_.load(std::memory_order_acquire)) != 0; --turn)
      spin_turn(turn);
    if (crew_of(crew_.load()) != 0) {
      std::unique_lock<std::mutex> lock(mu_);
      caller_asleep_.store(true);
      while (crew_of(crew_.load()) != 0) done_.wait(lock);
      caller_asleep_.store(false);
    }
  }
  fn_ = nullptr;
  return !stopped_.load();
}

}  // namespace cuvil::rt
