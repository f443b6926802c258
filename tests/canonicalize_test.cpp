// Canonicalisation (passes/canonicalize.h, passes/pattern.h): exporter idioms become one op,
// the result runs and agrees with the formula, near misses are left alone, and the fused Gelu
// tile function agrees bit for bit with the whole-tensor kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "passes/pattern.h"
#include "runtime_harness.h"

namespace cuvil {
namespace {

using test::Tp;

std::map<std::string, int> op_histogram(const Model& m) {
  std::map<std::string, int> h;
  for (const Node& n : m.graph->nodes) h[n.op_type]++;
  return h;
}

onnx::TensorProto scalar(const std::string& name, float v) { return test::make_float_tensor(name, {}, {v}); }

enum class GeluForm { TorchErf, HalfFirstErf, Tanh };

// y = gelu(x) spelled the way an exporter does, over x: f32[2, 5].
onnx::ModelProto gelu_model(GeluForm form, bool leak_intermediate = false) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {2, 5});
  test::add_output(g, "y", Tp::FLOAT, {2, 5});
  *g->add_initializer() = scalar("half", 0.5f);
  *g->add_initializer() = scalar("one", 1.0f);
  if (form == GeluForm::Tanh) {
    *g->add_initializer() = scalar("three", 3.0f);
    *g->add_initializer() = scalar("k1", 0.044715f);
    *g->add_initializer() = scalar("k2", 0.7978845608f);
    test::add_node(g, "Mul", {"half", "x"}, {"a"});
    test::add_node(g, "Pow", {"x", "three"}, {"p"});
    test::add_node(g, "Mul", {"k1", "p"}, {"q"});
    test::add_node(g, "Add", {"x", "q"}, {"r"});
    test::add_node(g, "Mul", {"k2", "r"}, {"s"});
    test::add_node(g, "Tanh", {"s"}, {"t"});
    test::add_node(g, "Add", {"one", "t"}, {"u"});
    test::add_node(g, "Mul", {"a", "u"}, {"y"});
  } else {
    *g->add_initializer() = scalar("sqrt2", 1.4142135f);
    test::add_node(g, "Div", {"x", "sqrt2"}, {"b"});
    test::add_node(g, "Erf", {"b"}, {"e"});
    test::add_node(g, "Add", {"e", "one"}, {"c"});
    if (form == GeluForm::TorchErf) {
      test::add_node(g, "Mul", {"x", "c"}, {"d"});
      test::add_node(g, "Mul", {"d", "half"}, {"y"});
    } else {
      test::add_node(g, "Mul", {"x", "half"}, {"h"});
      test::add_node(g, "Mul", {"h", "c"}, {"y"});
    }
  }
  if (leak_intermediate) {  // the Erf result is also a graph output: the match must not eat it
    test::add_output(g, form == GeluForm::Tanh ? "t" : "e", Tp::FLOAT, {2, 5});
  }
  return m;
}

std::vector<float> run_gelu(const onnx::ModelProto& m, bool fuse, const std::vector<float>& x) {
  test::ModelPtr model = test::load(test::compile(m, {}, fuse));
  if (!model) return {};
  test::SessionPtr s = test::open_session(model.get(), 1);
  EXPECT_TRUE(test::Ok(test::set_f32(s.get(), "x", {2, 5}, x)));
  EXPECT_TRUE(test::Ok(cuvil_session_run(s.get())));
  return test::output<float>(s.get(), 0);
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

TEST(Canonicalize, BuiltinPatternsAreWellFormed) {
  for (const Pattern& p : builtin_patterns()) EXPECT_EQ(check_pattern(p), "") << p.name;
}

TEST(Canonicalize, GeluFormsBecomeOneGeluThatComputesGelu) {
  const std::vector<float> x = {-3.f, -1.5f, -0.5f, -1e-3f, 0.f, 1e-3f, 0.5f, 1.f, 2.5f, 6.f};
  for (GeluForm form : {GeluForm::TorchErf, GeluForm::HalfFirstErf, GeluForm::Tanh}) {
    SCOPED_TRACE(static_cast<int>(form));
    Model ir = test::import_for_codegen(gelu_model(form));
    auto h = op_histogram(ir);
    EXPECT_EQ(h["Gelu"], 1);
    EXPECT_EQ(ir.graph->nodes.size(), 1u) << "the constants and the pieces are gone";
    EXPECT_EQ(ir.graph->nodes[0].attr_string("approximate", "none"), form == GeluForm::Tanh ? "tanh" : "none");
    const std::vector<float> fused = run_gelu(gelu_model(form), true, x);
    const std::vector<float> unfused = run_gelu(gelu_model(form), false, x);
    ASSERT_EQ(fused.size(), x.size());
    ASSERT_EQ(unfused.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      const double ref = form == GeluForm::Tanh
                             ? 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))
                             : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      EXPECT_NEAR(fused[i], ref, 1e-6 + 1e-6 * std::fabs(ref)) << "x = " << v;
      EXPECT_EQ(bits_of(fused[i]), bits_of(unfused[i])) << "x = " << v << ": tile Gelu and kernel Gelu differ";
    }
  }
}

