// The interface between the shape-inference pass (passes/infer_shapes.cpp) and the per-op
// rules (passes/shape/*.cpp, one file per op family). A rule reads its node's inputs through
// an InferContext and sets dtype, shape and (for small integer tensors) symbolic contents of
// the outputs. Rules never guess: an output whose dim cannot be determined stays nullopt
// ("?"), and a dim that depends on tensor *data* (NonZero, Unique, ...) gets a fresh named
// symbol from `data_dependent_dim`. Inputs whose rank is unknown make outputs unknown unless
// the rule can say more. Bad models (incompatible broadcast, bad attributes) are reported
// with `ctx.fail(...)`, which names the node.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "passes/infer_shapes.h"
#include "support/error.h"
#include "support/limits.h"

namespace cuvil::shape {

class InferContext;
using InferFn = void (*)(InferContext&);

// Per-run state shared by all nodes (symbol minting, ranges, caps).
struct InferState {
  Model* model = nullptr;
  CompileLimits limits;
  int fresh_counter = 0;
  int depth = 0;  // subgraph nesting
  // Symbols data_dependent_dim has minted, in order: name -> serial. A symbol minted after a
  // serial recorded before inferring a body is a per-iteration fact of that body (control.cpp);
  // a watermark instead of a copy of every known symbol keeps each Loop/Scan O(1) here.
  std::unordered_map<std::string, int64_t> minted;
  ShapeInferenceStats stats;
  // The widening budget is spent: Loop/Scan fixpoints go straight to their general result.
  bool widen_at_once() const { return stats.rule_applications > stats.widening_budget; }
};

class InferContext {
 public:
  InferContext(InferState& state, Graph& graph, Node& node)
      : state_(state), graph_(graph), node_(node) {}

  const Node& node() const { return node_; }
  Graph& graph() { return graph_; }
  Model& model() { return *state_.model; }
  const InferState& state() const { return state_; }
  InferState& state() { return state_; }
  const CompileLimits& limits() const { return state_.limits; }
  const sym::SymbolRanges& ranges() const { return state_.model->ranges; }

  size_t num_inputs() const { return node_.inputs.size(); }
  size_t num_outputs() const { return node_.outputs.size(); }
  bool has_input(size_t i) const { return node_.input(i) != kNoValue; }
  bool has_output(size_t i) const {
    return i < node_.outputs.size() && node_.outputs[i] != kNoValue;
  }
  // nullptr for an omitted optional input.
  const Value* input(size_t i) const;
  // Fails (invalid model) when the input is required but omitted.
  const Value& required_input(size_t i) const;
  Value* output(size_t i);  // nullptr for an omitted output

  // Attribute access (fails with the node name on a kind mismatch).
  int64_t attr_int(const std::string& key, int64_t fallback) const {
    return node_.attr_int(key, fallback);
  }
  float attr_float(const std::string& key, float fallback) const {
    return node_.attr_float(key, fallback);
  }
  std::string attr_string(const std::string& key, const std::string& fallback) const {
    return node_.attr_string(key, fallback);
  }
  std::optional<std::vector<int64_t>> attr_ints(const std::string& key) const {
    return node_.attr_ints(key);
  }

  // Input i's contents as integers when constant (data or fully constant sym_data).
  std::optional<std::vector<int64_t>> const_ints(size_t i) const;
  // Input i's contents as symbolic expressions (sym_data, or constant data of rank <= 1).
  std::optional<std::vector<DimExpr>> sym_ints(size_t i) const;
  // Input i's single scalar value as an expression (rank 0 or one-element rank 1).
  std::optional<DimExpr> sym_scalar(size_t i) const;

  // Output setters. `set_output` with a nullopt shape leaves the rank unknown.
  void set_output(size_t i, DType dtype, std::optional<Shape> shape);
  void set_output_sym_data(size_t i, std::vector<DimExpr> contents);

  // Normalises axis into [0, rank) or fails naming the node and attribute.
  int64_t normalize_axis(int64_t axis, int64_t rank, const char* what = "axis") const;
  // Numpy broadcasting of several shapes; fails on provably incompatible dims. A pair of
  // symbolic dims that cannot be proven equal (and neither is 1) broadcasts to the first one
  // that is not 1 — exporters rely on this and the runtime checks it when shapes are bound.
  std::optional<Shape> broadcast(const std::vector<const Value*>& operands) const;

  // A fresh symbol for a data-dependent extent, named "<hint>_<n>" (e.g. "nonzero_0").
  DimExpr data_dependent_dim(const std::string& hint);

  // Runs shape inference on a subgraph (If/Loop/Scan bodies). Captured values pick up the
  // enclosing graph's current shapes; body inputs must be set by the caller before.
  void infer_subgraph(Graph& body);

  template <typename... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    cuvil::fail(ExitCode::kInvalidModel, "node '", node_.name, "' (", node_.op_type, "): ",
                parts...);
  }
  template <typename... Parts>
  [[noreturn]] void unsupported(const Parts&... parts) const {
    cuvil::fail(ExitCode::kUnsupported, "node '", node_.name, "' (", node_.op_type, "): ",
                parts...);
  }

 private:
  InferState& state_;
  Graph& graph_;
  Node& node_;
};

// Rank helper: nullopt when unknown.
inline std::optional<int64_t> rank_of(const Value* v) {
  if (!v || !v->shape) return std::nullopt;
  return static_cast<int64_t>(v->shape->size());
}

// A shape of `rank` unknown dims.
inline Shape unknown_dims(int64_t rank) { return Shape(static_cast<size_t>(rank)); }

// Dim arithmetic on hostile values can overflow; sym reports that without naming the node, so
// the sites that combine dims with values read from the model go through this.
template <typename F>
auto naming_overflow(const InferContext& ctx, const char* what, F compute) -> decltype(compute()) {
  try {
    return compute();
  } catch (const Diagnostic& d) {
    ctx.fail(what, ": ", d.what());
  }
}

// Dtypes whose contents TensorData::int_at reads; 4-bit types are packed and not shape material.
inline bool readable_as_ints(DType t) {
  return (dtype_is_integer(t) && t != DType::Int4 && t != DType::UInt4) || t == DType::Bool;
}

// The shared checks of cuvil's fused ops with an epilogue (FusedMatMul, FusedConv;
// ir/fused_ops.h), after output 0 is set: `activation` names a known activation, and inputs
// first_operand.. (bias, residual) broadcast onto output 0 without changing its shape.
void check_fused_epilogue(InferContext& ctx, size_t first_operand);

// The rule table, expanded from ir/ops.def (kOpKindCount entries).
InferFn rule_for(OpKind op);

// Every rule named in ops.def, declared once per name (duplicates are harmless).
#define CUVIL_OP(name, domain, rule, flags) void infer_##rule(InferContext& ctx);
#include "ir/ops.def"
#undef CUVIL_OP

}  // namespace cuvil::shape
