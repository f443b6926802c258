// ONNX ops of opsets 23..28 (and LpNormalization) expanded at import (see newer_ops.h). Each expansion is
// checked against the ONNX reference implementation (onnx/reference/ops/op_*.py of onnx 1.23)
// by the wheel's node cases (ConformanceWheel) and by tests/frontend_newer_ops_test.cpp.
#include "frontend/newer_ops.h"

#include "frontend/emitter.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>

namespace cuvil::frontend {
namespace {

// The fused kernels are float32 ones (runtime/cpu/ops/fused_pointwise.cpp): a declared other
// type takes the plain form.
bool declared_not_float(const TypeLookup& types, const std::string& x) {
  const int elem = types(x).elem;
  return elem != 0 && elem != onnx::TensorProto::FLOAT;
}

// Y = X / sqrt(mean(X^2 over [axis, rank)) + epsilon) * scale, in float (stash_type 1): exactly
// cuvil::RMSNorm; for a declared type other than float32 the same in plain ops (X cast to float
// and the result back), when the normalised axes are known (a negative axis, or a declared rank).
bool rms_normalization(const onnx::NodeProto& n, Emitter& e, const TypeLookup& types, std::string* why) {
  if (attr_int(n, "stash_type", 1) != 1) {
    *why = "stash_type " + std::to_string(attr_int(n, "stash_type", 1)) + " (only 1, float, is supported)";
    return false;
  }
  const std::string x = input(n, 0);
  const int64_t axis = attr_int(n, "axis", -1), rank = types(x).rank;
  if (declared_not_float(types, x) && (axis < 0 || rank >= 0)) {
    std::vector<int64_t> axes;
    for (int64_t a = axis; a < (axis < 0 ? 0 : rank); ++a) axes.push_back(a);
    auto to_float = [&](const std::string& v) {
      std::string f = e.value("f32");
      Emitter::set_int(e.node("Cast", {v}, {f}), "to", onnx::TensorProto::FLOAT);
      return f;
    };
    const std::string xf = to_float(x);
    const std::string mean = e.op("ReduceMean", {e.op("Mul", {xf, xf}), e.ints(axes)});
    const std::string inv = e.op("Reciprocal", {e.op("Sqrt", {e.op("Add", {mean, e.float_scalar(attr_float(n, "epsilon", 1e-5f))})})});
    e.node("CastLike", {e.op("Mul", {e.op("Mul", {xf, inv}), to_float(input(n, 1))}), x}, {n.output(0)});
    return true;
  }
  onnx::NodeProto& r = e.node("RMSNorm", {input(n, 0), input(n, 1)}, {n.output(0)}, "cuvil");
  Emitter::set_int(r, "axis", attr_int(n, "axis", -1));
  Emitter::set_float(r, "epsilon", attr_float(n, "epsilon", 1e-5f));
  return true;
}

// x * sigmoid(alpha * x) in plain ops, in x's type: for the types the fused kernels do not take.
std::string plain_swish(Emitter& e, const std::string& x, float alpha) {
  const std::string a = e.op("CastLike", {e.float_scalar(alpha), x});
  return e.op("Mul", {x, e.op("Sigmoid", {e.op("Mul", {x, a})})});
}

// Y = X * sigmoid(alpha * X): cuvil::SiLU.
bool swish(const onnx::NodeProto& n, Emitter& e, const TypeLookup& types, std::string*) {
  const float alpha = attr_float(n, "alpha", 1.0f);
  if (declared_not_float(types, input(n, 0))) {
    e.node("Identity", {plain_swish(e, input(n, 0), alpha)}, {n.output(0)});
    return true;
  }
  onnx::NodeProto& s = e.node("SiLU", {input(n, 0)}, {n.output(0)}, "cuvil");
  Emitter::set_float(s, "alpha", alpha);
  return true;
}

// Y = A * sigmoid(alpha * A) * B (A and B of one shape): cuvil::SwiGLU for alpha 1, else
// cuvil::SiLU and Mul.
bool swiglu(const onnx::NodeProto& n, Emitter& e, const TypeLookup& types, std::string*) {
  const float alpha = attr_float(n, "alpha", 1.0f);
  if (declared_not_float(types, input(n, 0))) {
    e.node("Mul", {plain_swish(e, input(n, 0), alpha), input(n, 1)}, {n.output(0)});
    return true;
  }
  if (alpha == 1.0f) {
    e.node("SwiGLU", {input(n, 0), input(n, 1)}, {n.output(0)}, "cuvil");
    return true;
  }
  std::string gate = e.value("silu");
  Emitter::set_float(e.node("SiLU", {input(n, 0)}, {gate}, "cuvil"), "alpha", alpha);
  e.node("Mul", {gate, input(n, 1)}, {n.output(0)});
  return true;
}

// RotaryEmbedding(X, cos_cache, sin_cache, position_ids?): X is [B, H, S, D], or [B, S, H*D]
// with num_heads; the caches are [max_pos, r/2] indexed by position_ids [B, S], or [B, S, r/2]
// without them; the first r = rotary_embedding_dim (0: D) entries of each head rotate, pairing
// halves (interleaved 0) or neighbours (1). As cuvil::Rotary, whose cos and sin span the rotated
// width: the cache rows are repeated (halves: concatenated; neighbours: each entry twice) and get
// a heads axis of 1 ([B, 1, S, r] for 4-D X; for 3-D X the heads are split off as [B, S, H, D]
// and the caches are [B, S, 1, r]).
bool rotary_embedding(const onnx::NodeProto& n, Emitter& e, const TypeLookup& types, std::string* why) {
  const int64_t interleaved = attr_int(n, "interleaved", 0);
  const int64_t heads = attr_int(n, "num_heads", 0);
  const int64_t rdim = attr_int(n, "rotary_embedding_dim", 0);
  if (interleaved != 0 && interleaved != 1) {
    *why = "interleaved " + std::to_string(interleaved) + " (must be 0 or 1)";
    return false;
  }
  if (heads < 0 || rdim < 0 || (rdim % 2) != 0) {
    *why = "num_heads " + std::to_string(heads) + " / rotary_embedding_dim " + std::to_string(rdim) +
           " (must be >= 0, the rotated width even)";
    return false;
  }
  const std::string x = input(n, 0), pos = input(n, 3);
  // ONNX requires num_heads for 3-D inputs and ignores it for 4-D ones: the declared rank
  // decides; undeclared, num_heads means 3-D (a 4-D input then fails the Reshape's shape check
  // at run time rather than being misread).
  const Declared dx = types(input(n, 0));
  const bool three_d = dx.rank >= 0 ? dx.rank == 3 : heads > 0;
  if (three_d && heads == 0) {
    *why = "a 3-D input needs num_heads";
    return false;
  }
  std::string caches[2];
  for (int k = 0; k < 2; ++k) {
    std::string c = input(n, 1 + k);
    if (!pos.empty()) c = e.op("Gather", {c, pos});  // [B, S, r/2]
    if (interleaved) {
      std::string u = e.op("Unsqueeze", {c, e.ints({-1})});  // [B, S, r/2, 1]
      std::string pairs = e.value("pairs");
      Emitter::set_int(e.node("Concat", {u, u}, {pairs}), "axis", -1);  // [B, S, r/2, 2]
      c = e.op("Reshape", {pairs, e.ints({0, 0, -1})});
    } else {
      std::string cc = e.value("halves");
      Emitter::set_int(e.node("Concat", {c, c}, {cc}), "axis", -1);
      c = cc;
    }
    caches[k] = e.op("Unsqueeze", {c, e.ints({three_d ? 2 : 1})});
  }
  std::string xs = three_d ? e.op("Reshape", {x, e.ints({0, 0, heads, -1})}) : x;
  std::string y = three_d ? e.value("rotated") : n.output(0);
  // cuvil::Rotary, or for a declared type other than float32 its definition in plain ops:
  // x * cos + rotate(x) * sin, rotate pairing halves (-x2, x1) or neighbours (-x[2i+1], x[2i]).
  const bool plain = declared_not_float(types, x);
  auto rotary = [&](const std::string& in, const std::string& out) {
    if (!plain) {
      Emitter::set_int(e.node("Rotary", {in, caches[0], caches[1]}, {out}, "cuvil"), "interleaved", interleaved);
      return;
    }
    std::string src = interleaved ? e.op("Reshape", {in, e.ints({0, 0, 0, -1, 2})}) : in;  // pairs last
    std::string first = e.value("first"), second = e.value("second"), turned = e.value("turned");
    onnx::NodeProto& split = e.node("Split", {src}, {first, second});
    Emitter::set_int(split, "axis", -1);
    Emitter::set_int(split, "num_outputs", 2);
    Emitter::set_int(e.node("Concat", {e.op("Neg", {second}), first}, {turned}), "axis", -1);
    if (interleaved) turned = e.op("Reshape", {turned, e.ints({0, 0, 0, -1})});
    e.node("Add", {e.op("Mul", {in, caches[0]}), e.op("Mul", {turned, caches[1]})}, {out});
  };
  if (rdim == 0) {
    rotary(xs, y);
  } else {
    const std::string axis = e.ints({-1});
    std::string head = e.op("Slice", {xs, e.ints({0}), e.ints({rdim}), axis});
    std::string tail = e.op("Slice", {xs, e.ints({rdim}), e.ints({std::numeric_limits<int64_t>::max()}), axis});
    std::string turned = e.value("turned");
    rotary(head, turned);
    Emitter::set_int(e.node("Concat", {turned, tail}, {y}), "axis", -1);
  }
  if (three_d) e.node("Reshape", {y, e.ints({0, 0, -1})}, {n.output(0)});
  return true;
}

// ConstantOfShape(shape): a tensor of `shape` (a 1-D int64 value) filled with `v`, of ONNX
// type `elem` (INT64, or FLOAT for anything a CastLike then converts).
std::string constant_of_shape(Emitter& e, const std::string& shape, int elem, int64_t v) {
  const std::string out = e.value("filled");
  onnx::NodeProto& c = e.node("ConstantOfShape", {shape}, {out});
  onnx::AttributeProto* a = c.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(elem);
  a->mutable_t()->add_dims(1);
  if (elem == onnx::TensorProto::INT64) a->mutable_t()->add_int64_data(v);
  else a->mutable_t()->add_float_data(static_cast<float>(v));
  return out;
}

// TensorScatter(past_cache, update, write_indices?) (24): update's entries s along `axis` go to
// past_cache's entries write_indices[b] + s (mod the axis length when mode is "circular"), b
// the index along axis 0. As ScatterElements with those indices, made for every element of
// update: s counted by an exclusive CumSum of ones along the axis, write_indices reshaped to
// [B, 1, ...] (the rank taken from update's shape at run time: the importer knows no ranks).
bool tensor_scatter(const onnx::NodeProto& n, Emitter& e, const TypeLookup&, std::string* why) {
  const auto* mode_attr = find_attr(n, "mode");
  const std::string mode = mode_attr ? mode_attr->s() : "linear";
  if (mode != "linear" && mode != "circular") {
    *why = "mode '" + mode + "' (must be 'linear' or 'circular')";
    return false;
  }
  const int64_t axis = attr_int(n, "axis", -2);
  const std::string past = input(n, 0), update = input(n, 1), writes = input(n, 2);
  const std::string shape = e.op("Shape", {update});
  const std::string one = constant_of_shape(e, shape, onnx::TensorProto::INT64, 1);
  std::string index = e.value("seq");
  Emitter::set_int(e.node("CumSum", {one, e.scalar(axis)}, {index}), "exclusive", 1);
  if (!writes.empty()) {
    const std::string rest = e.op("Sub", {e.op("Shape", {shape}), e.ints({1})});  // [rank - 1]
    const std::string ones = constant_of_shape(e, rest, onnx::TensorProto::INT64, 1);
    const std::string target = e.value("target");
    Emitter::set_int(e.node("Concat", {e.ints({-1}), ones}, {target}), "axis", 0);
    index = e.op("Add", {e.op("Reshape", {writes, target}), index});
  }
  if (mode == "circular") {
    const std::string length = e.value("length");
    e.node("Gather", {e.op("Shape", {past}), e.scalar(axis)}, {length});
    index = e.op("Mod", {index, length});
  }
  Emitter::set_int(e.node("ScatterElements", {past, index, update}, {n.output(0)}), "axis", axis);
  return true;
}

// Attention (23, 24: nonpad_kv_seqlen; 25: left/right_window_size) as the ONNX reference
// computes it (onnx/reference/ops/op_attention.py), in plain ONNX ops: 3-D Q/K/V split into
// heads; past_key/past_value concatenated before K/V (present_*); Q and K each scaled by
// sqrt(scale) (scale 0: 1/sqrt(head size)); key/value heads repeated for grouped queries (each
// head h_kv serves Hq/Hkv consecutive query heads); QK^T softcapped (c * tanh(x / c)); an
// additive bias from attn_mask (bool: false = -inf; padded with -inf up to the key count),
// the causal rule j <= i + offset (offset: the past length; with nonpad_kv_seqlen, per batch
// nonpad - S; else 0), the sliding window and the padding of nonpad_kv_seqlen; softmax over the
// keys (in softmax_precision), rows whose bias is all -inf set to 0; times V. qk_matmul_output
// is QK^T (after softcap; mode 2 with the bias, mode 3 the probabilities). The dtype of a mask
// decides its meaning, so it must be declared (graph input, value_info, initializer) or made
// by a Cast or a comparison the importer sees.
// Shape(x)[start:end].
std::string shape_part(Emitter& e, const std::string& x, int64_t start, int64_t end) {
  std::string out = e.value("dims");
  onnx::NodeProto& sh = e.node("Shape", {x}, {out});
  Emitter::set_int(sh, "start", start);
  Emitter::set_int(sh, "end", end);
  return out;
}

// Grouped queries: x [B, Hkv, T, D] -> [B, Hkv, Hq/Hkv, T, D] -> [B, Hq, T, D], Hq from q4
// [B, Hq, S, D] (the reference's repeat of each key/value head).
std::string repeat_heads(Emitter& e, const std::string& q4, const std::string& x) {
  const std::string hq = shape_part(e, q4, 1, 2), hkv = shape_part(e, x, 1, 2), b = shape_part(e, x, 0, 1),
                    td = shape_part(e, x, 2, 4);
  std::string rep = e.op("Div", {hq, hkv});
  std::string wide = e.value("expand_to"), flat = e.value("heads_to");
  Emitter::set_int(e.node("Concat", {b, hkv, rep, td}, {wide}), "axis", 0);
  Emitter::set_int(e.node("Concat", {b, hq, td}, {flat}), "axis", 0);
  std::string u = e.op("Unsqueeze", {x, e.ints({2})});
  return e.op("Reshape", {e.op("Expand", {u, wide}), flat});
}

// sqrt(scale) in q4's type, to multiply Q and K by each as the reference does: from the
// attribute `scale` when given and non-zero, else 1/sqrt(D) with D the last dim of q4.
std::string root_scale(const onnx::NodeProto& n, Emitter& e, const std::string& q4) {
  if (const auto* sc = find_attr(n, "scale"); sc && sc->f() != 0.f)
    return e.op("CastLike", {e.float_scalar(static_cast<float>(std::sqrt(static_cast<double>(sc->f())))), q4});
  std::string d = e.value("head_size");
  Emitter::set_int(e.node("Cast", {shape_part(e, q4, 3, 4)}, {d}), "to", onnx::TensorProto::FLOAT);
  return e.op("CastLike", {e.op("Sqrt", {e.op("Sqrt", {e.op("Reciprocal", {d})})}), q4});
}

bool attention(const onnx::NodeProto& n, Emitter& e, const TypeLookup& types, std::string* why) {
  const std::string q = input(n, 0), k = input(n, 1), v = input(n, 2), mask = input(n, 3),
                    past_k = input(n, 4), past_v = input(n, 5), nonpad = input(n, 6);
  if (past_k.empty() != past_v.empty()) {
    *why = "past_key and past_value must be given together";
    return false;
  }
  if (!nonpad.empty() && !past_k.empty()) {
    *why = "nonpad_kv_seqlen cannot be combined with past_key/past_value";
    return false;
  }
  const int64_t causal = attr_int(n, "is_causal", 0), mode = attr_int(n, "qk_matmul_output_mode", 0);
  const int64_t left = attr_int(n, "left_window_size", -1), right = attr_int(n, "right_window_size", -1);
  const float softcap = attr_float(n, "softcap", 0.f);
  if (mode < 0 || mode > 3) {
    *why = "qk_matmul_output_mode " + std::to_string(mode) + " (must be 0 to 3)";
    return false;
  }
  if (left < -1 || right < -1) {
    *why = "left/right_window_size must be -1 or >= 0";
    return false;
  }
  const int64_t qh = attr_int(n, "q_num_heads", 0), kvh = attr_int(n, "kv_num_heads", 0);
  const Declared dq = types(q);
  const bool three_d = dq.rank >= 0 ? dq.rank == 3 : (qh > 0 || kvh > 0);
  if (three_d && (qh <= 0 || kvh <= 0)) {
    *why = "3-D inputs need q_num_heads and kv_num_heads";
    return false;
  }
  int mask_type = 0;
  if (!mask.empty()) {
    mask_type = types(mask).elem;
    if (mask_type == 0) {
      *why = "the type of attn_mask '" + mask + "' is not declared (bool and float masks differ in meaning)";
      return false;
    }
  }
  auto heads = [&](const std::string& x, int64_t h) {
    if (!three_d) return x;
    std::string t = e.value("heads");
    Emitter::set_ints(e.node("Transpose", {e.op("Reshape", {x, e.ints({0, 0, h, -1})})}, {t}), "perm", {0, 2, 1, 3});
    return t;
  };
  auto shape_part = [&](const std::string& x, int64_t start, int64_t end) { return frontend::shape_part(e, x, start, end); };
  auto like = [&](const std::string& x, const std::string& ref) { return e.op("CastLike", {x, ref}); };
  const std::string q4 = heads(q, qh);
  std::string kc = heads(k, kvh), vc = heads(v, kvh);
  if (!past_k.empty()) {
    std::string a = e.value("present_key"), b = e.value("present_value");
    Emitter::set_int(e.node("Concat", {past_k, kc}, {a}), "axis", 2);
    Emitter::set_int(e.node("Concat", {past_v, vc}, {b}), "axis", 2);
    kc = a;
    vc = b;
  }
  if (n.output_size() > 1 && !n.output(1).empty()) e.node("Identity", {kc}, {n.output(1)});
  if (n.output_size() > 2 && !n.output(2).empty()) e.node("Identity", {vc}, {n.output(2)});
  // The additive bias.
  const std::string zero = like(e.float_scalar(0.f), q4), ninf = like(e.float_scalar(-INFINITY), q4);
  std::string bias;
  if (!mask.empty()) {
    std::string m = mask_type == onnx::TensorProto::BOOL ? e.op("Where", {mask, zero, ninf}) : mask;
    const std::string missing = e.op("Sub", {shape_part(kc, 2, 3), shape_part(m, -1, std::numeric_limits<int64_t>::max())});
    std::string pads = e.value("pads");
    Emitter::set_int(e.node("Concat", {e.ints({0}), missing}, {pads}), "axis", 0);
    bias = e.op("Pad", {m, pads, like(ninf, m), e.ints({-1})});
  }
  const bool window = left >= 0 || right >= 0;
  if (causal || window || !nonpad.empty()) {
    const std::string s_len = e.op("Gather", {e.op("Shape", {q4}), e.scalar(2)});
    const std::string t_len = e.op("Gather", {e.op("Shape", {kc}), e.scalar(2)});
    const std::string i = e.op("Unsqueeze", {e.op("Range", {e.scalar(0), s_len, e.scalar(1)}), e.ints({1})});
    const std::string j = e.op("Range", {e.scalar(0), t_len, e.scalar(1)});
    std::string offset = e.scalar(0);
    const bool per_batch = past_k.empty() && !nonpad.empty();
    if (!past_k.empty()) offset = e.op("Gather", {e.op("Shape", {past_k}), e.scalar(2)});
    if (per_batch) offset = e.op("Unsqueeze", {e.op("Sub", {nonpad, s_len}), e.ints({1, 2})});  // [B, 1, 1]
    const std::string diff = e.op("Sub", {e.op("Add", {i, offset}), j});  // i + offset - j
    auto as_bias = [&](const std::string& allowed) {
      std::string b = e.op("Where", {allowed, zero, ninf});
      return per_batch ? e.op("Unsqueeze", {b, e.ints({1})}) : b;  // [B, 1, S, T]
    };
    auto add = [&](const std::string& a, const std::string& b) { return a.empty() ? b : e.op("Add", {a, b}); };
    if (causal) bias = add(bias, as_bias(e.op("GreaterOrEqual", {diff, e.scalar(0)})));
    if (window) {
      std::string allowed;
      if (left >= 0) allowed = e.op("LessOrEqual", {diff, e.scalar(left)});
      if (right >= 0) {
        std::string r = e.op("GreaterOrEqual", {diff, e.scalar(-right)});
        allowed = allowed.empty() ? r : e.op("And", {allowed, r});
      }
      bias = add(bias, as_bias(allowed));
    }
    if (!nonpad.empty()) {
      std::string valid = e.op("Less", {j, e.op("Unsqueeze", {nonpad, e.ints({1})})});  // [B, T]
      bias = add(bias, e.op("Unsqueeze", {e.op("Where", {valid, zero, ninf}), e.ints({1, 2})}));
    }
  }
  // The guard of fully masked rows (bias all -inf): 0, where the softmax would give NaN.
  auto masked_rows = [&]() {
    std::string top = e.value("bias_max");
    Emitter::set_int(e.node("ReduceMax", {bias, e.ints({-1})}, {top}), "keepdims", 1);
    std::string masked = e.value("masked_row");
    Emitter::set_int(e.node("IsInf", {top}, {masked}), "detect_positive", 0);
    return masked;
  };
  auto finish = [&](const std::string& y4) {
    if (!three_d) {
      e.node("Identity", {y4}, {n.output(0)});
      return;
    }
    std::string t = e.value("y_t");
    Emitter::set_ints(e.node("Transpose", {y4}, {t}), "perm", {0, 2, 1, 3});
    e.node("Reshape", {t, e.ints({0, 0, -1})}, {n.output(0)});
  };
  // cuvil::Attention computes the rest when nothing outside its contract (ir/fused_ops.h) is
  // asked for: no softcap, no qk_matmul_output, softmax in the input's float32. Its scale
  // (0: 1/sqrt(D)) multiplies QK^T once where the reference scales Q and K by sqrt(scale) each
  // (equal up to rounding); its grouped-query heads are the reference's repeat; the causal rule,
  // whose offset differs from cuvil's end alignment when the new keys outnumber the queries, is
  // in the bias, passed as its float mask.
  const auto* prec = find_attr(n, "softmax_precision");
  const bool fused = softcap == 0.f && !(n.output_size() > 3 && !n.output(3).empty()) &&
                     (!prec || prec->i() == 0 || prec->i() == onnx::TensorProto::FLOAT) &&
                     types(q).elem == onnx::TensorProto::FLOAT;
  if (fused) {
    std::vector<std::string> ins = {q4, kc, vc};
    if (!bias.empty()) ins.push_back(bias);
    std::string y4 = e.value("attention");
    onnx::NodeProto& a = e.node("Attention", ins, {y4}, "cuvil");
    if (const auto* sc = find_attr(n, "scale"); sc && sc->f() != 0.f) Emitter::set_float(a, "scale", sc->f());
    if (!bias.empty()) y4 = e.op("Where", {masked_rows(), zero, y4});
    finish(y4);
    return true;
  }
  const std::string root = root_scale(n, e, q4);  // applied to Q and K each, in Q's type
  auto repeat = [&](const std::string& x) { return three_d && qh == kvh ? x : repeat_heads(e, q4, x); };
  const std::string kr = repeat(kc), vr = repeat(vc);
  std::string kt = e.value("key_t");
  Emitter::set_ints(e.node("Transpose", {e.op("Mul", {kr, root})}, {kt}), "perm", {0, 1, 3, 2});
  std::string qk = e.op("MatMul", {e.op("Mul", {q4, root}), kt});
  if (softcap > 0.f) {
    const std::string c = like(e.float_scalar(softcap), q4);
    qk = e.op("Mul", {e.op("Tanh", {e.op("Div", {qk, c})}), c});
  }
  std::string logits = bias.empty() ? qk : e.op("Add", {qk, bias});
  std::string qk_out = mode == 2 ? logits : qk;
  if (prec && prec->i() != 0) {
    std::string c = e.value("precise");
    Emitter::set_int(e.node("Cast", {logits}, {c}), "to", prec->i());
    logits = c;
  }
  std::string probs = e.value("probs");
  Emitter::set_int(e.node("Softmax", {logits}, {probs}), "axis", -1);
  if (!bias.empty()) probs = e.op("Where", {masked_rows(), like(zero, probs), probs});
  probs = like(probs, q4);
  if (mode == 3) qk_out = probs;
  if (n.output_size() > 3 && !n.output(3).empty()) e.node("CastLike", {qk_out, q4}, {n.output(3)});
  finish(e.op("MatMul", {probs, vr}));
  return true;
}

// LpNormalization(X) (1; 22 added types): X / ||X||_p along `axis` (p 1 or 2), 0 where the
// norm is 0 (the reference's 0/0 = 0). ReduceL1/ReduceL2 keep the axis.
bool lp_normalization(const onnx::NodeProto& n, Emitter& e, const TypeLookup&, std::string* why) {
  const int64_t p = attr_int(n, "p", 2), axis = attr_int(n, "axis", -1);
  if (p != 1 && p != 2) {
    *why = "p " + std::to_string(p) + " (must be 1 or 2)";
    return false;
  }
  const std::string x = input(n, 0), norm = e.value("norm");
  const char* reduce = p == 1 ? "ReduceL1" : "ReduceL2";
  if (e.opset >= 18) {
    e.node(reduce, {x, e.ints({axis})}, {norm});
  } else {
    Emitter::set_ints(e.node(reduce, {x}, {norm}), "axes", {axis});
  }
  const std::string zero = e.op("CastLike", {e.float_scalar(0.f), x});
  e.node("Where", {e.op("Equal", {norm, zero}), zero, e.op("Div", {x, norm})}, {n.output(0)});
  return true;
}

// CausalConvWithState(input [B, C, L], weight [C, 1, k], bias? [C], past_state? [B, C, k-1])
// (27) -> (output [B, C, L], present_state [B, C, k-1]): padded = Concat(past_state or zeros,
// input) along the length; output = the depthwise Conv of padded (group C, no padding) plus
// bias, then x * sigmoid(x) for activation "silu"/"swish" (in float32, as the reference);
// present_state = padded's last k-1 positions (from L on: empty for k = 1). Conv's group is an
// attribute, so C must be known at import: weight's first or input's second declared dim.
bool causal_conv_with_state(const onnx::NodeProto& n, Emitter& e, const TypeLookup& types, std::string* why) {
  const auto* act_attr = find_attr(n, "activation");
  const std::string act = act_attr ? act_attr->s() : "none";
  if (act != "none" && act != "silu" && act != "swish") {
    *why = "activation '" + act + "' (must be 'none', 'silu' or 'swish')";
    return false;
  }
  const std::string x = input(n, 0), w = input(n, 1), bias = input(n, 2), past = input(n, 3);
  const Declared dx = types(x), dw = types(w);
  if ((dx.rank >= 0 && dx.rank != 3) || (dw.rank >= 0 && dw.rank != 3)) {
    *why = "input and weight must be rank 3 ([batch, channels, length] and [channels, 1, k])";
    return false;
  }
  const int64_t channels = dw.dim(0) > 0 ? dw.dim(0) : dx.dim(1);
  if (channels <= 0) {
    *why = "the channel count must be known at import (declare weight's first dim or input's second)";
    return false;
  }
  std::string state = past;
  if (state.empty()) {
    // zeros [B, C, k - 1] of input's type
    const std::string km1 = e.op("Sub", {e.op("Slice", {e.op("Shape", {w}), e.ints({2}), e.ints({3})}), e.ints({1})});
    const std::string bc = e.op("Slice", {e.op("Shape", {x}), e.ints({0}), e.ints({2})});
    const std::string shape = e.value("pad_shape");
    Emitter::set_int(e.node("Concat", {bc, km1}, {shape}), "axis", 0);
    state = e.op("CastLike", {constant_of_shape(e, shape, onnx::TensorProto::FLOAT, 0), x});
  }
  const std::string padded = e.value("padded");
  Emitter::set_int(e.node("Concat", {state, x}, {padded}), "axis", 2);
  std::vector<std::string> conv_in = {padded, w};
  if (!bias.empty()) conv_in.push_back(bias);
  const std::string conv = act == "none" ? n.output(0) : e.value("conv");
  Emitter::set_int(e.node("Conv", conv_in, {conv}), "group", channels);
  if (act != "none") {
    std::string f = e.value("f32");
    Emitter::set_int(e.node("Cast", {conv}, {f}), "to", onnx::TensorProto::FLOAT);
    e.node("CastLike", {e.op("Mul", {f, e.op("Sigmoid", {f})}), conv}, {n.output(0)});
  }
  if (n.output_size() > 1 && !n.output(1).empty()) {
    const std::string length = e.op("Slice", {e.op("Shape", {x}), e.ints({2}), e.ints({3})});
    e.node("Slice", {padded, length, e.ints({std::numeric_limits<int64_t>::max()}), e.ints({2})}, {n.output(1)});
  }
  return true;
}

// AffineGrid(theta [N, 2, 3] or [N, 3, 4], size [N, C, H, W] or [N, C, D, H, W]) (20) -> grid
// [N, H, W, 2] or [N, D, H, W, 3]: theta times the homogeneous position (x, y[, z], 1) of every
// output point, x running along W, y along H, z along D; along an axis of length L the
// coordinate of index i is (2i + 1) / L - 1 (align_corners 0) or 2i / (L - 1) - 1 (1; -1 when L
// is 1). The output's rank follows size's length, so that must be known at import (size's
// declared dim or theta's second dim).
bool affine_grid(const onnx::NodeProto& n, Emitter& e, const TypeLookup& types, std::string* why) {
  const int64_t align = attr_int(n, "align_corners", 0);
  if (align != 0 && align != 1) {
    *why = "align_corners " + std::to_string(align) + " (must be 0 or 1)";
    return false;
  }
  const std::string theta = input(n, 0), size = input(n, 1);
  const Declared ds = types(size), dt = types(theta);
  int64_t k = ds.dim(0) == 4 || ds.dim(0) == 5 ? ds.dim(0) - 2 : -1;  // spatial dims
  if (k < 0 && (dt.dim(1) == 2 || dt.dim(1) == 3)) k = dt.dim(1);
  if (k < 0) {
    *why = "whether the grid is 2-D or 3-D must be known at import (declare size's length, 4 or 5, or theta's dims)";
    return false;
  }
  const std::string spatial = e.op("Slice", {size, e.ints({2}), e.ints({2 + k})});  // [D,] H, W
  const std::string one_f = e.float_scalar(1.f), two_f = e.float_scalar(2.f);
  // coords[t]: the coordinate along spatial axis t (0: the outermost), shaped to broadcast.
  std::vector<std::string> coords;
  for (int64_t t = 0; t < k; ++t) {
    const std::string len = e.value("len");
    e.node("Gather", {size, e.scalar(2 + t)}, {len});
    std::string idx = e.value("idx");
    Emitter::set_int(e.node("Cast", {e.op("Range", {e.scalar(0), len, e.scalar(1)})}, {idx}), "to", onnx::TensorProto::FLOAT);
    std::string lf = e.value("lenf");
    Emitter::set_int(e.node("Cast", {len}, {lf}), "to", onnx::TensorProto::FLOAT);
    std::string c;
    if (align == 0) {
      c = e.op("Sub", {e.op("Div", {e.op("Add", {e.op("Mul", {idx, two_f}), one_f}), lf}), one_f});
    } else {
      const std::string lm1 = e.op("Sub", {lf, one_f});
      const std::string step = e.op("Where", {e.op("Greater", {lm1, e.float_scalar(0.f)}), e.op("Div", {two_f, lm1}), e.float_scalar(0.f)});
      c = e.op("Sub", {e.op("Mul", {idx, step}), one_f});
    }
    std::vector<int64_t> shape(static_cast<size_t>(k), 1);
    shape[static_cast<size_t>(t)] = -1;
    coords.push_back(e.op("Expand", {e.op("Reshape", {c, e.ints(shape)}), spatial}));
  }
  // (x, y[, z], 1): the innermost axis first.
  std::vector<std::string> parts;
  for (int64_t t = k - 1; t >= 0; --t) parts.push_back(e.op("Unsqueeze", {coords[static_cast<size_t>(t)], e.ints({-1})}));
  parts.push_back(e.op("Unsqueeze", {constant_of_shape(e, spatial, onnx::TensorProto::FLOAT, 1), e.ints({-1})}));
  const std::string homo = e.value("homo");
  Emitter::set_int(e.node("Concat", parts, {homo}), "axis", -1);
  std::string points = e.value("points");  // [k + 1, P]
  Emitter::set_ints(e.node("Transpose", {e.op("Reshape", {homo, e.ints({-1, k + 1})})}, {points}), "perm", {1, 0});
  const std::string moved = e.op("MatMul", {theta, e.op("CastLike", {points, theta})});  // [N, k, P]
  std::string rows = e.value("rows");
  Emitter::set_ints(e.node("Transpose", {moved}, {rows}), "perm", {0, 2, 1});
  const std::string out_shape = e.value("grid_shape");
  Emitter::set_int(e.node("Concat", {e.op("Slice", {size, e.ints({0}), e.ints({1})}), spatial, e.ints({k})}, {out_shape}), "axis", 0);
  e.node("Reshape", {rows, out_shape}, {n.output(0)});
  return true;
}

// LinearAttention(query, key, value, past_state?, decay?, beta?) (27) -> (output,
// present_state): cuvil::LinearAttention, the same contract (ir/fused_ops.h). It computes in
// float32 as the reference does: inputs of a declared other float type are cast to float32 and
// the outputs cast back (present_state to past_state's type, else query's).
bool linear_attention(const onnx::NodeProto& n, Emitter& e, const TypeLookup& types, std::string* why) {
  const int64_t hq = attr_int(n, "q_num_heads", 0), hkv = attr_int(n, "kv_num_heads", 0);
  if (hq < 1 || hkv < 1 || hq % hkv != 0) {
    *why = "q_num_heads " + std::to_string(hq) + " / kv_num_heads " + std::to_string(hkv) +
           " (both required, q_num_heads a positive multiple of kv_num_heads)";
    return false;
  }
  const auto* rule_attr = find_attr(n, "update_rule");
  const std::string rule = rule_attr ? rule_attr->s() : "gated_delta";
  if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta") {
    *why = "update_rule '" + rule + "' (must be linear, gated, delta or gated_delta)";
    return false;
  }
  const bool gated = rule == "gated" || rule == "gated_delta", delta = rule == "delta" || rule == "gated_delta";
  if (gated == input(n, 4).empty() || delta == input(n, 5).empty()) {
    *why = "update_rule '" + rule + "' takes " + (gated ? "" : "no ") + "decay and " + (delta ? "" : "no ") + "beta";
    return false;
  }
  const bool cast = declared_not_float(types, input(n, 0));
  std::vector<std::string> ins;
  for (int i = 0; i < 6; ++i) {
    std::string in = input(n, i);
    if (cast && !in.empty()) {
      std::string f = e.value("f32");
      Emitter::set_int(e.node("Cast", {in}, {f}), "to", onnx::TensorProto::FLOAT);
      in = f;
    }
    ins.push_back(in);
  }
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  const bool want_state = n.output_size() > 1 && !n.output(1).empty();
  const std::string y = cast ? e.value("y") : n.output(0);
  const std::string state = !want_state ? "" : cast ? e.value("state") : n.output(1);
  std::vector<std::string> outs = {y};
  if (want_state) outs.push_back(state);
  onnx::NodeProto& la = e.node("LinearAttention", ins, outs, "cuvil");
  Emitter::set_int(la, "q_num_heads", hq);
  Emitter::set_int(la, "kv_num_heads", hkv);
  Emitter::set_float(la, "scale", attr_float(n, "scale", 0.f));
  onnx::AttributeProto* a = la.add_attribute();
  a->set_name("update_rule");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(rule);
  if (cast) {
    e.node("CastLike", {y, input(n, 0)}, {n.output(0)});
    if (want_state) e.node("CastLike", {state, input(n, input(n, 3).empty() ? 0 : 3)}, {n.output(1)});
  }
  return true;
}

// The nodes of a graph attribute of one input and one output (FlexAttention's score_mod and
// prob_mod), reading `in` instead of its input; `*out` is the value of its output. Its
// initializers become Constants; names it does not define are the enclosing graph's.
bool inline_mod(const onnx::GraphProto& g, const std::string& in, Emitter& e, std::string* out, std::string* why) {
  if (g.input_size() != 1 || g.output_size() != 1) {
    *why = "graph attribute '" + g.name() + "' must have one input and one output";
    return false;
  }
  if (g.sparse_initializer_size() > 0) {
    *why = "graph attribute '" + g.name() + "' has sparse initializers";
    return false;
  }
  std::map<std::string, std::string> rename = {{g.input(0).name(), in}};
  auto mapped = [&](const std::string& v) {
    auto it = rename.find(v);
    return v.empty() || it == rename.end() ? v : it->second;
  };
  for (const onnx::TensorProto& t : g.initializer()) {
    const std::string v = e.value("mod_const");
    onnx::AttributeProto* a = e.node("Constant", {}, {v}).add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() = t;
    a->mutable_t()->clear_name();
    rename[t.name()] = v;
  }
  for (const onnx::NodeProto& nd : g.node()) {
    for (const auto& a : nd.attribute())
      if (a.type() == onnx::AttributeProto::GRAPH || a.type() == onnx::AttributeProto::GRAPHS) {
        *why = "graph attribute '" + g.name() + "' holds a node with a subgraph (" + nd.op_type() + ")";
        return false;
      }
    std::vector<std::string> ins, outs;
    for (const auto& i : nd.input()) ins.push_back(mapped(i));
    for (const auto& o : nd.output()) {
      if (!o.empty()) rename[o] = e.value("mod");
      outs.push_back(mapped(o));
    }
    onnx::NodeProto& c = e.node(nd.op_type().c_str(), ins, outs, nd.domain().c_str());
    *c.mutable_attribute() = nd.attribute();
  }
  *out = mapped(g.output(0).name());
  return true;
}

// FlexAttention (ai.onnx.preview 1): softmax(score_mod(Q K^T * scale)) then prob_mod, times V,
// in plain ops as its reference computes: Q and K each scaled by sqrt(scale) (1/sqrt(D) by
// default) in Q's type, grouped key/value heads repeated, the scores cast to softmax_precision
// (float32 for float16/bfloat16 Q when not given), the mods' nodes inlined, V cast to the
// scores' type, and Y cast back to V's type.
bool flex_attention(const onnx::NodeProto& n, Emitter& e, const TypeLookup& types, std::string* why) {
  const std::string q = input(n, 0), k = input(n, 1), v = input(n, 2);
  for (const std::string& x : {q, k, v})
    if (const int r = types(x).rank; r >= 0 && r != 4) {
      *why = "input '" + x + "' has rank " + std::to_string(r) + "; FlexAttention takes [batch, heads, seq, head_size]";
      return false;
    }
  if (e.opset < 15) {
    *why = "needs the default-domain opset 15 or later (CastLike); the model imports " + std::to_string(e.opset);
    return false;
  }
  const int64_t hq = types(q).dim(1), hkv = types(k).dim(1);
  const bool same_heads = hq > 0 && hq == hkv;
  const std::string root = root_scale(n, e, q);
  const std::string kr = same_heads ? k : repeat_heads(e, q, k), vr = same_heads ? v : repeat_heads(e, q, v);
  std::string kt = e.value("key_t");
  Emitter::set_ints(e.node("Transpose", {e.op("Mul", {kr, root})}, {kt}), "perm", {0, 1, 3, 2});
  std::string scores = e.op("MatMul", {e.op("Mul", {q, root}), kt});
  int64_t precision = attr_int(n, "softmax_precision", 0);
  if (precision != 0 && precision != onnx::TensorProto::FLOAT && precision != onnx::TensorProto::FLOAT16 &&
      precision != onnx::TensorProto::BFLOAT16 && precision != onnx::TensorProto::DOUBLE) {
    *why = "softmax_precision " + std::to_string(precision) + " (float, float16, bfloat16 or double)";
    return false;
  }
  const int q_type = types(q).elem;
  if (precision == 0 && (q_type == onnx::TensorProto::FLOAT16 || q_type == onnx::TensorProto::BFLOAT16))
    precision = onnx::TensorProto::FLOAT;
  auto cast = [&](const std::string& x) {
    if (precision == 0) return x;
    std::string c = e.value("precise");
    Emitter::set_int(e.node("Cast", {x}, {c}), "to", precision);
    return c;
  };
  scores = cast(scores);
  const auto* score_mod = find_attr(n, "score_mod");
  if (score_mod && !inline_mod(score_mod->g(), scores, e, &scores, why)) return false;
  std::string probs = e.value("probs");
  Emitter::set_int(e.node("Softmax", {cast(scores)}, {probs}), "axis", -1);
  const auto* prob_mod = find_attr(n, "prob_mod");
  if (prob_mod && !inline_mod(prob_mod->g(), probs, e, &probs, why)) return false;
  const std::string y = e.op("MatMul", {cast(probs), e.op("CastLike", {vr, probs})});
  e.node("CastLike", {y, v}, {n.output(0)});
  return true;
}

struct NewerOp {
  const char* op_type;
  int64_t since;  // the default-domain opset that introduced it
  bool (*expand)(const onnx::NodeProto&, Emitter&, const TypeLookup&, std::string*);
  int min_inputs, max_inputs;
};

constexpr NewerOp kNewerOps[] = {
    {"AffineGrid", 20, affine_grid, 2, 2},
    {"Attention", 23, attention, 3, 7},
    {"CausalConvWithState", 27, causal_conv_with_state, 2, 4},
    {"LinearAttention", 27, linear_attention, 3, 6},
    {"LpNormalization", 1, lp_normalization, 1, 1},
    {"RMSNormalization", 23, rms_normalization, 2, 2},
    {"RotaryEmbedding", 23, rotary_embedding, 3, 4},
    {"Swish", 24, swish, 1, 1},
    {"TensorScatter", 24, tensor_scatter, 2, 3},
    {"SwiGLU", 28, swiglu, 2, 2},
};

}  // namespace

