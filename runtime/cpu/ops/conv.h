// Conv's whole-tensor computation (runtime/cpu/ops/nn.cpp: im2col or direct convolution over
// the shared GEMM, then the bias), exposed so that cuvil::FusedConv (fused_linear.cpp) runs
// the same code as Conv and adds its epilogue while the result is still in the compute type.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cpu/ops/conv_depthwise_args.h"
#include "runtime/op_kernel.h"

namespace cuvil::rt::ops {

// Runs on the convolution result (y, dims = the output's [N, M, D1, ...] or [N, D1, ..., M]) before it is stored in the output's dtype: float for float/float16/bfloat16, double for double.
class ConvEpilogue {
 public:
  virtual ~ConvEpilogue() = default;
  // bias: B in the compute type, to add first (conv_forward leaves it to this pass when the
  // convolution added it last anyway), or null when y already holds it.
  virtual Status apply(float* y, const std::vector<int64_t>& dims, const float* bias, bool channels_last) const = 0;
  virtual Status apply(double* y, const std::vector<int64_t>& dims, const double* bias,
                       bool channels_last) const = 0;
  // The same epilogue as the direct depthwise kernels apply it in registers
  // (conv_depthwise.h), for a float computation with output dims `dims`: true with *e filled
  // when it has that form (no residual or a float one of exactly those dims, and an activation
  // the kernels know); false when apply() must run after the kernel instead.
  virtual bool register_form(const std::vector<int64_t>& dims, DwEpilogue* e) const { return false; }
};

// ONNX Conv over inputs X (0), W (1) and B (2, optional) and every Conv attribute of ctx,
// writing output 0; epilogue (may be null) runs before the output is stored. channels_last:
// X and Y are [N, D1, ..., C] (cuvil::FusedConv layout = "NHWC"), W stays [M, C/group, k...].
Status conv_forward(OpContext& ctx, const ConvEpilogue* epilogue, bool channels_last);

}  // namespace cuvil::rt::ops
