// Tile kernels with a reduction loop, and casts inside elementwise chains: which nodes the
// lowering (codegen/lower.cpp) turns into them, and the TileKernel for one such node.
//
// Loop kernels are one node each: ReduceSum/ReduceMean/ReduceMax/ReduceMin over a contiguous
// run of axes that ends at the last axis (loads of [tile x chunk] through a map whose loop stride walks the run, then a
// Reduce* into an accumulator), MatMul with rank >= 2 operands (batch broadcasting is a stride
// of 0) and Gemm (transposes are strides; alpha, beta and C are a finish-section epilogue),
// both as one Mma over the K loop, and cuvil::FusedMatMul (ir/fused_ops.h: its transposes are
// strides; alpha, bias, residual and the activation are the finish-section epilogue, in that
// order). Everything is float32. Elementwise ops that consume the
// result may follow in the finish section (the lowerer fuses them as an epilogue). Casts join elementwise chains when
// the round trip through a float32 register is exact for the source dtype and matches the
// whole-tensor Cast kernel's rules (fusible_cast).
// Requires: shapes inferred (the lowerer passes every dim known, see KernelContext).
// After: kernels that runtime/verifier.cpp accepts (docs/isa.md "Reduction loop").
#pragma once

#include <cstdint>
#include <functional>

#include "ir/graph.h"
#include "runtime/program.h"

namespace cuvil::codegen::tile {

// What the lowerer provides to build a kernel.
struct KernelContext {
  const Graph& graph;
  const sym::SymbolRanges& ranges;
  std::function<uint32_t(const DimExpr&)> expr;  // expression id of a dim expression
  std::function<uint32_t(ValueId)> tensor;       // tensor id of a value
  std::function<const Shape&(ValueId)> shape;    // a value's shape, every dim known
};

// True when node n becomes a tile kernel of its own with a reduction loop.
bool is_loop_kernel(const Node& n, const KernelContext& ctx);

// The kernel of a node for which is_loop_kernel holds, without its store: the node's value
// is in register `result` at the end of the finish section, where the lowerer appends the
// elementwise ops fused after it (an epilogue) and the Store. Its domain is the node's
// output shape.
struct LoopKernel {
  rt::TileKernel kernel;
  uint32_t result = 0;
};
LoopKernel emit_loop_kernel(const Node& n, const KernelContext& ctx);

// True for a Cast between tile dtypes whose result through a float32 register (Load converts
// the source to float32, the Cast instruction or Store converts to the target) is exactly
// the whole-tensor Cast kernel's: sources whose values are all exact in float32 (float32,
// float16, bfloat16, int8, uint8, bool), and no integer narrowing that the kernel wraps but a
// float32 round trip would saturate (int8 <-> uint8).
bool fusible_cast(const Node& n, const Graph& g);

// Loop steps per chunk of the reduction kernels' loads, and of Mma.
constexpr uint32_t kReduceChunk = 256;
constexpr uint32_t kMmaChunk = 256;

}  // namespace cuvil::codegen::tile
