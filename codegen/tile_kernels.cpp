#include "codegen/tile_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ir/fused_ops.h"
#include "support/error.h"

namespace cuvil::codegen::tile {
namespace {

using rt::kNone;
using rt::TileOpcode;

uint32_t word(TileOpcode op) { return static_cast<uint32_t>(op); }
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

bool is_f32(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).dtype == DType::Float;
}

// Row-major element strides of a shape.
std::vector<DimExpr> contiguous_strides(const Shape& s) {
  std::vector<DimExpr> st(s.size(), DimExpr(1));
  DimExpr stride(1);
  for (size_t d = s.size(); d-- > 0;) {
    st[d] = stride;
    stride = stride * *s[d];
  }
  return st;
}

DimExpr product(const Shape& s, size_t begin, size_t end) {
  DimExpr p(1);
  for (size_t d = begin; d < end; ++d) p = p * *s[d];
  return p;
}

// Builds a kernel: maps, registers and the three body sections.
class KernelBuilder {
 public:
  KernelBuilder(const KernelContext& ctx, const Node& n) : ctx_(ctx) {
    k_.name = n.name;
    for (const Dim& d : ctx.shape(n.outputs[0])) k_.domain.push_back(ctx.expr(*d));
  }
  uint32_t map(ValueId v, const std::vector<DimExpr>& strides, std::optional<DimExpr> loop_stride) {
    rt::AccessMap m;
    m.tensor = ctx_.tensor(v);
    m.offset = ctx_.expr(DimExpr(0));
    for (const DimExpr& s : strides) m.strides.push_back(ctx_.expr(s));
    if (loop_stride) m.loop_stride = ctx_.expr(*loop_stride);
    k_.maps.push_back(m);
    return static_cast<uint32_t>(k_.maps.size() - 1);
  }
  void loop(const DimExpr& extent, uint32_t chunk) {
    k_.loop_extent = ctx_.expr(extent);
    k_.loop_chunk = chunk;
  }
  void emit(std::initializer_list<uint32_t> words) { k_.body.insert(k_.body.end(), words); }
  void begin_loop() { k_.init_end = static_cast<uint32_t>(k_.body.size()); }
  void end_loop() { k_.loop_end = static_cast<uint32_t>(k_.body.size()); }
  LoopKernel finish(uint32_t registers, uint32_t result) {
    k_.registers = registers;
    return {std::move(k_), result};
  }

