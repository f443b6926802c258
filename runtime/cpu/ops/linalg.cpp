// Linear-algebra kernels (MatMul, Gemm, MatMulInteger, QLinearMatMul, Einsum, Det) and the
// packed, cache-blocked double GEMM (the float32 GEMM/GEMV with per-path micro kernels is in
// gemm_kernels.cpp; both are gemm() of kernel_util.h, which Conv, ConvTranspose and the
// recurrent ops share). The double GEMM packs op(b) once into panels of kNr columns and each
// task packs alpha * op(a) in blocks of kMc x kKc; a 4 x kNr register tile of vector
// accumulators walks the k block. Work is split over row blocks, and over column panels when
// there are few row blocks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/cpu/ops/gemm_int8.h"
#include "runtime/cpu/ops/gemm_small.h"
#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/ops/quant_params.h"

// An AVX2+FMA clone of the micro kernel, picked at load time by CPU features (x86-64-v3 is a
// feature level, unlike arch=haswell, which tests the CPU model and never matches AMD parts).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    !defined(__SANITIZE_THREAD__)
#define CUVIL_GEMM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CUVIL_GEMM_CLONES
#endif

namespace cuvil::rt::ops {
namespace {

// ---- GEMM ------------------------------------------------------------------------------------

typedef float VecF __attribute__((vector_size(32)));
typedef double VecD __attribute__((vector_size(32)));
template <typename C> struct VecOf;
template <> struct VecOf<float> { using type = VecF; };
template <> struct VecOf<double> { using type = VecD; };

constexpr int64_t kMr = 4;     // rows of the register tile (the micro kernel names 4 rows)
constexpr int64_t kMc = 64;    // rows of a packed a block
constexpr int64_t kKc = 256;   // depth of a packed block
template <typename C> constexpr int64_t kLanes = 32 / sizeof(C);
template <typename C> constexpr int64_t kNr = 2 * kLanes<C>;  // columns of the register tile

// One packed a block (rows x kc, groups of kMr rows interleaved) against panels [p0, p1) of
// packed b (each panel kc deep starting at the block's depth). first: this is the first depth
// block, so c is initialised (from beta * c) rather than accumulated into.
template <typename C>
inline __attribute__((always_inline)) void gemm_block_body(int64_t rows, int64_t kc,
                                                          int64_t n, int64_t p0, int64_t p1,
                                                          const C* apack, const C* bpack,
                                                          int64_t panel_stride, C* c,
                                                          int64_t ldc, bool first, C beta) {
  using V = typename VecOf<C>::type;
  constexpr int64_t L = kLanes<C>;
  constexpr int64_t NR = kNr<C>;
  for (int64_t pj = p0; pj < p1; ++pj) {
    const C* bp = bpack + pj * panel_stride;
    const int64_t j0 = pj * NR;
    const int64_t cols = std::min<int64_t>(NR, n - j0);
    for (int64_t g = 0; g * kMr < rows; ++g) {
      const C* ap = apack + g * kc * kMr;
      // Eight named accumulators so that they stay in registers (an indexed array does not
      // at -O2).
      V c00 = V{}, c01 = V{}, c10 = V{}, c11 = V{}, c20 = V{}, c21 = V{}, c30 = V{}, c31 = V{};
      for (int64_t p = 0; p < kc; ++p) {
        V b0, b1;
        std::memcpy(&b0, bp + p * NR, sizeof(V));
        std::memcpy(&b1, bp + p * NR + L, sizeof(V));
        const C* a4 = ap + p * kMr;
        const V a0 = V{} + a4[0], a1 = V{} + a4[1], a2 = V{} + a4[2], a3 = V{} + a4[3];
        c00 += a0 * b0;
        c01 += a0 * b1;
        c10 += a1 * b0;
        c11 += a1 * b1;
        c20 += a2 * b0;
        c21 += a2 * b1;
        c30 += a3 * b0;
        c31 += a3 * b1;
      }
      const V acc[kMr][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
      const int64_t valid_rows = std::min<int64_t>(kMr, rows - g * kMr);
      for (int64_t r = 0; r < valid_rows; ++r) {
        C* crow = c + (g * kMr + r) * ldc + j0;
        C tile[NR];
        std::memcpy(tile, &acc[r][0], sizeof(V));
        std::memcpy(tile + L, &acc[r][1], sizeof(V));
        if (!first) {
          for (int64_t j = 0; j < cols; ++j) crow[j] += tile[j];
        } else if (beta == C(0)) {
          for (int64_t j = 0; j < cols; ++j) crow[j] = tile[j];
        } else {
          for (int64_t j = 0; j < cols; ++j) crow[j] = beta * crow[j] + tile[j];
        }
      }
    }
  }
}

CUVIL_GEMM_CLONES
void gemm_block_f64(int64_t rows, int64_t kc, int64_t n, int64_t p0, int64_t p1,
                    const double* apack, const double* bpack, int64_t panel_stride, double* c,
                    int64_t ldc, bool first, double beta) {
  gemm_block_body<double>(rows, kc, n, p0, p1, apack, bpack, panel_stride, c, ldc, first, beta);
}

inline void gemm_block(int64_t rows, int64_t kc, int64_t n, int64_t p0, int64_t p1,
                       const double* apack, const double* bpack, int64_t panel_stride,
                       double* c, int64_t ldc, bool first, double beta) {
  gemm_block_f64(rows, kc, n, p0, p1, apack, bpack, panel_stride, c, ldc, first, beta);
}

template <typename C>
void gemm_impl(OpContext* ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               C alpha, const C* a, int64_t lda, const C* b, int64_t ldb, C beta, C* c,
               int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    gemm_small<C>(false, false, m, n, 0, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m * n * k <= kSmallGemm) {
    gemm_small<C>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  constexpr int64_t NR = kNr<C>;
  const int64_t panels = (n + NR - 1) / NR;
  const int64_t panel_stride = k * NR;
  // b packed as panels[panels][k][NR], zero-padded past column n.
  std::vector<C> bpack(static_cast<size_t>(panels * panel_stride));
  auto pack_b = [&](int64_t begin, int64_t end) {
    for (int64_t pj = begin; pj < end; ++pj) {
      C* dst = bpack.data() + pj * panel_stride;
      const int64_t j0 = pj * NR;
      const int64_t cols = std::min<int64_t>(NR, n - j0);
      for (int64_t p = 0; p < k; ++p) {
        C* d = dst + p * NR;
        if (trans_b) {
          for (int64_t j = 0; j < cols; ++j) d[j] = b[(j0 + j) * ldb + p];
        } else {
          const C* s = b + p * ldb + j0;
          for (int64_t j = 0; j < cols; ++j) d[j] = s[j];
        }
        for (int64_t j = cols; j < NR; ++j) d[j] = C(0);
      }
    }
  };
  const int threads = ctx ? ctx->threads() : 1;
  if (ctx && threads > 1) parallel_range(*ctx, panels, 4, pack_b);
  else pack_b(0, panels);

  const int64_t mblocks = (m + kMc - 1) / kMc;
  int64_t nchunks = 1;
  if (threads > 1 && mblocks < 2 * threads)
    nchunks = std::min<int64_t>(panels, (2 * threads + mblocks - 1) / mblocks);
  const int64_t panels_per_chunk = (panels + nchunks - 1) / nchunks;
  auto task = [&](int64_t begin, int64_t end) {
    std::vector<C> apack(static_cast<size_t>(((kMc + kMr - 1) / kMr) * kMr * kKc));
    for (int64_t t = begin; t < end; ++t) {
      const int64_t mb = t / nchunks, nc = t % nchunks;
      const int64_t i0 = mb * kMc, rows = std::min<int64_t>(kMc, m - i0);
      const int64_t p0 = nc * panels_per_chunk;
      const int64_t p1 = std::min<int64_t>(panels, p0 + panels_per_chunk);
      if (p0 >= p1) continue;
      for (int64_t k0 = 0; k0 < k; k0 += kKc) {
        const int64_t kc = std::min<int64_t>(kKc, k - k0);
        for (int64_t g = 0; g * kMr < rows; ++g) {
          C* dst = apack.data() + g * kc * kMr;
          for (int64_t p = 0; p < kc; ++p) {
            for (int64_t r = 0; r < kMr; ++r) {
              const int64_t i = g * kMr + r;
              dst[p * kMr + r] = i < rows ? alpha * a_at(a, lda, trans_a, i0 + i, k0 + p) : C(0);
            }
          }
        }
        gemm_block(rows, kc, n, p0, p1, apack.data(), bpack.data() + k0 * NR, panel_stride,
                   c + i0 * ldc, ldc, k0 == 0, beta);
      }
    }
  };
  const int64_t tasks = mblocks * nchunks;
  // Through the pool even with one thread: it then runs the tasks in order on the caller,
  // checking the run's deadline and cancellation between them (a 1024^3 product is 16 tasks).
  if (ctx && tasks > 1) parallel_range(*ctx, tasks, 1, task);
  else task(0, tasks);
}

}  // namespace

void gemm(OpContext* ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
          double beta, double* c, int64_t ldc) {
  gemm_impl<double>(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace {

// Integer products wrap like the ONNX reference (two's complement), without signed overflow.
template <typename T> inline T wrap_mul_add(T acc, T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<uint64_t>(acc) +
                                         static_cast<uint64_t>(x) * static_cast<uint64_t>(y)));
  } else {
    return acc + x * y;
  }
}

// ---- batched matrix-multiply shapes (numpy matmul semantics) ----------------------------------

struct MatMulShape {
  int64_t m = 0, n = 0, k = 0;
  std::vector<int64_t> out_dims;
  std::vector<int64_t> a_offsets, b_offsets;  // per output batch, in elements
  bool b_shared = false;  // b has no batch: the batches of a fold into one m * batch GEMM
};

Status matmul_shape(OpContext& ctx, const TensorView& a, const TensorView& b, MatMulShape* s) {
  if (a.dims.empty() || b.dims.empty())
    return ctx.error(StatusCode::kInvalidArgument, "inputs must have rank >= 1, got A ",
                     dims_string(a.dims), " and B ", dims_string(b.dims));
  std::vector<int64_t> ad = a.dims, bd = b.dims;
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  s->m = ad[ad.size() - 2];
  s->k = ad.back();
  s->n = bd.back();
  if (bd[bd.size() - 2] != s->k)
    return ctx.error(StatusCode::kInvalidArgument, "inner dimensions differ: A ",
                     dims_string(a.dims), " and B ", dims_string(b.dims));
  std::vector<int64_t> ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2), batch;
  if (!broadcast_shape(ab, bb, &batch))
    return ctx.error(StatusCode::kInvalidArgument, "batch dimensions do not broadcast: A ",
                     dims_string(a.dims), " and B ", dims_string(b.dims));
  s->out_dims = batch;
  if (!a_vec) s->out_dims.push_back(s->m);
  if (!b_vec) s->out_dims.push_back(s->n);
  int64_t batches = 1, out_numel = 0;
  if (!dims_numel(batch, &batches) || !dims_numel(s->out_dims, &out_numel))
    return ctx.error(StatusCode::kInvalidArgument, "output shape overflows");
  const std::vector<int64_t> sa = broadcast_strides(ab, batch), sb = broadcast_strides(bb, batch);
  s->a_offsets.assign(static_cast<size_t>(batches), 0);
  s->b_offsets.assign(static_cast<size_t>(batches), 0);
  std::vector<int64_t> idx(batch.size(), 0);
  for (int64_t t = 0; t < batches; ++t) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    s->a_offsets[t] = oa * s->m * s->k;
    s->b_offsets[t] = ob * s->k * s->n;
    for (size_t d = batch.size(); d-- > 0;) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  int64_t b_batch = 1;
  for (int64_t d : bb) b_batch *= d;
  s->b_shared = b_batch == 1 && ab == batch;
  return Status::ok();
}

template <typename C>
void matmul_float(OpContext& ctx, const MatMulShape& s, const C* a, const C* b, C* y) {
  const int64_t batches = static_cast<int64_t>(s.a_offsets.size());
  if (s.b_shared) {
    gemm(&ctx, false, false, s.m * batches, s.n, s.k, C(1), a, s.k, b, s.n, C(0), y, s.n);
    return;
  }
  const int64_t mn = s.m * s.n;
  if (batches >= 2 * ctx.threads() && ctx.threads() > 1) {
    parallel_range(ctx, batches, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        gemm(nullptr, false, false, s.m, s.n, s.k, C(1), a + s.a_offsets[t], s.k,
             b + s.b_offsets[t], s.n, C(0), y + t * mn, s.n);
    });
    return;
  }
  for (int64_t t = 0; t < batches; ++t)
    gemm(&ctx, false, false, s.m, s.n, s.k, C(1), a + s.a_offsets[t], s.k, b + s.b_offsets[t],
         s.n, C(0), y + t * mn, s.n);
}

// Plain batched matmul for integer types: Acc accumulates, a(i,p) and b(p,j) come from the
// loaders (zero points already subtracted for the quantised ops).
template <typename Acc, typename LoadA, typename LoadB, typename Store>
void matmul_generic(OpContext& ctx, const MatMulShape& s, LoadA load_a, LoadB load_b,
                    Store store) {
  const int64_t batches = static_cast<int64_t>(s.a_offsets.size());
  parallel_range(ctx, batches * s.m, 1, [&](int64_t begin, int64_t end) {
    std::vector<Acc> row(static_cast<size_t>(s.n));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t t = r / s.m, i = r % s.m;
      std::fill(row.begin(), row.end(), Acc(0));
      for (int64_t p = 0; p < s.k; ++p) {
        const Acc av = load_a(s.a_offsets[t] + i * s.k + p, i);
        const int64_t boff = s.b_offsets[t] + p * s.n;
        for (int64_t j = 0; j < s.n; ++j) row[j] = wrap_mul_add<Acc>(row[j], av, load_b(boff + j, j));
      }
      for (int64_t j = 0; j < s.n; ++j) store(r * s.n + j, i, j, row[j]);
    }
  });
}

}  // namespace

