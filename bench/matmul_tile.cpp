// Does the tile Mma path keep up with the whole-tensor GEMM? One float32 MatMul [M, K] x
// [K, N], a Gemm with transB and a bias, and a MatMul + bias Add + Relu (an MLP layer), each
// compiled twice in the same process: fused (one tile kernel: Const, Mma over the K loop,
// epilogue, Store; runtime/cpu/tile_interpreter.cpp) and with fusion off (CallOps:
// runtime/cpu/ops/linalg.cpp and the elementwise kernels), run alternately on the same inputs.
// Prints median times, GFLOP/s and the ratio tile / whole-tensor for each size, and the ratio
// of the best (minimum) times, which is steadier on a machine shared with builds.
//   usage: bench_matmul_tile [repeats=9] [threads=1] [sizes: M,K,N ...]
//          bench_matmul_tile --prefill [repeats=9] [rows=32]   (constant weights past the LLC)
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/fused_vs_unfused.h"

namespace {

using cuvil::bench::Runner;
using cuvil::bench::make_runner;

struct Size {
  int64_t m, k, n;
};

enum class Variant { kMatMul, kGemm, kLayer };  // kLayer: MatMul + bias Add + Relu

// The graph of a new opset-13 model named `name`.
onnx::GraphProto* new_graph(onnx::ModelProto& m, const char* name) {
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name(name);
  return g;
}

// A float32 [d0, d1] graph input or output.
void io(onnx::ValueInfoProto* v, const char* name, int64_t d0, int64_t d1) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  t->mutable_shape()->add_dim()->set_dim_value(d0);
  t->mutable_shape()->add_dim()->set_dim_value(d1);
}

std::string gemm_model(const Size& s, Variant variant) {
  const bool gemm = variant == Variant::kGemm;
  onnx::ModelProto m;
  onnx::GraphProto* g = new_graph(m, "mm");
  io(g->add_input(), "a", s.m, s.k);
  if (gemm) io(g->add_input(), "b", s.n, s.k);  // transB
  else io(g->add_input(), "b", s.k, s.n);
  io(g->add_output(), "y", s.m, s.n);
  onnx::NodeProto* node = g->add_node();
  node->set_op_type(gemm ? "Gemm" : "MatMul");
  node->add_input("a");
  node->add_input("b");
  if (gemm) {
    onnx::TensorProto* c = g->add_initializer();
    c->set_name("c");
    c->set_data_type(onnx::TensorProto::FLOAT);
    c->add_dims(s.n);
    for (int64_t j = 0; j < s.n; ++j) c->add_float_data(0.01f * static_cast<float>(j % 7));
    node->add_input("c");
    auto* tb = node->add_attribute();
    tb->set_name("transB");
    tb->set_type(onnx::AttributeProto::INT);
    tb->set_i(1);
  }
  if (variant != Variant::kLayer) {
    node->add_output("y");
    return m.SerializeAsString();
  }
  node->add_output("mm");
  onnx::TensorProto* bias = g->add_initializer();
  bias->set_name("bias");
  bias->set_data_type(onnx::TensorProto::FLOAT);
  bias->add_dims(s.n);
  for (int64_t j = 0; j < s.n; ++j) bias->add_float_data(0.1f * static_cast<float>(j % 5) - 0.2f);
  onnx::NodeProto* add = g->add_node();
  add->set_op_type("Add");
  add->add_input("mm");
  add->add_input("bias");
  add->add_output("pre");
  onnx::NodeProto* relu = g->add_node();
  relu->set_op_type("Relu");
  relu->add_input("pre");
  relu->add_output("y");
  return m.SerializeAsString();
}

// A decoder's MLP blocks as constant weights: x [rows, 768] through `layers` pairs of MatMul
// with [768, 3072] and [3072, 768] initializers (GPT-2-small's fc and proj), the prefill's
// largest products.
std::string prefill_model(int64_t rows, int layers) {
  onnx::ModelProto m;
  onnx::GraphProto* g = new_graph(m, "mlp");
  io(g->add_input(), "x", rows, 768);
  io(g->add_output(), "y", rows, 768);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  std::string prev = "x";
  for (int i = 0; i < 2 * layers; ++i) {
    const int64_t k = i % 2 ? 3072 : 768, n = i % 2 ? 768 : 3072;
    onnx::TensorProto* w = g->add_initializer();
    w->set_name("w" + std::to_string(i));
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_dims(k);
    w->add_dims(n);
    std::vector<float> v(static_cast<size_t>(k * n));
    for (float& x : v) x = dist(rng);
    w->set_raw_data(v.data(), v.size() * sizeof(float));
    onnx::NodeProto* node = g->add_node();
    node->set_op_type("MatMul");
    node->add_input(prev);
    node->add_input(w->name());
    prev = i + 1 == 2 * layers ? "y" : "h" + std::to_string(i);
    node->add_output(prev);
  }
  return m.SerializeAsString();
}

