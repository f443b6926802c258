// The one-group convolutions of ResNet-18 (batch 1, 224x224) through cuvil::FusedConv in the
// channels-last layout the compiler chooses for them (the indirect-GEMM kernel,
// runtime/cpu/ops/conv_igemm.h; the stem too, when its input is channels-last), with bias
// and Relu (plus the residual on the second convolution of each block), once per CPU path
// this machine supports, next to that path's FMA peak of one core measured in the same run
// (bench/fma_peak.h). The weights are registered as a loaded package's are, so their panels
// are packed once, before the timed calls. Prints the median time per layer, GFLOP/s, the
// fraction of the peak, and the network's total (each layer times its count in ResNet-18).
// One thread. Not a test: never asserts on time.
//   usage: bench_dense_conv [repeats=21]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/kernel_call.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/ops/packed_weights.h"

using namespace cuvil;
using namespace cuvil::bench;

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 21;
  struct Layer {
    const char* name;
    int64_t c, m, hw, k, stride, count;  // in channels, out channels, input size, kernel, stride, times in the net
    bool residual;
  };
  const Layer layers[] = {
      {"stem 7x7/2", 3, 64, 224, 7, 2, 1, false},
      {"layer1 3x3", 64, 64, 56, 3, 1, 4, true},
      {"layer2.0 3x3/2", 64, 128, 56, 3, 2, 1, false},
      {"layer2 3x3", 128, 128, 28, 3, 1, 3, true},
      {"layer2 down 1x1/2", 64, 128, 56, 1, 2, 1, false},
      {"layer3.0 3x3/2", 128, 256, 28, 3, 2, 1, false},
      {"layer3 3x3", 256, 256, 14, 3, 1, 3, true},
      {"layer3 down 1x1/2", 128, 256, 28, 1, 2, 1, false},
      {"layer4.0 3x3/2", 256, 512, 14, 3, 2, 1, false},
      {"layer4 3x3", 512, 512, 7, 3, 1, 3, true},
      {"layer4 down 1x1/2", 256, 512, 14, 1, 2, 1, false},
  };
  std::printf("ResNet-18 convolutions, NHWC FusedConv + bias + Relu, batch 1, 1 thread, median of %d\nCPU: %s\n",
              repeats, rt::cpu_features_summary().c_str());
  rt::OpKernelFn fn = rt::find_op_kernel("cuvil", "FusedConv");
  if (!fn) {
    std::fprintf(stderr, "no FusedConv kernel\n");
    return 1;
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (rt::CpuPath path : rt::supported_cpu_paths()) {
    rt::set_cpu_path_for_testing(path);
    const double peak = fma_peak_gflops(path, 3);
    std::printf("\n%s: FMA peak %.1f GFLOP/s\n%-18s %5s %5s %4s | %9s | %8s | %6s\n", rt::cpu_path_name(path), peak,
                "layer", "C", "M", "HW", "ms", "GFLOP/s", "%peak");
    double net_ms = 0, net_gflop = 0;
    for (const Layer& l : layers) {
      const int64_t pad = l.k / 2, out = (l.hw + 2 * pad - l.k) / l.stride + 1;
      std::vector<float> x(static_cast<size_t>(l.hw * l.hw * l.c)), w(static_cast<size_t>(l.m * l.c * l.k * l.k)),
          b(static_cast<size_t>(l.m)), r(static_cast<size_t>(out * out * l.m)), y(r.size());
      for (std::vector<float>* v : {&x, &w, &b, &r})
        for (float& f : *v) f = dist(rng);
      rt::ops::register_weight_region(w.data(), w.size() * sizeof(float));
      Node node;
      node.op_type = "FusedConv";
      node.domain = "cuvil";
      node.opset = 1;
      node.name = l.name;
      node.outputs.push_back(0);
      node.attrs = {{"pads", ints({pad, pad, pad, pad})},
                    {"strides", ints({l.stride, l.stride})},
                    {"activation", text("relu")},
                    {"layout", text("NHWC")}};
      rt::TensorView xv = view(x, {1, l.hw, l.hw, l.c}), wv = view(w, {l.m, l.c, l.k, l.k}), bv = view(b, {l.m}),
                     rv = view(r, {1, out, out, l.m});
      std::vector<const rt::TensorView*> inputs = {&xv, &wv, &bv};
      if (l.residual) inputs.push_back(&rv);
      std::vector<double> t;
      for (int round = 0; round < repeats + 1; ++round) {
        ReusedOutputContext ctx(node, inputs, &y);
        const auto t0 = std::chrono::steady_clock::now();
        const rt::Status st = fn(ctx);
        const auto t1 = std::chrono::steady_clock::now();
        if (!st.is_ok()) {
          std::fprintf(stderr, "%s: %s\n", l.name, st.message().c_str());
          return 1;
        }
        if (round > 0) t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());  // 0 packs
      }
      rt::ops::unregister_weight_region(w.data());
      const double ms = median(t), gflop = 2.0 * l.c * l.k * l.k * l.m * out * out / 1e9;
      std::printf("%-18s %5lld %5lld %4lld | %9.3f | %8.1f | %5.1f%%\n", l.name, static_cast<long long>(l.c),
                  static_cast<long long>(l.m), static_cast<long long>(l.hw), ms, gflop / ms * 1e3,
                  100 * gflop / ms * 1e3 / peak);
      net_ms += ms * l.count;
      net_gflop += gflop * l.count;
    }
    std::printf("%-18s %23s | %9.3f | %8.1f | %5.1f%%\n", "ResNet-18 convs", "", net_ms, net_gflop / net_ms * 1e3,
                100 * net_gflop / net_ms * 1e3 / peak);
  }
  return 0;
}