 private:
  const KernelContext& ctx_;
  rt::TileKernel k_;
};

// ---- reductions ----

struct ReducePlan {
  TileOpcode op = TileOpcode::ReduceSum;
  bool mean = false;
  size_t first = 0, last = 0;  // the reduced axes are [first, last]
  bool keepdims = true;
};

std::optional<ReducePlan> plan_reduce(const Node& n, const KernelContext& ctx) {
  ReducePlan p;
  if (n.op_type == "ReduceSum") p.op = TileOpcode::ReduceSum;
  else if (n.op_type == "ReduceMean") p.op = TileOpcode::ReduceSum, p.mean = true;
  else if (n.op_type == "ReduceMax") p.op = TileOpcode::ReduceMax;
  else if (n.op_type == "ReduceMin") p.op = TileOpcode::ReduceMin;
  else return std::nullopt;
  if (!n.domain.empty() || n.outputs.size() != 1 || n.inputs.empty()) return std::nullopt;
  if (!is_f32(ctx.graph, n.inputs[0]) || !is_f32(ctx.graph, n.outputs[0])) return std::nullopt;
  const Shape& in = ctx.shape(n.inputs[0]);
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes;
  bool noop_with_empty_axes = false;
  // Axes are an input from opset 18 (13 for ReduceSum), an attribute before: as the kernel.
  if (n.opset >= (n.op_type == "ReduceSum" ? 13 : 18)) {
    noop_with_empty_axes = n.attr_int("noop_with_empty_axes", 0) != 0;
    const ValueId a = n.input(1);
    if (a != kNoValue) {
      const Value& v = ctx.graph.value(a);
      if (!v.data || v.data->dtype != DType::Int64 || v.data->dims.size() > 1) return std::nullopt;
      for (int64_t i = 0; i < v.data->numel(); ++i) axes.push_back(v.data->int_at(i));
    }
  } else {
    if (n.inputs.size() != 1) return std::nullopt;
    if (auto a = n.attr_ints("axes")) axes = *a;
  }
  if (axes.empty()) {
    if (noop_with_empty_axes || rank == 0) return std::nullopt;  // identity: left to the kernel
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) return std::nullopt;  // the kernel reports it
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  for (size_t i = 1; i < axes.size(); ++i)
    if (axes[i] != axes[i - 1] + 1) return std::nullopt;  // duplicate or not one run
  p.first = static_cast<size_t>(axes.front());
  p.last = static_cast<size_t>(axes.back());
  // The run must end at the last axis (loop stride 1). Earlier runs work in the ISA, but their
  // chunk loads are strided gathers: 2-5x slower than the whole-tensor kernel when measured
  // (ReduceMax over axis 0 of [4096, 1024]), so they stay CallOps until chunks can be k-major.
  if (p.last + 1 != in.size()) return std::nullopt;
  p.keepdims = n.attr_int("keepdims", 1) != 0;
  const size_t out_rank = ctx.shape(n.outputs[0]).size();
  const size_t expect = p.keepdims ? in.size() : in.size() - (p.last - p.first + 1);
  if (out_rank != expect) return std::nullopt;
  return p;
}

// One output element per domain position; the loop walks the reduced run of the input
// (contiguous, so one stride: the product of the dims after the run).
LoopKernel emit_reduce(const Node& n, const KernelContext& ctx, const ReducePlan& p) {
  KernelBuilder b(ctx, n);
  const Shape& in = ctx.shape(n.inputs[0]);
  const size_t out_rank = ctx.shape(n.outputs[0]).size();
  const std::vector<DimExpr> in_strides = contiguous_strides(in);
  std::vector<DimExpr> strides(out_rank, DimExpr(0));
  for (size_t d = 0; d < in.size(); ++d) {
    if (d >= p.first && d <= p.last) continue;  // keepdims: extent 1 in the domain, stride 0
    const size_t od = p.keepdims || d < p.first ? d : d - (p.last - p.first + 1);
    strides[od] = in_strides[d];
  }
  b.loop(product(in, p.first, p.last + 1), kReduceChunk);
  const uint32_t m_in = b.map(n.inputs[0], strides, product(in, p.last + 1, in.size()));
  const float init = p.op == TileOpcode::ReduceMax   ? -INFINITY
                     : p.op == TileOpcode::ReduceMin ? INFINITY
                                                     : 0.f;
  enum : uint32_t { kAcc = 0, kChunk = 1 };
  b.emit({word(TileOpcode::Const), kAcc, float_bits(init)});
  b.begin_loop();
  b.emit({word(TileOpcode::Load), kChunk, m_in});
  b.emit({word(p.op), kAcc, kChunk});
  b.end_loop();
  if (p.mean) {
    b.emit({word(TileOpcode::LoopExtent), kChunk});
    b.emit({word(TileOpcode::Binary), static_cast<uint32_t>(rt::BinaryFn::Div), kAcc, kAcc, kChunk});
  }
  return b.finish(2, kAcc);
}

// ---- MatMul and Gemm ----

// Strides of operand dims `batch` (right-aligned against the domain's leading dims) over the
// domain: 0 where the operand broadcasts, its row-major stride where it matches; nullopt when
// neither can be proven.
std::optional<std::vector<DimExpr>> batch_strides(const Shape& s, size_t batch_rank,
                                                  const Shape& domain, const KernelContext& ctx) {
  const size_t lead = domain.size() - 2;
  std::vector<DimExpr> st(domain.size(), DimExpr(0));
  const std::vector<DimExpr> cs = contiguous_strides(s);
  for (size_t i = 0; i < batch_rank; ++i) {
    const size_t d = lead - batch_rank + i;
    if (s[i]->constant() == 1 && domain[d]->constant() != 1) continue;
    if (!sym::prove_equal(*s[i], *domain[d], ctx.ranges)) return std::nullopt;
    st[d] = cs[i];
  }
  return st;
}

bool matmul_ok(const Node& n, const KernelContext& ctx) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  for (ValueId v : {n.inputs[0], n.inputs[1], n.outputs[0]})
    if (!is_f32(ctx.graph, v)) return false;
  const Shape& a = ctx.shape(n.inputs[0]);
  const Shape& bs = ctx.shape(n.inputs[1]);
  const Shape& y = ctx.shape(n.outputs[0]);
  if (a.size() < 2 || bs.size() < 2 || y.size() != std::max(a.size(), bs.size())) return false;
  if (!sym::prove_equal(*a.back(), *bs[bs.size() - 2], ctx.ranges)) return false;
  return batch_strides(a, a.size() - 2, y, ctx) && batch_strides(bs, bs.size() - 2, y, ctx);
}

