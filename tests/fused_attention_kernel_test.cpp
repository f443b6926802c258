// cuvil::Attention and cuvil::MaskedSoftmax reference kernels (runtime/cpu/ops/
// fused_attention.cpp) against a plain composition written out here: concatenate the cache,
// repeat the key/value heads, materialise Q @ K^T per head, scale, mask, softmax, @ V, exactly
// as the unfused ONNX graph does. Covers grouped-query heads, past/present, causal with S < T,
// float and bool masks broadcasting from several ranks, and the bad-input messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernel_harness.h"
#include "runtime/cpu/cpu_features.h"

using namespace cuvil;

namespace {

struct Tensor {
  std::vector<int64_t> dims;
  std::vector<float> f;    // float contents (when !is_bool)
  std::vector<uint8_t> b;  // bool contents
  bool is_bool = false;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  rt::TensorView view() const {
    rt::TensorView v;
    v.dtype = is_bool ? DType::Bool : DType::Float;
    v.dims = dims;
    v.data = is_bool ? const_cast<uint8_t*>(b.data()) : static_cast<void*>(const_cast<float*>(f.data()));
    return v;
  }
};

uint32_t g_seed = 12345;
float next_uniform() {  // deterministic, in [-1, 1)
  g_seed = g_seed * 1664525u + 1013904223u;
  return static_cast<float>(g_seed >> 8) / static_cast<float>(1u << 23) - 1.0f;
}
Tensor random_tensor(std::vector<int64_t> dims, float amplitude = 1.0f) {
  Tensor t;
  t.dims = std::move(dims);
  t.f.resize(static_cast<size_t>(t.numel()));
  for (float& x : t.f) x = amplitude * next_uniform();
  return t;
}
Tensor random_bool(std::vector<int64_t> dims) {
  Tensor t;
  t.is_bool = true;
  t.dims = std::move(dims);
  t.b.resize(static_cast<size_t>(t.numel()));
  // Mostly true, so that a row is rarely fully masked; column 0 is always kept below.
  for (uint8_t& x : t.b) x = next_uniform() > -0.6f;
  const int64_t last = t.dims.empty() ? 1 : t.dims.back();
  for (size_t i = 0; i < t.b.size(); i += static_cast<size_t>(last)) t.b[i] = 1;
  return t;
}

// Element of `t` read as if broadcast (numpy, right-aligned) to `target` at multi-index `idx`.
size_t broadcast_index(const Tensor& t, const std::vector<int64_t>& target, const std::vector<int64_t>& idx) {
  size_t off = 0;
  const size_t lead = target.size() - t.dims.size();
  for (size_t i = 0; i < t.dims.size(); ++i)
    off = off * static_cast<size_t>(t.dims[i]) + static_cast<size_t>(t.dims[i] == 1 ? 0 : idx[lead + i]);
  return off;
}

struct Case {
  Tensor q, k, v;
  std::optional<Tensor> mask, past_k, past_v;
  float scale = 0.0f;
  int64_t causal = 0;
};

// The unfused graph, written out: Concat, repeat_kv, MatMul(Q, Transpose(K)), Mul(scale),
// Add(mask) or Where(mask, s, -inf), causal Where, Softmax(-1), MatMul(probs, V).
struct Reference {
  std::vector<float> y, present_k, present_v;
};
Reference reference(const Case& c) {
  const int64_t B = c.q.dims[0], Hq = c.q.dims[1], S = c.q.dims[2], D = c.q.dims[3];
  const int64_t Hkv = c.k.dims[1], L = c.k.dims[2], Dv = c.v.dims[3];
  const int64_t P = c.past_k ? c.past_k->dims[2] : 0, T = P + L;
  Reference r;
  auto concat = [&](const Tensor* past, const Tensor& now, int64_t w) {
    std::vector<float> out(static_cast<size_t>(B * Hkv * T * w));
    for (int64_t bh = 0; bh < B * Hkv; ++bh)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < w; ++d)
          out[(bh * T + t) * w + d] = t < P ? past->f[(bh * P + t) * w + d] : now.f[(bh * L + t - P) * w + d];
    return out;
  };
  r.present_k = concat(c.past_k ? &*c.past_k : nullptr, c.k, D);
  r.present_v = concat(c.past_v ? &*c.past_v : nullptr, c.v, Dv);
  const float scale = c.scale != 0.0f ? c.scale : 1.0f / std::sqrt(static_cast<float>(D));
  const std::vector<int64_t> sdims{B, Hq, S, T};
  std::vector<float> scores(static_cast<size_t>(B * Hq * S * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / (Hq / Hkv);  // repeat_kv
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < T; ++j) {
          float dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += c.q.f[((b * Hq + h) * S + i) * D + d] * r.present_k[((b * Hkv + g) * T + j) * D + d];
          float s = dot * scale;
          if (c.mask) {
            const size_t mi = broadcast_index(*c.mask, sdims, {b, h, i, j});
            if (c.mask->is_bool) s = c.mask->b[mi] ? s : -INFINITY;
            else s += c.mask->f[mi];
          }
          if (c.causal && j > i + T - S) s = -INFINITY;
          scores[static_cast<size_t>(((b * Hq + h) * S + i) * T + j)] = s;
        }
    }
  for (int64_t row = 0; row < B * Hq * S; ++row) {  // Softmax(axis = -1)
    float* s = scores.data() + row * T;
    float m = -INFINITY;
    for (int64_t j = 0; j < T; ++j) m = std::max(m, s[j]);
    double sum = 0;
    for (int64_t j = 0; j < T; ++j) sum += std::exp(static_cast<double>(s[j]) - m);
    for (int64_t j = 0; j < T; ++j) s[j] = static_cast<float>(std::exp(static_cast<double>(s[j]) - m) / sum);
  }
  r.y.assign(static_cast<size_t>(B * Hq * S * Dv), 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < T; ++j)
            acc += scores[((b * Hq + h) * S + i) * T + j] *
                   r.present_v[((b * Hkv + h / (Hq / Hkv)) * T + j) * Dv + d];
          r.y[((b * Hq + h) * S + i) * Dv + d] = static_cast<float>(acc);
        }
  return r;
}

