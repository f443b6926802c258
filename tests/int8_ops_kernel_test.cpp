// The ONNX integer kernels on the int8 GEMM (MatMulInteger, QLinearMatMul in linalg.cpp;
// ConvInteger, QLinearConv in nn.cpp) against plain reference loops, on every kernel path and
// with 1 and 3 threads, bitwise: grouped, padded, strided and dilated convolutions, uint8 and
// int8 operands, per-channel weight zero points and scales, an int32 bias, batched and
// broadcast matmuls with per-row and per-column zero points (suite Int8OpsKernel). The ONNX
// backend cases of these ops (KernelConformance, CUVIL_KERNEL_CASES=...) have one to three
// small cases each.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "kernel_harness.h"
#include "shape_test_util.h"
#include "runtime/cpu/cpu_features.h"

using namespace cuvil;
using rt::CpuPath;

namespace {

using cuvil::shape_test::ints_attr;
using cuvil::shape_test::int_attr;

using PathGuard = cuvil::testing::CpuPathGuard;

TensorData bytes_tensor(DType dt, std::vector<int64_t> dims, uint32_t seed) {
  TensorData t;
  t.dtype = dt;
  t.dims = dims;
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  t.bytes.resize(static_cast<size_t>(n));
  for (auto& b : t.bytes) b = static_cast<uint8_t>(byte(gen));
  return t;
}

template <typename T> TensorData values(DType dt, std::vector<int64_t> dims, const std::vector<T>& v) {
  TensorData t;
  t.dtype = dt;
  t.dims = dims;
  const uint8_t* raw = reinterpret_cast<const uint8_t*>(v.data());
  t.bytes.assign(raw, raw + v.size() * sizeof(T));
  return t;
}

int32_t elem(const TensorData& t, int64_t i) {
  return t.dtype == DType::Int8 ? int32_t(int8_t(t.bytes[i])) : int32_t(t.bytes[i]);
}

struct Result {
  rt::Status st;
  TensorData out;
};

Result run(const std::string& op, std::map<std::string, Attribute> attrs,
           std::vector<const TensorData*> inputs, int threads) {
  Node node;
  node.op_type = op;
  node.opset = 13;
  node.name = "n_" + op;
  node.attrs = std::move(attrs);
  node.outputs.push_back(0);
  std::vector<rt::TensorView> views(inputs.size());
  std::vector<const rt::TensorView*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i]) views[i] = cuvil::testing::view_of(*inputs[i]);
    ptrs.push_back(inputs[i] ? &views[i] : nullptr);
  }
  cuvil::testing::HeapOpContext ctx(node, ptrs, 1, threads);
  Result r;
  rt::OpKernelFn fn = rt::find_op_kernel("", op);
  r.st = fn ? fn(ctx) : rt::Status(rt::StatusCode::kUnsupported, "no kernel for " + op);
  if (r.st.is_ok()) {
    const rt::TensorView& o = ctx.output(0);
    r.out.dtype = o.dtype;
    r.out.dims = o.dims;
    r.out.bytes.assign(static_cast<const uint8_t*>(o.data), static_cast<const uint8_t*>(o.data) + o.bytes());
  }
  return r;
}