LoopKernel emit_matmul(const Node& n, const KernelContext& ctx) {
  KernelBuilder b(ctx, n);
  const Shape& a = ctx.shape(n.inputs[0]);
  const Shape& bs = ctx.shape(n.inputs[1]);
  const Shape& y = ctx.shape(n.outputs[0]);
  const size_t r = y.size();
  std::vector<DimExpr> sa = *batch_strides(a, a.size() - 2, y, ctx);
  std::vector<DimExpr> sb = *batch_strides(bs, bs.size() - 2, y, ctx);
  sa[r - 2] = *a.back();   // A(m, k) = m * K + k
  sb[r - 1] = DimExpr(1);  // B(k, n) = k * N + n
  b.loop(*a.back(), kMmaChunk);
  const uint32_t ma = b.map(n.inputs[0], sa, DimExpr(1));
  const uint32_t mb = b.map(n.inputs[1], sb, *bs.back());
  b.emit({word(TileOpcode::Const), 0, float_bits(0.f)});
  b.begin_loop();
  b.emit({word(TileOpcode::Mma), 0, ma, mb});
  b.end_loop();
  return b.finish(1, 0);
}

// C of Gemm read over the [M, N] domain (unidirectional broadcast), or nullopt.
std::optional<std::vector<DimExpr>> bias_strides(const Shape& c, const Shape& domain,
                                                 const KernelContext& ctx) {
  if (c.size() > 2) return std::nullopt;
  std::vector<DimExpr> st(2, DimExpr(0));
  const std::vector<DimExpr> cs = contiguous_strides(c);
  for (size_t i = 0; i < c.size(); ++i) {
    const size_t d = i + 2 - c.size();
    if (c[i]->constant() == 1 && domain[d]->constant() != 1) continue;
    if (!sym::prove_equal(*c[i], *domain[d], ctx.ranges)) return std::nullopt;
    st[d] = cs[i];
  }
  return st;
}

bool gemm_ok(const Node& n, const KernelContext& ctx) {
  if (n.inputs.size() < 2 || n.inputs.size() > 3 || n.outputs.size() != 1) return false;
  if (n.opset < 7) return false;  // the "broadcast" attribute form: left to the kernel
  for (ValueId v : n.inputs)
    if (v != kNoValue && !is_f32(ctx.graph, v)) return false;
  if (!is_f32(ctx.graph, n.outputs[0])) return false;
  const Shape& a = ctx.shape(n.inputs[0]);
  const Shape& bs = ctx.shape(n.inputs[1]);
  const Shape& y = ctx.shape(n.outputs[0]);
  if (a.size() != 2 || bs.size() != 2 || y.size() != 2) return false;
  const bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  if (!sym::prove_equal(*a[ta ? 0 : 1], *bs[tb ? 1 : 0], ctx.ranges)) return false;
  if (n.input(2) != kNoValue && !bias_strides(ctx.shape(n.inputs[2]), y, ctx)) return false;
  return true;
}