TEST(Canonicalize, AnIntermediateReadElsewhereBlocksTheRewrite) {
  for (GeluForm form : {GeluForm::TorchErf, GeluForm::Tanh}) {
    Model ir = test::import_for_codegen(gelu_model(form, /*leak_intermediate=*/true));
    auto h = op_histogram(ir);
    EXPECT_EQ(h["Gelu"], 0);
    EXPECT_EQ(h[form == GeluForm::Tanh ? "Tanh" : "Erf"], 1);
  }
}

TEST(Canonicalize, WrongConstantBlocksTheRewrite) {
  onnx::ModelProto m = gelu_model(GeluForm::TorchErf);
  for (auto& t : *m.mutable_graph()->mutable_initializer())
    if (t.name() == "half") t = scalar("half", 0.25f);
  Model ir = test::import_for_codegen(m);
  EXPECT_EQ(op_histogram(ir)["Gelu"], 0);
}

// LayerNorm as torch < opset 17 exports it, with gamma and beta along the last axis.
onnx::ModelProto layer_norm_model(int64_t gamma_len) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 3, 4});
  test::add_output(g, "y", Tp::FLOAT, {"batch", 3, 4});
  *g->add_initializer() = scalar("two", 2.0f);
  *g->add_initializer() = scalar("eps", 1e-5f);
  std::vector<float> gamma, beta;
  for (int64_t i = 0; i < gamma_len; ++i) {
    gamma.push_back(1.0f + 0.25f * static_cast<float>(i));
    beta.push_back(-0.5f + 0.125f * static_cast<float>(i));
  }
  *g->add_initializer() = test::make_float_tensor("gamma", {gamma_len}, gamma);
  *g->add_initializer() = test::make_float_tensor("beta", {gamma_len}, beta);
  test::set_attr_ints(test::add_node(g, "ReduceMean", {"x"}, {"mean"}), "axes", {-1});
  test::add_node(g, "Sub", {"x", "mean"}, {"d"});
  test::add_node(g, "Pow", {"d", "two"}, {"sq"});
  test::set_attr_ints(test::add_node(g, "ReduceMean", {"sq"}, {"var"}), "axes", {-1});
  test::add_node(g, "Add", {"var", "eps"}, {"ve"});
  test::add_node(g, "Sqrt", {"ve"}, {"sd"});
  test::add_node(g, "Div", {"d", "sd"}, {"n"});
  test::add_node(g, "Mul", {"n", "gamma"}, {"s"});
  test::add_node(g, "Add", {"s", "beta"}, {"y"});
  return m;
}

TEST(Canonicalize, LayerNormBecomesLayerNormalization) {
  Model ir = test::import_for_codegen(layer_norm_model(4), {"batch=1:4"});
  ASSERT_EQ(ir.graph->nodes.size(), 1u);
  const Node& n = ir.graph->nodes[0];
  EXPECT_EQ(n.op_type, "LayerNormalization");
  EXPECT_EQ(n.attr_int("axis", 0), -1);
  EXPECT_FLOAT_EQ(n.attr_float("epsilon", 0), 1e-5f);

  test::ModelPtr model = test::load(test::compile(layer_norm_model(4), {"batch=1:4"}));
  ASSERT_TRUE(model);
  test::SessionPtr s = test::open_session(model.get(), 1);
  std::vector<float> x(2 * 3 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.7f) * 3.f;
  ASSERT_TRUE(test::Ok(test::set_f32(s.get(), "x", {2, 3, 4}, x)));
  ASSERT_TRUE(test::Ok(cuvil_session_run(s.get())));
  const std::vector<float> y = test::output<float>(s.get(), 0);
  ASSERT_EQ(y.size(), x.size());
  for (size_t row = 0; row < 6; ++row) {
    double mean = 0, var = 0;
    for (size_t k = 0; k < 4; ++k) mean += x[row * 4 + k] / 4.0;
    for (size_t k = 0; k < 4; ++k) var += (x[row * 4 + k] - mean) * (x[row * 4 + k] - mean) / 4.0;
    for (size_t k = 0; k < 4; ++k) {
      const double ref = (x[row * 4 + k] - mean) / std::sqrt(var + 1e-5) * (1.0 + 0.25 * k) + (-0.5 + 0.125 * k);
      EXPECT_NEAR(y[row * 4 + k], ref, 1e-5) << "row " << row << " k " << k;
    }
  }
}

