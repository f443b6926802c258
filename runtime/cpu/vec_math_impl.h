// The algorithms of runtime/cpu/vec_math.h, written once over a vector-operations trait T
// (vec_math.cpp: scalar; vec_math_avx2.cpp: __m256; vec_math_avx512.cpp: __m512). Included
// only by those files, each inside its own anonymous namespace, built with -ffp-contract=off:
// every path performs the same IEEE operations in the same order, so all give the same bits.
// Coefficients: least-squares fits on Chebyshev nodes (weighted for relative error) rounded to
// float; the measured error bounds are in vec_math.h.
//
// Trait T: type V; mask type M; set(f); add sub mul div; fma(a, b, c) = a * b + c rounded once;
// rint (nearest even); max_(a, b) = a > b ? a : b and min_(a, b) = a < b ? a : b (the x86
// MAXPS/MINPS rule: the second operand when either is NaN); abs; copysign(mag, sign);
// lt(a, b); isnan(a); select(m, a, b) = m ? a : b; scale2(p, n) = p * 2^(n >> 1) * 2^(n - (n >> 1))
// for integral n in [-150, 128] (two exact steps, so subnormal and near-overflow results round
// once; AVX-512 uses vscalefps, which rounds p * 2^n once: the same bits).

template <class T> struct VecMath {
  using V = typename T::V;

  // e^x: n = rint(x log2 e), r = x - n ln2 (two-part ln2, |r| <= ln2/2), e^r = 1 + r + r^2 P(r).
  static inline V exp(V x) {
    V xc = T::max_(x, T::set(-104.0f));  // NaN becomes -104 here; restored at the end
    xc = T::min_(xc, T::set(88.75f));
    const V n = T::rint(T::mul(xc, T::set(1.44269502f)));
    V r = T::fma(n, T::set(-0.693145751953125f), xc);
    r = T::fma(n, T::set(-1.42860677e-06f), r);
    V p = T::set(1.982649555e-04f);
    p = T::fma(p, r, T::set(1.394602121e-03f));
    p = T::fma(p, r, T::set(8.333429694e-03f));
    p = T::fma(p, r, T::set(4.166626930e-02f));
    p = T::fma(p, r, T::set(1.666666567e-01f));
    p = T::fma(p, r, T::set(5.000000000e-01f));
    p = T::fma(p, T::mul(r, r), r);
    p = T::add(p, T::set(1.0f));
    return T::select(T::isnan(x), x, T::scale2(p, n));
  }

  static inline V neg(V x) { return T::sub(T::set(-0.0f), x); }

  // |x| < 0.625: x + x^3 Q(x^2); else 1 - 2 / (e^(2|x|) + 1); sign restored from x.
  static inline V tanh(V x) {
    const V ax = T::abs(x);
    const V s = T::mul(ax, ax);
    V q = T::set(2.142803743e-03f);
    q = T::fma(q, s, T::set(-8.177093230e-03f));
    q = T::fma(q, s, T::set(2.170050144e-02f));
    q = T::fma(q, s, T::set(-5.394670367e-02f));
    q = T::fma(q, s, T::set(1.333320588e-01f));
    q = T::fma(q, s, T::set(-3.333333135e-01f));
    const V small = T::fma(T::mul(ax, s), q, ax);
    const V e = exp(T::add(ax, ax));
    const V large = T::sub(T::set(1.0f), T::div(T::set(2.0f), T::add(e, T::set(1.0f))));
    const V r = T::copysign(T::select(T::lt(ax, T::set(0.625f)), small, large), x);
    return T::select(T::isnan(x), x, r);
  }

  // |x| < 0.921875: |x| + |x| G(x^2); else 1 - exp(L(|x| - 2.4)) with L a fit of log erfc,
  // |x| clamped to 3.925 (where 1 - erfc rounds to 1); sign restored from x.
  static inline V erf(V x) {
    const V ax = T::abs(x);
    const V s = T::mul(ax, ax);
    V g = T::set(-1.028426504e-05f);
    g = T::fma(g, s, T::set(1.145167917e-04f));
    g = T::fma(g, s, T::set(-8.505954756e-04f));
    g = T::fma(g, s, T::set(5.222303327e-03f));
    g = T::fma(g, s, T::set(-2.686580829e-02f));
    g = T::fma(g, s, T::set(1.128378808e-01f));
    g = T::fma(g, s, T::set(-3.761263788e-01f));
    g = T::fma(g, s, T::set(1.283791661e-01f));
    const V small = T::fma(ax, g, ax);
    const V t = T::sub(T::min_(ax, T::set(3.925f)), T::set(2.4f));
    V l = T::set(-3.404601614e-07f);
    l = T::fma(l, t, T::set(-9.931214890e-07f));
    l = T::fma(l, t, T::set(1.327800533e-06f));
    l = T::fma(l, t, T::set(-1.333582804e-05f));
    l = T::fma(l, t, T::set(8.806085680e-05f));
    l = T::fma(l, t, T::set(-4.693464434e-04f));
    l = T::fma(l, t, T::set(2.387578832e-03f));
    l = T::fma(l, t, T::set(-1.176826935e-02f));
    l = T::fma(l, t, T::set(-9.405021071e-01f));
    l = T::fma(l, t, T::set(-5.164236546e+00f));
    l = T::fma(l, t, T::set(-7.280974865e+00f));
    const V large = T::sub(T::set(1.0f), exp(l));
    const V r = T::copysign(T::select(T::lt(ax, T::set(0.921875f)), small, large), x);
    return T::select(T::isnan(x), x, r);
  }

  // A NaN result of a composed function is the canonical quiet NaN: which operand's NaN an
  // instruction propagates depends on operand order, which the compiler may swap in scalar code.
  static inline V canon_nan(V r) { return T::select(T::isnan(r), T::set(__builtin_nanf("")), r); }

  // 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) for x < 0 (no overflow of e^-x, no expm1).
  static inline V sigmoid(V x) {
    const V e = exp(neg(T::abs(x)));
    const V d = T::add(T::set(1.0f), e);
    const V r = T::select(T::lt(x, T::set(0.0f)), T::div(e, d), T::div(T::set(1.0f), d));
    return T::select(T::isnan(x), x, r);
  }
  // (0.5 x) (1 + erf(x * 0.70710678)), as kernel_Gelu always spelled it.
  static inline V gelu(V x) {
    const V e = erf(T::mul(x, T::set(0.70710678118654752440f)));
    return canon_nan(T::mul(T::mul(T::set(0.5f), x), T::add(T::set(1.0f), e)));
  }
  // (0.5 x) (1 + tanh(k (x + ((0.044715 x) x) x))).
  static inline V gelu_tanh(V x) {
    const V cube = T::mul(T::mul(T::mul(T::set(0.044715f), x), x), x);
    const V th = tanh(T::mul(T::set(0.79788456080286535588f), T::add(x, cube)));
    return canon_nan(T::mul(T::mul(T::set(0.5f), x), T::add(T::set(1.0f), th)));
  }
  static inline V silu(V x, V alpha) { return canon_nan(T::mul(x, sigmoid(T::mul(alpha, x)))); }
  static inline V swiglu(V a, V b) { return canon_nan(T::mul(T::mul(a, sigmoid(a)), b)); }
};

