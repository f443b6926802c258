// Shared by the benchmarks that compare a model's tile kernels with its whole-tensor kernels
// (bench_matmul_tile, bench_reduce_tile): compile an ONNX model in-process with fusion on or
// off (`--no-fusion`) into a session, and time the two alternately in the same process.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "codegen/lower.h"
#include "codegen/package_builder.h"
#include "frontend/onnx_import.h"
#include "passes/pipeline.h"
#include "runtime/package.h"
#include "runtime/session.h"

namespace cuvil::bench {

struct Runner {
  std::shared_ptr<rt::LoadedPackage> pkg;
  std::unique_ptr<rt::Session> session;
  int kernels = 0, calls = 0;  // tile kernels and CallOps of the lowered program
};

// Compiles the serialized model `bytes` the way cuvilc does (import, the pass pipeline,
// lowering with fusion on or off, package) and loads the package; false (with a message on
// stderr) if it fails. `kernels`/`calls` (optional) get the tile kernels and CallOps.
inline bool compile_to_package(const std::string& bytes, bool fuse, std::shared_ptr<rt::LoadedPackage>* pkg,
                               int* kernels = nullptr, int* calls = nullptr) {
  Model model = frontend::import_onnx_bytes(bytes, "", {}, "bench.onnx");
  run_passes(model);
  codegen::LowerOptions lo;
  lo.fuse_elementwise = fuse;
  codegen::LoweredModel lowered = codegen::lower_model(model, lo);
  if (kernels) *kernels = lowered.fused_kernels;
  if (calls) *calls = lowered.call_ops;
  std::vector<uint8_t> bytes_out = codegen::build_package(model, lowered);
  rt::Status st = rt::LoadedPackage::open_memory(bytes_out.data(), bytes_out.size(), true, pkg);
  if (!st.is_ok()) std::fprintf(stderr, "package: %s\n", st.message().c_str());
  return st.is_ok();
}

// Compiles `bytes` (compile_to_package) into a session with `threads` threads.
inline bool make_runner(const std::string& bytes, bool fuse, int threads, Runner* r) {
  if (!compile_to_package(bytes, fuse, &r->pkg, &r->kernels, &r->calls)) return false;
  rt::SessionOptions opt;
  opt.threads = threads;
  rt::Status st = rt::Session::create(r->pkg, opt, &r->session);
  if (!st.is_ok()) {
    std::fprintf(stderr, "session: %s\n", st.message().c_str());
    return false;
  }
  return true;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Timing {
  double tile_median = 0, whole_median = 0, tile_best = 0, whole_best = 0;  // milliseconds
};

// Times tile and whole alternately, repeats + 1 rounds (the first warms up); one timed run is
// bind(session) (setting the inputs, returning a Status) plus the run. Exits on a failed run.
template <typename Bind> Timing time_alternately(Runner& tile, Runner& whole, int repeats, Bind bind) {
  auto once = [&](Runner& r) {
    auto t0 = std::chrono::steady_clock::now();
    rt::Status st = bind(*r.session);
    if (st.is_ok()) st = r.session->run();
    auto t1 = std::chrono::steady_clock::now();
    if (!st.is_ok()) {
      std::fprintf(stderr, "run: %s\n", st.message().c_str());
      std::exit(1);
    }
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  };
  std::vector<double> tt, tw;
  for (int round = 0; round < repeats + 1; ++round) {
    const double a = once(tile), b = once(whole);
    if (round > 0) {
      tt.push_back(a);
      tw.push_back(b);
    }
  }
  Timing t;
  t.tile_median = median(tt);
  t.whole_median = median(tw);
  t.tile_best = *std::min_element(tt.begin(), tt.end());
  t.whole_best = *std::min_element(tw.begin(), tw.end());
  return t;
}

}  // namespace cuvil::bench