// gamma that broadcasts but is not one value per element of the last axis is not LayerNorm's
// scale input: the decomposed form stays.
TEST(Canonicalize, LayerNormWithAScalarGammaStaysDecomposed) {
  Model ir = test::import_for_codegen(layer_norm_model(1), {"batch=1:4"});
  EXPECT_EQ(op_histogram(ir)["LayerNormalization"], 0);
  EXPECT_EQ(op_histogram(ir)["ReduceMean"], 2);
}

// ---- LLaMA-style idioms: SiLU, SwiGLU, RMSNorm, rotary --------------------------------------
// Each model is compiled twice, with and without the canonicalize pass, and both packages run
// on the same inputs: the rewritten graph must compute what the exporter's subgraph computed.

struct NamedInput {
  std::string name;
  std::vector<int64_t> dims;
  std::vector<float> data;
};

NamedInput random_input(const std::string& name, std::vector<int64_t> dims, unsigned seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  NamedInput in{name, std::move(dims), {}};
  for (int64_t i = 0; i < n; ++i) in.data.push_back(dist(rng));
  return in;
}

// The model after the whole pipeline (canonicalize on or skipped), and its package.
std::vector<uint8_t> compile_idiom(const onnx::ModelProto& m, bool canonicalize, bool fuse, Model* ir_out,
                                   codegen::LoweredModel* lowered_out = nullptr) {
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  frontend::ImportOptions options;
  options.dims.push_back(frontend::parse_dim_option("batch=1:4"));
  Model model = frontend::import_onnx_bytes(bytes, "", options, "idiom.onnx");
  verify_model(model);
  PipelineOptions po;
  if (!canonicalize) po.skip.insert("canonicalize");
  run_passes(model, po);
  frontend::check_supported(model);
  codegen::LowerOptions lo;
  lo.fuse_elementwise = fuse;
  codegen::LoweredModel lowered = codegen::lower_model(model, lo);
  std::vector<uint8_t> package = codegen::build_package(model, lowered);
  if (ir_out) *ir_out = std::move(model);
  if (lowered_out) *lowered_out = std::move(lowered);
  return package;
}

std::vector<float> run_package(const std::vector<uint8_t>& package, const std::vector<NamedInput>& inputs) {
  test::ModelPtr model = test::load(package);
  if (!model) return {};
  test::SessionPtr s = test::open_session(model.get(), 2);
  for (const NamedInput& in : inputs) EXPECT_TRUE(test::Ok(test::set_f32(s.get(), in.name.c_str(), in.dims, in.data)));
  EXPECT_TRUE(test::Ok(cuvil_session_run(s.get())));
  return test::output<float>(s.get(), 0);
}

// Compiles `m` rewritten (fused and not) and unrewritten; all three agree (rtol 1e-4, atol
// 1e-5). Returns the rewritten IR's op histogram.
std::map<std::string, int> expect_rewrite_exact(const onnx::ModelProto& m, const std::vector<NamedInput>& inputs) {
  Model rewritten;
  const std::vector<float> reference = run_package(compile_idiom(m, false, false, nullptr), inputs);
  const std::vector<float> fused = run_package(compile_idiom(m, true, true, &rewritten), inputs);
  const std::vector<float> unfused = run_package(compile_idiom(m, true, false, nullptr), inputs);
  EXPECT_FALSE(reference.empty());
  EXPECT_EQ(fused.size(), reference.size());
  EXPECT_EQ(unfused.size(), reference.size());
  for (size_t i = 0; i < reference.size() && i < fused.size() && i < unfused.size(); ++i) {
    const double tol = 1e-5 + 1e-4 * std::fabs(reference[i]);
    EXPECT_NEAR(fused[i], reference[i], tol) << "element " << i << " (rewritten, fused)";
    EXPECT_NEAR(unfused[i], reference[i], tol) << "element " << i << " (rewritten, whole-tensor kernels)";
  }
  return op_histogram(rewritten);
}

