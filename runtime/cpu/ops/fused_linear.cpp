// Whole-tensor reference kernels of cuvil::FusedMatMul and cuvil::FusedConv (ir/fused_ops.h):
// Y = act(alpha * op(A) @ op(B) + bias + residual) and Y = act(Conv(X, W, B) + residual). The
// products run on the shared packed GEMM (kernel_util.h's gemm, linalg.cpp) and Conv's own code
// (conv.h, nn.cpp); this file adds only the operand checks and the epilogue, applied in the
// compute type (float, or double for double tensors) before the output is stored: for float,
// one vectorised pass per row with conv_depthwise.h's in-register activations (the direct
// depthwise convolution takes the same epilogue in its own registers, register_form below).
#include <limits>
#include <string>
#include <vector>

#include "ir/fused_ops.h"
#include "runtime/cpu/ops/conv.h"
#include "runtime/cpu/ops/conv_depthwise.h"
#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/vec_math.h"

namespace cuvil::rt::ops {
namespace {

bool is_float_dtype(DType t) { return visit_dtype<kFloatTypes>(t, [](auto) {}); }

// The activation attributes of a fused node, checked.
struct ActivationSpec {
  fused::Activation act = fused::Activation::None;
  float alpha = 0.f, beta = 0.f;
};

Status read_activation(OpContext& ctx, ActivationSpec* spec) {
  const std::string name = ctx.attrs().get_string("activation", "");
  const auto act = fused::parse_activation(name);
  if (!act) return ctx.error(StatusCode::kInvalidArgument, "attribute 'activation' is '", name, "', not a known activation");
  spec->act = *act;
  // Defaults where ir/fused_ops.h leaves them open: ONNX LeakyRelu's slope, and an unbounded
  // clip (ONNX Clip without min/max). The passes always write both.
  const bool clip = *act == fused::Activation::Clip;
  spec->alpha = ctx.attrs().get_float(
      "activation_alpha", clip ? -std::numeric_limits<float>::infinity() : 0.01f);
  spec->beta = ctx.attrs().get_float("activation_beta", std::numeric_limits<float>::infinity());
  return Status::ok();
}

// An epilogue operand (bias or residual) read over the output's dims.
struct Operand {
  const TensorView* view = nullptr;
  const void* compute = nullptr;  // or the data already in the compute type (conv's B)
  std::vector<int64_t> strides;   // over the output dims, 0 where it broadcasts
};

Status epilogue_operand(OpContext& ctx, size_t index, const char* role, DType dtype,
                        const std::vector<int64_t>& out_dims, Operand* op) {
  const TensorView* t = ctx.input(index);
  if (!t) return Status::ok();
  if (t->dtype != dtype)
    return ctx.error(StatusCode::kInvalidArgument, role, " is ", dtype_name(t->dtype), " but the output is ",
                     dtype_name(dtype));
  std::vector<int64_t> b;
  if (t->dims.size() > out_dims.size() || !broadcast_shape(t->dims, out_dims, &b) || b != out_dims)
    return ctx.error(StatusCode::kInvalidArgument, role, " ", dims_string(t->dims), " does not broadcast to the output ",
                     dims_string(out_dims));
  op->view = t;
  op->strides = broadcast_strides(t->dims, out_dims);
  return Status::ok();
}

// The array function of an activation that runtime/cpu/vec_math.h computes (SiLU as
// x * sigmoid(x), as kernel_SiLU and the tile Silu), or null.
using VecActivation = void (*)(const float*, float*, int64_t);
void silu1_array(const float* x, float* y, int64_t n) { vm::silu(x, y, n, 1.0f); }
VecActivation vec_activation(fused::Activation act) {
  switch (act) {
    case fused::Activation::Sigmoid: return vm::sigmoid;
    case fused::Activation::Tanh: return vm::tanh;
    case fused::Activation::Silu: return silu1_array;
    case fused::Activation::Gelu: return vm::gelu;
    case fused::Activation::GeluTanh: return vm::gelu_tanh;
    default: return nullptr;
  }
}
// Double tensors: the same activation on one element (a float function), else the reference.
float activation1(const ActivationSpec& spec, float v) {
  switch (spec.act) {
    case fused::Activation::Sigmoid: return vm::sigmoid1(v);
    case fused::Activation::Tanh: return vm::tanh1(v);
    case fused::Activation::Silu: return vm::silu1(v, 1.0f);
    case fused::Activation::Gelu: return vm::gelu1(v);
    case fused::Activation::GeluTanh: return vm::gelu_tanh1(v);
    default: return fused::apply_activation(spec.act, v, spec.alpha, spec.beta);
  }
}

// y = act(y + bias + residual) over y's dims, in compute type C. The operands are summed in
// the order of the unfused graph: the accumulator, then the bias, then the residual.
// The activation in the form of the direct convolution's kernels (conv_depthwise.h); false
// for an activation they do not know.
bool register_activation(const ActivationSpec& spec, DwEpilogue* e) {
  switch (spec.act) {
    case fused::Activation::None: e->act = DwActivation::None; break;
    case fused::Activation::Relu: e->act = DwActivation::Relu; break;
    case fused::Activation::Clip: e->act = DwActivation::Clip; break;
    case fused::Activation::LeakyRelu: e->act = DwActivation::LeakyRelu; break;
    default:
      e->act = DwActivation::Array;
      e->array_fn = vec_activation(spec.act);
      if (!e->array_fn) return false;
  }
  e->alpha = spec.alpha;
  e->beta = spec.beta;
  return true;
}

// y[j] += op[off + j * step] for j < n (op may be null: nothing to add).
inline void add_operand_row(float* y, const float* op, int64_t off, int64_t step, int64_t n) {
  if (!op) return;
  const float* o = op + off;
  if (step == 1) {
    for (int64_t j = 0; j < n; ++j) y[j] += o[j];
  } else if (step == 0) {
    const float v = *o;
    for (int64_t j = 0; j < n; ++j) y[j] += v;
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] += o[j * step];
  }
}

template <typename C>
void apply_epilogue(OpContext& ctx, C* y, const std::vector<int64_t>& full_dims, const Operand& bias,
                    const Operand& residual, const ActivationSpec& spec) {
  DwEpilogue act;
  const bool vector_act = register_activation(spec, &act);  // every activation has one form or the other
  std::vector<C> bbuf, rbuf;
  const C* bp = bias.compute ? static_cast<const C*>(bias.compute)
                             : bias.view ? compute_data<C>(*bias.view, &bbuf) : nullptr;
  const C* rp = residual.view ? compute_data<C>(*residual.view, &rbuf) : nullptr;
  int64_t numel = 1;
  for (int64_t d : full_dims) numel *= d;
  if (numel == 0) return;
  // Adjacent dims that every operand steps through as one are merged (y is dense), so that a
  // row is as long as it can be: a [N, C, 7, 7] output with a per-channel bias has rows of 49.
  std::vector<int64_t> dims;
  Operand bias_m, res_m;
  for (size_t d = 0; d < full_dims.size(); ++d) {
    if (full_dims[d] == 1) continue;
    const int64_t bs = bp ? bias.strides[d] : 0, rs = rp ? residual.strides[d] : 0;
    if (!dims.empty() && bias_m.strides.back() == bs * full_dims[d] && res_m.strides.back() == rs * full_dims[d]) {
      dims.back() *= full_dims[d];
      bias_m.strides.back() = bs;
      res_m.strides.back() = rs;
    } else {
      dims.push_back(full_dims[d]);
      bias_m.strides.push_back(bs);
      res_m.strides.push_back(rs);
    }
  }
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t inner = rank ? dims.back() : 1;
  const int64_t rows = numel / inner;
  parallel_range(ctx, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      // Offsets of the row's first element in the operands (odometer over the outer dims).
      int64_t boff = 0, roff = 0, rest = row;
      for (int64_t d = rank - 2; d >= 0; --d) {
        const int64_t i = rest % dims[d];
        rest /= dims[d];
        if (bp) boff += i * bias_m.strides[d];
        if (rp) roff += i * res_m.strides[d];
      }
      const int64_t bstep = bp && rank ? bias_m.strides.back() : 0;
      const int64_t rstep = rp && rank ? res_m.strides.back() : 0;
      C* yr = y + row * inner;
      if (std::is_same_v<C, float> && vector_act) {
        // The sums (one pass each, the same roundings as one pass doing both), then the
        // activation vectorised over the row: in registers (relu, clip, leaky_relu, as the
        // direct convolution does) or runtime/cpu/vec_math.h's array functions, which the tile
        // epilogue and the unfused kernels call too (bit for bit).
        if constexpr (std::is_same_v<C, float>) {
          if (bstep <= 1 && (!rp || rstep == 1)) {  // the common forms: one pass in registers
            epilogue_row(yr, inner, bp ? bp + boff : nullptr, bstep == 1, rp ? rp + roff : nullptr, act);
          } else {
            add_operand_row(yr, bp, boff, bstep, inner);
            add_operand_row(yr, rp, roff, rstep, inner);
            activate_row(yr, inner, act);
          }
        }
        continue;
      }
      for (int64_t j = 0; j < inner; ++j) {
        C v = yr[j];
        if (bp) v += bp[boff + j * bstep];
        if (rp) v += rp[roff + j * rstep];
        if (v != v) {
          // NaN stays NaN through every activation, as through the unfused ONNX ops and the
          // tile epilogue (ir/fused_ops.h).
        } else if constexpr (std::is_same_v<C, double>) {
          // Double tensors keep double precision where the activation allows it.
          switch (spec.act) {
            case fused::Activation::None: break;
            case fused::Activation::Relu: v = v > 0 ? v : 0; break;
            case fused::Activation::Clip: v = v < spec.alpha ? spec.alpha : (v > spec.beta ? spec.beta : v); break;
            case fused::Activation::LeakyRelu: v = v >= 0 ? v : spec.alpha * v; break;
            default: v = activation1(spec, static_cast<float>(v));
          }
        } else {
          v = activation1(spec, v);
        }
        yr[j] = v;
      }
    }
  });
}