Attribute attr_int(int64_t v) { Attribute a; a.kind = Attribute::Kind::Int; a.i = v; return a; }
Attribute attr_float(float v) { Attribute a; a.kind = Attribute::Kind::Float; a.f = v; return a; }

struct KernelRun {
  Node node;
  std::vector<rt::TensorView> views;
  std::unique_ptr<cuvil::testing::HeapOpContext> ctx;
  rt::Status st;
  KernelRun(const std::string& op, const std::vector<const Tensor*>& inputs, size_t num_outputs,
            std::map<std::string, Attribute> attrs, int threads = 1) {
    node.op_type = op;
    node.domain = "cuvil";
    node.opset = 1;
    node.name = "fused";
    node.attrs = std::move(attrs);
    for (size_t i = 0; i < num_outputs; ++i) node.outputs.push_back(static_cast<ValueId>(i));
    views.reserve(inputs.size());
    std::vector<const rt::TensorView*> ptrs;
    for (const Tensor* t : inputs) {
      views.push_back(t ? t->view() : rt::TensorView{});
      ptrs.push_back(t ? &views.back() : nullptr);
    }
    ctx = std::make_unique<cuvil::testing::HeapOpContext>(node, ptrs, num_outputs, threads);
    rt::OpKernelFn fn = rt::find_op_kernel("cuvil", op);
    st = fn ? fn(*ctx) : rt::Status(rt::StatusCode::kUnsupported, "no kernel");
  }
  std::vector<float> out(size_t i) const {
    const rt::TensorView& o = ctx->output(i);
    std::vector<float> v(static_cast<size_t>(o.numel()));
    if (!v.empty()) std::memcpy(v.data(), o.data, v.size() * 4);
    return v;
  }
};

void expect_close(const std::vector<float>& actual, const std::vector<float>& expected, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], 1e-5 + 1e-4 * std::fabs(expected[i])) << what << " element " << i;
}

