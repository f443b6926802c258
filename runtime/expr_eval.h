// Evaluation of a program's expression table under the symbols bound so far. Each expression
// is evaluated at most once per binding (cached); an expression that mentions an unbound
// (data-dependent) symbol reports "unbound" until that symbol is bound. All arithmetic is
// checked: overflow and division by zero are errors, never wrap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/program.h"
#include "runtime/status.h"

namespace cuvil::rt {

class ExprEvaluator {
 public:
  explicit ExprEvaluator(const Program& p);
  // Evaluates every expression that mentions no symbol now, so that reset() keeps their values
  // and a run finds them known. Only for a verified program (the verifier's operand counts).
  void cache_constants();
  void reset();  // forget all symbol values (and every value that depends on one)
  // Binds a symbol; fails when already bound to another value or outside its range.
  Status bind(uint32_t symbol, int64_t value, const std::string& source);
  // bind() without a message: false (and nothing bound) where bind() would fail, so that a
  // caller spells the source of the message only then.
  bool try_bind(uint32_t symbol, int64_t value);
  // Forgets the given symbols (a loop iteration's per-iteration facts) and every cached value.
  void unbind(const std::vector<uint32_t>& symbols);
  bool bound(uint32_t symbol) const { return sym_state_[symbol] != 0; }
  int64_t symbol_value(uint32_t symbol) const { return sym_values_[symbol]; }
  // Evaluates expression `id`. Sets *unbound (when given) instead of failing if a symbol is
  // not bound yet.
  Status eval(uint32_t id, int64_t* out, bool* unbound = nullptr);
  // The value of expression `id` when it is known already (evaluated since the last reset, or
  // a cached constant); false otherwise. The per-run fast path: no Status, no call.
  bool known(uint32_t id, int64_t* out) const {
    if (!state_[id]) return false;
    *out = values_[id];
    return true;
  }
  // The single symbol the expression consists of, or kNone.
  uint32_t as_symbol(uint32_t id) const;
  std::string to_string(uint32_t id) const;  // infix text, for messages

 private:
  const Program& p_;
  std::vector<int64_t> sym_values_;
  std::vector<uint8_t> sym_state_;
  std::vector<int64_t> values_;
  std::vector<uint8_t> state_;  // 0 unknown, 1 known
  // What reset() restores values_ and state_ to: the constants after cache_constants(), else
  // all unknown.
  std::vector<int64_t> reset_values_;
  std::vector<uint8_t> reset_state_;
};

// Infix text of an expression (also used by the disassembler).
std::string expr_to_string(const Program& p, uint32_t id);

}  // namespace cuvil::rt
