// The 8-bit integer GEMM (gemm_int8.h): one micro kernel per kernel path, each templated on
// its row count so that short row groups and GEMV-sized products (m <= kInt8GemvMaxRows) do
// no work for padding rows; the blocking of the float32 GEMM (GotoBLAS order: b packed in
// panels over the whole depth, an mc x kc block of a packed per task, a kc x nr panel of b
// reused across the block's row groups); and the zero-point and epilogue arithmetic.
//
// Layouts (the same for every path, nr differs): b as panels of nr columns, depth grouped by
// four, bpack[panel][k / 4][nr][4] int8 (zero past k and past column n), then colsum[panels *
// nr] int32, the column sums of the packed b (for the za term). a per row group of mr rows as
// apack[k / 4][mr][4] uint8 (VNNI) or int16 (AVX2, portable: widened once at packing instead
// of once per product). Each 4-byte group is one vpdpbusd lane.
//
// Paths: AVX-512 VNNI 14 x 32 (28 zmm accumulators, vpdpbusd with a broadcast a group); AVX2
// 4 x 8 (b widened to int16 with vpmovsxbw, vpmaddwd: every pair sum is at most 2 * 255 * 128
// in magnitude, so nothing saturates, unlike vpmaddubsw whose int16 pair sum of 255 * 127 * 2
// would; the pairs are folded with vphaddd at the end); portable 4 x 4 (SSE2 pmaddwd on
// x86-64, plain C++ elsewhere). The accumulators wrap modulo 2^32 like the reference, so all
// paths agree bitwise.
#include "runtime/cpu/ops/gemm_int8.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "runtime/cpu/ops/kernel_util.h"
#include "runtime/cpu/ops/packed_weights.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CUVIL_X86_KERNELS 1
#define CUVIL_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define CUVIL_TARGET_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")))
#else
#define CUVIL_X86_KERNELS 0
#endif

namespace cuvil::rt::ops {
namespace {

// acc[R][nr] (row stride ldc, int32) = (first ? 0 : acc) + sum over kc4 depth groups of the
// packed a rows (a_stride elements apart per depth group) times the packed b panel.
using Int8TileFn = void (*)(int64_t kc4, const void* a, int64_t a_stride, const int8_t* b,
                            int32_t* c, int64_t ldc, bool first);

constexpr int kMaxMr = 14;

struct Int8Kernel {
  int id;  // distinguishes the packed weight forms
  const char* name;
  int64_t mr, nr;
  bool a_int16;  // a packed as int16 (AVX2) or uint8
  Int8TileFn tiles[kMaxMr];  // tiles[R - 1] for R = 1 .. mr
};

// ---- portable: 4 x 4 over int16 pair sums ---------------------------------------------------
// a packed as int16. With SSE2 (the x86-64 baseline: no target attribute needed) pmaddwd sums
// two products of magnitude <= 255 * 128 into int32, as the AVX2 kernel does on half the
// width; elsewhere plain C++ loops compute the same sums.

template <int R>
void tile_portable(int64_t kc4, const void* av, int64_t a_stride, const int8_t* b, int32_t* c,
                   int64_t ldc, bool first) {
  constexpr int NR = 4;
  const int16_t* a = static_cast<const int16_t*>(av);
#if defined(__SSE2__)
  // x: columns 0-1, y: columns 2-3, each as two partial sums (depth pairs 0-1, 2-3).
  __m128i x[R], y[R];
  for (int r = 0; r < R; ++r) x[r] = y[r] = _mm_setzero_si128();
  for (int64_t p = 0; p < kc4; ++p) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + p * NR * 4));
    // int8 -> int16 by unpacking with itself and an arithmetic shift.
    const __m128i b0 = _mm_srai_epi16(_mm_unpacklo_epi8(raw, raw), 8);
    const __m128i b1 = _mm_srai_epi16(_mm_unpackhi_epi8(raw, raw), 8);
    const int16_t* ap = a + p * a_stride;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      long long g;
      std::memcpy(&g, ap + r * 4, sizeof(g));
      const __m128i ar = _mm_set1_epi64x(g);
      x[r] = _mm_add_epi32(x[r], _mm_madd_epi16(ar, b0));
      y[r] = _mm_add_epi32(y[r], _mm_madd_epi16(ar, b1));
    }
  }
  for (int r = 0; r < R; ++r) {
    // [x0+x1, x2+x3, y0+y1, y2+y3] without SSSE3's phaddd.
    const __m128 xf = _mm_castsi128_ps(x[r]), yf = _mm_castsi128_ps(y[r]);
    const __m128i even = _mm_castps_si128(_mm_shuffle_ps(xf, yf, _MM_SHUFFLE(2, 0, 2, 0)));
    const __m128i odd = _mm_castps_si128(_mm_shuffle_ps(xf, yf, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m128i s = _mm_add_epi32(even, odd);
    __m128i* dst = reinterpret_cast<__m128i*>(c + r * ldc);
    _mm_storeu_si128(dst, first ? s : _mm_add_epi32(_mm_loadu_si128(dst), s));
  }
#else
  uint32_t acc[R][NR] = {};
  for (int64_t p = 0; p < kc4; ++p) {
    const int16_t* ap = a + p * a_stride;
    const int8_t* bp = b + p * NR * 4;
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NR; ++j) {
        int32_t s = 0;
        for (int q = 0; q < 4; ++q) s += int32_t(ap[r * 4 + q]) * int32_t(bp[j * 4 + q]);
        acc[r][j] += static_cast<uint32_t>(s);
      }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NR; ++j) {
      uint32_t* dst = reinterpret_cast<uint32_t*>(c + r * ldc + j);
      *dst = first ? acc[r][j] : *dst + acc[r][j];
    }
#endif
}