void check_attention(const Case& c, int threads = 1) {
  std::map<std::string, Attribute> attrs;
  if (c.scale != 0.0f) attrs["scale"] = attr_float(c.scale);
  if (c.causal) attrs["is_causal"] = attr_int(1);
  const Tensor* mask = c.mask ? &*c.mask : nullptr;
  const bool past = c.past_k.has_value();
  std::vector<const Tensor*> in{&c.q, &c.k, &c.v, mask};
  if (past) {
    in.push_back(&*c.past_k);
    in.push_back(&*c.past_v);
  }
  KernelRun run("Attention", in, past ? 3 : 1, attrs, threads);
  ASSERT_TRUE(run.st.is_ok()) << run.st.message();
  const Reference r = reference(c);
  const int64_t T = c.k.dims[2] + (past ? c.past_k->dims[2] : 0);
  EXPECT_EQ(run.ctx->output(0).dims,
            (std::vector<int64_t>{c.q.dims[0], c.q.dims[1], c.q.dims[2], c.v.dims[3]}));
  expect_close(run.out(0), r.y, "Y");
  if (past) {
    EXPECT_EQ(run.ctx->output(1).dims, (std::vector<int64_t>{c.k.dims[0], c.k.dims[1], T, c.k.dims[3]}));
    expect_close(run.out(1), r.present_k, "present_key");
    expect_close(run.out(2), r.present_v, "present_value");
  }
}

TEST(FusedAttentionKernel, PlainMultiHead) {
  Case c;
  c.q = random_tensor({2, 3, 5, 8});
  c.k = random_tensor({2, 3, 5, 8});
  c.v = random_tensor({2, 3, 5, 6});
  check_attention(c);
  c.scale = 0.7f;  // an explicit scale instead of 1/sqrt(D)
  check_attention(c);
}

TEST(FusedAttentionKernel, GroupedQueryHeads) {
  Case c;
  c.q = random_tensor({1, 6, 4, 4}, 2.0f);
  c.k = random_tensor({1, 2, 7, 4}, 2.0f);
  c.v = random_tensor({1, 2, 7, 3});
  check_attention(c);
}

TEST(FusedAttentionKernel, PastAndPresentWithCausalShorterQuery) {
  Case c;
  c.q = random_tensor({2, 4, 3, 8});
  c.k = random_tensor({2, 2, 3, 8});
  c.v = random_tensor({2, 2, 3, 8});
  c.past_k = random_tensor({2, 2, 5, 8});
  c.past_v = random_tensor({2, 2, 5, 8});
  c.causal = 1;  // S = 3 queries over T = 8 keys: query i sees keys j <= i + 5
  check_attention(c);
}

// Long enough for several query blocks (64 rows each, the last one partial) and for the
// packed GEMM path, with a past, grouped heads, a broadcast float mask and the causal cut; on
// every kernel path this CPU has, and bitwise equal on 1 and 3 threads.
TEST(FusedAttentionKernel, LongSequencesOnEveryPathAndThreadCount) {
  Case c;
  c.q = random_tensor({1, 4, 150, 64});
  c.k = random_tensor({1, 2, 150, 64});
  c.v = random_tensor({1, 2, 150, 40});
  c.past_k = random_tensor({1, 2, 37, 64});
  c.past_v = random_tensor({1, 2, 37, 40});
  c.mask = random_tensor({1, 1, 150, 187});
  const rt::CpuPath active = rt::active_cpu_path();
  for (rt::CpuPath path : rt::supported_cpu_paths()) {
    SCOPED_TRACE(rt::cpu_path_name(path));
    ASSERT_TRUE(rt::set_cpu_path_for_testing(path));
    for (int64_t causal : {0, 1}) {
      c.causal = causal;
      check_attention(c, 1);
      std::vector<const Tensor*> in{&c.q, &c.k, &c.v, &*c.mask, &*c.past_k, &*c.past_v};
      std::map<std::string, Attribute> attrs;
      if (causal) attrs["is_causal"] = attr_int(1);
      KernelRun one("Attention", in, 3, attrs, 1), three("Attention", in, 3, attrs, 3);
      ASSERT_TRUE(one.st.is_ok() && three.st.is_ok());
      const std::vector<float> a = one.out(0), b = three.out(0);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "1 and 3 threads differ";
    }
  }
  rt::set_cpu_path_for_testing(active);
}

TEST(FusedAttentionKernel, CausalWithoutPastIsLowerTriangular) {
  Case c;
  c.q = random_tensor({1, 2, 6, 4});
  c.k = random_tensor({1, 2, 6, 4});
  c.v = random_tensor({1, 2, 6, 4});
  c.causal = 1;
  check_attention(c);
  // Row 0 sees only key 0: its output is exactly V's first row.
  KernelRun run("Attention", {&c.q, &c.k, &c.v, nullptr}, 1, {{"is_causal", attr_int(1)}});
  ASSERT_TRUE(run.st.is_ok()) << run.st.message();
  const std::vector<float> y = run.out(0);
  for (int64_t d = 0; d < 4; ++d) EXPECT_FLOAT_EQ(y[d], c.v.f[d]);
}

