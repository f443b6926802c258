// Indirect-GEMM 8-bit convolution (QLinearConv, ConvInteger) of one group over one or two
// spatial dims, any kernel, stride, padding and dilation, on channels-first tensors as ONNX
// models hold them: y[n, m, p] = epilogue(sum over taps t and channels c of (x[n, c, position
// under t] - x_zero) * (w[m, c, t] - w_zero[m])).
//
// Each image is transposed once to channels-last with its channels padded to a multiple of
// four (the padding bytes hold x_zero); an indirection buffer then points, per output position
// and window tap, at that tap's channels, or at a row of x_zero bytes where the tap lies in the
// padding, so a padding tap adds (x_zero - x_zero) * (w - w_zero) = 0 exactly as the ONNX
// definition's does. The int8 GEMM (gemm_int8.h) runs the product [positions x M] over the
// depth (tap, channel) with that indirect A: it packs each block of positions from the
// pointers into its micro kernels' layout (no im2col matrix), multiplies by the weight packed
// once per loaded package in (tap, channel) order, and applies its zero-point terms and
// epilogue (int32, or requantised with per-tensor or per-channel scales, bias and output zero
// point) while the block is in cache, storing channels-first. Same paths (AVX-512 VNNI, AVX2,
// portable), same wrapping int32 arithmetic: the bits of the plain reference loop on every
// path and thread count.
#pragma once

#include <cstdint>

#include "runtime/cpu/ops/conv_depthwise_args.h"
#include "runtime/cpu/ops/gemm_int8.h"
#include "runtime/op_kernel.h"

namespace cuvil::rt::ops {

// The 8-bit operands: x [N, C, in_h, in_w] and w [M, C, k_h, k_w], each uint8 or int8 as
// *_signed says, x's zero point and w's (one, or one per output channel).
struct ConvInt8Operands {
  const void* x = nullptr;
  bool x_signed = false;
  int32_t x_zero = 0;
  const void* w = nullptr;
  bool w_signed = true;
  const int32_t* w_zero = nullptr;
  bool w_zero_per_channel = false;
};

// Whether conv_igemm_int8 takes this convolution: one group, and an x_zero in x's type (the
// padding row is made of it).
bool conv_igemm_int8_applies(const DwShape& s, const ConvInt8Operands& op);

// y [N, M, out_h, out_w] of ep's element type (y_elem bytes each) = ep(the sums above); a
// per-channel scale or bias of ep is indexed by output channel.
void conv_igemm_int8(OpContext& ctx, const DwShape& s, const ConvInt8Operands& op, const Int8Epilogue& ep,
                     void* y, size_t y_elem);

}  // namespace cuvil::rt::ops
