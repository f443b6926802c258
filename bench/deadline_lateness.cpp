// How far past its deadline does a long run stop? (docs/security.md, "Runtime: threads,
// deadlines, cancellation"). Four programs that run for a second or more, each compiled in
// process: a chain of float32 Adds over a large vector as CallOps (whole-tensor kernels) and
// fused into tile kernels, and a chain of square MatMuls as CallOps (the whole-tensor GEMM)
// and fused (tile Mma kernels with a reduction loop). Each runs once with no deadline (its
// full time), then `runs` times with a 1 ms deadline; prints the median and the maximum of
// (time until the run returned) - 1 ms. This is a lateness, not a speed: it is bounded by one
// chunk of work per thread (or one unsplit kernel), whatever the machine's speed.
//   usage: bench_deadline_lateness [runs=7] [threads=2] [elements=16777216] [adds=64]
//                                  [matmul_size=1024] [matmuls=16]
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/fused_vs_unfused.h"

namespace {

using namespace cuvil;  // NOLINT: a benchmark's main file
using Clock = std::chrono::steady_clock;

void float_io(onnx::ValueInfoProto* v, const char* name, const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

onnx::ModelProto empty_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  m.mutable_graph()->set_name("lateness");
  return m;
}

// x: f32[n] -> `adds` x Add(1) -> y.
std::string add_chain(int64_t n, int adds) {
  onnx::ModelProto m = empty_model();
  onnx::GraphProto* g = m.mutable_graph();
  float_io(g->add_input(), "x", {n});
  float_io(g->add_output(), "y", {n});
  onnx::TensorProto* one = g->add_initializer();
  one->set_name("one");
  one->set_data_type(onnx::TensorProto::FLOAT);
  one->add_float_data(1.f);
  std::string prev = "x";
  for (int i = 0; i < adds; ++i) {
    onnx::NodeProto* node = g->add_node();
    node->set_op_type("Add");
    node->add_input(prev);
    node->add_input("one");
    prev = i + 1 == adds ? "y" : "t" + std::to_string(i);
    node->add_output(prev);
  }
  return m.SerializeAsString();
}

// x: f32[s, s] -> `count` x MatMul(w) -> y, w = I / 2 + 1 / (4 s) (values stay bounded).
std::string matmul_chain(int64_t s, int count) {
  onnx::ModelProto m = empty_model();
  onnx::GraphProto* g = m.mutable_graph();
  float_io(g->add_input(), "x", {s, s});
  float_io(g->add_output(), "y", {s, s});
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(s);
  w->add_dims(s);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < s; ++j) w->add_float_data((i == j ? 0.5f : 0.f) + 0.25f / static_cast<float>(s));
  std::string prev = "x";
  for (int i = 0; i < count; ++i) {
    onnx::NodeProto* node = g->add_node();
    node->set_op_type("MatMul");
    node->add_input(prev);
    node->add_input("w");
    prev = i + 1 == count ? "y" : "t" + std::to_string(i);
    node->add_output(prev);
  }
  return m.SerializeAsString();
}

struct Program {
  std::shared_ptr<rt::LoadedPackage> pkg;
  int kernels = 0, calls = 0;
};

bool build(const std::string& bytes, bool fuse, Program* p) {
  return bench::compile_to_package(bytes, fuse, &p->pkg, &p->kernels, &p->calls);
}

// One run of `p` on x with this deadline; the wall time in ms, or -1 after an unexpected status.
double timed_run(const Program& p, int threads, int64_t deadline_ms, const std::vector<float>& x,
                 const std::vector<int64_t>& dims, rt::StatusCode expect) {
  rt::SessionOptions opt;
  opt.threads = threads;
  opt.deadline_ms = deadline_ms;
  std::unique_ptr<rt::Session> s;
  rt::Status st = rt::Session::create(p.pkg, opt, &s);
  if (st.is_ok()) st = s->set_input(size_t{0}, DType::Float, dims, x.data(), x.size() * sizeof(float));
  if (!st.is_ok()) {
    std::fprintf(stderr, "session: %s\n", st.message().c_str());
    return -1;
  }
  const auto t0 = Clock::now();
  st = s->run();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (st.code() != expect) {
    std::fprintf(stderr, "run: expected status %d, got %d: %s\n", static_cast<int>(expect),
                 static_cast<int>(st.code()), st.message().c_str());
    return -1;
  }
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 7;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const int64_t elements = argc > 3 ? std::atoll(argv[3]) : (int64_t{1} << 24);
  const int adds = argc > 4 ? std::atoi(argv[4]) : 64;
  const int64_t size = argc > 5 ? std::atoll(argv[5]) : 1024;
  const int matmuls = argc > 6 ? std::atoi(argv[6]) : 16;
  if (runs < 1 || threads < 1 || elements < 1 || adds < 1 || size < 1 || matmuls < 1) {
    std::fprintf(stderr, "usage: bench_deadline_lateness [runs] [threads] [elements] [adds] [matmul_size] [matmuls]\n");
    return 2;
  }
  struct Case {
    std::string name;
    std::string model;
    bool fuse;
    std::vector<int64_t> dims;
  };
  const std::string chain = add_chain(elements, adds), mm = matmul_chain(size, matmuls);
  const Case cases[] = {
      {std::to_string(adds) + " Adds over " + std::to_string(elements) + " floats, CallOps", chain, false, {elements}},
      {std::to_string(adds) + " Adds over " + std::to_string(elements) + " floats, fused", chain, true, {elements}},
      {std::to_string(matmuls) + " MatMuls " + std::to_string(size) + "^3, CallOps", mm, false, {size, size}},
      {std::to_string(matmuls) + " MatMuls " + std::to_string(size) + "^3, fused (Mma)", mm, true, {size, size}},
  };
  std::printf("deadline 1 ms, %d threads, %d runs per program; lateness = time to return - 1 ms\n", threads, runs);
  std::printf("%-44s %8s %9s %13s %11s\n", "program", "kernels", "full run", "median late", "max late");
  for (const Case& c : cases) {
    Program p;
    if (!build(c.model, c.fuse, &p)) return 1;
    int64_t numel = 1;
    for (int64_t d : c.dims) numel *= d;
    std::vector<float> x(static_cast<size_t>(numel));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) / 97.f;
    const double full = timed_run(p, threads, 0, x, c.dims, rt::StatusCode::kOk);
    if (full < 0) return 1;
    std::vector<double> late;
    for (int r = 0; r < runs; ++r) {
      const double ms = timed_run(p, threads, 1, x, c.dims, rt::StatusCode::kDeadline);
      if (ms < 0) return 1;
      late.push_back(ms - 1.0);
    }
    std::sort(late.begin(), late.end());
    std::printf("%-44s %3d + %-3d %6.0f ms %10.2f ms %8.2f ms\n", c.name.c_str(), p.kernels, p.calls, full,
                late[late.size() / 2], late.back());
  }
  return 0;
}
