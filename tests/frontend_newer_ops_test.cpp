// The ONNX ops of opsets 23..28 that the importer expands into cuvil's fused ops
// (frontend/newer_ops.h): which op each becomes, the diagnostics for attributes outside what
// cuvil computes, and RotaryEmbedding's layouts run against a scalar transcription of the ONNX
// reference (onnx/reference/ops/op_rotary_embedding.py). The wheel's node cases
// (ConformanceWheel) check every expansion against the reference's outputs too.
#include <gtest/gtest.h>

#include <cmath>
#include <list>

#include "onnx_builder.h"
#include "runtime_harness.h"

namespace cuvil {
namespace {

using test::add_input;
using test::add_node;
using test::add_output;

std::vector<const Node*> nodes_of(const Model& m, OpKind op) {
  std::vector<const Node*> out;
  for (const Node& n : m.graph->nodes)
    if (n.op == op) out.push_back(&n);
  return out;
}

Model import(const onnx::ModelProto& m) {
  std::string bytes;
  m.SerializeToString(&bytes);
  return frontend::import_onnx_bytes(bytes, "", {}, "newer.onnx");
}

TEST(FrontendNewerOps, EachBecomesItsFusedOp) {
  onnx::ModelProto m = test::make_model(28, 11);
  auto* g = m.mutable_graph();
  add_input(g, "x", onnx::TensorProto::FLOAT, {2, 4});
  add_input(g, "s", onnx::TensorProto::FLOAT, {4});
  auto* rms = add_node(g, "RMSNormalization", {"x", "s"}, {"r"}, "rms");
  test::set_attr_float(rms, "epsilon", 0.5f);
  test::set_attr_int(rms, "axis", 1);
  test::set_attr_float(add_node(g, "Swish", {"r"}, {"w"}, "swish"), "alpha", 2.0f);
  add_node(g, "SwiGLU", {"w", "x"}, {"y"}, "glu");
  add_output(g, "y", onnx::TensorProto::FLOAT, {2, 4});
  Model model = import(m);
  ASSERT_EQ(nodes_of(model, OpKind::RMSNorm).size(), 1u);
  EXPECT_FLOAT_EQ(nodes_of(model, OpKind::RMSNorm)[0]->attr_float("epsilon", 0), 0.5f);
  EXPECT_EQ(nodes_of(model, OpKind::RMSNorm)[0]->attr_int("axis", 0), 1);
  ASSERT_EQ(nodes_of(model, OpKind::SiLU).size(), 1u);
  EXPECT_FLOAT_EQ(nodes_of(model, OpKind::SiLU)[0]->attr_float("alpha", 0), 2.0f);
  EXPECT_EQ(nodes_of(model, OpKind::SwiGLU).size(), 1u);
  EXPECT_TRUE(frontend::find_unsupported(model).empty());
  // Before the opset that defines it, the name is no standard op.
  m.mutable_opset_import(0)->set_version(22);
  EXPECT_EQ(frontend::find_unsupported(import(m)).size(), 3u);
}

TEST(FrontendNewerOps, AttributesOutsideCuvilAreRefused) {
  onnx::ModelProto m = test::make_model(23, 10);
  auto* g = m.mutable_graph();
  add_input(g, "x");
  add_input(g, "s");
  test::set_attr_int(add_node(g, "RMSNormalization", {"x", "s"}, {"y"}, "rms"), "stash_type", 0);
  add_output(g, "y");
  EXPECT_TRUE(test::FailsWith([&] { import(m); }, ExitCode::kUnsupported,
                              {"node 'rms' (RMSNormalization)", "stash_type 0"}));
  onnx::ModelProto m2 = test::make_model(23, 10);
  g = m2.mutable_graph();
  add_input(g, "x");
  add_node(g, "RotaryEmbedding", {"x"}, {"y"}, "rope");
  add_output(g, "y");
  EXPECT_TRUE(test::FailsWith([&] { import(m2); }, ExitCode::kUnsupported,
                              {"node 'rope' (RotaryEmbedding)", "3 to 4 inputs"}));
}

// Attention of declared float32 inputs without softcap or qk_matmul_output is one
// cuvil::Attention (the causal rule and the mask in its float mask); softcap takes the plain ops
// of the reference; a mask whose type the model does not say is refused.
TEST(FrontendNewerOps, AttentionBecomesCuvilAttentionWhereItFits) {
  auto model = [](bool softcap, bool declare_mask) {
    onnx::ModelProto m = test::make_model(23, 10);
    auto* g = m.mutable_graph();
    for (const char* name : {"x", "k", "v"}) add_input(g, name, onnx::TensorProto::FLOAT, {1, 2, 3, 4});
    add_node(g, "Transpose", {"x"}, {"q"}, "q_from_x");  // the type follows the producer chain
    if (declare_mask) {
      add_input(g, "mask", onnx::TensorProto::BOOL, {3, 3});
    } else {  // Where's output type is its second input's: not followed
      add_input(g, "c", onnx::TensorProto::BOOL, {3, 3});
      add_node(g, "Where", {"c", "c", "c"}, {"mask"}, "opaque");
    }
    auto* n = add_node(g, "Attention", {"q", "k", "v", "mask"}, {"y"}, "attn");
    test::set_attr_int(n, "is_causal", 1);
    if (softcap) test::set_attr_float(n, "softcap", 2.f);
    add_output(g, "y", onnx::TensorProto::FLOAT, {1, 2, 3, 4});
    return m;
  };
  Model fused = import(model(false, true));
  ASSERT_EQ(nodes_of(fused, OpKind::Attention).size(), 1u);
  EXPECT_EQ(nodes_of(fused, OpKind::Attention)[0]->attr_int("is_causal", 0), 0);
  EXPECT_EQ(nodes_of(fused, OpKind::Attention)[0]->inputs.size(), 4u);  // the bias as its mask
  Model plain = import(model(true, true));
  EXPECT_TRUE(nodes_of(plain, OpKind::Attention).empty());
  EXPECT_EQ(nodes_of(plain, OpKind::Softmax).size(), 1u);
  EXPECT_EQ(nodes_of(plain, OpKind::Tanh).size(), 1u);
  EXPECT_TRUE(test::FailsWith([&] { import(model(false, false)); }, ExitCode::kUnsupported,
                              {"node 'attn' (Attention)", "the type of attn_mask 'mask' is not declared"}));
}

// Scalar transcription of the ONNX reference on [B, S, H, D] data (x_bshd), caches [B, S, r/2].
std::vector<float> rope_reference(const std::vector<float>& x, int64_t B, int64_t S, int64_t H, int64_t D,
                                  const std::vector<float>& cos, const std::vector<float>& sin, int64_t r,
                                  bool interleaved) {
  std::vector<float> y = x;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        const float* xr = &x[static_cast<size_t>(((b * S + s) * H + h) * D)];
        float* yr = &y[static_cast<size_t>(((b * S + s) * H + h) * D)];
        for (int64_t i = 0; i < r / 2; ++i) {
          const float c = cos[static_cast<size_t>((b * S + s) * (r / 2) + i)];
          const float sn = sin[static_cast<size_t>((b * S + s) * (r / 2) + i)];
          const int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + r / 2;
          yr[i1] = c * xr[i1] - sn * xr[i2];
          yr[i2] = sn * xr[i1] + c * xr[i2];
        }
      }
  return y;
}

// Binds a float or double input from float values. The session borrows the data until the
// run: the double copies live in `keep`.
cuvil_status set_input(cuvil_session* s, const char* name, bool dbl, const std::vector<int64_t>& dims,
                       const std::vector<float>& v, std::list<std::vector<double>>& keep) {
  if (!dbl) return test::set_f32(s, name, dims, v);
  const std::vector<double>& d = keep.emplace_back(v.begin(), v.end());
  return cuvil_session_set_input(s, name, 11, static_cast<int32_t>(dims.size()), dims.data(), d.data(),
                                 d.size() * sizeof(double));
}
std::vector<double> output_values(cuvil_session* s, bool dbl, std::vector<int64_t>* dims) {
  if (dbl) return test::output<double>(s, 0, dims);
  std::vector<float> f = test::output<float>(s, 0, dims);
  return std::vector<double>(f.begin(), f.end());
}

// 3-D input with num_heads, a partial rotary width and position ids, both pairings; float32
// (cuvil::Rotary) and double (the plain ops).
TEST(FrontendNewerOps, RotaryEmbeddingMatchesTheOnnxReference) {
  const int64_t B = 2, S = 3, H = 2, D = 8, r = 4, P = 5;
  for (int dbl = 0; dbl < 2; ++dbl)
    for (int interleaved = 0; interleaved < 2; ++interleaved) {
      SCOPED_TRACE(std::string(interleaved ? "interleaved" : "halves") + (dbl ? " double" : " float"));
      const int32_t type = dbl ? onnx::TensorProto::DOUBLE : onnx::TensorProto::FLOAT;
      onnx::ModelProto m = test::make_model(23, 10);
      auto* g = m.mutable_graph();
      add_input(g, "x", type, {B, S, H * D});
      add_input(g, "cos", type, {P, r / 2});
      add_input(g, "sin", type, {P, r / 2});
      add_input(g, "pos", onnx::TensorProto::INT64, {B, S});
      auto* n = add_node(g, "RotaryEmbedding", {"x", "cos", "sin", "pos"}, {"y"}, "rope");
      test::set_attr_int(n, "num_heads", H);
      test::set_attr_int(n, "rotary_embedding_dim", r);
      test::set_attr_int(n, "interleaved", interleaved);
      add_output(g, "y", type, {B, S, H * D});
      EXPECT_EQ(nodes_of(import(m), OpKind::Rotary).size(), dbl ? 0u : 1u);
      std::vector<float> x(B * S * H * D), cos(P * r / 2), sin(P * r / 2);
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 2.f;
      for (size_t i = 0; i < cos.size(); ++i) {
        cos[i] = std::cos(0.5f * static_cast<float>(i));
        sin[i] = std::sin(0.5f * static_cast<float>(i));
      }
      const std::vector<int64_t> pos = {0, 1, 2, 4, 3, 1};
      std::vector<float> cg, sg;  // the caches gathered by pos: [B, S, r/2]
      for (int64_t p : pos)
        for (int64_t i = 0; i < r / 2; ++i) {
          cg.push_back(cos[static_cast<size_t>(p * (r / 2) + i)]);
          sg.push_back(sin[static_cast<size_t>(p * (r / 2) + i)]);
        }
      auto model = test::load(test::compile(m));
      auto session = test::open_session(model.get());
      std::list<std::vector<double>> keep;
      ASSERT_TRUE(test::Ok(set_input(session.get(), "x", dbl, {B, S, H * D}, x, keep)));
      ASSERT_TRUE(test::Ok(set_input(session.get(), "cos", dbl, {P, r / 2}, cos, keep)));
      ASSERT_TRUE(test::Ok(set_input(session.get(), "sin", dbl, {P, r / 2}, sin, keep)));
      ASSERT_TRUE(test::Ok(cuvil_session_set_input(session.get(), "pos", test::kI64, 2,
                                                   std::vector<int64_t>{B, S}.data(), pos.data(),
                                                   pos.size() * sizeof(int64_t))));
      ASSERT_TRUE(test::Ok(cuvil_session_run(session.get())));
      std::vector<int64_t> dims;
      std::vector<double> y = output_values(session.get(), dbl, &dims);
      EXPECT_EQ(dims, (std::vector<int64_t>{B, S, H * D}));
      std::vector<float> want = rope_reference(x, B, S, H, D, cg, sg, r, interleaved == 1);
      ASSERT_EQ(y.size(), want.size());
      for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-5) << "element " << i;
    }
}

