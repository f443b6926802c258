// The plain-data arguments of the channels-last pooling kernels' per-path entry points
// (pool_nhwc.h has the contract). The AVX2 and AVX-512 files are built with their instruction
// sets enabled, so they include this header and no other project or library header with inline
// code (an inline function compiled there could be the copy the linker keeps, and run on a CPU
// without those instructions).
#pragma once

#include <cstdint>

namespace cuvil::rt::ops {

// Which reduction over the taps of one output position, each one bit for bit what the NCHW
// kernels of nn.cpp compute per element:
//   Max        the first tap, then `v > best ? v : best` (a NaN first stays, later NaNs are
//              skipped); no tap gives float's lowest()  (MaxPool)
//   Average    a double sum from 0 in tap order, divided in double by `denom`, rounded to
//              float; denom <= 0 gives 0  (AveragePool, GlobalAveragePool)
//   GlobalMax  from -inf, `v > acc || v is NaN ? v : acc`  (GlobalMaxPool)
enum class PoolNhwcKind : int32_t { Max, Average, GlobalMax };

// One output position over `channels` contiguous channels: y[c] = reduce over k < ntaps of
// x[off[k] + c], taps in the order given (kernel order, taps outside the input left out).
struct PoolNhwcArgs {
  PoolNhwcKind kind = PoolNhwcKind::Max;
  const float* x = nullptr;
  const int64_t* off = nullptr;  // ntaps offsets (in floats) from x
  int64_t ntaps = 0;
  int64_t channels = 0;
  double denom = 0.0;  // Average only
  float* y = nullptr;
};

}  // namespace cuvil::rt::ops

// Each path's file defines these, over its own trait, inside namespace pool_<path>.
#define CUVIL_POOL_NHWC_PATH_ENTRY_POINTS void pool_position(const PoolNhwcArgs& a);
#define CUVIL_POOL_NHWC_DEFINE_ENTRY_POINTS(Trait) \
  void pool_position(const PoolNhwcArgs& a) { PoolNhwcKernels<Trait>::position(a); }