// ---- MatMul ---------------------------------------------------------------------------------

Status kernel_MatMul(OpContext& ctx) {
  const TensorView* a = ctx.input(0);
  const TensorView* b = ctx.input(1);
  if (!a || !b) return ctx.error(StatusCode::kInvalidArgument, "expects inputs A and B");
  if (a->dtype != b->dtype)
    return ctx.error(StatusCode::kInvalidArgument, "A is ", dtype_name(a->dtype), " but B is ",
                     dtype_name(b->dtype));
  MatMulShape s;
  CUVIL_RETURN_IF_ERROR(matmul_shape(ctx, *a, *b, &s));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, a->dtype, s.out_dims, &y));
  Status st;
  const bool ok = visit_dtype<kNumericTypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) {
      using C = compute_t<T>;
      std::vector<C> abuf, bbuf;
      const C* ap = compute_data<C>(*a, &abuf);
      const C* bp = compute_data<C>(*b, &bbuf);
      ComputeOutput<C> out(y);
      matmul_float<C>(ctx, s, ap, bp, out.data());
      out.finish();
    } else {
      const T* ap = a->as<T>();
      const T* bp = b->as<T>();
      T* yp = y->as<T>();
      matmul_generic<T>(
          ctx, s, [&](int64_t o, int64_t) { return ap[o]; },
          [&](int64_t o, int64_t) { return bp[o]; },
          [&](int64_t o, int64_t, int64_t, T v) { yp[o] = v; });
    }
  });
  if (!ok) return ctx.error(StatusCode::kUnsupported, "dtype ", dtype_name(a->dtype), " is not supported");
  return st;
}

