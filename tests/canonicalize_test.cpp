// Canonicalisation (passes/canonicalize.h, passes/pattern.h): exporter idioms become one op,
// the result runs and agrees with the formula, near misses are left alone, and the fused Gelu
// tile function agrees bit for bit with the whole-tensor kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

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

}  // namespace
}  // namespace cuvil
