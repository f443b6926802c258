// The algorithms of runtime/cpu/vec_math.h, written once over a vector-operations trait T
// (vec_math.cpp: scalar; vec_math_avx2.cpp: __m256; vec_math_avx512.cpp: __m512). Included
// only by those files, each inside its own anonymous namespace, built with -ffp-contract=off:
// every path performs the same IEEE operations in the same order, so all give the same bits.
// Coefficients: least-squares fits on Chebyshev nodes (weighted for relative error) rounded to
// float; the measured error bounds are in vec_math.h.
//
// Trait T: type V; mask type M; index type I; set(f); add sub mul div; fma(a, b, c) = a * b + c
// rounded once; trunc (toward zero); to_index(f) for integral f in [0, 7]; lookup8(table, i) =
// table[i] for a table of 8 floats; max_(a, b) = a > b ? a : b and min_(a, b) = a < b ? a : b (the x86
// MAXPS/MINPS rule: the second operand when either is NaN); abs; copysign(mag, sign);
// lt(a, b); isnan(a); select(m, a, b) = m ? a : b; scale2(p, n) = p * 2^(n >> 1) * 2^(n - (n >> 1))
// for integral n in [-150, 128] (two exact steps, so subnormal and near-overflow results round
// once; AVX-512 uses vscalefps, which rounds p * 2^n once: the same bits).

// erf's piecewise polynomials (VecMath::erf): kErfTable[d][i] is the coefficient of u^d on
// interval i, t = |x| in [i / 2, (i + 1) / 2), u = 2t - i, approximating erf(t) / t. Weighted
// least-squares fits on Chebyshev nodes (interval 7 over u in [0, 0.8] only, where the clamp
// stops), rounded to float; kErfTable[0][0] is 2 / sqrt(pi) rounded to float, so erf(x) for
// tiny x is x times it, within an ulp.
alignas(32) constexpr float kErfTable[7][8] = {
    {1.128379226e+00f, 1.040999770e+00f, 8.427007794e-01f, 6.440700889e-01f, 4.976611435e-01f, 3.998372257e-01f, 3.333259821e-01f, 2.857140601e-01f},
    {-2.187908876e-06f, -1.622177362e-01f, -2.137961388e-01f, -1.750464290e-01f, -1.192486286e-01f, -7.953182608e-02f, -5.553112179e-02f, -4.081552476e-02f},
    {-9.400822967e-02f, -5.746933445e-02f, 3.113528248e-03f, 2.861346491e-02f, 2.464685217e-02f, 1.536241174e-02f, 9.220401756e-03f, 5.829429254e-03f},
    {-1.085590484e-04f, 2.080626786e-02f, 1.578139327e-02f, 2.041437663e-03f, -3.155977232e-03f, -2.658670535e-03f, -1.504042884e-03f, -8.311903221e-04f},
    {7.305435836e-03f, 2.190654865e-03f, -3.670021659e-03f, -2.586004790e-03f, -2.657969890e-04f, 3.266959684e-04f, 2.295402373e-04f, 1.172721604e-04f},
    {-3.004880273e-04f, -1.830873545e-03f, -2.155130787e-04f, 6.206328981e-04f, 2.436463255e-04f, -4.250814527e-06f, -2.880694046e-05f, -1.556385359e-05f},
    {-2.654455893e-04f, 2.220549213e-04f, 1.560637465e-04f, -5.206423157e-05f, -4.400909893e-05f, -5.610964763e-06f, 2.132376039e-06f, 1.501526185e-06f},
};

