// The load-time verifier of a decoded Program (DESIGN.md principle 4). It runs on every load
// path (runtime/package.cpp calls it before a LoadedPackage exists) and checks everything
// that can be checked without input shapes: every table index, every expression's postfix
// code, the tensor table against the weights section, node records, tile kernel bodies and
// the program code, all decoded through the one ISA table (runtime/isa.def).
//
// Its promise, relied on by the session and the interpreters: after verify_program returns
// ok, decoding any instruction or tile body reads only words that exist, every operand names
// an existing tensor/node/kernel/register/map/function, every jump lands on an instruction
// start, execution cannot fall off the end of the code, every expression evaluates with a
// stack of at most kMaxExprStackDepth values and exactly one result, weights lie inside the
// weights section, and nothing writes to an input or a weight. What it cannot check (tile
// accesses against bound shapes, data-dependent indices) is checked when shapes are bound.
#pragma once

#include <cstdint>

#include "runtime/program.h"
#include "runtime/status.h"

namespace cuvil::rt {

constexpr uint32_t kMaxTileRegisters = 16;   // per kernel
constexpr uint32_t kMaxExprStackDepth = 64;  // the evaluator's fixed stack (runtime/expr_eval)
constexpr uint32_t kMaxTensorRank = 16;      // CUVIL_MAX_RANK in runtime/include/cuvil.h

// Verifies `p` against a weights section of `weights_size` bytes. Every failure is a
// kInvalidPackage Status naming the object and index, e.g.
// "instruction 12 (CallOp): node record 99 out of range (have 40)".
Status verify_program(const Program& p, uint64_t weights_size);

// The operand position a tile instruction writes, derived from the table's operand kinds by
// the ISA convention (docs/isa.md): after any leading function operand (U, B), an R operand
// in first position is the destination register; every other R operand is read. Returns -1
// for instructions that write no register (Store). An A operand (accumulator) in that
// position is the destination too, and is also read. Shared by the verifier and disassembler.
int tile_destination_operand(TileOpcode op);

// Instructions that only make sense inside the reduction loop section (they consume a chunk
// of the loop), and whether an opcode is one.
bool tile_opcode_in_loop_only(TileOpcode op);

}  // namespace cuvil::rt
