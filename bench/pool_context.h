// An OpContext over the runtime's own thread pool for benchmarks that call kernels directly
// (gemm(), the int8 GEMM): threads() and parallel_for() as a session gives them, everything a
// node would have (inputs, attributes, outputs) absent. Shared by bench/gemm_roofline.cpp and
// bench/int8_gemm.cpp.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "runtime/cpu/thread_pool.h"
#include "runtime/op_kernel.h"

namespace cuvil::bench {

class PoolContext : public cuvil::rt::OpContext {
 public:
  explicit PoolContext(int threads) {
    const cuvil::rt::Status st = pool_.start(threads);
    if (!st.is_ok()) {
      std::fprintf(stderr, "thread pool: %s\n", st.message().c_str());
      std::exit(1);
    }
  }
  const char* op_name() const override { return "MatMul"; }
  const char* node_name() const override { return "bench"; }
  int opset() const override { return 13; }
  const cuvil::rt::AttrReader& attrs() const override { std::abort(); }
  size_t num_inputs() const override { return 0; }
  const cuvil::rt::TensorView* input(size_t) const override { return nullptr; }
  size_t num_outputs() const override { return 0; }
  bool output_wanted(size_t) const override { return false; }
  cuvil::rt::Status allocate_output(size_t, cuvil::DType, const std::vector<int64_t>&,
                                    cuvil::rt::TensorView**) override {
    std::abort();
  }
  int threads() const override { return pool_.threads(); }
  void parallel_for(int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t), void* arg) override {
    pool_.parallel_for(n, grain, [&](int64_t b, int64_t e, int) { fn(arg, b, e); });
  }

 private:
  cuvil::rt::ThreadPool pool_;
};

}  // namespace cuvil::bench