// GELU's piecewise polynomials (VecMath::gelu): kGeluTable[d][i] is the coefficient of u^d on
// interval i, s = |x| * 8 / 5.5 in [i, i + 1), u = s - i, approximating G(|x|) =
// erf(|x| / sqrt 2) / (2 |x|) (interval 7 over u in [0, 0.99] only, where the clamp stops).
// Least-squares fits on Chebyshev nodes weighted by |x| + 0.3 (an error in G reaches GELU
// times x^2), rounded to float.
alignas(32) constexpr float kGeluTable[6][8] = {
    {3.989423513e-01f, 3.696234524e-01f, 3.021339774e-01f, 2.329308689e-01f, 1.807346344e-01f, 1.453691423e-01f, 1.212076247e-01f, 1.038959473e-01f},
    {-4.873117632e-06f, -5.464747176e-02f, -7.355865836e-02f, -6.179275364e-02f, -4.291085899e-02f, -2.885715291e-02f, -2.018782683e-02f, -1.484172791e-02f},
    {-3.137682751e-02f, -1.981349103e-02f, 1.211908821e-04f, 9.363662452e-03f, 8.585367352e-03f, 5.516623612e-03f, 3.345387522e-03f, 2.119161887e-03f},
    {-2.003301051e-04f, 6.804037374e-03f, 5.473734345e-03f, 9.265388944e-04f, -9.987886297e-04f, -9.245797410e-04f, -5.397864152e-04f, -3.009434440e-04f},
    {2.604470355e-03f, 5.378436763e-04f, -1.298254821e-03f, -8.444341947e-04f, -8.594506653e-05f, 1.080718357e-04f, 7.809571980e-05f, 4.064600944e-05f},
    {-3.412944789e-04f, -3.703785478e-04f, 5.885112478e-05f, 1.507482375e-04f, 4.474035813e-05f, -4.482158147e-06f, -7.547216228e-06f, -3.998164175e-06f},
};

