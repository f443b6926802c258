// The float32 GEMM and GEMV (gemm() of kernel_util.h for float, gemm_block_f32 of
// gemm_micro.h): micro kernels per kernel path, each written with intrinsics inside functions
// marked __attribute__((target(...))) so that the library needs no global -m flags and an AVX2
// machine never executes an AVX-512 instruction (the path comes from active_cpu_path()): AVX-512
// 14 x 32, AVX2+FMA 6 x 16, portable 4 x 8 (GCC vector extensions), each with 1-4 row tiles
// for short row groups. The blocking (GotoBLAS order: b packed in panels, an mc x kc block of a
// packed per task and kept in L2, a kc x nr panel of b in L1 across the a groups) is one
// function of the tile shape and cache sizes, so the AVX2 and portable paths exercise the code
// the AVX-512 path runs. Products of at most kGemvMaxRows rows take a GEMV that streams b once,
// split over N. A b operand that is a weight of a loaded package is packed once per package and
// kernel path (packed_weights.h), anything else once per call; the block loop prefetches the
// panel it reads next (a large weight's panels come from DRAM). Threads split (row block,
// column chunk) tasks; every output element's reduction order is fixed by the depth blocking
// alone, so 1 and N threads agree bitwise.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/cpu/ops/gemm_micro.h"
#include "runtime/cpu/ops/gemm_small.h"
#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/ops/packed_weights.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CUVIL_X86_KERNELS 1
#define CUVIL_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define CUVIL_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#else
#define CUVIL_X86_KERNELS 0
#endif

namespace cuvil::rt::ops {
namespace {

// ---- the tile epilogue --------------------------------------------------------------------

// A partial tile (rows < mr or cols < nr): the accumulators went to buf[mr][nr] first.
inline void store_partial(const float* buf, int64_t nr, float* c, int64_t ldc, int64_t rows,
                          int64_t cols, bool first, float beta) {
  for (int64_t r = 0; r < rows; ++r) {
    float* crow = c + r * ldc;
    const float* t = buf + r * nr;
    if (!first) {
      for (int64_t j = 0; j < cols; ++j) crow[j] += t[j];
    } else if (beta == 0.f) {
      for (int64_t j = 0; j < cols; ++j) crow[j] = t[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) crow[j] = beta * crow[j] + t[j];
    }
  }
}

// ---- portable: 4 x 8 in GCC vector extensions of 16 bytes (SSE2 on x86-64, NEON on Arm):
// eight accumulators, two loads of b and four broadcasts per step fit 16 registers ----------

typedef float V4 __attribute__((vector_size(16)));
typedef float V8 __attribute__((vector_size(32)));

// A broadcast (V{} + x would compute 0 + x per lane, which turns -0 into +0).
// Written through a pointer: a wide vector returned by value from a function compiled for the
// baseline target would change the ABI.
template <typename V> inline __attribute__((always_inline)) void splat(V* v, float x) {
  float lanes[sizeof(V) / sizeof(float)];
  for (float& l : lanes) l = x;
  std::memcpy(v, lanes, sizeof(V));
}

void tile_portable(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                   int64_t rows, int64_t cols, bool first, float beta) {
  constexpr int64_t MR = 4, NR = 8;
  // Named accumulators so that they stay in registers (an indexed array does not at -O2).
  V4 c00 = V4{}, c01 = V4{}, c10 = V4{}, c11 = V4{}, c20 = V4{}, c21 = V4{}, c30 = V4{},
     c31 = V4{};
  for (int64_t p = 0; p < kc; ++p) {
    V4 b0, b1;
    std::memcpy(&b0, b + p * NR, sizeof(V4));
    std::memcpy(&b1, b + p * NR + 4, sizeof(V4));
    const float* a4 = a + p * MR;
    V4 a0 = V4{}, a1 = V4{}, a2 = V4{}, a3 = V4{};
    splat(&a0, a4[0]);
    splat(&a1, a4[1]);
    splat(&a2, a4[2]);
    splat(&a3, a4[3]);
    c00 += a0 * b0;
    c01 += a0 * b1;
    c10 += a1 * b0;
    c11 += a1 * b1;
    c20 += a2 * b0;
    c21 += a2 * b1;
    c30 += a3 * b0;
    c31 += a3 * b1;
  }
  alignas(64) float buf[MR * NR];
  const V4 acc[MR * 2] = {c00, c01, c10, c11, c20, c21, c30, c31};
  std::memcpy(buf, acc, sizeof(buf));
  store_partial(buf, NR, c, ldc, rows, cols, first, beta);
}

template <int R>
void rows_portable(int64_t kc, const float* a, int64_t a_stride, const float* b, float* c,
                   int64_t ldc, int64_t cols, bool first, float beta) {
  constexpr int64_t NR = 8;
  V4 x[R], y[R];
  for (int r = 0; r < R; ++r) x[r] = y[r] = V4{};
  for (int64_t p = 0; p < kc; ++p) {
    V4 b0, b1;
    std::memcpy(&b0, b + p * NR, sizeof(V4));
    std::memcpy(&b1, b + p * NR + 4, sizeof(V4));
    const float* ap = a + p * a_stride;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      V4 ar = V4{};
      splat(&ar, ap[r]);
      x[r] += ar * b0;
      y[r] += ar * b1;
    }
  }
  alignas(64) float buf[R * NR];
  for (int r = 0; r < R; ++r) {
    std::memcpy(buf + r * NR, &x[r], sizeof(V4));
    std::memcpy(buf + r * NR + 4, &y[r], sizeof(V4));
  }
  store_partial(buf, NR, c, ldc, R, cols, first, beta);
}

#if CUVIL_X86_KERNELS

// ---- AVX2 + FMA: 6 x 16, 12 ymm accumulators, a broadcast, two loads of b per step --------

CUVIL_TARGET_AVX2 void tile_avx2(int64_t kc, const float* a, const float* b, float* c,
                                 int64_t ldc, int64_t rows, int64_t cols, bool first,
                                 float beta) {
  constexpr int64_t MR = 6, NR = 16;
  // The c tile is read only after the depth loop: ask for it now so that the loop hides the
  // latency (c rows are ldc apart; a tile row is two cache lines at most).
  for (int64_t r = 0; r < rows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + NR - 1), _MM_HINT_T0);
  }
