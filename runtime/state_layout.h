// How a session keeps each state (KV cache) of a package: in place or by copying
// (docs/kv_cache.md). Decided from the programs alone, so a package needs no flag for it: the
// loader, the session, `cuvilc inspect` and the compiler's report all ask this one function.
//
// In place: the state's buffer holds [outer..., max, inner...] (the row stride along the length
// axis is the maximum length, not the current one); the committed rows are [0, length). A run
// binds the past to those rows and the fused cuvil::Attention that reads the past appends the
// new rows at [length, length + new) of the same buffer and reads keys and values from it
// through that stride; committing is advancing the length. Nothing at or below the committed
// length is written by a run, so a run that fails changes nothing a reader can see.
//
// That is only safe when the Attention node is the whole story: in every program the present
// is written by one cuvil::Attention (output 1 or 2) whose past_key / past_value (input 4 or 5)
// is the state's input, that node runs once per run (CallOp, no loops), and nothing else reads
// the past or the present (no other node, tile kernel or Copy, except ops that read only the
// past's dims, such as Shape; the present is the program output only). Otherwise the state is copied: the present is written whole, packed, and the
// commit swaps it in.
#pragma once

#include <string>
#include <vector>

#include "runtime/package.h"
#include "runtime/program.h"

namespace cuvil::rt {

struct StateLayout {
  bool in_place = false;
  std::string why_copied;  // when not in place: the first reason found, naming the tensor or node
};

// One layout per state record; every program of the package must allow in place for a state
// to be kept in place.
std::vector<StateLayout> plan_state_layouts(const std::vector<const Program*>& programs,
                                            const std::vector<StateRecord>& states);

// "in place" or "copied: <why>", for the manifest, the compile report and inspect.
std::string state_layout_text(const StateLayout& layout);

}  // namespace cuvil::rt
