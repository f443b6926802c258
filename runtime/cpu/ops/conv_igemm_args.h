// The plain-data arguments of the indirect-GEMM convolution's per-path tile kernels
// (conv_igemm.h has the contract). Included by the AVX2 and AVX-512 files, which are built
// with their instruction sets enabled, so it holds no inline code (see conv_depthwise_args.h).
#pragma once

#include <cstdint>

#include "runtime/cpu/ops/conv_depthwise_args.h"

namespace cuvil::rt::ops {

// The register tile of a path of `lanes` float lanes: mr output positions by two vectors of
// output channels (portable 4 x 8, AVX2 6 x 16, AVX-512 8 x 32). mr is bounded by the general
// registers too: the kernel keeps one input pointer per row live across a tap's channels.
constexpr int64_t igemm_rows(int64_t lanes) { return lanes == 4 ? 4 : lanes == 8 ? 6 : 8; }
constexpr int64_t kIgemmMaxRows = 8;

// One task's tiles: row groups [g0, g1) (mr <= igemm_rows(lanes) output positions each) by weight panels [p0, p1)
// (nr output channels each). For group g, tap t and row r, ind[((g - g0) * ntaps + t) * mr + r]
// points at the kc input channels that output position g * mr + r reads under tap t (a zero
// row in the padding and past the last position). The sum over (tap, channel) runs in
// increasing order, in registers within a depth block of kd and through `partial` between
// blocks; then y = act(sum + bias + residual), stored for the rows
// below `rows` and the channels below `n`.
struct IgemmArgs {
  const float* const* ind;
  int64_t ntaps, kc;
  const float* b;          // packed weights: panel p at b + p * panel_stride, [ntaps * kc][nr]
  int64_t panel_stride;
  int64_t g0, g1, p0, p1;
  int64_t rows, n;         // output positions and channels in all
  float* y;                // the output matrix [rows][ldy]
  int64_t ldy;
  const float* bias;       // [n], or null
  const float* residual;   // [rows][ldy] like y, or null
  const DwEpilogue* e;     // the activation (e->residual is not read: `residual` is)
  int64_t mr;              // rows per group
  int64_t kd;              // depth block: the depth is summed in blocks of kd, in order
  float* partial;          // (p1 - p0) * (g1 - g0) * mr * nr floats: sums between depth blocks
};

#define CUVIL_IGEMM_PATH_ENTRY_POINTS void igemm_tiles(const IgemmArgs& a);

}  // namespace cuvil::rt::ops
