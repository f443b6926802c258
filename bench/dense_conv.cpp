// The one-group convolutions of ResNet-18 or MobileNetV2 (batch 1, 224x224) through
// cuvil::FusedConv in the channels-last layout the compiler chooses for them (the
// indirect-GEMM kernel, runtime/cpu/ops/conv_igemm.h; the stem too, when its input is
// channels-last), with each network's epilogue (ResNet-18: bias + Relu, plus the residual on the
// second convolution of each block; MobileNetV2: bias + Relu6 on the expansions and the stem,
// bias alone on the projections, plus the residual where the block has one), once per CPU path
// this machine supports, next to that path's FMA peak of one core measured in the same run
// (bench/fma_peak.h). The weights are registered as a loaded package's are, so their panels
// are packed once, before the timed calls. Prints the median time per layer, GFLOP/s, the
// fraction of the peak, and the network's total (each layer times its count in the network).
// One thread. Not a test: never asserts on time.
//   usage: bench_dense_conv [repeats=21] [resnet18|mobilenetv2] [layer name, or all] [warm|cold]
// (cold: the caches are flushed before every call, as in a model whose weights and
// activations do not stay cached between layers; warm, the default: repeated calls on the same
// operands, the kernel's own speed).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/kernel_call.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/ops/packed_weights.h"

using namespace cuvil;
using namespace cuvil::bench;

namespace {

struct Layer {
  const char* name;
  int64_t c, m, hw, k, stride, count;  // in channels, out channels, input size, kernel, stride, times in the net
  bool residual;
  const char* activation;  // FusedConv's activation attribute: "relu", "clip" (Relu6) or "" (none)
};

const Layer kResnet18[] = {
    {"stem 7x7/2", 3, 64, 224, 7, 2, 1, false, "relu"},
    {"layer1 3x3", 64, 64, 56, 3, 1, 4, true, "relu"},
    {"layer2.0 3x3/2", 64, 128, 56, 3, 2, 1, false, "relu"},
    {"layer2 3x3", 128, 128, 28, 3, 1, 3, true, "relu"},
    {"layer2 down 1x1/2", 64, 128, 56, 1, 2, 1, false, "relu"},
    {"layer3.0 3x3/2", 128, 256, 28, 3, 2, 1, false, "relu"},
    {"layer3 3x3", 256, 256, 14, 3, 1, 3, true, "relu"},
    {"layer3 down 1x1/2", 128, 256, 28, 1, 2, 1, false, "relu"},
    {"layer4.0 3x3/2", 256, 512, 14, 3, 2, 1, false, "relu"},
    {"layer4 3x3", 512, 512, 7, 3, 1, 3, true, "relu"},
    {"layer4 down 1x1/2", 256, 512, 14, 1, 2, 1, false, "relu"},
};

// MobileNetV2 (torchvision, width 1.0): the stem and every pointwise layer; "exp" expands with
// Relu6, "proj" projects without an activation (with the block's residual where it has one).
const Layer kMobilenetV2[] = {
    {"stem 3x3/2", 3, 32, 224, 3, 2, 1, false, "clip"},
    {"b1 proj", 32, 16, 112, 1, 1, 1, false, ""},
    {"b2 exp", 16, 96, 112, 1, 1, 1, false, "clip"},
    {"b2 proj", 96, 24, 56, 1, 1, 1, false, ""},
    {"b3 exp", 24, 144, 56, 1, 1, 2, false, "clip"},
    {"b3 proj+res", 144, 24, 56, 1, 1, 1, true, ""},
    {"b4 proj", 144, 32, 28, 1, 1, 1, false, ""},
    {"b5 exp", 32, 192, 28, 1, 1, 3, false, "clip"},
    {"b5 proj+res", 192, 32, 28, 1, 1, 2, true, ""},
    {"b7 proj", 192, 64, 14, 1, 1, 1, false, ""},
    {"b8 exp", 64, 384, 14, 1, 1, 4, false, "clip"},
    {"b8 proj+res", 384, 64, 14, 1, 1, 3, true, ""},
    {"b11 proj", 384, 96, 14, 1, 1, 1, false, ""},
    {"b12 exp", 96, 576, 14, 1, 1, 3, false, "clip"},
    {"b12 proj+res", 576, 96, 14, 1, 1, 2, true, ""},
    {"b14 proj", 576, 160, 7, 1, 1, 1, false, ""},
    {"b15 exp", 160, 960, 7, 1, 1, 3, false, "clip"},
    {"b15 proj+res", 960, 160, 7, 1, 1, 2, true, ""},
    {"b17 proj", 960, 320, 7, 1, 1, 1, false, ""},
    {"b18 1x1", 320, 1280, 7, 1, 1, 1, false, "clip"},
};

// Touches 64 MiB, so that little of what was read before stays in any cache level.
void evict_caches(std::vector<float>& buf) {
  for (size_t i = 0; i < buf.size(); i += 16) buf[i] += 1.f;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 21;
  const bool mobilenet = argc > 2 && std::strcmp(argv[2], "mobilenetv2") == 0;
  if (argc > 2 && !mobilenet && std::strcmp(argv[2], "resnet18") != 0) {
    std::fprintf(stderr, "usage: bench_dense_conv [repeats] [resnet18|mobilenetv2] [layer|all] [warm|cold]\n");
    return 2;
  }
  const Layer* layers = mobilenet ? kMobilenetV2 : kResnet18;
  const size_t n_layers = mobilenet ? std::size(kMobilenetV2) : std::size(kResnet18);
  const char* net = mobilenet ? "MobileNetV2" : "ResNet-18";
  const char* only = argc > 3 && std::strcmp(argv[3], "all") != 0 ? argv[3] : nullptr;  // one layer by name
  // cold: every call starts with weights and activations out of the caches, as a model's
  // layers read their weights (a run's activations and weights far exceed the caches).
  const bool cold = argc > 4 && std::strcmp(argv[4], "cold") == 0;
  std::vector<float> evict(cold ? 64 << 20 >> 2 : 0);
  std::printf("%s convolutions, NHWC FusedConv + bias + the net's epilogue, batch 1, 1 thread, median of %d\nCPU: %s\n",
              net, repeats, rt::cpu_features_summary().c_str());
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
    for (size_t li = 0; li < n_layers; ++li) {
      const Layer& l = layers[li];
      if (only && std::strcmp(only, l.name) != 0) continue;
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
                    {"layout", text("NHWC")}};
      if (l.activation[0]) node.attrs["activation"] = text(l.activation);
      if (std::strcmp(l.activation, "clip") == 0) {
        node.attrs["activation_alpha"] = real(0.f);
        node.attrs["activation_beta"] = real(6.f);
      }
      rt::TensorView xv = view(x, {1, l.hw, l.hw, l.c}), wv = view(w, {l.m, l.c, l.k, l.k}), bv = view(b, {l.m}),
                     rv = view(r, {1, out, out, l.m});
      std::vector<const rt::TensorView*> inputs = {&xv, &wv, &bv};
      if (l.residual) inputs.push_back(&rv);
      std::vector<double> t;
      for (int round = 0; round < repeats + 1; ++round) {
        if (cold) evict_caches(evict);
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
    std::printf("%-18s %23s | %9.3f | %8.1f | %5.1f%%\n", net, "", net_ms, net_gflop / net_ms * 1e3,
                100 * net_gflop / net_ms * 1e3 / peak);
  }
  return 0;
}
