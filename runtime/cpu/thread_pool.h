// A small persistent thread pool (ggml-style): `parallel_for` splits [0, n) into chunks that
// the workers and the calling thread take from a shared atomic counter; it returns when every
// chunk is done. One pool per session; `parallel_for` is not re-entrant.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cuvil::rt {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // total threads including the caller; >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // fn(begin, end, worker) for chunks of about `grain` items; worker in [0, threads()).
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker_loop(int index);
  void run_chunks(int worker);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int active_ = 0;
  const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<int64_t> next_{0};
};

}  // namespace cuvil::rt
