// CPU kernels of cuvil::Attention, cuvil::MaskedSoftmax and cuvil::LinearAttention (the contract
// is ir/fused_ops.h).
// MaskedSoftmax works one softmax row at a time. Attention works on blocks of up to
// kQueryBlock query rows of one (batch, head): scores = scale * Q_blk K^T and Y_blk = P V are
// two GEMMs on the active kernel path (runtime/cpu/ops/gemm_micro.h, single-threaded inside a
// block, blocks spread over the workers, so 1 and N threads give the same bits), with the
// mask, the causal cut and the softmax applied row by row in between: a [kQueryBlock, T]
// scratch per worker, never [S, T]. A causal block multiplies only the keys its last row sees.
// Keys and values are one [T, D] matrix per key/value head: the new K and V without a past,
// otherwise the present outputs (written when wanted) or a concatenated copy; with a past kept
// in place by the session (OpContext::cache_capacity) the state's own buffer, heads `capacity`
// rows apart, into which only the L new rows are written (after the committed P).
// float32 only; the softmax subtracts the row maximum and a row whose every entry is masked to
// -inf comes out NaN, as Softmax over that row does in the unfused graph.
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/vec_math.h"
#include "runtime/testing_hooks.h"

namespace cuvil::rt::ops {
namespace {

// Query rows per Attention block: a multiple of every path's GEMM register tile rows (4, 6
// and 14 do not all divide it, but 64 rows keep the last partial group small), and with T
// keys a [64, T] score block stays in L2 up to a few thousand keys.
constexpr int64_t kQueryBlock = 64;

// The mask operand shared by both ops: float (added) or bool (false = -inf), read through
// broadcast strides onto the rows' index space.
struct MaskReader {
  const float* f = nullptr;
  const uint8_t* b = nullptr;
  std::vector<int64_t> strides;  // one per target dim
  bool present() const { return f || b; }
  // Adds the mask at element offset `off` to `s`.
  float apply(float s, int64_t off) const {
    if (f) return s + f[off];
    if (b) return b[off] ? s : -std::numeric_limits<float>::infinity();
    return s;
  }
};

Status read_mask(OpContext& ctx, size_t index, const std::vector<int64_t>& target, MaskReader* m) {
  const TensorView* mask = ctx.input(index);
  if (!mask) return Status::ok();
  if (mask->dtype != DType::Float && mask->dtype != DType::Bool)
    return ctx.error(StatusCode::kInvalidArgument, "mask is ", dtype_name(mask->dtype),
                     ", expected f32 or bool");
  bool ok = mask->dims.size() <= target.size();
  for (size_t i = 0; ok && i < mask->dims.size(); ++i) {
    const int64_t d = mask->dims[i];
    ok = d == 1 || d == target[target.size() - mask->dims.size() + i];
  }
  if (!ok)
    return ctx.error(StatusCode::kInvalidArgument, "mask ", dims_string(mask->dims),
                     " does not broadcast to ", dims_string(target));
  if (mask->numel() > 0 && !mask->data)
    return ctx.error(StatusCode::kInvalidArgument, "mask has no data");
  if (mask->dtype == DType::Float) m->f = mask->as<float>();
  else m->b = mask->as<uint8_t>();
  m->strides = broadcast_strides(mask->dims, target);
  return Status::ok();
}

Status require_f32(OpContext& ctx, size_t index, const char* role, const TensorView** out) {
  *out = ctx.input(index);
  if (!*out) return ctx.error(StatusCode::kInvalidArgument, "input ", role, " is missing");
  if ((*out)->dtype != DType::Float)
    return ctx.error(StatusCode::kUnsupported, role, " is ", dtype_name((*out)->dtype),
                     "; only f32 is supported");
  if ((*out)->numel() > 0 && !(*out)->data)
    return ctx.error(StatusCode::kInvalidArgument, role, " has no data");
  return Status::ok();
}

// In place: s[0, n) becomes softmax(s), computed as the unfused float32 Softmax kernel
// (runtime/cpu/ops/reduce.cpp) computes it: vm::exp after subtracting the maximum, the sum in
// vec_math's fixed order, one reciprocal; all -inf (or any NaN) gives NaN everywhere.
void softmax_row(float* s, int64_t n) {
  if (n <= 0) return;
  const float m = vm::max(s, n);  // a NaN anywhere reaches the sum
  const float inv = 1.0f / vm::exp_sub_sum(s, m, s, n);
  vm::scale(s, inv, s, n);
}

}  // namespace

Status kernel_MaskedSoftmax(OpContext& ctx) {
  const TensorView* x = nullptr;
  CUVIL_RETURN_IF_ERROR(require_f32(ctx, 0, "X", &x));
  if (x->dims.empty()) return ctx.error(StatusCode::kInvalidArgument, "X is a scalar; softmax needs an axis");
  const float scale = ctx.attrs().get_float("scale", 1.0f);
  MaskReader mask;
  CUVIL_RETURN_IF_ERROR(read_mask(ctx, 1, x->dims, &mask));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Float, x->dims, &y));
  const int64_t len = x->dims.back();
  if (x->numel() == 0) return Status::ok();
  const int64_t rows = x->numel() / len;
  const size_t rank = x->dims.size();
  const float* xp = x->as<float>();
  float* yp = y->as<float>();
  parallel_range(ctx, rows, std::max<int64_t>(1, 16384 / len), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t moff = 0;  // the mask offset of row r: its multi-index over dims[:-1]
      for (int64_t rest = r, d = static_cast<int64_t>(rank) - 2; mask.present() && d >= 0; --d) {
        moff += (rest % x->dims[d]) * mask.strides[d];
        rest /= x->dims[d];
      }
      float* s = yp + r * len;
      for (int64_t j = 0; j < len; ++j)
        s[j] = mask.apply(scale * xp[r * len + j], moff + j * (mask.present() ? mask.strides[rank - 1] : 0));
      softmax_row(s, len);
    }
  });
  return Status::ok();
}

