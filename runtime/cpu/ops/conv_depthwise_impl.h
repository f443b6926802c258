// The direct depthwise convolution kernels of conv_depthwise.h, written once over a vector
// trait T and included by each path's file inside its own anonymous namespace (portable:
// conv_depthwise.cpp; conv_depthwise_avx2.cpp; conv_depthwise_avx512.cpp). Uses no library
// header (see conv_depthwise_args.h for why).
//
// Trait T: type V, kWidth lanes; set(f); zero(); load/store (kWidth floats); load_n/store_n
// (the first n < kWidth lanes, the others read as 0 and not written); add; fma(a, b, c) =
// a * b + c (rounded once on the FMA paths); relu (x > 0 or NaN ? x : 0, as ONNX Relu);
// clip(x, lo, hi) = x < lo ? lo : (x > hi ? hi : x); leaky(x, a) = x < 0 ? a * x : x (as ONNX
// LeakyRelu). NaN propagates through all three, as through the unfused ops.

template <class T> struct DwKernels {
  using V = typename T::V;
  static constexpr int64_t kW = T::kWidth;

  static inline V activate(V v, DwActivation act, V lo, V hi) {
    switch (act) {
      case DwActivation::Relu: return T::relu(v);
      case DwActivation::Clip: return T::clip(v, lo, hi);
      case DwActivation::LeakyRelu: return T::leaky(v, lo);
      default: return v;
    }
  }

  // y[0, n) = act(acc + bias + residual) (n <= kW lanes), the sums in the unfused graph's order.
  static inline void finish(V acc, const float* bias, bool bias_vec, V bias1, const float* res, float* y, int64_t n,
                            DwActivation act, V lo, V hi) {
    if (n == kW) {
      if (bias) acc = T::add(acc, bias_vec ? T::load(bias) : bias1);
      if (res) acc = T::add(acc, T::load(res));
      T::store(y, activate(acc, act, lo, hi));
    } else {
      if (bias) acc = T::add(acc, bias_vec ? T::load_n(bias, n) : bias1);
      if (res) acc = T::add(acc, T::load_n(res, n));
      T::store_n(y, activate(acc, act, lo, hi), n);
    }
  }

  // acc[q, q + 4 kW) for flat output positions q of the planes (no epilogue).
  static inline void flat_block(const DwPlaneArgs& a, int64_t q, float* acc) {
    V c0 = T::zero(), c1 = T::zero(), c2 = T::zero(), c3 = T::zero();
    for (int64_t k = 0; k < a.ntaps; ++k) {
      const V wk = T::set(a.w[k]);
      const float* p = a.planes + a.off[k] + q;
      c0 = T::fma(T::load(p), wk, c0);
      c1 = T::fma(T::load(p + kW), wk, c1);
      c2 = T::fma(T::load(p + 2 * kW), wk, c2);
      c3 = T::fma(T::load(p + 3 * kW), wk, c3);
    }
    T::store(acc, c0);
    T::store(acc + kW, c1);
    T::store(acc + 2 * kW, c2);
    T::store(acc + 3 * kW, c3);
  }

  static void plane_rows(const DwPlaneArgs& a) {
    const DwEpilogue& e = *a.e;
    const V lo = T::set(e.alpha), hi = T::set(e.beta);
    const V b1 = T::set(a.bias ? *a.bias : 0.f);
    if (a.cols < 4 * kW) {
      const int64_t flat = a.rows * a.row_stride;
      for (int64_t q = 0; q < flat; q += 4 * kW) flat_block(a, q, a.scratch + q);
      for (int64_t r = 0; r < a.rows; ++r) {
        const float* acc = a.scratch + r * a.row_stride;
        float* yr = a.y + r * a.cols;
        const float* rr = a.residual ? a.residual + r * a.cols : nullptr;
        for (int64_t j = 0; j < a.cols; j += kW) {
          const int64_t n = a.cols - j < kW ? a.cols - j : kW;
          finish(T::load(acc + j), a.bias, false, b1, rr ? rr + j : nullptr, yr + j, n, e.act, lo, hi);
        }
        if (e.act == DwActivation::Array) e.array_fn(yr, yr, a.cols);
      }
      return;
    }
    for (int64_t r = 0; r < a.rows; ++r) {
      const float* src = a.planes + r * a.row_stride;
      float* yr = a.y + r * a.cols;
      const float* rr = a.residual ? a.residual + r * a.cols : nullptr;
      int64_t j = 0;
      // Four vectors of outputs per pass over the taps: four independent FMA chains.
      for (; j + 4 * kW <= a.cols; j += 4 * kW) {
        V c0 = T::zero(), c1 = T::zero(), c2 = T::zero(), c3 = T::zero();
        for (int64_t k = 0; k < a.ntaps; ++k) {
          const V wk = T::set(a.w[k]);
          const float* p = src + a.off[k] + j;
          c0 = T::fma(T::load(p), wk, c0);
          c1 = T::fma(T::load(p + kW), wk, c1);
          c2 = T::fma(T::load(p + 2 * kW), wk, c2);
          c3 = T::fma(T::load(p + 3 * kW), wk, c3);
        }
        finish(c0, a.bias, false, b1, rr ? rr + j : nullptr, yr + j, kW, e.act, lo, hi);
        finish(c1, a.bias, false, b1, rr ? rr + j + kW : nullptr, yr + j + kW, kW, e.act, lo, hi);
        finish(c2, a.bias, false, b1, rr ? rr + j + 2 * kW : nullptr, yr + j + 2 * kW, kW, e.act, lo, hi);
        finish(c3, a.bias, false, b1, rr ? rr + j + 3 * kW : nullptr, yr + j + 3 * kW, kW, e.act, lo, hi);
      }
      // The rest a vector at a time; the last may be partial (its loads run into the next row
      // or the planes' slack, lanes that are never stored).
      for (; j < a.cols; j += kW) {
        const int64_t n = a.cols - j < kW ? a.cols - j : kW;
        V c0 = T::zero();
        for (int64_t k = 0; k < a.ntaps; ++k) c0 = T::fma(T::load(src + a.off[k] + j), T::set(a.w[k]), c0);
        finish(c0, a.bias, false, b1, rr ? rr + j : nullptr, yr + j, n, e.act, lo, hi);
      }
      if (e.act == DwActivation::Array) e.array_fn(yr, yr, a.cols);
    }
  }

  // U full vectors of channels [c, c + U * kW) of P consecutive NHWC output positions whose
  // taps are the same up to a shift of `step` floats per position (P = 2: both inside the
  // image along the width): each weight vector loaded once for all of them.
  template <int P, int U>
  static inline void channel_block(const DwNhwcArgs& a, const int64_t* xoff, const int64_t* woff, int64_t ntaps,
                                   int64_t c, int64_t step, const float* rp, float* yp, V lo, V hi) {
    const int64_t C = a.s->c;
    V acc[P][U];
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q)
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) acc[q][u] = T::zero();
    for (int64_t t = 0; t < ntaps; ++t) {
      const float* xp = a.x + xoff[t] + c;
      const float* wp = a.wt + woff[t] + c;
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) {
        const V wv = T::load(wp + u * kW);
#pragma GCC unroll 2
        for (int q = 0; q < P; ++q) acc[q][u] = T::fma(T::load(xp + q * step + u * kW), wv, acc[q][u]);
      }
    }
