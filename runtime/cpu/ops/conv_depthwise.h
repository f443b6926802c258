// Direct (im2col-free) float32 convolution for depthwise and small grouped convolutions
// (group > 1, fewer than 4 output channels per group: MobileNet's depthwise 3x3 layers), over
// one or two spatial dims, NCHW or NHWC, any stride, padding and dilation, with FusedConv's
// epilogue (bias, a residual of the output's shape, the activation) applied in registers before
// the one store of each output vector. conv_forward (nn.cpp) calls it; everything else about
// Conv (validation, output shape, other shapes) stays there.
//
// NCHW: each (image, group) task copies its input channels once into zero-padded "phase
// planes" (one per stride phase: plane (p, q) holds padded input rows p, p + sh, ... and
// columns q, q + sw, ...), so that for every tap the inputs of consecutive output columns are
// consecutive floats: an output row is a sum over taps of a contiguous vector load times a
// broadcast weight, with no bounds checks and no gathers, whatever the stride and dilation
// (rows narrower than four vectors are computed over the flattened planes, see DwPlaneArgs).
// NHWC (depthwise only: one input and one output channel per group): each output position's
// channels are contiguous; taps outside the image are skipped by per-row / per-column ranges.
// The columns whose window lies inside the width (3 or 5 taps wide, stride 1 or 2, no
// dilation along it) are swept in strips of 8, 4, 2 and 1 columns: per channel vector and
// window row, the row's weights stay in registers and each input column the strip's windows
// cover is loaded once for all of them; the other columns go position by position. Both add
// each output's taps in the same (kh, kw) order, so the sweep changes no bit.
//
// Paths (runtime/cpu/cpu_features.h): AVX-512 (16 lanes), AVX2+FMA (8 lanes) and portable
// (4-lane GCC vectors) share one algorithm (conv_depthwise_impl.h) and blocking; they differ
// in width and in rounding (FMA on the two x86 paths, multiply then add on the portable one).
// Each output's sum runs over (input channel, tap) in increasing order on every path and
// thread count, so 1 and N threads give the same bits.
#pragma once

#include <cstdint>

#include "runtime/cpu/ops/conv_depthwise_args.h"
#include "runtime/op_kernel.h"

namespace cuvil::rt::ops {

// Whether the direct kernels take this convolution in this layout: a grouping they handle
// (NHWC: one input and one output channel per group, at most 64 taps; NCHW: fewer than 4
// output channels per group) and, in NCHW, phase planes of at most a few times the input's
// size (huge pads with huge strides would make them so; the general path takes those).
bool conv_depthwise_applies(const DwShape& s, bool channels_last);

// y = epilogue(conv(x, w) + bias) for float tensors; x [N, C, H, W] or [N, H, W, C]
// (channels_last), w [M, C/group, kH, kW], bias [M] or null, y the output in x's layout.
void conv_depthwise_float(OpContext& ctx, const DwShape& s, const float* x, const float* w, const float* bias,
                          const DwEpilogue& e, bool channels_last, float* y);

// y[0, n) = act(y[0, n)) in place, with the kernels' in-register activations (and e.array_fn
// for DwActivation::Array; e.residual is not read): the epilogue of the GEMM-based FusedConv
// and FusedMatMul rows too, so that every path of every fused linear op activates alike.
void activate_row(float* y, int64_t n, const DwEpilogue& e);
// y[j] = act(y[j] + bias + res[j]) for j < n in one pass (the sums in that order; bias is
// bias[j] when bias_vec, else bias[0] for every j; bias or res may be null).
void epilogue_row(float* y, int64_t n, const float* bias, bool bias_vec, const float* res, const DwEpilogue& e);

}  // namespace cuvil::rt::ops