// The 2-D convolution's int32 sums, plainly: acc[n][m][oh][ow].
std::vector<int32_t> conv_reference(const TensorData& x, const TensorData& w, int32_t xz,
                                    const std::vector<int32_t>& wz, int64_t group,
                                    const std::vector<int64_t>& pads, const std::vector<int64_t>& strides,
                                    const std::vector<int64_t>& dil, std::vector<int64_t>* out_dims) {
  const int64_t N = x.dims[0], C = x.dims[1], H = x.dims[2], W = x.dims[3];
  const int64_t M = w.dims[0], CG = w.dims[1], KH = w.dims[2], KW = w.dims[3], MG = M / group;
  const int64_t OH = (H + pads[0] + pads[2] - ((KH - 1) * dil[0] + 1)) / strides[0] + 1;
  const int64_t OW = (W + pads[1] + pads[3] - ((KW - 1) * dil[1] + 1)) / strides[1] + 1;
  *out_dims = {N, M, OH, OW};
  std::vector<int32_t> y(static_cast<size_t>(N * M * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t s = 0;
          const int64_t g = m / MG;
          for (int64_t c = 0; c < CG; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * strides[0] - pads[0] + kh * dil[0];
                const int64_t iw = ow * strides[1] - pads[1] + kw * dil[1];
                const int32_t xv = (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                       ? xz
                                       : elem(x, ((n * C + g * CG + c) * H + ih) * W + iw);
                const int32_t wv = elem(w, ((m * CG + c) * KH + kh) * KW + kw);
                s += int64_t(xv - xz) * (wv - wz[wz.size() == 1 ? 0 : m]);
              }
          y[((n * M + m) * OH + oh) * OW + ow] = static_cast<int32_t>(s);
        }
  return y;
}

TEST(Int8OpsKernel, ConvIntegerGroupedPaddedStridedDilated) {
  for (int variant = 0; variant < 4; ++variant) {
    const bool xs = variant & 1, ws = variant & 2;
    const int64_t group = variant < 2 ? 1 : 2;
    const TensorData x = bytes_tensor(xs ? DType::Int8 : DType::UInt8, {2, 4, 7, 9}, 10 + variant);
    // 8 output channels: with group 2, 4 per group, which take the GEMM (fewer go direct).
    const TensorData w = bytes_tensor(ws ? DType::Int8 : DType::UInt8, {8, 4 / group, 3, 2}, 20 + variant);
    const std::vector<int64_t> pads = {1, 0, 2, 1}, strides = {2, 1}, dil = {1, 2};
    const int32_t xz = xs ? -7 : 131;
    std::vector<int32_t> wz = {ws ? 3 : 128, ws ? -5 : 120, 0, ws ? 127 : 255, ws ? -128 : 0, 9, 1, 2};
    std::vector<uint8_t> wzb(wz.size());
    for (size_t i = 0; i < wz.size(); ++i) wzb[i] = static_cast<uint8_t>(wz[i]);
    const TensorData xzt = values<uint8_t>(x.dtype, {}, {static_cast<uint8_t>(xz)});
    const TensorData wzt = values<uint8_t>(w.dtype, {8}, wzb);
    std::vector<int64_t> dims;
    const std::vector<int32_t> want = conv_reference(x, w, xz, wz, group, pads, strides, dil, &dims);
    cuvil::testing::on_every_cpu_path([&](int threads) {
      Result r = run("ConvInteger",
                     {{"group", int_attr(group)}, {"pads", ints_attr(pads)}, {"strides", ints_attr(strides)},
                      {"dilations", ints_attr(dil)}},
                     {&x, &w, &xzt, &wzt}, threads);
      ASSERT_TRUE(r.st.is_ok()) << r.st.message();
      ASSERT_EQ(r.out.dims, dims);
      std::vector<int32_t> got(want.size());
      std::memcpy(got.data(), r.out.bytes.data(), got.size() * 4);
      EXPECT_EQ(got, want) << "variant " << variant;
    });
  }
}

TEST(Int8OpsKernel, QLinearConvPerChannelWithBias) {
  const TensorData x = bytes_tensor(DType::UInt8, {1, 5, 6, 6}, 3);
  const TensorData w = bytes_tensor(DType::Int8, {7, 5, 3, 3}, 4);
  const std::vector<int64_t> pads = {1, 1, 1, 1}, strides = {1, 1}, dil = {1, 1};
  const std::vector<float> ws = {0.01f, 0.02f, 0.005f, 0.03f, 0.011f, 0.007f, 0.02f};
  const std::vector<int32_t> bias = {100, -2000, 0, 35000, -7, 12, 999};
  const float xscale = 0.05f, yscale = 0.9f;
  for (bool s8_out : {false, true}) {
    const TensorData xs = values<float>(DType::Float, {}, {xscale});
    const TensorData xz = values<uint8_t>(DType::UInt8, {}, {100});
    const TensorData wst = values<float>(DType::Float, {7}, ws);
    const TensorData wz = values<int8_t>(DType::Int8, {7}, std::vector<int8_t>(7, 0));
    const TensorData ys = values<float>(DType::Float, {}, {yscale});
    const TensorData yz = s8_out ? values<int8_t>(DType::Int8, {}, {-5}) : values<uint8_t>(DType::UInt8, {}, {128});
    const TensorData b = values<int32_t>(DType::Int32, {7}, bias);
    std::vector<int64_t> dims;
    const std::vector<int32_t> acc = conv_reference(x, w, 100, {0}, 1, pads, strides, dil, &dims);
    std::vector<int32_t> want(acc.size());
    const int64_t plane = dims[2] * dims[3];
    int saturated = 0;
    for (size_t i = 0; i < acc.size(); ++i) {
      const int64_t m = (static_cast<int64_t>(i) / plane) % 7;
      const float scale = xscale * ws[m] / yscale;
      float v = std::nearbyint(static_cast<float>(acc[i] + bias[m]) * scale) + (s8_out ? -5.f : 128.f);
      v = std::min(std::max(v, s8_out ? -128.f : 0.f), s8_out ? 127.f : 255.f);
      saturated += v == (s8_out ? -128.f : 0.f) || v == (s8_out ? 127.f : 255.f);
      want[i] = static_cast<int32_t>(v);
    }
    EXPECT_GT(saturated, 0);
    cuvil::testing::on_every_cpu_path([&](int threads) {
      Result r = run("QLinearConv", {{"pads", ints_attr(pads)}}, {&x, &xs, &xz, &w, &wst, &wz, &ys, &yz, &b}, threads);
      ASSERT_TRUE(r.st.is_ok()) << r.st.message();
      ASSERT_EQ(r.out.dims, dims);
      std::vector<int32_t> got(want.size());
      for (size_t i = 0; i < got.size(); ++i) got[i] = elem(r.out, static_cast<int64_t>(i));
      EXPECT_EQ(got, want) << (s8_out ? "int8" : "uint8") << " output";
    });
  }
}

TEST(Int8OpsKernel, MatMulIntegerBatchedAndBroadcast) {
  // A [2, 3, 5, 7] uint8 with per-row zero points, B [7, 9] int8 (shared: one folded product)
  // and B [2, 1, 7, 9] uint8 (broadcast over the 3) with per-column zero points.
  const TensorData a = bytes_tensor(DType::UInt8, {2, 3, 5, 7}, 5);
  const std::vector<uint8_t> azv = {0, 1, 128, 255, 77};
  const TensorData az = values<uint8_t>(DType::UInt8, {5}, azv);
  for (bool batched_b : {false, true}) {
    const TensorData b = batched_b ? bytes_tensor(DType::UInt8, {2, 1, 7, 9}, 6) : bytes_tensor(DType::Int8, {7, 9}, 7);
    std::vector<uint8_t> bzv(9);
    for (int j = 0; j < 9; ++j) bzv[j] = static_cast<uint8_t>(batched_b ? 30 * j : 250 + j);
    const TensorData bz = values<uint8_t>(b.dtype, {9}, bzv);
    std::vector<int32_t> want(2 * 3 * 5 * 9);
    for (int64_t t = 0; t < 6; ++t)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < 9; ++j) {
          int64_t s = 0;
          const int64_t boff = batched_b ? (t / 3) * 63 : 0;
          for (int64_t p = 0; p < 7; ++p)
            s += int64_t(elem(a, (t * 5 + i) * 7 + p) - azv[i]) *
                 (elem(b, boff + p * 9 + j) - (batched_b ? int32_t(bzv[j]) : int32_t(int8_t(bzv[j]))));
          want[(t * 5 + i) * 9 + j] = static_cast<int32_t>(s);
        }
    cuvil::testing::on_every_cpu_path([&](int threads) {
      Result r = run("MatMulInteger", {}, {&a, &b, &az, &bz}, threads);
      ASSERT_TRUE(r.st.is_ok()) << r.st.message();
      ASSERT_EQ(r.out.dims, (std::vector<int64_t>{2, 3, 5, 9}));
      std::vector<int32_t> got(want.size());
      std::memcpy(got.data(), r.out.bytes.data(), got.size() * 4);
      EXPECT_EQ(got, want) << (batched_b ? "batched b" : "shared b");
    });
  }
}

TEST(Int8OpsKernel, QLinearMatMulPerColumnAndPerRowScales) {
  const TensorData a = bytes_tensor(DType::Int8, {3, 6, 40}, 8);
  const TensorData b = bytes_tensor(DType::Int8, {40, 33}, 9);
  std::vector<float> bs(33);
  for (int j = 0; j < 33; ++j) bs[j] = 0.001f * (j + 1);
  const TensorData bst = values<float>(DType::Float, {33}, bs);
  const TensorData bz = values<int8_t>(DType::Int8, {}, {0});
  const TensorData az = values<int8_t>(DType::Int8, {}, {-3});
  const TensorData ys = values<float>(DType::Float, {}, {0.4f});
  const TensorData yz = values<uint8_t>(DType::UInt8, {}, {120});
  for (bool per_row : {false, true}) {
    std::vector<float> as(per_row ? 6 : 1);
    for (size_t i = 0; i < as.size(); ++i) as[i] = 0.02f + 0.003f * static_cast<float>(i);
    const TensorData ast = values<float>(DType::Float, {static_cast<int64_t>(as.size())}, as);
    std::vector<int32_t> want(3 * 6 * 33);
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t i = 0; i < 6; ++i)
        for (int64_t j = 0; j < 33; ++j) {
          int64_t s = 0;
          for (int64_t p = 0; p < 40; ++p) s += int64_t(elem(a, (t * 6 + i) * 40 + p) + 3) * elem(b, p * 33 + j);
          const float scale = as[per_row ? i : 0] * bs[j] / 0.4f;
          float v = std::nearbyint(static_cast<float>(s) * scale) + 120.f;
          want[(t * 6 + i) * 33 + j] = static_cast<int32_t>(std::min(std::max(v, 0.f), 255.f));
        }
    cuvil::testing::on_every_cpu_path([&](int threads) {
      Result r = run("QLinearMatMul", {}, {&a, &ast, &az, &b, &bst, &bz, &ys, &yz}, threads);
      ASSERT_TRUE(r.st.is_ok()) << r.st.message();
      std::vector<int32_t> got(want.size());
      for (size_t i = 0; i < got.size(); ++i) got[i] = elem(r.out, static_cast<int64_t>(i));
      EXPECT_EQ(got, want) << (per_row ? "per-row a_scale" : "one a_scale");
    });
  }
}

}  // namespace

