#include "runtime/cpu/tile_interpreter.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <new>

#include "runtime/cpu/ops/gemm_micro.h"
#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/vec_math.h"
#include "runtime/verifier.h"
#include "support/checked.h"

namespace cuvil::rt {
namespace {

using ops::convert;

struct BoundMap {
  char* base = nullptr;
  DType dtype = DType::Float;
  int64_t offset = 0;
  std::vector<int64_t> strides;
  int64_t loop_stride = 0;  // 0 when the map does not move with the loop
  int64_t col_stride() const { return strides.empty() ? 0 : strides.back(); }
};

struct Insn {
  TileOpcode op;
  uint32_t a[4];
};

// Calls fn(TypeTag<T>{}) with the storage type of a tile dtype (tile_dtype_supported).
template <typename Fn> void visit_tile_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float: fn(ops::TypeTag<float>{}); return;
    case DType::Float16: fn(ops::TypeTag<ops::half_t>{}); return;
    case DType::BFloat16: fn(ops::TypeTag<ops::bfloat16_t>{}); return;
    case DType::Double: fn(ops::TypeTag<double>{}); return;
    case DType::Int8: fn(ops::TypeTag<int8_t>{}); return;
    case DType::UInt8: fn(ops::TypeTag<uint8_t>{}); return;
    case DType::Int32: fn(ops::TypeTag<int32_t>{}); return;
    case DType::Int64: fn(ops::TypeTag<int64_t>{}); return;
    case DType::Bool: fn(ops::TypeTag<bool>{}); return;
    default: return;  // the verifier refuses other dtypes
  }
}

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

// The cached panels of an Mma's b operand (map b over domain `dims`, depth loop_extent) for
// the tiles of row r0, when b is read as a plain or transposed matrix and lies in a package's
// weights (packed_weights.h); nullptr otherwise. The one place that computes the panels' key:
// the interpreter (mma) and the session's prepacking (prepack_tile_kernel_weights) call it.
ops::PackedWeights mma_weight_panels(const ops::GemmMicroKernel& uk, const BoundMap& b,
                                     const std::vector<int64_t>& dims, int64_t loop_extent,
                                     int64_t r0) {
  if (dims.empty()) return nullptr;
  const int64_t bcs = b.col_stride();
  const bool b_trans = bcs != 1 && b.loop_stride == 1;
  const int64_t ldb = b_trans ? bcs : b.loop_stride;
  if (!(bcs == 1 || b_trans) || ldb <= 0) return nullptr;
  return ops::gemm_weight_panels(uk, reinterpret_cast<const float*>(b.base) + row_offset(b, dims, r0),
                                 b_trans, loop_extent, dims.back(), ldb);
}