onnx::TensorProto random_weight(const std::string& name, std::vector<int64_t> dims, unsigned seed) {
  NamedInput r = random_input(name, dims, seed);
  return test::make_float_tensor(name, dims, r.data);
}

// torch's nn.SiLU / F.silu: Mul(x, Sigmoid(x)), here after a MatMul (the epilogue a tile
// kernel absorbs), and LLaMA's MLP down(silu(gate(x)) * up(x)) when `swiglu`.
onnx::ModelProto silu_model(bool swiglu) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 5, 6});
  test::add_output(g, "y", Tp::FLOAT, {"batch", 5, swiglu ? 6 : 8});
  *g->add_initializer() = random_weight("wg", {6, 8}, 1);
  test::add_node(g, "MatMul", {"x", "wg"}, {"gate"});
  test::add_node(g, "Sigmoid", {"gate"}, {"sg"});
  test::add_node(g, "Mul", {"gate", "sg"}, {swiglu ? "act" : "y"});
  if (swiglu) {
    *g->add_initializer() = random_weight("wu", {6, 8}, 2);
    *g->add_initializer() = random_weight("wd", {8, 6}, 3);
    test::add_node(g, "MatMul", {"x", "wu"}, {"up"});
    test::add_node(g, "Mul", {"act", "up"}, {"h"});
    test::add_node(g, "MatMul", {"h", "wd"}, {"y"});
  }
  return m;
}

TEST(Canonicalize, SiLUBecomesCuvilSiLU) {
  // After the whole pipeline the cuvil::SiLU is the activation of the MatMul's FusedMatMul
  // (pass fuse-epilogues); the canonicalize golden cases show the SiLU itself.
  const auto h = expect_rewrite_exact(silu_model(false), {random_input("x", {3, 5, 6}, 4)});
  EXPECT_EQ(h.at("FusedMatMul"), 1);
  EXPECT_EQ(h.count("Sigmoid"), 0u);
  EXPECT_EQ(h.count("Mul"), 0u);
}

TEST(Canonicalize, SiLUTimesUpBecomesSwiGLU) {
  const auto h = expect_rewrite_exact(silu_model(true), {random_input("x", {2, 5, 6}, 5)});
  EXPECT_EQ(h.at("SwiGLU"), 1);
  EXPECT_EQ(h.count("SiLU"), 0u) << "the SiLU the first rule made is folded into the SwiGLU";
  EXPECT_EQ(h.count("Mul"), 0u);
  EXPECT_EQ(h.at("MatMul"), 3);
  // The SwiGLU (named after the Mul it replaced) joins a projection MatMul's tile kernel
  // as an epilogue, and SiLU alone joins the gate's.
  codegen::LoweredModel lowered;
  compile_idiom(silu_model(true), true, true, nullptr, &lowered);
  bool swiglu_in_kernel = false;
  for (const auto& nodes : lowered.kernel_nodes)
    swiglu_in_kernel |= nodes.size() > 1 && nodes.back() == "Mul_4";
  EXPECT_TRUE(swiglu_in_kernel);
  // SiLU alone becomes the activation of the gate's cuvil::FusedMatMul (pass fuse-epilogues):
  // one node, one kernel.
  Model ir;
  compile_idiom(silu_model(false), true, true, &ir, &lowered);
  ASSERT_EQ(lowered.kernel_nodes.size(), 1u);
  EXPECT_EQ(lowered.kernel_nodes[0], (std::vector<std::string>{"MatMul_0"}));
  ASSERT_EQ(ir.graph->nodes.size(), 1u);
  EXPECT_EQ(ir.graph->nodes[0].attr_string("activation", ""), "silu");
}