// ---- Gemm -----------------------------------------------------------------------------------

Status kernel_Gemm(OpContext& ctx) {
  const TensorView* a = ctx.input(0);
  const TensorView* b = ctx.input(1);
  const TensorView* c = ctx.input(2);
  if (!a || !b) return ctx.error(StatusCode::kInvalidArgument, "expects inputs A and B");
  if (a->dims.size() != 2 || b->dims.size() != 2)
    return ctx.error(StatusCode::kInvalidArgument, "A and B must be 2-D, got ", dims_string(a->dims),
                     " and ", dims_string(b->dims));
  if (a->dtype != b->dtype || (c && c->dtype != a->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "A, B and C must share a dtype");
  const bool ta = ctx.attrs().get_int("transA", 0) != 0;
  const bool tb = ctx.attrs().get_int("transB", 0) != 0;
  const float alpha = ctx.attrs().get_float("alpha", 1.0f);
  const float beta = ctx.attrs().get_float("beta", 1.0f);
  const int64_t m = ta ? a->dims[1] : a->dims[0], k = ta ? a->dims[0] : a->dims[1];
  const int64_t kb = tb ? b->dims[1] : b->dims[0], n = tb ? b->dims[0] : b->dims[1];
  if (k != kb)
    return ctx.error(StatusCode::kInvalidArgument, "inner dimensions differ: op(A) is ", m, "x", k,
                     ", op(B) is ", kb, "x", n);
  std::vector<int64_t> out_dims = {m, n};
  std::vector<int64_t> c_strides;
  if (c) {
    std::vector<int64_t> bc;
    if (c->dims.size() > 2 || !broadcast_shape(c->dims, out_dims, &bc) || bc != out_dims)
      return ctx.error(StatusCode::kInvalidArgument, "C ", dims_string(c->dims),
                       " does not broadcast to ", dims_string(out_dims));
    c_strides = broadcast_strides(c->dims, out_dims);
  }
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, a->dtype, out_dims, &y));
  const bool ok = visit_dtype<kNumericTypes>(a->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    std::vector<C> abuf, bbuf, cbuf;
    const C* ap = compute_data<C>(*a, &abuf);
    const C* bp = compute_data<C>(*b, &bbuf);
    const C* cp = c ? compute_data<C>(*c, &cbuf) : nullptr;
    ComputeOutput<C> out(y);
    C* yp = out.data();
    const C cbeta = static_cast<C>(beta), calpha = static_cast<C>(alpha);
    if (cp) {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          yp[i * n + j] = cbeta * cp[i * c_strides[0] + j * c_strides[1]];
    }
    if constexpr (is_float_v<T>) {
      gemm(&ctx, ta, tb, m, n, k, calpha, ap, a->dims[1], bp, b->dims[1], cp ? C(1) : C(0), yp, n);
    } else {
      const int64_t lda = a->dims[1], ldb = b->dims[1];
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          C acc = C(0);
          for (int64_t p = 0; p < k; ++p)
            acc = wrap_mul_add<C>(acc, ta ? ap[p * lda + i] : ap[i * lda + p],
                                  tb ? bp[j * ldb + p] : bp[p * ldb + j]);
          C base = cp ? yp[i * n + j] : C(0);
          yp[i * n + j] = wrap_mul_add<C>(base, calpha, acc);
        }
      }
    }
    out.finish();
  });
  if (!ok) return ctx.error(StatusCode::kUnsupported, "dtype ", dtype_name(a->dtype), " is not supported");
  return Status::ok();
}