LoopKernel emit_gemm(const Node& n, const KernelContext& ctx) {
  KernelBuilder b(ctx, n);
  const Shape& a = ctx.shape(n.inputs[0]);
  const Shape& bs = ctx.shape(n.inputs[1]);
  const bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  const float alpha = n.attr_float("alpha", 1.f), beta = n.attr_float("beta", 1.f);
  // A(m, k): [M, K] row-major, or [K, M] when transposed; B(k, n) likewise.
  b.loop(*a[ta ? 0 : 1], kMmaChunk);
  const uint32_t ma = ta ? b.map(n.inputs[0], {DimExpr(1), DimExpr(0)}, *a[1])
                         : b.map(n.inputs[0], {*a[1], DimExpr(0)}, DimExpr(1));
  const uint32_t mb = tb ? b.map(n.inputs[1], {DimExpr(0), *bs[1]}, DimExpr(1))
                         : b.map(n.inputs[1], {DimExpr(0), DimExpr(1)}, *bs[1]);
  const ValueId c = n.input(2);
  const uint32_t mc =
      c != kNoValue ? b.map(c, *bias_strides(ctx.shape(c), ctx.shape(n.outputs[0]), ctx), std::nullopt)
                    : kNone;
  enum : uint32_t { kAcc = 0, kTmp = 1, kScale = 2 };
  const uint32_t mul = static_cast<uint32_t>(rt::BinaryFn::Mul);
  b.emit({word(TileOpcode::Const), kAcc, float_bits(0.f)});
  b.begin_loop();
  b.emit({word(TileOpcode::Mma), kAcc, ma, mb});
  b.end_loop();
  // Y = alpha * AB + beta * C; C takes part even when beta is 0 (NaN * 0), as in the kernel.
  if (alpha != 1.f) {
    b.emit({word(TileOpcode::Const), kScale, float_bits(alpha)});
    b.emit({word(TileOpcode::Binary), mul, kAcc, kAcc, kScale});
  }
  if (mc != kNone) {
    b.emit({word(TileOpcode::Load), kTmp, mc});
    if (beta != 1.f) {
      b.emit({word(TileOpcode::Const), kScale, float_bits(beta)});
      b.emit({word(TileOpcode::Binary), mul, kTmp, kTmp, kScale});
    }
    b.emit({word(TileOpcode::Binary), static_cast<uint32_t>(rt::BinaryFn::Add), kAcc, kAcc, kTmp});
  }
  return b.finish(3, kAcc);
}

// ---- cuvil::FusedMatMul (ir/fused_ops.h) ----

// An operand read over the domain with numpy broadcasting (right-aligned, unidirectional):
// stride 0 where it broadcasts, its row-major stride where its dim is provably the domain's.
std::optional<std::vector<DimExpr>> broadcast_strides(const Shape& s, const Shape& domain,
                                                      const KernelContext& ctx) {
  if (s.size() > domain.size()) return std::nullopt;
  std::vector<DimExpr> st(domain.size(), DimExpr(0));
  const std::vector<DimExpr> cs = contiguous_strides(s);
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t d = i + domain.size() - s.size();
    if (s[i]->constant() == 1 && domain[d]->constant() != 1) continue;
    if (!sym::prove_equal(*s[i], *domain[d], ctx.ranges)) return std::nullopt;
    st[d] = cs[i];
  }
  return st;
}

// Where the product's operands are read: strides over the domain and along the K loop.
struct FusedMatMulPlan {
  std::vector<DimExpr> sa, sb;
  DimExpr loop_a = DimExpr(1), loop_b = DimExpr(1), k = DimExpr(1);
  fused::Activation act = fused::Activation::None;
};

