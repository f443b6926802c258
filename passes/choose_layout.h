// Pass: chains of convolutions run channels-last (cuvil::FusedConv layout = "NHWC"), with the
// pools inside and after them.
//
// Rewrites: with layout nhwc, every maximal chain of eligible FusedConv nodes becomes NHWC. A
// FusedConv is eligible when its layout is NCHW (the default), X and Y have known rank >= 3 and
// its residual, if any, has Y's rank. Two eligible convs are in one chain when one reads the
// other's output as X or residual, or both read the same value as X or residual. A pool
// (MaxPool whose Indices nobody reads, AveragePool, GlobalAveragePool, GlobalMaxPool; float32,
// layout NCHW, known rank >= 3) joins the chain of the conv or pool whose output it reads as X,
// so ResNet's stem MaxPool sits inside the chain and its GlobalAveragePool ends it, writing an
// [N, 1, 1, C] value whose Transpose back is a copy of N x C floats. A pool never starts a chain
// (in front of the first conv it would make the entry Transpose move the unpooled tensor) and
// chains are sized by their convs. Inside a chain the nodes pass NHWC values to each other
// directly; each value entering the chain from outside goes through one ONNX Transpose to NHWC
// (perm [0, 2, ..., r-1, 1], shared by every conv that reads it), and each output that anything
// else reads (another op, a graph output, a subgraph) comes back through one Transpose to NCHW
// (perm [0, r-1, 1, ..., r-2]) writing the original value, so the rest of the graph is
// unchanged. Any other op ends the chain (elementwise ops between convs are already epilogues
// after fuse-epilogues). W and B are not touched (the NHWC kernel reads W as it is); a moved
// MaxPool loses its unread Indices output.
// With layout auto, only chains of at least kAutoNhwcMinChain convs are rewritten: the two
// boundary transposes each move one activation tensor, while every conv reads and writes at
// least one, so from three convs on the transposes are a minor share of the chain's memory
// traffic; one or two convs alone would pay about as much for the transposes as they could gain.
// With layout nchw the pass does nothing. Values are the same as the NCHW graph's up to the
// order of the floating-point sums inside a conv (fused/unfused tolerance); the NHWC pools give
// the NCHW pools' bits.
// Requires: infer_shapes, fuse_epilogues (convs are FusedConv). After: a verified model; the
// NHWC values have their permuted shapes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ir/graph.h"

namespace cuvil {

enum class LayoutChoice { kAuto, kNchw, kNhwc };

// "auto", "nchw", "nhwc" (the spelling of --layout and the config key `layout:`).
std::optional<LayoutChoice> parse_layout_choice(const std::string& s);
const char* layout_choice_name(LayoutChoice c);

// The fewest convs in a chain that layout auto rewrites (see above).
constexpr int64_t kAutoNhwcMinChain = 3;

struct ChooseLayoutStats {
  int64_t chains = 0;      // chains rewritten to NHWC
  int64_t convs = 0;       // FusedConv nodes rewritten
  int64_t pools = 0;       // pool nodes rewritten
  int64_t transposes = 0;  // boundary Transpose nodes added
};

ChooseLayoutStats choose_layout(Model& model, LayoutChoice choice);

}  // namespace cuvil