// ---- MatMulInteger / QLinearMatMul ---------------------------------------------------------
// Both run on the int8 GEMM (gemm_int8.h) with its epilogue: int32 out, or requantised in the
// same pass. Only a per-row a_scale (QLinearMatMul) takes an int32 block and a second pass.

namespace {

// Zero points as int32: one value, or `count` (the caller checked the count).
std::vector<int32_t> int_zero_points(const std::vector<double>& v) {
  std::vector<int32_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<int32_t>(v[i]);
  return out;
}

// y (elements of y_elem bytes, batches of m x n) = the int8 product of every batch of s with
// epilogue ep; za has 1 or s.m values, zb 1 or s.n.
void matmul_int8(OpContext& ctx, const MatMulShape& s, const TensorView& a, const TensorView& b,
                 const std::vector<int32_t>& za, const std::vector<int32_t>& zb,
                 const Int8Epilogue& ep, void* y, size_t y_elem) {
  const int64_t batches = static_cast<int64_t>(s.a_offsets.size());
  if (batches == 0) return;
  Int8GemmArgs g;
  g.n = s.n;
  g.k = s.k;
  g.a_signed = a.dtype == DType::Int8;
  g.lda = s.k;
  g.b_signed = b.dtype == DType::Int8;
  g.ldb = s.n;
  g.b_zero = zb.data();
  g.b_zero_per_column = zb.size() > 1;
  g.epilogue = ep;
  g.ldc_row = s.n;
  const uint8_t* ap = static_cast<const uint8_t*>(a.data);
  const uint8_t* bp = static_cast<const uint8_t*>(b.data);
  uint8_t* yp = static_cast<uint8_t*>(y);
  if (s.b_shared) {
    // The batches of a fold into one product of batches * m rows (per-row zero points repeat).
    std::vector<int32_t> zrows;
    if (za.size() > 1)
      for (int64_t t = 0; t < batches; ++t) zrows.insert(zrows.end(), za.begin(), za.end());
    g.m = s.m * batches;
    g.a = ap;
    g.a_zero = za.size() > 1 ? zrows.data() : za.data();
    g.a_zero_per_row = za.size() > 1;
    g.b = bp + s.b_offsets[0];
    g.c = yp;
    gemm_int8(&ctx, g);
    return;
  }
  g.m = s.m;
  g.a_zero = za.data();
  g.a_zero_per_row = za.size() > 1;
  for (int64_t t = 0; t < batches; ++t) {
    g.a = ap + s.a_offsets[t];
    g.b = bp + s.b_offsets[t];
    g.c = yp + static_cast<size_t>(t * s.m * s.n) * y_elem;
    gemm_int8(&ctx, g);
  }
}

}  // namespace