// RMSNormalization over the last two axes: float32 (cuvil::RMSNorm) and double (plain ops).
TEST(FrontendNewerOps, RmsNormalizationMatchesTheOnnxReference) {
  const std::vector<float> x = {1, -2, 3, 0.5f, 4, -1, 2, 2, -3, 1, 0, 6};  // [2, 2, 3]
  const std::vector<float> scale = {0.5f, 1, 2, -1, 1.5f, 3};             // [2, 3]
  for (int dbl = 0; dbl < 2; ++dbl) {
    SCOPED_TRACE(dbl ? "double" : "float");
    const int32_t type = dbl ? onnx::TensorProto::DOUBLE : onnx::TensorProto::FLOAT;
    onnx::ModelProto m = test::make_model(23, 10);
    auto* g = m.mutable_graph();
    add_input(g, "x", type, {2, 2, 3});
    add_input(g, "s", type, {2, 3});
    auto* n = add_node(g, "RMSNormalization", {"x", "s"}, {"y"}, "rms");
    test::set_attr_int(n, "axis", -2);
    test::set_attr_float(n, "epsilon", 0.25f);
    add_output(g, "y", type, {2, 2, 3});
    EXPECT_EQ(nodes_of(import(m), OpKind::RMSNorm).size(), dbl ? 0u : 1u);
    auto model = test::load(test::compile(m));
    auto session = test::open_session(model.get());
    std::list<std::vector<double>> keep;
    ASSERT_TRUE(test::Ok(set_input(session.get(), "x", dbl, {2, 2, 3}, x, keep)));
    ASSERT_TRUE(test::Ok(set_input(session.get(), "s", dbl, {2, 3}, scale, keep)));
    ASSERT_TRUE(test::Ok(cuvil_session_run(session.get())));
    std::vector<int64_t> dims;
    std::vector<double> y = output_values(session.get(), dbl, &dims);
    ASSERT_EQ(y.size(), x.size());
    for (size_t b = 0; b < 2; ++b) {
      double sq = 0;
      for (size_t i = 0; i < 6; ++i) sq += static_cast<double>(x[b * 6 + i]) * x[b * 6 + i];
      const double inv = 1 / std::sqrt(sq / 6 + 0.25);
      for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(y[b * 6 + i], x[b * 6 + i] * inv * scale[i], 1e-5) << b << "," << i;
    }
  }
}

