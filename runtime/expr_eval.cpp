#include "runtime/expr_eval.h"

#include "support/checked.h"

namespace cuvil::rt {

ExprEvaluator::ExprEvaluator(const Program& p)
    : p_(p), reset_values_(p.exprs.size(), 0), reset_state_(p.exprs.size(), 0) {
  reset();
}

void ExprEvaluator::cache_constants() {
  reset_values_.assign(p_.exprs.size(), 0);
  reset_state_.assign(p_.exprs.size(), 0);
  reset();
  for (uint32_t id = 0; id < p_.exprs.size(); ++id) {
    const ExprRange& r = p_.exprs[id];
    bool constant = true;
    for (uint32_t i = 0; i < r.count && constant; ++i) constant = p_.expr_code[r.begin + i].kind != ExprOpKind::kSymbol;
    int64_t v = 0;
    // One that fails (overflow, division by zero) stays unknown and fails again in the run.
    if (constant) (void)eval(id, &v);
  }
  reset_values_ = values_;
  reset_state_ = state_;
}

// Copy-assignments of equal sizes: no allocation.
void ExprEvaluator::reset() {
  sym_values_.assign(p_.symbols.size(), 0);
  sym_state_.assign(p_.symbols.size(), 0);
  values_ = reset_values_;
  state_ = reset_state_;
}

void ExprEvaluator::unbind(const std::vector<uint32_t>& symbols) {
  if (symbols.empty()) return;
  for (uint32_t s : symbols) sym_state_[s] = 0;
  state_ = reset_state_;  // the constants' values_ are never overwritten while known
}

Status ExprEvaluator::bind(uint32_t symbol, int64_t value, const std::string& source) {
  const Symbol& s = p_.symbols[symbol];
  if (sym_state_[symbol]) {
    if (sym_values_[symbol] != value)
      return make_status(StatusCode::kShape, source, " gives ", s.name, " = ", value,
                         ", but it is already ", sym_values_[symbol]);
    return Status::ok();
  }
  if (value < s.lo || value > s.hi) {
    std::string hi = s.hi == INT64_MAX ? std::string("inf") : std::to_string(s.hi);
    return make_status(StatusCode::kShape, source, " gives ", s.name, " = ", value,
                       ", outside the compiled range [", s.lo, ", ", hi, "]");
  }
  sym_values_[symbol] = value;
  sym_state_[symbol] = 1;
  // Expressions that were unknown may now evaluate; known ones stay valid.
  return Status::ok();
}

bool ExprEvaluator::try_bind(uint32_t symbol, int64_t value) {
  const Symbol& s = p_.symbols[symbol];
  if (sym_state_[symbol]) return sym_values_[symbol] == value;
  if (value < s.lo || value > s.hi) return false;
  sym_values_[symbol] = value;
  sym_state_[symbol] = 1;
  return true;
}

uint32_t ExprEvaluator::as_symbol(uint32_t id) const {
  const ExprRange& r = p_.exprs[id];
  if (r.count == 1 && p_.expr_code[r.begin].kind == ExprOpKind::kSymbol)
    return static_cast<uint32_t>(p_.expr_code[r.begin].value);
  return kNone;
}

Status ExprEvaluator::eval(uint32_t id, int64_t* out, bool* unbound) {
  if (unbound) *unbound = false;
  if (state_[id]) {
    *out = values_[id];
    return Status::ok();
  }
  const ExprRange& r = p_.exprs[id];
  int64_t stack[64];
  int sp = 0;
  for (uint32_t i = 0; i < r.count; ++i) {
    const ExprOp& op = p_.expr_code[r.begin + i];
    if (op.kind == ExprOpKind::kConst || op.kind == ExprOpKind::kSymbol) {
      if (sp >= 64) return make_status(StatusCode::kInvalidPackage, "expression ", id, " is too deep");
      int64_t v = op.value;
      if (op.kind == ExprOpKind::kSymbol) {
        uint32_t s = static_cast<uint32_t>(op.value);
        if (!sym_state_[s]) {
          if (unbound) {
            *unbound = true;
            return Status::ok();
          }
          return make_status(StatusCode::kShape, "symbol ", p_.symbols[s].name, " is not bound");
        }
        v = sym_values_[s];
      }
      stack[sp++] = v;
      continue;
    }
    // The verifier guarantees two operands.
    int64_t b = stack[--sp], a = stack[--sp];
    std::optional<int64_t> v;
    switch (op.kind) {
      case ExprOpKind::kAdd: v = checked_add(a, b); break;
      case ExprOpKind::kMul: v = checked_mul(a, b); break;
      case ExprOpKind::kFloorDiv:
      case ExprOpKind::kMod: {
        if (b == 0)
          return make_status(StatusCode::kShape, "division by zero in ", expr_to_string(p_, id));
        if (a == INT64_MIN && b == -1) break;
        int64_t q = a / b, rem = a % b;
        if (rem != 0 && ((rem < 0) != (b < 0))) {
          --q;
          rem += b;
        }
        v = op.kind == ExprOpKind::kFloorDiv ? q : rem;
        break;
      }
      case ExprOpKind::kMin: v = a < b ? a : b; break;
      case ExprOpKind::kMax: v = a > b ? a : b; break;
      default: break;
    }
    if (!v) return make_status(StatusCode::kShape, "overflow evaluating ", expr_to_string(p_, id));
    stack[sp++] = *v;
  }
  values_[id] = stack[0];
  state_[id] = 1;
  *out = stack[0];
  return Status::ok();
}

std::string ExprEvaluator::to_string(uint32_t id) const { return expr_to_string(p_, id); }

std::string expr_to_string(const Program& p, uint32_t id) {
  if (id >= p.exprs.size()) return "<expr " + std::to_string(id) + ">";
  const ExprRange& r = p.exprs[id];
  std::vector<std::string> st;
  for (uint32_t i = 0; i < r.count && r.begin + i < p.expr_code.size(); ++i) {
    const ExprOp& op = p.expr_code[r.begin + i];
    switch (op.kind) {
      case ExprOpKind::kConst: st.push_back(std::to_string(op.value)); continue;
      case ExprOpKind::kSymbol:
        st.push_back(static_cast<uint64_t>(op.value) < p.symbols.size() ? p.symbols[op.value].name : "?");
        continue;
      default: break;
    }
    if (st.size() < 2) return "<malformed>";
    std::string b = st.back();
    st.pop_back();
    std::string a = st.back();
    st.pop_back();
    switch (op.kind) {
      case ExprOpKind::kAdd: st.push_back("(" + a + " + " + b + ")"); break;
      case ExprOpKind::kMul: st.push_back(a + "*" + b); break;
      case ExprOpKind::kFloorDiv: st.push_back("floordiv(" + a + ", " + b + ")"); break;
      case ExprOpKind::kMod: st.push_back("mod(" + a + ", " + b + ")"); break;
      case ExprOpKind::kMin: st.push_back("min(" + a + ", " + b + ")"); break;
      case ExprOpKind::kMax: st.push_back("max(" + a + ", " + b + ")"); break;
      default: break;
    }
  }
  return st.size() == 1 ? st[0] : "<malformed>";
}

}  // namespace cuvil::rt