Status kernel_MatMulInteger(OpContext& ctx) {
  const TensorView* a = ctx.input(0);
  const TensorView* b = ctx.input(1);
  if (!a || !b) return ctx.error(StatusCode::kInvalidArgument, "expects inputs A and B");
  if (!is_8bit_int(a->dtype) || !is_8bit_int(b->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "A and B must be int8 or uint8, got ",
                     dtype_name(a->dtype), " and ", dtype_name(b->dtype));
  MatMulShape s;
  CUVIL_RETURN_IF_ERROR(matmul_shape(ctx, *a, *b, &s));
  std::vector<double> azp, bzp;
  const TensorView* azt = ctx.input(2);
  const TensorView* bzt = ctx.input(3);
  if ((azt && azt->dtype != a->dtype) || (bzt && bzt->dtype != b->dtype))
    return ctx.error(StatusCode::kInvalidArgument, "zero points must have the dtype of their input");
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, azt, "a_zero_point", s.m, &azp, 0));
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, bzt, "b_zero_point", s.n, &bzp, 0));
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, DType::Int32, s.out_dims, &y));
  matmul_int8(ctx, s, *a, *b, int_zero_points(azp), int_zero_points(bzp), Int8Epilogue{}, y->data,
              sizeof(int32_t));
  return Status::ok();
}

Status kernel_QLinearMatMul(OpContext& ctx) {
  const TensorView* a = ctx.input(0);
  const TensorView* b = ctx.input(3);
  const TensorView* yzt = ctx.input(7);
  for (size_t i = 0; i < 8; ++i)
    if (!ctx.input(i))
      return ctx.error(StatusCode::kInvalidArgument, "input ", i, " is required");
  if (!is_8bit_int(a->dtype) || !is_8bit_int(b->dtype) || !is_8bit_int(yzt->dtype))
    return ctx.error(StatusCode::kUnsupported, "a, b and y_zero_point must be int8 or uint8, got ",
                     dtype_name(a->dtype), ", ", dtype_name(b->dtype), ", ", dtype_name(yzt->dtype));
  MatMulShape s;
  CUVIL_RETURN_IF_ERROR(matmul_shape(ctx, *a, *b, &s));
  std::vector<double> as, azp, bs, bzp, ys, yzp;
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, ctx.input(1), "a_scale", s.m, &as, 1));
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, ctx.input(2), "a_zero_point", s.m, &azp, 0));
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, ctx.input(4), "b_scale", s.n, &bs, 1));
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, ctx.input(5), "b_zero_point", s.n, &bzp, 0));
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, ctx.input(6), "y_scale", 1, &ys, 1));
  CUVIL_RETURN_IF_ERROR(read_quant_param(ctx, yzt, "y_zero_point", 1, &yzp, 0));
  if (!(ys[0] > 0) || !std::isfinite(ys[0]))
    return ctx.error(StatusCode::kInvalidArgument, "y_scale must be positive and finite, got ", ys[0]);
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, yzt->dtype, s.out_dims, &y));
  const bool s8 = y->dtype == DType::Int8;
  const std::vector<int32_t> za = int_zero_points(azp), zb = int_zero_points(bzp);
  // The requantisation multiplier (a_scale * b_scale) / y_scale in float, per column.
  auto multiplier = [&](int64_t i, int64_t j) {
    return static_cast<float>(per(as, i)) * static_cast<float>(per(bs, j)) / static_cast<float>(ys[0]);
  };
  if (as.size() == 1) {
    std::vector<float> scale(bs.size());
    for (size_t j = 0; j < bs.size(); ++j) scale[j] = multiplier(0, static_cast<int64_t>(j));
    Int8Epilogue ep;
    ep.kind = s8 ? Int8Epilogue::Kind::kQuantS8 : Int8Epilogue::Kind::kQuantU8;
    ep.scale = scale.data();
    ep.scale_per_column = scale.size() > 1;
    ep.out_zero_point = static_cast<int32_t>(yzp[0]);
    matmul_int8(ctx, s, *a, *b, za, zb, ep, y->data, 1);
    return Status::ok();
  }
  // A scale per row of a: int32 first, then the per-element multiplier.
  std::vector<int32_t> acc(static_cast<size_t>(y->numel()));
  matmul_int8(ctx, s, *a, *b, za, zb, Int8Epilogue{}, acc.data(), sizeof(int32_t));
  const float qmin = s8 ? -128.f : 0.f, qmax = s8 ? 127.f : 255.f;
  const float zp = static_cast<float>(yzp[0]);
  for (int64_t o = 0; o < y->numel(); ++o) {
    const int64_t i = (o / s.n) % s.m, j = o % s.n;
    float v = std::nearbyint(static_cast<float>(acc[o]) * multiplier(i, j)) + zp;
    v = std::min(std::max(v, qmin), qmax);
    if (s8) y->as<int8_t>()[o] = static_cast<int8_t>(v);
    else y->as<uint8_t>()[o] = static_cast<uint8_t>(v);
  }
  return Status::ok();
}