// n elements, `stride` apart in the tensor, converted into float registers and back with the
// whole-tensor Cast kernel's rules (kernel_util.h convert).
template <typename T> void load_elems(float* d, const T* s, int64_t n, int64_t stride) {
  if constexpr (std::is_same_v<T, float>) {
    if (stride == 1) {
      std::memcpy(d, s, static_cast<size_t>(n) * sizeof(float));
      return;
    }
  }
  if (stride == 0) {
    std::fill(d, d + n, convert<float>(*s));
    return;
  }
  for (int64_t i = 0; i < n; ++i) d[i] = convert<float>(s[i * stride]);
}
template <typename T> void store_elems(T* d, const float* s, int64_t n, int64_t stride) {
  if constexpr (std::is_same_v<T, float>) {
    if (stride == 1) {
      std::memcpy(d, s, static_cast<size_t>(n) * sizeof(float));
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) d[i * stride] = convert<T>(s[i]);
}

inline float apply_unary(UnaryFn f, float x) {
  switch (f) {
    case UnaryFn::Abs: return std::fabs(x);
    case UnaryFn::Neg: return -x;
    case UnaryFn::Relu: return x != x ? x : (x > 0.f ? x : 0.f);  // NaN propagates
    // runtime/cpu/vec_math.h: the whole-tensor kernels call the same functions, bit for bit.
    case UnaryFn::Sigmoid: return vm::sigmoid1(x);
    case UnaryFn::Tanh: return vm::tanh1(x);
    case UnaryFn::Exp: return vm::exp1(x);
    case UnaryFn::Log: return std::log(x);
    case UnaryFn::Sqrt: return std::sqrt(x);
    case UnaryFn::Reciprocal: return 1.f / x;
    case UnaryFn::Floor: return std::floor(x);
    case UnaryFn::Ceil: return std::ceil(x);
    case UnaryFn::Erf: return vm::erf1(x);
    case UnaryFn::Sin: return std::sin(x);
    case UnaryFn::Cos: return std::cos(x);
    case UnaryFn::Softplus: return x > 20.f ? x : std::log1p(std::exp(x));
    case UnaryFn::Softsign: return x / (1.f + std::fabs(x));
    case UnaryFn::Identity: return x;
    // The same functions as kernel_Gelu (runtime/cpu/ops/elementwise.cpp), so fused and
    // unfused results agree bit for bit.
    case UnaryFn::Gelu: return vm::gelu1(x);
    case UnaryFn::GeluTanh: return vm::gelu_tanh1(x);
    case UnaryFn::kCount: break;
  }
  return x;
}

// One loop per function so each body is a simple vectorisable loop; AVX2 clones are picked at
// load time where the CPU has it (the file is built with -O3 -fno-math-errno, CMakeLists.txt).
// Not under ThreadSanitizer: the clones' ifunc resolvers run while the library is relocated,
// before the TSan runtime is up, and crash the load (as in runtime/cpu/ops/linalg.cpp).
#if !defined(__SANITIZE_THREAD__)
#define CUVIL_TILE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CUVIL_TILE_CLONES
#endif
CUVIL_TILE_CLONES void run_unary(UnaryFn f, float* d, const float* s, int64_t n) {
  switch (f) {
    case UnaryFn::Abs: for (int64_t i = 0; i < n; ++i) d[i] = std::fabs(s[i]); return;
    case UnaryFn::Neg: for (int64_t i = 0; i < n; ++i) d[i] = -s[i]; return;
    case UnaryFn::Relu:  // NaN propagates; -0 gives +0, as the whole-tensor kernel does
      for (int64_t i = 0; i < n; ++i) d[i] = s[i] != s[i] ? s[i] : (s[i] > 0.f ? s[i] : 0.f);
      return;
    case UnaryFn::Sqrt: for (int64_t i = 0; i < n; ++i) d[i] = std::sqrt(s[i]); return;
    case UnaryFn::Reciprocal: for (int64_t i = 0; i < n; ++i) d[i] = 1.f / s[i]; return;
    case UnaryFn::Identity: std::memmove(d, s, static_cast<size_t>(n) * sizeof(float)); return;
    // Vectorised maths (runtime/cpu/vec_math.h), the functions the whole-tensor kernels call.
    case UnaryFn::Sigmoid: vm::sigmoid(s, d, n); return;
    case UnaryFn::Tanh: vm::tanh(s, d, n); return;
    case UnaryFn::Exp: vm::exp(s, d, n); return;
    case UnaryFn::Erf: vm::erf(s, d, n); return;
    case UnaryFn::Gelu: vm::gelu(s, d, n); return;
    case UnaryFn::GeluTanh: vm::gelu_tanh(s, d, n); return;
    default:
      for (int64_t i = 0; i < n; ++i) d[i] = apply_unary(f, s[i]);
  }
}

CUVIL_TILE_CLONES void run_binary(BinaryFn f, float* d, const float* a, const float* b, int64_t n) {
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
    // The function of kernel_SwiGLU (runtime/cpu/ops/fused_pointwise.cpp), bit for bit.
    case BinaryFn::SwiGLU: vm::swiglu(a, b, d, n); return;
    case BinaryFn::kCount: return;
  }
}

// acc folded with v[0, kc) by `a = (v > a || v is NaN) ? v : a` in order (kMax; `<` for
// min), bit for bit, without the serial dependency: the fold's result is the last NaN when
// there is one, else the first element that equals the chunk's extreme when that beats acc
// (ties, like 0 and -0, keep the earlier value), else acc. Eight independent lanes find the
// extreme; a second pass finds its first occurrence.
template <bool kMax> float fold_extreme(float acc, const float* v, int64_t kc) {
  auto better = [](float x, float y) { return kMax ? x > y : x < y; };
  float lane[8];
  std::fill(lane, lane + 8, kMax ? -INFINITY : INFINITY);
  bool nan = false;
  int64_t j = 0;
  for (; j + 8 <= kc; j += 8)
    for (int l = 0; l < 8; ++l) {
      const float x = v[j + l];
      nan |= x != x;
      lane[l] = better(x, lane[l]) ? x : lane[l];
    }
  for (; j < kc; ++j) {
    nan |= v[j] != v[j];
    lane[0] = better(v[j], lane[0]) ? v[j] : lane[0];
  }
  if (nan) {
    for (j = kc - 1; v[j] == v[j]; --j) {
    }
    return v[j];
  }
  float m = lane[0];
  for (int l = 1; l < 8; ++l) m = better(lane[l], m) ? lane[l] : m;
  if (!better(m, acc)) return acc;  // also when acc is NaN
  for (j = 0; v[j] != m; ++j) {
  }
  return v[j];
}

// Combines each tile element's chunk of kc values into its accumulator. Sum adds the chunk
// in double (as the whole-tensor kernel accumulates) with four partial sums, so the adds are
// not one latency-bound chain, in a fixed order (results do not depend on threads or tiles);
// Max/Min combine exactly as runtime/cpu/ops/reduce.cpp does (a NaN wins and stays; ties keep
// the accumulator; fold_extreme), so they are bitwise equal to it.
void run_reduce(TileOpcode op, float* acc, const float* chunk, int64_t n, int64_t kc) {
  for (int64_t e = 0; e < n; ++e) {
    const float* v = chunk + e * kc;
    if (op == TileOpcode::ReduceSum) {
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t j = 0;
      for (; j + 4 <= kc; j += 4) {
        s0 += v[j];
        s1 += v[j + 1];
        s2 += v[j + 2];
        s3 += v[j + 3];
      }
      for (; j < kc; ++j) s0 += v[j];
      acc[e] = static_cast<float>(static_cast<double>(acc[e]) + ((s0 + s1) + (s2 + s3)));
    } else if (op == TileOpcode::ReduceMax) {
      acc[e] = fold_extreme<true>(acc[e], v, kc);
    } else {
      acc[e] = fold_extreme<false>(acc[e], v, kc);
    }
  }
}

