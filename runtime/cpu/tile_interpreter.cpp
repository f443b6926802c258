#include "runtime/cpu/tile_interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "support/checked.h"

namespace cuvil::rt {
namespace {

struct BoundMap {
  float* base = nullptr;
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

struct Insn {
  TileOpcode op;
  uint32_t a[4];
};

// Row start offsets: the element offset of (row, col 0) for a map, from the row's
// multi-index over the domain's leading dims.
inline int64_t row_offset(const BoundMap& m, const std::vector<int64_t>& dims, int64_t row) {
  int64_t off = m.offset;
  for (int k = static_cast<int>(dims.size()) - 2; k >= 0; --k) {
    int64_t d = dims[static_cast<size_t>(k)];
    int64_t idx = row % d;
    row /= d;
    off += idx * m.strides[static_cast<size_t>(k)];
  }
  return off;
}

inline float apply_unary(UnaryFn f, float x) {
  switch (f) {
    case UnaryFn::Abs: return std::fabs(x);
    case UnaryFn::Neg: return -x;
    case UnaryFn::Relu: return x != x ? x : (x > 0.f ? x : 0.f);  // NaN propagates
    case UnaryFn::Sigmoid: return 1.f / (1.f + std::exp(-x));
    case UnaryFn::Tanh: return std::tanh(x);
    case UnaryFn::Exp: return std::exp(x);
    case UnaryFn::Log: return std::log(x);
    case UnaryFn::Sqrt: return std::sqrt(x);
    case UnaryFn::Reciprocal: return 1.f / x;
    case UnaryFn::Floor: return std::floor(x);
    case UnaryFn::Ceil: return std::ceil(x);
    case UnaryFn::Erf: return std::erf(x);
    case UnaryFn::Sin: return std::sin(x);
    case UnaryFn::Cos: return std::cos(x);
    case UnaryFn::Softplus: return x > 20.f ? x : std::log1p(std::exp(x));
    case UnaryFn::Softsign: return x / (1.f + std::fabs(x));
    case UnaryFn::Identity: return x;
    case UnaryFn::kCount: break;
  }
  return x;
}

// One loop per function so each body is a simple vectorisable loop.
void run_unary(UnaryFn f, float* d, const float* s, int64_t n) {
  switch (f) {
    case UnaryFn::Abs: for (int64_t i = 0; i < n; ++i) d[i] = std::fabs(s[i]); return;
    case UnaryFn::Neg: for (int64_t i = 0; i < n; ++i) d[i] = -s[i]; return;
    case UnaryFn::Relu:  // NaN propagates; -0 gives +0, as the whole-tensor kernel does
      for (int64_t i = 0; i < n; ++i) d[i] = s[i] != s[i] ? s[i] : (s[i] > 0.f ? s[i] : 0.f);
      return;
    case UnaryFn::Sqrt: for (int64_t i = 0; i < n; ++i) d[i] = std::sqrt(s[i]); return;
    case UnaryFn::Reciprocal: for (int64_t i = 0; i < n; ++i) d[i] = 1.f / s[i]; return;
    case UnaryFn::Identity: std::memmove(d, s, static_cast<size_t>(n) * sizeof(float)); return;
    default:
      for (int64_t i = 0; i < n; ++i) d[i] = apply_unary(f, s[i]);
  }
}

void run_binary(BinaryFn f, float* d, const float* a, const float* b, int64_t n) {
  switch (f) {
    case BinaryFn::Add: for (int64_t i = 0; i < n; ++i) d[i] = a[i] + b[i]; return;
    case BinaryFn::Sub: for (int64_t i = 0; i < n; ++i) d[i] = a[i] - b[i]; return;
    case BinaryFn::Mul: for (int64_t i = 0; i < n; ++i) d[i] = a[i] * b[i]; return;
    case BinaryFn::Div: for (int64_t i = 0; i < n; ++i) d[i] = a[i] / b[i]; return;
    // ONNX Max/Min propagate NaN.
    case BinaryFn::Max:
      for (int64_t i = 0; i < n; ++i) d[i] = (a[i] != a[i] || b[i] != b[i]) ? NAN : (a[i] > b[i] ? a[i] : b[i]);  // tie: second operand, as the kernels
      return;
    case BinaryFn::Min:
      for (int64_t i = 0; i < n; ++i) d[i] = (a[i] != a[i] || b[i] != b[i]) ? NAN : (a[i] < b[i] ? a[i] : b[i]);  // tie: second operand, as the kernels
      return;
    case BinaryFn::Pow: for (int64_t i = 0; i < n; ++i) d[i] = std::pow(a[i], b[i]); return;
    case BinaryFn::PRelu: for (int64_t i = 0; i < n; ++i) d[i] = a[i] < 0.f ? a[i] * b[i] : a[i]; return;
    case BinaryFn::kCount: return;
  }
}

}  // namespace

Status run_tile_kernel(const Program& program, uint32_t kernel_index, ExprEvaluator& eval,
                       std::vector<TensorView>& views, ThreadPool& pool) {
  const TileKernel& k = program.kernels[kernel_index];
  std::vector<int64_t> dims(k.domain.size());
  for (size_t i = 0; i < dims.size(); ++i) CUVIL_RETURN_IF_ERROR(eval.eval(k.domain[i], &dims[i]));
  int64_t total = 1;
  for (int64_t d : dims) {
    if (d < 0) return make_status(StatusCode::kShape, "kernel ", k.name, ": negative extent ", d);
    auto t = checked_mul(total, d);
    if (!t) return make_status(StatusCode::kShape, "kernel ", k.name, ": domain size overflows");
    total = *t;
  }
  if (total == 0) return Status::ok();
  const int64_t cols = dims.empty() ? 1 : dims.back();
  const int64_t rows = total / cols;

  // Bind maps and prove every access in bounds: the extreme offsets over the domain must lie
  // inside the tensor.
  std::vector<BoundMap> maps(k.maps.size());
  for (size_t m = 0; m < k.maps.size(); ++m) {
    const AccessMap& am = k.maps[m];
    TensorView& v = views[am.tensor];
    if (v.dtype != DType::Float)
      return make_status(StatusCode::kInvalidPackage, "kernel ", k.name, ": map ", m, " tensor is not f32");
    if (!v.data && v.numel() > 0)
      return make_status(StatusCode::kRuntime, "kernel ", k.name, ": tensor '",
                         program.tensors[am.tensor].name, "' has no storage");
    BoundMap& bm = maps[m];
    bm.base = static_cast<float*>(v.data);
    CUVIL_RETURN_IF_ERROR(eval.eval(am.offset, &bm.offset));
    bm.strides.resize(dims.size());
    int64_t lo = bm.offset, hi = bm.offset;
    for (size_t i = 0; i < dims.size(); ++i) {
      CUVIL_RETURN_IF_ERROR(eval.eval(am.strides[i], &bm.strides[i]));
      auto span = checked_mul(dims[i] - 1, bm.strides[i]);
      if (!span) return make_status(StatusCode::kShape, "kernel ", k.name, ": access span overflows");
      auto nl = checked_add(lo, std::min<int64_t>(0, *span));
      auto nh = checked_add(hi, std::max<int64_t>(0, *span));
      if (!nl || !nh) return make_status(StatusCode::kShape, "kernel ", k.name, ": access span overflows");
      lo = *nl;
      hi = *nh;
    }
    if (lo < 0 || hi >= v.numel())
      return make_status(StatusCode::kRuntime, "kernel ", k.name, ": map ", m, " reaches elements [",
                         lo, ", ", hi, "] of tensor '", program.tensors[am.tensor].name,
                         "' which has ", v.numel());
  }

  // Decode the body once per run (the verifier has checked every operand).
  std::vector<Insn> body;
  for (size_t pc = 0; pc < k.body.size();) {
    Insn in{};
    in.op = static_cast<TileOpcode>(k.body[pc++]);
    size_t n = std::strlen(tile_opcode_operands(in.op));
    for (size_t i = 0; i < n; ++i) in.a[i] = k.body[pc++];
    body.push_back(in);
  }

  const int64_t tile_cols = std::min(cols, kTileElements);
  const int64_t tile_rows = std::max<int64_t>(1, std::min(rows, kTileElements / tile_cols));
  const int64_t tiles_c = (cols + tile_cols - 1) / tile_cols;
  const int64_t tiles_r = (rows + tile_rows - 1) / tile_rows;
  const int64_t tiles = tiles_r * tiles_c;
  const size_t regs = k.registers;

  auto work = [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < regs * kTileElements) scratch.resize(regs * kTileElements);
    float* reg = scratch.data();
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r0 = (t / tiles_c) * tile_rows, c0 = (t % tiles_c) * tile_cols;
      const int64_t nr = std::min(tile_rows, rows - r0), nc = std::min(tile_cols, cols - c0);
      const int64_t n = nr * nc;
      for (const Insn& in : body) {
        switch (in.op) {
          case TileOpcode::Load: {
            float* d = reg + in.a[0] * kTileElements;
            const BoundMap& m = maps[in.a[1]];
            const int64_t cs = m.strides.empty() ? 0 : m.strides.back();
            for (int64_t r = 0; r < nr; ++r) {
              const float* src = m.base + row_offset(m, dims, r0 + r) + c0 * cs;
              float* dst = d + r * nc;
              if (cs == 1) std::memcpy(dst, src, static_cast<size_t>(nc) * sizeof(float));
              else if (cs == 0) std::fill(dst, dst + nc, *src);
              else for (int64_t c = 0; c < nc; ++c) dst[c] = src[c * cs];
            }
            break;
          }
          case TileOpcode::Store: {
            const BoundMap& m = maps[in.a[0]];
            const float* s = reg + in.a[1] * kTileElements;
            const int64_t cs = m.strides.empty() ? 0 : m.strides.back();
            for (int64_t r = 0; r < nr; ++r) {
              float* dst = m.base + row_offset(m, dims, r0 + r) + c0 * cs;
              const float* src = s + r * nc;
              if (cs == 1) std::memcpy(dst, src, static_cast<size_t>(nc) * sizeof(float));
              else for (int64_t c = 0; c < nc; ++c) dst[c * cs] = src[c];
            }
            break;
          }
          case TileOpcode::Const: {
            float v;
            std::memcpy(&v, &in.a[1], sizeof v);
            std::fill(reg + in.a[0] * kTileElements, reg + in.a[0] * kTileElements + n, v);
            break;
          }
          case TileOpcode::Unary:
            run_unary(static_cast<UnaryFn>(in.a[0]), reg + in.a[1] * kTileElements,
                      reg + in.a[2] * kTileElements, n);
            break;
          case TileOpcode::Binary:
            run_binary(static_cast<BinaryFn>(in.a[0]), reg + in.a[1] * kTileElements,
                       reg + in.a[2] * kTileElements, reg + in.a[3] * kTileElements, n);
            break;
          case TileOpcode::Select: {
            float* d = reg + in.a[0] * kTileElements;
            const float* c = reg + in.a[1] * kTileElements;
            const float* x = reg + in.a[2] * kTileElements;
            const float* y = reg + in.a[3] * kTileElements;
            for (int64_t i = 0; i < n; ++i) d[i] = c[i] != 0.f ? x[i] : y[i];
            break;
          }
          case TileOpcode::Clip: {
            float lo, hi;
            std::memcpy(&lo, &in.a[2], sizeof lo);
            std::memcpy(&hi, &in.a[3], sizeof hi);
            float* d = reg + in.a[0] * kTileElements;
            const float* s = reg + in.a[1] * kTileElements;
            for (int64_t i = 0; i < n; ++i) d[i] = s[i] < lo ? lo : (s[i] > hi ? hi : s[i]);
            break;
          }
          case TileOpcode::kCount: break;
        }
      }
    }
  };
  // A few tiles per chunk keeps scheduling overhead small and load balanced.
  pool.parallel_for(tiles, std::max<int64_t>(1, tiles / (pool.threads() * 8)), work);
  return Status::ok();
}

}  // namespace cuvil::rt
