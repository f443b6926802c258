// The indirect-GEMM convolution's tile kernel (conv_igemm.h), written once over the vector
// trait T of conv_depthwise_impl.h and included by each path's file after that header, inside
// the same anonymous namespace (portable: conv_depthwise.cpp; conv_depthwise_avx2.cpp;
// conv_depthwise_avx512.cpp). Uses no library header (see conv_depthwise_args.h for why).
//
// A tile is mr output positions by nr = 2 kW output channels, its accumulators in registers
// for the whole depth (every tap, every input channel): per depth step two vector loads of the
// packed weights and mr broadcasts of one input element each, read through the row pointers
// of the indirection buffer, so no im2col matrix and no packed copy of the input is made.

template <class T> struct IgemmKernels {
  using V = typename T::V;
  static constexpr int64_t kW = T::kWidth;
  static constexpr int kMaxRows = static_cast<int>(igemm_rows(kW));
  static constexpr int64_t NR = 2 * kW;
  static_assert(kMaxRows <= kIgemmMaxRows, "the driver sizes its buffers by kIgemmMaxRows");

  // acc[r][h] += sum over depth d in [d0, d1) (tap d / kc, channel d % kc, in that order) of
  // ind[tap * MR + r][channel] * b[d * NR + h * kW + lane].
  template <int MR>
  static inline __attribute__((always_inline)) void tile(const float* const* ind, int64_t kc, int64_t d0,
                                                         int64_t d1, const float* b, V (&acc)[MR][2]) {
    b += d0 * NR;
    int64_t t = d0 / kc, k = d0 % kc;
    for (int64_t d = d0; d < d1; ++t, k = 0) {
      const float* p[MR];
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) p[r] = ind[t * MR + r];
      const int64_t kend = d1 - d < kc - k ? k + (d1 - d) : kc;
      d += kend - k;
      for (; k < kend; ++k, b += NR) {
        const V b0 = T::load(b), b1 = T::load(b + kW);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const V av = T::set(p[r][k]);
          acc[r][0] = T::fma(av, b0, acc[r][0]);
          acc[r][1] = T::fma(av, b1, acc[r][1]);
        }
      }
    }
  }

  // Depth blocks outermost: a panel's block of depth (kd x NR floats) stays in L1 while every
  // row group of the task passes over it; between blocks the partial sums wait in a.partial
  // (float32, as in the registers, so the bits are those of one pass over the whole depth).
  template <int MR> static void tiles(const IgemmArgs& a) {
    const DwEpilogue& e = *a.e;
    const V lo = T::set(e.alpha), hi = T::set(e.beta);
    const V unused = T::zero();
    const DwActivation act = e.act == DwActivation::Array ? DwActivation::None : e.act;
    const int64_t depth = a.ntaps * a.kc;
    for (int64_t d0 = 0; d0 < depth; d0 += a.kd) {
      const int64_t d1 = depth - d0 < a.kd ? depth : d0 + a.kd;
      for (int64_t p = a.p0; p < a.p1; ++p) {
        const float* bp = a.b + p * a.panel_stride;
        const int64_t j0 = p * NR, cols = a.n - j0 < NR ? a.n - j0 : NR;
        for (int64_t g = a.g0; g < a.g1; ++g) {
          float* part = a.partial + ((p - a.p0) * (a.g1 - a.g0) + (g - a.g0)) * MR * NR;
          V acc[MR][2];
#pragma GCC unroll 8
          for (int r = 0; r < MR; ++r) {
            acc[r][0] = d0 == 0 ? T::zero() : T::load(part + r * NR);
            acc[r][1] = d0 == 0 ? T::zero() : T::load(part + r * NR + kW);
          }
          tile<MR>(a.ind + (g - a.g0) * a.ntaps * MR, a.kc, d0, d1, bp, acc);
          if (d1 < depth) {
#pragma GCC unroll 8
            for (int r = 0; r < MR; ++r) {
              T::store(part + r * NR, acc[r][0]);
              T::store(part + r * NR + kW, acc[r][1]);
            }
            continue;
          }
          const int64_t r0 = g * MR;
#pragma GCC unroll 8
          for (int r = 0; r < MR; ++r) {
            if (r0 + r >= a.rows) break;
            float* yr = a.y + (r0 + r) * a.ldy + j0;
            const float* res = a.residual ? a.residual + (r0 + r) * a.ldy + j0 : nullptr;
            const float* bias = a.bias ? a.bias + j0 : nullptr;
            DwKernels<T>::finish(acc[r][0], bias, true, unused, res, yr, cols < kW ? cols : kW, act, lo, hi);
            if (cols > kW)
              DwKernels<T>::finish(acc[r][1], bias ? bias + kW : nullptr, true, unused, res ? res + kW : nullptr,
                                   yr + kW, cols - kW, act, lo, hi);
            if (e.act == DwActivation::Array) e.array_fn(yr, yr, cols);
          }
        }
      }
    }
  }

  // a.mr rows per group, 1 .. kMaxRows (the driver evens the groups out so that few rows of
  // the last one are padding).
  static void igemm_tiles(const IgemmArgs& a) {
    switch (a.mr) {
      case 1: return tiles<1>(a);
      case 2: return tiles<2>(a);
      case 3: return tiles<3>(a);
      case 4: return tiles<4>(a);
      case 5: return tiles<kMaxRows < 5 ? kMaxRows : 5>(a);
      case 6: return tiles<kMaxRows < 6 ? kMaxRows : 6>(a);
      case 7: return tiles<kMaxRows < 7 ? kMaxRows : 7>(a);
      default: return tiles<kMaxRows>(a);
    }
  }
};

#define CUVIL_IGEMM_DEFINE_ENTRY_POINTS(T) \
  void igemm_tiles(const IgemmArgs& a) { IgemmKernels<T>::igemm_tiles(a); }
