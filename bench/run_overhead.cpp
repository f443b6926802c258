// What does a run cost beyond its kernels? A model of N tiny ops (y = x + c1 + c2 + ... + cN
// over [1, 8] floats: N Add nodes) compiled two ways: without fusion (N whole-tensor op calls,
// the dispatch floor per op) and with fusion (the chain becomes tile kernels). Each is run
// many times; the benchmark prints the time per run and per op call, and the split the
// runtime's statistics give (binding shapes, dispatch, inside kernels). The peer, in the same
// process, is the same arithmetic as a plain loop: what the ops would cost with no runtime at
// all. Do not record numbers from a loaded machine.
//   usage: bench_run_overhead [ops=200] [runs=20000] [threads=1]
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/fused_vs_unfused.h"

namespace {

constexpr int64_t kWidth = 8;

std::string add_chain_model(int ops) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("add_chain");
  auto io = [&](onnx::ValueInfoProto* v, const std::string& name) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(1);
    t->mutable_shape()->add_dim()->set_dim_value(kWidth);
  };
  io(g->add_input(), "x");
  io(g->add_output(), "y");
  std::string prev = "x";
  for (int i = 0; i < ops; ++i) {
    // A distinct constant per op, so that no pass folds two Adds into one.
    onnx::TensorProto* c = g->add_initializer();
    c->set_name("c" + std::to_string(i));
    c->set_data_type(onnx::TensorProto::FLOAT);
    c->add_dims(1);
    c->add_dims(kWidth);
    for (int64_t k = 0; k < kWidth; ++k) c->add_float_data(0.001f * static_cast<float>(i + 1 + k));
    onnx::NodeProto* node = g->add_node();
    node->set_op_type("Add");
    node->set_name("add" + std::to_string(i));
    node->add_input(prev);
    node->add_input(c->name());
    prev = i + 1 == ops ? "y" : "t" + std::to_string(i);
    node->add_output(prev);
  }
  return m.SerializeAsString();
}

// The same arithmetic with no runtime: N adds of a [1, 8] constant.
__attribute__((noinline)) void reference_chain(const float* x, const std::vector<std::vector<float>>& c, float* y) {
  float acc[kWidth];
  for (int64_t k = 0; k < kWidth; ++k) acc[k] = x[k];
  for (const std::vector<float>& ci : c)
    for (int64_t k = 0; k < kWidth; ++k) acc[k] += ci[static_cast<size_t>(k)];
  for (int64_t k = 0; k < kWidth; ++k) y[k] = acc[k];
}

struct Result {
  double run_us = 0;  // median wall time of set_input + run
  double bind_us = 0, dispatch_us = 0, kernel_us = 0;  // medians from the run statistics
  int64_t kernel_calls = 0, instructions = 0;
};

// Times `runs` runs with statistics off (the latency), then `runs` more with them on (the
// split). Exits on a failed run.
Result measure(cuvil::rt::Session& s, const std::vector<float>& x, int runs) {
  using clock = std::chrono::steady_clock;
  auto run_once = [&]() {
    cuvil::rt::Status st = s.set_input(0, cuvil::DType::Float, {1, kWidth}, x.data(), x.size() * sizeof(float));
    if (st.is_ok()) st = s.run();
    if (!st.is_ok()) {
      std::fprintf(stderr, "run: %s\n", st.message().c_str());
      std::exit(1);
    }
  };
  for (int i = 0; i < runs / 10 + 10; ++i) run_once();  // warm up
  Result r;
  std::vector<double> wall, bind, dispatch, kernel;
  for (int i = 0; i < runs; ++i) {
    auto a = clock::now();
    run_once();
    wall.push_back(std::chrono::duration<double, std::micro>(clock::now() - a).count());
  }
  s.enable_run_stats(true);
  for (int i = 0; i < runs; ++i) {
    run_once();
    const cuvil::rt::RunStats& st = s.run_stats();
    bind.push_back(st.bind_ns / 1e3);
    dispatch.push_back(st.dispatch_ns() / 1e3);
    kernel.push_back(st.kernel_ns / 1e3);
    r.kernel_calls = st.kernel_calls;
    r.instructions = st.instructions;
  }
  s.enable_run_stats(false);
  r.run_us = cuvil::bench::median(wall);
  r.bind_us = cuvil::bench::median(bind);
  r.dispatch_us = cuvil::bench::median(dispatch);
  r.kernel_us = cuvil::bench::median(kernel);
  return r;
}