#define CUVIL_Z(r) __m256 c##r##x = _mm256_setzero_ps(), c##r##y = _mm256_setzero_ps();
  CUVIL_Z(0) CUVIL_Z(1) CUVIL_Z(2) CUVIL_Z(3) CUVIL_Z(4) CUVIL_Z(5)
#undef CUVIL_Z
#define CUVIL_F(r)                                    \
  {                                                   \
    const __m256 ar = _mm256_broadcast_ss(a + (r));   \
    c##r##x = _mm256_fmadd_ps(ar, b0, c##r##x);       \
    c##r##y = _mm256_fmadd_ps(ar, b1, c##r##y);       \
  }
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    CUVIL_F(0) CUVIL_F(1) CUVIL_F(2) CUVIL_F(3) CUVIL_F(4) CUVIL_F(5)
    a += MR;
    b += NR;
  }
#undef CUVIL_F
  const __m256 acc[MR][2] = {{c0x, c0y}, {c1x, c1y}, {c2x, c2y},
                             {c3x, c3y}, {c4x, c4y}, {c5x, c5y}};
  if (rows == MR && cols == NR) {
    const __m256 vb = _mm256_set1_ps(beta);
    for (int64_t r = 0; r < MR; ++r) {
      float* cr = c + r * ldc;
      __m256 x0 = acc[r][0], x1 = acc[r][1];
      if (!first) {
        x0 = _mm256_add_ps(_mm256_loadu_ps(cr), x0);
        x1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), x1);
      } else if (beta != 0.f) {
        x0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr), x0);
        x1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr + 8), x1);
      }
      _mm256_storeu_ps(cr, x0);
      _mm256_storeu_ps(cr + 8, x1);
    }
    return;
  }
  alignas(64) float buf[MR * NR];
  for (int64_t r = 0; r < MR; ++r) {
    _mm256_store_ps(buf + r * NR, acc[r][0]);
    _mm256_store_ps(buf + r * NR + 8, acc[r][1]);
  }
  store_partial(buf, NR, c, ldc, rows, cols, first, beta);
}