// Mma tiles: at most this many rows and columns. Large tiles amortise packing a and b (each
// tile packs its [rows x K] and [K x cols] panels), so kernels with Mma get registers of
// kMmaTileRows x kMmaTileCols floats (128 KiB) instead of kTileRegisterElements.
constexpr int64_t kMmaTileCols = 128;
constexpr int64_t kMmaTileRows = 256;
constexpr int64_t kMmaRegisterElements = kMmaTileRows * kMmaTileCols;
// Stop-check granularity inside a kernel (docs/security.md, "Runtime: threads, deadlines,
// cancellation"): a worker asks before every chunk of at most this many tiles, and inside a
// tile before every chunk of its reduction loop but the first (loop_chunk k steps: 256 for
// a MatMul tile, 8M multiply-adds; the check costs a clock read, well under 1% of that).
constexpr int64_t kMaxTilesPerChunk = 16;

// Per-thread scratch: registers and the Mma packing buffers. The packed a operand of the
// last Mma is kept for the whole loop depth: the next tiles of the same rows (the other
// column tiles of a product, which one worker mostly takes in a row) reuse it instead of
// packing the same [rows x K] again. It is valid for one run of one kernel (`run_id`) and map.
struct Scratch {
  std::vector<float> regs, bpack;
  std::vector<float> apack;  // [k][groups][mr]: depth block at k starts at k * groups * mr
  uint64_t a_run = 0;        // KernelRun id the packed a belongs to (0: none)
  uint32_t a_map = 0;
  int64_t a_r0 = -1, a_nr = 0, a_packed_to = 0;  // rows, and depth [0, a_packed_to) packed
};

// Distinguishes kernel runs for Scratch's packed-a cache (a thread's scratch outlives a run,
// and the next run may put other data at the same addresses).
std::atomic<uint64_t> g_kernel_runs{0};

// The tallest register tile of any GEMM path (AVX-512: 14 rows).
constexpr int64_t kGemmMaxMr = 16;

// Where a tile is and how big: rows [r0, r0 + nr) of the flattened leading dims, cols
// [c0, c0 + nc); the current chunk of the loop is [k0, k0 + kc).
struct TilePos {
  int64_t r0 = 0, c0 = 0, nr = 0, nc = 0, k0 = 0, kc = 0;
};

class KernelRun {
 public:
  KernelRun(const std::vector<int64_t>& dims, const std::vector<BoundMap>& maps,
            int64_t loop_extent, int64_t register_elements)
      : dims_(dims), maps_(maps), loop_extent_(loop_extent), reg_elems_(register_elements),
        id_(g_kernel_runs.fetch_add(1, std::memory_order_relaxed) + 1) {}