// CausalConvWithState against a scalar transcription of the ONNX reference
// (onnx/reference/ops/op_causal_conv_with_state.py): with and without past state and bias,
// with and without SiLU, kernel widths 1 and 3; both outputs.
TEST(FrontendNewerOps, CausalConvWithStateMatchesTheOnnxReference) {
  const int64_t B = 2, C = 3, L = 5;
  for (int64_t k : {1, 3})
    for (int with_past = 0; with_past < 2; ++with_past)
      for (int with_bias = 0; with_bias < 2; ++with_bias)
        for (int silu = 0; silu < 2; ++silu) {
          SCOPED_TRACE("k " + std::to_string(k) + " past " + std::to_string(with_past) + " bias " +
                       std::to_string(with_bias) + " silu " + std::to_string(silu));
          onnx::ModelProto m = test::make_model(27, 11);
          auto* g = m.mutable_graph();
          add_input(g, "x", onnx::TensorProto::FLOAT, {B, C, L});
          add_input(g, "w", onnx::TensorProto::FLOAT, {C, 1, k});
          std::vector<std::string> ins = {"x", "w", "", ""};
          if (with_bias) add_input(g, "b", onnx::TensorProto::FLOAT, {C}), ins[2] = "b";
          if (with_past) add_input(g, "past", onnx::TensorProto::FLOAT, {B, C, k - 1}), ins[3] = "past";
          while (ins.back().empty()) ins.pop_back();
          auto* n = add_node(g, "CausalConvWithState", ins, {"y", "state"}, "ccws");
          if (silu) test::set_attr_string(n, "activation", "silu");
          add_output(g, "y", onnx::TensorProto::FLOAT, {B, C, L});
          add_output(g, "state", onnx::TensorProto::FLOAT, {B, C, k - 1});
          std::vector<float> x(B * C * L), w(C * k), b(C), past(B * C * (k - 1));
          for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * static_cast<float>(i)) * 2.f;
          for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.3f * static_cast<float>(i));
          for (size_t i = 0; i < b.size(); ++i) b[i] = 0.25f * static_cast<float>(i) - 0.3f;
          for (size_t i = 0; i < past.size(); ++i) past[i] = 1.5f - 0.2f * static_cast<float>(i);
          auto model = test::load(test::compile(m));
          auto session = test::open_session(model.get());
          ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "x", {B, C, L}, x)));
          ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "w", {C, 1, k}, w)));
          if (with_bias) ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "b", {C}, b)));
          if (with_past) ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "past", {B, C, k - 1}, past)));
          ASSERT_TRUE(test::Ok(cuvil_session_run(session.get())));
          std::vector<int64_t> ydims, sdims;
          const std::vector<float> y = test::output<float>(session.get(), 0, &ydims);
          const std::vector<float> state = test::output<float>(session.get(), 1, &sdims);
          EXPECT_EQ(ydims, (std::vector<int64_t>{B, C, L}));
          EXPECT_EQ(sdims, (std::vector<int64_t>{B, C, k - 1}));
          ASSERT_EQ(y.size(), x.size());
          ASSERT_EQ(state.size(), past.size());
          for (int64_t bb = 0; bb < B; ++bb)
            for (int64_t c = 0; c < C; ++c) {
              // padded = past (or zeros) then x, L + k - 1 long
              std::vector<float> padded;
              for (int64_t j = 0; j < k - 1; ++j) padded.push_back(with_past ? past[static_cast<size_t>((bb * C + c) * (k - 1) + j)] : 0.f);
              for (int64_t t = 0; t < L; ++t) padded.push_back(x[static_cast<size_t>((bb * C + c) * L + t)]);
              for (int64_t t = 0; t < L; ++t) {
                double acc = with_bias ? b[static_cast<size_t>(c)] : 0.0;
                for (int64_t j = 0; j < k; ++j) acc += double(w[static_cast<size_t>(c * k + j)]) * padded[static_cast<size_t>(t + j)];
                if (silu) acc = acc / (1 + std::exp(-acc));
                EXPECT_NEAR(y[static_cast<size_t>((bb * C + c) * L + t)], acc, 1e-5) << bb << "," << c << "," << t;
              }
              for (int64_t j = 0; j < k - 1; ++j)
                EXPECT_EQ(state[static_cast<size_t>((bb * C + c) * (k - 1) + j)], padded[static_cast<size_t>(L + j)]);
            }
        }
  // Conv's group is the channel count: without it declared, a clear refusal.
  onnx::ModelProto m = test::make_model(27, 11);
  auto* g = m.mutable_graph();
  add_input(g, "x", onnx::TensorProto::FLOAT, {"b", "c", "l"});
  add_input(g, "w", onnx::TensorProto::FLOAT, {"c", 1, 3});
  add_node(g, "CausalConvWithState", {"x", "w"}, {"y", "state"}, "ccws");
  add_output(g, "y");
  EXPECT_TRUE(test::FailsWith([&] { import(m); }, ExitCode::kUnsupported,
                              {"node 'ccws' (CausalConvWithState)", "channel count must be known at import"}));
}