#pragma GCC unroll 2
    for (int q = 0; q < P; ++q)
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) {
        const int64_t cu = c + u * kW;
        finish(acc[q][u], a.bias ? a.bias + cu : nullptr, true, T::zero(), rp ? rp + q * C + cu : nullptr,
               yp + q * C + cu, kW, a.e->act, lo, hi);
      }
  }

  // All channels of P positions (channel_block's contract), then the partial vector of each.
  template <int P>
  static inline void position_channels(const DwNhwcArgs& a, const int64_t* xoff, const int64_t* woff, int64_t ntaps,
                                       int64_t step, const float* rp, float* yp, V lo, V hi) {
    const int64_t C = a.s->c;
    int64_t c = 0;
    for (; c + 4 * kW <= C; c += 4 * kW) channel_block<P, 4>(a, xoff, woff, ntaps, c, step, rp, yp, lo, hi);
    // The remaining full vectors as one block: independent FMA chains, not one after another.
    switch ((C - c) / kW) {
      case 3: channel_block<P, 3>(a, xoff, woff, ntaps, c, step, rp, yp, lo, hi); c += 3 * kW; break;
      case 2: channel_block<P, 2>(a, xoff, woff, ntaps, c, step, rp, yp, lo, hi); c += 2 * kW; break;
      case 1: channel_block<P, 1>(a, xoff, woff, ntaps, c, step, rp, yp, lo, hi); c += kW; break;
      default: break;
    }
    if (c == C) return;
    const int64_t n = C - c;
    for (int q = 0; q < P; ++q) {
      V c0 = T::zero();
      for (int64_t t = 0; t < ntaps; ++t)
        c0 = T::fma(T::load_n(a.x + xoff[t] + q * step + c, n), T::load_n(a.wt + woff[t] + c, n), c0);
      finish(c0, a.bias ? a.bias + c : nullptr, true, T::zero(), rp ? rp + q * C + c : nullptr, yp + q * C + c, n,
             a.e->act, lo, hi);
    }
  }

  // P consecutive output columns [ow, ow + P) of row oh, channels [c, c + n) (n == kW when
  // Full), every tap of which lies inside the image's width (dilation 1 along it, stride S,
  // KW taps wide): per window row, the KW weight vectors stay in registers and each of the
  // (P - 1) * S + KW input columns the P windows cover is loaded once and multiplied into
  // every output whose window holds it. Each output still sums its taps in (kh, kw) order,
  // so the bits are those of position_channels.
  template <int KW, int S, int P, bool Full>
  static inline void row_strip(const DwNhwcArgs& a, const int64_t* ih, const int64_t* kh, int64_t nkh, int64_t oh,
                               int64_t ow, int64_t c, int64_t n, V lo, V hi) {
    const DwShape& s = *a.s;
    const int64_t C = s.c;
    constexpr int kCols = (P - 1) * S + KW;
    V acc[P];
#pragma GCC unroll 8
    for (int j = 0; j < P; ++j) acc[j] = T::zero();
    const int64_t iw0 = ow * S - s.p_w;
    for (int64_t r = 0; r < nkh; ++r) {
      const float* xr = a.x + (ih[r] * s.in_w + iw0) * C + c;
      const float* wr = a.wt + kh[r] * KW * C + c;
      V w[KW];
#pragma GCC unroll 8
      for (int kw = 0; kw < KW; ++kw) w[kw] = Full ? T::load(wr + kw * C) : T::load_n(wr + kw * C, n);
#pragma GCC unroll 32
      for (int q = 0; q < kCols; ++q) {
        const V xv = Full ? T::load(xr + q * C) : T::load_n(xr + q * C, n);
#pragma GCC unroll 8
        for (int j = 0; j < P; ++j) {
          const int kw = q - j * S;
          if (kw >= 0 && kw < KW) acc[j] = T::fma(xv, w[kw], acc[j]);
        }
      }
    }
    const int64_t at = (oh * s.out_w + ow) * C + c;
#pragma GCC unroll 8
    for (int j = 0; j < P; ++j)
      finish(acc[j], a.bias ? a.bias + c : nullptr, true, T::zero(), a.residual ? a.residual + at + j * C : nullptr,
             a.y + at + j * C, Full ? kW : n, a.e->act, lo, hi);
  }

  // Output columns [ow0, ow1) of row oh, all inside the width (row_strip's contract), channel
  // vectors outermost: one vector's input columns of the window rows stay in L1 across the
  // sweep along the row; strips of 8 columns, the rest in strips of 4, 2 and 1.
  // P output columns from ow (row_strip's contract), every channel: the P windows' input
  // lines are used whole before the sweep moves on.
  template <int KW, int S, int P>
  static inline void strip_channels(const DwNhwcArgs& a, const int64_t* ih, const int64_t* kh, int64_t nkh, int64_t oh,
                                    int64_t ow, V lo, V hi) {
    const int64_t C = a.s->c;
    int64_t c = 0;
    for (; c + kW <= C; c += kW) row_strip<KW, S, P, true>(a, ih, kh, nkh, oh, ow, c, kW, lo, hi);
    if (c < C) row_strip<KW, S, P, false>(a, ih, kh, nkh, oh, ow, c, C - c, lo, hi);
  }

  // Output columns [ow0, ow1) of row oh, all inside the width (row_strip's contract): strips
  // of 8 columns, the rest in strips of 4, 2 and 1.
  template <int KW, int S>
  static void row_interior(const DwNhwcArgs& a, const int64_t* ih, const int64_t* kh, int64_t nkh, int64_t oh,
                           int64_t ow0, int64_t ow1, V lo, V hi) {
    int64_t ow = ow0;
    for (; ow + 8 <= ow1; ow += 8) strip_channels<KW, S, 8>(a, ih, kh, nkh, oh, ow, lo, hi);
    if (ow + 4 <= ow1) strip_channels<KW, S, 4>(a, ih, kh, nkh, oh, ow, lo, hi), ow += 4;
    if (ow + 2 <= ow1) strip_channels<KW, S, 2>(a, ih, kh, nkh, oh, ow, lo, hi), ow += 2;
    if (ow < ow1) strip_channels<KW, S, 1>(a, ih, kh, nkh, oh, ow, lo, hi);
  }

  using RowInteriorFn = void (*)(const DwNhwcArgs&, const int64_t*, const int64_t*, int64_t, int64_t, int64_t,
                                 int64_t, V, V);
  // The row sweep for this geometry (3 or 5 taps wide, stride 1 or 2, dilation 1 along the
  // width), or null: then every column goes through position_channels.
  static RowInteriorFn row_interior_for(const DwShape& s) {
    if (s.d_w != 1) return nullptr;
    if (s.k_w == 3 && s.s_w == 1) return row_interior<3, 1>;
    if (s.k_w == 3 && s.s_w == 2) return row_interior<3, 2>;
    if (s.k_w == 5 && s.s_w == 1) return row_interior<5, 1>;
    if (s.k_w == 5 && s.s_w == 2) return row_interior<5, 2>;
    return nullptr;
  }

  static void nhwc_rows(const DwNhwcArgs& a) {
    const DwShape& s = *a.s;
    const int64_t C = s.c;
    const DwEpilogue& e = *a.e;
    const V lo = T::set(e.alpha), hi = T::set(e.beta);
    // The valid taps of one output position: (input offset in floats, weight row offset).
    constexpr int64_t kMaxTaps = 64;
    int64_t xoff[kMaxTaps], woff[kMaxTaps];
    // Whether every tap of output column ow lies inside the image's width.
    auto inside_w = [&](int64_t ow) {
      const int64_t iw0 = ow * s.s_w - s.p_w;
      return iw0 >= 0 && iw0 + (s.k_w - 1) * s.d_w < s.in_w;
    };
    // Columns [ow, end) through the per-position kernels.
    auto positions = [&](int64_t oh, int64_t ow, int64_t end) {
      float* yrow = a.y + oh * s.out_w * C;
      while (ow < end) {
        int64_t ntaps = 0;
        for (int64_t kh = 0; kh < s.k_h; ++kh) {
          const int64_t ih = oh * s.s_h - s.p_h + kh * s.d_h;
          if (ih < 0 || ih >= s.in_h) continue;
          for (int64_t kw = 0; kw < s.k_w; ++kw) {
            const int64_t iw = ow * s.s_w - s.p_w + kw * s.d_w;
            if (iw < 0 || iw >= s.in_w) continue;
            xoff[ntaps] = (ih * s.in_w + iw) * C;
            woff[ntaps] = (kh * s.k_w + kw) * C;
            ++ntaps;
          }
        }
        float* yp = yrow + ow * C;
        const float* rp = a.residual ? a.residual + (oh * s.out_w + ow) * C : nullptr;
        if (ow + 1 < end && inside_w(ow) && inside_w(ow + 1)) {
          position_channels<2>(a, xoff, woff, ntaps, s.s_w * C, rp, yp, lo, hi);
          ow += 2;
        } else {
          position_channels<1>(a, xoff, woff, ntaps, 0, rp, yp, lo, hi);
          ow += 1;
        }
      }
    };
    // The columns whose every tap lies inside the width: [first, last).
    const RowInteriorFn sweep = row_interior_for(s);
    int64_t first = (s.p_w + s.s_w - 1) / s.s_w, last = 0;
    if (s.in_w - s.k_w + s.p_w >= 0) last = (s.in_w - s.k_w + s.p_w) / s.s_w + 1;
    last = last < s.out_w ? last : s.out_w;
    first = first < last ? first : last;
    for (int64_t oh = a.oh0; oh < a.oh1; ++oh) {
      float* yrow = a.y + oh * s.out_w * C;
      if (sweep && first < last) {
        int64_t ih[kMaxTaps], kh[kMaxTaps], nkh = 0;
        for (int64_t r = 0; r < s.k_h; ++r) {
          const int64_t i = oh * s.s_h - s.p_h + r * s.d_h;
          if (i >= 0 && i < s.in_h) ih[nkh] = i, kh[nkh++] = r;
        }
        positions(oh, 0, first);
        sweep(a, ih, kh, nkh, oh, first, last, lo, hi);
        positions(oh, last, s.out_w);
      } else {
        positions(oh, 0, s.out_w);
      }
      if (e.act == DwActivation::Array) e.array_fn(yrow, yrow, s.out_w * C);
    }
  }

  static void epilogue_row(float* y, int64_t n, const float* bias, bool bias_vec, const float* res,
                           const DwEpilogue& e) {
    const V lo = T::set(e.alpha), hi = T::set(e.beta);
    const V b1 = T::set(bias && !bias_vec ? *bias : 0.f);
    const DwActivation act = e.act == DwActivation::Array ? DwActivation::None : e.act;
    int64_t i = 0;
    for (; i + kW <= n; i += kW)
      finish(T::load(y + i), bias ? bias + (bias_vec ? i : 0) : nullptr, bias_vec, b1, res ? res + i : nullptr, y + i,
             kW, act, lo, hi);
    if (i < n)
      finish(T::load_n(y + i, n - i), bias ? bias + (bias_vec ? i : 0) : nullptr, bias_vec, b1,
             res ? res + i : nullptr, y + i, n - i, act, lo, hi);
    if (e.act == DwActivation::Array) e.array_fn(y, y, n);
  }

  static void activate_row(float* y, int64_t n, const DwEpilogue& e) {
    if (e.act == DwActivation::Array) {
      e.array_fn(y, y, n);
      return;
    }
    if (e.act == DwActivation::None) return;
    const V lo = T::set(e.alpha), hi = T::set(e.beta);
    int64_t i = 0;
    for (; i + kW <= n; i += kW) T::store(y + i, activate(T::load(y + i), e.act, lo, hi));
    if (i < n) T::store_n(y + i, activate(T::load_n(y + i, n - i), e.act, lo, hi), n - i);
  }
};

