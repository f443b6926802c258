// Issue 8's bar for row-wise kernels: LayerNormalization, Softmax and Gelu over a float32
// [4096, 768] tensor (12 MiB: it stays in L3 on the reference machine, so memory bandwidth is
// judged by a copy of the same bytes, not by DRAM) against a memcpy of those bytes, measured
// alternately in the same run, once per CPU path this machine supports (runtime/cpu/
// cpu_features.h; the kernels' maths is runtime/cpu/vec_math.h). Each op is a one-node ONNX
// model compiled in-process as cuvilc compiles it, with fusion on ("tile": what a package runs)
// and off ("kernel": the whole-tensor kernel as a CallOp), run through a session whose input is
// borrowed, not copied. Prints median times and op/copy ratios; the bar is op time <= copy
// time / 0.7 (a ratio of 1.43 or less) for the fused form. Not a test: never asserts on time.
//   usage: bench_normalize_vs_copy [repeats=21] [threads=1] [rows=4096] [cols=768]
#include <onnx/onnx_pb.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/fused_vs_unfused.h"
#include "runtime/cpu/cpu_features.h"

namespace {

using cuvil::bench::Runner;
using cuvil::bench::make_runner;
using cuvil::bench::median;

std::string one_op_model(const std::string& op, int64_t rows, int64_t cols) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(op == "Gelu" ? 20 : 17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name(op);
  auto io = [&](onnx::ValueInfoProto* v, const char* name) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(rows);
    t->mutable_shape()->add_dim()->set_dim_value(cols);
  };
  io(g->add_input(), "x");
  io(g->add_output(), "y");
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->add_input("x");
  n->add_output("y");
  if (op == "LayerNormalization") {
    for (const char* name : {"scale", "bias"}) {
      onnx::TensorProto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::FLOAT);
      t->add_dims(cols);
      for (int64_t i = 0; i < cols; ++i) t->add_float_data(name[0] == 's' ? 1.0f + 0.001f * i : 0.01f * (i % 7));
      n->add_input(name);
    }
  }
  if (op != "Gelu") {
    auto* a = n->add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(-1);
  }
  return m.SerializeAsString();
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 21;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const int64_t rows = argc > 3 ? std::atoll(argv[3]) : 4096, cols = argc > 4 ? std::atoll(argv[4]) : 768;
  std::printf("row-wise ops on float32 [%lld, %lld] (%.1f MiB) vs memcpy of the same bytes, %d repeats, "
              "threads=%d\nCPU: %s\n",
              static_cast<long long>(rows), static_cast<long long>(cols), rows * cols * 4.0 / (1 << 20), repeats,
              threads, cuvil::rt::cpu_features_summary().c_str());
  std::vector<float> x(static_cast<size_t>(rows * cols)), dst(x.size());
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.5f, 2.0f);
  for (float& v : x) v = dist(rng);
  std::printf("%-8s %-19s %-6s | %9s | %9s | %9s\n", "path", "op", "form", "op ms", "copy ms", "op/copy");
  for (cuvil::rt::CpuPath path : cuvil::rt::supported_cpu_paths()) {
    cuvil::rt::set_cpu_path_for_testing(path);
    for (const std::string op : {"LayerNormalization", "Softmax", "Gelu"})
    for (const bool fuse : {true, false}) {
      Runner r;
      if (!make_runner(one_op_model(op, rows, cols), fuse, threads, &r)) return 1;
      std::vector<double> t_op, t_copy;
      for (int round = 0; round < repeats + 1; ++round) {
        auto t0 = std::chrono::steady_clock::now();
        cuvil::rt::Status st = r.session->set_input(0, cuvil::DType::Float, {rows, cols}, x.data(), x.size() * 4);
        if (st.is_ok()) st = r.session->run();
        auto t1 = std::chrono::steady_clock::now();
        std::memcpy(dst.data(), x.data(), x.size() * sizeof(float));
        asm volatile("" : : "r"(dst.data()) : "memory");
        auto t2 = std::chrono::steady_clock::now();
        if (!st.is_ok()) {
          std::fprintf(stderr, "%s: %s\n", op.c_str(), st.message().c_str());
          return 1;
        }
        if (round == 0) continue;  // warm-up
        t_op.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        t_copy.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      }
      const double mo = median(t_op), mc = median(t_copy);
      std::printf("%-8s %-19s %-6s | %9.3f | %9.3f | %8.2fx\n", cuvil::rt::cpu_path_name(path), op.c_str(),
                  fuse ? "tile" : "kernel", mo, mc, mo / mc);
    }
  }
  std::printf("op/copy = median op time / median copy time; issue 8 asks for <= 1.43 (70%% of copy speed)\n");
  return 0;
}