std::optional<FusedMatMulPlan> plan_fused_matmul(const Node& n, const KernelContext& ctx) {
  if (n.inputs.size() < 2 || n.inputs.size() > 4 || n.outputs.size() != 1) return std::nullopt;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if ((i < 2 || n.inputs[i] != kNoValue) && !is_f32(ctx.graph, n.inputs[i])) return std::nullopt;
  if (!is_f32(ctx.graph, n.outputs[0])) return std::nullopt;
  const int64_t ta = n.attr_int("transA", 0), tb = n.attr_int("transB", 0);
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1)) return std::nullopt;  // the kernel reports it
  FusedMatMulPlan p;
  auto act = fused::parse_activation(n.attr_string("activation", ""));
  if (!act) return std::nullopt;
  p.act = *act;
  const Shape& a = ctx.shape(n.inputs[0]);
  const Shape& bs = ctx.shape(n.inputs[1]);
  const Shape& y = ctx.shape(n.outputs[0]);
  const size_t ra = a.size(), rb = bs.size(), r = y.size();
  if (ra < 2 || rb < 2 || r != std::max(ra, rb)) return std::nullopt;
  // A(m, k) is a[.., m, k] (row stride K) or, transposed, a[.., k, m]; B(k, n) likewise.
  const Dim& k_a = ta ? a[ra - 2] : a[ra - 1];
  const Dim& k_b = tb ? bs[rb - 1] : bs[rb - 2];
  if (!sym::prove_equal(*k_a, *k_b, ctx.ranges)) return std::nullopt;
  auto sa = batch_strides(a, ra - 2, y, ctx), sb = batch_strides(bs, rb - 2, y, ctx);
  if (!sa || !sb) return std::nullopt;
  p.sa = *sa;
  p.sb = *sb;
  p.k = *k_a;
  if (ta) p.sa[r - 2] = DimExpr(1), p.loop_a = *a.back();
  else p.sa[r - 2] = *a.back(), p.loop_a = DimExpr(1);
  if (tb) p.sb[r - 1] = *bs.back(), p.loop_b = DimExpr(1);
  else p.sb[r - 1] = DimExpr(1), p.loop_b = *bs.back();
  for (size_t i = 2; i < n.inputs.size(); ++i)
    if (n.inputs[i] != kNoValue && !broadcast_strides(ctx.shape(n.inputs[i]), y, ctx)) return std::nullopt;
  return p;
}

// One Mma over K, then the epilogue in the finish section, in ir/fused_ops.h's order:
// act(alpha * acc + bias + residual).
LoopKernel emit_fused_matmul(const Node& n, const KernelContext& ctx, const FusedMatMulPlan& p) {
  KernelBuilder b(ctx, n);
  const Shape& y = ctx.shape(n.outputs[0]);
  b.loop(p.k, kMmaChunk);
  const uint32_t ma = b.map(n.inputs[0], p.sa, p.loop_a);
  const uint32_t mb = b.map(n.inputs[1], p.sb, p.loop_b);
  uint32_t operand_maps[2] = {kNone, kNone};
  for (size_t i = 2; i < n.inputs.size(); ++i)
    if (n.inputs[i] != kNoValue)
      operand_maps[i - 2] = b.map(n.inputs[i], *broadcast_strides(ctx.shape(n.inputs[i]), y, ctx), std::nullopt);
  enum : uint32_t { kAcc = 0, kTmp = 1, kScale = 2 };
  const auto bin = [&](rt::BinaryFn f, uint32_t d, uint32_t x, uint32_t z) {
    b.emit({word(TileOpcode::Binary), static_cast<uint32_t>(f), d, x, z});
  };
  const auto unary = [&](rt::UnaryFn f, uint32_t d, uint32_t x) {
    b.emit({word(TileOpcode::Unary), static_cast<uint32_t>(f), d, x});
  };
  const auto constant = [&](uint32_t d, float v) { b.emit({word(TileOpcode::Const), d, float_bits(v)}); };
  constant(kAcc, 0.f);
  b.begin_loop();
  b.emit({word(TileOpcode::Mma), kAcc, ma, mb});
  b.end_loop();
  const float alpha = n.attr_float("alpha", 1.f);
  if (alpha != 1.f) {
    constant(kScale, alpha);
    bin(rt::BinaryFn::Mul, kAcc, kAcc, kScale);
  }
  for (uint32_t m : operand_maps) {
    if (m == kNone) continue;
    b.emit({word(TileOpcode::Load), kTmp, m});
    bin(rt::BinaryFn::Add, kAcc, kAcc, kTmp);
  }
  const float act_alpha = n.attr_float("activation_alpha", p.act == fused::Activation::Clip
                                                               ? -std::numeric_limits<float>::infinity()
                                                               : 0.01f);
  const float act_beta = n.attr_float("activation_beta", std::numeric_limits<float>::infinity());
  switch (p.act) {
    case fused::Activation::None: break;
    case fused::Activation::Relu: unary(rt::UnaryFn::Relu, kAcc, kAcc); break;
    case fused::Activation::Clip:
      constant(kScale, act_alpha);
      bin(rt::BinaryFn::Max, kAcc, kAcc, kScale);
      constant(kScale, act_beta);
      bin(rt::BinaryFn::Min, kAcc, kAcc, kScale);
      break;
    case fused::Activation::Sigmoid: unary(rt::UnaryFn::Sigmoid, kAcc, kAcc); break;
    case fused::Activation::Tanh: unary(rt::UnaryFn::Tanh, kAcc, kAcc); break;
    case fused::Activation::Silu:
      unary(rt::UnaryFn::Sigmoid, kTmp, kAcc);
      bin(rt::BinaryFn::Mul, kAcc, kAcc, kTmp);
      break;
    case fused::Activation::Gelu: unary(rt::UnaryFn::Gelu, kAcc, kAcc); break;
    case fused::Activation::GeluTanh: unary(rt::UnaryFn::GeluTanh, kAcc, kAcc); break;
    case fused::Activation::LeakyRelu:
      constant(kScale, act_alpha);
      bin(rt::BinaryFn::PRelu, kAcc, kAcc, kScale);
      break;
  }
  return b.finish(3, kAcc);
}

