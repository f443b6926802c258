// ONNX default-domain ops newer than cuvil's op table (ir/ops.def, opsets through 21) whose
// meaning cuvil already has: at import each becomes cuvil's fused op (ir/fused_ops.h) plus the
// plain ONNX ops that adapt its layout, the way a function call is inlined. RMSNormalization
// (23) is cuvil::RMSNorm, Swish (24) cuvil::SiLU, SwiGLU (28) cuvil::SwiGLU (or SiLU and Mul
// for alpha != 1), RotaryEmbedding (23) cuvil::Rotary with its caches gathered and widened to
// the full rotated width; these four are plain ops instead when their input is known to be of
// another type than float32, which the fused kernels do not take. TensorScatter (24) is
// ScatterElements with indices made from its write_indices. Attention (23..25) is
// cuvil::Attention where its contract fits (Q known float32, no softcap or qk_matmul_output),
// else the plain ONNX ops of its reference. LpNormalization (opset 1, no kernel of its own) is
// ReduceL1/ReduceL2 and Div. CausalConvWithState (27) is a Concat of its state, a depthwise
// Conv (group = the channel count, which must be declared) and a Slice; AffineGrid (20) a MatMul
// of theta with a grid made from Ranges (2-D or 3-D as declared); LinearAttention (27)
// cuvil::LinearAttention. The ONNX op is thereby the
// canonical form the exporter idioms are rewritten to (passes/canonicalize.cpp). Why at import rather than in a pass: Attention and
// SwiGLU cannot be rows of ops.def, whose enum is spelled by op_type and already holds cuvil's
// ops of those names.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cuvil::frontend {

// What the model declares about a value before any inference: its ONNX elem_type (0: unknown),
// rank (-1: unknown) and, with a known rank, its dims (-1 where not a fixed number).
struct Declared {
  int elem = 0;
  int rank = -1;
  std::vector<int64_t> dims;
  // dims[i] (i < 0 counts from the end), or -1 when it is not known.
  int64_t dim(int64_t i) const {
    if (i < 0) i += rank;
    return i >= 0 && i < static_cast<int64_t>(dims.size()) ? dims[static_cast<size_t>(i)] : -1;
  }
};
using TypeLookup = std::function<Declared(const std::string&)>;

// The nodes computing `node` (default domain, imported at default-domain opset `opset`), or
// false when `node` is not such an op or an attribute takes it outside what cuvil computes
// (then it stays an unsupported op; `why` says what). Names of values and nodes it makes begin
// with `prefix`. The nodes are in the default domain (same opset) or "cuvil" (opset 1).
// `types` says what the model declares about a value (an op whose expansion depends on a
// dtype or rank, as Attention on its mask's, refuses when it is unknown).
bool expand_newer_op(const onnx::NodeProto& node, int64_t opset, const std::string& prefix,
                     const TypeLookup& types, std::vector<onnx::NodeProto>* out, std::string* why);

// The same for the ops of domain ai.onnx.preview cuvil computes: FlexAttention (1), in plain
// ONNX ops of the default domain (at `default_opset`) with its score_mod and prob_mod graphs
// inlined.
bool expand_preview_op(const onnx::NodeProto& node, int64_t default_opset, const std::string& prefix,
                       const TypeLookup& types, std::vector<onnx::NodeProto>* out, std::string* why);

}  // namespace cuvil::frontend
