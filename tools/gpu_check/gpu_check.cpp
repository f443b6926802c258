// cuvil_gpu_check: the GPU side of scripts/gpu_check.sh (docs/ptx.md, "Checking on a GPU").
// For each package given: random inputs (fixed seed; every dim static), one run on the CPU
// session and runs of the megakernel on CUDA device 0 through the launcher
// (runtime/gpu/cuda_launcher.h), then one table row: agreement (max abs and relative
// difference against the CPU, the tolerance of docs/ptx.md), CPU and GPU latency (median of the
// timed runs; the GPU's includes uploads and copies back, as the launcher does them today).
// Exit 0 when every package agrees, 1 when one does not, 4 when CUDA cannot be used.
// Needs only libcuvil (shipped next to it: rpath $ORIGIN) and the NVIDIA driver.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/cuda/driver.h"
#include "runtime/gpu/cuda_launcher.h"
#include "runtime/package.h"
#include "runtime/session.h"

namespace {

using cuvil::rt::Status;
using cuvil::rt::gpu::HostTensor;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Row {
  std::string name, verdict;
  double max_abs = 0, max_rel = 0, cpu_ms = 0, gpu_ms = 0;
  int blocks = 0;
};

Row check(const std::string& path, int repeats) {
  Row row;
  row.name = path.substr(path.find_last_of('/') + 1);
  std::shared_ptr<cuvil::rt::LoadedPackage> pkg;
  if (Status st = cuvil::rt::LoadedPackage::open_file(path, &pkg); !st.is_ok()) {
    row.verdict = "load: " + st.message();
    return row;
  }
  const cuvil::rt::Program& p = pkg->program();
  std::vector<HostTensor> inputs;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (uint32_t t : p.inputs) {
    const cuvil::rt::TensorDesc& d = p.tensors[t];
    HostTensor h;
    h.dtype = d.dtype;
    cuvil::rt::ExprEvaluator eval(p);
    for (uint32_t e : d.dims) {
      int64_t v = 0;
      if (!eval.eval(e, &v).is_ok()) {
        row.verdict = "input '" + d.name + "' has a symbolic dim (compile the check packages with static shapes)";
        return row;
      }
      h.dims.push_back(v);
    }
    if (d.dtype != cuvil::DType::Float) {
      row.verdict = "input '" + d.name + "' is not float32";
      return row;
    }
    int64_t n = 1;
    for (int64_t v : h.dims) n *= v;
    std::vector<float> f(static_cast<size_t>(n));
    for (float& x : f) x = u(rng);
    h.bytes.resize(f.size() * 4);
    std::memcpy(h.bytes.data(), f.data(), h.bytes.size());
    inputs.push_back(std::move(h));
  }
  cuvil::rt::SessionOptions so;
  std::unique_ptr<cuvil::rt::Session> session;
  if (Status st = cuvil::rt::Session::create(pkg, so, &session); !st.is_ok()) {
    row.verdict = "session: " + st.message();
    return row;
  }
  std::vector<double> cpu, gpu;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (size_t i = 0; i < inputs.size(); ++i)
      session->set_input(i, inputs[i].dtype, inputs[i].dims, inputs[i].bytes.data(), inputs[i].bytes.size());
    if (Status st = session->run(); !st.is_ok()) {
      row.verdict = "cpu run: " + st.message();
      return row;
    }
    cpu.push_back(ms_since(t0));
  }
  std::vector<HostTensor> outs;
  for (int r = 0; r < repeats; ++r) {
    cuvil::rt::gpu::CudaRunInfo info;
    const auto t0 = Clock::now();
    if (Status st = cuvil::rt::gpu::run_package_cuda(*pkg, inputs, {}, &outs, &info); !st.is_ok()) {
      row.verdict = "gpu run: " + st.message();
      return row;
    }
    gpu.push_back(ms_since(t0));
    row.blocks = info.blocks;
  }
  row.cpu_ms = median(cpu);
  row.gpu_ms = median(gpu);
  bool agree = true;
  for (size_t k = 0; k < outs.size(); ++k) {
    const cuvil::rt::TensorView* want = session->output(k);
    if (outs[k].dims != want->dims || outs[k].dtype != want->dtype) {
      row.verdict = "output " + std::to_string(k) + " has another shape or dtype";
      return row;
    }
    const float* g = reinterpret_cast<const float*>(outs[k].bytes.data());
    const float* c = want->as<float>();
    for (int64_t i = 0; i < want->numel(); ++i) {
      const double diff = std::fabs(static_cast<double>(g[i]) - c[i]);
      row.max_abs = std::max(row.max_abs, diff);
      row.max_rel = std::max(row.max_rel, diff / std::max(1e-30, std::fabs(static_cast<double>(c[i]))));
      if (!(diff <= 1e-5 + 1e-5 * std::fabs(c[i]))) agree = false;  // NaN disagrees
    }
  }
  row.verdict = agree ? "agree" : "DIFFER";
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: cuvil_gpu_check [--repeats N] PACKAGE.cuvir...\n");
    return 2;
  }
  int repeats = 5, first = 1;
  if (std::string(argv[1]) == "--repeats" && argc > 3) {
    repeats = std::max(1, std::atoi(argv[2]));
    first = 3;
  }
  const cuvil::rt::cuda::DeviceInfo& dev = cuvil::rt::cuda::probe();
  if (!dev.usable) {
    std::printf("CUDA: %s\n", dev.reason.c_str());
    return 4;
  }
  std::printf("GPU: %s (sm_%d%d, %d multiprocessors), driver %d.%d, %s\n\n", dev.name.c_str(), dev.sm_major,
              dev.sm_minor, dev.multiprocessors, dev.driver_version / 1000, dev.driver_version % 1000 / 10,
              dev.library.c_str());
  std::printf("| package | GPU vs CPU | max abs diff | max rel diff | CPU ms | GPU ms (incl. copies) | blocks |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  int rc = 0;
  for (int i = first; i < argc; ++i) {
    const Row r = check(argv[i], repeats);
    if (r.verdict != "agree") rc = 1;
    std::printf("| %s | %s | %.3g | %.3g | %.3f | %.3f | %d |\n", r.name.c_str(), r.verdict.c_str(), r.max_abs,
                r.max_rel, r.cpu_ms, r.gpu_ms, r.blocks);
  }
  return rc;
}