  // Runs body[begin, end). in_loop: registers written are chunks ([n x kc]).
  void run(const std::vector<Insn>& body, size_t begin, size_t end, bool in_loop,
           const TilePos& t, Scratch& s) const {
    float* reg = s.regs.data();
    const int64_t n = t.nr * t.nc;
    const int64_t kc = in_loop ? t.kc : 1;
    const int64_t count = n * kc;  // elements an elementwise instruction processes
    auto R = [&](uint32_t r) { return reg + r * reg_elems_; };
    for (size_t i = begin; i < end; ++i) {
      const Insn& in = body[i];
      switch (in.op) {
        case TileOpcode::Load: load(maps_[in.a[1]], R(in.a[0]), in_loop, t); break;
        case TileOpcode::Store: store(maps_[in.a[0]], R(in.a[1]), t); break;
        case TileOpcode::Const: {
          float v;
          std::memcpy(&v, &in.a[1], sizeof v);
          std::fill(R(in.a[0]), R(in.a[0]) + count, v);
          break;
        }
        case TileOpcode::Unary: run_unary(static_cast<UnaryFn>(in.a[0]), R(in.a[1]), R(in.a[2]), count); break;
        case TileOpcode::Binary:
          run_binary(static_cast<BinaryFn>(in.a[0]), R(in.a[1]), R(in.a[2]), R(in.a[3]), count);
          break;
        case TileOpcode::Select: {
          float* d = R(in.a[0]);
          const float *c = R(in.a[1]), *x = R(in.a[2]), *y = R(in.a[3]);
          for (int64_t e = 0; e < count; ++e) d[e] = c[e] != 0.f ? x[e] : y[e];
          break;
        }
        case TileOpcode::Clip: {
          float lo, hi;
          std::memcpy(&lo, &in.a[2], sizeof lo);
          std::memcpy(&hi, &in.a[3], sizeof hi);
          float* d = R(in.a[0]);
          const float* x = R(in.a[1]);
          for (int64_t e = 0; e < count; ++e) d[e] = x[e] < lo ? lo : (x[e] > hi ? hi : x[e]);
          break;
        }
        case TileOpcode::ReduceSum:
        case TileOpcode::ReduceMax:
        case TileOpcode::ReduceMin: run_reduce(in.op, R(in.a[0]), R(in.a[1]), n, t.kc); break;
        case TileOpcode::LoopExtent:
          std::fill(R(in.a[0]), R(in.a[0]) + count, static_cast<float>(loop_extent_));
          break;
        case TileOpcode::Mma: mma(R(in.a[0]), in.a[1], maps_[in.a[2]], t, s); break;
        case TileOpcode::Cast: {
          float* d = R(in.a[0]);
          const float* x = R(in.a[1]);
          visit_tile_dtype(static_cast<DType>(in.a[2]), [&](auto tag) {
            using T = typename decltype(tag)::type;
            for (int64_t e = 0; e < count; ++e) d[e] = convert<float>(convert<T>(x[e]));
          });
          break;
        }
        case TileOpcode::Silu: {  // as kernel_SiLU (runtime/cpu/ops/fused_pointwise.cpp)
          float alpha;
          std::memcpy(&alpha, &in.a[2], sizeof alpha);
          float* d = R(in.a[0]);
          const float* x = R(in.a[1]);
          vm::silu(x, d, count, alpha);
          break;
        }
        case TileOpcode::Iota: {  // as kernel_Range: start + i * delta in double, rounded once
          float start, delta;
          std::memcpy(&start, &in.a[1], sizeof start);
          std::memcpy(&delta, &in.a[2], sizeof delta);
          float* d = R(in.a[0]);
          const int64_t cols = dims_.empty() ? 1 : dims_.back();
          for (int64_t r = 0; r < t.nr; ++r)
            for (int64_t c = 0; c < t.nc; ++c) {
              const int64_t i = (t.r0 + r) * cols + t.c0 + c;
              d[r * t.nc + c] =
                  static_cast<float>(static_cast<double>(start) + static_cast<double>(i) * static_cast<double>(delta));
            }
          break;
        }
        case TileOpcode::kCount: break;
      }
    }
  }

  // A unary-chain kernel (direct_unary_chain) on one tile: each row goes from the loaded
  // tensor to the stored one through the chain's functions, the first from source to
  // destination, the rest in place there.
  void run_unary_chain(const std::vector<Insn>& body, const TilePos& t) const {
    const BoundMap &src = maps_[body.front().a[1]], &dst = maps_[body.back().a[0]];
    for (int64_t r = 0; r < t.nr; ++r) {
      const float* x = reinterpret_cast<const float*>(src.base) + row_offset(src, dims_, t.r0 + r) + t.c0;
      float* y = reinterpret_cast<float*>(dst.base) + row_offset(dst, dims_, t.r0 + r) + t.c0;
      for (size_t i = 1; i + 1 < body.size(); ++i) {
        run_unary(static_cast<UnaryFn>(body[i].a[0]), y, x, t.nc);
        x = y;
      }
    }
  }