TEST(FusedAttentionKernel, FloatMasksBroadcast) {
  for (std::vector<int64_t> mdims : std::vector<std::vector<int64_t>>{
           {2, 1, 1, 7}, {2, 3, 4, 7}, {4, 7}, {7}, {1, 3, 1, 1}}) {
    Case c;
    c.q = random_tensor({2, 3, 4, 8});
    c.k = random_tensor({2, 3, 7, 8});
    c.v = random_tensor({2, 3, 7, 5});
    c.mask = random_tensor(mdims, 3.0f);
    SCOPED_TRACE(::testing::PrintToString(mdims));
    check_attention(c);
  }
}

TEST(FusedAttentionKernel, BoolMasksBroadcastAndCombineWithCausal) {
  for (std::vector<int64_t> mdims : std::vector<std::vector<int64_t>>{{2, 1, 1, 6}, {1, 1, 4, 6}, {2, 3, 4, 6}}) {
    Case c;
    c.q = random_tensor({2, 3, 4, 8});
    c.k = random_tensor({2, 3, 2, 8});
    c.v = random_tensor({2, 3, 2, 8});
    c.past_k = random_tensor({2, 3, 4, 8});
    c.past_v = random_tensor({2, 3, 4, 8});
    c.mask = random_bool(mdims);
    c.causal = 1;
    SCOPED_TRACE(::testing::PrintToString(mdims));
    check_attention(c);
  }
}

TEST(FusedAttentionKernel, FullyMaskedRowIsNaNAsSoftmaxGives) {
  Case c;
  c.q = random_tensor({1, 1, 2, 4});
  c.k = random_tensor({1, 1, 3, 4});
  c.v = random_tensor({1, 1, 3, 4});
  Tensor m;
  m.is_bool = true;
  m.dims = {2, 3};
  m.b = {0, 0, 0, 1, 1, 0};
  KernelRun run("Attention", {&c.q, &c.k, &c.v, &m}, 1, {});
  ASSERT_TRUE(run.st.is_ok()) << run.st.message();
  const std::vector<float> y = run.out(0);
  for (int64_t d = 0; d < 4; ++d) EXPECT_TRUE(std::isnan(y[d])) << d;
  for (int64_t d = 4; d < 8; ++d) EXPECT_FALSE(std::isnan(y[d])) << d;
}

