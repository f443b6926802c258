// Shape rules for cuvil's internal ops (ir/ops.def, domain "cuvil").
#include "ir/symbolic_ints.h"
#include "passes/shape/infer.h"

namespace cuvil::shape {

// SymbolicInts: dtype from `to`, shape from `shape`, contents the expressions over the input
// dims (ir/symbolic_ints.h); a dim inference left unknown leaves the contents unknown.
void infer_symbolic_ints(InferContext& ctx) {
  const std::vector<int64_t> dims = ctx.attr_ints("dims").value_or(std::vector<int64_t>{});
  const std::vector<int64_t> code = ctx.attr_ints("code").value_or(std::vector<int64_t>{});
  const std::vector<int64_t> lengths = ctx.attr_ints("lengths").value_or(std::vector<int64_t>{});
  const std::vector<int64_t> shape = ctx.attr_ints("shape").value_or(std::vector<int64_t>{});
  const int64_t to = ctx.attr_int("to", 7);
  if (to != static_cast<int64_t>(DType::Int64) && to != static_cast<int64_t>(DType::Int32))
    ctx.fail("attribute 'to' must be 7 (int64) or 6 (int32), got ", to);
  const size_t n = lengths.size();
  if (shape.empty() ? n != 1 : (shape.size() != 1 || shape[0] != static_cast<int64_t>(n)))
    ctx.fail("attribute 'shape' does not hold the ", n, " elements of 'lengths'");
  if (dims.size() % 2 != 0) ctx.fail("attribute 'dims' must hold (input, axis) pairs");
  Shape out_shape;
  for (int64_t d : shape) out_shape.push_back(DimExpr(d));
  ctx.set_output(0, static_cast<DType>(to), out_shape);
  std::vector<DimExpr> slots;
  bool known = true;
  for (size_t k = 0; k < dims.size(); k += 2) {
    if (dims[k] < 0 || static_cast<uint64_t>(dims[k]) >= ctx.node().inputs.size())
      ctx.fail("slot ", k / 2, " reads input ", dims[k], ", which is not there");
    const Value& x = ctx.required_input(static_cast<size_t>(dims[k]));
    if (!x.shape) {
      known = false;
      continue;
    }
    if (dims[k + 1] < 0 || static_cast<uint64_t>(dims[k + 1]) >= x.shape->size())
      ctx.fail("slot ", k / 2, " reads axis ", dims[k + 1], " of a rank-", x.shape->size(), " input");
    const Dim& d = (*x.shape)[static_cast<size_t>(dims[k + 1])];
    if (!d) known = false;
    slots.push_back(d ? *d : DimExpr(0));
  }
  struct ExprOps {
    DimExpr constant(int64_t v) const { return DimExpr(v); }
    DimExpr add(const DimExpr& a, const DimExpr& b) const { return a + b; }
    DimExpr mul(const DimExpr& a, const DimExpr& b) const { return a * b; }
    DimExpr floordiv(const DimExpr& a, const DimExpr& b) const { return sym::floordiv(a, b); }
    DimExpr mod(const DimExpr& a, const DimExpr& b) const { return sym::mod(a, b); }
    DimExpr min(const DimExpr& a, const DimExpr& b) const { return sym::min(a, b); }
    DimExpr max(const DimExpr& a, const DimExpr& b) const { return sym::max(a, b); }
    bool failed() const { return false; }
  } ops;
  std::vector<DimExpr> contents;
  if (!known) slots.assign(dims.size() / 2, DimExpr(0));  // still check the code is well formed
  const std::string problem = symints::evaluate(code, lengths, slots, ops, &contents);
  if (!problem.empty()) ctx.fail("malformed expressions: ", problem);
  if (known) ctx.set_output_sym_data(0, std::move(contents));
}

}  // namespace cuvil::shape