template <int R>
CUVIL_TARGET_AVX2 void rows_avx2(int64_t kc, const float* a, int64_t a_stride, const float* b,
                                 float* c, int64_t ldc, int64_t cols, bool first, float beta) {
  constexpr int64_t NR = 16;
  __m256 x[R], y[R];
  for (int r = 0; r < R; ++r) x[r] = y[r] = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b + p * NR), b1 = _mm256_loadu_ps(b + p * NR + 8);
    const float* ap = a + p * a_stride;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 ar = _mm256_broadcast_ss(ap + r);
      x[r] = _mm256_fmadd_ps(ar, b0, x[r]);
      y[r] = _mm256_fmadd_ps(ar, b1, y[r]);
    }
  }
  alignas(64) float buf[R * NR];
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(buf + r * NR, x[r]);
    _mm256_store_ps(buf + r * NR + 8, y[r]);
  }
  store_partial(buf, NR, c, ldc, R, cols, first, beta);
}

// ---- AVX-512: 14 x 32, 28 zmm accumulators, a broadcast, two loads of b per step ----------

CUVIL_TARGET_AVX512 void tile_avx512(int64_t kc, const float* a, const float* b, float* c,
                                     int64_t ldc, int64_t rows, int64_t cols, bool first,
                                     float beta) {
  constexpr int64_t MR = 14, NR = 32;
  for (int64_t r = 0; r < rows; ++r) {  // the c tile, as in tile_avx2
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + NR - 1), _MM_HINT_T0);
  }
#define CUVIL_Z(r) __m512 c##r##x = _mm512_setzero_ps(), c##r##y = _mm512_setzero_ps();
  CUVIL_Z(0) CUVIL_Z(1) CUVIL_Z(2) CUVIL_Z(3) CUVIL_Z(4) CUVIL_Z(5) CUVIL_Z(6)
  CUVIL_Z(7) CUVIL_Z(8) CUVIL_Z(9) CUVIL_Z(10) CUVIL_Z(11) CUVIL_Z(12) CUVIL_Z(13)
#undef CUVIL_Z
#define CUVIL_F(r)                                    \
  {                                                   \
    const __m512 ar = _mm512_set1_ps(a[r]);           \
    c##r##x = _mm512_fmadd_ps(ar, b0, c##r##x);       \
    c##r##y = _mm512_fmadd_ps(ar, b1, c##r##y);       \
  }
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    CUVIL_F(0) CUVIL_F(1) CUVIL_F(2) CUVIL_F(3) CUVIL_F(4) CUVIL_F(5) CUVIL_F(6)
    CUVIL_F(7) CUVIL_F(8) CUVIL_F(9) CUVIL_F(10) CUVIL_F(11) CUVIL_F(12) CUVIL_F(13)
    a += MR;
    b += NR;
  }
#undef CUVIL_F
  const __m512 acc[MR][2] = {{c0x, c0y},   {c1x, c1y},   {c2x, c2y},   {c3x, c3y},
                             {c4x, c4y},   {c5x, c5y},   {c6x, c6y},   {c7x, c7y},
                             {c8x, c8y},   {c9x, c9y},   {c10x, c10y}, {c11x, c11y},
                             {c12x, c12y}, {c13x, c13y}};
  if (rows == MR && cols == NR) {
    const __m512 vb = _mm512_set1_ps(beta);
    for (int64_t r = 0; r < MR; ++r) {
      float* cr = c + r * ldc;
      __m512 x0 = acc[r][0], x1 = acc[r][1];
      if (!first) {
        x0 = _mm512_add_ps(_mm512_loadu_ps(cr), x0);
        x1 = _mm512_add_ps(_mm512_loadu_ps(cr + 16), x1);
      } else if (beta != 0.f) {
        x0 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(cr), x0);
        x1 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(cr + 16), x1);
      }
      _mm512_storeu_ps(cr, x0);
      _mm512_storeu_ps(cr + 16, x1);
    }
    return;
  }
  alignas(64) float buf[MR * NR];
  for (int64_t r = 0; r < MR; ++r) {
    _mm512_store_ps(buf + r * NR, acc[r][0]);
    _mm512_store_ps(buf + r * NR + 16, acc[r][1]);
  }
  store_partial(buf, NR, c, ldc, rows, cols, first, beta);
}

