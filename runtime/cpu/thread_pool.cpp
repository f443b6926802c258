#include "runtime/cpu/thread_pool.h"

#include <algorithm>
#include <new>
#include <system_error>

#include "runtime/testing_hooks.h"

namespace cuvil::rt {

Status ThreadPool::start(int threads) {
  const int wanted = std::max(1, threads) - 1;
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
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = false;
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::run_chunks(int worker) {
  for (;;) {
    if (stopped_.load(std::memory_order_relaxed)) return;
    if (stop_check_ && stop_check_->should_stop()) {
      stopped_.store(true, std::memory_order_relaxed);
      return;
    }
    int64_t begin = next_.fetch_add(grain_);
    if (begin >= n_) return;
    (*fn_)(begin, std::min(n_, begin + grain_), worker);
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks(index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_.notify_one();
    }
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    next_.store(0);
    stopped_.store(false);
    active_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_chunks(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return active_ == 0; });
  fn_ = nullptr;
  return !stopped_.load();
}

}  // namespace cuvil::rt