// The Silu tile instruction and the SwiGLU tile function compute what the whole-tensor kernels
// do, bit for bit (the same float expressions), over two inputs g, u: f32[batch, 5].
TEST(Canonicalize, TileSiLUAndSwiGLUMatchTheirKernelsBitForBit) {
  for (bool swiglu : {false, true}) {
    SCOPED_TRACE(swiglu ? "SwiGLU" : "SiLU");
    onnx::ModelProto m = test::make_model(13);
    auto* g = m.mutable_graph();
    test::add_input(g, "g", Tp::FLOAT, {"batch", 5});
    test::add_input(g, "u", Tp::FLOAT, {"batch", 5});
    test::add_output(g, "y", Tp::FLOAT, {"batch", 5});
    test::add_node(g, "Sigmoid", {"g"}, {"s"});
    test::add_node(g, "Mul", {"g", "s"}, {swiglu ? "a" : "y"});
    if (swiglu) test::add_node(g, "Mul", {"a", "u"}, {"y"});
    const std::vector<NamedInput> inputs = {random_input("g", {4, 5}, 11), random_input("u", {4, 5}, 12)};
    Model ir;
    codegen::LoweredModel lowered;
    const std::vector<float> tile = run_package(compile_idiom(m, true, true, &ir, &lowered), inputs);
    const std::vector<float> kernel = run_package(compile_idiom(m, true, false, nullptr), inputs);
    ASSERT_EQ(ir.graph->nodes.size(), 1u);
    EXPECT_EQ(ir.graph->nodes[0].op_type, swiglu ? "SwiGLU" : "SiLU");
    EXPECT_EQ(lowered.fused_kernels, 1);
    ASSERT_EQ(tile.size(), 20u);
    ASSERT_EQ(kernel.size(), 20u);
    for (size_t i = 0; i < tile.size(); ++i) EXPECT_EQ(bits_of(tile[i]), bits_of(kernel[i])) << "element " << i;
  }
}

// x * Sigmoid(1.702 x) is quick GELU, not SiLU: no built-in rule takes it.
TEST(Canonicalize, QuickGeluIsNotBuiltIn) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {3, 7});
  test::add_output(g, "y", Tp::FLOAT, {3, 7});
  *g->add_initializer() = scalar("k", 1.702f);
  test::add_node(g, "Mul", {"x", "k"}, {"a"});
  test::add_node(g, "Sigmoid", {"a"}, {"s"});
  test::add_node(g, "Mul", {"x", "s"}, {"y"});
  const auto h = op_histogram(test::import_for_codegen(m));
  EXPECT_EQ(h.count("SiLU"), 0u);
  EXPECT_EQ(h.at("Sigmoid"), 1);
}

enum class RmsForm { DivOne, Reciprocal, DivX };

// RMSNorm as torch 1.13 exports HF LLaMA's LlamaRMSNorm (Casts to float32 around it, rsqrt as
// Div(1, Sqrt)) or the Reciprocal / x / Sqrt spellings; x: f32[batch, 5, 16].
onnx::ModelProto rms_norm_model(RmsForm form, bool casts, int64_t reduce_axis = -1) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {"batch", 5, 16});
  test::add_output(g, "y", Tp::FLOAT, {"batch", 5, 16});
  *g->add_initializer() = scalar("two", 2.0f);
  *g->add_initializer() = scalar("eps", 1e-6f);
  *g->add_initializer() = scalar("one", 1.0f);
  *g->add_initializer() = random_weight("weight", {16}, 6);
  std::string xc = "x";
  if (casts) {
    test::set_attr_int(test::add_node(g, "Cast", {"x"}, {"xc"}), "to", Tp::FLOAT);
    xc = "xc";
  }
  test::add_node(g, "Pow", {xc, "two"}, {"sq"});
  test::set_attr_ints(test::add_node(g, "ReduceMean", {"sq"}, {"ms"}), "axes", {reduce_axis});
  test::add_node(g, "Add", {"ms", "eps"}, {"ve"});
  test::add_node(g, "Sqrt", {"ve"}, {"sd"});
  if (form == RmsForm::DivOne) {
    test::add_node(g, "Div", {"one", "sd"}, {"inv"});
    test::add_node(g, "Mul", {xc, "inv"}, {"n"});
  } else if (form == RmsForm::Reciprocal) {
    test::add_node(g, "Reciprocal", {"sd"}, {"inv"});
    test::add_node(g, "Mul", {xc, "inv"}, {"n"});
  } else {
    test::add_node(g, "Div", {xc, "sd"}, {"n"});
  }
  std::string n = "n";
  if (casts) {
    test::set_attr_int(test::add_node(g, "Cast", {"n"}, {"nc"}), "to", Tp::FLOAT);
    n = "nc";
  }
  test::add_node(g, "Mul", {"weight", n}, {"y"});
  return m;
}