template <class T> struct VecMath {
  using V = typename T::V;

  // e^x: n = rint(x log2 e) (adding 1.5 * 2^23 rounds to an integer), r = x - n ln2 (two-part
  // ln2, |r| <= ln2/2), e^r = a Horner polynomial of degree 6, times 2^n by scale2 (exact for
  // normal results; subnormal ones rounded once, overflow to inf). x is clamped to [-104, 88.75]
  // first, constant first: MAXPS/MINPS return their second operand when either is NaN, so a NaN
  // passes through the clamps and every later operation, and comes out as x's NaN (quieted)
  // without a select. 13 vector operations with vscalefps, 21 with AVX2's two-step scale2.
  static inline V exp(V x) {
    V xc = T::max_(T::set(-104.0f), x);
    xc = T::min_(T::set(88.75f), xc);
    const V magic = T::set(12582912.0f);
    const V n = T::sub(T::fma(xc, T::set(1.44269502f), magic), magic);
    V r = T::fma(n, T::set(-0.693145751953125f), xc);
    r = T::fma(n, T::set(-1.42860677e-06f), r);
    V p = T::set(1.385925920e-03f);
    p = T::fma(p, r, T::set(8.374805562e-03f));
    p = T::fma(p, r, T::set(4.166772589e-02f));
    p = T::fma(p, r, T::set(1.666641980e-01f));
    p = T::fma(p, r, T::set(4.999999404e-01f));
    p = T::fma(p, r, T::set(1.0f));
    p = T::fma(p, r, T::set(1.0f));
    return T::scale2(p, n);
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

  // The piecewise polynomial of `table` (coefficient of u^d on interval i in table[d][i]) at s
  // in [0, 8): i = trunc(s), u = s - i, Horner's rule over coefficients looked up by i.
  template <int kRows> static inline V table_poly(const float (&table)[kRows][8], V s) {
    const V fi = T::trunc(s);
    const typename T::I i = T::to_index(fi);
    const V u = T::sub(s, fi);
    V p = T::lookup8(table[kRows - 1], i);
    for (int d = kRows - 2; d >= 0; --d) p = T::fma(p, u, T::lookup8(table[d], i));
    return p;
  }

  // erf(x) = x g(|x|), g(t) = erf(t) / t, one branch for every x: s = 2|x| clamped to 7.8
  // (|x| = 3.9; erf rounds to 1 from 3.9192 on), i = trunc(s) picks one of 8 intervals of width 1/2 and
  // g = P_i(s - i), a degree-6 polynomial whose coefficients are looked up by i (kErfTable: one
  // permute per coefficient on the vector paths). x g is then clamped to [-1, 1]: beyond 3.9, x g(3.9)
  // grows past 1 within an ulp of erf, so erf(|x| >= 3.9192) = +-1 exactly. s = 2|x| is exact (no rounding of the argument), and g has no
  // cancellation (it lies in [0.25, 1.13]), so the relative error is small everywhere, near 0
  // too; erf(-0) = -0 and erf(+-inf) = +-1. The clamps put their constant first, so a NaN x
  // gives x's NaN (quieted; the lookup reads interval 7 for it). 22 vector operations.
  static inline V erf(V x) {
    const V ax = T::abs(x);
    const V s = T::min_(T::add(ax, ax), T::set(7.8f));  // NaN: MINPS returns 7.8
    return T::max_(T::set(-1.0f), T::min_(T::set(1.0f), T::mul(x, table_poly(kErfTable, s))));
  }

  // A NaN result of a composed function is the canonical quiet NaN: which operand's NaN an
  // instruction propagates depends on operand order, which the compiler may swap in scalar code.
  static inline V canon_nan(V r) { return T::select(T::isnan(r), T::set(__builtin_nanf("")), r); }

  // 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) for x < 0 (no overflow of e^-x, no expm1).
  static inline V sigmoid(V x) {
    const V e = exp(neg(T::abs(x)));
    const V d = T::add(T::set(1.0f), e);
    const V r = T::div(T::select(T::lt(x, T::set(0.0f)), e, T::set(1.0f)), d);  // one division
    return T::select(T::isnan(x), x, r);
  }
  // 0.5 x (1 + erf(x / sqrt 2)) = x Phi(x) in one branch of its own: Phi(x) = 0.5 + x G(|x|),
  // G from kGeluTable at s = |x| 8 / 5.5 (rounding s moves GELU by under 0.3 ulp), |x| clamped
  // to 5.493 (Phi is within 2e-8 of 0 or 1 there), Phi clamped to [0, 1]. 21 vector
  // operations. A NaN x gives x's NaN quieted (Phi carries the same NaN, so the operand order of
  // the last multiply cannot matter); -inf gives -inf * 0, the machine's default NaN, as the
  // unfused graph does.
  static inline V gelu(V x) {
    const V s = T::min_(T::mul(T::abs(x), T::set(1.4545454f)), T::set(7.99f));  // NaN: MINPS gives 7.99
    const V phi = T::fma(x, table_poly(kGeluTable, s), T::set(0.5f));
    return T::mul(x, T::max_(T::set(0.0f), T::min_(T::set(1.0f), phi)));
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
  // Four accumulators, so the loop is not one chain of MAXPS latencies (softmax's first pass).
  static inline int64_t max(const float* x, int64_t n, float* m) {
    V acc[4];
    for (V& a : acc) a = T::set(*m);
    int64_t i = 0;
    for (; i + 4 * kW <= n; i += 4 * kW)
      for (int k = 0; k < 4; ++k) acc[k] = T::max_(T::load(x + i + k * kW), acc[k]);
    for (; i + kW <= n; i += kW) acc[0] = T::max_(T::load(x + i), acc[0]);
    for (int k = 1; k < 4; ++k) acc[0] = T::max_(acc[k], acc[0]);  // ties keep the earlier block
    float lanes[kW];
    T::store(lanes, acc[0]);
    // Lanes folded as a tree (a short dependency chain: it sits between softmax's max pass and
    // its exp pass), ties keeping the lower lane; every lane started at *m.
    for (int step = kW / 2; step >= 1; step /= 2)
      for (int j = 0; j < step; ++j) lanes[j] = lanes[j + step] > lanes[j] ? lanes[j + step] : lanes[j];
    float r = *m;
    r = lanes[0] > r ? lanes[0] : r;
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
