// Where each window tap of one output position reads in a channels-last image: the shared step
// of the indirect-GEMM convolutions (conv_igemm.cpp for float32, conv_igemm_int8.cpp for int8).
// Inline code: include it only from files built for every CPU (not the per-path AVX2/AVX-512
// files; conv_depthwise_args.h says why).
#pragma once

#include <cstdint>

#include "runtime/cpu/ops/conv_depthwise_args.h"

namespace cuvil::rt::ops {

// out[(kh * k_w + kw) * step] = the channels that output position (oh, ow) reads under tap
// (kh, kw): img + (ih * in_w + iw) * pixel inside the image, `zero` in the padding.
template <typename T>
inline void point_taps(const DwShape& s, int64_t oh, int64_t ow, const T* img, int64_t pixel, const T* zero,
                       const T** out, int64_t step) {
  for (int64_t kh = 0; kh < s.k_h; ++kh) {
    const int64_t ih = oh * s.s_h - s.p_h + kh * s.d_h;
    const bool row_inside = ih >= 0 && ih < s.in_h;
    for (int64_t kw = 0; kw < s.k_w; ++kw) {
      const int64_t iw = ow * s.s_w - s.p_w + kw * s.d_w;
      const bool inside = row_inside && iw >= 0 && iw < s.in_w;
      out[(kh * s.k_w + kw) * step] = inside ? img + (ih * s.in_w + iw) * pixel : zero;
    }
  }
}

}  // namespace cuvil::rt::ops