// Array drivers. Each path's entry points handle whole blocks (kWidth elements for maps, 16
// for sums); vec_math.cpp runs the rest with the scalar functions and combines the 16 lanes.
template <class T> struct VecDrivers {
  using V = typename T::V;
  using M = VecMath<T>;
  static constexpr int kW = T::kWidth;
  static constexpr int kAcc = 16 / T::kWidth;  // accumulators covering 16 interleaved lanes

  template <class F> static inline int64_t map(const float* x, float* y, int64_t n, F f) {
    int64_t i = 0;
    for (; i + kW <= n; i += kW) T::store(y + i, f(T::load(x + i)));
    return i;
  }
  template <class F> static inline int64_t map2(const float* a, const float* b, float* y, int64_t n, F f) {
    int64_t i = 0;
    for (; i + kW <= n; i += kW) T::store(y + i, f(T::load(a + i), T::load(b + i)));
    return i;
  }
  static inline void spill(const V* acc, float* lanes) {
    for (int k = 0; k < kAcc; ++k) T::store(lanes + k * kW, acc[k]);
  }
  // Returns the elements done (a multiple of 16); lanes[j] = sum of y[i], i % 16 == j.
  static inline int64_t exp_sub_sum(const float* x, float m, float* y, int64_t n, float* lanes) {
    V acc[kAcc];
    for (int k = 0; k < kAcc; ++k) acc[k] = T::set(0.0f);
    const V vm = T::set(m);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (int k = 0; k < kAcc; ++k) {
        const V e = M::exp(T::sub(T::load(x + i + k * kW), vm));
        T::store(y + i + k * kW, e);
        acc[k] = T::add(acc[k], e);
      }
    spill(acc, lanes);
    return i;
  }
  // *m = the scalar loop's `m = x[i] > m ? x[i] : m` over the blocks: lanes start at *m and
  // keep it when it is NaN (MAXPS returns its second operand then), so NaN comes out exactly
  // when *m was NaN, and otherwise the largest non-NaN element (order does not change a max).
  static inline int64_t max(const float* x, int64_t n, float* m) {
    V acc = T::set(*m);
    int64_t i = 0;
    for (; i + kW <= n; i += kW) acc = T::max_(T::load(x + i), acc);
    float lanes[kW];
    T::store(lanes, acc);
    float r = *m;
    for (int k = 0; k < kW; ++k) r = lanes[k] > r ? lanes[k] : r;
    *m = r;
    return i;
  }
  static inline int64_t sum(const float* x, int64_t n, float* lanes) {
    V acc[kAcc];
    for (int k = 0; k < kAcc; ++k) acc[k] = T::set(0.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (int k = 0; k < kAcc; ++k) acc[k] = T::add(acc[k], T::load(x + i + k * kW));
    spill(acc, lanes);
    return i;
  }
  static inline int64_t moments(const float* x, int64_t n, float shift, float* lanes_s, float* lanes_q) {
    V s[kAcc], q[kAcc];
    for (int k = 0; k < kAcc; ++k) s[k] = q[k] = T::set(0.0f);
    const V vs = T::set(shift);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (int k = 0; k < kAcc; ++k) {
        const V d = T::sub(T::load(x + i + k * kW), vs);
        s[k] = T::add(s[k], d);
        q[k] = T::fma(d, d, q[k]);
      }
    spill(s, lanes_s);
    spill(q, lanes_q);
    return i;
  }
  static inline int64_t normalize_affine(const float* x, float* y, int64_t n, float mean, float rstd,
                                         const float* scale, const float* bias) {
    const V vm = T::set(mean), vr = T::set(rstd);
    int64_t i = 0;
    if (bias) {
      for (; i + kW <= n; i += kW)
        T::store(y + i, T::fma(T::mul(T::sub(T::load(x + i), vm), vr), T::load(scale + i), T::load(bias + i)));
    } else {
      for (; i + kW <= n; i += kW)
        T::store(y + i, T::mul(T::mul(T::sub(T::load(x + i), vm), vr), T::load(scale + i)));
    }
    return i;
  }
};

// The per-path entry points (defined in vec_math_avx2.cpp / vec_math_avx512.cpp with the
// block drivers above); each returns how many leading elements it did.
#define CUVIL_VM_PATH_ENTRY_POINTS                                                                     \
  int64_t exp(const float* x, float* y, int64_t n);                                                    \
  int64_t sigmoid(const float* x, float* y, int64_t n);                                                \
  int64_t tanh(const float* x, float* y, int64_t n);                                                   \
  int64_t erf(const float* x, float* y, int64_t n);                                                    \
  int64_t gelu(const float* x, float* y, int64_t n);                                                   \
  int64_t gelu_tanh(const float* x, float* y, int64_t n);                                              \
  int64_t silu(const float* x, float* y, int64_t n, float alpha);                                      \
  int64_t swiglu(const float* a, const float* b, float* y, int64_t n);                                 \
  int64_t exp_sub_sum(const float* x, float m, float* y, int64_t n, float* lanes);                     \
  int64_t sum(const float* x, int64_t n, float* lanes);                                                \
  int64_t max(const float* x, int64_t n, float* m);                                                   \
  int64_t scale(const float* x, float s, float* y, int64_t n);                                        \
  int64_t moments(const float* x, int64_t n, float shift, float* lanes_s, float* lanes_q);             \
  int64_t normalize_affine(const float* x, float* y, int64_t n, float mean, float rstd, const float* scale, \
                           const float* bias);

// Defines the entry points of one path over trait T (inside that path's namespace).
#define CUVIL_VM_DEFINE_ENTRY_POINTS(T)                                                                \
  using D = VecDrivers<T>;                                                                             \
  using MT = VecMath<T>;                                                                               \
  int64_t exp(const float* x, float* y, int64_t n) { return D::map(x, y, n, [](T::V v) { return MT::exp(v); }); } \
  int64_t sigmoid(const float* x, float* y, int64_t n) {                                               \
    return D::map(x, y, n, [](T::V v) { return MT::sigmoid(v); });                                     \
  }                                                                                                    \
  int64_t tanh(const float* x, float* y, int64_t n) { return D::map(x, y, n, [](T::V v) { return MT::tanh(v); }); } \
  int64_t erf(const float* x, float* y, int64_t n) { return D::map(x, y, n, [](T::V v) { return MT::erf(v); }); } \
  int64_t gelu(const float* x, float* y, int64_t n) { return D::map(x, y, n, [](T::V v) { return MT::gelu(v); }); } \
  int64_t gelu_tanh(const float* x, float* y, int64_t n) {                                             \
    return D::map(x, y, n, [](T::V v) { return MT::gelu_tanh(v); });                                  \
  }                                                                                                    \
  int64_t silu(const float* x, float* y, int64_t n, float alpha) {                                     \
    const T::V va = T::set(alpha);                                                                     \
    return D::map(x, y, n, [va](T::V v) { return MT::silu(v, va); });                                  \
  }                                                                                                    \
  int64_t swiglu(const float* a, const float* b, float* y, int64_t n) {                                \
    return D::map2(a, b, y, n, [](T::V u, T::V v) { return MT::swiglu(u, v); });                       \
  }                                                                                                    \
  int64_t exp_sub_sum(const float* x, float m, float* y, int64_t n, float* lanes) {                    \
    return D::exp_sub_sum(x, m, y, n, lanes);                                                          \
  }                                                                                                    \
  int64_t sum(const float* x, int64_t n, float* lanes) { return D::sum(x, n, lanes); }                 \
  int64_t max(const float* x, int64_t n, float* m) { return D::max(x, n, m); }                        \
  int64_t scale(const float* x, float s, float* y, int64_t n) {                                       \
    const T::V vs = T::set(s);                                                                        \
    return D::map(x, y, n, [vs](T::V v) { return T::mul(v, vs); });                                   \
  }                                                                                                   \
  int64_t moments(const float* x, int64_t n, float shift, float* lanes_s, float* lanes_q) {            \
    return D::moments(x, n, shift, lanes_s, lanes_q);                                                  \
  }                                                                                                    \
  int64_t normalize_affine(const float* x, float* y, int64_t n, float mean, float rstd, const float* scale, \
                           const float* bias) {                                                        \
    return D::normalize_affine(x, y, n, mean, rstd, scale, bias);                                      \
  }