// The s_h * s_w phase planes (eh x ew each, consecutive) of one input channel xc [in_h][in_w]:
// plane (p, q) element (i, j) is the zero-padded input at row i * s_h + p, column j * s_w + q.
// Plain loops, left to the compiler's vectoriser for the path's instruction set (the strided
// column gathers become permutes).
inline void fill_phase_planes(const float* xc, const DwShape& s, int64_t eh, int64_t ew, float* dst) {
  if (ew < 64) {
    // Narrow planes: zero them all in one loop, then copy each input row's columns into its
    // plane rows (row-by-row zero runs would cost more in loop overhead than in stores).
    const int64_t plane = eh * ew, total = s.s_h * s.s_w * plane;
    for (int64_t i = 0; i < total; ++i) dst[i] = 0.f;
    for (int64_t ih = 0; ih < s.in_h; ++ih) {
      const int64_t i = (ih + s.p_h) / s.s_h, p = (ih + s.p_h) % s.s_h;
      if (i >= eh) break;  // rows past the last window's are never read
      const float* row = xc + ih * s.in_w;
      for (int64_t q = 0; q < s.s_w; ++q) {
        const int64_t first = q - s.p_w, last = s.in_w - 1 + s.p_w - q;  // column j reads row[j * s_w + first]
        int64_t j_lo = first < 0 ? (-first + s.s_w - 1) / s.s_w : 0;
        j_lo = j_lo < ew ? j_lo : ew;
        int64_t j_hi = last < 0 ? j_lo : last / s.s_w + 1;
        j_hi = j_hi < ew ? j_hi : ew;
        float* d = dst + (p * s.s_w + q) * plane + i * ew;
        for (int64_t j = j_lo; j < j_hi; ++j) d[j] = row[j * s.s_w + first];
      }
    }
    return;
  }
  for (int64_t p = 0; p < s.s_h; ++p)
    for (int64_t q = 0; q < s.s_w; ++q) {
      // Columns j with 0 <= j * s_w + first < in_w come from the row, the rest are padding.
      const int64_t first = q - s.p_w, last = s.in_w - 1 + s.p_w - q;
      int64_t j_lo = first < 0 ? (-first + s.s_w - 1) / s.s_w : 0;
      j_lo = j_lo < ew ? j_lo : ew;
      int64_t j_hi = last < 0 ? j_lo : last / s.s_w + 1;
      j_hi = j_hi < ew ? j_hi : ew;
      j_hi = j_hi > j_lo ? j_hi : j_lo;
      for (int64_t i = 0; i < eh; ++i, dst += ew) {
        const int64_t ih = i * s.s_h + p - s.p_h;
        if (ih < 0 || ih >= s.in_h) {
          for (int64_t j = 0; j < ew; ++j) dst[j] = 0.f;
          continue;
        }
        const float* row = xc + ih * s.in_w;  // column j reads row[j * s_w + first]
        for (int64_t j = 0; j < j_lo; ++j) dst[j] = 0.f;
        if (s.s_w == 1) {
          for (int64_t j = j_lo; j < j_hi; ++j) dst[j] = row[j + first];
        } else if (s.s_w == 2) {
          for (int64_t j = j_lo; j < j_hi; ++j) dst[j] = row[2 * j + first];
        } else {
          for (int64_t j = j_lo; j < j_hi; ++j) dst[j] = row[j * s.s_w + first];
        }
        for (int64_t j = j_hi; j < ew; ++j) dst[j] = 0.f;
      }
    }
}

// Defines a path's entry points over trait T (inside that path's namespace).
#define CUVIL_DW_DEFINE_ENTRY_POINTS(T)                                   \
  void plane_rows(const DwPlaneArgs& a) { DwKernels<T>::plane_rows(a); } \
  void nhwc_rows(const DwNhwcArgs& a) { DwKernels<T>::nhwc_rows(a); }    \
  void activate_row(float* y, int64_t n, const DwEpilogue& e) { DwKernels<T>::activate_row(y, n, e); } \
  void fill_planes(const float* xc, const DwShape& s, int64_t eh, int64_t ew, float* dst) {     \
    fill_phase_planes(xc, s, eh, ew, dst);                                                          \
  }                                                                                                 \
  void epilogue_row(float* y, int64_t n, const float* bias, bool bias_vec, const float* res, const DwEpilogue& e) { \
    DwKernels<T>::epilogue_row(y, n, bias, bias_vec, res, e);                                               \
  }
