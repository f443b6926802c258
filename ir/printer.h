// Text form of the IR (`cuvilc compile --emit ir`), which ir/parser.cpp reads back.
//
//   graph main(%x: f32[batch, 3, 224, 224]) -> (%logits) {
//     %w: f32[64, 3, 7, 7] = const elided<37632>
//     %c: i64[1] = const [12]
//     %y: f32[batch, 64, 112, 112] = Conv<13>(%x, %w, _) {pads = ints[3, 3, 3, 3]} @"/conv1/Conv"
//     %s: i64[4] {batch, 64, 112, 112} = Shape<13>(%y) @"/Shape"
//   }
//
// A value is `%name` (or `%"quoted"` when the name has other characters); its type is
// `dtype[dims]` with `?` for an unknown dim, `[*]` for an unknown rank; `{...}` after a type
// lists symbolic contents (sym_data). Ops print as OpType<opset> or "domain"::OpType<opset>
// (an op type that is not an identifier is quoted too); `_` is an omitted input or output.
// Constants up to `inline_limit` bytes print in full (integers, bools, f32 and f64 as lists,
// other dtypes as hex); larger ones print as `elided<bytes>`, which the parser reads back as
// zeros. docs/ir.md describes the whole text form.
#pragma once

#include <ostream>
#include <string>

#include "ir/graph.h"

namespace cuvil {

struct PrintOptions {
  size_t inline_limit = 64;  // bytes of constant data printed in full
};

void print_model(std::ostream& os, const Model& model, const PrintOptions& options = {});
std::string model_to_string(const Model& model, const PrintOptions& options = {});
std::string value_ref(const std::string& name);  // "%name" or "%\"quoted\""
std::string type_to_string(const Value& v);      // "f32[batch, 768]"

}  // namespace cuvil
