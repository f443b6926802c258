// Text form of a bytecode program (`cuvilc inspect`, `--emit bytecode`, test failure output).
// Instructions are printed from the ISA table (runtime/isa.def), so a new opcode needs no
// change here. The text is for people and golden tests; nothing parses it back.
#pragma once

#include <string>

#include "runtime/program.h"

namespace cuvil::rt {

// Symbols with ranges, expressions in infix, the tensor table, node records with attributes,
// kernels with their access maps and bodies, and the code with word positions (the numbers
// jump targets use). Safe on unverified programs: bad indices print as such, never crash.
std::string disassemble(const Program& p);

}  // namespace cuvil::rt