class FusedConvEpilogue : public ConvEpilogue {
 public:
  FusedConvEpilogue(OpContext& ctx, const ActivationSpec& spec, DType dtype)
      : ctx_(ctx), spec_(spec), dtype_(dtype) {}
  Status apply(float* y, const std::vector<int64_t>& dims, const float* bias, bool channels_last) const override {
    return run(y, dims, bias, channels_last);
  }
  Status apply(double* y, const std::vector<int64_t>& dims, const double* bias, bool channels_last) const override {
    return run(y, dims, bias, channels_last);
  }
  bool register_form(const std::vector<int64_t>& dims, DwEpilogue* e) const override {
    const TensorView* r = ctx_.input(3);
    // Anything else (a float16 output, a broadcasting or mistyped residual) goes through
    // apply(), which checks the residual and names what is wrong.
    if (r && (dtype_ != DType::Float || r->dtype != DType::Float || r->dims != dims)) return false;
    DwEpilogue f;
    if (!register_activation(spec_, &f)) return false;
    f.residual = r ? r->as<float>() : nullptr;
    *e = f;
    return true;
  }

 private:
  template <typename C> Status run(C* y, const std::vector<int64_t>& dims, const C* b, bool channels_last) const {
    Operand residual, bias;
    CUVIL_RETURN_IF_ERROR(epilogue_operand(ctx_, 3, "residual", dtype_, dims, &residual));
    if (b) {  // B [M] over the output's channel axis
      bias.compute = b;
      bias.strides.assign(dims.size(), 0);
      bias.strides[channels_last ? dims.size() - 1 : 1] = 1;
    }
    apply_epilogue<C>(ctx_, y, dims, bias, residual, spec_);
    return Status::ok();
  }
  OpContext& ctx_;
  ActivationSpec spec_;
  DType dtype_;
};

}  // namespace

