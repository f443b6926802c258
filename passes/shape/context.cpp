// InferContext: input/output access and the helpers every shape rule shares.
#include "passes/shape/infer.h"

namespace cuvil::shape {
namespace {
// Symbolic contents are tracked only for small tensors: shape arithmetic, not data (and never
// more than limits.max_fold_elements).
constexpr int64_t kMaxSymElements = 1024;

// Types TensorData::int_at reads; packed 4-bit tensors are not shape material.
bool is_index_dtype(DType t) {
  return (dtype_is_integer(t) && t != DType::Int4 && t != DType::UInt4) || t == DType::Bool;
}
}  // namespace

const Value* InferContext::input(size_t i) const {
  ValueId id = node_.input(i);
  return id == kNoValue ? nullptr : &graph_.value(id);
}

const Value& InferContext::required_input(size_t i) const {
  const Value* v = input(i);
  if (!v) fail("required input ", i, " is missing");
  return *v;
}

Value* InferContext::output(size_t i) {
  if (!has_output(i)) return nullptr;
  return &graph_.value(node_.outputs[i]);
}

std::optional<std::vector<DimExpr>> InferContext::sym_ints(size_t i) const {
  const Value* v = input(i);
  if (!v) return std::nullopt;
  if (v->sym_data) return v->sym_data;
  if (v->data && is_index_dtype(v->data->dtype) && v->data->dims.size() <= 1 &&
      v->data->numel() <= std::min(kMaxSymElements, state_.limits.max_fold_elements)) {
    std::vector<DimExpr> out;
    for (int64_t k = 0; k < v->data->numel(); ++k) out.emplace_back(v->data->int_at(k));
    return out;
  }
  return std::nullopt;
}

std::optional<std::vector<int64_t>> InferContext::const_ints(size_t i) const {
  const Value* v = input(i);
  if (!v) return std::nullopt;
  // Reading constant data is compile-time work bounded by max_fold_elements; larger
  // tensors are treated as unknown contents (the rules then leave their results symbolic).
  if (v->data && is_index_dtype(v->data->dtype) &&
      v->data->numel() <= state_.limits.max_fold_elements) {
    std::vector<int64_t> out;
    out.reserve(static_cast<size_t>(v->data->numel()));
    for (int64_t k = 0; k < v->data->numel(); ++k) out.push_back(v->data->int_at(k));
    return out;
  }
  auto s = sym_ints(i);
  if (!s) return std::nullopt;
  std::vector<int64_t> out;
  for (const DimExpr& e : *s) {
    auto c = e.constant();
    if (!c) return std::nullopt;
    out.push_back(*c);
  }
  return out;
}

std::optional<DimExpr> InferContext::sym_scalar(size_t i) const {
  auto s = sym_ints(i);
  if (!s || s->size() != 1) return std::nullopt;
  return (*s)[0];
}

void InferContext::set_output(size_t i, DType dtype, std::optional<Shape> shape) {
  Value* v = output(i);
  if (!v) return;
  v->kind = ValueKind::Tensor;
  v->dtype = dtype;
  if (shape) {
    for (auto& d : *shape)
      if (d) d = sym::simplify(*d, ranges());
  }
  v->shape = std::move(shape);
}

void InferContext::set_output_sym_data(size_t i, std::vector<DimExpr> contents) {
  Value* v = output(i);
  if (!v || static_cast<int64_t>(contents.size()) >
                std::min(kMaxSymElements, state_.limits.max_fold_elements))
    return;
  for (auto& e : contents) e = sym::simplify(e, ranges());
  v->sym_data = std::move(contents);
}

int64_t InferContext::normalize_axis(int64_t axis, int64_t rank, const char* what) const {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) fail(what, " ", axis, " is out of range for rank ", rank);
  return a;
}

namespace {
// A min or max in the expression: Slice's clamps leave them in dims.
bool has_clamp(const DimExpr& e) {
  const std::string t = e.to_string();
  return t.find("min(") != std::string::npos || t.find("max(") != std::string::npos;
}
}  // namespace

std::optional<Shape> InferContext::broadcast(const std::vector<const Value*>& operands) const {
  size_t rank = 0;
  for (const Value* v : operands) {
    if (!v || !v->shape) return std::nullopt;
    rank = std::max(rank, v->shape->size());
  }
  Shape out(rank, Dim(DimExpr(1)));
  for (size_t k = 0; k < rank; ++k) {
    Dim acc = DimExpr(1);
    for (const Value* v : operands) {
      const Shape& s = *v->shape;
      if (k + s.size() < rank) continue;  // implicit leading 1
      const Dim& d = s[k + s.size() - rank];
      if (!d) {
        if (acc && acc->constant() == 1) acc.reset();
        continue;
      }
      if (d->constant() == 1) continue;
      if (!acc || acc->constant() == 1) {
        // Unknown accumulator: a known non-1 dim decides the result.
        acc = d;
        continue;
      }
      if (sym::prove_equal(*acc, *d, ranges())) continue;
      auto ca = acc->constant(), cd = d->constant();
      if (ca && cd)
        fail("cannot broadcast dimension ", *ca, " with ", *cd, " (input '", v->name,
             "' axis ", k + s.size() - rank, ")");
      // Symbolic vs constant or two symbolic dims: prefer the constant, then a dim without a
      // clamp over one with (a causal mask sliced to min(seq, 64) against scores over seq: a
      // valid model has them equal, and seq keeps the shapes after it provable); the runtime
      // checks.
      if ((cd && !ca) || (!ca && !cd && has_clamp(*acc) && !has_clamp(*d))) acc = d;
    }
    out[k] = acc;
  }
  return out;
}

DimExpr InferContext::data_dependent_dim(const std::string& hint) {
  std::string base = hint;
  for (char& c : base)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '_')) c = '_';
  for (;;) {
    std::string name = base + "_" + std::to_string(state_.fresh_counter++);
    if (!state_.model->ranges.has(name)) {
      state_.model->ranges.set(name, sym::Range{0, sym::Range::kUnbounded});
      state_.minted.emplace(name, static_cast<int64_t>(state_.minted.size()));
      return DimExpr::symbol(name);
    }
  }
}

}  // namespace cuvil::shape