bool expand_preview_op(const onnx::NodeProto& node, int64_t default_opset, const std::string& prefix,
                       const TypeLookup& types, std::vector<onnx::NodeProto>* out, std::string* why) {
  if (node.domain() != "ai.onnx.preview" || node.op_type() != "FlexAttention") return false;
  int given = node.input_size();
  while (given > 0 && node.input(given - 1).empty()) --given;
  if (given != 3 || node.output_size() != 1 || node.output(0).empty()) {
    *why = "takes three inputs (Q, K, V) and one output";
    return false;
  }
  std::vector<onnx::NodeProto> made;
  Emitter e(prefix, default_opset, &made);
  if (!flex_attention(node, e, types, why)) return false;
  for (auto& m : made) out->push_back(std::move(m));
  return true;
}

bool expand_newer_op(const onnx::NodeProto& node, int64_t opset, const std::string& prefix,
                     const TypeLookup& types, std::vector<onnx::NodeProto>* out, std::string* why) {
  if (!(node.domain().empty() || node.domain() == "ai.onnx")) return false;
  for (const NewerOp& op : kNewerOps) {
    if (node.op_type() != op.op_type || opset < op.since) continue;
    int given = node.input_size();
    while (given > 0 && node.input(given - 1).empty()) --given;
    if (given < op.min_inputs || given > op.max_inputs || node.output_size() < 1 || node.output(0).empty()) {
      *why = "takes " + std::to_string(op.min_inputs) + " to " + std::to_string(op.max_inputs) +
             " inputs and one output";
      return false;
    }
    std::vector<onnx::NodeProto> made;
    Emitter e(prefix, opset, &made);
    if (!op.expand(node, e, types, why)) return false;
    for (auto& m : made) out->push_back(std::move(m));
    return true;
  }
  return false;
}

}  // namespace cuvil::frontend