void print(const char* what, int ops, const Result& r) {
  std::printf("  %s: %lld kernel calls, %lld instructions\n", what, static_cast<long long>(r.kernel_calls),
              static_cast<long long>(r.instructions));
  std::printf("    per run %.2f us, per op %.3f us, per kernel call %.3f us\n", r.run_us, r.run_us / ops,
              r.kernel_calls ? r.run_us / static_cast<double>(r.kernel_calls) : 0.0);
  std::printf("    split (medians, statistics on): bind shapes %.2f us, dispatch %.2f us (%.0f ns per kernel call), "
              "in kernels %.2f us\n",
              r.bind_us, r.dispatch_us, r.kernel_calls ? r.dispatch_us * 1e3 / static_cast<double>(r.kernel_calls) : 0.0,
              r.kernel_us);
}

}  // namespace

int main(int argc, char** argv) {
  const int ops = argc > 1 ? std::atoi(argv[1]) : 200;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 20000;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  if (ops < 1 || runs < 1 || threads < 1) {
    std::fprintf(stderr, "usage: bench_run_overhead [ops>=1] [runs>=1] [threads>=1]\n");
    return 2;
  }
  const std::string bytes = add_chain_model(ops);
  cuvil::bench::Runner unfused, fused;
  if (!cuvil::bench::make_runner(bytes, /*fuse=*/false, threads, &unfused)) return 1;
  if (!cuvil::bench::make_runner(bytes, /*fuse=*/true, threads, &fused)) return 1;

  std::vector<float> x(kWidth);
  for (int64_t k = 0; k < kWidth; ++k) x[static_cast<size_t>(k)] = 0.5f * static_cast<float>(k) - 1.f;
  std::vector<std::vector<float>> c(static_cast<size_t>(ops), std::vector<float>(kWidth));
  for (int i = 0; i < ops; ++i)
    for (int64_t k = 0; k < kWidth; ++k) c[static_cast<size_t>(i)][static_cast<size_t>(k)] = 0.001f * static_cast<float>(i + 1 + k);

  const Result u = measure(*unfused.session, x, runs);
  const Result f = measure(*fused.session, x, runs);

  std::vector<float> y(kWidth);
  std::vector<double> ref;
  for (int i = 0; i < runs; ++i) {
    auto a = std::chrono::steady_clock::now();
    reference_chain(x.data(), c, y.data());
    ref.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  const double ref_us = cuvil::bench::median(ref);

  // Both compiled programs must compute what the loop computes (same order of additions).
  double max_diff = 0;
  for (cuvil::bench::Runner* r : {&unfused, &fused}) {
    r->session->set_input(0, cuvil::DType::Float, {1, kWidth}, x.data(), x.size() * sizeof(float));
    if (!r->session->run().is_ok()) return 1;
    const float* out = static_cast<const float*>(r->session->output(0)->data);
    for (int64_t k = 0; k < kWidth; ++k)
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(out[k] - y[static_cast<size_t>(k)])));
  }

  std::printf("run overhead: %d Add ops over [1, %lld] floats, %d runs, threads=%d\n", ops,
              static_cast<long long>(kWidth), runs, threads);
  print("unfused (one whole-tensor op call per node)", ops, u);
  print("fused (tile kernels)", ops, f);
  std::printf("  plain loop (no runtime): %.3f us per run\n", ref_us);
  std::printf("  ratio unfused run / loop = %.1fx, fused run / loop = %.1fx\n", u.run_us / ref_us, f.run_us / ref_us);
  std::printf("  max |cuvil - loop| = %g\n", max_diff);
  return max_diff <= 1e-5 ? 0 : 1;
}
