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

struct PatternNode {
  std::string op;                   // op type in the default domain
  std::vector<std::string> inputs;  // variable names
  std::string output;               // variable bound to the node's only output
  // Reduce*: reduces exactly the last axis of its input, keepdims = 1 (attribute or input form).
  bool reduce_last_axis = false;
};

struct PatternConstant {
  bool any_value = false;  // any constant whose elements are all equal (e.g. an epsilon)
  double value = 0;
  double tolerance = 0;    // relative: |x - value| <= tolerance * max(1, |value|)
};

struct PatternAttr {
  enum class Kind { Int, Float, String, FloatOfConstant } kind = Kind::Int;
  std::string name;
  int64_t i = 0;
  double f = 0;
  std::string s;  // the string, or for FloatOfConstant the constant variable whose value it takes
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
  std::string root;  // output variable of the node that anchors the match
  // The replacement: one node of `op` in `rewrite_domain` ("" = ONNX, written against `opset`;
  // "cuvil" = an internal op of ir/fused_ops.h, opset 1) whose output is the root's value.
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
