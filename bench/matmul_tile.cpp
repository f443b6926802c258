// Does the tile Mma path keep up with the whole-tensor GEMM? One float32 MatMul [M, K] x
// [K, N], a Gemm with transB and a bias, and a MatMul + bias Add + Relu (an MLP layer), each
// compiled twice in the same process: fused (one tile kernel: Const, Mma over the K loop,
// epilogue, Store; runtime/cpu/tile_interpreter.cpp) and with fusion off (CallOps:
// runtime/cpu/ops/linalg.cpp and the elementwise kernels), run alternately on the same inputs.
// Prints median times, GFLOP/s and the ratio tile / whole-tensor for each size, and the ratio
// of the best (minimum) times, which is steadier on a machine shared with builds.
//   usage: bench_matmul_tile [repeats=9] [threads=1] [sizes: M,K,N ...]
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/fused_vs_unfused.h"

namespace {

using cuvil::bench::Runner;
using cuvil::bench::make_runner;

struct Size {
  int64_t m, k, n;
};

enum class Variant { kMatMul, kGemm, kLayer };  // kLayer: MatMul + bias Add + Relu

std::string gemm_model(const Size& s, Variant variant) {
  const bool gemm = variant == Variant::kGemm;
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("mm");
  auto io = [&](onnx::ValueInfoProto* v, const char* name, int64_t d0, int64_t d1) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(d0);
    t->mutable_shape()->add_dim()->set_dim_value(d1);
  };
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

}  // namespace

int main(int argc, char** argv) {
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
      if (tile.kernels != 1 || tile.calls != 0 || whole.calls != (variant == Variant::kLayer ? 3 : 1)) {
        std::fprintf(stderr, "unexpected lowering: %d tile kernels, %d op calls\n", tile.kernels, whole.calls);
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