// ---- Einsum ---------------------------------------------------------------------------------

namespace {

// One operand term: label ids in order; -1 marks the position of "..." (expanded later).
struct EinsumTerm {
  std::vector<int> labels;
  bool ellipsis = false;
};

bool parse_einsum_term(const std::string& s, EinsumTerm* t) {
  for (size_t i = 0; i < s.size();) {
    const char ch = s[i];
    if (ch == '.') {
      if (t->ellipsis || s.compare(i, 3, "...") != 0) return false;
      t->ellipsis = true;
      t->labels.push_back(-1);
      i += 3;
    } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
      t->labels.push_back(static_cast<unsigned char>(ch));
      ++i;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

Status kernel_Einsum(OpContext& ctx) {
  std::string eq;
  for (char ch : ctx.attrs().get_string("equation", "")) if (ch != ' ') eq += ch;
  if (eq.empty()) return ctx.error(StatusCode::kInvalidArgument, "attribute 'equation' is missing");
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<EinsumTerm> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    EinsumTerm t;
    if (!parse_einsum_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start), &t))
      return ctx.error(StatusCode::kInvalidArgument, "cannot parse equation '", eq, "'");
    terms.push_back(t);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const size_t n_in = ctx.num_inputs();
  if (terms.size() != n_in)
    return ctx.error(StatusCode::kInvalidArgument, "equation '", eq, "' has ", terms.size(),
                     " operands but the node has ", n_in, " inputs");
  std::vector<const TensorView*> ins(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    ins[i] = ctx.input(i);
    if (!ins[i]) return ctx.error(StatusCode::kInvalidArgument, "input ", i, " is missing");
    if (ins[i]->dtype != ins[0]->dtype)
      return ctx.error(StatusCode::kInvalidArgument, "inputs must share a dtype");
  }
  // Label ids: letters keep their character code (< 128); ellipsis dims get 128 + position
  // counted from the right, so broadcasting aligns them.
  int ell_rank = 0;
  for (size_t i = 0; i < n_in; ++i) {
    const int letters = static_cast<int>(terms[i].labels.size()) - (terms[i].ellipsis ? 1 : 0);
    const int rank = static_cast<int>(ins[i]->dims.size());
    if (terms[i].ellipsis ? rank < letters : rank != letters)
      return ctx.error(StatusCode::kInvalidArgument, "operand ", i, " has rank ", rank,
                       " but its term in '", eq, "' has ", letters, " labels");
    if (terms[i].ellipsis) ell_rank = std::max(ell_rank, rank - letters);
  }
  auto expand = [](const EinsumTerm& t, int ell) {
    std::vector<int> out;
    for (int l : t.labels) {
      if (l >= 0) out.push_back(l);
      else for (int e = ell - 1; e >= 0; --e) out.push_back(128 + e);
    }
    return out;
  };
  constexpr int kMaxLabel = 128 + 64;
  std::vector<int64_t> label_dim(kMaxLabel, -1);
  std::vector<int> label_count(kMaxLabel, 0);
  std::vector<std::vector<int>> in_labels(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    const int letters = static_cast<int>(terms[i].labels.size()) - (terms[i].ellipsis ? 1 : 0);
    const int ell = terms[i].ellipsis ? static_cast<int>(ins[i]->dims.size()) - letters : 0;
    if (ell > 64) return ctx.error(StatusCode::kInvalidArgument, "ellipsis covers too many dimensions");
    in_labels[i] = expand(terms[i], ell);
    for (size_t d = 0; d < in_labels[i].size(); ++d) {
      const int l = in_labels[i][d];
      const int64_t dim = ins[i]->dims[d];
      ++label_count[l];
      if (label_dim[l] < 0 || label_dim[l] == 1) {
        label_dim[l] = dim;
      } else if (dim != label_dim[l] && dim != 1) {
        if (l < 128)
          return ctx.error(StatusCode::kInvalidArgument, "label '", static_cast<char>(l),
                           "' has sizes ", label_dim[l], " and ", dim);
        return ctx.error(StatusCode::kInvalidArgument, "ellipsis dimensions do not broadcast");
      }
    }
  }
  std::vector<int> out_labels;
  if (arrow != std::string::npos) {
    EinsumTerm t;
    if (!parse_einsum_term(eq.substr(arrow + 2), &t))
      return ctx.error(StatusCode::kInvalidArgument, "cannot parse output of '", eq, "'");
    out_labels = expand(t, ell_rank);
    for (size_t i = 0; i < out_labels.size(); ++i) {
      const int l = out_labels[i];
      if (label_count[l] == 0 && l < 128)
        return ctx.error(StatusCode::kInvalidArgument, "output label '", static_cast<char>(l),
                         "' does not appear in any input");
      for (size_t j = 0; j < i; ++j)
        if (out_labels[j] == l)
          return ctx.error(StatusCode::kInvalidArgument, "output label repeats in '", eq, "'");
    }
  } else {
    for (int e = ell_rank - 1; e >= 0; --e) out_labels.push_back(128 + e);
    for (int l = 0; l < 128; ++l)
      if (label_count[l] == 1) out_labels.push_back(l);
  }
  std::vector<int> sum_labels;
  for (int l = 0; l < kMaxLabel; ++l) {
    if (label_count[l] == 0) continue;
    if (std::find(out_labels.begin(), out_labels.end(), l) == out_labels.end()) sum_labels.push_back(l);
  }
  std::vector<int64_t> out_dims;
  for (int l : out_labels) out_dims.push_back(label_dim[l] < 0 ? 1 : label_dim[l]);
  int64_t out_numel = 0, sum_numel = 1;
  if (!dims_numel(out_dims, &out_numel))
    return ctx.error(StatusCode::kInvalidArgument, "output shape overflows");
  for (int l : sum_labels) {
    auto p = checked_mul(sum_numel, label_dim[l]);
    if (!p) return ctx.error(StatusCode::kInvalidArgument, "summation space overflows");
    sum_numel = *p;
  }
  // Per input, the element stride contributed by each output / summed label (repeated labels
  // add up, which walks the diagonal; size-1 broadcast dims contribute 0).
  std::vector<std::vector<int64_t>> out_stride(n_in), sum_stride(n_in), label_stride(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    const std::vector<int64_t> st = row_major_strides(ins[i]->dims);
    std::vector<int64_t>& per_label = label_stride[i];
    per_label.assign(kMaxLabel, 0);
    for (size_t d = 0; d < in_labels[i].size(); ++d)
      if (ins[i]->dims[d] != 1 || label_dim[in_labels[i][d]] == 1) per_label[in_labels[i][d]] += st[d];
    for (int l : out_labels) out_stride[i].push_back(per_label[l]);
    for (int l : sum_labels) sum_stride[i].push_back(per_label[l]);
  }
  std::vector<int64_t> sum_dims;
  for (int l : sum_labels) sum_dims.push_back(label_dim[l]);
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, ins[0]->dtype, out_dims, &y));
  if (n_in == 2 && dtype_is_float(ins[0]->dtype)) {
    // A two-operand contraction without diagonals, broadcasting or one-sided sums is a batched
    // matrix multiply: batch labels (both operands and output), m (first operand and output),
    // n (second and output) and k (both operands, summed).
    std::vector<int> batch_l, m_l, n_l, k_l;
    bool fits = true;
    for (int l = 0; l < kMaxLabel && fits; ++l) {
      if (label_count[l] == 0) continue;
      const auto count_in = [&](size_t i) {
        return static_cast<int>(std::count(in_labels[i].begin(), in_labels[i].end(), l));
      };
      const int ca = count_in(0), cb = count_in(1);
      const bool in_out = std::find(out_labels.begin(), out_labels.end(), l) != out_labels.end();
      for (size_t i = 0; i < 2; ++i)
        for (size_t d = 0; d < in_labels[i].size(); ++d)
          if (in_labels[i][d] == l && ins[i]->dims[d] != label_dim[l]) fits = false;
      if (ca > 1 || cb > 1) fits = false;
      else if (ca && cb) (in_out ? batch_l : k_l).push_back(l);
      else if (!in_out) fits = false;
      else (ca ? m_l : n_l).push_back(l);
    }
    if (fits) {
      auto dims_of = [&](const std::vector<int>& ls) {
        int64_t n = 1;
        for (int l : ls) n *= label_dim[l];
        return n;
      };
      const int64_t nb = dims_of(batch_l), m = dims_of(m_l), n = dims_of(n_l), k = dims_of(k_l);
      bool done = false;
      visit_dtype<kFloatTypes>(ins[0]->dtype, [&](auto tag) {
        using C = compute_t<typename decltype(tag)::type>;
        std::vector<C> abuf, bbuf;
        const C* a = compute_data<C>(*ins[0], &abuf);
        const C* b = compute_data<C>(*ins[1], &bbuf);
        // Gathers src into the label order `order` (row-major over those labels' dims).
        auto gather = [&](const C* src, const std::vector<int64_t>& strides, std::vector<int> order, C* dst) {
          std::vector<int64_t> dims, st;
          for (int l : order) {
            dims.push_back(label_dim[l]);
            st.push_back(strides[l]);
          }
          int64_t total = 1;
          for (int64_t d : dims) total *= d;
          std::vector<int64_t> idx(dims.size(), 0);
          int64_t off = 0;
          for (int64_t t = 0; t < total; ++t) {
            dst[t] = src[off];
            for (size_t d = dims.size(); d-- > 0;) {
              off += st[d];
              if (++idx[d] < dims[d]) break;
              off -= st[d] * dims[d];
              idx[d] = 0;
            }
          }
        };
        auto concat = [](std::vector<int> x, const std::vector<int>& y2, const std::vector<int>& z) {
          x.insert(x.end(), y2.begin(), y2.end());
          x.insert(x.end(), z.begin(), z.end());
          return x;
        };
        std::vector<C> ap(static_cast<size_t>(nb * m * k)), bp(static_cast<size_t>(nb * k * n));
        std::vector<C> yp(static_cast<size_t>(nb * m * n));
        gather(a, label_stride[0], concat(batch_l, m_l, k_l), ap.data());
        gather(b, label_stride[1], concat(batch_l, k_l, n_l), bp.data());
        for (int64_t t = 0; t < nb; ++t)
          gemm(&ctx, false, false, m, n, k, C(1), ap.data() + t * m * k, k, bp.data() + t * k * n, n, C(0),
               yp.data() + t * m * n, n);
        // yp is laid out as [batch, m, n] labels; scatter it into the output's label order.
        const std::vector<int> yorder = concat(batch_l, m_l, n_l);
        std::vector<int64_t> ystride(kMaxLabel, 0);
        int64_t st = 1;
        for (size_t i = yorder.size(); i-- > 0;) {
          ystride[yorder[i]] = st;
          st *= label_dim[yorder[i]];
        }
        ComputeOutput<C> out(y);
        gather(yp.data(), ystride, out_labels, out.data());
        out.finish();
        done = true;
      });
      if (done) return Status::ok();
    }
  }
  const bool ok = visit_dtype<kNumericTypes>(ins[0]->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    std::vector<std::vector<C>> bufs(n_in);
    std::vector<const C*> data(n_in);
    for (size_t i = 0; i < n_in; ++i) data[i] = compute_data<C>(*ins[i], &bufs[i]);
    ComputeOutput<C> out(y);
    C* yp = out.data();
    parallel_range(ctx, out_numel, 64, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> oidx(out_dims.size()), sidx(sum_dims.size());
      std::vector<int64_t> base(n_in), off(n_in);
      for (int64_t o = begin; o < end; ++o) {
        int64_t rem = o;
        for (size_t d = out_dims.size(); d-- > 0;) {
          oidx[d] = rem % out_dims[d];
          rem /= out_dims[d];
        }
        for (size_t i = 0; i < n_in; ++i) {
          base[i] = 0;
          for (size_t d = 0; d < out_dims.size(); ++d) base[i] += oidx[d] * out_stride[i][d];
          off[i] = base[i];
        }
        std::fill(sidx.begin(), sidx.end(), 0);
        C acc = C(0);
        for (int64_t s = 0; s < sum_numel; ++s) {
          C prod = C(1);
          for (size_t i = 0; i < n_in; ++i) prod = static_cast<C>(prod * data[i][off[i]]);
          acc = static_cast<C>(acc + prod);
          for (size_t d = sum_dims.size(); d-- > 0;) {
            for (size_t i = 0; i < n_in; ++i) off[i] += sum_stride[i][d];
            if (++sidx[d] < sum_dims[d]) break;
            for (size_t i = 0; i < n_in; ++i) off[i] -= sum_stride[i][d] * sum_dims[d];
            sidx[d] = 0;
          }
        }
        yp[o] = acc;
      }
    });
    out.finish();
  });
  if (!ok) return ctx.error(StatusCode::kUnsupported, "dtype ", dtype_name(ins[0]->dtype), " is not supported");
  return Status::ok();
}