template <int R>
CUVIL_TARGET_AVX512 void rows_avx512(int64_t kc, const float* a, int64_t a_stride,
                                     const float* b, float* c, int64_t ldc, int64_t cols,
                                     bool first, float beta) {
  constexpr int64_t NR = 32;
  __m512 x[R], y[R];
  for (int r = 0; r < R; ++r) x[r] = y[r] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_loadu_ps(b + p * NR), b1 = _mm512_loadu_ps(b + p * NR + 16);
    const float* ap = a + p * a_stride;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(ap[r]);
      x[r] = _mm512_fmadd_ps(ar, b0, x[r]);
      y[r] = _mm512_fmadd_ps(ar, b1, y[r]);
    }
  }
  alignas(64) float buf[R * NR];
  for (int r = 0; r < R; ++r) {
    _mm512_store_ps(buf + r * NR, x[r]);
    _mm512_store_ps(buf + r * NR + 16, y[r]);
  }
  store_partial(buf, NR, c, ldc, R, cols, first, beta);
}

#endif  // CUVIL_X86_KERNELS

const GemmMicroKernel kPortable{CpuPath::Portable, 4, 8, tile_portable,
                                {rows_portable<1>, rows_portable<2>, rows_portable<3>, nullptr}};
#if CUVIL_X86_KERNELS
const GemmMicroKernel kAvx2{CpuPath::Avx2, 6, 16, tile_avx2,
                            {rows_avx2<1>, rows_avx2<2>, rows_avx2<3>, rows_avx2<4>}};
const GemmMicroKernel kAvx512{CpuPath::Avx512, 14, 32, tile_avx512,
                              {rows_avx512<1>, rows_avx512<2>, rows_avx512<3>, rows_avx512<4>}};
#endif

// ---- cache sizes ----------------------------------------------------------------------------

struct CacheSizes {
  int64_t l1 = 32 << 10, l2 = 1 << 20;
};

const CacheSizes& cache_sizes() {
  static const CacheSizes sizes = [] {
    CacheSizes s;
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
    // sysconf answers 0 or -1 where the kernel does not say (some VMs): keep the defaults then.
    const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l1 >= (16 << 10) && l1 <= (1 << 20)) s.l1 = l1;
    if (l2 >= (128 << 10) && l2 <= (64 << 20)) s.l2 = l2;
#endif
    return s;
  }();
  return sizes;
}

}  // namespace

const GemmMicroKernel& gemm_micro_kernel(CpuPath path) {
#if CUVIL_X86_KERNELS
  if (path == CpuPath::Avx512 && cpu_path_supported(CpuPath::Avx512)) return kAvx512;
  if (path != CpuPath::Portable && cpu_path_supported(CpuPath::Avx2)) return kAvx2;
#endif
  (void)path;
  return kPortable;
}

const GemmMicroKernel& gemm_micro_kernel() { return gemm_micro_kernel(active_cpu_path()); }

GemmBlocking gemm_blocking_for(int64_t mr, int64_t nr, int64_t l1_bytes, int64_t l2_bytes) {
  GemmBlocking bl;
  // The b micro-panel (kc x nr floats) as large as L1; kc a multiple of 16 between 64 and
  // 512. A deeper block amortises the c tile's load and store over more multiply-adds; the a
  // micro-panel streams from L2 and the b panel's lines that L1 drops come back from L2
  // faster than the c traffic they save: on the AVX-512 path (14 x 32, L1 48 KiB) kc 384
  // measured 8-10% faster than kc 192 (b in half of L1) in one run, alternating, 1024^3; the
  // AVX2 path (6 x 16) was the same at 384 and 512 (docs/PERF.md).
  bl.kc = std::clamp<int64_t>(l1_bytes / (nr * 4) / 16 * 16, 64, 512);
  // The a block (mc x kc) in half of L2: each b micro-panel then serves mc / mr groups.
  const int64_t groups = std::clamp<int64_t>(l2_bytes / 2 / (bl.kc * 4) / mr, 1, 1024 / mr + 1);
  bl.mc = groups * mr;
  return bl;
}

namespace {
bool g_blocking_override_set = false;
GemmBlocking g_blocking_override{};
}  // namespace

void set_gemm_blocking_for_testing(const GemmBlocking* blocking) {
  g_blocking_override_set = blocking != nullptr;
  if (blocking) g_blocking_override = *blocking;
}

GemmBlocking gemm_blocking(const GemmMicroKernel& uk) {
  if (g_blocking_override_set) return g_blocking_override;
  const CacheSizes& cs = cache_sizes();
  return gemm_blocking_for(uk.mr, uk.nr, cs.l1, cs.l2);
}

