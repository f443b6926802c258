// Shape rule for the recurrent ops RNN, GRU and LSTM (ONNX opsets 1..21). The three share one
// layout: X [seq, batch, input] (or [batch, seq, input] with layout=1, opset 14+), weights
// W [dirs, gates*hidden, input] and R [dirs, gates*hidden, hidden]; outputs Y
// [seq, dirs, batch, hidden] (layout=1: [batch, seq, dirs, hidden]) and the final states
// Y_h / Y_c [dirs, batch, hidden] (layout=1: [batch, dirs, hidden]). hidden_size comes from the
// attribute, else from R's last dim, else from W's gate rows; the op's gate count (1, 3, 4)
// is what relates them.
#include "passes/shape/infer.h"
#include "support/checked.h"

namespace cuvil::shape {
namespace {

Dim dim_at(const Value* v, size_t i) {
  if (!v || !v->shape || i >= v->shape->size()) return std::nullopt;
  return (*v->shape)[i];
}

int64_t gate_count(OpKind op) {
  switch (op) {
    case OpKind::LSTM:
      return 4;
    case OpKind::GRU:
      return 3;
    default:
      return 1;
  }
}

}  // namespace

void infer_rnn(InferContext& ctx) {
  const Value& x = ctx.required_input(0);
  const Value& w = ctx.required_input(1);
  const Value& r = ctx.required_input(2);
  for (const Value* v : {&x, &w, &r})
    if (auto rank = rank_of(v); rank && *rank != 3)
      ctx.fail("input '", v->name, "' has rank ", *rank, ", expected 3");

  std::string direction = ctx.attr_string("direction", "forward");
  int64_t num_directions;
  if (direction == "forward" || direction == "reverse")
    num_directions = 1;
  else if (direction == "bidirectional")
    num_directions = 2;
  else
    ctx.fail("attribute 'direction' has unknown value '", direction, "'");
  int64_t layout = ctx.attr_int("layout", 0);
  if (layout != 0 && layout != 1) ctx.fail("attribute 'layout' is ", layout, ", must be 0 or 1");
  for (const Value* v : {&w, &r})
    if (auto d = dim_at(v, 0); d && d->constant() && *d->constant() != num_directions)
      ctx.fail("input '", v->name, "' has ", *d->constant(),
               " directions but attribute "
               "'direction' is '",
               direction, "'");

  int64_t gates = gate_count(ctx.node().op);
  Dim hidden;
  if (ctx.node().attr("hidden_size")) {
    int64_t h = ctx.attr_int("hidden_size", 0);
    if (h < 1) ctx.fail("attribute 'hidden_size' is ", h, ", must be >= 1");
    hidden = DimExpr(h);
  } else if (Dim rh = dim_at(&r, 2)) {
    hidden = rh;
  } else if (Dim rows = dim_at(&w, 1)) {
    if (auto c = rows->constant(); c && *c % gates != 0)
      ctx.fail("input '", w.name, "' has ", *c, " gate rows, not a multiple of ", gates);
    hidden = sym::floordiv(*rows, gates);
  }
  if (hidden && hidden->constant()) {
    int64_t h = *hidden->constant();
    auto expected_rows = checked_mul(gates, h);
    if (!expected_rows) ctx.fail("attribute 'hidden_size' (", h, ") is too large");
    for (const Value* v : {&w, &r})
      if (auto rows = dim_at(v, 1); rows && rows->constant() && *rows->constant() != *expected_rows)
        ctx.fail("input '", v->name, "' has ", *rows->constant(), " gate rows, expected ", gates,
                 " x hidden_size ", h);
  }

  Dim seq = dim_at(&x, layout == 0 ? 0 : 1);
  Dim batch = dim_at(&x, layout == 0 ? 1 : 0);
  if (!batch) batch = dim_at(ctx.input(5), layout == 0 ? 1 : 0);  // initial_h
  Dim dirs = DimExpr(num_directions);
  Shape y = layout == 0 ? Shape{seq, dirs, batch, hidden} : Shape{batch, seq, dirs, hidden};
  Shape state = layout == 0 ? Shape{dirs, batch, hidden} : Shape{batch, dirs, hidden};
  ctx.set_output(0, x.dtype, y);
  ctx.set_output(1, x.dtype, state);
  if (ctx.node().op == OpKind::LSTM) ctx.set_output(2, x.dtype, state);
}

}  // namespace cuvil::shape
