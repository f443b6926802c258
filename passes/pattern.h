// The pattern engine: rewrite rules as data (STYLE.md, tinygrad). A Pattern is a small graph of
// ops over named variables, constraints on the variables (constants with a value, vectors
// along the last axis), and what the match becomes. The built-in canonicalisation rules
// (passes/builtin_patterns.cpp) and the user's `patterns:` in a cuvilc config
// (docs/config.md) are the same structure, matched by the same code.
//
// Matching starts at a node whose op is the root pattern node's and walks producers. Add and
// Mul match their inputs in either order. Every value a match consumes internally (the
// outputs of matched nodes other than the root) must be read only by matched nodes, so a
// rewrite never duplicates work or removes a value someone else reads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace cuvil {

struct PatternAttr {
  enum class Kind { Int, Float, String, FloatOfConstant } kind = Kind::Int;
  std::string name;
  int64_t i = 0;
  double f = 0;
  std::string s;  // the string, or for FloatOfConstant the constant variable whose value it takes
};

struct PatternNode {
  std::string op;                   // op type in `domain`
  std::vector<std::string> inputs;  // variable names
  std::string output;               // variable bound to the node's output 0
  // Reduce*: reduces exactly the last axis of its input, keepdims = 1 (attribute or input form).
  bool reduce_last_axis = false;
  // "" = ONNX; "cuvil" matches a fused op an earlier rule produced (SwiGLU over cuvil::SiLU).
  std::string domain = "";
  // Outputs 1.. of a multi-output node (Split), each bound to a variable; the node must have
  // exactly 1 + more_outputs.size() outputs.
  std::vector<std::string> more_outputs = {};
  // Concat: joins along the last axis. Split: cuts the last axis of its input into equal parts,
  // one per output; only its data input is matched (the sizes, if any, are checked).
  bool along_last_axis = false;
  // Slice: takes [first * D, last * D) of the last axis (length D, a known constant) of its
  // input, step 1, from constant starts/ends/axes/steps (or the opset < 10 attributes); only
  // its data input is matched. {0.5, 1} is the second half. Unset (first > last): any Slice.
  double slice_first = 1, slice_last = 0;
  // Attributes the node must carry with exactly these values (Int, Float, String kinds).
  std::vector<PatternAttr> attrs = {};
};

struct PatternConstant {
  bool any_value = false;  // any constant whose elements are all equal (e.g. an epsilon)
  double value = 0;
  double tolerance = 0;    // relative: |x - value| <= tolerance * max(1, |value|)
};

struct Pattern {
  // rewrite: the match becomes one node (below). fuse: the matched nodes must become one tile
  // kernel (lowering fails saying why not). keep: the matched nodes are never fused.
  enum class Action { Rewrite, Fuse, Keep } action = Action::Rewrite;
  std::string name;
  std::vector<PatternNode> nodes;
  std::map<std::string, PatternConstant> constants;  // variable -> a constant tensor of this value
  // Variables that must be 1-D with the length of the last axis of `last_axis_of`.
  std::vector<std::string> last_axis_vectors;
  std::string last_axis_of;
  // Variables that broadcast (numpy) onto `broadcast_onto`'s shape without changing it (every
  // dim 1 or equal), e.g. Rotary's cos and sin onto x.
  std::vector<std::string> broadcasting;
  std::string broadcast_onto;
  // When set, the root's value has exactly this variable's shape (an epsilon or a weight of
  // higher rank would otherwise widen the result the rewrite promises to keep).
  std::string root_shape_of;
  std::string root;  // output variable of the node that anchors the match
  // The replacement: one node of `op` in `rewrite_domain` ("" = ONNX, written against `opset`;
  // "cuvil" = an internal op of ir/fused_ops.h, opset 1) whose output is the root's value. A
  // rewrite to a cuvil op applies to float32 roots only: their CPU kernels take float32.
  std::string rewrite_domain;
  std::string rewrite_op;
  int rewrite_opset = 0;
  std::vector<std::string> rewrite_inputs;
  std::vector<PatternAttr> rewrite_attrs;
};

// Problems in a pattern's own structure (unknown op, unbound variable, no root), or "" when it
// is well formed. Checked before use for user patterns, and by a test for the built-in ones.
std::string check_pattern(const Pattern& pattern);

// Applies every rewrite pattern (others are skipped), in order, everywhere in the model
// (subgraphs included), until none matches; returns the number of rewrites per pattern name.
std::map<std::string, int64_t> apply_patterns(Model& model, const std::vector<Pattern>& patterns);

// The names of the nodes of every (non-overlapping) match of `pattern`, in every graph.
std::vector<std::vector<std::string>> find_matches(const Model& model, const Pattern& pattern);

// The built-in canonicalisation rules: exporter idioms rewritten to one op.
const std::vector<Pattern>& builtin_patterns();

}  // namespace cuvil
