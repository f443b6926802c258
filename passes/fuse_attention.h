// Pass: attention fusion.
//
// Rewrites: the scaled-dot-product attention torch exports, MatMul(Softmax(mask(scale *
// MatMul(Q, Transpose(K)))), V), into one cuvil::Attention (ir/fused_ops.h), in every graph.
// K is transposed by a perm that swaps the last two axes of a [B, H, T, D] tensor, or by
// [0, 2, 3, 1] of a [B, T, H, D] tensor (BERT; K becomes a new Transpose [0, 2, 1, 3] of it).
// The scale is a product of constant scalar Mul/Div on the scores, on Q and on K. The masks
// are an Add of a float tensor and/or a Where(cond, scores, fill), or masked_fill's
// Where(cond, fill, scores), with a constant fill <= -1e9. A lone Where whose cond is proven
// a slice [T-S:T, :T] of a constant lower-triangular buffer [N, N] (T <= N) is is_causal = 1
// (no row is then empty). Where T <= N is not proven the window proof is redone assuming it:
// the unfused graph fails unless T <= N (the cond's min(T, N) columns must broadcast against
// T), so the cond then stays a mask (the fused op checks that it broadcasts, failing where the
// unfused graph fails), and the softmax input's min(T, N)-style dims, which shape inference
// took from the cond, count as the scores' S and T when they are equal under T <= N and the
// same facts of the layers fused before (whose shapes the later layers' follow). An additive
// float mask that is, element by element, 0 where j <= i + T - S and a fill <= -1e9
// elsewhere, computed from Range/Less/Where/ConstantOfShape and layout ops (LLaMA's
// _make_causal_mask), is is_causal = 1 too, and its [S, T] tensor is no longer computed.
// Otherwise the masks become the one mask input, exactly: fill -inf
// gives the bool mask cond (Not(cond) for masked_fill); a finite fill F the float mask
// Where(cond, 0, F) (with a float mask m: Where(cond, m, F) or Where(cond, 0, F) + m, as the
// Add and the Where nest), because -inf would turn a row the masks cover entirely, uniform in
// the unfused graph, into NaN (HF GPT-2 with a padded position). That assumes |scale * score|
// < ulp(F) / 2 (32 for F = -1e9, ~1e22 for F = -1e30), as scale * score + F then rounds to F;
// it matters only for such rows: in a row that keeps an entry the masked ones weigh exactly 0
// on both sides while the scores stay within ~5e8 of each other. Softmax may sit
// between Casts to float (identities on the float32 tensors fused). LLaMA's repeat_kv
// (Unsqueeze, Expand, Reshape of [B, Hkv, T, D] to [B, Hkv*n, T, D]) on K and V is absorbed
// (grouped-query heads), and a Concat(past, new, axis 2) on both becomes past_key/past_value,
// Attention then producing the Concat outputs read after it as present_key/present_value (the
// Concat stays, renamed "<name>/unfused", for earlier readers, until dce). Every shape fact
// used is proven from the inferred shapes (Q, K, V rank 4, batch and head counts equal, masks
// fitting [B, H, S, T] without widening the scores); anything unproven is left alone. Where
// only the softmax part matches (no MatMuls around it), Softmax(scale * x + masks) becomes
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