// AffineGrid, 2-D and 3-D, both align_corners, an axis of length 1 included, against the
// reference's formula (onnx/reference/ops/op_affine_grid.py): theta times (x, y[, z], 1).
TEST(FrontendNewerOps, AffineGridMatchesTheOnnxReference) {
  for (int three_d = 0; three_d < 2; ++three_d)
    for (int align = 0; align < 2; ++align) {
      SCOPED_TRACE(std::string(three_d ? "3-D" : "2-D") + " align_corners " + std::to_string(align));
      const int64_t N = 2, k = three_d ? 3 : 2;
      const std::vector<int64_t> size = three_d ? std::vector<int64_t>{N, 1, 2, 1, 4} : std::vector<int64_t>{N, 1, 3, 1};
      onnx::ModelProto m = test::make_model(20, 9);
      auto* g = m.mutable_graph();
      add_input(g, "theta", onnx::TensorProto::FLOAT, {N, k, k + 1});
      add_input(g, "size", onnx::TensorProto::INT64, {static_cast<int64_t>(size.size())});
      test::set_attr_int(add_node(g, "AffineGrid", {"theta", "size"}, {"grid"}, "grid"), "align_corners", align);
      add_output(g, "grid", onnx::TensorProto::FLOAT);
      std::vector<float> theta(static_cast<size_t>(N * k * (k + 1)));
      for (size_t i = 0; i < theta.size(); ++i) theta[i] = std::sin(1.3f * static_cast<float>(i) + 0.2f);
      auto model = test::load(test::compile(m));
      auto session = test::open_session(model.get());
      ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "theta", {N, k, k + 1}, theta)));
      ASSERT_TRUE(test::Ok(cuvil_session_set_input(session.get(), "size", test::kI64, 1,
                                                   std::vector<int64_t>{static_cast<int64_t>(size.size())}.data(),
                                                   size.data(), size.size() * sizeof(int64_t))));
      ASSERT_TRUE(test::Ok(cuvil_session_run(session.get())));
      std::vector<int64_t> dims;
      const std::vector<float> grid = test::output<float>(session.get(), 0, &dims);
      std::vector<int64_t> want_dims = {N};
      for (size_t t = 2; t < size.size(); ++t) want_dims.push_back(size[t]);
      want_dims.push_back(k);
      ASSERT_EQ(dims, want_dims);
      auto coord = [&](int64_t i, int64_t len) {
        if (align == 0) return (2.0 * i + 1) / len - 1;
        return len > 1 ? 2.0 * i / (len - 1) - 1 : -1.0;
      };
      size_t at = 0;
      const int64_t D = three_d ? size[2] : 1, H = size[size.size() - 2], W = size.back();
      for (int64_t nn = 0; nn < N; ++nn)
        for (int64_t d = 0; d < D; ++d)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t w = 0; w < W; ++w) {
              std::vector<double> homo = {coord(w, W), coord(h, H)};
              if (three_d) homo.push_back(coord(d, D));
              homo.push_back(1.0);
              for (int64_t r = 0; r < k; ++r, ++at) {
                double v = 0;
                for (int64_t c = 0; c <= k; ++c) v += theta[static_cast<size_t>((nn * k + r) * (k + 1) + c)] * homo[static_cast<size_t>(c)];
                EXPECT_NEAR(grid[at], v, 1e-5) << nn << "," << d << "," << h << "," << w << "," << r;
              }
            }
    }
}

