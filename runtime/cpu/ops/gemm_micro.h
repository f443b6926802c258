// The float32 GEMM micro kernel of runtime/cpu/ops/linalg.cpp, shared with the tile
// interpreter's Mma instruction (runtime/cpu/tile_interpreter.cpp). Operands are packed:
// a as groups of kGemmMr rows interleaved per depth step (apack[g][p][kGemmMr]), b as panels
// of kGemmNr columns (bpack[panel][p][kGemmNr], zero-padded past column n). The kernel keeps
// a kGemmMr x kGemmNr tile of vector accumulators; an AVX2+FMA clone is picked at load time by
// CPU features, with a portable default.
#pragma once

#include <cstdint>

namespace cuvil::rt::ops {

constexpr int64_t kGemmMr = 4;   // rows of the register tile
constexpr int64_t kGemmNr = 16;  // float columns of the register tile (two 8-lane vectors)

// c[rows x n] (row stride ldc) gets the product of the packed a block (rows x kc) and panels
// [p0, p1) of packed b (panel_stride floats apart, each kc deep). first: c = beta * c + ab;
// otherwise c += ab.
void gemm_block_f32(int64_t rows, int64_t kc, int64_t n, int64_t p0, int64_t p1,
                    const float* apack, const float* bpack, int64_t panel_stride, float* c,
                    int64_t ldc, bool first, float beta);

}  // namespace cuvil::rt::ops
