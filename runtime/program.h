// The decoded form of a bytecode program, shared by the compiler (codegen builds it, then
// encodes it into the package) and the runtime (decodes and verifies it on load).
//
// A Program is parametric in shape symbols: every extent, stride, offset and the arena size
// is an entry of the expression table, evaluated when shapes are bound (runtime/session.cpp).
// Symbols are bound from input dims, or — for data-dependent extents (NonZero, Unique, ...) —
// from the dims a whole-tensor kernel computes while running.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace cuvil::rt {

constexpr uint32_t kNone = 0xffffffffu;

enum class Opcode : uint8_t {
#define CUVIL_INSN(name, operands) name,
#include "runtime/isa.def"
#undef CUVIL_INSN
  kCount,
};
enum class TileOpcode : uint8_t {
#define CUVIL_TILE(name, operands) name,
#include "runtime/isa.def"
#undef CUVIL_TILE
  kCount,
};
enum class UnaryFn : uint8_t {
#define CUVIL_TILE_UNARY(name, onnx) name,
#include "runtime/isa.def"
#undef CUVIL_TILE_UNARY
  kCount,
};
enum class BinaryFn : uint8_t {
#define CUVIL_TILE_BINARY(name, onnx) name,
#include "runtime/isa.def"
#undef CUVIL_TILE_BINARY
  kCount,
};

const char* opcode_name(Opcode op);
const char* opcode_operands(Opcode op);  // operand kinds, e.g. "TJ"
const char* tile_opcode_name(TileOpcode op);
const char* tile_opcode_operands(TileOpcode op);
const char* unary_fn_name(UnaryFn f);
const char* binary_fn_name(BinaryFn f);
// Element dtypes a tile map's tensor (and a Cast instruction) may have: Load converts them to
// float32 registers and Store back, with the whole-tensor Cast kernel's rules.
bool tile_dtype_supported(DType t);

// ---- expressions (postfix code over int64, checked arithmetic at evaluation) ----
enum class ExprOpKind : uint8_t { kConst, kSymbol, kAdd, kMul, kFloorDiv, kMod, kMin, kMax };
struct ExprOp {
  ExprOpKind kind = ExprOpKind::kConst;
  int64_t value = 0;  // constant, or symbol index
};
struct ExprRange {
  uint32_t begin = 0, count = 0;  // slice of Program::expr_code
};

struct Symbol {
  std::string name;
  int64_t lo = 0, hi = INT64_MAX;  // accepted range at bind time
  bool data_dependent = false;     // bound by a kernel while running, not from input dims
};

enum class TensorKind : uint8_t { kInput, kOutput, kWeight, kIntermediate };
const char* tensor_kind_name(TensorKind k);

struct TensorDesc {
  std::string name;
  TensorKind kind = TensorKind::kIntermediate;
  DType dtype = DType::Float;
  std::vector<uint32_t> dims;       // expression ids
  uint32_t io_index = kNone;        // position among inputs/outputs
  uint64_t weight_offset = 0;       // weights: byte offset in the weights section
  uint64_t weight_size = 0;         // weights: byte size (must equal numel x element size)
  uint32_t arena_offset = kNone;    // intermediates: expression id of the byte offset in the
                                    // arena; kNone = dynamic (heap, sized when produced)
};

// A whole-tensor op call (CallOp).
struct AttrValue {
  enum class Kind : uint8_t { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor };
  std::string name;
  Kind kind = Kind::kInt;
  std::vector<int64_t> ints;          // kInt (one), kInts; kTensor: dims
  std::vector<float> floats;          // kFloat (one), kFloats
  std::vector<std::string> strings;   // kString (one), kStrings
  DType tensor_dtype = DType::Undefined;
  std::vector<uint8_t> tensor_bytes;  // kTensor
};
struct NodeRecord {
  std::string op_type, domain, name;
  int32_t opset = 0;
  std::vector<uint32_t> inputs;   // tensor ids; kNone for an omitted optional input
  std::vector<uint32_t> outputs;  // tensor ids; kNone for an omitted optional output
  std::vector<AttrValue> attrs;
};