Status kernel_Attention(OpContext& ctx) {
  const TensorView *q = nullptr, *k = nullptr, *v = nullptr;
  CUVIL_RETURN_IF_ERROR(require_f32(ctx, 0, "Q", &q));
  CUVIL_RETURN_IF_ERROR(require_f32(ctx, 1, "K", &k));
  CUVIL_RETURN_IF_ERROR(require_f32(ctx, 2, "V", &v));
  const TensorView *pk = nullptr, *pv = nullptr;
  const bool has_past = ctx.input(4) || ctx.input(5);
  if (has_past) {
    CUVIL_RETURN_IF_ERROR(require_f32(ctx, 4, "past_key", &pk));
    CUVIL_RETURN_IF_ERROR(require_f32(ctx, 5, "past_value", &pv));
  }
  for (const TensorView* t : {q, k, v, pk, pv})
    if (t && t->dims.size() != 4)
      return ctx.error(StatusCode::kInvalidArgument, "inputs must be rank 4 [batch, heads, seq, head_dim], got ",
                       dims_string(t->dims));
  const int64_t B = q->dims[0], Hq = q->dims[1], S = q->dims[2], D = q->dims[3];
  const int64_t Hkv = k->dims[1], L = k->dims[2], Dv = v->dims[3];
  if (k->dims[0] != B || v->dims[0] != B || k->dims[3] != D || v->dims[1] != Hkv || v->dims[2] != L)
    return ctx.error(StatusCode::kInvalidArgument, "Q ", dims_string(q->dims), ", K ", dims_string(k->dims),
                     " and V ", dims_string(v->dims), " do not agree (batch, heads, length, head size)");
  if (Hkv < 1 || Hq % Hkv != 0)
    return ctx.error(StatusCode::kInvalidArgument, "query heads (", Hq, ") are not a multiple of key/value heads (",
                     Hkv, ")");
  const int64_t P = has_past ? pk->dims[2] : 0;
  if (has_past && (pk->dims[0] != B || pk->dims[1] != Hkv || pk->dims[3] != D || pv->dims[0] != B ||
                   pv->dims[1] != Hkv || pv->dims[2] != P || pv->dims[3] != Dv))
    return ctx.error(StatusCode::kInvalidArgument, "past_key ", dims_string(pk->dims), " and past_value ",
                     dims_string(pv->dims), " do not fit K ", dims_string(k->dims), " and V ",
                     dims_string(v->dims));
  const int64_t T = P + L;
  const int64_t causal = ctx.attrs().get_int("is_causal", 0);
  if (causal != 0 && causal != 1)
    return ctx.error(StatusCode::kInvalidArgument, "attribute is_causal is ", causal, ", must be 0 or 1");
  float scale = ctx.attrs().get_float("scale", 0.0f);
  if (scale == 0.0f) scale = 1.0f / std::sqrt(static_cast<float>(D));
  MaskReader mask;
  CUVIL_RETURN_IF_ERROR(read_mask(ctx, 3, {B, Hq, S, T}, &mask));

  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Float, {B, Hq, S, Dv}, &y));
  // Keys and values as one [T, width] matrix per key/value head, `rows` rows apart (T, or the
  // capacity of an in-place cache). present = concat(past, new) along the sequence axis,
  // written only when wanted; in place (op_kernel.h, cache_capacity) the past already is the
  // present's first P rows and only the L new rows are written, past the committed ones.
  struct Operand {
    const float* data = nullptr;
    int64_t rows = 0;
  };
  Operand present[3];  // by output index, when written
  auto write_present = [&](size_t index, const TensorView* past, const TensorView* now, int64_t width,
                           int64_t capacity) -> Status {
    if (capacity > 0 && (ctx.num_outputs() <= index || !ctx.output_wanted(index)))
      return ctx.error(StatusCode::kRuntime, "an in-place cache input needs its present output ", index);
    if (ctx.num_outputs() <= index || !ctx.output_wanted(index)) return Status::ok();
    TensorView* out = nullptr;
    CUVIL_RETURN_IF_ERROR(ctx.allocate_output(index, DType::Float, {B, Hkv, T, width}, &out));
    float* o = out->as<float>();
    if (capacity > 0) {
      // The session gave the state's own buffer (and checked that T rows fit it).
      if (out->data != past->data || T > capacity)
        return ctx.error(StatusCode::kRuntime, "present output ", index, " is not the in-place cache of its past");
      for (int64_t bh = 0; bh < B * Hkv && L > 0; ++bh)
        std::copy_n(now->as<float>() + bh * L * width, L * width, o + (bh * capacity + P) * width);
      present[index] = {o, capacity};
      return Status::ok();
    }
    present[index] = {o, T};
    for (int64_t bh = 0; bh < B * Hkv; ++bh) {
      if (P > 0) std::copy_n(past->as<float>() + bh * P * width, P * width, o + bh * T * width);
      if (L > 0) std::copy_n(now->as<float>() + bh * L * width, L * width, o + bh * T * width + P * width);
    }
    testing::count_cache_bytes_copied(B * Hkv * P * width * 4);
    return Status::ok();
  };
  const int64_t key_capacity = has_past ? ctx.cache_capacity(4) : 0;
  const int64_t value_capacity = has_past ? ctx.cache_capacity(5) : 0;
  CUVIL_RETURN_IF_ERROR(write_present(1, pk, k, D, key_capacity));
  CUVIL_RETURN_IF_ERROR(write_present(2, pv, v, Dv, value_capacity));
  if (y->numel() == 0) return Status::ok();

  const float* qp = q->as<float>();
  const int64_t group = Hq / Hkv;
  std::vector<float> k_all, v_all;
  auto contiguous = [&](size_t present_index, const TensorView* past, const TensorView* now, int64_t width,
                        std::vector<float>* copy) -> Operand {
    if (present[present_index].data) return present[present_index];
    if (P == 0) return {now->as<float>(), T};
    copy->resize(static_cast<size_t>(B * Hkv * T * width));
    for (int64_t bh = 0; bh < B * Hkv; ++bh) {
      std::copy_n(past->as<float>() + bh * P * width, P * width, copy->data() + bh * T * width);
      std::copy_n(now->as<float>() + bh * L * width, L * width, copy->data() + bh * T * width + P * width);
    }
    testing::count_cache_bytes_copied(B * Hkv * P * width * 4);
    return {copy->data(), T};
  };
  const Operand keys = contiguous(1, pk, k, D, &k_all);
  const Operand values = contiguous(2, pv, v, Dv, &v_all);
  if (T == 0) {  // softmax over no keys: NaN rows, as the unfused graph gives
    std::fill_n(y->as<float>(), y->numel(), std::numeric_limits<float>::quiet_NaN());
    return Status::ok();
  }

  const int64_t blocks = (S + kQueryBlock - 1) / kQueryBlock;
  const int64_t units = B * Hq * blocks;
  parallel_range(ctx, units, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(std::min(S, kQueryBlock) * T));
    for (int64_t u = begin; u < end; ++u) {
      const int64_t blk = u % blocks, h = (u / blocks) % Hq, b = u / (blocks * Hq);
      const int64_t bg = b * Hkv + h / group;
      const int64_t i0 = blk * kQueryBlock, mb = std::min(kQueryBlock, S - i0);
      // Keys any row of the block sees: all, or up to the last row's causal limit.
      const int64_t tn = causal ? std::min(T, i0 + mb + T - S) : T;
      const int64_t row0 = (b * Hq + h) * S + i0;
      float* yblk = y->as<float>() + row0 * Dv;
      if (tn <= 0) {  // every key masked for every row
        std::fill_n(yblk, mb * Dv, std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      const float* kb = keys.data + bg * keys.rows * D;
      const float* vb = values.data + bg * values.rows * Dv;
      gemm(nullptr, false, true, mb, tn, D, scale, qp + row0 * D, D, kb, D, 0.0f, scores.data(), tn);
      for (int64_t r = 0; r < mb; ++r) {
        const int64_t i = i0 + r;
        float* srow = scores.data() + r * tn;
        if (mask.present()) {
          const int64_t moff = b * mask.strides[0] + h * mask.strides[1] + i * mask.strides[2];
          for (int64_t j = 0; j < tn; ++j) srow[j] = mask.apply(srow[j], moff + j * mask.strides[3]);
        }
        if (causal)
          for (int64_t j = std::max<int64_t>(0, i + T - S + 1); j < tn; ++j)
            srow[j] = -std::numeric_limits<float>::infinity();
        softmax_row(srow, tn);
      }
      gemm(nullptr, false, false, mb, Dv, tn, 1.0f, scores.data(), tn, vb, Dv, 0.0f, yblk, Dv);
    }
  });
  return Status::ok();
}

