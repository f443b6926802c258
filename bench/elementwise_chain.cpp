// Is the interpreter's dispatch cost amortised? A chain of eight elementwise ops over 16M
// floats, compiled and run through cuvil (one fused tile kernel: load, 8 tile instructions,
// store per 4096-element tile), against a plain C++ loop doing the same math compiled with
// -O3, in the same process, alternating them. GCC does not vectorise that loop (it threads the
// Relu's zero case into a branch), so a second peer does the same math with AVX2 intrinsics,
// 8 floats at a time: the fastest single-threaded loop a user could write by hand. Prints
// median times and both ratios.
//   usage: bench_elementwise_chain [elements=16777216] [repeats=15] [threads=1]
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench/fused_vs_unfused.h"

namespace {

// y = sqrt(abs(relu(x * 1.5 + 0.25) - 0.125) * 0.5 + 1)
__attribute__((noinline)) void reference_loop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] * 1.5f;
    v = v + 0.25f;
    v = v > 0.f ? v : 0.f;
    v = v - 0.125f;
    v = std::fabs(v);
    v = v * 0.5f;
    v = v + 1.0f;
    y[i] = std::sqrt(v);
  }
}

#if defined(__x86_64__)
// The same math, 8 lanes at a time. Relu as max(v, 0) (inputs have no NaN); bitwise equal to
// the scalar loop on these inputs.
__attribute__((noinline, target("avx2"))) void reference_avx2(const float* x, float* y, int64_t n) {
  const __m256 k15 = _mm256_set1_ps(1.5f), k025 = _mm256_set1_ps(0.25f), k0125 = _mm256_set1_ps(0.125f);
  const __m256 k05 = _mm256_set1_ps(0.5f), k1 = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), k15);
    v = _mm256_add_ps(v, k025);
    v = _mm256_max_ps(v, zero);
    v = _mm256_sub_ps(v, k0125);
    v = _mm256_and_ps(v, abs_mask);
    v = _mm256_mul_ps(v, k05);
    v = _mm256_add_ps(v, k1);
    _mm256_storeu_ps(y + i, _mm256_sqrt_ps(v));
  }
  reference_loop(x + i, y + i, n - i);
}
#endif

std::string chain_model(int64_t n) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("chain");
  auto io = [&](onnx::ValueInfoProto* v, const char* name) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(n);
  };
  io(g->add_input(), "x");
  io(g->add_output(), "y");
  auto scalar = [&](const char* name, float v) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_float_data(v);
  };
  scalar("c1", 1.5f);
  scalar("c2", 0.25f);
  scalar("c3", 0.125f);
  scalar("c4", 0.5f);
  scalar("c5", 1.0f);
  struct Op { const char* type; const char* in0; const char* in1; const char* out; };
  const Op ops[] = {{"Mul", "x", "c1", "t1"}, {"Add", "t1", "c2", "t2"}, {"Relu", "t2", nullptr, "t3"},
                    {"Sub", "t3", "c3", "t4"}, {"Abs", "t4", nullptr, "t5"}, {"Mul", "t5", "c4", "t6"},
                    {"Add", "t6", "c5", "t7"}, {"Sqrt", "t7", nullptr, "y"}};
  for (const Op& op : ops) {
    onnx::NodeProto* node = g->add_node();
    node->set_op_type(op.type);
    node->add_input(op.in0);
    if (op.in1) node->add_input(op.in1);
    node->add_output(op.out);
  }
  return m.SerializeAsString();
}

using cuvil::bench::median;

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : (int64_t{1} << 24);
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 15;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  std::string bytes = chain_model(n);
  cuvil::bench::Runner runner;
  if (!cuvil::bench::make_runner(bytes, /*fuse=*/true, threads, &runner)) return 1;
  cuvil::rt::Session& session = *runner.session;
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  for (float& v : x) v = dist(rng);
  std::vector<double> t_cuvil, t_ref, t_avx2;
  std::vector<float> y2(static_cast<size_t>(n));
#if defined(__x86_64__)
  const bool avx2 = __builtin_cpu_supports("avx2");
#else
  const bool avx2 = false;
#endif
  for (int r = 0; r < repeats + 2; ++r) {  // first two rounds warm up
    auto a = std::chrono::steady_clock::now();
    cuvil::rt::Status st = session.set_input(0, cuvil::DType::Float, {n}, x.data(), x.size() * sizeof(float));
    if (st.is_ok()) st = session.run();
    auto b = std::chrono::steady_clock::now();
    reference_loop(x.data(), y.data(), n);
    auto c = std::chrono::steady_clock::now();
#if defined(__x86_64__)
    if (avx2) reference_avx2(x.data(), y2.data(), n);
#endif
    auto d = std::chrono::steady_clock::now();
    if (!st.is_ok()) {
      std::fprintf(stderr, "run: %s\n", st.message().c_str());
      return 1;
    }
    if (r >= 2) {
      t_cuvil.push_back(std::chrono::duration<double, std::milli>(b - a).count());
      t_ref.push_back(std::chrono::duration<double, std::milli>(c - b).count());
      t_avx2.push_back(std::chrono::duration<double, std::milli>(d - c).count());
    }
  }
  const float* out = static_cast<const float*>(session.output(0)->data);
  double max_diff = 0;
  for (int64_t i = 0; i < n; ++i) max_diff = std::max(max_diff, static_cast<double>(std::fabs(out[i] - y[i])));
  double mc = median(t_cuvil), mr = median(t_ref);
  std::printf("elementwise chain: 8 ops over %lld floats, %d repeats, cuvil threads=%d\n",
              static_cast<long long>(n), repeats, threads);
  std::printf("  tile kernels: %d, op calls: %d\n", runner.kernels, runner.calls);
  std::printf("  cuvil  median %.2f ms\n  C++ -O3 loop median %.2f ms\n  ratio cuvil / loop = %.2fx\n", mc, mr, mc / mr);
  std::printf("  max |cuvil - loop| = %g\n", max_diff);
  if (avx2) {
    double max_diff2 = 0;
    for (int64_t i = 0; i < n; ++i) max_diff2 = std::max(max_diff2, static_cast<double>(std::fabs(out[i] - y2[i])));
    const double ma = median(t_avx2);
    std::printf("  C++ AVX2 intrinsics median %.2f ms\n  ratio cuvil / AVX2 loop = %.2fx\n", ma, mc / ma);
    std::printf("  max |cuvil - AVX2 loop| = %g\n", max_diff2);
    max_diff = std::max(max_diff, max_diff2);
  }
  return max_diff <= 1e-6 ? 0 : 1;
}