#if CUVIL_X86_KERNELS

// ---- AVX2: 4 x 8 over int16 (vpmaddwd) -------------------------------------------------------

#define CUVIL_ROWS4(X) X(0) X(1) X(2) X(3)

template <int R>
CUVIL_TARGET_AVX2 void tile_avx2(int64_t kc4, const void* av, int64_t a_stride, const int8_t* b,
                                 int32_t* c, int64_t ldc, bool first) {
  const int16_t* a = static_cast<const int16_t*>(av);
  // x: columns 0-3, y: columns 4-7, each as two partial sums (depth pairs 0-1, 2-3); named
  // accumulators, as in tile_vnni.
#define CUVIL_Z(r) __m256i x##r = _mm256_setzero_si256(), y##r = _mm256_setzero_si256();
  CUVIL_ROWS4(CUVIL_Z)
#undef CUVIL_Z
#define CUVIL_F(r)                                                 \
  if constexpr ((r) < R) {                                         \
    long long g;                                                   \
    std::memcpy(&g, ap + (r) * 4, sizeof(g));                      \
    const __m256i ar = _mm256_set1_epi64x(g);                      \
    x##r = _mm256_add_epi32(x##r, _mm256_madd_epi16(ar, b0));      \
    y##r = _mm256_add_epi32(y##r, _mm256_madd_epi16(ar, b1));      \
  }
  for (int64_t p = 0; p < kc4; ++p) {
    const int8_t* bp = b + p * 32;
    const __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bp)));
    const __m256i b1 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bp + 16)));
    const int16_t* ap = a + p * a_stride;
    CUVIL_ROWS4(CUVIL_F)
  }
#undef CUVIL_F
  // hadd gives [c0 c1 c4 c5 | c2 c3 c6 c7]; the permute restores column order.
#define CUVIL_S(r)                                                                          \
  if constexpr ((r) < R) {                                                                  \
    const __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(x##r, y##r), 0xD8);        \
    __m256i* dst = reinterpret_cast<__m256i*>(c + (r) * ldc);                               \
    _mm256_storeu_si256(dst, first ? s : _mm256_add_epi32(_mm256_loadu_si256(dst), s));     \
  }
  CUVIL_ROWS4(CUVIL_S)
#undef CUVIL_S
}

// ---- AVX-512 VNNI: 14 x 32 (vpdpbusd) --------------------------------------------------------

// Named accumulators (an array of 28 zmm is kept on the stack by GCC, not in registers); rows
// r >= R compile away.
#define CUVIL_ROWS14(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)