 private:
  // Outside the loop a tile is [nr x nc] (such maps have no loop stride); inside, each
  // element gets the chunk's kc loop steps ([nr x nc x kc]).
  void load(const BoundMap& m, float* d, bool in_loop, const TilePos& t) const {
    const int64_t cs = m.col_stride();
    visit_tile_dtype(m.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* base = reinterpret_cast<const T*>(m.base);
      for (int64_t r = 0; r < t.nr; ++r) {
        const int64_t row = row_offset(m, dims_, t.r0 + r) + t.c0 * cs;
        if (!in_loop) {
          load_elems(d + r * t.nc, base + row, t.nc, cs);
          continue;
        }
        for (int64_t c = 0; c < t.nc; ++c)
          load_elems(d + (r * t.nc + c) * t.kc, base + row + c * cs + t.k0 * m.loop_stride, t.kc,
                     m.loop_stride);
      }
    });
  }

  void store(const BoundMap& m, const float* s, const TilePos& t) const {
    const int64_t cs = m.col_stride();
    visit_tile_dtype(m.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* base = reinterpret_cast<T*>(m.base);
      for (int64_t r = 0; r < t.nr; ++r)
        store_elems(base + row_offset(m, dims_, t.r0 + r) + t.c0 * cs, s + r * t.nc, t.nc, cs);
    });
  }

  // acc[nr x nc] += A[nr x kc] * B[kc x nc] for the current chunk. A(r, j) is map a at
  // domain position (r0 + r, c0) and loop index k0 + j; B(j, c) is map b at (r0, c0 + c) and
  // k0 + j (a tile never spans two matrices: see the Mma tiling in run_tile_kernel). Both are
  // packed for the GEMM micro kernel in depth blocks of gemm_blocking's kc.
  void mma(float* acc, uint32_t a_map, const BoundMap& b, const TilePos& t, Scratch& s) const {
    const BoundMap& a = maps_[a_map];
    // The active path's register tile decides the packing (runtime/cpu/ops/gemm_micro.h).
    const ops::GemmMicroKernel& uk = ops::gemm_micro_kernel();
    const int64_t MR = uk.mr, NR = uk.nr;
    const int64_t kdepth = ops::gemm_blocking(uk).kc;  // the whole-tensor GEMM's depth block
    const float* abase = reinterpret_cast<const float*>(a.base);
    const float* bbase = reinterpret_cast<const float*>(b.base);
    const int64_t groups = (t.nr + MR - 1) / MR, panels = (t.nc + NR - 1) / NR;
    s.bpack.resize(static_cast<size_t>(panels * NR * kdepth));
    // a does not depend on the output column when its column stride is 0 (a product's left
    // operand): then its packed form is shared by the row's column tiles.
    const bool a_shared = a.col_stride() == 0;
    if (!a_shared || s.a_run != id_ || s.a_map != a_map || s.a_r0 != t.r0 || s.a_nr != t.nr) {
      s.a_run = a_shared ? id_ : 0;
      s.a_map = a_map;
      s.a_r0 = t.r0;
      s.a_nr = t.nr;
      s.a_packed_to = 0;
      const size_t need = static_cast<size_t>(groups * MR * (a_shared ? loop_extent_ : kdepth));
      if (s.apack.size() < need) s.apack.resize(need);
    }
    const int64_t bcs = b.col_stride();
    const int64_t brow = row_offset(b, dims_, t.r0) + t.c0 * bcs;
    // b a weight of the package, read as a plain (or transposed) matrix: its panels are packed
    // once per package and path, and every tile only packs a (runtime/cpu/ops/packed_weights.h).
    ops::PackedWeights wpanels;
    if (t.c0 % NR == 0) wpanels = mma_weight_panels(uk, b, dims_, loop_extent_, t.r0);
    for (int64_t p0 = 0; p0 < t.kc; p0 += kdepth) {
      const int64_t depth = std::min(kdepth, t.kc - p0);
      const int64_t k = t.k0 + p0;
      float* apack = s.apack.data() + (a_shared ? k * groups * MR : 0);
      if (!a_shared || k + depth > s.a_packed_to) {
        pack_a(a, t, k, depth, MR, groups, abase, apack);
        if (a_shared && k == s.a_packed_to) s.a_packed_to = k + depth;
      }
      if (wpanels) {
        ops::gemm_block_f32(uk, t.nr, depth, t.nc, 0, panels, apack,
                            wpanels->data() + (t.c0 / NR) * loop_extent_ * NR + k * NR,
                            loop_extent_ * NR, acc, t.nc, /*first=*/false, 0.f);
        continue;
      }
      for (int64_t pj = 0; pj < panels; ++pj) {
        float* dst = s.bpack.data() + pj * depth * NR;
        const int64_t cols = std::min(NR, t.nc - pj * NR);
        if (bcs != 1 && b.loop_stride == 1) {  // b transposed (k contiguous): read columns
          for (int64_t j = 0; j < NR; ++j) {
            if (j >= cols) {
              for (int64_t p = 0; p < depth; ++p) dst[p * NR + j] = 0.f;
              continue;
            }
            const float* src = bbase + brow + k + (pj * NR + j) * bcs;
            for (int64_t p = 0; p < depth; ++p) dst[p * NR + j] = src[p];
          }
          continue;
        }
        for (int64_t p = 0; p < depth; ++p) {
          const float* src = bbase + brow + (k + p) * b.loop_stride + pj * NR * bcs;
          float* d = dst + p * NR;
          if (bcs == 1) std::memcpy(d, src, static_cast<size_t>(cols) * sizeof(float));
          else for (int64_t j = 0; j < cols; ++j) d[j] = src[j * bcs];
          for (int64_t j = cols; j < NR; ++j) d[j] = 0.f;
        }
      }
      ops::gemm_block_f32(uk, t.nr, depth, t.nc, 0, panels, apack, s.bpack.data(),
                          depth * NR, acc, t.nc, /*first=*/false, 0.f);
    }
  }

  // Packs a's rows [r0, r0 + nr) over depth [k, k + depth) as groups of MR rows interleaved
  // per depth step (gemm_micro.h), zero past the last row. Depth outer and rows inner: the
  // stores are contiguous and each row is read in order.
  void pack_a(const BoundMap& a, const TilePos& t, int64_t k, int64_t depth, int64_t MR, int64_t groups,
              const float* abase, float* out) const {
    const float* src[kGemmMaxMr];
    const int64_t ls = a.loop_stride;
    for (int64_t g = 0; g < groups; ++g) {
      float* dst = out + g * depth * MR;
      const int64_t live = std::min(MR, t.nr - g * MR);
      for (int64_t rr = 0; rr < live; ++rr)
        src[rr] = abase + row_offset(a, dims_, t.r0 + g * MR + rr) + t.c0 * a.col_stride() + k * ls;
      for (int64_t p = 0; p < depth; ++p) {
        float* d = dst + p * MR;
        for (int64_t rr = 0; rr < live; ++rr) d[rr] = src[rr][p * ls];
        for (int64_t rr = live; rr < MR; ++rr) d[rr] = 0.f;
      }
    }
  }

  const std::vector<int64_t>& dims_;
  const std::vector<BoundMap>& maps_;
  const int64_t loop_extent_;
  const int64_t reg_elems_;  // floats per register
  const uint64_t id_;        // this run, for Scratch's packed-a cache
};

}  // namespace

