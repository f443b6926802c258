// The 8-bit integer GEMM of the CPU runtime (runtime/cpu/ops/gemm_int8.cpp), which
// MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv run on: C_i32[m, n] = sum over k of
// (A[m, k] - za[m]) * (B[k, n] - zb[n]), A and B each uint8 or int8, then one fused epilogue per
// (row block, column chunk) while it is in cache: the int32 values themselves, a dequantisation
// to float32 (y = float(acc) * scale[n] + bias[n]) or a requantisation to uint8 / int8 (q =
// saturate(nearbyint(float(acc + bias_i32[n]) * scale[n]) + zy), round half to even).
//
// The micro kernels multiply uint8 by int8 (the operand order of vpdpbusd): an int8 A is moved
// to uint8 by adding 128 to every element and to its zero point, a uint8 B to int8 by
// subtracting 128 from both, which leaves every difference (a - za), (b - zb) unchanged. The
// zero points come out of the inner loop: acc = sum a*b - za[m] * colsum_b[n] - zb[n] *
// rowsum_a[m] + k * za[m] * zb[n], all in wrapping int32 arithmetic, which is exact modulo 2^32
// whatever the order, so every path and every thread split gives the same bits as a plain
// reference loop (docs/quantization.md, "## int8 kernels").
#pragma once

#include <cstdint>

#include "runtime/cpu/cpu_features.h"
#include "runtime/op_kernel.h"

namespace cuvil::rt::ops {

// What happens to the int32 sums before they are stored.
struct Int8Epilogue {
  enum class Kind { kInt32, kFloat, kQuantU8, kQuantS8 };
  Kind kind = Kind::kInt32;
  // kFloat and kQuant: one multiplier, or one per output column when scale_per_column.
  const float* scale = nullptr;
  bool scale_per_column = false;
  // kFloat: added after the scaling, one per column (nullptr: none).
  const float* bias_f32 = nullptr;
  // kQuant: added to the int32 sum before the scaling, one per column (nullptr: none).
  const int32_t* bias_i32 = nullptr;
  // kQuant: the output zero point.
  int32_t out_zero_point = 0;
};

struct Int8GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  // A: m x k with row stride lda, or (trans_a) k x m with row stride lda.
  const void* a = nullptr;
  bool a_signed = false, trans_a = false;
  int64_t lda = 0;
  // A's zero points in A's own type: one, or one per row when a_zero_per_row (nullptr: 0).
  const int32_t* a_zero = nullptr;
  bool a_zero_per_row = false;
  // B: k x n with row stride ldb, or (trans_b) n x k with row stride ldb.
  const void* b = nullptr;
  bool b_signed = true, trans_b = false;
  int64_t ldb = 0;
  // B's zero points: one, or one per column when b_zero_per_column (nullptr: 0).
  const int32_t* b_zero = nullptr;
  bool b_zero_per_column = false;
  // Indirect A and segmented depth (the indirect-GEMM convolution, conv_igemm_int8.h): the
  // depth is a_segments runs of segment_len (a multiple of 4; k = a_segments * segment_len).
  // When a_rows is set, a, trans_a and lda are not read: a_rows(a_rows_arg, i0, rows, ptrs)
  // sets ptrs[r * a_segments + t] to the segment_len bytes of run t of row i0 + r. With
  // b_segment_valid > 0 (trans_b only), B's depth p = t * segment_len + e of column j is
  // b[j * ldb + e * a_segments + t] for e < b_segment_valid and 0 past it (a weight [M][C][taps]
  // read in (tap, channel) order with the channels padded to segment_len).
  void (*a_rows)(void* arg, int64_t i0, int64_t rows, const uint8_t** ptrs) = nullptr;
  void* a_rows_arg = nullptr;
  int64_t a_segments = 1, segment_len = 0, b_segment_valid = 0;
  Int8Epilogue epilogue;
  // Output element (i, j) is at c + i * ldc_row + j * ldc_col elements of the epilogue's
  // type (int32, float, uint8 or int8); ldc_col != 1 stores a transposed product (ConvInteger
  // computes [positions x channels] and stores [channels x positions]).
  void* c = nullptr;
  int64_t ldc_row = 0, ldc_col = 1;
};

// Runs the product on the active kernel path (or `path`, which the CPU must support), split
// over ctx's workers when ctx is not null. B is packed once per registered package weight
// (packed_weights.h) and per call otherwise. Must not be called inside a parallel_range body.
void gemm_int8(OpContext* ctx, const Int8GemmArgs& args);
void gemm_int8(OpContext* ctx, const Int8GemmArgs& args, CpuPath path);

// The epilogue outside the GEMM (the direct depthwise convolution): out[i * stride] for
// i < count (elements of ep's type) from the int32 sums acc[i] of output column j, with the
// formulas gemm_int8 applies.
void int8_epilogue_column(const Int8Epilogue& ep, int64_t j, const int32_t* acc, int64_t count,
                          void* out, int64_t stride);

// The int8 micro kernel a path runs: "avx512-vnni" (vpdpbusd, 14 x 32), "avx2" (operands
// widened to int16, vpmaddwd: no saturation, 4 x 8), "portable" (4 x 4, SSE2 pmaddwd where
// the baseline has it). The avx512 path uses the avx2 kernel on CPUs without VNNI.
const char* int8_kernel_name(CpuPath path);

// Rows at or below which the product takes the GEMV form (each row tile as wide as the rows,
// every packed weight byte read once per call).
constexpr int64_t kInt8GemvMaxRows = 4;

}  // namespace cuvil::rt::ops