template <int R>
CUVIL_TARGET_VNNI void tile_vnni(int64_t kc4, const void* av, int64_t a_stride, const int8_t* b,
                                 int32_t* c, int64_t ldc, bool first) {
  const uint8_t* a = static_cast<const uint8_t*>(av);
#define CUVIL_Z(r) __m512i x##r = _mm512_setzero_si512(), y##r = _mm512_setzero_si512();
  CUVIL_ROWS14(CUVIL_Z)
#undef CUVIL_Z
#define CUVIL_F(r)                                   \
  if constexpr ((r) < R) {                           \
    int32_t g;                                       \
    std::memcpy(&g, ap + (r) * 4, sizeof(g));        \
    const __m512i ar = _mm512_set1_epi32(g);         \
    x##r = _mm512_dpbusd_epi32(x##r, ar, b0);        \
    y##r = _mm512_dpbusd_epi32(y##r, ar, b1);        \
  }
  for (int64_t p = 0; p < kc4; ++p) {
    const __m512i b0 = _mm512_loadu_si512(b + p * 128);
    const __m512i b1 = _mm512_loadu_si512(b + p * 128 + 64);
    const uint8_t* ap = a + p * a_stride;
    CUVIL_ROWS14(CUVIL_F)
  }
#undef CUVIL_F
#define CUVIL_S(r)                                                                     \
  if constexpr ((r) < R) {                                                             \
    int32_t* dst = c + (r) * ldc;                                                      \
    if (first) {                                                                       \
      _mm512_storeu_si512(dst, x##r);                                                  \
      _mm512_storeu_si512(dst + 16, y##r);                                             \
    } else {                                                                           \
      _mm512_storeu_si512(dst, _mm512_add_epi32(_mm512_loadu_si512(dst), x##r));       \
      _mm512_storeu_si512(dst + 16, _mm512_add_epi32(_mm512_loadu_si512(dst + 16), y##r)); \
    }                                                                                  \
  }
  CUVIL_ROWS14(CUVIL_S)
#undef CUVIL_S
}

#endif  // CUVIL_X86_KERNELS

const Int8Kernel kPortable{0, "portable", 4, 4, true,
                           {tile_portable<1>, tile_portable<2>, tile_portable<3>, tile_portable<4>}};
#if CUVIL_X86_KERNELS
// 4 rows: with 6, GCC hoists the six a broadcasts above the products and spills accumulators.
const Int8Kernel kAvx2{1, "avx2", 4, 8, true,
                       {tile_avx2<1>, tile_avx2<2>, tile_avx2<3>, tile_avx2<4>}};
const Int8Kernel kVnni{2, "avx512-vnni", 14, 32, false,
                       {tile_vnni<1>, tile_vnni<2>, tile_vnni<3>, tile_vnni<4>, tile_vnni<5>,
                        tile_vnni<6>, tile_vnni<7>, tile_vnni<8>, tile_vnni<9>, tile_vnni<10>,
                        tile_vnni<11>, tile_vnni<12>, tile_vnni<13>, tile_vnni<14>}};
#endif

const Int8Kernel& int8_kernel(CpuPath path) {
#if CUVIL_X86_KERNELS
  if (path == CpuPath::Avx512 && cpu_path_supported(CpuPath::Avx512) && cpu_has_avx512_vnni())
    return kVnni;
  if (path != CpuPath::Portable && cpu_path_supported(CpuPath::Avx2)) return kAvx2;
#endif
  (void)path;
  return kPortable;
}

// ---- blocking -------------------------------------------------------------------------------

struct Int8Blocking {
  int64_t kc4;  // depth groups per block
  int64_t mc;   // rows per a block (a multiple of mr)
};

Int8Blocking int8_blocking(const Int8Kernel& uk) {
  static const std::pair<int64_t, int64_t> caches = [] {
    int64_t l1 = 32 << 10, l2 = 1 << 20;
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
    // sysconf answers 0 or -1 where the kernel does not say (some VMs): keep the defaults then.
    const long s1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), s2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (s1 >= (16 << 10) && s1 <= (1 << 20)) l1 = s1;
    if (s2 >= (128 << 10) && s2 <= (64 << 20)) l2 = s2;
#endif
    return std::make_pair(l1, l2);
  }();
  Int8Blocking bl;
  // The b micro-panel (kc4 x nr x 4 bytes) in half of L1, the a block in half of L2, as for
  // float32 (gemm_blocking_for) with byte-sized elements.
  bl.kc4 = std::clamp<int64_t>(caches.first / 2 / (uk.nr * 4), 16, 1024);
  const int64_t a_group_bytes = bl.kc4 * 4 * (uk.a_int16 ? 2 : 1) * uk.mr;
  bl.mc = std::clamp<int64_t>(caches.second / 2 / a_group_bytes, 1, 256 / uk.mr + 1) * uk.mr;
  return bl;
}

// Columns per task chunk: the int32 block of a task (mc x chunk) stays in L2 for the epilogue.
constexpr int64_t kInt8ChunkCols = 256;

// ---- packing --------------------------------------------------------------------------------

inline uint8_t a_value(const Int8GemmArgs& g, int64_t i, int64_t p) {
  const uint8_t* a = static_cast<const uint8_t*>(g.a);
  const uint8_t v = g.trans_a ? a[p * g.lda + i] : a[i * g.lda + p];
  return g.a_signed ? static_cast<uint8_t>(v ^ 0x80) : v;  // int8 x -> x + 128
}

struct PackBArgs {
  const Int8GemmArgs* g;
  int64_t nr, k4, panels;
};

// bpack[panels][k4][nr][4] then colsum[panels * nr].
void pack_b(void* out, void* arg) {
  const PackBArgs& pa = *static_cast<const PackBArgs*>(arg);
  const Int8GemmArgs& g = *pa.g;
  const uint8_t* b = static_cast<const uint8_t*>(g.b);
  const uint8_t flip = g.b_signed ? 0 : 0x80;  // uint8 x -> x - 128
  const int64_t nr = pa.nr, kp = pa.k4 * 4;
  int8_t* dst = static_cast<int8_t*>(out);
  int32_t* colsum = reinterpret_cast<int32_t*>(dst + pa.panels * kp * nr);
  for (int64_t pj = 0; pj < pa.panels; ++pj) {
    int8_t* panel = dst + pj * kp * nr;
    const int64_t j0 = pj * nr, cols = std::min(nr, g.n - j0);
    if (g.trans_b) {
      for (int64_t j = 0; j < nr; ++j) {
        const uint8_t* src = b + (j0 + j) * g.ldb;
        for (int64_t p = 0; p < kp; ++p) {
          // Where depth p lies in the column: p itself, or (segmented) channel e of tap t at
          // e * segments + t, nothing for the padding channels.
          int64_t at = p;
          if (g.b_segment_valid > 0) {
            const int64_t e = p % g.segment_len;
            at = e < g.b_segment_valid ? e * g.a_segments + p / g.segment_len : -1;
          }
          panel[(p >> 2) * nr * 4 + j * 4 + (p & 3)] =
              (j < cols && p < g.k && at >= 0) ? static_cast<int8_t>(src[at] ^ flip) : int8_t{0};
        }
      }
    } else {
      for (int64_t p = 0; p < kp; ++p) {
        int8_t* d = panel + (p >> 2) * nr * 4 + (p & 3);
        const uint8_t* src = b + p * g.ldb + j0;
        for (int64_t j = 0; j < nr; ++j)
          d[j * 4] = (j < cols && p < g.k) ? static_cast<int8_t>(src[j] ^ flip) : int8_t{0};
      }
    }
    for (int64_t j = 0; j < nr; ++j) {
      int32_t sum = 0;
      for (int64_t q = 0; q < pa.k4; ++q)
        for (int64_t e = 0; e < 4; ++e) sum += panel[q * nr * 4 + j * 4 + e];
      colsum[j0 + j] = sum;
    }
  }
}

// One depth group of a packed row from four bytes of a in the uint8 domain (little-endian, the
// first byte first): one 32-bit move for uint8, each byte zero-extended to an int16 lane for
// int16 (the AVX2 and portable kernels' operand).
template <typename E> inline void store_group(E* d, uint32_t w) {
  if constexpr (sizeof(E) == 1) {
    std::memcpy(d, &w, 4);
  } else {
    uint64_t x = w;
    x = (x | x << 16) & 0x0000FFFF0000FFFFull;
    x = (x | x << 8) & 0x00FF00FF00FF00FFull;
    std::memcpy(d, &x, 8);
  }
}

// Rows [i0, i0 + rows) and depth groups [q0, q0 + kc4) of a, as groups of mr rows (rows past
// `rows` in the last group are not written: the tile for that group reads only its rows).
template <typename E>
void pack_a(const Int8GemmArgs& g, int64_t i0, int64_t rows, int64_t q0, int64_t kc4, int64_t mr,
            E* out) {
  const uint8_t* a = static_cast<const uint8_t*>(g.a);
  const uint8_t flip = g.a_signed ? 0x80 : 0;  // int8 x -> x + 128
  const int64_t p0 = q0 * 4, depth = std::min(kc4 * 4, g.k - p0);  // real depth in the block
  for (int64_t gr = 0; gr * mr < rows; ++gr) {
    E* dst = out + gr * kc4 * mr * 4;
    const int64_t rg = std::min(mr, rows - gr * mr), r0 = i0 + gr * mr;
    if (!g.trans_a) {
      for (int64_t r = 0; r < rg; ++r) {
        const uint8_t* src = a + (r0 + r) * g.lda + p0;
        E* d = dst + r * 4;
        int64_t p = 0;
        const uint32_t mask = flip * 0x01010101u;
        for (; p + 4 <= depth; p += 4) {  // whole depth groups as one 32-bit load
          uint32_t w;
          std::memcpy(&w, src + p, 4);
          store_group(d + (p >> 2) * mr * 4, w ^ mask);
        }
        for (; p < depth; ++p) d[(p >> 2) * mr * 4 + (p & 3)] = static_cast<E>(src[p] ^ flip);
        for (; p < kc4 * 4; ++p) d[(p >> 2) * mr * 4 + (p & 3)] = E(0);
      }
    } else {
      // a is k x m: each depth step's rows are contiguous.
      for (int64_t p = 0; p < kc4 * 4; ++p) {
        E* d = dst + (p >> 2) * mr * 4 + (p & 3);
        if (p < depth) {
          const uint8_t* src = a + (p0 + p) * g.lda + r0;
          for (int64_t r = 0; r < rg; ++r) d[r * 4] = static_cast<E>(src[r] ^ flip);
        } else {
          for (int64_t r = 0; r < rg; ++r) d[r * 4] = E(0);
        }
      }
    }
  }
}

// The indirect form of pack_a over the whole depth: run t of row r (ptrs[r * a_segments + t],
// segment_len bytes) is depth groups [t * segment_len / 4, (t + 1) * segment_len / 4).
template <typename E>
void pack_a_indirect(const Int8GemmArgs& g, const uint8_t* const* ptrs, int64_t rows, int64_t k4, int64_t mr,
                     E* out) {
  const uint32_t mask = g.a_signed ? 0x80808080u : 0u;
  const int64_t seg4 = g.segment_len / 4;
  for (int64_t gr = 0; gr * mr < rows; ++gr) {
    E* dst = out + gr * k4 * mr * 4;
    const int64_t rg = std::min(mr, rows - gr * mr);
    for (int64_t r = 0; r < rg; ++r)
      for (int64_t t = 0; t < g.a_segments; ++t) {
        const uint8_t* src = ptrs[(gr * mr + r) * g.a_segments + t];
        E* d = dst + (t * seg4 * mr + r) * 4;
        for (int64_t q = 0; q < seg4; ++q) {
          uint32_t w;
          std::memcpy(&w, src + q * 4, 4);
          store_group(d + q * mr * 4, w ^ mask);
        }
      }
  }
}

template <typename T> inline T saturate_round(float v, int32_t zp) {
  constexpr float lo = std::is_same_v<T, int8_t> ? -128.f : 0.f;
  constexpr float hi = std::is_same_v<T, int8_t> ? 127.f : 255.f;
  float q = std::nearbyint(v) + static_cast<float>(zp);
  q = std::min(std::max(q, lo), hi);
  return static_cast<T>(q);
}

}  // namespace

const char* int8_kernel_name(CpuPath path) { return int8_kernel(path).name; }

void int8_epilogue_column(const Int8Epilogue& ep, int64_t j, const int32_t* acc, int64_t count,
                          void* out, int64_t stride) {
  const float scale = ep.scale ? ep.scale[ep.scale_per_column ? j : 0] : 1.f;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t o = i * stride;
    switch (ep.kind) {
      case Int8Epilogue::Kind::kInt32:
        static_cast<int32_t*>(out)[o] = acc[i];
        break;
      case Int8Epilogue::Kind::kFloat: {
        float f = static_cast<float>(acc[i]) * scale;
        if (ep.bias_f32) f += ep.bias_f32[j];
        static_cast<float*>(out)[o] = f;
        break;
      }
      case Int8Epilogue::Kind::kQuantU8:
      case Int8Epilogue::Kind::kQuantS8: {
        uint32_t x = static_cast<uint32_t>(acc[i]);
        if (ep.bias_i32) x += static_cast<uint32_t>(ep.bias_i32[j]);
        const float f = static_cast<float>(static_cast<int32_t>(x)) * scale;
        if (ep.kind == Int8Epilogue::Kind::kQuantU8)
          static_cast<uint8_t*>(out)[o] = saturate_round<uint8_t>(f, ep.out_zero_point);
        else
          static_cast<int8_t*>(out)[o] = saturate_round<int8_t>(f, ep.out_zero_point);
        break;
      }
    }
  }
}

void gemm_int8(OpContext* ctx, const Int8GemmArgs& g) { gemm_int8(ctx, g, active_cpu_path()); }

void gemm_int8(OpContext* ctx, const Int8GemmArgs& g, CpuPath path) {
  if (g.m <= 0 || g.n <= 0) return;
  const Int8Kernel& uk = int8_kernel(path);
  const int64_t mr = uk.mr, nr = uk.nr;
  const int64_t k4 = (std::max<int64_t>(g.k, 0) + 3) / 4;
  const int64_t panels = (g.n + nr - 1) / nr;

  // Zero points in the kernels' domain (a uint8, b int8).
  auto za = [&](int64_t i) -> int32_t {
    const int32_t z = g.a_zero ? g.a_zero[g.a_zero_per_row ? i : 0] : 0;
    return g.a_signed ? z + 128 : z;
  };
  std::vector<int32_t> zb(static_cast<size_t>(g.n));
  bool any_zb = false;
  for (int64_t j = 0; j < g.n; ++j) {
    const int32_t z = g.b_zero ? g.b_zero[g.b_zero_per_column ? j : 0] : 0;
    zb[j] = g.b_signed ? z : z - 128;
    any_zb |= zb[j] != 0;
  }

  // b packed: once per registered weight, else per call.
  PackBArgs pa{&g, nr, k4, panels};
  const size_t packed_bytes = static_cast<size_t>(panels * nr * (k4 * 4 + 4));
  PackedWeights cached;
  if (g.k > 0) {
    const int64_t rows = g.trans_b ? g.n : g.k, cols = g.trans_b ? g.k : g.n;
    // A segmented B reads b_segment_valid * a_segments bytes per column (k counts the padding)
    // and is a form of its own per segment count (the float convolution's panels are form 64).
    const bool segmented = g.b_segment_valid > 0;
    const int64_t read = segmented ? g.b_segment_valid * g.a_segments : cols;
    const size_t span = static_cast<size_t>((rows - 1) * g.ldb + read);
    const int64_t form = 1 + uk.id * 2 + (g.b_signed ? 1 : 0) + (segmented ? 128 * g.a_segments : 0);
    cached = packed_weight_form(g.b, span, form, g.trans_b, g.k, g.n, g.ldb, packed_bytes, pack_b, &pa);
  }
  std::unique_ptr<float[]> local;
  if (!cached) {
    local.reset(new float[(packed_bytes + 3) / 4]);
    pack_b(local.get(), &pa);
  }
  const int8_t* bpack = reinterpret_cast<const int8_t*>(cached ? cached->data() : local.get());
  const int32_t* colsum = reinterpret_cast<const int32_t*>(bpack + panels * k4 * nr * 4);

  const Int8Blocking bl = int8_blocking(uk);
  const int threads = ctx ? ctx->threads() : 1;
  auto round_up = [&](int64_t x) { return (x + mr - 1) / mr * mr; };
  int64_t mc = std::min(bl.mc, round_up(g.m));
  if (threads > 1) mc = std::min(mc, round_up((g.m + threads - 1) / threads));
  const int64_t mblocks = (g.m + mc - 1) / mc;
  // Tasks: (row block, column range). Rows split first; with fewer row blocks than threads the
  // columns split too (into about four ranges per thread for GEMV-sized products, whose
  // ranges are cheap, to even out a loaded machine). A task packs its rows of a over the whole
  // depth once, then walks its range in sub-chunks of kInt8ChunkCols whose int32 block stays
  // in L2 for the epilogue.
  int64_t task_chunks = 1;
  if (threads > 1 && mblocks < threads)
    task_chunks = std::min<int64_t>(panels, (threads * (g.m <= kInt8GemvMaxRows ? 4 : 1) + mblocks - 1) / mblocks);
  const int64_t panels_per_task = (panels + task_chunks - 1) / task_chunks;
  const int64_t nchunks = (panels + panels_per_task - 1) / panels_per_task;
  const int64_t chunk_panels = std::max<int64_t>(1, kInt8ChunkCols / nr);
  // GEMV-sized products take the whole depth per panel: the packed panels lie one after the
  // other, so a task then reads its weights as one sequential stream (a is a few rows, in L1).
  const int64_t kblocks =
      g.m <= kInt8GemvMaxRows ? 1 : std::max<int64_t>(1, (k4 + bl.kc4 - 1) / bl.kc4);
  const int64_t kc4_even = (k4 + kblocks - 1) / kblocks;
  const size_t a_elem = uk.a_int16 ? 2 : 1;
  const Int8Epilogue& ep = g.epilogue;

  auto task = [&](int64_t begin, int64_t end) {
    const int64_t lds = chunk_panels * nr;
    std::vector<int32_t> acc(static_cast<size_t>(mc * lds));
    // The row block's a over the whole depth: per group of mr rows, [k4][mr][4].
    std::vector<uint8_t> apack(static_cast<size_t>(mc * std::max<int64_t>(k4, 1) * 4) * a_elem);
    std::vector<int32_t> rowsum(static_cast<size_t>(mc));
    std::vector<const uint8_t*> ptrs(g.a_rows ? static_cast<size_t>(mc * g.a_segments) : 0);
    int64_t ptrs_block = -1;  // the row block whose pointers ptrs holds
    for (int64_t t = begin; t < end; ++t) {
      const int64_t mb = t / nchunks, nc = t % nchunks;
      const int64_t i0 = mb * mc, rows = std::min(mc, g.m - i0);
      const int64_t tp0 = nc * panels_per_task, tp1 = std::min(panels, tp0 + panels_per_task);
      if (tp0 >= tp1) continue;
      if (g.a_rows && ptrs_block != mb) {
        g.a_rows(g.a_rows_arg, i0, rows, ptrs.data());
        ptrs_block = mb;
      }
      if (any_zb)
        for (int64_t r = 0; r < rows; ++r) {
          uint32_t s = 0;
          if (g.a_rows) {
            const uint8_t flip = g.a_signed ? 0x80 : 0;
            for (int64_t t = 0; t < g.a_segments; ++t)
              for (int64_t e = 0; e < g.segment_len; ++e) s += ptrs[r * g.a_segments + t][e] ^ flip;
          } else {
            for (int64_t p = 0; p < g.k; ++p) s += a_value(g, i0 + r, p);
          }
          rowsum[r] = static_cast<int32_t>(s);
        }
      if (k4 > 0) {
        if (g.a_rows) {
          if (uk.a_int16) pack_a_indirect(g, ptrs.data(), rows, k4, mr, reinterpret_cast<int16_t*>(apack.data()));
          else pack_a_indirect(g, ptrs.data(), rows, k4, mr, apack.data());
        } else if (uk.a_int16) {
          pack_a(g, i0, rows, 0, k4, mr, reinterpret_cast<int16_t*>(apack.data()));
        } else {
          pack_a(g, i0, rows, 0, k4, mr, apack.data());
        }
      }
      for (int64_t p0 = tp0; p0 < tp1; p0 += chunk_panels) {
        const int64_t p1 = std::min(tp1, p0 + chunk_panels);
        if (k4 == 0) std::fill(acc.begin(), acc.end(), 0);
        for (int64_t q0 = 0; q0 < k4; q0 += kc4_even) {
          const int64_t kc4 = std::min(kc4_even, k4 - q0);
          for (int64_t pj = p0; pj < p1; ++pj) {
            const int8_t* bp = bpack + (pj * k4 + q0) * nr * 4;
            for (int64_t gr = 0; gr * mr < rows; ++gr) {
              const int64_t rg = std::min(mr, rows - gr * mr);
              const uint8_t* ap = apack.data() + static_cast<size_t>((gr * k4 + q0) * mr * 4) * a_elem;
              uk.tiles[rg - 1](kc4, ap, mr * 4, bp, acc.data() + gr * mr * lds + (pj - p0) * nr, lds,
                               q0 == 0);
            }
          }
        }
        // The epilogue over the block, still in cache: the zero-point terms, then the kind's
        // store (one loop per kind).
        const int64_t j0 = p0 * nr, cols = std::min(g.n, p1 * nr) - j0;
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r;
          const uint32_t zai = static_cast<uint32_t>(za(i));
          const uint32_t rs = any_zb ? static_cast<uint32_t>(rowsum[r]) : 0u;
          uint32_t* ar = reinterpret_cast<uint32_t*>(acc.data() + r * lds);
          if (zai != 0)
            for (int64_t jj = 0; jj < cols; ++jj) ar[jj] -= zai * static_cast<uint32_t>(colsum[j0 + jj]);
          if (any_zb)
            for (int64_t jj = 0; jj < cols; ++jj) {
              const uint32_t zbj = static_cast<uint32_t>(zb[j0 + jj]);
              ar[jj] += static_cast<uint32_t>(g.k) * zai * zbj - zbj * rs;
            }
          const int32_t* v = acc.data() + r * lds;
          const int64_t o = i * g.ldc_row + j0 * g.ldc_col, st = g.ldc_col;
          switch (ep.kind) {
            case Int8Epilogue::Kind::kInt32: {
              int32_t* y = static_cast<int32_t*>(g.c) + o;
              if (st == 1) std::memcpy(y, v, static_cast<size_t>(cols) * sizeof(int32_t));
              else for (int64_t jj = 0; jj < cols; ++jj) y[jj * st] = v[jj];
              break;
            }
            case Int8Epilogue::Kind::kFloat: {
              float* y = static_cast<float*>(g.c) + o;
              const float* sc = ep.scale + (ep.scale_per_column ? j0 : 0);
              const int64_t ss = ep.scale_per_column ? 1 : 0;
              for (int64_t jj = 0; jj < cols; ++jj) {
                float f = static_cast<float>(v[jj]) * sc[jj * ss];
                if (ep.bias_f32) f += ep.bias_f32[j0 + jj];
                y[jj * st] = f;
              }
              break;
            }
            case Int8Epilogue::Kind::kQuantU8:
            case Int8Epilogue::Kind::kQuantS8: {
              const float* sc = ep.scale + (ep.scale_per_column ? j0 : 0);
              const int64_t ss = ep.scale_per_column ? 1 : 0;
              for (int64_t jj = 0; jj < cols; ++jj) {
                uint32_t x = static_cast<uint32_t>(v[jj]);
                if (ep.bias_i32) x += static_cast<uint32_t>(ep.bias_i32[j0 + jj]);
                const float f = static_cast<float>(static_cast<int32_t>(x)) * sc[jj * ss];
                if (ep.kind == Int8Epilogue::Kind::kQuantU8)
                  static_cast<uint8_t*>(g.c)[o + jj * st] = saturate_round<uint8_t>(f, ep.out_zero_point);
                else
                  static_cast<int8_t*>(g.c)[o + jj * st] = saturate_round<int8_t>(f, ep.out_zero_point);
              }
              break;
            }
          }
        }
      }
    }
  };
  const int64_t tasks = mblocks * nchunks;
  if (ctx && threads > 1 && tasks > 1) parallel_range(*ctx, tasks, 1, task);
  else task(0, tasks);
}

}  // namespace cuvil::rt::ops