void gemm_block_f32(const GemmMicroKernel& uk, int64_t rows, int64_t kc, int64_t n, int64_t p0,
                    int64_t p1, const float* apack, const float* bpack, int64_t panel_stride,
                    float* c, int64_t ldc, bool first, float beta) {
  const int64_t mr = uk.mr, nr = uk.nr;
  const int64_t groups = (rows + mr - 1) / mr;
  // With several row groups, the panel read next is fetched into L2 while the groups run over
  // this one (from L1): a panel of a large weight comes from DRAM, 4 KiB pages apart from the
  // last, where the hardware prefetchers lose the stream, and the first row group would wait
  // for every line. Spread over the groups, a few lines per group. After the last panel, the
  // next depth block of the first one (what the whole-tensor GEMM and a tile Mma read next).
  // One group (a decode step's row) reads each panel once, as a plain stream: there the
  // prefetches only crowd the memory queues, so none. A prefetch is a hint: it never faults,
  // whatever the address, and changes no result.
  const int64_t panel_lines = groups > 1 ? kc * nr * static_cast<int64_t>(sizeof(float)) / 64 : 0;
  for (int64_t pj = p0; pj < p1; ++pj) {
    const float* bp = bpack + pj * panel_stride;
    const char* next = reinterpret_cast<const char*>(
        pj + 1 < p1 ? bp + panel_stride : bpack + p0 * panel_stride + kc * nr);
    const int64_t j0 = pj * nr;
    const int64_t cols = std::min<int64_t>(nr, n - j0);
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t l = panel_lines * g / groups; l < panel_lines * (g + 1) / groups; ++l)
        __builtin_prefetch(next + l * 64, 0, 2);
      const int64_t rg = std::min<int64_t>(mr, rows - g * mr);
      // A short last group (or a one-row product) runs only its rows, with the same result.
      if (rg < mr && rg <= kGemmRowsTiles && uk.rows_tile[rg - 1])
        uk.rows_tile[rg - 1](kc, apack + g * kc * mr, mr, bp, c + g * mr * ldc + j0, ldc, cols,
                             first, beta);
      else
        uk.tile(kc, apack + g * kc * mr, bp, c + g * mr * ldc + j0, ldc, rg, cols, first, beta);
    }
  }
}

namespace {

// ---- GEMM ---------------------------------------------------------------------------------

// b (op(b) k x n) as panels[panels][k][nr], zero-padded past column n.
void pack_b_panels(bool trans_b, int64_t n, int64_t k, const float* b, int64_t ldb, int64_t nr,
                   float* out, int64_t begin, int64_t end) {
  const int64_t panel_stride = k * nr;
  for (int64_t pj = begin; pj < end; ++pj) {
    float* dst = out + pj * panel_stride;
    const int64_t j0 = pj * nr;
    const int64_t cols = std::min<int64_t>(nr, n - j0);
    if (trans_b) {
      // b is n x k: read each column's depth run contiguously.
      for (int64_t j = 0; j < nr; ++j) {
        if (j >= cols) {
          for (int64_t p = 0; p < k; ++p) dst[p * nr + j] = 0.f;
          continue;
        }
        const float* s = b + (j0 + j) * ldb;
        for (int64_t p = 0; p < k; ++p) dst[p * nr + j] = s[p];
      }
      continue;
    }
    for (int64_t p = 0; p < k; ++p) {
      float* d = dst + p * nr;
      std::memcpy(d, b + p * ldb + j0, static_cast<size_t>(cols) * sizeof(float));
      for (int64_t j = cols; j < nr; ++j) d[j] = 0.f;
    }
  }
}

// alpha * op(a)[i0 .. i0 + rows, k0 .. k0 + kc] as groups of mr rows, zero-padded.
void pack_a_block(bool trans_a, const float* a, int64_t lda, float alpha, int64_t i0,
                  int64_t rows, int64_t k0, int64_t kc, int64_t mr, float* out) {
  for (int64_t g = 0; g * mr < rows; ++g) {
    float* dst = out + g * kc * mr;
    for (int64_t r = 0; r < mr; ++r) {
      const int64_t i = g * mr + r;
      if (i >= rows) {
        for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = 0.f;
        continue;
      }
      if (trans_a) {
        for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = alpha * a[(k0 + p) * lda + i0 + i];
      } else {
        const float* s = a + (i0 + i) * lda + k0;
        for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = alpha * s[p];
      }
    }
  }
}

}  // namespace

