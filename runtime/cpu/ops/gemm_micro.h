// The float32 GEMM and GEMV of the CPU runtime (runtime/cpu/ops/gemm_kernels.cpp): one
// register-tile micro kernel per kernel path (runtime/cpu/cpu_features.h: AVX-512 14x32 with
// zmm accumulators, AVX2+FMA 6x16 with ymm accumulators, portable 4x8 in plain C++), one
// cache-blocking rule shared by all of them, and the packing layouts they read. The tile
// interpreter's Mma instruction (runtime/cpu/tile_interpreter.cpp) packs its operands in the
// same layouts and calls gemm_block_f32 with the active path's kernel.
//
// Layouts: a is packed as groups of mr rows interleaved per depth step (apack[g][p][mr],
// zero-padded past the last row); b as panels of nr columns (bpack[panel][p][nr], zero-padded
// past column n). Every element's sum runs over p in increasing order within a depth block and
// over depth blocks in increasing order, whatever the thread split: outputs are deterministic
// and equal bitwise for 1 and N threads on one path (paths differ in rounding: FMA or not).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/ops/packed_weights.h"

namespace cuvil::rt::ops {

// acc[mr x nr] = sum over p < kc of a[p][r] * b[p][j] (a: one packed group, b: one packed
// panel), then for r < rows, j < cols: c[r * ldc + j] = first ? (beta == 0 ? acc : beta * c +
// acc) : c + acc. beta == 0 never reads c (it may hold NaN or garbage).
using GemmTileFn = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                            int64_t rows, int64_t cols, bool first, float beta);

// A tile of a fixed number of rows R < mr (the last group of a product, a decode step's one
// row): reads a packed group (a_stride = mr floats per depth step) and computes exactly what
// the full tile computes for those rows (the same operations per element, in the same order),
// at R / mr of its work; rows = R.
using GemmRowsTileFn = void (*)(int64_t kc, const float* a, int64_t a_stride, const float* b,
                                float* c, int64_t ldc, int64_t cols, bool first, float beta);
constexpr int64_t kGemmRowsTiles = 4;  // rows_tile[R - 1] for R = 1 .. 4

struct GemmMicroKernel {
  CpuPath path;
  int64_t mr;  // rows of the register tile
  int64_t nr;  // columns of the register tile
  GemmTileFn tile;
  GemmRowsTileFn rows_tile[kGemmRowsTiles];
};

// The micro kernel of `path` (which the CPU must support), or of the active path.
const GemmMicroKernel& gemm_micro_kernel(CpuPath path);
const GemmMicroKernel& gemm_micro_kernel();

// Cache blocking from the tile shape and the cache sizes, the same rule for every path: the
// packed b micro-panel (kc x nr) fills L1, the packed a block (mc x kc) half of L2.
struct GemmBlocking {
  int64_t mc;  // rows of a packed a block (a multiple of mr)
  int64_t kc;  // depth of a packed block
};
GemmBlocking gemm_blocking(const GemmMicroKernel& uk);
// The same rule for given cache sizes (bytes), for tests of paths this machine lacks.
GemmBlocking gemm_blocking_for(int64_t mr, int64_t nr, int64_t l1_bytes, int64_t l2_bytes);
// Benchmarks only (bench_gemm_roofline --sweep): every following gemm_blocking answers
// `blocking` (mc a multiple of every path's mr, kc > 0) instead of the rule; nullptr restores
// the rule. Set while no GEMM runs. Outputs change with kc (the depth blocks fix the order of
// every sum), never with mc.
void set_gemm_blocking_for_testing(const GemmBlocking* blocking);

// c[rows x n] (row stride ldc) gets the product of the packed a block (rows x kc, groups of
// uk.mr rows) and panels [p0, p1) of packed b (panel_stride floats apart, each kc deep, uk.nr
// wide). first: c = beta * c + ab (beta == 0: c = ab); otherwise c += ab.
void gemm_block_f32(const GemmMicroKernel& uk, int64_t rows, int64_t kc, int64_t n, int64_t p0,
                    int64_t p1, const float* apack, const float* bpack, int64_t panel_stride,
                    float* c, int64_t ldc, bool first, float beta);

// The panels of op(b) (k x n from b, row stride ldb; panels[ceil(n / uk.nr)][k][uk.nr] over
// the whole depth, so any depth block starts k0 * nr floats in) when b is a weight of a loaded
// package (packed_weights.h): packed on first use, shared by every later call, whole-tensor
// or tile Mma. nullptr when b is not a registered weight (or the cache is full).
PackedWeights gemm_weight_panels(const GemmMicroKernel& uk, const float* b, bool trans_b,
                                 int64_t k, int64_t n, int64_t ldb);

// Rows of a product that take the GEMV path (each weight streamed once, split over N).
constexpr int64_t kGemvMaxRows = 4;

}  // namespace cuvil::rt::ops