// ---- cuvil::LinearAttention -------------------------------------------------------------------
// One task per (batch, key/value head): its [Dk, Dv] state in a float32 scratch, the T steps in
// order (decay, delta correction, the rank-1 write, then each query head of the group reads
// it). Sums run in a fixed order per task, so 1 and N threads give the same bits.
Status kernel_LinearAttention(OpContext& ctx) {
  const TensorView *q = nullptr, *k = nullptr, *v = nullptr, *past = nullptr, *decay = nullptr, *beta = nullptr;
  CUVIL_RETURN_IF_ERROR(require_f32(ctx, 0, "query", &q));
  CUVIL_RETURN_IF_ERROR(require_f32(ctx, 1, "key", &k));
  CUVIL_RETURN_IF_ERROR(require_f32(ctx, 2, "value", &v));
  if (ctx.input(3)) CUVIL_RETURN_IF_ERROR(require_f32(ctx, 3, "past_state", &past));
  if (ctx.input(4)) CUVIL_RETURN_IF_ERROR(require_f32(ctx, 4, "decay", &decay));
  if (ctx.input(5)) CUVIL_RETURN_IF_ERROR(require_f32(ctx, 5, "beta", &beta));
  const int64_t Hq = ctx.attrs().get_int("q_num_heads", 0), Hkv = ctx.attrs().get_int("kv_num_heads", 0);
  if (Hq < 1 || Hkv < 1 || Hq % Hkv != 0)
    return ctx.error(StatusCode::kInvalidArgument, "q_num_heads (", Hq, ") must be a positive multiple of kv_num_heads (",
                     Hkv, ")");
  const std::string rule = ctx.attrs().get_string("update_rule", "gated_delta");
  const bool gated = rule == "gated" || rule == "gated_delta", delta = rule == "delta" || rule == "gated_delta";
  if (!gated && !delta && rule != "linear")
    return ctx.error(StatusCode::kInvalidArgument, "update_rule '", rule, "' is not linear, gated, delta or gated_delta");
  if (gated != (decay != nullptr) || delta != (beta != nullptr))
    return ctx.error(StatusCode::kInvalidArgument, "update_rule '", rule, "' takes ", gated ? "" : "no ", "decay and ",
                     delta ? "" : "no ", "beta");
  for (const TensorView* t : {q, k, v, decay, beta})
    if (t && t->dims.size() != 3)
      return ctx.error(StatusCode::kInvalidArgument, "inputs must be rank 3 [batch, seq, heads * size], got ",
                       dims_string(t->dims));
  const int64_t B = q->dims[0], T = q->dims[1];
  if (q->dims[2] % Hq != 0 || v->dims[2] % Hkv != 0)
    return ctx.error(StatusCode::kInvalidArgument, "query ", dims_string(q->dims), " or value ", dims_string(v->dims),
                     " does not split into its heads");
  const int64_t Dk = q->dims[2] / Hq, Dv = v->dims[2] / Hkv, group = Hq / Hkv;
  const bool shapes_agree = k->dims == std::vector<int64_t>{B, T, Hkv * Dk} && v->dims[0] == B && v->dims[1] == T &&
                            (!past || past->dims == std::vector<int64_t>{B, Hkv, Dk, Dv});
  if (!shapes_agree)
    return ctx.error(StatusCode::kInvalidArgument, "query ", dims_string(q->dims), ", key ", dims_string(k->dims),
                     ", value ", dims_string(v->dims), past ? " and past_state " + dims_string(past->dims) : "",
                     " do not agree (", Hq, " query heads, ", Hkv, " key/value heads)");
  // decay: per head [B, T, Hkv] or per key row [B, T, Hkv*Dk]; beta: [B, T, Hkv] or [B, T, 1].
  const int64_t decay_width = decay ? decay->dims[2] : 0, beta_width = beta ? beta->dims[2] : 0;
  if (decay && (decay->dims[0] != B || decay->dims[1] != T || (decay_width != Hkv && decay_width != Hkv * Dk)))
    return ctx.error(StatusCode::kInvalidArgument, "decay ", dims_string(decay->dims), " is not [", B, ", ", T, ", ",
                     Hkv, " or ", Hkv * Dk, "]");
  if (beta && (beta->dims[0] != B || beta->dims[1] != T || (beta_width != Hkv && beta_width != 1)))
    return ctx.error(StatusCode::kInvalidArgument, "beta ", dims_string(beta->dims), " is not [", B, ", ", T, ", ", Hkv,
                     " or 1]");
  float scale = ctx.attrs().get_float("scale", 0.0f);
  if (scale == 0.0f) scale = 1.0f / std::sqrt(static_cast<float>(Dk));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Float, {B, T, Hq * Dv}, &y));
  float* present = nullptr;
  if (ctx.num_outputs() > 1 && ctx.output_wanted(1)) {
    TensorView* p = nullptr;
    CUVIL_RETURN_IF_ERROR(ctx.allocate_output(1, DType::Float, {B, Hkv, Dk, Dv}, &p));
    present = p->as<float>();
  }
  const float *qp = q->as<float>(), *kp = k->as<float>(), *vp = v->as<float>();
  float* yp = y->as<float>();
  parallel_range(ctx, B * Hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> state(static_cast<size_t>(Dk * Dv)), vt(static_cast<size_t>(Dv));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / Hkv, h = task % Hkv;
      if (past) std::copy_n(past->as<float>() + task * Dk * Dv, Dk * Dv, state.data());
      else std::fill(state.begin(), state.end(), 0.f);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = b * T + t;
        const float* kt = kp + row * Hkv * Dk + h * Dk;
        std::copy_n(vp + row * Hkv * Dv + h * Dv, Dv, vt.data());
        if (decay) {
          const float* g = decay->as<float>() + row * decay_width;
          for (int64_t d = 0; d < Dk; ++d) {
            const float f = std::exp(decay_width == Hkv ? g[h] : g[h * Dk + d]);
            for (int64_t m = 0; m < Dv; ++m) state[d * Dv + m] *= f;
          }
        }
        if (beta) {
          const float bt = beta->as<float>()[row * beta_width + (beta_width == 1 ? 0 : h)];
          for (int64_t m = 0; m < Dv; ++m) {
            float retrieved = 0.f;
            for (int64_t d = 0; d < Dk; ++d) retrieved += state[d * Dv + m] * kt[d];
            vt[m] = bt * (vt[m] - retrieved);
          }
        }
        for (int64_t d = 0; d < Dk; ++d)
          for (int64_t m = 0; m < Dv; ++m) state[d * Dv + m] += kt[d] * vt[m];
        for (int64_t g = 0; g < group; ++g) {
          const int64_t hq = h * group + g;
          const float* qt = qp + row * Hq * Dk + hq * Dk;
          float* yt = yp + row * Hq * Dv + hq * Dv;
          for (int64_t m = 0; m < Dv; ++m) yt[m] = 0.f;
          for (int64_t d = 0; d < Dk; ++d)
            for (int64_t m = 0; m < Dv; ++m) yt[m] += qt[d] * state[d * Dv + m];
          for (int64_t m = 0; m < Dv; ++m) yt[m] *= scale;
        }
      }
      if (present) std::copy_n(state.data(), Dk * Dv, present + task * Dk * Dv);
    }
  });
  return Status::ok();
}

}  // namespace cuvil::rt::ops
