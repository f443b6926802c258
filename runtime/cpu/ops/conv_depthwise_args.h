// The plain-data arguments of the direct depthwise convolution's per-path kernels
// (conv_depthwise.h has the contract). The AVX2 and AVX-512 files of those kernels are built
// with their instruction sets enabled, so they include this header and no other project or
// library header with inline code (an inline function compiled there could be the copy the
// linker keeps, and run on a CPU without those instructions).
#pragma once

#include <cstdint>

namespace cuvil::rt::ops {

// The activations the kernels apply in registers; Array is any other, which the kernels apply
// to each finished output row with `array_fn` (runtime/cpu/vec_math.h's functions, the ones
// every other kernel calls, so fused and unfused agree bit for bit).
enum class DwActivation : int32_t { None, Relu, Clip, LeakyRelu, Array };

struct DwEpilogue {
  DwActivation act = DwActivation::None;
  float alpha = 0.f, beta = 0.f;  // Clip: [alpha, beta]; LeakyRelu: slope alpha
  void (*array_fn)(const float*, float*, int64_t) = nullptr;
  const float* residual = nullptr;  // the output's exact shape and layout, or null
};

// Geometry of a convolution the direct kernels take: spatial dims padded to two (a 1-D
// convolution is one of height 1).
struct DwShape {
  int64_t n = 0, c = 0, m = 0, group = 1;
  int64_t in_h = 1, in_w = 1, out_h = 1, out_w = 1;
  int64_t k_h = 1, k_w = 1, s_h = 1, s_w = 1, d_h = 1, d_w = 1, p_h = 0, p_w = 0;  // p: leading pads
};

// ---- the per-path row kernels (conv_depthwise_impl.h), exposed for the dispatch ----------------

// One output channel of an NCHW task: for each output row r < rows and column j < cols,
// y[r * cols + j] = epilogue(sum over k < ntaps of w[k] * planes[r * row_stride + off[k] + j] + bias).
// Rows narrower than four vectors are computed over the flattened planes instead (output
// (r, j) is flat position r * row_stride + j, and so are its inputs: a plane row is row_stride
// long), four vectors at a time into `scratch`, whose valid columns the epilogue then stores:
// the same sums in the same order, so the same bits as row by row.
struct DwPlaneArgs {
  const float* planes;  // phase planes; readable up to row_stride + kDwPlaneSlack floats past the end
  const int64_t* off;
  const float* w;
  int64_t ntaps, rows, cols, row_stride;
  const float* bias;  // one value, or null
  const float* residual;  // rows * cols, or null
  float* y;
  float* scratch;  // rows * row_stride + kDwPlaneSlack floats
  const DwEpilogue* e;
};
constexpr int64_t kDwPlaneSlack = 64;  // floats: four 16-lane vectors

// Output rows [oh0, oh1) of one NHWC image: y[oh][ow][c] = epilogue(sum over valid taps (kh, kw)
// of x[ih][iw][c] * wt[kh * k_w + kw][c] + bias[c]).
struct DwNhwcArgs {
  const DwShape* s;
  const float* x;         // the image, [in_h][in_w][c]
  const float* wt;        // [k_h * k_w][c]
  const float* bias;      // [c], or null
  const float* residual;  // the image's output, [out_h][out_w][c], or null
  float* y;               // the image's output
  int64_t oh0, oh1;
  const DwEpilogue* e;
};

// The per-path kernels (conv_depthwise_avx2.cpp, conv_depthwise_avx512.cpp; the portable one
// in conv_depthwise.cpp).
#define CUVIL_DW_PATH_ENTRY_POINTS          \
  void plane_rows(const DwPlaneArgs& a); \
  void nhwc_rows(const DwNhwcArgs& a);     \
  void activate_row(float* y, int64_t n, const DwEpilogue& e); \
  void fill_planes(const float* xc, const DwShape& s, int64_t eh, int64_t ew, float* dst); \
  void epilogue_row(float* y, int64_t n, const float* bias, bool bias_vec, const float* res, const DwEpilogue& e);

}  // namespace cuvil::rt::ops
