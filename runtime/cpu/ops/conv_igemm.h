// Indirect-GEMM float32 convolution over channels-last tensors (cuvil::FusedConv layout =
// "NHWC"), one group, one or two spatial dims, any kernel, stride, padding and dilation: the
// convolution of ResNet-style networks once choose-layout has made their chains channels-last.
//
// Y[positions, M] = sum over taps t and channels c of X[position under t, c] * W[m, c, t]. The
// weights are packed once per loaded package (packed_weights.h) into panels of the path's nr
// output channels with the depth in (tap, channel) order; each task builds an indirection
// buffer for its rows (a pointer per output position and tap to that tap's input channels, a
// zero row in the padding), and the tile kernel (conv_igemm_impl.h) runs the whole depth with
// its accumulators in registers, reading the input through those pointers: no im2col matrix,
// no packed copy of the input, no separate pass for the bias, residual or activation, which
// are applied to each tile before its one store (the unfused graph's order: sum + bias, +
// residual, then the activation).
//
// Paths: AVX-512 8 x 32, AVX2+FMA 6 x 16, portable 4 x 8 (conv_igemm_args.h), one algorithm
// and one task split. Each output's sum runs over (tap, channel) in increasing order whatever
// the thread count, so 1 and N threads give the same bits; paths differ in rounding (FMA on
// the two x86 paths, multiply then add on the portable one).
#pragma once

#include "runtime/cpu/ops/conv_depthwise_args.h"
#include "runtime/op_kernel.h"

namespace cuvil::rt::ops {

// Channels-first one-group convolutions with a window, or of at most this many input
// channels, run on conv_igemm_float between two transposes (nn.cpp) instead of im2col + GEMM.
constexpr int64_t kIgemmChannelsFirstMaxC = 4;

// Whether conv_igemm_float takes this convolution: channels-last, one group.
bool conv_igemm_applies(const DwShape& s, bool channels_last);

// y = epilogue(conv(x, w) + bias): x [N, H, W, C], w [M, C, kH, kW], bias [M] or null,
// e.residual [N, OH, OW, M] or null, y [N, OH, OW, M].
void conv_igemm_float(OpContext& ctx, const DwShape& s, const float* x, const float* w, const float* bias,
                      const DwEpilogue& e, float* y);

}  // namespace cuvil::rt::ops
