// Pooling over channels-last tensors (MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool
// with layout = "NHWC", docs/ir.md): X is [N, D1, ..., C] and Y [N, O1, ..., C], so the channels
// of one input position are contiguous and each output position is a reduction over its window's
// taps of whole vectors of channels. nn.cpp's pool kernels walk the windows (the same walk as
// their NCHW form) and call pool_nhwc_position once per output position and image.
//
// Results are the NCHW kernels' bits, element for element (pool_nhwc_args.h spells each
// reduction): the same taps in the same order per output element, the same double sums and
// division for the averages, the same NaN rules for the maxima. Paths
// (runtime/cpu/cpu_features.h): AVX-512 (16 lanes), AVX2 (8 lanes) and portable (4-lane GCC
// vectors) share one algorithm (pool_nhwc_impl.h) and differ only in width.
#pragma once

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/ops/pool_nhwc_args.h"

namespace cuvil::rt::ops {

// One output position of `a` on `path` (a path this CPU supports).
void pool_nhwc_position(CpuPath path, const PoolNhwcArgs& a);

}  // namespace cuvil::rt::ops
