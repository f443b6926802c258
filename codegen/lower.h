// Lowering: the shape-inferred IR -> a bytecode Program plus its weights blob.
//
// Rewrites: every node becomes either part of a tile kernel (chains of float32 elementwise
// ops whose intermediates have one consumer are fused into one kernel: loads through affine
// maps with broadcasting, register-to-register math, one store; exact Casts join them), a
// tile kernel with a reduction loop (float32 ReduceSum/Mean/Max/Min, MatMul, Gemm: see
// codegen/tile_kernels.h; elementwise chains after it join as an epilogue), or a CallOp of
// its whole-tensor CPU kernel. Initializers become 64-byte aligned weights. Intermediates get
// arena offsets from a liveness-based memory plan with symbolic sizes (codegen/memory_plan).
// Requires: infer_shapes has run; every value is a tensor of known rank. Unknown dims become
// data-dependent symbols bound when the producing kernel runs.
// After: a Program that runtime/verifier.cpp accepts.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/program.h"

namespace cuvil::codegen {

// Nodes a user pattern (`action: fuse` in a cuvilc config) asks to become one tile kernel.
struct FuseRequest {
  std::string pattern;
  std::vector<std::string> nodes;  // node names, all in one graph
};

struct LowerOptions {
  bool fuse_elementwise = true;
  // Node names never fused into a tile kernel (`action: keep`): each runs as its own op call.
  std::set<std::string> keep_unfused;
  // Each request must come out as exactly one tile kernel, or lowering fails (exit 4) saying why.
  std::vector<FuseRequest> fuse;
};

// A weight in the WEIGHTS section: its bytes (held, not copied, from the model) at `offset`.
// Between pieces the section is zero padding (64-byte alignment).
struct WeightPiece {
  uint64_t offset = 0;
  std::shared_ptr<const TensorData> data;
};

struct LoweredModel {
  rt::Program program;
  std::vector<WeightPiece> weight_pieces;  // in offset order
  uint64_t weights_size = 0;               // bytes of the WEIGHTS section
  std::string arena_expr;          // symbolic arena size, for reports
  std::string intermediates_expr;  // symbolic sum of all intermediate sizes
  std::vector<std::vector<std::string>> kernel_nodes;  // per tile kernel, the nodes it fuses
  int fused_kernels = 0;
  int fused_nodes = 0;
  int call_ops = 0;
  // Nodes not emitted because nothing the lowered code reads needs them (shape operands the
  // tile forms of Reshape/Expand/ConstantOfShape take from expressions instead).
  int skipped_nodes = 0;
  // Every node left as an op call, and every kernel boundary between fusible nodes, with why
  // (for the compile report): {node name, op type, reason}.
  struct NotFused {
    std::string node, op, why;
  };
  std::vector<NotFused> not_fused;
};

// Throws Diagnostic(kUnsupported) listing every op without a CPU kernel; for a model input or
// output that is not a tensor of a dtype the runtime has (string, complex, unknown; sequence,
// map, optional); for any string tensor or tensor of unknown dtype; for a control-flow
// condition or trip count not known to hold one element. The package it describes is one the
// runtime's loader accepts.
LoweredModel lower_model(const Model& model, const LowerOptions& options = {});

// The WEIGHTS section's bytes in memory (tests, and callers that want one buffer).
std::vector<uint8_t> gather_weights(const LoweredModel& lowered);

}  // namespace cuvil::codegen