PackedWeights gemm_weight_panels(const GemmMicroKernel& uk, const float* b, bool trans_b,
                                 int64_t k, int64_t n, int64_t ldb) {
  const PackedPanelsKey key{b, trans_b, k, n, ldb, uk.nr};
  return packed_weight_panels(
      key,
      [](const PackedPanelsKey& key, float* out, void*) {
        pack_b_panels(key.trans_b, key.n, key.k, key.b, key.ldb, key.nr, out, 0,
                      (key.n + key.nr - 1) / key.nr);
      },
      nullptr);
}

namespace {

void gemm_packed(OpContext* ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                 float beta, float* c, int64_t ldc) {
  const GemmMicroKernel& uk = gemm_micro_kernel();
  const GemmBlocking bl = gemm_blocking(uk);
  const int64_t nr = uk.nr, mr = uk.mr;
  const int64_t panels = (n + nr - 1) / nr;
  const int64_t panel_stride = k * nr;
  const int threads = ctx ? ctx->threads() : 1;
  // A weight of a loaded package is packed once, on first use, and shared (packed_weights.h);
  // anything else is packed per call.
  const PackedWeights cached =
      gemm_weight_panels(uk, b, trans_b, k, n, ldb);
  // The pack buffers are not value-initialised: the packing writes every element, zero padding
  // included, and a memset of them would cost as much as the packing.
  std::unique_ptr<float[]> bpack_local;
  if (!cached) {
    bpack_local.reset(new float[static_cast<size_t>(panels * panel_stride)]);
    auto pack_b = [&](int64_t begin, int64_t end) {
      pack_b_panels(trans_b, n, k, b, ldb, nr, bpack_local.get(), begin, end);
    };
    if (ctx && threads > 1) parallel_range(*ctx, panels, 4, pack_b);
    else pack_b(0, panels);
  }
  const float* bpack = cached ? cached->data() : bpack_local.get();

  // Tasks: (row block, column chunk). Rows split first (each thread packs only its own rows of
  // a, and every thread streams the shared packed b): mc is at most an equal share of m per
  // thread. When there are fewer row blocks than threads the columns split too, into chunks of
  // whole panels. No split changes a sum's order (that is fixed by the depth blocks alone), so
  // 1 and N threads agree bitwise.
  auto round_up = [&](int64_t x) { return (x + mr - 1) / mr * mr; };
  int64_t mc = std::min(bl.mc, round_up(m));
  if (threads > 1) mc = std::min(mc, round_up((m + threads - 1) / threads));
  const int64_t mblocks = (m + mc - 1) / mc;
  int64_t nchunks = 1;
  if (threads > 1 && mblocks < threads)
    nchunks = std::min<int64_t>(panels, (threads + mblocks - 1) / mblocks);
  const int64_t panels_per_chunk = (panels + nchunks - 1) / nchunks;
  // Depth blocks of equal size (k = 1024 with kc 192 is 6 blocks of 171 or 170, not five of
  // 192 and one of 64, whose c update would cost as much as a full block's).
  const int64_t kblocks = (k + bl.kc - 1) / bl.kc;
  const int64_t kc_even = (k + kblocks - 1) / kblocks;
  auto task = [&](int64_t begin, int64_t end) {
    std::unique_ptr<float[]> apack_buf(new float[static_cast<size_t>(mc * kc_even)]);
    float* const apack = apack_buf.get();
    for (int64_t t = begin; t < end; ++t) {
      const int64_t mb = t / nchunks, nc = t % nchunks;
      const int64_t i0 = mb * mc, rows = std::min<int64_t>(mc, m - i0);
      const int64_t p0 = nc * panels_per_chunk;
      const int64_t p1 = std::min<int64_t>(panels, p0 + panels_per_chunk);
      if (p0 >= p1) continue;
      for (int64_t k0 = 0; k0 < k; k0 += kc_even) {
        const int64_t kc = std::min<int64_t>(kc_even, k - k0);
        pack_a_block(trans_a, a, lda, alpha, i0, rows, k0, kc, mr, apack);
        gemm_block_f32(uk, rows, kc, n, p0, p1, apack, bpack + k0 * nr,
                       panel_stride, c + i0 * ldc, ldc, k0 == 0, beta);
      }
    }
  };
  const int64_t tasks = mblocks * nchunks;
  if (ctx && tasks > 1) parallel_range(*ctx, tasks, 1, task);
  else task(0, tasks);
}

// ---- GEMV (m <= kGemvMaxRows) ---------------------------------------------------------------

// Columns per GEMV work item: between kGemvMinCols and kGemvMaxCols, multiples of 64 (every
// path's vector width divides it). The item's accumulators (rows x cols floats, 16 KiB at most)
// stay in L1 while b streams through.
constexpr int64_t kGemvMinCols = 64;
constexpr int64_t kGemvMaxCols = 1024;

// b not transposed (k x n, row stride ldb): acc[i][0 .. cols) = sum over p of a[i][p] *
// b[p][j0 + j] for M rows of (alpha-scaled, contiguous) a. Each row of b is read once, as one
// contiguous run of cols floats (the hardware prefetchers follow it; a narrow column strip
// down all k rows would touch a new page per row). The sum runs over p in order for every
// element, whatever the chunk width.
template <typename V, int M>
inline __attribute__((always_inline)) void gemv_rows_block(int64_t k, const float* a,
                                                           const float* b, int64_t ldb,
                                                           int64_t cols, float* acc,
                                                           int64_t acc_stride) {
  constexpr int64_t L = static_cast<int64_t>(sizeof(V) / sizeof(float));
  const int64_t cv = cols / L * L;
  for (int i = 0; i < M; ++i)
    for (int64_t j = 0; j < cols; ++j) acc[i * acc_stride + j] = 0.f;
  for (int64_t p = 0; p < k; ++p) {
    const float* br = b + p * ldb;
    float as[M];
    V av[M] = {};
    for (int i = 0; i < M; ++i) {
      as[i] = a[i * k + p];
      splat(&av[i], as[i]);
    }
    for (int64_t j = 0; j < cv; j += L) {
      V bv;
      std::memcpy(&bv, br + j, sizeof(V));
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) {
        V t;
        float* dst = acc + i * acc_stride + j;
        std::memcpy(&t, dst, sizeof(V));
        t += av[i] * bv;
        std::memcpy(dst, &t, sizeof(V));
      }
    }
    for (int64_t j = cv; j < cols; ++j)
      for (int i = 0; i < M; ++i) acc[i * acc_stride + j] += as[i] * br[j];
  }
}