TEST(Canonicalize, RMSNormFormsBecomeCuvilRMSNorm) {
  for (RmsForm form : {RmsForm::DivOne, RmsForm::Reciprocal, RmsForm::DivX})
    for (bool casts : {true, false}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(form)) + (casts ? " with casts" : ""));
      Model ir = test::import_for_codegen(rms_norm_model(form, casts), {"batch=1:4"});
      ASSERT_EQ(ir.graph->nodes.size(), 1u);
      const Node& n = ir.graph->nodes[0];
      EXPECT_EQ(n.domain, "cuvil");
      EXPECT_EQ(n.op_type, "RMSNorm");
      EXPECT_FLOAT_EQ(n.attr_float("epsilon", 0), 1e-6f);
      EXPECT_EQ(n.attr_int("axis", 0), -1);
      const auto h = expect_rewrite_exact(rms_norm_model(form, casts), {random_input("x", {2, 5, 16}, 7)});
      EXPECT_EQ(h.at("RMSNorm"), 1);
    }
}

TEST(Canonicalize, RMSNormOverAnotherAxisStays) {
  const auto h = op_histogram(test::import_for_codegen(rms_norm_model(RmsForm::DivOne, false, 1), {"batch=1:4"}));
  EXPECT_EQ(h.count("RMSNorm"), 0u);
  EXPECT_EQ(h.at("ReduceMean"), 1);
}

// A Cast to the type its input has is a no-op: canonicalize (remove_identities) drops it.
TEST(Canonicalize, SameTypeCastIsRemoved) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "x", Tp::FLOAT, {2, 3});
  test::add_output(g, "y", Tp::FLOAT, {2, 3});
  test::set_attr_int(test::add_node(g, "Cast", {"x"}, {"c"}), "to", Tp::FLOAT);
  test::add_node(g, "Relu", {"c"}, {"r"});
  test::set_attr_int(test::add_node(g, "Cast", {"r"}, {"y"}), "to", Tp::DOUBLE);
  const auto h = op_histogram(test::import_for_codegen(m));
  EXPECT_EQ(h.at("Cast"), 1) << "the float -> double Cast stays";
  EXPECT_EQ(h.at("Relu"), 1);
}

enum class RotaryForm { Slices, SlicesToIntMax, Split, SwappedHalves };

// q * cos + rotate_half(q) * sin (GPT-NeoX, HF LLaMA), q: f32[batch, 4, 5, 8], cos/sin [1, 1, 5, 8].
onnx::ModelProto rotary_model(RotaryForm form, int64_t cos_batch = 1) {
  onnx::ModelProto m = test::make_model(13);
  auto* g = m.mutable_graph();
  test::add_input(g, "q", Tp::FLOAT, {"batch", 4, 5, 8});
  test::add_input(g, "cos", Tp::FLOAT, {cos_batch, 1, 5, 8});
  test::add_input(g, "sin", Tp::FLOAT, {1, 1, 5, 8});
  test::add_output(g, "y", Tp::FLOAT, {"batch", 4, 5, 8});
  test::add_node(g, "Mul", {"q", "cos"}, {"a"});
  if (form == RotaryForm::Split) {
    *g->add_initializer() = test::make_int64_tensor("halves", {2}, {4, 4});
    test::set_attr_int(test::add_node(g, "Split", {"q", "halves"}, {"x1", "x2"}), "axis", -1);
  } else {
    const int64_t end = form == RotaryForm::SlicesToIntMax ? std::numeric_limits<int64_t>::max() : 8;
    *g->add_initializer() = test::make_int64_tensor("zero", {1}, {0});
    *g->add_initializer() = test::make_int64_tensor("mid", {1}, {4});
    *g->add_initializer() = test::make_int64_tensor("end", {1}, {end});
    *g->add_initializer() = test::make_int64_tensor("last", {1}, {3});
    *g->add_initializer() = test::make_int64_tensor("minus_one", {1}, {-1});
    *g->add_initializer() = test::make_int64_tensor("step", {1}, {1});
    test::add_node(g, "Slice", {"q", "zero", "mid", "minus_one", "step"}, {"x1"});
    test::add_node(g, "Slice", {"q", "mid", "end", "last"}, {"x2"});
  }
  test::add_node(g, "Neg", {"x2"}, {"nx2"});
  if (form == RotaryForm::SwappedHalves)
    test::set_attr_int(test::add_node(g, "Concat", {"x1", "nx2"}, {"rot"}), "axis", -1);
  else
    test::set_attr_int(test::add_node(g, "Concat", {"nx2", "x1"}, {"rot"}), "axis", -1);
  test::add_node(g, "Mul", {"rot", "sin"}, {"b"});
  test::add_node(g, "Add", {"a", "b"}, {"y"});
  return m;
}

