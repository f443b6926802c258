// Parser for the text form of the IR (ir/printer.h, described in docs/ir.md): reads back what
// `print_model` writes, so IR tests can start from text and printing a parsed model gives the
// same text again.
//
// What the text does not hold comes back empty: a constant printed as `elided<N>` parses back
// as N zero bytes of its dtype and dims (the text keeps the size, not the contents); `data` of
// values that are not initializers, Model::domain, doc_string and source_path are not printed.
// The producer line is split at its last space into name and version. Value ids are assigned
// in text order (inputs, then each statement), so they may differ from the printed model's.
// Two conveniences for hand-written text, never printed: the `model { ... }` block may be left
// out, and a node without `@"name"` is named `<op_type>_<index>` as the importer does. `//`
// starts a comment that runs to the end of the line.
//
// Hostile input is a user error, never a crash: nesting is capped, every count and size is
// checked, and the first error comes back as "line:column: message". A model that parses
// passes verify_model (every reference is resolved against values already defined).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace cuvil {

struct ParseOptions {
  int max_graph_depth = 64;  // subgraph nesting (the importer allows 32)
  // Zero bytes that all `elided<N>` constants of one model may allocate together.
  uint64_t max_elided_bytes = uint64_t{1} << 32;
};

// Returns nullopt and sets `*error` (when non-null) to "line:column: message" on bad input.
std::optional<Model> parse_model(std::string_view text, std::string* error,
                                 const ParseOptions& options = {});

}  // namespace cuvil
