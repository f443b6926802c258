#include "runtime/cpu/thread_pool.h"

#include <algorithm>

namespace cuvil::rt {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(int worker) {
  for (;;) {
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

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (workers_.empty() || n <= grain) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    next_.store(0);
    active_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_chunks(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return active_ == 0; });
  fn_ = nullptr;
}

}  // namespace cuvil::rt