// b transposed (n x k): y[i][j] = dot(a[i], b[j]) over contiguous depth, for J columns at once;
// lanes reduce in a fixed order, then the depth tail.
template <typename V, int M, int J>
inline __attribute__((always_inline)) void gemv_dots(int64_t k, const float* a, const float* b,
                                                     int64_t ldb, float* out /* [M][J] */) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  V s[M][J];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < J; ++j) s[i][j] = V{};
  const int64_t kv = k / L * L;
  for (int64_t p = 0; p < kv; p += L) {
    V bv[J];
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) std::memcpy(&bv[j], b + j * ldb + p, sizeof(V));
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) {
      V av;
      std::memcpy(&av, a + i * k + p, sizeof(V));
#pragma GCC unroll 4
      for (int j = 0; j < J; ++j) s[i][j] += av * bv[j];
    }
  }
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < J; ++j) {
      float lanes[L];
      std::memcpy(lanes, &s[i][j], sizeof(V));
      float t = 0.f;
      for (int l = 0; l < L; ++l) t += lanes[l];
      for (int64_t p = kv; p < k; ++p) t += a[i * k + p] * b[j * ldb + p];
      out[i * J + j] = t;
    }
}

inline void gemv_store(const float* acc, int64_t acc_stride, int64_t m, int64_t cols, float beta,
                       float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* cr = c + i * ldc;
    const float* t = acc + i * acc_stride;
    if (beta == 0.f) {
      for (int64_t j = 0; j < cols; ++j) cr[j] = t[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) cr[j] = beta * cr[j] + t[j];
    }
  }
}

