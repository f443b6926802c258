// The built-in canonicalisation rules: how exporters spell an op as several, rewritten to the
// one op (patterns as data, passes/pattern.h). Adding an idiom is adding an entry here and a
// golden case in testdata/passes/canonicalize/.
#include "passes/pattern.h"

namespace cuvil {
namespace {

using K = PatternAttr::Kind;

// 0.5 * x * (1 + erf(x / sqrt(2))): torch's nn.GELU() exports ((x * (1 + erf(x / sqrt 2))) *
// 0.5), HF BERT's gelu exports ((x * 0.5) * (1 + erf(x / sqrt 2))); others multiply by 1/sqrt 2.
Pattern gelu_erf(const char* name, const char* scale_op, double scale, bool half_first) {
  Pattern p;
  p.name = name;
  p.nodes = {{scale_op, {"x", "k"}, "a"}, {"Erf", {"a"}, "b"}, {"Add", {"b", "one"}, "c"}};
  if (half_first)
    p.nodes.insert(p.nodes.end(), {{"Mul", {"x", "half"}, "h"}, {"Mul", {"h", "c"}, "y"}});
  else
    p.nodes.insert(p.nodes.end(), {{"Mul", {"x", "c"}, "d"}, {"Mul", {"d", "half"}, "y"}});
  p.constants = {{"k", {false, scale, 1e-4}}, {"one", {false, 1.0, 0}}, {"half", {false, 0.5, 0}}};
  p.root = "y";
  p.rewrite_op = "Gelu";
  p.rewrite_opset = 20;
  p.rewrite_inputs = {"x"};
  p.rewrite_attrs = {{K::String, "approximate", 0, 0, "none"}};
  return p;
}

std::vector<Pattern> make_builtin_patterns() {
  std::vector<Pattern> out;
  // LayerNorm as torch < opset 17 exports nn.LayerNorm: ReduceMean, Sub, Pow 2, ReduceMean,
  // Add eps, Sqrt, Div, Mul gamma, Add beta.
  {
    Pattern p;
    p.name = "layer_norm";
    p.nodes = {{"ReduceMean", {"x"}, "mean", true},
               {"Sub", {"x", "mean"}, "d"},
               {"Pow", {"d", "two"}, "sq"},
               {"ReduceMean", {"sq"}, "var", true},
               {"Add", {"var", "eps"}, "ve"},
               {"Sqrt", {"ve"}, "sd"},
               {"Div", {"d", "sd"}, "n"},
               {"Mul", {"n", "gamma"}, "s"},
               {"Add", {"s", "beta"}, "y"}};
    p.constants = {{"two", {false, 2.0, 0}}, {"eps", {true, 0, 0}}};
    p.last_axis_vectors = {"gamma", "beta"};
    p.last_axis_of = "x";
    p.root = "y";
    p.rewrite_op = "LayerNormalization";
    p.rewrite_opset = 17;
    p.rewrite_inputs = {"x", "gamma", "beta"};
    p.rewrite_attrs = {{K::Int, "axis", -1, 0, ""}, {K::FloatOfConstant, "epsilon", 0, 0, "eps"}};
    out.push_back(p);
  }
  out.push_back(gelu_erf("gelu_erf", "Div", 1.4142135623730951, false));
  out.push_back(gelu_erf("gelu_erf_half_first", "Div", 1.4142135623730951, true));
  out.push_back(gelu_erf("gelu_erf_mul", "Mul", 0.7071067811865476, false));
  out.push_back(gelu_erf("gelu_erf_mul_half_first", "Mul", 0.7071067811865476, true));
  // GELU, tanh approximation, as GPT-2's gelu_new exports:
  // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
  {
    Pattern p;
    p.name = "gelu_tanh";
    p.nodes = {{"Mul", {"x", "half"}, "a"},
               {"Pow", {"x", "three"}, "p"},
               {"Mul", {"p", "k1"}, "q"},
               {"Add", {"x", "q"}, "r"},
               {"Mul", {"r", "k2"}, "s"},
               {"Tanh", {"s"}, "t"},
               {"Add", {"t", "one"}, "u"},
               {"Mul", {"a", "u"}, "y"}};
    p.constants = {{"half", {false, 0.5, 0}},
                   {"three", {false, 3.0, 0}},
                   {"k1", {false, 0.044715, 1e-4}},
                   {"k2", {false, 0.7978845608028654, 1e-4}},
                   {"one", {false, 1.0, 0}}};
    p.root = "y";
    p.rewrite_op = "Gelu";
    p.rewrite_opset = 20;
    p.rewrite_inputs = {"x"};
    p.rewrite_attrs = {{K::String, "approximate", 0, 0, "tanh"}};
    out.push_back(p);
  }
  return out;
}

}  // namespace

const std::vector<Pattern>& builtin_patterns() {
  static const std::vector<Pattern> patterns = make_builtin_patterns();
  return patterns;
}

}  // namespace cuvil
