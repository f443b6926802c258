// cuvil's fused ops (domain "cuvil", ir/ops.def): the one description of their inputs,
// attributes and semantics. The passes rewrite exporter idioms to them (passes/), the shape
// rules check them (passes/shape/fused.cpp), the whole-tensor reference kernels run them
// (runtime/cpu/ops/fused_*.cpp), and the tile backends lower them. Every op here computes
// exactly what the unfused ONNX subgraph it replaces computes, up to float rounding.
//
// FusedMatMul(A, B, bias?, residual?) -> Y
//   Y = act(alpha * op(A) @ op(B) + bias + residual), numpy-batched matmul.
//   transA, transB (int, 0): op() swaps the last two axes of a rank >= 2 operand.
//   alpha (float, 1), activation (string, ""), activation_alpha/activation_beta (floats, see
//   Activation). bias and residual broadcast (numpy, unidirectionally) to the matmul's shape.
// FusedConv(X, W, B?, residual?) -> Y
//   Y = act(Conv(X, W, B) + residual); every ONNX Conv attribute (auto_pad, dilations, group,
//   kernel_shape, pads, strides) with Conv's meaning, plus activation as for FusedMatMul.
//   BatchNormalization after a Conv is folded into W and B at compile time. residual has Y's
//   shape (broadcasting allowed).
//   layout (string, "NCHW"): "NHWC" puts the channels last: X is [N, D1, ..., C], and Y and
//   residual are [N, O1, ..., M] (residual broadcasts to that); W stays [M, C/group, k1, ...]
//   and B [M] (no prepacked form: the kernel's GEMM reads W transposed as it is). Pads, strides, dilations and
//   kernel_shape still list the spatial axes in order. The pass choose-layout writes it.
// The same internal `layout` attribute (string, "NCHW") on four ONNX pools, written by
// choose-layout for the pools inside and after a chain of NHWC convs: MaxPool (only with no
//   Indices output: indices address NCHW positions), AveragePool, GlobalAveragePool and
//   GlobalMaxPool. "NHWC": X is [N, D1, ..., C] and Y [N, O1, ..., C] ([N, 1, ..., 1, C] for the
//   global pools); every other attribute (kernel_shape, strides, dilations, pads, auto_pad,
//   ceil_mode, count_include_pad) keeps its ONNX meaning over the spatial axes in order. float32
//   only. The results are the NCHW pools' bits, transposed (runtime/cpu/ops/pool_nhwc.h).
//   LpPool and GlobalLpPool have no NHWC form. Not an ONNX attribute (the importer does not
//   look for it: an ONNX node that spells it gets this meaning).
// RMSNorm(X, scale) -> Y
//   Y = X / sqrt(mean(X^2 over axes [axis, rank)) + epsilon) * scale, computed in float.
//   axis (int, -1), epsilon (float, 1e-5). scale broadcasts to the normalised axes.
// SiLU(X) -> Y:  Y = X * sigmoid(alpha * X); alpha (float, 1).
// SwiGLU(G, U) -> Y:  Y = G * sigmoid(G) * U (numpy broadcasting of G and U).
// Rotary(X, cos, sin) -> Y
//   Y = X * cos + rotate(X) * sin over the last axis (even length D); rotate(X) is
//   concat(-X[..., D/2:], X[..., :D/2]) when interleaved = 0 (GPT-NeoX/LLaMA "rotate_half") and
//   (-X[..., 1::2], X[..., 0::2]) interleaved pairwise when interleaved = 1 (GPT-J). cos and sin
//   broadcast to X. interleaved (int, 0).
// MaskedSoftmax(X, mask?) -> Y
//   Y = softmax(scale * X + mask) along the last axis. scale (float, 1). A float mask is added;
//   a bool mask keeps true entries and sets false ones to -inf. mask broadcasts to X.
// Attention(Q, K, V, mask?, past_key?, past_value?) -> Y, present_key?, present_value?
//   Q [B, Hq, S, D], K [B, Hkv, L, D], V [B, Hkv, L, Dv]; Hq is a multiple of Hkv (grouped-query
//   heads: query head h reads key/value head h / (Hq / Hkv)). With past_key [B, Hkv, P, D] and
//   past_value [B, Hkv, P, Dv], the keys are concat(past_key, K) along axis 2 (T = P + L keys),
//   likewise the values; present_key/present_value are those concatenations.
//   Y = softmax(scale * Q @ K^T + mask [+ causal]) @ V, shape [B, Hq, S, Dv].
//   scale (float, 0 = 1/sqrt(D)); is_causal (int, 0): query i sees key j iff j <= i + T - S
//   (aligned to the end, as a decoder with a cache needs). mask: float (added) or bool (false
//   = -inf), broadcasting to [B, Hq, S, T].
// LinearAttention(Q, K, V, past_state?, decay?, beta?) -> Y, present_state?
//   The recurrent linear attention of ONNX LinearAttention (27): Q [B, T, Hq*Dk], K [B, T,
//   Hkv*Dk], V [B, T, Hkv*Dv], heads packed in the last axis; a state S [B, Hkv, Dk, Dv] (from
//   past_state, else zeros) runs over the T steps: with decay, S *= exp(g_t) (decay [B, T, Hkv]
//   per head or [B, T, Hkv*Dk] per key row); with beta, v_t = beta_t * (v_t - S^T k_t) (beta
//   [B, T, Hkv] or [B, T, 1]); then S += k_t v_t^T and y_t = scale * q_t^T S for each query head
//   (query head h reads state h / (Hq / Hkv)). Y [B, T, Hq*Dv]; present_state the last S.
//   q_num_heads, kv_num_heads (ints, required); scale (float, 0 = 1/sqrt(Dk)); update_rule
//   (string, "gated_delta"): "linear" (no decay, no beta), "gated" (decay), "delta" (beta),
//   "gated_delta" (both). float32, accumulated in float32 as the ONNX reference.
// DecisionForest(X, nodes, splits, roots, leaf_offsets, leaf_targets, leaf_weights, members?,
//     base_values?) -> Y
//   A tree ensemble as tables (the ai.onnx.ml tree ensembles import as it: frontend/ml_ops.h).
//   X [N, F] (or [F], one row): float, double, float16, int32 or int64, compared as double.
//   nodes int32 [M, 6]: per interior node its feature, true child, false child, mode | missing
//   << 3, member begin, member end; a child (and a root) >= 0 is a node, -(l + 1) leaf l. Modes:
//   0 x <= split, 1 <, 2 >=, 3 >, 4 ==, 5 !=, 6 x in members[begin, end); missing = 1 sends a NaN
//   feature to the true child when the comparison did not. splits double [M]; roots int32 [T]
//   (one per tree); leaf l votes (leaf_targets[j], leaf_weights[j]) for j in [leaf_offsets[l],
//   leaf_offsets[l + 1]). Per row: each tree's votes aggregate per target (aggregate_function
//   0 AVERAGE (the sum / T), 1 SUM, 2 MIN, 3 MAX; MIN/MAX start from the output type's largest
//   and lowest finite values), then base_values are added (one per target, or one for all),
//   then with binary = 1 the score s of target 0 becomes the columns (1 - s, s) for
//   post_transform 0 and 4, else (-s, s) (the binary TreeEnsembleClassifier; with n_targets 1
//   Y has 2 columns), then post_transform per row: 0 NONE, 1 SOFTMAX, 2 LOGISTIC, 3
//   SOFTMAX_ZERO, 4 PROBIT (the ONNX reference's approximate erf inverse). Accumulated in
//   double. Y [N, n_targets] of X's type, or float32 with to_float = 1.
//   n_targets (int, required), aggregate_function (int, 1), post_transform (int, 0), binary
//   (int, 0), to_float (int, 0).
#pragma once