namespace {

// Depthwise (group = channels) and 2 channels per group: the direct path, not the GEMM, with
// per-channel zero points and the requantising epilogue.
TEST(Int8OpsKernel, DepthwiseQLinearConvAndConvIntegerDirect) {
  for (int64_t mult : {1, 2}) {
    const int64_t c = 6, m = c * mult;
    const TensorData x = bytes_tensor(DType::UInt8, {2, c, 9, 8}, 41);
    const TensorData w = bytes_tensor(DType::Int8, {m, 1, 3, 3}, 42);
    const std::vector<int64_t> pads = {1, 1, 1, 1}, strides = {2, 1}, dil = {1, 1};
    std::vector<int32_t> wz(static_cast<size_t>(m));
    std::vector<int8_t> wzb(static_cast<size_t>(m));
    std::vector<float> wscale(static_cast<size_t>(m));
    std::vector<int32_t> bias(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      wz[i] = static_cast<int32_t>(i * 7 % 11) - 5;
      wzb[i] = static_cast<int8_t>(wz[i]);
      wscale[i] = 0.002f * static_cast<float>(i + 1);
      bias[i] = static_cast<int32_t>(i * 300) - 900;
    }
    const TensorData xz = values<uint8_t>(DType::UInt8, {}, {90});
    const TensorData wzt = values<int8_t>(DType::Int8, {m}, wzb);
    std::vector<int64_t> dims;
    const std::vector<int32_t> acc = conv_reference(x, w, 90, wz, c, pads, strides, dil, &dims);
    const std::map<std::string, Attribute> attrs = {
        {"group", int_attr(c)}, {"pads", ints_attr(pads)}, {"strides", ints_attr(strides)}};
    const TensorData xs = values<float>(DType::Float, {}, {0.03f});
    const TensorData wst = values<float>(DType::Float, {m}, wscale);
    const TensorData ys = values<float>(DType::Float, {}, {0.07f});
    const TensorData yz = values<uint8_t>(DType::UInt8, {}, {128});
    const TensorData b = values<int32_t>(DType::Int32, {m}, bias);
    const int64_t plane = dims[2] * dims[3];
    std::vector<int32_t> want(acc.size());
    for (size_t i = 0; i < acc.size(); ++i) {
      const int64_t ch = (static_cast<int64_t>(i) / plane) % m;
      float v = std::nearbyint(static_cast<float>(acc[i] + bias[ch]) * (0.03f * wscale[ch] / 0.07f)) + 128.f;
      want[i] = static_cast<int32_t>(std::min(std::max(v, 0.f), 255.f));
    }
    cuvil::testing::on_every_cpu_path([&](int threads) {
      Result r = run("ConvInteger", attrs, {&x, &w, &xz, &wzt}, threads);
      ASSERT_TRUE(r.st.is_ok()) << r.st.message();
      ASSERT_EQ(r.out.dims, dims);
      std::vector<int32_t> got(acc.size());
      std::memcpy(got.data(), r.out.bytes.data(), got.size() * 4);
      EXPECT_EQ(got, acc) << "ConvInteger, " << mult << " per group";
      Result q = run("QLinearConv", attrs, {&x, &xs, &xz, &w, &wst, &wzt, &ys, &yz, &b}, threads);
      ASSERT_TRUE(q.st.is_ok()) << q.st.message();
      std::vector<int32_t> gq(want.size());
      for (size_t i = 0; i < gq.size(); ++i) gq[i] = elem(q.out, static_cast<int64_t>(i));
      EXPECT_EQ(gq, want) << "QLinearConv, " << mult << " per group";
    });
  }
}

// An image large enough that the im2col columns are cut into chunks of output rows
// (nn.cpp's kColumnBudget): every chunk's product lands at its own rows.
TEST(Int8OpsKernel, ConvIntegerInChunksOfRows) {
  const TensorData x = bytes_tensor(DType::UInt8, {1, 64, 130, 130}, 31);
  const TensorData w = bytes_tensor(DType::Int8, {8, 64, 3, 3}, 32);
  const std::vector<int64_t> pads = {0, 0, 0, 0}, strides = {1, 1}, dil = {1, 1};
  const TensorData xzt = values<uint8_t>(DType::UInt8, {}, {17});
  std::vector<int64_t> dims;
  const std::vector<int32_t> want = conv_reference(x, w, 17, {0}, 1, pads, strides, dil, &dims);
  PathGuard guard;
  for (CpuPath path : rt::supported_cpu_paths()) {
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    Result r = run("ConvInteger", {}, {&x, &w, &xzt}, 2);
    ASSERT_TRUE(r.st.is_ok()) << r.st.message();
    ASSERT_EQ(r.out.dims, dims);
    std::vector<int32_t> got(want.size());
    std::memcpy(got.data(), r.out.bytes.data(), got.size() * 4);
    EXPECT_EQ(got, want) << rt::cpu_path_name(path);
  }
}

}  // namespace
