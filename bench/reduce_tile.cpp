// Do reduction loop kernels keep up with the whole-tensor Reduce kernels? ReduceSum and
// ReduceMax over the last axis of a float32 [rows, cols] tensor (keepdims 0), compiled twice
// in the same process: fused (one tile kernel: Const | Load chunk, Reduce* | Store) and with
// fusion off (CallOp: runtime/cpu/ops/reduce.cpp), run alternately on the same input. Prints
// median times and the ratio tile / whole-tensor (and of the best times).
//   usage: bench_reduce_tile [repeats=9] [threads=1] [sizes: ROWS,COLS ...]
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
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

std::string reduce_model(const char* op, int64_t rows, int64_t cols) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("reduce");
  auto io = [&](onnx::ValueInfoProto* v, const char* name, std::vector<int64_t> dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  io(g->add_input(), "x", {rows, cols});
  io(g->add_output(), "y", {rows});
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->add_input("x");
  if (std::string(op) == "ReduceSum") {  // opset 13: axes is an input
    onnx::TensorProto* axes = g->add_initializer();
    axes->set_name("axes");
    axes->set_data_type(onnx::TensorProto::INT64);
    axes->add_dims(1);
    axes->add_int64_data(1);
    n->add_input("axes");
  } else {
    auto* a = n->add_attribute();
    a->set_name("axes");
    a->set_type(onnx::AttributeProto::INTS);
    a->add_ints(1);
  }
  auto* k = n->add_attribute();
  k->set_name("keepdims");
  k->set_type(onnx::AttributeProto::INT);
  k->set_i(0);
  n->add_output("y");
  return m.SerializeAsString();
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 9;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  std::vector<std::pair<int64_t, int64_t>> sizes;
  for (int i = 3; i < argc; ++i) {
    long long r = 0, c = 0;
    if (std::sscanf(argv[i], "%lld,%lld", &r, &c) == 2) sizes.emplace_back(r, c);
  }
  if (sizes.empty()) sizes = {{4096, 1024}, {64, 65536}, {65536, 16}, {16384, 768}};
  std::printf("last-axis reductions: tile loop kernel vs whole-tensor kernel (--no-fusion), %d repeats, threads=%d\n",
              repeats, threads);
  std::printf("%-10s %7s %7s | %9s | %9s | %6s %6s\n", "op", "rows", "cols", "tile ms", "whole ms", "ratio", "best");
  for (const char* op : {"ReduceSum", "ReduceMax"}) {
    for (const auto& [rows, cols] : sizes) {
      const std::string bytes = reduce_model(op, rows, cols);
      Runner tile, whole;
      if (!make_runner(bytes, true, threads, &tile) || !make_runner(bytes, false, threads, &whole)) return 1;
      if (tile.kernels != 1 || whole.kernels != 0) {
        std::fprintf(stderr, "unexpected lowering: %d tile kernels fused, %d unfused\n", tile.kernels, whole.kernels);
        return 1;
      }
      std::vector<float> x(static_cast<size_t>(rows * cols));
      std::mt19937 rng(5);
      std::uniform_real_distribution<float> dist(-1.f, 1.f);
      for (float& v : x) v = dist(rng);
      const cuvil::bench::Timing t = cuvil::bench::time_alternately(tile, whole, repeats, [&](cuvil::rt::Session& session) {
        return session.set_input(0, cuvil::DType::Float, {rows, cols}, x.data(), x.size() * 4);
      });
      const double mt = t.tile_median, mw = t.whole_median, bt = t.tile_best, bw = t.whole_best;
      std::printf("%-10s %7lld %7lld | %9.3f | %9.3f | %5.2fx %5.2fx\n", op, static_cast<long long>(rows),
                  static_cast<long long>(cols), mt, mw, mt / mw, bt / bw);
    }
  }
  std::printf("ratio = tile / whole-tensor median time, best = ratio of minimum times\n");
  return 0;
}