#include <cmath>
#include <optional>
#include <string>

namespace cuvil::fused {

// The epilogue activations of FusedMatMul and FusedConv, by their attribute spelling.
//   ""           identity              "relu"      max(x, 0)
//   "clip"       min(max(x, alpha), beta)  (Relu6 is clip 0, 6)
//   "sigmoid"    1 / (1 + exp(-x))     "tanh"      tanh(x)
//   "silu"       x * sigmoid(x)        "gelu"      0.5 x (1 + erf(x / sqrt 2))
//   "gelu_tanh"  0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
//   "leaky_relu" x >= 0 ? x : alpha x
// activation_alpha / activation_beta default to ONNX's: clip (-inf, +inf), leaky_relu slope
// 0.01. NaN propagates through every activation.
#define CUVIL_FUSED_ACTIVATIONS(X) \
  X(None, "")                      \
  X(Relu, "relu")                  \
  X(Clip, "clip")                  \
  X(Sigmoid, "sigmoid")            \
  X(Tanh, "tanh")                  \
  X(Silu, "silu")                  \
  X(Gelu, "gelu")                  \
  X(GeluTanh, "gelu_tanh")         \
  X(LeakyRelu, "leaky_relu")

enum class Activation {
#define CUVIL_X(id, spelling) id,
  CUVIL_FUSED_ACTIVATIONS(CUVIL_X)
#undef CUVIL_X
};

inline std::optional<Activation> parse_activation(const std::string& s) {
#define CUVIL_X(id, spelling) \
  if (s == spelling) return Activation::id;
  CUVIL_FUSED_ACTIVATIONS(CUVIL_X)
#undef CUVIL_X
  return std::nullopt;
}

inline const char* activation_name(Activation a) {
  switch (a) {
#define CUVIL_X(id, spelling) \
  case Activation::id: return spelling;
    CUVIL_FUSED_ACTIVATIONS(CUVIL_X)
#undef CUVIL_X
  }
  return "";
}

// One element of an activation, in float: the mathematical definition (the run-time kernels
// compute the same functions with runtime/cpu/vec_math.h, within its stated error bounds).
inline float apply_activation(Activation a, float x, float alpha, float beta) {
  switch (a) {
    case Activation::None: return x;
    case Activation::Relu: return x != x ? x : (x > 0.0f ? x : 0.0f);  // NaN propagates, as ONNX Relu
    case Activation::Clip: return x < alpha ? alpha : (x > beta ? beta : x);
    case Activation::Sigmoid: return 1.0f / (1.0f + std::exp(-x));
    case Activation::Tanh: return std::tanh(x);
    case Activation::Silu: return x * (1.0f / (1.0f + std::exp(-x)));
    case Activation::Gelu: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case Activation::GeluTanh: {
      const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(inner));
    }
    case Activation::LeakyRelu: return x >= 0.0f ? x : alpha * x;
  }
  return x;
}

}  // namespace cuvil::fused