// ---- Det ------------------------------------------------------------------------------------

Status kernel_Det(OpContext& ctx) {
  const TensorView* x = ctx.input(0);
  if (!x) return ctx.error(StatusCode::kInvalidArgument, "expects input X");
  const size_t r = x->dims.size();
  if (r < 2 || x->dims[r - 1] != x->dims[r - 2])
    return ctx.error(StatusCode::kInvalidArgument, "X must be [*, M, M], got ", dims_string(x->dims));
  if (!dtype_is_float(x->dtype) || !visit_dtype<kFloatTypes>(x->dtype, [](auto) {}))
    return ctx.error(StatusCode::kUnsupported, "dtype ", dtype_name(x->dtype), " is not supported");
  const int64_t n = x->dims[r - 1];
  std::vector<int64_t> out_dims(x->dims.begin(), x->dims.end() - 2);
  TensorView* y = nullptr;
  CUVIL_RETURN_IF_ERROR(ctx.allocate_output(0, x->dtype, out_dims, &y));
  std::vector<double> xbuf;
  const double* xp = compute_data<double>(*x, &xbuf);
  ComputeOutput<double> out(y);
  const int64_t batches = y->numel();
  std::vector<double> m(static_cast<size_t>(n * n));
  for (int64_t b = 0; b < batches; ++b) {
    std::copy(xp + b * n * n, xp + (b + 1) * n * n, m.begin());
    double det = 1.0;
    for (int64_t c = 0; c < n; ++c) {
      int64_t piv = c;
      for (int64_t i = c + 1; i < n; ++i)
        if (std::fabs(m[i * n + c]) > std::fabs(m[piv * n + c])) piv = i;
      if (m[piv * n + c] == 0.0) {
        det = 0.0;
        break;
      }
      if (piv != c) {
        for (int64_t j = 0; j < n; ++j) std::swap(m[c * n + j], m[piv * n + j]);
        det = -det;
      }
      det *= m[c * n + c];
      for (int64_t i = c + 1; i < n; ++i) {
        const double f = m[i * n + c] / m[c * n + c];
        for (int64_t j = c; j < n; ++j) m[i * n + j] -= f * m[c * n + j];
      }
    }
    out.data()[b] = det;
  }
  out.finish();
  return Status::ok();
}

}  // namespace cuvil::rt::ops