// Column items [begin, end) of cw columns; a is m x k, contiguous, alpha applied.
template <typename V, int M>
inline __attribute__((always_inline)) void gemv_body(bool trans_b, int64_t n, int64_t k,
                                                     const float* a, const float* b, int64_t ldb,
                                                     float beta, float* c, int64_t ldc,
                                                     int64_t cw, int64_t begin, int64_t end) {
  alignas(64) float acc[M * kGemvMaxCols];
  for (int64_t item = begin; item < end; ++item) {
    const int64_t j0 = item * cw, cols = std::min<int64_t>(cw, n - j0);
    if (!trans_b) {
      gemv_rows_block<V, M>(k, a, b + j0, ldb, cols, acc, cw);
    } else {
      constexpr int J = M <= 2 ? 4 : 2;
      float out[M * J];
      int64_t j = 0;
      for (; j + J <= cols; j += J) {
        gemv_dots<V, M, J>(k, a, b + (j0 + j) * ldb, ldb, out);
        for (int i = 0; i < M; ++i)
          for (int jj = 0; jj < J; ++jj) acc[i * cw + j + jj] = out[i * J + jj];
      }
      for (; j < cols; ++j) {
        gemv_dots<V, M, 1>(k, a, b + (j0 + j) * ldb, ldb, out);
        for (int i = 0; i < M; ++i) acc[i * cw + j] = out[i];
      }
    }
    gemv_store(acc, cw, M, cols, beta, c + j0, ldc);
  }
}

using GemvFn = void (*)(bool, int64_t, int64_t, const float*, const float*, int64_t, float,
                        float*, int64_t, int64_t, int64_t, int64_t);

template <int M>
void gemv_portable(bool tb, int64_t n, int64_t k, const float* a, const float* b, int64_t ldb,
                   float beta, float* c, int64_t ldc, int64_t cw, int64_t begin, int64_t end) {
  gemv_body<V4, M>(tb, n, k, a, b, ldb, beta, c, ldc, cw, begin, end);
}

#if CUVIL_X86_KERNELS
template <int M>
CUVIL_TARGET_AVX2 void gemv_avx2(bool tb, int64_t n, int64_t k, const float* a, const float* b,
                                 int64_t ldb, float beta, float* c, int64_t ldc, int64_t cw,
                                 int64_t begin, int64_t end) {
  gemv_body<V8, M>(tb, n, k, a, b, ldb, beta, c, ldc, cw, begin, end);
}
template <int M>
CUVIL_TARGET_AVX512 void gemv_avx512(bool tb, int64_t n, int64_t k, const float* a,
                                     const float* b, int64_t ldb, float beta, float* c,
                                     int64_t ldc, int64_t cw, int64_t begin, int64_t end) {
  typedef float V16 __attribute__((vector_size(64)));
  gemv_body<V16, M>(tb, n, k, a, b, ldb, beta, c, ldc, cw, begin, end);
}
#endif

template <int M> GemvFn gemv_fn(CpuPath path) {
#if CUVIL_X86_KERNELS
  if (path == CpuPath::Avx512) return gemv_avx512<M>;
  if (path == CpuPath::Avx2) return gemv_avx2<M>;
#endif
  return gemv_portable<M>;
}

void gemv(OpContext* ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
          float* c, int64_t ldc) {
  // alpha * op(a), contiguous (m x k, small).
  std::vector<float> as(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) as[i * k + p] = alpha * a_at(a, lda, trans_a, i, p);
  const CpuPath path = gemm_micro_kernel().path;
  GemvFn fn = nullptr;
  switch (m) {
    case 1: fn = gemv_fn<1>(path); break;
    case 2: fn = gemv_fn<2>(path); break;
    case 3: fn = gemv_fn<3>(path); break;
    default: fn = gemv_fn<4>(path); break;
  }
  // Items of cw columns: about four per thread (for balance on a loaded machine), each as wide
  // as that allows up to kGemvMaxCols. The width never changes a sum's order.
  const int threads = ctx ? ctx->threads() : 1;
  const int64_t units = (n + kGemvMinCols - 1) / kGemvMinCols;
  const int64_t per_item = std::clamp<int64_t>(units / (4 * threads), 1, kGemvMaxCols / kGemvMinCols);
  const int64_t cw = per_item * kGemvMinCols;
  const int64_t items = (n + cw - 1) / cw;
  auto body = [&](int64_t begin, int64_t end) {
    fn(trans_b, n, k, as.data(), b, ldb, beta, c, ldc, cw, begin, end);
  };
  if (ctx && threads > 1 && items > 1 && n * k >= (1 << 16)) parallel_range(*ctx, items, 1, body);
  else body(0, items);
}

}  // namespace

void gemm(OpContext* ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
          float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    gemm_small(false, false, m, n, 0, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m * n * k <= kSmallGemm) {
    gemm_small(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m <= kGemvMaxRows) {
    gemv(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  gemm_packed(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace cuvil::rt::ops