// ---- FusedMatMul ------------------------------------------------------------------------------

Status kernel_FusedMatMul(OpContext& ctx) {
  const TensorView* a = ctx.input(0);
  const TensorView* b = ctx.input(1);
  if (!a || !b) return ctx.error(StatusCode::kInvalidArgument, "expects inputs A and B");
  if (ctx.num_inputs() > 4)
    return ctx.error(StatusCode::kInvalidArgument, "has ", ctx.num_inputs(), " inputs, at most 4 (A, B, bias, residual)");
  if (!is_float_dtype(a->dtype) || b->dtype != a->dtype)
    return ctx.error(StatusCode::kInvalidArgument, "A and B must share a float dtype, got ", dtype_name(a->dtype),
                     " and ", dtype_name(b->dtype));
  bool trans[2];
  const char* const trans_names[2] = {"transA", "transB"};
  for (int i = 0; i < 2; ++i) {
    const int64_t t = ctx.attrs().get_int(trans_names[i], 0);
    if (t != 0 && t != 1)
      return ctx.error(StatusCode::kInvalidArgument, "attribute '", trans_names[i], "' is ", t, ", must be 0 or 1");
    trans[i] = t != 0;
  }
  ActivationSpec spec;
  CUVIL_RETURN_IF_ERROR(read_activation(ctx, &spec));
  const float alpha = ctx.attrs().get_float("alpha", 1.0f);

  // op(A) and op(B) as numpy matmul operands: rank-1 A is a row, rank-1 B a column.
  if (a->dims.empty() || b->dims.empty())
    return ctx.error(StatusCode::kInvalidArgument, "inputs must have rank >= 1, got A ", dims_string(a->dims),
                     " and B ", dims_string(b->dims));
  if ((trans[0] && a->dims.size() < 2) || (trans[1] && b->dims.size() < 2))
    return ctx.error(StatusCode::kInvalidArgument, "a transposed operand needs rank >= 2, got A ",
                     dims_string(a->dims), " and B ", dims_string(b->dims));
  std::vector<int64_t> ad = a->dims, bd = b->dims;  // stored dims, a vector made a matrix
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  const size_t ar = ad.size(), br = bd.size();
  const int64_t m = trans[0] ? ad[ar - 1] : ad[ar - 2], k = trans[0] ? ad[ar - 2] : ad[ar - 1];
  const int64_t kb = trans[1] ? bd[br - 1] : bd[br - 2], n = trans[1] ? bd[br - 2] : bd[br - 1];
  if (k != kb)
    return ctx.error(StatusCode::kInvalidArgument, "inner dimensions differ: op(A) is ", m, "x", k, ", op(B) is ", kb,
                     "x", n, " (A ", dims_string(a->dims), ", B ", dims_string(b->dims), ")");
  const std::vector<int64_t> ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2);
  std::vector<int64_t> batch;
  if (!broadcast_shape(ab, bb, &batch))
    return ctx.error(StatusCode::kInvalidArgument, "batch dimensions do not broadcast: A ", dims_string(a->dims),
                     " and B ", dims_string(b->dims));
  std::vector<int64_t> out_dims = batch;
  if (!a_vec) out_dims.push_back(m);
  if (!b_vec) out_dims.push_back(n);
  int64_t batches = 1, out_numel = 0;
  if (!dims_numel(batch, &batches) || !dims_numel(out_dims, &out_numel))
    return ctx.error(StatusCode::kInvalidArgument, "output shape overflows");
  Operand bias, residual;
  CUVIL_RETURN_IF_ERROR(epilogue_operand(ctx, 2, "bias", a->dtype, out_dims, &bias));
  CUVIL_RETURN_IF_ERROR(epilogue_operand(ctx, 3, "residual", a->dtype, out_dims, &residual));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, a->dtype, out_dims, &y));

  const std::vector<int64_t> sa = broadcast_strides(ab, batch), sb = broadcast_strides(bb, batch);
  const int64_t lda = ad[ar - 1], ldb = bd[br - 1];
  auto run = [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> abuf, bbuf;
    const C* ap = compute_data<C>(*a, &abuf);
    const C* bp = compute_data<C>(*b, &bbuf);
    ComputeOutput<C> out(y);
    C* yp = out.data();
    // Element offsets of each output batch's A and B matrices.
    std::vector<int64_t> offs_a(static_cast<size_t>(batches)), offs_b(static_cast<size_t>(batches));
    std::vector<int64_t> idx(batch.size(), 0);
    for (int64_t t = 0; t < batches; ++t) {
      int64_t oa = 0, ob = 0;
      for (size_t d = 0; d < batch.size(); ++d) {
        oa += idx[d] * sa[d];
        ob += idx[d] * sb[d];
      }
      offs_a[t] = oa * m * k;
      offs_b[t] = ob * k * n;
      for (size_t d = batch.size(); d-- > 0;) {
        if (++idx[d] < batch[d]) break;
        idx[d] = 0;
      }
    }
    int64_t b_batch = 1;
    for (int64_t d : bb) b_batch *= d;
    const C calpha = static_cast<C>(alpha);
    if (!trans[0] && b_batch == 1 && ab == batch) {
      // As kernel_MatMul: one B and untransposed A batches stacked: one GEMM of batches * m rows.
      gemm(&ctx, false, trans[1], batches * m, n, k, calpha, ap, lda, bp, ldb, C(0), yp, n);
    } else if (ctx.threads() > 1 && batches >= 2 * ctx.threads()) {
      parallel_range(ctx, batches, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t)
          gemm(nullptr, trans[0], trans[1], m, n, k, calpha, ap + offs_a[t], lda, bp + offs_b[t], ldb, C(0),
               yp + t * m * n, n);
      });
    } else {
      for (int64_t t = 0; t < batches; ++t)
        gemm(&ctx, trans[0], trans[1], m, n, k, calpha, ap + offs_a[t], lda, bp + offs_b[t], ldb, C(0), yp + t * m * n,
             n);
    }
    apply_epilogue<C>(ctx, yp, out_dims, bias, residual, spec);
    out.finish();
  };
  if (a->dtype == DType::Double) run(TypeTag<double>{});
  else run(TypeTag<float>{});
  return Status::ok();
}

// ---- FusedConv --------------------------------------------------------------------------------

Status kernel_FusedConv(OpContext& ctx) {
  if (ctx.num_inputs() > 4)
    return ctx.error(StatusCode::kInvalidArgument, "has ", ctx.num_inputs(), " inputs, at most 4 (X, W, B, residual)");
  ActivationSpec spec;
  CUVIL_RETURN_IF_ERROR(read_activation(ctx, &spec));
  const std::string layout = ctx.attrs().get_string("layout", "NCHW");
  if (layout != "NCHW" && layout != "NHWC")
    return ctx.error(StatusCode::kInvalidArgument, "attribute 'layout' is '", layout, "', not NCHW or NHWC");
  const TensorView* x = ctx.input(0);
  const FusedConvEpilogue epilogue(ctx, spec, x ? x->dtype : DType::Float);
  return conv_forward(ctx, &epilogue, layout == "NHWC");
}

}  // namespace cuvil::rt::ops
