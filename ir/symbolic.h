// Symbolic dimension expressions.
//
// A `DimExpr` is an integer expression over named shape symbols: constants, +, -, *, floor and
// ceil division, mod, min and max. Every value is kept in one canonical form, so two
// expressions that canonicalise to the same form are provably equal, and `==` on DimExpr is
// that structural equality. The canonical form is a sum of terms `coeff * monomial` plus a
// constant; a monomial is a sorted product of atoms; an atom is a symbol or an opaque
// operation (floordiv, mod, min, max) over canonical arguments. ceildiv(a, b) is stored as
// -floordiv(-a, b). All symbols denote non-negative integers (they are tensor extents), which
// the context-free simplifier may assume; `SymbolRanges` adds per-symbol bounds for proofs and
// range-aware simplification. Constant arithmetic is checked: overflow throws a Diagnostic
// (kInvalidModel), never wraps.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cuvil::sym {

struct Node;  // canonical representation, defined in symbolic.cpp

class DimExpr {
 public:
  DimExpr();                    // the constant 0
  DimExpr(int64_t value);       // NOLINT: implicit from constants is the point
  static DimExpr symbol(std::string name);

  bool is_constant() const;
  std::optional<int64_t> constant() const;  // value when is_constant()
  // The symbol name when this expression is exactly one symbol.
  std::optional<std::string> as_symbol() const;
  // Every symbol the expression mentions, sorted, without repeats.
  std::vector<std::string> symbols() const;

  friend DimExpr operator+(const DimExpr& a, const DimExpr& b);
  friend DimExpr operator-(const DimExpr& a, const DimExpr& b);
  friend DimExpr operator*(const DimExpr& a, const DimExpr& b);
  DimExpr operator-() const;
  friend bool operator==(const DimExpr& a, const DimExpr& b);
  friend bool operator!=(const DimExpr& a, const DimExpr& b) { return !(a == b); }
  // A total order on canonical forms (for sorting and maps), not numeric order.
  friend bool operator<(const DimExpr& a, const DimExpr& b);

  // Text form, e.g. `2*batch*seq + floordiv(seq, 2) - 1`. Symbol names that are not
  // identifiers are printed quoted ("N + 1") so `parse` reads every printed form back.
  std::string to_string() const;
  const Node& node() const { return *node_; }

 private:
  explicit DimExpr(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  std::shared_ptr<const Node> node_;
  friend struct Builder;
};

// floor(a / b) and ceil(a / b) with the sign rules of Python's // (floor toward -inf).
// Division by the constant 0 throws a Diagnostic.
DimExpr floordiv(const DimExpr& a, const DimExpr& b);
DimExpr ceildiv(const DimExpr& a, const DimExpr& b);
// a - b * floordiv(a, b) (the result has the sign of b, as in Python).
DimExpr mod(const DimExpr& a, const DimExpr& b);
DimExpr min(const DimExpr& a, const DimExpr& b);
DimExpr max(const DimExpr& a, const DimExpr& b);

// Inclusive bounds; hi == kUnbounded means no upper bound.
struct Range {
  static constexpr int64_t kUnbounded = INT64_MAX;
  int64_t lo = 0;
  int64_t hi = kUnbounded;
};

// Parses a range as the command line and configs spell it: "N" (fixed), "lo:hi" or "lo:" (no
// upper bound); non-negative decimal integers, lo <= hi. Nothing on any other text.
std::optional<Range> parse_range(std::string_view text);

// Per-symbol ranges. Symbols not listed are [0, unbounded).
class SymbolRanges {
 public:
  void set(const std::string& symbol, Range r) { ranges_[symbol] = r; }
  Range get(const std::string& symbol) const;
  bool has(const std::string& symbol) const { return ranges_.count(symbol) != 0; }
  const std::map<std::string, Range>& all() const { return ranges_; }

 private:
  std::map<std::string, Range> ranges_;
};

// Interval bounds of an expression under the ranges (sound, maybe loose). lo may be
// INT64_MIN and hi INT64_MAX when unknown.
struct Bounds {
  int64_t lo = INT64_MIN;
  int64_t hi = INT64_MAX;
};
Bounds bounds(const DimExpr& e, const SymbolRanges& ranges);

// Range-aware simplification: min/max/floordiv/mod whose result the ranges decide are
// replaced (e.g. min(n, 4096) -> n when n <= 4096; floordiv(n, 8) -> 0 when n < 8).
DimExpr simplify(const DimExpr& e, const SymbolRanges& ranges);

// Proofs (sound, incomplete): true only when the relation holds for every binding in range.
bool prove_equal(const DimExpr& a, const DimExpr& b, const SymbolRanges& ranges);
bool prove_not_equal(const DimExpr& a, const DimExpr& b, const SymbolRanges& ranges);
bool prove_less_equal(const DimExpr& a, const DimExpr& b, const SymbolRanges& ranges);
bool prove_less(const DimExpr& a, const DimExpr& b, const SymbolRanges& ranges);

// Evaluation under a binding. Errors (missing symbol, division by zero, overflow) are
// returned as a message, never thrown, because the runtime binds shapes from user input.
struct EvalResult {
  std::optional<int64_t> value;
  std::string error;  // set when !value
};
EvalResult evaluate(const DimExpr& e, const std::map<std::string, int64_t>& binding);

// Substitutes symbols by expressions and re-canonicalises.
DimExpr substitute(const DimExpr& e, const std::map<std::string, DimExpr>& replacements);

// Parses the text form written by `to_string` (and ordinary infix input: integers,
// identifiers, "quoted names", + - * ( ), floordiv/ceildiv/mod/min/max(a, b)).
// On error returns nullopt and sets `error` (with the column).
std::optional<DimExpr> parse(std::string_view text, std::string* error);

}  // namespace cuvil::sym

namespace cuvil::sym {

// Postfix code of an expression, for the runtime's dependency-free evaluator (the runtime
// stores expressions this way in the package). Binary ops pop b then a and push (a op b);
// kFloorDiv/kMod follow Python's sign rules as `floordiv`/`mod` do.
struct PostfixOp {
  enum class Kind : uint8_t { kConst, kSymbol, kAdd, kMul, kFloorDiv, kMod, kMin, kMax };
  Kind kind = Kind::kConst;
  int64_t value = 0;   // kConst
  std::string symbol;  // kSymbol
};
std::vector<PostfixOp> to_postfix(const DimExpr& e);

}  // namespace cuvil::sym