Status check_map_tensor(const Program& program, const TileKernel& k, size_t m, const TensorView& v) {
  const uint32_t t = k.maps[m].tensor;
  if (v.dtype != program.tensors[t].dtype || !tile_dtype_supported(v.dtype))
    return make_status(StatusCode::kInvalidPackage, "kernel ", k.name, ": map ", m, " tensor has dtype ",
                       dtype_name(v.dtype));
  if (!v.data && v.numel() > 0)
    return make_status(StatusCode::kRuntime, "kernel ", k.name, ": tensor '", program.tensors[t].name,
                       "' has no storage");
  return Status::ok();
}

Status check_map_span(const Program& program, const TileKernel& k, size_t m, const TensorView& v, int64_t offset,
                      const std::vector<std::pair<int64_t, int64_t>>& extents) {
  int64_t lo = offset, hi = offset;
  for (const auto& [extent, stride] : extents) {
    auto span = checked_mul(extent - 1, stride);
    if (!span) return make_status(StatusCode::kShape, "kernel ", k.name, ": access span overflows");
    auto nl = checked_add(lo, std::min<int64_t>(0, *span));
    auto nh = checked_add(hi, std::max<int64_t>(0, *span));
    if (!nl || !nh) return make_status(StatusCode::kShape, "kernel ", k.name, ": access span overflows");
    lo = *nl;
    hi = *nh;
  }
  if (lo < 0 || hi >= v.numel())
    return make_status(StatusCode::kRuntime, "kernel ", k.name, ": map ", m, " reaches elements [", lo, ", ", hi,
                       "] of tensor '", program.tensors[k.maps[m].tensor].name, "' which has ", v.numel());
  return Status::ok();
}

