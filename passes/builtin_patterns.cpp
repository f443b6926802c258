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

// A rewrite to one of cuvil's fused ops (ir/fused_ops.h).
Pattern fused(const char* name, const char* op, std::vector<std::string> inputs) {
  Pattern p;
  p.name = name;
  p.rewrite_domain = "cuvil";
  p.rewrite_op = op;
  p.rewrite_opset = 1;
  p.rewrite_inputs = std::move(inputs);
  p.root = "y";
  return p;
}

// RMSNorm as torch exports LLaMA's: x * rsqrt(mean(x^2, -1, keepdim) + eps) * weight, the
// reciprocal square root spelled Div(1, Sqrt), Reciprocal(Sqrt) or folded into Div(x, Sqrt).
// (torch's Cast of x to float32 is a no-op on a float32 model; canonicalize removes it first.)
Pattern rms_norm(const char* name, const char* reciprocal) {
  Pattern p = fused(name, "RMSNorm", {"x", "w"});
  p.nodes = {{"Pow", {"x", "two"}, "sq"},
             {"ReduceMean", {"sq"}, "ms", true},
             {"Add", {"ms", "eps"}, "ve"},
             {"Sqrt", {"ve"}, "sd"}};
  const std::string r = reciprocal;
  if (r == "Div")
    p.nodes.insert(p.nodes.end(), {{"Div", {"one", "sd"}, "inv"}, {"Mul", {"x", "inv"}, "n"}});
  else if (r == "Reciprocal")
    p.nodes.insert(p.nodes.end(), {{"Reciprocal", {"sd"}, "inv"}, {"Mul", {"x", "inv"}, "n"}});
  else
    p.nodes.push_back({"Div", {"x", "sd"}, "n"});
  p.nodes.push_back({"Mul", {"n", "w"}, "y"});
  p.constants = {{"two", {false, 2.0, 0}}, {"eps", {true, 0, 0}}};
  if (r == "Div") p.constants["one"] = {false, 1.0, 0};
  p.last_axis_vectors = {"w"};
  p.last_axis_of = "x";
  p.root_shape_of = "x";
  p.rewrite_attrs = {{K::Int, "axis", -1, 0, ""}, {K::FloatOfConstant, "epsilon", 0, 0, "eps"}};
  return p;
}

// Rotary embedding as GPT-NeoX and LLaMA write it: x * cos + rotate_half(x) * sin with
// rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]); the halves come from two Slices or
// one Split. The Add lists the rotated product first so the Slices bind x before the plain
// product does (the matcher commits to the first input order of a Mul of two leaves).
Pattern rotary(const char* name, bool split) {
  Pattern p = fused(name, "Rotary", {"x", "cos", "sin"});
  if (split) {
    PatternNode s{"Split", {"x"}, "x1"};
    s.more_outputs = {"x2"};
    s.along_last_axis = true;
    p.nodes = {s};
  } else {
    PatternNode lo{"Slice", {"x"}, "x1"}, hi{"Slice", {"x"}, "x2"};
    lo.slice_first = 0, lo.slice_last = 0.5;
    hi.slice_first = 0.5, hi.slice_last = 1;
    p.nodes = {lo, hi};
  }
  PatternNode cat{"Concat", {"nx2", "x1"}, "rot"};
  cat.along_last_axis = true;
  p.nodes.insert(p.nodes.end(), {{"Neg", {"x2"}, "nx2"},
                                 cat,
                                 {"Mul", {"rot", "sin"}, "b"},
                                 {"Mul", {"x", "cos"}, "a"},
                                 {"Add", {"b", "a"}, "y"}});
  p.broadcasting = {"cos", "sin"};
  p.broadcast_onto = "x";
  p.root_shape_of = "x";
  p.rewrite_attrs = {{K::Int, "interleaved", 0, 0, ""}};
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
  // SiLU (torch's nn.SiLU exports Mul(x, Sigmoid(x))). Quick GELU, x * Sigmoid(1.702 x), is
  // left to a user rule (configs/quick_gelu_silu.yaml).
  {
    Pattern p = fused("silu", "SiLU", {"x"});
    p.nodes = {{"Sigmoid", {"x"}, "s"}, {"Mul", {"x", "s"}, "y"}};
    p.rewrite_attrs = {{K::Float, "alpha", 0, 1.0, ""}};
    out.push_back(p);
  }
  // SwiGLU: SiLU(gate) * up, after the rule above made the SiLU (later in the same round).
  {
    Pattern p = fused("swiglu", "SwiGLU", {"g", "u"});
    PatternNode silu{"SiLU", {"g"}, "s"};
    silu.domain = "cuvil";
    silu.attrs = {{K::Float, "alpha", 0, 1.0, ""}};
    p.nodes = {silu, {"Mul", {"s", "u"}, "y"}};
    out.push_back(p);
  }
  out.push_back(rms_norm("rms_norm", "Div"));
  out.push_back(rms_norm("rms_norm_reciprocal", "Reciprocal"));
  out.push_back(rms_norm("rms_norm_div", ""));
  out.push_back(rotary("rotary_slices", false));
  out.push_back(rotary("rotary_split", true));
  return out;
}

}  // namespace

const std::vector<Pattern>& builtin_patterns() {
  static const std::vector<Pattern> patterns = make_builtin_patterns();
  return patterns;
}

}  // namespace cuvil
