// Pass: linear ops and their elementwise epilogues become one cuvil::FusedMatMul or FusedConv.
//
// Rewrites, in the order ir/fused_ops.h defines (y = act(alpha * acc + bias + residual)):
//   MatMul, or Gemm (opset >= 7; its C becomes the bias when beta is 1), with
//     - a Transpose of B that swaps only its last two axes, absorbed into transB,
//     - Mul by / Div by a one-element float constant, absorbed into alpha (before any bias),
//     - an Add of a constant vector along the last axis (the bias),
//     - an Add of any tensor that broadcasts to the output without changing its shape (the
//       residual),
//     - one activation: Relu, Clip with constant (or absent) bounds, Sigmoid, Tanh, Gelu (either
//       approximation), cuvil::SiLU with alpha 1, LeakyRelu; also behind a Reshape of the
//       MatMul/Gemm (or bias) result (GPT-2's Conv1D: Gemm on a 2-D view, viewed back, then
//       gelu): elementwise, it runs in the fused op, which takes the Reshape's place and writes
//       its input, and the Reshape moves to the activation's place,
//   becomes one FusedMatMul; Conv + residual Add + activation becomes one FusedConv with Conv's
//   attributes. Each step is optional but they come in that order; a bare MatMul or Gemm stays
//   as it is (it has its own tile kernel), a bare Conv becomes a FusedConv without epilogue (the
//   same kernel), so that no Conv is left beside FusedConv. A step is taken only through a value that the next node alone reads (not a
//   graph output, not captured by a subgraph), float tensors of one dtype with known shapes.
//   The fused node takes the place of the chain's last node and writes its output.
// Requires: infer_shapes, canonicalize (Gelu idioms are one op), fold_batch_norm (a Conv's
// BatchNormalization is in its weights). After: a verified model; readers of the chain's
// intermediate values are gone, constants they read are left for dce.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace cuvil {

struct FuseEpilogueStats {
  int64_t matmuls = 0;  // FusedMatMul nodes made
  int64_t convs = 0;    // FusedConv nodes made
};

FuseEpilogueStats fuse_epilogues(Model& model);

}  // namespace cuvil
