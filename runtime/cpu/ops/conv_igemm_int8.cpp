// conv_igemm_int8.h: the channels-last copy of x, the indirection rows and the call of the int8
// GEMM with them (gemm_int8.cpp holds the micro kernels, the packing, the blocking and the
// epilogue, shared with MatMulInteger and QLinearMatMul).
#include "runtime/cpu/ops/conv_igemm_int8.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "runtime/cpu/ops/conv_taps.h"
#include "runtime/cpu/ops/kernel_util.h"

namespace cuvil::rt::ops {
namespace {

// What the GEMM's a_rows callback needs to point output positions of one image at its taps.
struct IndirectRows {
  const DwShape* s;
  const uint8_t* img;        // the image channels-last, [in_h][in_w][c4]
  const uint8_t* zero_row;   // c4 bytes of x_zero
  int64_t c4;
};

// ptrs[r * taps + t] = the c4 channels that output position i0 + r reads under tap t.
void indirect_rows(void* arg, int64_t i0, int64_t rows, const uint8_t** ptrs) {
  const IndirectRows& a = *static_cast<const IndirectRows*>(arg);
  const DwShape& s = *a.s;
  int64_t oh = i0 / s.out_w, ow = i0 % s.out_w;
  const int64_t taps = s.k_h * s.k_w;
  for (int64_t r = 0; r < rows; ++r, ptrs += taps) {
    point_taps(s, oh, ow, a.img, a.c4, a.zero_row, ptrs, 1);
    if (++ow == s.out_w) ow = 0, ++oh;
  }
}

}  // namespace

bool conv_igemm_int8_applies(const DwShape& s, const ConvInt8Operands& op) {
  const int32_t lo = op.x_signed ? -128 : 0;
  return s.group == 1 && s.c > 0 && s.m > 0 && op.x_zero >= lo && op.x_zero <= lo + 255;
}

void conv_igemm_int8(OpContext& ctx, const DwShape& s, const ConvInt8Operands& op, const Int8Epilogue& ep,
                     void* y, size_t y_elem) {
  const int64_t pin = s.in_h * s.in_w, pout = s.out_h * s.out_w, taps = s.k_h * s.k_w;
  if (s.n * pout == 0) return;
  const int64_t c4 = (s.c + 3) / 4 * 4;
  const uint8_t zero_byte = static_cast<uint8_t>(op.x_zero);  // x's own type; the GEMM flips int8
  // x channels-last, [N][pin][c4]; the padding channels hold x_zero, so that they add nothing
  // either (the GEMM's packed weight is 0 there, and its zero-point terms count them as x_zero).
  // Not value-initialised: every byte is written.
  const std::unique_ptr<uint8_t[]> xt(new uint8_t[static_cast<size_t>(s.n * pin * c4)]);
  const uint8_t* x = static_cast<const uint8_t*>(op.x);
  if (c4 == s.c) {
    transpose_matrices(ctx, x, xt.get(), s.n, s.c, pin, 1);
  } else {
    const std::unique_ptr<uint8_t[]> narrow(new uint8_t[static_cast<size_t>(s.n * pin * s.c)]);
    transpose_matrices(ctx, x, narrow.get(), s.n, s.c, pin, 1);
    for (int64_t i = 0; i < s.n * pin; ++i) {
      uint8_t* d = xt.get() + i * c4;
      std::copy_n(narrow.get() + i * s.c, s.c, d);
      std::fill(d + s.c, d + c4, zero_byte);
    }
  }
  const std::vector<uint8_t> zero_row(static_cast<size_t>(c4), zero_byte);

  IndirectRows rows{&s, nullptr, zero_row.data(), c4};
  Int8GemmArgs g;
  g.m = pout;
  g.n = s.m;
  g.k = taps * c4;
  g.a_signed = op.x_signed;
  g.a_zero = &op.x_zero;
  g.a_rows = indirect_rows;
  g.a_rows_arg = &rows;
  g.a_segments = taps;
  g.segment_len = c4;
  g.b = op.w;
  g.b_signed = op.w_signed;
  g.trans_b = true;
  g.ldb = s.c * taps;
  g.b_segment_valid = s.c;
  g.b_zero = op.w_zero;
  g.b_zero_per_column = op.w_zero_per_channel;
  g.epilogue = ep;
  g.ldc_row = 1;  // [positions x M] stored as y's [M][positions]
  g.ldc_col = pout;
  for (int64_t n = 0; n < s.n; ++n) {
    rows.img = xt.get() + n * pin * c4;
    g.c = static_cast<uint8_t*>(y) + static_cast<size_t>(n * s.m * pout) * y_elem;
    gemm_int8(&ctx, g);
  }
}

}  // namespace cuvil::rt::ops