// Whether a kernel only maps one float tensor into another through unary functions (Load r;
// Unary f r...; Store r, no loop) with unit column strides on both sides, so that its tiles can
// run row by row straight from source to destination (KernelRun::run_unary_chain), as the
// whole-tensor kernels do: no round trip through a register tile, and the memory stream
// overlaps the maths (a one-op Gelu or Erf kernel is then as fast as its CallOp). The same
// functions in the same order on the same floats: the same bits. The two maps must be the same
// elements (in place) or touch disjoint bytes, since rows are stored before later rows load.
bool direct_unary_chain(const std::vector<Insn>& body, const std::vector<BoundMap>& maps,
                        const std::vector<int64_t>& dims) {
  if (body.size() < 3 || body.front().op != TileOpcode::Load || body.back().op != TileOpcode::Store) return false;
  uint32_t reg = body.front().a[0];
  for (size_t i = 1; i + 1 < body.size(); ++i) {
    if (body[i].op != TileOpcode::Unary || body[i].a[2] != reg) return false;
    reg = body[i].a[1];
  }
  if (body.back().a[1] != reg) return false;
  const BoundMap &src = maps[body.front().a[1]], &dst = maps[body.back().a[0]];
  if (src.dtype != DType::Float || dst.dtype != DType::Float || src.col_stride() != 1 || dst.col_stride() != 1 ||
      src.loop_stride != 0 || dst.loop_stride != 0)
    return false;
  if (src.base + src.offset * 4 == dst.base + dst.offset * 4 && src.strides == dst.strides) return true;
  // Byte ranges [lo, hi] each map touches over the domain (bounds already proven).
  auto range = [&](const BoundMap& m) {
    int64_t lo = m.offset, hi = m.offset;
    for (size_t i = 0; i < dims.size(); ++i) (m.strides[i] < 0 ? lo : hi) += (dims[i] - 1) * m.strides[i];
    return std::make_pair(m.base + lo * 4, m.base + hi * 4 + 4);
  };
  const auto a = range(src), b = range(dst);
  return a.second <= b.first || b.second <= a.first;
}

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
  const bool has_loop = k.loop_extent != kNone;
  int64_t loop_extent = 0;
  if (has_loop) {
    CUVIL_RETURN_IF_ERROR(eval.eval(k.loop_extent, &loop_extent));
    if (loop_extent < 0)
      return make_status(StatusCode::kShape, "kernel ", k.name, ": negative loop extent ", loop_extent);
  }

  // Bind maps and prove every access in bounds: the extreme offsets over the domain and the
  // loop must lie inside the tensor. A map with a loop stride is only used inside the loop
  // (verifier), so when the loop has no steps it is never touched and needs no proof.
  std::vector<BoundMap> maps(k.maps.size());
  for (size_t m = 0; m < k.maps.size(); ++m) {
    const AccessMap& am = k.maps[m];
    TensorView& v = views[am.tensor];
    CUVIL_RETURN_IF_ERROR(check_map_tensor(program, k, m, v));
    BoundMap& bm = maps[m];
    bm.base = static_cast<char*>(v.data);
    bm.dtype = v.dtype;
    CUVIL_RETURN_IF_ERROR(eval.eval(am.offset, &bm.offset));
    bm.strides.resize(dims.size());
    std::vector<std::pair<int64_t, int64_t>> extents;  // (extent, stride) per walked axis
    for (size_t i = 0; i < dims.size(); ++i) {
      CUVIL_RETURN_IF_ERROR(eval.eval(am.strides[i], &bm.strides[i]));
      extents.emplace_back(dims[i], bm.strides[i]);
    }
    if (am.loop_stride != kNone) {
      CUVIL_RETURN_IF_ERROR(eval.eval(am.loop_stride, &bm.loop_stride));
      if (loop_extent == 0) continue;
      extents.emplace_back(loop_extent, bm.loop_stride);
    }
    CUVIL_RETURN_IF_ERROR(check_map_span(program, k, m, v, bm.offset, extents));
  }

  // Decode the body once per run (the verifier has checked every operand), noting the
  // section bounds as instruction indices and what shapes the tiles must have.
  std::vector<Insn> body;
  size_t init_end = 0, loop_end = 0;
  bool has_mma = false, has_chunks = false;
  for (size_t pc = 0; pc < k.body.size();) {
    if (pc == k.init_end) init_end = body.size();
    if (pc == k.loop_end) loop_end = body.size();
    const bool in_loop = pc >= k.init_end && pc < k.loop_end;
    Insn in{};
    in.op = static_cast<TileOpcode>(k.body[pc++]);
    size_t n = std::strlen(tile_opcode_operands(in.op));
    for (size_t i = 0; i < n; ++i) in.a[i] = k.body[pc++];
    has_mma = has_mma || in.op == TileOpcode::Mma;
    has_chunks = has_chunks || (in_loop && !tile_opcode_in_loop_only(in.op));
    body.push_back(in);
  }
  if (k.init_end == k.body.size()) init_end = body.size();
  if (k.loop_end == k.body.size()) loop_end = body.size();

  // Tiles. A chunk register holds tile elements x chunk steps, so kernels with chunk
  // registers get smaller tiles. Mma tiles are at most kMmaTileRows x kMmaTileCols (and their
  // registers that big) and never
  // span two matrices (rows split at multiples of the domain's second-to-last dim), so the
  // b operand of a tile comes from one matrix.
  const int64_t chunk =
      has_loop ? std::max<int64_t>(1, std::min<int64_t>(k.loop_chunk, loop_extent)) : 1;
  const int64_t reg_elems = has_mma ? kMmaRegisterElements : kTileRegisterElements;
  const int64_t budget = has_chunks ? std::max<int64_t>(1, reg_elems / chunk) : reg_elems;
  const int64_t seg_rows = has_mma && dims.size() >= 2 ? dims[dims.size() - 2] : rows;
  const int64_t segments = rows / std::max<int64_t>(seg_rows, 1);
  const int64_t tile_cols = std::min(cols, has_mma ? std::min(kMmaTileCols, budget) : budget);
  int64_t tile_rows = std::max<int64_t>(1, std::min(seg_rows, budget / tile_cols));
  if (has_mma) tile_rows = std::min(tile_rows, kMmaTileRows);
  const int64_t tiles_c = (cols + tile_cols - 1) / tile_cols;
  // Matrix products with fewer tiles than threads split rows further (down to 16 rows), so
  // every worker gets one; each output element still sums over k in the same order.
  while (has_mma && tile_rows > 16 &&
         segments * ((seg_rows + tile_rows - 1) / tile_rows) * tiles_c < pool.threads())
    tile_rows = (tile_rows + 1) / 2;
  const int64_t tiles_r = (seg_rows + tile_rows - 1) / tile_rows;  // per segment
  const int64_t tiles = segments * tiles_r * tiles_c;
  const size_t regs = k.registers;
  const KernelRun runner(dims, maps, loop_extent, reg_elems);
  const bool unary_chain = !has_loop && direct_unary_chain(body, maps, dims);

  auto work = [&](int64_t begin, int64_t end, int) {
    thread_local Scratch scratch;
    if (scratch.regs.size() < regs * static_cast<size_t>(reg_elems))
      scratch.regs.resize(regs * static_cast<size_t>(reg_elems));
    for (int64_t t = begin; t < end; ++t) {
      TilePos pos;
      const int64_t seg = t / (tiles_r * tiles_c), in_seg = t % (tiles_r * tiles_c);
      const int64_t sr0 = (in_seg / tiles_c) * tile_rows;
      pos.r0 = seg * seg_rows + sr0;
      pos.c0 = (in_seg % tiles_c) * tile_cols;
      pos.nr = std::min(tile_rows, seg_rows - sr0);
      pos.nc = std::min(tile_cols, cols - pos.c0);
      if (unary_chain) {
        runner.run_unary_chain(body, pos);
        continue;
      }
      runner.run(body, 0, init_end, false, pos, scratch);
      if (has_loop) {
        for (pos.k0 = 0; pos.k0 < loop_extent; pos.k0 += chunk) {
          // A long reduction (a MatMul tile over a large k) is also a place to stop; the
          // tile is then left unfinished, which is fine: the run fails before it is read.
          if (pos.k0 > 0 && pool.should_stop()) return;
          pos.kc = std::min(chunk, loop_extent - pos.k0);
          runner.run(body, init_end, loop_end, true, pos, scratch);
        }
        pos.k0 = pos.kc = 0;
      }
      runner.run(body, loop_end, body.size(), false, pos, scratch);
    }
  };
  // A few tiles per chunk keeps scheduling overhead small and load balanced; at most
  // kMaxTilesPerChunk, since the pool checks the run's deadline and cancellation between
  // chunks. A stopped run is reported by the session (the pool skipped chunks).
  pool.parallel_for(tiles, std::clamp<int64_t>(tiles / (pool.threads() * 8), 1, kMaxTilesPerChunk), work);
  return Status::ok();
}