bool is_fused_matmul(const Node& n) { return n.domain == "cuvil" && n.op == OpKind::FusedMatMul; }

}  // namespace

bool is_loop_kernel(const Node& n, const KernelContext& ctx) {
  if (is_fused_matmul(n)) return plan_fused_matmul(n, ctx).has_value();
  if (!n.domain.empty()) return false;
  if (n.op_type == "MatMul") return matmul_ok(n, ctx);
  if (n.op_type == "Gemm") return gemm_ok(n, ctx);
  return plan_reduce(n, ctx).has_value();
}

LoopKernel emit_loop_kernel(const Node& n, const KernelContext& ctx) {
  if (is_fused_matmul(n)) {
    auto p = plan_fused_matmul(n, ctx);
    CUVIL_ASSERT(p.has_value(), "emit_loop_kernel on FusedMatMul node '" << n.name << "'");
    return emit_fused_matmul(n, ctx, *p);
  }
  if (n.op_type == "MatMul") return emit_matmul(n, ctx);
  if (n.op_type == "Gemm") return emit_gemm(n, ctx);
  auto p = plan_reduce(n, ctx);
  CUVIL_ASSERT(p.has_value(), "emit_loop_kernel on node '" << n.name << "' (" << n.op_type << ")");
  return emit_reduce(n, ctx, *p);
}

bool fusible_cast(const Node& n, const Graph& g) {
  if (n.op_type != "Cast" || !n.domain.empty() || n.inputs.size() != 1 || n.outputs.size() != 1)
    return false;
  const DType from = g.value(n.inputs[0]).dtype, to = g.value(n.outputs[0]).dtype;
  if (!rt::tile_dtype_supported(to)) return false;
  // To float32 from any tile dtype: Load's conversion is the kernel's, rounded once, and the
  // register then holds exactly the float32 result (attention masks: Cast(int64 mask)).
  if (to == DType::Float && rt::tile_dtype_supported(from)) return true;
  switch (from) {
    case DType::Float: case DType::Float16: case DType::BFloat16: case DType::Bool: return true;
    case DType::Int8: return to != DType::UInt8;
    case DType::UInt8: return to != DType::Int8;
    default: return false;  // int32, int64 and double are not exact in float32
  }
}

}  // namespace cuvil::codegen::tile
