// Vectorised float32 transcendental functions (exp, sigmoid, tanh, erf and the activations
// built from them: GELU, GELU-tanh, SiLU, SwiGLU) over arrays, plus the fixed-order sums that
// softmax and LayerNorm need. Every kernel that computes one of these functions calls here --
// the tile interpreter's unary ops, the whole-tensor kernels, fused epilogues, softmax,
// attention -- so a fused (tile) and an unfused (whole-tensor) program agree bit for bit.
//
// Paths (runtime/cpu/cpu_features.h): AVX-512, AVX2+FMA and portable. ALL PATHS GIVE THE SAME
// BITS for the same input: each function is one algorithm (range reduction + polynomial, the
// approach of SLEEF and MLAS, coefficients fitted for this file) written once over a small
// vector-operations trait, with the same operation order and the same fused multiply-adds in
// every path (the portable one calls std::fma, which is correctly rounded, so it equals the
// hardware FMA); the scalar functions below ARE the portable path, and array tails run them.
// The sums use 16 interleaved partial sums combined in a fixed tree, whatever the vector width.
// vec_math*.cpp are built with -ffp-contract=off so the compiler cannot fuse other products.
//
// Error bounds (tests/vec_math_test.cpp measures them on every path this CPU supports, against
// double-precision std:: functions over a dense sweep of float32 -- every 521st bit pattern,
// both signs, plus the edges: zeros, subnormals, infinities, the clamp and interval points --
// and checks the special values exactly):
//   exp       <= 1.1 ulp; overflow to +inf above 88.7228, subnormal results correctly scaled,
//             0 below -103.97; exp(-inf) = 0, exp(+inf) = +inf. Branch-free: Cody-Waite
//             reduction, degree-6 polynomial, scaling by 2^n (vscalefps on AVX-512)
//   sigmoid   <= 3 ulp (1 / (1 + e) for x >= 0, e / (1 + e) for x < 0, e = exp(-|x|), no expm1,
//             no overflow); sigmoid(-inf) = 0, sigmoid(+inf) = 1
//   tanh      <= 2 ulp; odd (tanh(-0) = -0); +-1 beyond |x| ~ 9
//   erf       <= 3 ulp; odd (erf(-0) = -0); +-1 from |x| = 3.9192 on (where it rounds to 1).
//             Branch-free: x g(|x|), g a degree-6 polynomial on one of 8 intervals of |x| picked
//             by a table lookup (vpermps), no exp
//   gelu      <= 3 ulp of max(|y|, |x|), in a single branch of its own: x Phi(x) with
//             Phi = 0.5 + x G(|x|) clamped to [0, 1], G a degree-5 polynomial on one of 8
//             table-selected intervals of |x| (no erf call). For large negative x, 0.5 + x G
//             cancels as 1 + erf does in the ONNX formula, hence the bound relative to |x|;
//             gelu(-0) = -0, -0 below about -5.5, NaN (-inf * 0) at -inf, as the unfused graph
//   gelu_tanh, silu, swiglu: the ONNX formulas evaluated in float on the functions above
//             (0.5 x (1 + tanh(...)) and so on), <= 4 ulp of max(|y|, |x|): for large negative
//             x the result carries the formula's own cancellation, as the unfused ONNX graph
//             does; at x = -inf they give NaN (-inf * 0), as the unfused graph does
// Measured (dense sweep, identical on every path): exp 1.01, sigmoid 2.15, tanh 1.28, erf 2.37,
// gelu 1.96, gelu_tanh 1.41, silu 1.83 ulp.
// NaN in gives NaN out: exp, erf and gelu return the input NaN quieted (the NaN travels through
// every operation, and only that NaN), sigmoid and tanh the input's bits, gelu_tanh, silu and
// swiglu the canonical quiet NaN (which operand's NaN an instruction keeps depends on operand
// order, which a compiler may swap in scalar code). No function writes errno.
#pragma once

#include <cstdint>

namespace cuvil::rt::vm {

// Element-wise over arrays; y may equal x (in place), but not overlap it otherwise.
void exp(const float* x, float* y, int64_t n);
void sigmoid(const float* x, float* y, int64_t n);
void tanh(const float* x, float* y, int64_t n);
void erf(const float* x, float* y, int64_t n);
void gelu(const float* x, float* y, int64_t n);       // 0.5 x (1 + erf(x / sqrt 2)), its own form
void gelu_tanh(const float* x, float* y, int64_t n);  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void silu(const float* x, float* y, int64_t n, float alpha);  // x * sigmoid(alpha x)
void swiglu(const float* a, const float* b, float* y, int64_t n);  // (a * sigmoid(a)) * b

// y[i] = exp(x[i] - m); returns the sum of the y[i] in the fixed order described above.
float exp_sub_sum(const float* x, float m, float* y, int64_t n);
// Sum of x[0, n) in the fixed order.
float sum(const float* x, int64_t n);
// The maximum of x[0, n), equal to the scalar loop m = x[0]; m = x[i] > m ? x[i] : m: NaN
// exactly when x[0] is NaN, else the largest non-NaN element (-inf for n = 0). Softmax's max.
float max(const float* x, int64_t n);
// y[i] = x[i] * s (y may equal x).
void scale(const float* x, float s, float* y, int64_t n);
// sum and sum of squares of (x[i] - shift) in one pass, fixed order (LayerNorm's moments).
void shifted_moments(const float* x, int64_t n, float shift, float* sum_out, float* sumsq_out);
// y[i] = (x[i] - mean) * rstd * scale[i] + bias[i] (bias may be null), as fma((x-mean)*rstd,
// scale, bias) in every path.
void normalize_affine(const float* x, float* y, int64_t n, float mean, float rstd, const float* scale,
                      const float* bias);

// One element each, the same bits as the array functions (this is the portable path).
float exp1(float x);
float sigmoid1(float x);
float tanh1(float x);
float erf1(float x);
float gelu1(float x);
float gelu_tanh1(float x);
float silu1(float x, float alpha);
float swiglu1(float a, float b);

}  // namespace cuvil::rt::vm
