// Pass: attention fusion.
//
// Rewrites: the scaled-dot-product attention torch exports, MatMul(Softmax(mask(scale *
// MatMul(Q, Transpose(K)))), V), into one cuvil::Attention (ir/fused_ops.h), in every graph.
// K is transposed by a perm that swaps the last two axes of a [B, H, T, D] tensor, or by
// [0, 2, 3, 1] of a [B, T, H, D] tensor (BERT; K becomes a new Transpose [0, 2, 1, 3] of it).
// The scale is a product of constant scalar Mul/Div on the scores, on Q and on K; the mask is
// an Add of a float tensor and/or a Where(cond, scores, fill <= -1e30) whose bool condition
// becomes a bool mask, or is_causal = 1 when the condition is proven to be a slice
// [T-S:T, :T] of a constant lower-triangular buffer. Softmax may sit between Casts to float
// (identities on the float32 tensors fused). LLaMA's repeat_kv (Unsqueeze, Expand, Reshape of
// [B, Hkv, T, D] to [B, Hkv*n, T, D]) on K and V is absorbed (grouped-query heads), and a
// Concat(past, new, axis 2) on both becomes past_key/past_value, Attention then producing the
// Concat outputs as present_key/present_value. Every shape fact used is proven from the
// inferred shapes (Q, K, V rank 4, batch and head counts equal, the mask broadcasting to
// [B, H, S, T] without widening the scores); anything unproven is left alone. Where only the
// softmax part matches (no MatMuls around it), Softmax(scale * x + mask) becomes
// cuvil::MaskedSoftmax when there is a scale or mask to absorb. float32 only (the kernels').
// Requires: infer_shapes and fold_constants (scales and buffers are constants), after
// canonicalize. After: a verified model; the nodes a match consumed are left for
// eliminate_dead_code (they stay live, and run, when something else reads them).
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace cuvil {

struct AttentionFusionStats {
  int64_t attention = 0;       // cuvil::Attention nodes created
  int64_t masked_softmax = 0;  // cuvil::MaskedSoftmax nodes created
};

AttentionFusionStats fuse_attention(Model& model);

}  // namespace cuvil