// LinearAttention (cuvil::LinearAttention) against a scalar transcription of the ONNX reference
// (onnx/reference/ops/op_linear_attention.py): every update rule, grouped-query heads, a past
// state, decay per key row and per head, beta per head and shared.
TEST(FrontendNewerOps, LinearAttentionMatchesTheOnnxReference) {
  const int64_t B = 2, T = 3, Hq = 4, Hkv = 2, Dk = 3, Dv = 2, G = Hq / Hkv;
  for (const std::string rule : {"linear", "gated", "delta", "gated_delta"})
    for (int variant = 0; variant < 2; ++variant) {
      SCOPED_TRACE(rule + " variant " + std::to_string(variant));
      const bool gated = rule == "gated" || rule == "gated_delta", delta = rule == "delta" || rule == "gated_delta";
      const int64_t decay_w = variant ? Hkv : Hkv * Dk, beta_w = variant ? 1 : Hkv;
      const bool with_past = variant == 0;
      onnx::ModelProto m = test::make_model(27, 11);
      auto* g = m.mutable_graph();
      add_input(g, "q", onnx::TensorProto::FLOAT, {B, T, Hq * Dk});
      add_input(g, "k", onnx::TensorProto::FLOAT, {B, T, Hkv * Dk});
      add_input(g, "v", onnx::TensorProto::FLOAT, {B, T, Hkv * Dv});
      std::vector<std::string> ins = {"q", "k", "v", "", "", ""};
      if (with_past) add_input(g, "past", onnx::TensorProto::FLOAT, {B, Hkv, Dk, Dv}), ins[3] = "past";
      if (gated) add_input(g, "decay", onnx::TensorProto::FLOAT, {B, T, decay_w}), ins[4] = "decay";
      if (delta) add_input(g, "beta", onnx::TensorProto::FLOAT, {B, T, beta_w}), ins[5] = "beta";
      while (ins.back().empty()) ins.pop_back();
      auto* n = add_node(g, "LinearAttention", ins, {"y", "state"}, "la");
      test::set_attr_int(n, "q_num_heads", Hq);
      test::set_attr_int(n, "kv_num_heads", Hkv);
      test::set_attr_string(n, "update_rule", rule);
      if (variant) test::set_attr_float(n, "scale", 0.7f);
      add_output(g, "y", onnx::TensorProto::FLOAT, {B, T, Hq * Dv});
      add_output(g, "state", onnx::TensorProto::FLOAT, {B, Hkv, Dk, Dv});
      EXPECT_EQ(nodes_of(import(m), OpKind::LinearAttention).size(), 1u);
      auto fill = [](size_t count, float f, float lo, float span) {
        std::vector<float> v(count);
        for (size_t i = 0; i < count; ++i) v[i] = lo + span * (0.5f + 0.5f * std::sin(f * static_cast<float>(i) + 0.4f));
        return v;
      };
      const std::vector<float> q = fill(B * T * Hq * Dk, 0.9f, -1, 2), k = fill(B * T * Hkv * Dk, 1.3f, -1, 2),
                               v = fill(B * T * Hkv * Dv, 0.7f, -1, 2), past = fill(B * Hkv * Dk * Dv, 2.1f, -0.5f, 1),
                               decay = fill(B * T * decay_w, 1.7f, -0.6f, 0.5f), beta = fill(B * T * beta_w, 0.5f, 0.1f, 0.8f);
      auto model = test::load(test::compile(m));
      auto session = test::open_session(model.get());
      ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "q", {B, T, Hq * Dk}, q)));
      ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "k", {B, T, Hkv * Dk}, k)));
      ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "v", {B, T, Hkv * Dv}, v)));
      if (with_past) ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "past", {B, Hkv, Dk, Dv}, past)));
      if (gated) ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "decay", {B, T, decay_w}, decay)));
      if (delta) ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "beta", {B, T, beta_w}, beta)));
      ASSERT_TRUE(test::Ok(cuvil_session_run(session.get())));
      const std::vector<float> y = test::output<float>(session.get(), 0), state = test::output<float>(session.get(), 1);
      ASSERT_EQ(y.size(), static_cast<size_t>(B * T * Hq * Dv));
      ASSERT_EQ(state.size(), static_cast<size_t>(B * Hkv * Dk * Dv));
      const double scale = variant ? 0.7 : 1 / std::sqrt(static_cast<double>(Dk));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hkv; ++h) {
          std::vector<double> S(static_cast<size_t>(Dk * Dv), 0.0);
          if (with_past)
            for (int64_t i = 0; i < Dk * Dv; ++i) S[static_cast<size_t>(i)] = past[static_cast<size_t>((b * Hkv + h) * Dk * Dv + i)];
          for (int64_t t = 0; t < T; ++t) {
            const int64_t row = b * T + t;
            auto kd = [&](int64_t d) { return double(k[static_cast<size_t>(row * Hkv * Dk + h * Dk + d)]); };
            std::vector<double> vt(static_cast<size_t>(Dv));
            for (int64_t j = 0; j < Dv; ++j) vt[static_cast<size_t>(j)] = v[static_cast<size_t>(row * Hkv * Dv + h * Dv + j)];
            if (gated)
              for (int64_t d = 0; d < Dk; ++d)
                for (int64_t j = 0; j < Dv; ++j)
                  S[static_cast<size_t>(d * Dv + j)] *= std::exp(double(decay[static_cast<size_t>(row * decay_w + (variant ? h : h * Dk + d))]));
            if (delta) {
              const double bt = beta[static_cast<size_t>(row * beta_w + (variant ? 0 : h))];
              for (int64_t j = 0; j < Dv; ++j) {
                double r = 0;
                for (int64_t d = 0; d < Dk; ++d) r += S[static_cast<size_t>(d * Dv + j)] * kd(d);
                vt[static_cast<size_t>(j)] = bt * (vt[static_cast<size_t>(j)] - r);
              }
            }
            for (int64_t d = 0; d < Dk; ++d)
              for (int64_t j = 0; j < Dv; ++j) S[static_cast<size_t>(d * Dv + j)] += kd(d) * vt[static_cast<size_t>(j)];
            for (int64_t gq = 0; gq < G; ++gq) {
              const int64_t hq = h * G + gq;
              for (int64_t j = 0; j < Dv; ++j) {
                double o = 0;
                for (int64_t d = 0; d < Dk; ++d) o += double(q[static_cast<size_t>(row * Hq * Dk + hq * Dk + d)]) * S[static_cast<size_t>(d * Dv + j)];
                EXPECT_NEAR(y[static_cast<size_t>(row * Hq * Dv + hq * Dv + j)], scale * o, 1e-5) << b << "," << t << "," << hq << "," << j;
              }
            }
          }
          for (int64_t i = 0; i < Dk * Dv; ++i)
            EXPECT_NEAR(state[static_cast<size_t>((b * Hkv + h) * Dk * Dv + i)], S[static_cast<size_t>(i)], 1e-5) << "state " << b << "," << h << "," << i;
        }
    }
  // A rule and its inputs must agree.
  onnx::ModelProto m = test::make_model(27, 11);
  auto* g = m.mutable_graph();
  for (const char* name : {"q", "k", "v"}) add_input(g, name, onnx::TensorProto::FLOAT, {1, 1, 4});
  auto* n = add_node(g, "LinearAttention", {"q", "k", "v"}, {"y"}, "la");
  test::set_attr_int(n, "q_num_heads", 1);
  test::set_attr_int(n, "kv_num_heads", 1);
  add_output(g, "y");
  EXPECT_TRUE(test::FailsWith([&] { import(m); }, ExitCode::kUnsupported,
                              {"node 'la' (LinearAttention)", "update_rule 'gated_delta' takes decay and beta"}));
}