TEST(Canonicalize, RotateHalfBecomesCuvilRotary) {
  const std::vector<NamedInput> inputs = {random_input("q", {2, 4, 5, 8}, 8), random_input("cos", {1, 1, 5, 8}, 9),
                                          random_input("sin", {1, 1, 5, 8}, 10)};
  for (RotaryForm form : {RotaryForm::Slices, RotaryForm::SlicesToIntMax, RotaryForm::Split}) {
    SCOPED_TRACE(static_cast<int>(form));
    Model ir = test::import_for_codegen(rotary_model(form), {"batch=1:4"});
    ASSERT_EQ(ir.graph->nodes.size(), 1u);
    EXPECT_EQ(ir.graph->nodes[0].op_type, "Rotary");
    EXPECT_EQ(ir.graph->nodes[0].attr_int("interleaved", -1), 0);
    const auto h = expect_rewrite_exact(rotary_model(form), inputs);
    EXPECT_EQ(h.at("Rotary"), 1);
  }
}

// cos [2, 1, 5, 8] over q [batch, 4, 5, 8]: cos is not known to broadcast onto q (it would
// fix batch at 2 or widen q), so Rotary, whose output has q's shape, may not replace it.
TEST(Canonicalize, CosThatMayWidenXIsNotRotary) {
  const auto h = op_histogram(test::import_for_codegen(rotary_model(RotaryForm::Slices, 2), {"batch=1:4"}));
  EXPECT_EQ(h.count("Rotary"), 0u);
  EXPECT_EQ(h.at("Concat"), 1);
}

// Malformed rules are reported before use, naming the pattern.
TEST(Canonicalize, CheckPatternReportsTheNewConstraints) {
  Pattern p;
  p.name = "p";
  PatternNode split{"Split", {"x"}, "a"};
  split.more_outputs = {"a"};
  p.nodes = {split};
  p.root = "a";
  p.action = Pattern::Action::Keep;
  EXPECT_EQ(check_pattern(p), "pattern 'p': variable 'a' is the output of two nodes");
  p.nodes[0].more_outputs = {"b"};
  p.nodes[0].attrs = {{PatternAttr::Kind::FloatOfConstant, "axis", 0, 0, "k"}};
  EXPECT_EQ(check_pattern(p), "pattern 'p': node attribute 'axis' must be a plain value");
  p.nodes[0].attrs.clear();
  p.broadcasting = {"c"};
  p.broadcast_onto = "x";
  EXPECT_EQ(check_pattern(p), "pattern 'p': 'c' is not a variable of the match");
  p.broadcasting.clear();
  p.root_shape_of = "z";
  EXPECT_EQ(check_pattern(p), "pattern 'p': 'z' is not a variable of the match");
  p.root_shape_of = "x";
  PatternNode silu{"SiLU", {"x"}, "s"};
  p.nodes.push_back(silu);
  EXPECT_EQ(check_pattern(p), "pattern 'p': unknown op 'SiLU'") << "SiLU is no ONNX op";
  p.nodes.back().domain = "cuvil";
  EXPECT_EQ(check_pattern(p), "");
}

// concat(x1, -x2) is not rotate_half: the graph stays as it is.
TEST(Canonicalize, OtherHalfOrderIsNotRotary) {
  const auto h = op_histogram(test::import_for_codegen(rotary_model(RotaryForm::SwappedHalves), {"batch=1:4"}));
  EXPECT_EQ(h.count("Rotary"), 0u);
  EXPECT_EQ(h.at("Concat"), 1);
}

}  // namespace
}  // namespace cuvil
