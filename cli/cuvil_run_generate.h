// cuvil-run --generate: greedy decoding with a package whose KV cache is session state
// (docs/kv_cache.md). Uses only the public C API.
#pragma once

#include <map>
#include <string>

#include "cli/npy.h"
#include "cuvil.h"

namespace cuvil::tools {

// Prefills `host`'s input_ids, then generates `tokens` ids one at a time, feeding back the
// argmax of the last position's logits; fills attention_mask (ones over cache + new) and
// position_ids (from the cache length) when the model has them. Prints `tokens: ...` and
// `decode: N tokens, X tokens/s, first token Y ms`; then resets the state, runs the prefill
// once more and prints `prefill again: Z ms ...` (the first token without one-time costs; a
// different first token there is an error). Errors go to stderr; returns the exit code (0, 2
// usage/bad input, 6 run failed).
int run_generate(cuvil_model* model, cuvil_session* session, std::map<std::string, HostTensor>& host, int tokens);

}  // namespace cuvil::tools