size_t prepack_tile_kernel_weights(const Program& program, const uint8_t* weights, ThreadPool& pool) {
  const ops::GemmMicroKernel& uk = ops::gemm_micro_kernel();
  ExprEvaluator eval(program);
  eval.cache_constants();
  // The value of an expression that mentions no run-time symbol.
  auto value = [&](uint32_t id, int64_t* out) {
    bool unbound = false;
    return id != kNone && eval.eval(id, out, &unbound).is_ok() && !unbound;
  };
  // The operands to pack, found first; then packed by the session's threads, one weight per
  // chunk (the cache makes a weight two kernels share pack once).
  struct Operand {
    BoundMap map;
    std::vector<int64_t> dims;
    int64_t loop_extent;
  };
  std::vector<Operand> to_pack;
  for (const TileKernel& k : program.kernels) {
    int64_t loop_extent = 0, cols = 0;
    if (k.domain.empty() || !value(k.loop_extent, &loop_extent) || loop_extent <= 0 ||
        !value(k.domain.back(), &cols) || cols <= 0)
      continue;
    for (size_t pc = 0; pc < k.body.size();) {
      const auto op = static_cast<TileOpcode>(k.body[pc]);
      const size_t operands = std::strlen(tile_opcode_operands(op));
      const uint32_t b_map = operands >= 3 ? k.body[pc + 3] : kNone;
      pc += 1 + operands;
      if (op != TileOpcode::Mma || b_map >= k.maps.size()) continue;
      const AccessMap& am = k.maps[b_map];
      if (am.tensor >= program.tensors.size()) continue;
      const TensorDesc& d = program.tensors[am.tensor];
      if (d.kind != TensorKind::kWeight || d.dtype != DType::Float) continue;
      // Bind the map as run_tile_kernel does. A leading domain dim known only at run time (a
      // sequence length) is harmless when b does not move along it: row_offset then ignores
      // it. Where b does move along one (or along the matrix rows), the key depends on
      // run-time shapes and the operand is packed on first use instead.
      BoundMap bm;
      bm.base = const_cast<char*>(reinterpret_cast<const char*>(weights + d.weight_offset));
      bm.dtype = d.dtype;
      bm.strides.resize(k.domain.size());
      std::vector<int64_t> dims(k.domain.size(), 1);
      bool known = value(am.offset, &bm.offset) && value(am.loop_stride, &bm.loop_stride) &&
                   am.strides.size() == dims.size();
      for (size_t i = 0; known && i < dims.size(); ++i) {
        known = value(am.strides[i], &bm.strides[i]);
        if (known && i + 2 <= dims.size() && bm.strides[i] != 0) known = false;
      }
      if (!known) continue;
      dims.back() = cols;
      // The elements the panels read must lie inside the weight (the run's check_map_span).
      const int64_t elems = static_cast<int64_t>(d.weight_size / sizeof(float));
      const auto depth_end = checked_mul(loop_extent - 1, bm.loop_stride);
      const auto cols_end = checked_mul(cols - 1, bm.col_stride());
      const auto last = depth_end && cols_end ? checked_add(*depth_end, *cols_end) : std::nullopt;
      if (bm.offset < 0 || bm.loop_stride < 0 || bm.col_stride() < 0 || !last ||
          *last < 0 || *last >= elems - bm.offset)
        continue;
      to_pack.push_back({std::move(bm), std::move(dims), loop_extent});
    }
  }
  std::atomic<size_t> packed{0};
  pool.parallel_for(static_cast<int64_t>(to_pack.size()), 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const Operand& o = to_pack[static_cast<size_t>(i)];
      try {
        if (mma_weight_panels(uk, o.map, o.dims, o.loop_extent, 0)) ++packed;
      } catch (const std::bad_alloc&) {
        // No exception may leave a pool thread: this operand then packs on first use instead.
      }
    }
  });
  return packed.load();
}

}  // namespace cuvil::rt