// --prefill: prefill_model through the tile Mma kernels and through the whole-tensor MatMul,
// alternately; both read the weights' panels packed when the session was made. 6 layers are
// 108 MiB of weights, past the last-level cache of the machines of PERF_NOTES.md, so every
// panel comes from DRAM as in a decoder's prefill. Prints GFLOP/s as a fraction of one
// core's FMA peak on the active kernel path, measured in the same run.
int prefill(int repeats, int64_t rows) {
  constexpr int kLayers = 6;
  const std::string bytes = prefill_model(rows, kLayers);
  Runner tile, whole;
  if (!make_runner(bytes, true, 1, &tile) || !make_runner(bytes, false, 1, &whole)) return 1;
  std::vector<float> x(static_cast<size_t>(rows * 768));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (float& v : x) v = dist(rng);
  const cuvil::bench::Timing t = cuvil::bench::time_alternately(tile, whole, repeats, [&](cuvil::rt::Session& session) {
    return session.set_input(0, cuvil::DType::Float, {rows, 768}, x.data(), x.size() * 4);
  });
  const double peak = cuvil::bench::fma_peak_gflops(cuvil::rt::active_cpu_path(), 3);
  const double flops = 2.0 * static_cast<double>(rows) * 768 * 3072 * 2 * kLayers;
  std::printf("prefill MLP: %lld rows, %d x (768x3072, 3072x768) weights (%.0f MiB), 1 thread, %d repeats, "
              "path %s, FMA peak %.1f GFLOP/s\n", static_cast<long long>(rows), kLayers,
              2.0 * kLayers * 768 * 3072 * 4 / (1 << 20), repeats, cuvil::rt::cpu_path_name(cuvil::rt::active_cpu_path()),
              peak);
  for (const auto& [name, ms, best] : {std::tuple<const char*, double, double>{"tile Mma", t.tile_median, t.tile_best},
                                       {"whole-tensor", t.whole_median, t.whole_best}})
    std::printf("  %-12s median %8.3f ms %6.1f GFLOP/s (%4.1f%% of peak); best %8.3f ms (%4.1f%%)\n", name, ms,
                flops / ms * 1e-6, 100 * flops / ms * 1e-6 / peak, best, 100 * flops / best * 1e-6 / peak);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--prefill")
    return prefill(argc > 2 ? std::max(1, std::atoi(argv[2])) : 9, argc > 3 ? std::max(1LL, std::atoll(argv[3])) : 32);
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 9;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  std::vector<Size> sizes;
  for (int i = 3; i < argc; ++i) {
    Size s{};
    if (std::sscanf(argv[i], "%lld,%lld,%lld", reinterpret_cast<long long*>(&s.m),
                    reinterpret_cast<long long*>(&s.k), reinterpret_cast<long long*>(&s.n)) == 3)
      sizes.push_back(s);
  }
  if (sizes.empty()) sizes = {{512, 512, 512}, {64, 4096, 64}, {1024, 256, 48}, {8, 1024, 1024}};
  std::printf("matmul: tile Mma kernel vs whole-tensor kernel (--no-fusion), %d repeats, threads=%d\n",
              repeats, threads);
  std::printf("%-9s %6s %6s %6s | %10s %8s | %10s %8s | %6s %6s %s\n", "op", "M", "K", "N", "tile ms",
              "GFLOP/s", "whole ms", "GFLOP/s", "ratio", "best", "max|diff|");
  int status = 0;
  for (Variant variant : {Variant::kMatMul, Variant::kGemm, Variant::kLayer}) {
    const bool gemm = variant == Variant::kGemm;
    for (const Size& s : sizes) {
      const std::string bytes = gemm_model(s, variant);
      Runner tile, whole;
      if (!make_runner(bytes, true, threads, &tile) || !make_runner(bytes, false, threads, &whole)) return 1;
      // Unfused, the layer is one op call (the FusedMatMul the pass pipeline makes of MatMul, Add
      // and Relu) or three; either way no tile kernel.
      if (tile.kernels != 1 || tile.calls != 0 || whole.kernels != 0 || whole.calls < 1) {
        std::fprintf(stderr, "unexpected lowering: %d tile kernels, %d op calls fused; %d, %d unfused\n",
                     tile.kernels, tile.calls, whole.kernels, whole.calls);
        return 1;
      }
      std::mt19937 rng(11);
      std::uniform_real_distribution<float> dist(-1.f, 1.f);
      std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n));
      for (float& v : a) v = dist(rng);
      for (float& v : b) v = dist(rng);
      const std::vector<int64_t> db = gemm ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n};
      const cuvil::bench::Timing t = cuvil::bench::time_alternately(tile, whole, repeats, [&](cuvil::rt::Session& session) {
        cuvil::rt::Status st = session.set_input(0, cuvil::DType::Float, {s.m, s.k}, a.data(), a.size() * 4);
        return st.is_ok() ? session.set_input(1, cuvil::DType::Float, db, b.data(), b.size() * 4) : st;
      });
      const float* yt = static_cast<const float*>(tile.session->output(0)->data);
      const float* yw = static_cast<const float*>(whole.session->output(0)->data);
      double diff = 0;
      for (int64_t i = 0; i < s.m * s.n; ++i) diff = std::max(diff, static_cast<double>(std::fabs(yt[i] - yw[i])));
      const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n);
      const double mt = t.tile_median, mw = t.whole_median, bt = t.tile_best, bw = t.whole_best;
      const char* name = gemm ? "Gemm^T+C" : variant == Variant::kLayer ? "MM+b+Relu" : "MatMul";
      std::printf("%-9s %6lld %6lld %6lld | %10.3f %8.1f | %10.3f %8.1f | %5.2fx %5.2fx %.2g\n", name,
                  static_cast<long long>(s.m), static_cast<long long>(s.k), static_cast<long long>(s.n), mt,
                  flops / mt * 1e-6, mw, flops / mw * 1e-6, mt / mw, bt / bw, diff);
      if (!(diff <= 1e-3 * std::sqrt(static_cast<double>(s.k)))) status = 1;
    }
  }
  std::printf("ratio = tile / whole-tensor median time, best = ratio of minimum times "
              "(below 1 means the tile path is faster)\n");
  return status;
}