TEST(FusedAttentionKernel, MaskedSoftmaxMatchesScaleAddSoftmax) {
  for (bool use_bool : {false, true}) {
    Tensor x = random_tensor({2, 3, 4, 5}, 4.0f);
    Tensor mask = use_bool ? random_bool({2, 1, 4, 5}) : random_tensor({1, 4, 5}, 2.0f);
    const float scale = 0.125f;
    KernelRun run("MaskedSoftmax", {&x, &mask}, 1, {{"scale", attr_float(scale)}});
    ASSERT_TRUE(run.st.is_ok()) << run.st.message();
    std::vector<float> expected(x.f.size());
    for (int64_t row = 0; row < x.numel() / 5; ++row) {
      float s[5], m = -INFINITY;
      for (int64_t j = 0; j < 5; ++j) {
        const int64_t flat = row * 5 + j;
        const std::vector<int64_t> idx{flat / 60, flat / 20 % 3, flat / 5 % 4, j};
        const size_t mi = broadcast_index(mask, x.dims, idx);
        s[j] = scale * x.f[flat];
        if (use_bool) s[j] = mask.b[mi] ? s[j] : -INFINITY;
        else s[j] += mask.f[mi];
        m = std::max(m, s[j]);
      }
      double sum = 0;
      for (float v : s) sum += std::exp(static_cast<double>(v) - m);
      for (int64_t j = 0; j < 5; ++j)
        expected[row * 5 + j] = static_cast<float>(std::exp(static_cast<double>(s[j]) - m) / sum);
    }
    expect_close(run.out(0), expected, use_bool ? "bool mask" : "float mask");
  }
  // Without a mask and scale it is plain Softmax over the last axis.
  Tensor x = random_tensor({3, 4});
  KernelRun run("MaskedSoftmax", {&x}, 1, {});
  ASSERT_TRUE(run.st.is_ok()) << run.st.message();
  const std::vector<float> y = run.out(0);
  for (int r = 0; r < 3; ++r) {
    double sum = 0;
    for (int j = 0; j < 4; ++j) sum += y[r * 4 + j];
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

#define EXPECT_KERNEL_ERROR(run, substr)                                                   \
  do {                                                                                     \
    EXPECT_FALSE((run).st.is_ok());                                                        \
    EXPECT_NE((run).st.message().find(substr), std::string::npos) << (run).st.message();   \
    EXPECT_NE((run).st.message().find("'fused'"), std::string::npos) << (run).st.message(); \
  } while (0)

TEST(FusedAttentionKernel, BadInputsAreErrorsNamingTheNode) {
  Tensor q = random_tensor({1, 4, 2, 8}), k = random_tensor({1, 3, 5, 8}), v = random_tensor({1, 3, 5, 8});
  EXPECT_KERNEL_ERROR(KernelRun("Attention", {&q, &k, &v}, 1, {}), "are not a multiple of key/value heads");
  Tensor k2 = random_tensor({1, 2, 5, 7});
  EXPECT_KERNEL_ERROR(KernelRun("Attention", {&q, &k2, &v}, 1, {}), "do not agree");
  Tensor q3 = random_tensor({4, 2, 8});
  EXPECT_KERNEL_ERROR(KernelRun("Attention", {&q3, &k, &v}, 1, {}), "must be rank 4");
  Tensor kk = random_tensor({1, 2, 5, 8}), vv = random_tensor({1, 2, 5, 8});
  Tensor bad_mask = random_tensor({1, 1, 3, 5});
  EXPECT_KERNEL_ERROR(KernelRun("Attention", {&q, &kk, &vv, &bad_mask}, 1, {}), "does not broadcast to [1,4,2,5]");
  Tensor past = random_tensor({1, 2, 3, 8});
  EXPECT_KERNEL_ERROR(KernelRun("Attention", {&q, &kk, &vv, nullptr, &past}, 3, {}), "input past_value is missing");
  Tensor past_v = random_tensor({1, 2, 4, 8});
  EXPECT_KERNEL_ERROR(KernelRun("Attention", {&q, &kk, &vv, nullptr, &past, &past_v}, 3, {}), "do not fit");
  EXPECT_KERNEL_ERROR(KernelRun("Attention", {&q, &kk, &vv}, 1, {{"is_causal", attr_int(2)}}), "is_causal is 2");
  EXPECT_KERNEL_ERROR(KernelRun("Attention", {&q, &kk}, 1, {}), "input V is missing");
  // Only float32 is implemented; other dtypes are refused by name.
  std::vector<uint16_t> halves(static_cast<size_t>(q.numel()));
  rt::TensorView half_q{DType::Float16, q.dims, halves.data()};
  Node node;
  node.op_type = "Attention";
  node.domain = "cuvil";
  node.name = "fused";
  node.outputs = {0};
  rt::TensorView kv = kk.view(), vv_view = vv.view();
  cuvil::testing::HeapOpContext ctx(node, {&half_q, &kv, &vv_view}, 1);
  const rt::Status st = rt::find_op_kernel("cuvil", "Attention")(ctx);
  EXPECT_NE(st.message().find("Q is f16; only f32 is supported"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'fused'"), std::string::npos) << st.message();

  Tensor x = random_tensor({2, 3}), m = random_tensor({3, 3});
  EXPECT_KERNEL_ERROR(KernelRun("MaskedSoftmax", {&x, &m}, 1, {}), "mask [3,3] does not broadcast to [2,3]");
  Tensor scalar = random_tensor({});
  EXPECT_KERNEL_ERROR(KernelRun("MaskedSoftmax", {&scalar}, 1, {}), "X is a scalar");
  std::vector<int64_t> ints(6);
  rt::TensorView int_mask{DType::Int64, {2, 3}, ints.data()};
  Node ms;
  ms.op_type = "MaskedSoftmax";
  ms.domain = "cuvil";
  ms.name = "fused";
  ms.outputs = {0};
  rt::TensorView xv = x.view();
  cuvil::testing::HeapOpContext mctx(ms, {&xv, &int_mask}, 1);
  const rt::Status mst = rt::find_op_kernel("cuvil", "MaskedSoftmax")(mctx);
  EXPECT_NE(mst.message().find("mask is i64, expected f32 or bool"), std::string::npos) << mst.message();
}

}  // namespace
