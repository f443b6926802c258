// --freeze (and the config's `freeze:`): fixes the value of a model input at compile time.
// The input becomes an initializer before the passes run, so constant folding and shape
// inference see its contents (an If on a sample rate or a flag folds to the branch taken),
// and it leaves the package's input list.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "options/compile_options.h"

namespace cuvil {

// Parses one --freeze argument `name=value` or `name=file.npy` (exit 2 when there is no '='
// or no name).
FreezeSpec parse_freeze_option(const std::string& text);

// Makes each named graph input of `m` an initializer holding the given value. A value ending
// in ".npy" is a NumPy file whose dtype and shape must equal the input's; anything else is one
// number (true/false for bool) for an input of one element. Every dim of a frozen input must
// be known (a symbolic one is fixed with --dim first). Errors are usage errors (exit 2) that
// name the input and where the value came from: an unknown input (the inputs are listed), a
// dtype or shape mismatch, a value that does not parse or fit the dtype, a bad .npy file.
void freeze_inputs(Model& m, const std::vector<FreezeSpec>& specs);

}  // namespace cuvil
