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
  static constexpr int MR = static_cast<int>(igemm_rows(kW));
  static constexpr int64_t NR = 2 * kW;
  static_assert(MR <= kIgemmMaxRows, "the driver sizes its buffers by kIgemmMaxRows");

  // acc[r][h] = sum over taps t and channels k (in that order) of ind[t * MR + r][k] * b[(t *
  // kc + k) * NR + h * kW + lane].
  static inline __attribute__((always_inline)) void tile(const float* const* ind, int64_t ntaps, int64_t kc,
                                                         const float* b, V (&acc)[MR][2]) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = T::zero();
    for (int64_t t = 0; t < ntaps; ++t, ind += MR) {
      const float* p[MR];
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) p[r] = ind[r];
      for (int64_t k = 0; k < kc; ++k, b += NR) {
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

  static void igemm_tiles(const IgemmArgs& a) {
    const DwEpilogue& e = *a.e;
    const V lo = T::set(e.alpha), hi = T::set(e.beta);
    const V unused = T::zero();
    const DwActivation act = e.act == DwActivation::Array ? DwActivation::None : e.act;
    for (int64_t p = a.p0; p < a.p1; ++p) {
      const float* bp = a.b + p * a.panel_stride;
      const int64_t j0 = p * NR, cols = a.n - j0 < NR ? a.n - j0 : NR;
      for (int64_t g = a.g0; g < a.g1; ++g) {
        V acc[MR][2];
        tile(a.ind + (g - a.g0) * a.ntaps * MR, a.ntaps, a.kc, bp, acc);
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
};

#define CUVIL_IGEMM_DEFINE_ENTRY_POINTS(T) \
  void igemm_tiles(const IgemmArgs& a) { IgemmKernels<T>::igemm_tiles(a); }
