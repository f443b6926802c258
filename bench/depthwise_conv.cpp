// The direct depthwise convolution (runtime/cpu/ops/conv_depthwise.h) on MobileNetV2's ten
// depthwise layer shapes (3x3, Relu6 epilogue, batch 1), NCHW and NHWC, once per CPU path this
// machine supports, each timed alternately with a memcpy of the bytes the layer must touch
// (input + output) in the same run: a depthwise layer does 9 multiply-adds per output and
// reads each input about once, so a copy of its bytes is the honest floor. Calls
// kernel_FusedConv directly through the tests' heap context with an output allocated once (one
// thread, no compiler).
// Prints median times, op/copy ratios and GFLOP/s. Not a test: never asserts on time.
//   usage: bench_depthwise_conv [repeats=51]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/kernel_call.h"
#include "runtime/cpu/cpu_features.h"

namespace {

using namespace cuvil;

using cuvil::bench::integer;
using cuvil::bench::ints;
using cuvil::bench::median;
using cuvil::bench::real;
using cuvil::bench::ReusedOutputContext;
using cuvil::bench::text;
using cuvil::bench::view;

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 51;
  struct Layer {
    int64_t c, hw, stride;
  };
  const Layer layers[] = {{32, 112, 1}, {96, 112, 2}, {144, 56, 1}, {144, 56, 2}, {192, 28, 1},
                          {192, 28, 2}, {384, 14, 1}, {576, 14, 1}, {576, 14, 2}, {960, 7, 1}};
  std::printf("MobileNetV2 depthwise 3x3 layers + Relu6, batch 1, 1 thread, %d repeats\nCPU: %s\n", repeats,
              rt::cpu_features_summary().c_str());
  std::printf("%-8s %-6s %4s %4s %2s | %9s | %9s | %8s | %7s\n", "path", "layout", "C", "HW", "s", "op ms", "copy ms",
              "op/copy", "GFLOP/s");
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  rt::OpKernelFn fn = rt::find_op_kernel("cuvil", "FusedConv");
  if (!fn) {
    std::fprintf(stderr, "no FusedConv kernel\n");
    return 1;
  }
  for (rt::CpuPath path : rt::supported_cpu_paths()) {
    rt::set_cpu_path_for_testing(path);
    for (const Layer& l : layers) {
      const int64_t out = (l.hw + 2 - 3) / l.stride + 1;
      std::vector<float> x(static_cast<size_t>(l.c * l.hw * l.hw)), w(static_cast<size_t>(l.c * 9)),
          b(static_cast<size_t>(l.c));
      for (float& v : x) v = dist(rng);
      for (float& v : w) v = dist(rng);
      for (float& v : b) v = dist(rng);
      std::vector<float> y(static_cast<size_t>(l.c * out * out));
      std::vector<float> src(x.size() + y.size()), dst(src.size());
      for (const char* layout : {"NCHW", "NHWC"}) {
        const bool nhwc = std::string(layout) == "NHWC";
        Node node;
        node.op_type = "FusedConv";
        node.domain = "cuvil";
        node.opset = 1;
        node.name = "dw";
        node.outputs.push_back(0);
        node.attrs = {{"group", integer(l.c)},         {"pads", ints({1, 1, 1, 1})},
                      {"strides", ints({l.stride, l.stride})}, {"activation", text("clip")},
                      {"activation_alpha", real(0.f)}, {"activation_beta", real(6.f)},
                      {"layout", text(layout)}};
        rt::TensorView xv = view(x, nhwc ? std::vector<int64_t>{1, l.hw, l.hw, l.c} : std::vector<int64_t>{1, l.c, l.hw, l.hw});
        rt::TensorView wv = view(w, {l.c, 1, 3, 3}), bv = view(b, {l.c});
        std::vector<double> t_op, t_copy;
        for (int round = 0; round < repeats + 1; ++round) {
          ReusedOutputContext ctx(node, {&xv, &wv, &bv}, &y);
          auto t0 = std::chrono::steady_clock::now();
          const rt::Status st = fn(ctx);
          auto t1 = std::chrono::steady_clock::now();
          std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
          asm volatile("" : : "r"(dst.data()) : "memory");
          auto t2 = std::chrono::steady_clock::now();
          if (!st.is_ok()) {
            std::fprintf(stderr, "%s\n", st.message().c_str());
            return 1;
          }
          if (round == 0) continue;
          t_op.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          t_copy.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
        }
        const double mo = median(t_op), mc = median(t_copy);
        const double gflop = 2.0 * 9 * l.c * out * out / 1e9;
        std::printf("%-8s %-6s %4lld %4lld %2lld | %9.4f | %9.4f | %7.2fx | %7.1f\n", rt::cpu_path_name(path), layout,
                    static_cast<long long>(l.c), static_cast<long long>(l.hw), static_cast<long long>(l.stride), mo,
                    mc, mo / mc, gflop / (mo / 1e3));
      }
    }
  }
  std::printf("copy = a memcpy of input + output bytes; op/copy <= 1 means the layer runs at copy speed\n");
  return 0;
}