// A tile kernel: a fused group of elementwise ops over an iteration domain (the shape of the
// tensors it stores). The domain is walked as [rows, cols] tiles: cols is the last dim, rows
// all others; a tile is up to tile_rows x tile_cols elements, partial at the edges.
//
// Optional reduction loop: when loop_extent is an expression id, the body is three sections,
// [0, init_end) run once per tile, [init_end, loop_end) run once per chunk of up to
// loop_chunk steps of the loop index k in [0, loop_extent), [loop_end, end) run once per tile
// after the loop. Maps advance by loop_stride elements per step of k. Without a loop,
// init_end == loop_end == 0 and the whole body is one straight-line section.
struct AccessMap {
  uint32_t tensor = kNone;
  uint32_t offset = kNone;        // expression id: element offset of domain index 0
  std::vector<uint32_t> strides;  // expression ids, one per domain dim (0 = broadcast)
  uint32_t loop_stride = kNone;   // expression id: elements per step of the loop index;
                                  // kNone = the map does not move with the loop
};
struct TileKernel {
  std::string name;
  std::vector<uint32_t> domain;   // expression ids
  std::vector<AccessMap> maps;
  uint32_t registers = 0;         // tile registers the body uses
  std::vector<uint32_t> body;     // encoded tile instructions (CUVIL_TILE)
  uint32_t loop_extent = kNone;   // expression id of the reduction loop's trip count, or kNone
  uint32_t loop_chunk = 0;        // loop steps per chunk (1..kMaxLoopChunk) when there is a loop
  uint32_t init_end = 0;          // body word where the loop section starts
  uint32_t loop_end = 0;          // body word where the finish section starts
};
// Loop steps per chunk: a chunk register holds tile elements x chunk <= kTileRegisterElements.
constexpr uint32_t kMaxLoopChunk = 1024;
// Elements of one tile register.
constexpr int64_t kTileRegisterElements = 4096;

// A program-level loop: an ONNX Loop or Scan whose body was inlined between LoopTest and
// LoopNext (runtime/session.cpp runs the four Loop* instructions; docs/isa.md "Loops").
enum class LoopKind : uint8_t { kLoop, kScan };
struct LoopScanInput {
  uint32_t source = kNone;  // tensor sliced along `axis`, one slice per iteration
  uint32_t slice = kNone;   // body input tensor receiving the slice
  uint32_t axis = 0;
  uint8_t reverse = 0;      // 1: last slice first
};
struct LoopScanOutput {
  uint32_t body = kNone;     // body tensor collected at every iteration
  uint32_t stacked = kNone;  // node output: the collected slices stacked along `axis`; kNone
                             // when the output is not used
  uint32_t axis = 0;
  uint8_t reverse = 0;       // 1: last iteration first
};
struct LoopDesc {
  LoopKind kind = LoopKind::kLoop;
  std::string name;
  uint32_t counter = kNone;    // int64 scalar: the iteration number (the Loop body's input 0)
  uint32_t max_trips = kNone;  // Loop: integer scalar trip count M, kNone = unbounded
  uint32_t cond_init = kNone;  // Loop: bool scalar initial condition, kNone = not tested
  uint32_t cond = kNone;       // Loop: bool scalar condition (the body's input 1)
  uint32_t cond_next = kNone;  // Loop: the body's condition output
  std::vector<uint32_t> init;    // loop-carried values: initial tensors (outside the loop)
  std::vector<uint32_t> state;   // ... the body inputs holding them during an iteration
  std::vector<uint32_t> next;    // ... the body outputs giving the next iteration's values
  std::vector<uint32_t> final;   // ... node outputs receiving the last values (kNone: unused)
  std::vector<LoopScanInput> scan_inputs;    // Scan only
  std::vector<LoopScanOutput> scan_outputs;
  // Per-iteration facts: symbols unbound and tensors emptied when an iteration starts, so a
  // body may produce different shapes in different iterations.
  std::vector<uint32_t> symbols;
  std::vector<uint32_t> tensors;
};

struct Program {
  std::vector<Symbol> symbols;
  std::vector<ExprOp> expr_code;
  std::vector<ExprRange> exprs;
  std::vector<TensorDesc> tensors;
  std::vector<uint32_t> inputs;   // tensor ids in input order
  std::vector<uint32_t> outputs;  // tensor ids in output order
  std::vector<NodeRecord> nodes;
  std::vector<TileKernel> kernels;
  std::vector<uint32_t> code;     // encoded program instructions (CUVIL_INSN)
  uint32_t arena_size = kNone;    // expression id
  uint64_t weights_size = 0;      // bytes of the weights section this program refers to
  std::vector<LoopDesc> loops;    // loop records (LoopInit/LoopTest/LoopNext/LoopExit)
};

// Binary encoding of a Program (one program of the PROGRAMS section) and its checked decoding.
std::vector<uint8_t> encode_program(const Program& p);
// Decoding checks every length against the remaining bytes; semantic checks are the
// verifier's (runtime/verifier.h). Returns false with a message on malformed input.
bool decode_program(const uint8_t* data, size_t size, Program* out, std::string* error);

}  // namespace cuvil::rt