// FlexAttention (ai.onnx.preview 1) with grouped key/value heads, a score_mod with an
// initializer (scores + bias, then keys after the query masked) and a prob_mod (probs * 2),
// against the formula written out: softmax over keys of mod(q.k / sqrt(D)), doubled, times V.
TEST(FrontendNewerOps, FlexAttentionInlinesItsModsAndRepeatsHeads) {
  const int64_t B = 1, Hq = 4, Hkv = 2, L = 3, S = 3, D = 4;
  onnx::ModelProto m = test::make_model(26, 11);
  test::add_opset(m, "ai.onnx.preview", 1);
  auto* g = m.mutable_graph();
  add_input(g, "q", onnx::TensorProto::FLOAT, {B, Hq, L, D});
  add_input(g, "k", onnx::TensorProto::FLOAT, {B, Hkv, S, D});
  add_input(g, "v", onnx::TensorProto::FLOAT, {B, Hkv, S, D});
  auto* n = add_node(g, "FlexAttention", {"q", "k", "v"}, {"y"}, "flex");
  n->set_domain("ai.onnx.preview");
  onnx::GraphProto* sm = test::set_attr_graph(n, "score_mod");
  sm->set_name("shifted_causal");
  add_input(sm, "s", onnx::TensorProto::FLOAT, {});
  *sm->add_initializer() = test::make_float_tensor("bias", {}, {0.5f});
  *sm->add_initializer() = test::make_float_tensor("ninf", {}, {-INFINITY});
  *sm->add_initializer() = test::make_raw_tensor("allowed", onnx::TensorProto::BOOL, {L, S},
                                                 test::raw_of(std::vector<uint8_t>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
  add_node(sm, "Add", {"s", "bias"}, {"t"});
  add_node(sm, "Where", {"allowed", "t", "ninf"}, {"s_out"});
  add_output(sm, "s_out", onnx::TensorProto::FLOAT, {});
  onnx::GraphProto* pm = test::set_attr_graph(n, "prob_mod");
  pm->set_name("doubled");
  add_input(pm, "p", onnx::TensorProto::FLOAT, {});
  add_node(pm, "Add", {"p", "p"}, {"p_out"});
  add_output(pm, "p_out", onnx::TensorProto::FLOAT, {});
  add_output(g, "y", onnx::TensorProto::FLOAT, {B, Hq, L, D});
  std::vector<float> q(B * Hq * L * D), k(B * Hkv * S * D), v(B * Hkv * S * D);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.7f * static_cast<float>(i));
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.3f * static_cast<float>(i));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i % 7) - 0.2f;
  auto model = test::load(test::compile(m));
  auto session = test::open_session(model.get());
  ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "q", {B, Hq, L, D}, q)));
  ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "k", {B, Hkv, S, D}, k)));
  ASSERT_TRUE(test::Ok(test::set_f32(session.get(), "v", {B, Hkv, S, D}, v)));
  ASSERT_TRUE(test::Ok(cuvil_session_run(session.get())));
  const std::vector<float> y = test::output<float>(session.get(), 0);
  ASSERT_EQ(y.size(), q.size());
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 0; i < L; ++i) {
      const int64_t kv = h / (Hq / Hkv);
      double sc[S], mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += q[(h * L + i) * D + d] * k[(kv * S + j) * D + d];
        sc[j] = j <= i ? dot / std::sqrt(static_cast<double>(D)) + 0.5 : -INFINITY;
        mx = std::max(mx, sc[j]);
      }
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < D; ++d) {
        double want = 0;
        for (int64_t j = 0; j < S; ++j) want += 2 * sc[j] / sum * v[(kv * S + j) * D + d];
        EXPECT_NEAR(y[(h * L + i) * D + d], want, 1e-5) << h << "," << i << "," << d;
      }
    }
  // A mod of two inputs is outside the op: refused naming the node and the graph.
  add_input(pm, "extra", onnx::TensorProto::FLOAT, {});
  EXPECT_TRUE(test::FailsWith([&] { import(m); }, ExitCode::kUnsupported,
                              {"node 'flex'", "graph attribute 'doubled' must have one input and one output"}));
}

}  // namespace
}  // namespace cuvil
