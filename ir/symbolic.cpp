// Symbolic dimension expressions: canonical construction, text form, bounds and proofs.
//
// Every DimExpr is built through the constructors below, which keep one canonical form (see
// symbolic.h): a sorted list of `coeff * monomial` terms plus a constant. The order is defined
// on content only (kind, symbol name, arguments, coefficients), never on addresses, so printed
// output is identical on every run. floordiv/mod/min/max are simplified when built, using
// interval bounds under a `SymbolRanges`: the public constructors pass the empty ranges (every
// symbol is >= 0, which is always true), and `simplify` rebuilds an expression under the
// caller's ranges. For bindings that respect those assumptions a rewrite never changes the
// value where the original expression is defined, and one that would hide a possible
// division by zero (floordiv(n, n) -> 1) waits until the divisor is proven non-zero. Bounds
// are interval arithmetic on 128-bit endpoints with explicit infinities, so they saturate
// instead of overflowing.
#include "ir/symbolic.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <numeric>
#include <set>

#include "support/checked.h"
#include "support/error.h"

namespace cuvil::sym {

struct Node {
  enum class Kind : uint8_t { kSymbol, kFloorDiv, kMod, kMin, kMax };
  struct Atom {
    Kind kind;
    std::string name;           // kSymbol only
    std::vector<DimExpr> args;  // floordiv/mod: {a, b}; min/max: sorted, distinct, >= 2
  };
  using AtomPtr = std::shared_ptr<const Atom>;
  struct Term {
    std::vector<AtomPtr> monomial;  // sorted by compare_atoms, repeats allowed, never empty
    int64_t coeff;                  // never 0
  };
  std::vector<Term> terms;  // sorted by compare_monomials, distinct monomials
  int64_t constant = 0;
};

// The only code that creates nodes; the DimExpr constructor from a node is private.
struct Builder {
  static DimExpr make(std::vector<Node::Term> terms, int64_t constant) {
    auto node = std::make_shared<Node>();
    node->terms = std::move(terms);
    node->constant = constant;
    return DimExpr(std::move(node));
  }
};

namespace {

using Kind = Node::Kind;
using Atom = Node::Atom;
using AtomPtr = Node::AtomPtr;
using Term = Node::Term;
using Monomial = std::vector<AtomPtr>;

constexpr int kMaxParseDepth = 256;
// A product of sums multiplies term counts; a hostile model could otherwise make the
// compiler build millions of terms. Real shape expressions have a handful.
constexpr size_t kMaxTerms = 4096;
constexpr int kProofBudget = 64;
constexpr std::string_view kFunctionNames[] = {"floordiv", "ceildiv", "mod", "min", "max"};

// ---- checked constant arithmetic ----------------------------------------------------------

int64_t or_fail(std::optional<int64_t> r, int64_t a, const char* op, int64_t b) {
  if (!r) fail(ExitCode::kInvalidModel, "dimension arithmetic overflows: ", a, op, b);
  return *r;
}
int64_t add_or_fail(int64_t a, int64_t b) { return or_fail(checked_add(a, b), a, " + ", b); }
int64_t sub_or_fail(int64_t a, int64_t b) { return or_fail(checked_sub(a, b), a, " - ", b); }
int64_t mul_or_fail(int64_t a, int64_t b) { return or_fail(checked_mul(a, b), a, " * ", b); }
// Python's // and %: the quotient rounds toward -inf, the remainder has the sign of b.
std::optional<int64_t> floor_div(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) return std::nullopt;
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // INT64_MIN % -1 is undefined in C++
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// ---- canonical order ----------------------------------------------------------------------

template <typename T>
int three_way(const T& a, const T& b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}
int compare(const DimExpr& x, const DimExpr& y);

int compare_atoms(const Atom& a, const Atom& b) {
  if (&a == &b) return 0;
  if (a.kind != b.kind) return three_way(a.kind, b.kind);
  if (int c = a.name.compare(b.name)) return c < 0 ? -1 : 1;
  for (size_t i = 0; i < a.args.size() && i < b.args.size(); ++i)
    if (int c = compare(a.args[i], b.args[i])) return c;
  return three_way(a.args.size(), b.args.size());
}
// Higher degree first, so polynomials print as `n*n + 2*n + 1`.
int compare_monomials(const Monomial& a, const Monomial& b) {
  if (a.size() != b.size()) return a.size() > b.size() ? -1 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    if (int c = compare_atoms(*a[i], *b[i])) return c;
  return 0;
}
int compare(const DimExpr& x, const DimExpr& y) {
  const Node& a = x.node();
  const Node& b = y.node();
  if (&a == &b) return 0;
  for (size_t i = 0; i < a.terms.size() && i < b.terms.size(); ++i) {
    if (int c = compare_monomials(a.terms[i].monomial, b.terms[i].monomial)) return c;
    if (int c = three_way(a.terms[i].coeff, b.terms[i].coeff)) return c;
  }
  // A longer sum sorts first, so constants come last among min/max arguments: min(n, 4096).
  if (a.terms.size() != b.terms.size()) return a.terms.size() > b.terms.size() ? -1 : 1;
  return three_way(a.constant, b.constant);
}
struct MonomialLess {
  bool operator()(const Monomial& a, const Monomial& b) const {
    return compare_monomials(a, b) < 0;
  }
};

// ---- small constructors -------------------------------------------------------------------

DimExpr from_atom(AtomPtr atom) { return Builder::make({Term{{std::move(atom)}, 1}}, 0); }

DimExpr op_atom(Kind kind, std::vector<DimExpr> args) {
  auto atom = std::make_shared<Atom>();
  atom->kind = kind;
  atom->args = std::move(args);
  return from_atom(std::move(atom));
}

// The atom when `e` is exactly one atom with coefficient 1.
const Atom* single_atom(const DimExpr& e) {
  const Node& n = e.node();
  if (n.constant != 0 || n.terms.size() != 1) return nullptr;
  const Term& t = n.terms[0];
  return t.coeff == 1 && t.monomial.size() == 1 ? t.monomial[0].get() : nullptr;
}

DimExpr scale(const DimExpr& e, int64_t k) {
  if (k == 0) return 0;
  if (k == 1) return e;
  const Node& n = e.node();
  std::vector<Term> terms = n.terms;
  for (Term& t : terms) t.coeff = mul_or_fail(t.coeff, k);
  return Builder::make(std::move(terms), mul_or_fail(n.constant, k));
}

// a + b (negate_b false) or a - b, merging the sorted term lists.
DimExpr combine(const DimExpr& x, const DimExpr& y, bool negate_b) {
  const Node& a = x.node();
  const Node& b = y.node();
  auto join = [negate_b](int64_t p, int64_t q) {
    return negate_b ? sub_or_fail(p, q) : add_or_fail(p, q);
  };
  std::vector<Term> terms;
  terms.reserve(a.terms.size() + b.terms.size());
  size_t i = 0, j = 0;
  while (i < a.terms.size() || j < b.terms.size()) {
    int c = i == a.terms.size()   ? 1
            : j == b.terms.size() ? -1
                                  : compare_monomials(a.terms[i].monomial, b.terms[j].monomial);
    if (c < 0) {
      terms.push_back(a.terms[i++]);
    } else if (c > 0) {
      terms.push_back({b.terms[j].monomial, join(0, b.terms[j].coeff)});
      ++j;
    } else {
      int64_t k = join(a.terms[i].coeff, b.terms[j].coeff);
      if (k != 0) terms.push_back({a.terms[i].monomial, k});
      ++i, ++j;
    }
  }
  return Builder::make(std::move(terms), join(a.constant, b.constant));
}

// ---- interval arithmetic ------------------------------------------------------------------
//
// Endpoints are 128-bit so a product of two int64 values is exact; +-kInf are the
// infinities. A lower bound is never +kInf and an upper bound never -kInf; results are
// clamped back into int64 after every step, so the next product cannot overflow either.

using Wide = __int128;
constexpr Wide kInf = (Wide(1) << 126) + 1;  // above any product of two int64 values
struct Interval {
  Wide lo, hi;
};
constexpr Interval kUnknown{-kInf, kInf};

Wide clamp_lo(Wide w) { return w < INT64_MIN ? -kInf : std::min<Wide>(w, INT64_MAX); }
Wide clamp_hi(Wide w) { return w > INT64_MAX ? kInf : std::max<Wide>(w, INT64_MIN); }

Interval iv_add(Interval a, Interval b) {
  Wide lo = (a.lo == -kInf || b.lo == -kInf) ? -kInf : clamp_lo(a.lo + b.lo);
  Wide hi = (a.hi == kInf || b.hi == kInf) ? kInf : clamp_hi(a.hi + b.hi);
  return {lo, hi};
}
Wide wide_mul(Wide a, Wide b) {
  if (a == 0 || b == 0) return 0;
  bool infinite = a == kInf || a == -kInf || b == kInf || b == -kInf;
  return !infinite ? a * b : (a < 0) != (b < 0) ? -kInf : kInf;
}
Interval iv_mul(Interval a, Interval b) {
  Wide c[4] = {wide_mul(a.lo, b.lo), wide_mul(a.lo, b.hi), wide_mul(a.hi, b.lo),
               wide_mul(a.hi, b.hi)};
  return {clamp_lo(*std::min_element(c, c + 4)), clamp_hi(*std::max_element(c, c + 4))};
}
Interval iv_neg(Interval a) { return {-a.hi, -a.lo}; }

// floor(a / b) for b >= 1, extended to the infinities as limits.
Wide wide_floordiv(Wide a, Wide b) {
  if (b == kInf) return a >= 0 ? 0 : -1;
  if (a == kInf || a == -kInf) return a;
  Wide q = a / b;
  if (a % b != 0 && a < 0) --q;
  return q;
}
// Division by zero has no value, so a divisor range touching 0 is narrowed to exclude it:
// bounds describe the expression wherever it is defined.
bool exclude_zero(Interval& b) {
  if (b.lo == 0) b.lo = 1;
  if (b.hi == 0) b.hi = -1;
  return b.lo <= b.hi;
}
Interval iv_floordiv(Interval a, Interval b) {
  if (!exclude_zero(b)) return kUnknown;
  if (b.hi <= -1) return iv_floordiv(iv_neg(a), iv_neg(b));  // floor(a/b) == floor(-a/-b)
  if (b.lo < 1) return kUnknown;
  // Monotone in a, and in b for a fixed sign of a: the extremes are at the corners.
  Wide c[4] = {wide_floordiv(a.lo, b.lo), wide_floordiv(a.lo, b.hi), wide_floordiv(a.hi, b.lo),
               wide_floordiv(a.hi, b.hi)};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}
Interval iv_mod(Interval a, Interval b) {
  if (!exclude_zero(b)) return kUnknown;
  if (b.hi <= -1) return iv_neg(iv_mod(iv_neg(a), iv_neg(b)));  // mod(a, b) == -mod(-a, -b)
  if (b.lo < 1) return kUnknown;
  if (a.lo >= 0 && a.hi < b.lo) return a;
  Wide hi = b.hi == kInf ? kInf : b.hi - 1;
  if (a.lo >= 0) hi = std::min(hi, a.hi);
  return {0, hi};
}

Interval interval_of(const DimExpr& e, const SymbolRanges& ranges);

Interval atom_interval(const Atom& atom, const SymbolRanges& ranges) {
  switch (atom.kind) {
    case Kind::kSymbol: {
      Range r = ranges.get(atom.name);
      return {r.lo == INT64_MIN ? -kInf : Wide(r.lo),
              r.hi == Range::kUnbounded ? kInf : Wide(r.hi)};
    }
    case Kind::kFloorDiv:
      return iv_floordiv(interval_of(atom.args[0], ranges), interval_of(atom.args[1], ranges));
    case Kind::kMod:
      return iv_mod(interval_of(atom.args[0], ranges), interval_of(atom.args[1], ranges));
    case Kind::kMin:
    case Kind::kMax: {
      bool is_min = atom.kind == Kind::kMin;
      Interval r = interval_of(atom.args[0], ranges);
      for (size_t i = 1; i < atom.args.size(); ++i) {
        Interval a = interval_of(atom.args[i], ranges);
        r = is_min ? Interval{std::min(r.lo, a.lo), std::min(r.hi, a.hi)}
                   : Interval{std::max(r.lo, a.lo), std::max(r.hi, a.hi)};
      }
      return r;
    }
  }
  CUVIL_ASSERT(false, "unknown atom kind");
}

Interval interval_of(const DimExpr& e, const SymbolRanges& ranges) {
  const Node& n = e.node();
  Interval sum{n.constant, n.constant};
  for (const Term& t : n.terms) {
    Interval product{t.coeff, t.coeff};
    for (const AtomPtr& a : t.monomial) product = iv_mul(product, atom_interval(*a, ranges));
    sum = iv_add(sum, product);
  }
  return sum;
}

bool proven_nonzero(const Interval& i) { return i.lo >= 1 || i.hi <= -1; }

// True when x <= y is proven by the bounds of y - x; an overflowing difference proves nothing.
bool proven_le(const DimExpr& x, const DimExpr& y, const SymbolRanges& ranges) {
  try {
    return interval_of(y - x, ranges).lo >= 0;
  } catch (const Diagnostic&) {
    return false;
  }
}

const SymbolRanges& no_ranges() {
  static const SymbolRanges kEmpty;
  return kEmpty;
}

// ---- operations ---------------------------------------------------------------------------

// Removes the atoms of `divisor` from `monomial` (both sorted multisets), if it holds them.
std::optional<Monomial> divide_monomial(const Monomial& monomial, const Monomial& divisor) {
  Monomial rest;
  size_t j = 0;
  for (const AtomPtr& atom : monomial) {
    if (j < divisor.size() && compare_atoms(*atom, *divisor[j]) == 0) {
      ++j;
    } else {
      rest.push_back(atom);
    }
  }
  if (j != divisor.size()) return std::nullopt;
  return rest;
}

// q with a == q * b exactly, by polynomial long division (b not constant, leading
// coefficient positive). The term order is degree-then-lexicographic, a monomial order, so
// each step removes the leading term; the step cap only bounds the work.
std::optional<DimExpr> exact_quotient(const DimExpr& a, const DimExpr& b) {
  const Term& lead = b.node().terms.front();
  DimExpr quotient, rest = a;
  try {
    for (int step = 0; step < 64 && !rest.is_constant(); ++step) {
      const Term& t = rest.node().terms.front();
      auto monomial = divide_monomial(t.monomial, lead.monomial);
      if (!monomial || t.coeff % lead.coeff != 0) return std::nullopt;
      DimExpr q = t.coeff / lead.coeff;
      if (!monomial->empty()) q = Builder::make({Term{std::move(*monomial), *q.constant()}}, 0);
      quotient = quotient + q;
      rest = rest - q * b;
    }
  } catch (const Diagnostic&) {  // an overflowing candidate is not a quotient
    return std::nullopt;
  }
  if (rest.constant() != 0) return std::nullopt;
  return quotient;
}

// a = quotient * c + rest with the constant of rest in [0, c). floordiv moves only the terms
// whose coefficient c divides (floordiv(5*n, 4) stays readable); mod reduces every
// coefficient into [0, c), since mod(5*n, 4) == mod(n, 4). Either way floordiv(n + 5, 4) and
// floordiv(n + 1, 4) + 1 canonicalise to the same form.
struct Split {
  DimExpr quotient;
  std::vector<Term> rest;
  int64_t rest_constant;
  int64_t gcd;  // of c and the rest coefficients
};
Split split_by(const Node& n, int64_t c, bool reduce_every_coefficient) {
  std::vector<Term> quotient;
  Split s{0, {}, floor_mod(n.constant, c), c};
  for (const Term& t : n.terms) {
    int64_t r = floor_mod(t.coeff, c);
    int64_t q = *floor_div(t.coeff, c);  // c >= 2: no overflow
    if (r != 0 && !reduce_every_coefficient) r = t.coeff, q = 0;
    if (q != 0) quotient.push_back({t.monomial, q});
    if (r == 0) continue;
    s.rest.push_back({t.monomial, r});
    s.gcd = std::gcd(s.gcd, r % c);  // s.gcd divides c; r % c avoids |INT64_MIN|
  }
  s.quotient = Builder::make(std::move(quotient), *floor_div(n.constant, c));
  return s;
}
// floor((g*x + r) / (g*d)) == floor((x + r div g) / d) for integer x and 0 <= r < g*d, and
// mod(g*x + r, g*d) == g*mod(x + r div g, d) + r mod g.
DimExpr divide_rest(const Split& s) {
  std::vector<Term> terms = s.rest;
  for (Term& t : terms) t.coeff /= s.gcd;
  return Builder::make(std::move(terms), s.rest_constant / s.gcd);
}

// floor(rest / c) when it is one value under the ranges.
std::optional<int64_t> constant_quotient(const DimExpr& rest, int64_t c,
                                         const SymbolRanges& ranges) {
  Interval ri = interval_of(rest, ranges);
  Wide lo = wide_floordiv(ri.lo, c), hi = wide_floordiv(ri.hi, c);
  if (lo != hi || lo == kInf || lo == -kInf) return std::nullopt;
  return static_cast<int64_t>(lo);
}

DimExpr make_floordiv(const DimExpr& a, const DimExpr& b, const SymbolRanges& ranges);
DimExpr make_mod(const DimExpr& a, const DimExpr& b, const SymbolRanges& ranges);

DimExpr make_floordiv(const DimExpr& a, const DimExpr& b, const SymbolRanges& ranges) {
  std::optional<int64_t> c = b.constant();
  if (!c) {
    if (b.node().terms.front().coeff < 0) return make_floordiv(-a, -b, ranges);
    Interval bi = interval_of(b, ranges);
    if (proven_nonzero(bi)) {
      if (auto k = exact_quotient(a, b)) return *k;
      Interval q = iv_floordiv(interval_of(a, ranges), bi);
      if (q.lo == q.hi && q.lo != kInf && q.lo != -kInf) return static_cast<int64_t>(q.lo);
    }
    return op_atom(Kind::kFloorDiv, {a, b});
  }
  if (*c == 0) fail(ExitCode::kInvalidModel, "division by zero: floordiv(", a.to_string(), ", 0)");
  if (auto k = a.constant()) {
    auto q = floor_div(*k, *c);
    if (!q) {
      fail(ExitCode::kInvalidModel, "dimension arithmetic overflows: floordiv(", *k, ", ", *c, ")");
    }
    return *q;
  }
  if (*c < 0) return make_floordiv(-a, -b, ranges);
  if (*c == 1) return a;
  // floor(x / c) == -floor((-x + c - 1) / c): the argument's leading coefficient is kept
  // positive, so ceildiv(n, 4) (= -floordiv(-n, 4)) and floordiv(n + 3, 4) are one form.
  if (a.node().terms.front().coeff < 0) return -make_floordiv(-a + (*c - 1), *c, ranges);
  Split s = split_by(a.node(), *c, false);
  if (s.rest.empty()) return s.quotient;
  if (s.gcd > 1) return s.quotient + make_floordiv(divide_rest(s), *c / s.gcd, ranges);
  DimExpr rest = Builder::make(std::move(s.rest), s.rest_constant);
  // floordiv(floordiv(x, c2), c) == floordiv(x, c2 * c) for positive c, c2.
  if (const Atom* inner = single_atom(rest); inner && inner->kind == Kind::kFloorDiv) {
    auto c2 = inner->args[1].constant();
    if (c2 && *c2 > 0) {
      if (auto cc = checked_mul(*c, *c2)) {
        return s.quotient + make_floordiv(inner->args[0], *cc, ranges);
      }
    }
  }
  if (auto q = constant_quotient(rest, *c, ranges)) return s.quotient + *q;
  return s.quotient + op_atom(Kind::kFloorDiv, {rest, *c});
}

DimExpr make_mod(const DimExpr& a, const DimExpr& b, const SymbolRanges& ranges) {
  std::optional<int64_t> c = b.constant();
  if (!c) {
    if (b.node().terms.front().coeff < 0) return -make_mod(-a, -b, ranges);
    Interval bi = interval_of(b, ranges);
    if (proven_nonzero(bi)) {
      if (exact_quotient(a, b)) return 0;  // mod of an exact multiple
      Interval ai = interval_of(a, ranges);
      if (ai.lo >= 0 && ai.hi < bi.lo) return a;
    }
    return op_atom(Kind::kMod, {a, b});
  }
  if (*c == 0) fail(ExitCode::kInvalidModel, "division by zero: mod(", a.to_string(), ", 0)");
  if (auto k = a.constant()) return floor_mod(*k, *c);
  if (*c < 0) return -make_mod(-a, -b, ranges);
  if (*c == 1) return 0;
  Split s = split_by(a.node(), *c, true);
  if (s.rest.empty()) return s.rest_constant;
  if (s.gcd > 1) {
    return scale(make_mod(divide_rest(s), *c / s.gcd, ranges), s.gcd) + s.rest_constant % s.gcd;
  }
  DimExpr rest = Builder::make(std::move(s.rest), s.rest_constant);
  // mod(mod(x, c2), c) == mod(x, c) when c divides c2.
  if (const Atom* inner = single_atom(rest); inner && inner->kind == Kind::kMod) {
    auto c2 = inner->args[1].constant();
    if (c2 && *c2 > 0 && *c2 % *c == 0) return make_mod(inner->args[0], *c, ranges);
  }
  // When floor(rest / c) is one value q, mod(rest, c) is rest - q*c.
  if (auto q = constant_quotient(rest, *c, ranges)) return rest - scale(*c, *q);
  return op_atom(Kind::kMod, {rest, *c});
}

DimExpr make_minmax(Kind kind, const std::vector<DimExpr>& args, const SymbolRanges& ranges) {
  bool is_min = kind == Kind::kMin;
  std::vector<DimExpr> candidates;
  std::optional<int64_t> folded;
  auto add = [&](const DimExpr& e) {
    if (auto k = e.constant()) {
      folded = !folded ? *k : is_min ? std::min(*folded, *k) : std::max(*folded, *k);
    } else {
      candidates.push_back(e);
    }
  };
  for (const DimExpr& e : args) {
    const Atom* inner = single_atom(e);
    if (inner && inner->kind == kind) {
      for (const DimExpr& sub : inner->args) add(sub);  // min(min(a, b), c) == min(a, b, c)
    } else {
      add(e);
    }
  }
  if (folded) candidates.push_back(*folded);
  std::sort(candidates.begin(), candidates.end());
  // Drop every argument another one dominates (for min: some y <= x). Walking the sorted
  // list keeps the first of equal arguments, so the result does not depend on input order.
  std::vector<DimExpr> kept;
  auto dominates = [&](const DimExpr& y, const DimExpr& x) {
    return is_min ? proven_le(y, x, ranges) : proven_le(x, y, ranges);
  };
  for (const DimExpr& x : candidates) {
    if (std::any_of(kept.begin(), kept.end(), [&](const DimExpr& y) { return dominates(y, x); }))
      continue;
    kept.erase(std::remove_if(kept.begin(), kept.end(),
                              [&](const DimExpr& y) { return dominates(x, y); }),
               kept.end());
    kept.push_back(x);
  }
  if (kept.size() == 1) return kept[0];
  return op_atom(kind, std::move(kept));
}

// Rebuilds `e` bottom-up: symbols through `leaf`, operations through the constructors under
// `ranges`. With `keep_zero_divisor`, an operation whose divisor became the constant 0 is
// kept as it was instead of throwing (simplify must not turn an expression into an error).
template <typename Leaf>
DimExpr rebuild(const DimExpr& e, const SymbolRanges& ranges, const Leaf& leaf,
                bool keep_zero_divisor) {
  const Node& n = e.node();
  DimExpr sum = n.constant;
  for (const Term& t : n.terms) {
    DimExpr product = t.coeff;
    for (const AtomPtr& atom : t.monomial) {
      DimExpr value;
      if (atom->kind == Kind::kSymbol) {
        value = leaf(atom);
      } else {
        std::vector<DimExpr> args;
        for (const DimExpr& a : atom->args) {
          args.push_back(rebuild(a, ranges, leaf, keep_zero_divisor));
        }
        bool division = atom->kind == Kind::kFloorDiv || atom->kind == Kind::kMod;
        if (division && keep_zero_divisor && args[1].constant() == 0) {
          value = from_atom(atom);
        } else if (division) {
          value = atom->kind == Kind::kMod ? make_mod(args[0], args[1], ranges)
                                           : make_floordiv(args[0], args[1], ranges);
        } else {
          value = make_minmax(atom->kind, args, ranges);
        }
      }
      product = product * value;
    }
    sum = sum + product;
  }
  return sum;
}

// ---- text form ----------------------------------------------------------------------------

// Character classes by hand: <cctype> depends on the locale.
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_function_name(std::string_view s) {
  return std::find(std::begin(kFunctionNames), std::end(kFunctionNames), s) !=
         std::end(kFunctionNames);
}

void print_expr(const DimExpr& e, std::string& out);

// Function names are quoted too, so `"min"` can never be read as a call.
void print_name(const std::string& name, std::string& out) {
  bool plain = !name.empty() && is_ident_start(name[0]) && !is_function_name(name) &&
               std::all_of(name.begin(), name.end(), is_ident_char);
  if (plain) {
    out += name;
    return;
  }
  out += '"';
  for (char c : name) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
}

void print_atom(const Atom& atom, std::string& out) {
  static constexpr const char* kNames[] = {"", "floordiv", "mod", "min", "max"};
  if (atom.kind == Kind::kSymbol) return print_name(atom.name, out);
  out += kNames[static_cast<int>(atom.kind)];
  out += '(';
  for (size_t i = 0; i < atom.args.size(); ++i) {
    if (i) out += ", ";
    print_expr(atom.args[i], out);
  }
  out += ')';
}

// `first` terms carry their own sign; later ones are joined by " + " / " - ". INT64_MIN has
// no positive magnitude, so it is written `+ -9223372036854775808`, which parses back.
void print_signed(int64_t k, bool first, const Monomial* monomial, std::string& out) {
  bool negative_join = !first && k < 0 && k != INT64_MIN;
  if (!first) out += negative_join ? " - " : " + ";
  int64_t shown = negative_join ? -k : k;
  if (!monomial) {
    out += std::to_string(shown);
    return;
  }
  if (shown == -1) out += '-';
  if (shown != 1 && shown != -1) out += std::to_string(shown) + "*";
  for (size_t i = 0; i < monomial->size(); ++i) {
    if (i) out += '*';
    print_atom(*(*monomial)[i], out);
  }
}

void print_expr(const DimExpr& e, std::string& out) {
  const Node& n = e.node();
  for (size_t i = 0; i < n.terms.size(); ++i) {
    print_signed(n.terms[i].coeff, i == 0, &n.terms[i].monomial, out);
  }
  if (n.constant != 0 || n.terms.empty()) print_signed(n.constant, n.terms.empty(), nullptr, out);
}

// Recursive descent over  sum := product (('+'|'-') product)*,  product := unary ('*' unary)*,
// unary := '-' unary | primary. Every nesting level passes through `unary`, which counts depth.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}
  std::string error;

  std::optional<DimExpr> parse_all() {
    auto e = parse_sum();
    if (!e) return std::nullopt;
    skip_space();
    if (pos_ != text_.size()) return unexpected();
    return e;
  }

 private:
  std::nullopt_t error_at(size_t pos, const std::string& message) {
    if (error.empty()) error = "column " + std::to_string(pos + 1) + ": " + message;
    return std::nullopt;
  }
  std::nullopt_t unexpected() {
    if (pos_ >= text_.size()) return error_at(pos_, "unexpected end of input");
    return error_at(pos_, "unexpected '" + std::string(1, text_[pos_]) + "'");
  }
  // Constructors throw on overflow and division by the constant 0; parse reports them.
  template <typename Fn>
  std::optional<DimExpr> apply(size_t pos, const Fn& fn) {
    try {
      return fn();
    } catch (const Diagnostic& d) {
      return error_at(pos, d.what());
    }
  }
  void skip_space() {
    while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
  }
  bool at(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  std::optional<DimExpr> expect(char c, std::optional<DimExpr> value) {
    if (!value) return std::nullopt;
    if (!at(c)) return error_at(pos_, std::string("expected '") + c + "'");
    ++pos_;
    return value;
  }

  std::optional<DimExpr> parse_sum() {
    auto lhs = parse_product();
    while (lhs && (at('+') || at('-'))) {
      size_t op = pos_;
      bool plus = text_[pos_++] == '+';
      auto rhs = parse_product();
      if (!rhs) return std::nullopt;
      lhs = apply(op, [&] { return plus ? *lhs + *rhs : *lhs - *rhs; });
    }
    return lhs;
  }
  std::optional<DimExpr> parse_product() {
    auto lhs = parse_unary();
    while (lhs && at('*')) {
      size_t op = pos_++;
      auto rhs = parse_unary();
      if (!rhs) return std::nullopt;
      lhs = apply(op, [&] { return *lhs * *rhs; });
    }
    return lhs;
  }
  std::optional<DimExpr> parse_unary() {
    struct DepthGuard {
      int& depth;
      ~DepthGuard() { --depth; }
    } guard{++depth_};
    if (depth_ > kMaxParseDepth) {
      skip_space();
      return error_at(pos_, "expression nests deeper than " + std::to_string(kMaxParseDepth) +
                                " levels");
    }
    if (!at('-')) return parse_primary();
    size_t op = pos_++;
    skip_space();
    // A literal after '-' is read negative so INT64_MIN, which has no positive form, parses.
    if (pos_ < text_.size() && is_digit(text_[pos_])) return parse_integer(op, true);
    auto operand = parse_unary();
    if (!operand) return std::nullopt;
    return apply(op, [&] { return -*operand; });
  }
  std::optional<DimExpr> parse_integer(size_t start, bool negative) {
    size_t digits = pos_;
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
    std::string literal = (negative ? "-" : "") + std::string(text_.substr(digits, pos_ - digits));
    int64_t value = 0;
    auto result = std::from_chars(literal.data(), literal.data() + literal.size(), value);
    if (result.ec != std::errc()) return error_at(start, "integer literal out of range");
    return DimExpr(value);
  }
  std::optional<DimExpr> parse_quoted() {
    size_t start = pos_++;
    std::string name;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      if (text_[pos_] == '\\') {
        if (pos_ + 1 >= text_.size() || (text_[pos_ + 1] != '"' && text_[pos_ + 1] != '\\')) {
          return error_at(pos_, "invalid escape in quoted name (only \\\" and \\\\)");
        }
        ++pos_;
      }
      name += text_[pos_++];
    }
    if (pos_ >= text_.size()) return error_at(start, "unterminated quoted name");
    ++pos_;
    return DimExpr::symbol(std::move(name));
  }
  std::optional<DimExpr> parse_primary() {
    skip_space();
    size_t start = pos_;
    char c = pos_ < text_.size() ? text_[pos_] : '\0';
    if (is_digit(c)) return parse_integer(start, false);
    if (c == '"') return parse_quoted();
    if (c == '(') {
      ++pos_;
      return expect(')', parse_sum());
    }
    if (!is_ident_start(c)) return unexpected();
    while (pos_ < text_.size() && is_ident_char(text_[pos_])) ++pos_;
    std::string name(text_.substr(start, pos_ - start));
    if (!at('(')) return DimExpr::symbol(std::move(name));
    return parse_call(start, name);
  }
  std::optional<DimExpr> parse_call(size_t start, const std::string& name) {
    if (!is_function_name(name)) return error_at(start, "unknown function '" + name + "'");
    ++pos_;  // '('
    std::vector<DimExpr> args;
    do {
      if (!args.empty()) ++pos_;  // ','
      auto arg = parse_sum();
      if (!arg) return std::nullopt;
      args.push_back(std::move(*arg));
    } while (at(','));
    if (!at(')')) return error_at(pos_, "expected ')'");
    ++pos_;
    bool binary = name != "min" && name != "max";
    if (binary ? args.size() != 2 : args.size() < 2) {
      return error_at(start, name + " takes " + (binary ? "2" : "at least 2") + " arguments, got " +
                                 std::to_string(args.size()));
    }
    return apply(start, [&]() -> DimExpr {
      if (name == "floordiv") return floordiv(args[0], args[1]);
      if (name == "ceildiv") return ceildiv(args[0], args[1]);
      if (name == "mod") return mod(args[0], args[1]);
      return make_minmax(name == "min" ? Kind::kMin : Kind::kMax, args, no_ranges());
    });
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// ---- evaluation ---------------------------------------------------------------------------

using Binding = std::map<std::string, int64_t>;
std::optional<int64_t> eval_expr(const DimExpr& e, const Binding& binding, std::string& error);

std::optional<int64_t> eval_atom(const Atom& atom, const Binding& binding, std::string& error) {
  std::string text;
  print_atom(atom, text);
  if (atom.kind == Kind::kSymbol) {
    auto it = binding.find(atom.name);
    if (it == binding.end()) error = "symbol " + text + " is not bound";
    if (it == binding.end()) return std::nullopt;
    return it->second;
  }
  std::vector<int64_t> values;
  for (const DimExpr& a : atom.args) {
    auto v = eval_expr(a, binding, error);
    if (!v) return std::nullopt;
    values.push_back(*v);
  }
  if (atom.kind == Kind::kMin) return *std::min_element(values.begin(), values.end());
  if (atom.kind == Kind::kMax) return *std::max_element(values.begin(), values.end());
  if (values[1] == 0) {
    error = "division by zero in " + text;
    return std::nullopt;
  }
  if (atom.kind == Kind::kMod) return floor_mod(values[0], values[1]);
  auto q = floor_div(values[0], values[1]);
  if (!q) error = "overflow evaluating " + text;
  return q;
}

std::optional<int64_t> eval_expr(const DimExpr& e, const Binding& binding, std::string& error) {
  const Node& n = e.node();
  std::optional<int64_t> sum = n.constant;
  for (const Term& t : n.terms) {
    std::optional<int64_t> product = t.coeff;
    for (const AtomPtr& atom : t.monomial) {
      auto v = eval_atom(*atom, binding, error);
      if (!v) return std::nullopt;
      product = checked_mul(*product, *v);
      if (!product) break;
    }
    if (product) sum = checked_add(*sum, *product);
    if (!product || !sum) {
      error = "overflow evaluating " + e.to_string();
      return std::nullopt;
    }
  }
  return sum;
}

void collect_symbols(const DimExpr& e, std::set<std::string>& out) {
  for (const Term& t : e.node().terms) {
    for (const AtomPtr& atom : t.monomial) {
      if (atom->kind == Kind::kSymbol) out.insert(atom->name);
      for (const DimExpr& a : atom->args) collect_symbols(a, out);
    }
  }
}

// Proves d >= k. Interval bounds forget that max(x, y) >= x, so a min/max term is also
// replaced by its arguments: where the term is at least coeff * arg (a positive max, a
// negative min) one argument suffices; otherwise the term equals one of them, so every
// argument must give a proof (a case split). `budget` caps the search.
bool prove_at_least(const DimExpr& d, int64_t k, const SymbolRanges& ranges, int& budget) {
  if (interval_of(d, ranges).lo >= k) return true;
  if (--budget <= 0) return false;
  for (const Term& t : d.node().terms) {
    if (t.monomial.size() != 1) continue;
    const Atom& atom = *t.monomial[0];
    if (atom.kind != Kind::kMin && atom.kind != Kind::kMax) continue;
    DimExpr rest = d - Builder::make({t}, 0);
    bool relax = (atom.kind == Kind::kMax) == (t.coeff > 0);
    bool all = true;
    for (const DimExpr& arg : atom.args) {
      bool ok = prove_at_least(simplify(rest + scale(arg, t.coeff), ranges), k, ranges, budget);
      if (ok && relax) return true;
      all = all && ok;
      if (!all && !relax) break;
    }
    if (all && !relax) return true;
  }
  return false;
}

// x - y >= k. Proofs never throw: a difference that overflows proves nothing.
bool prove_difference_at_least(const DimExpr& x, const DimExpr& y, int64_t k,
                               const SymbolRanges& ranges) {
  try {
    int budget = kProofBudget;
    return prove_at_least(simplify(x - y, ranges), k, ranges, budget);
  } catch (const Diagnostic&) {
    return false;
  }
}

}  // namespace

// ---- public API ---------------------------------------------------------------------------

DimExpr::DimExpr() : DimExpr(int64_t{0}) {}
DimExpr::DimExpr(int64_t value) : node_(Builder::make({}, value).node_) {}

DimExpr DimExpr::symbol(std::string name) {
  auto atom = std::make_shared<Atom>();
  atom->kind = Kind::kSymbol;
  atom->name = std::move(name);
  return from_atom(std::move(atom));
}

bool DimExpr::is_constant() const { return node_->terms.empty(); }
std::optional<int64_t> DimExpr::constant() const {
  if (!is_constant()) return std::nullopt;
  return node_->constant;
}
std::optional<std::string> DimExpr::as_symbol() const {
  const Atom* atom = single_atom(*this);
  if (!atom || atom->kind != Kind::kSymbol) return std::nullopt;
  return atom->name;
}
std::vector<std::string> DimExpr::symbols() const {
  std::set<std::string> names;
  collect_symbols(*this, names);
  return {names.begin(), names.end()};
}

DimExpr operator+(const DimExpr& a, const DimExpr& b) { return combine(a, b, false); }
DimExpr operator-(const DimExpr& a, const DimExpr& b) { return combine(a, b, true); }
DimExpr DimExpr::operator-() const { return scale(*this, -1); }

DimExpr operator*(const DimExpr& x, const DimExpr& y) {
  if (auto k = x.constant()) return scale(y, *k);
  if (auto k = y.constant()) return scale(x, *k);
  // Distribute; the constant is the term with the empty monomial, which sorts last.
  auto with_constant = [](const Node& n) {
    std::vector<Term> terms = n.terms;
    if (n.constant != 0) terms.push_back({{}, n.constant});
    return terms;
  };
  std::map<Monomial, int64_t, MonomialLess> sum;
  for (const Term& a : with_constant(x.node())) {
    for (const Term& b : with_constant(y.node())) {
      Monomial m;
      std::merge(a.monomial.begin(), a.monomial.end(), b.monomial.begin(), b.monomial.end(),
                 std::back_inserter(m),
                 [](const AtomPtr& p, const AtomPtr& q) { return compare_atoms(*p, *q) < 0; });
      int64_t& slot = sum[m];
      slot = add_or_fail(slot, mul_or_fail(a.coeff, b.coeff));
    }
  }
  std::vector<Term> terms;
  int64_t constant = 0;
  for (auto& [monomial, coeff] : sum) {
    if (monomial.empty()) constant = coeff;
    else if (coeff != 0) terms.push_back({monomial, coeff});
  }
  if (terms.size() > kMaxTerms) {
    fail(ExitCode::kInvalidModel, "dimension expression too large: a product has ", terms.size(),
         " terms (limit ", kMaxTerms, ")");
  }
  return Builder::make(std::move(terms), constant);
}

bool operator==(const DimExpr& a, const DimExpr& b) { return compare(a, b) == 0; }
bool operator<(const DimExpr& a, const DimExpr& b) { return compare(a, b) < 0; }

std::string DimExpr::to_string() const {
  std::string out;
  print_expr(*this, out);
  return out;
}

DimExpr floordiv(const DimExpr& a, const DimExpr& b) { return make_floordiv(a, b, no_ranges()); }
DimExpr ceildiv(const DimExpr& a, const DimExpr& b) { return -floordiv(-a, b); }
DimExpr mod(const DimExpr& a, const DimExpr& b) { return make_mod(a, b, no_ranges()); }
DimExpr min(const DimExpr& a, const DimExpr& b) {
  return make_minmax(Kind::kMin, {a, b}, no_ranges());
}
DimExpr max(const DimExpr& a, const DimExpr& b) {
  return make_minmax(Kind::kMax, {a, b}, no_ranges());
}

Range SymbolRanges::get(const std::string& symbol) const {
  auto it = ranges_.find(symbol);
  return it == ranges_.end() ? Range{} : it->second;
}

Bounds bounds(const DimExpr& e, const SymbolRanges& ranges) {
  Interval i = interval_of(e, ranges);
  return {i.lo <= INT64_MIN ? INT64_MIN : static_cast<int64_t>(i.lo),
          i.hi >= INT64_MAX ? INT64_MAX : static_cast<int64_t>(i.hi)};
}

DimExpr simplify(const DimExpr& e, const SymbolRanges& ranges) {
  auto leaf = [&](const AtomPtr& atom) -> DimExpr {
    Range r = ranges.get(atom->name);
    if (r.lo == r.hi && r.hi != Range::kUnbounded) return r.lo;
    return from_atom(atom);
  };
  return rebuild(e, ranges, leaf, true);
}

bool prove_equal(const DimExpr& a, const DimExpr& b, const SymbolRanges& ranges) {
  try {
    if (simplify(a, ranges) == simplify(b, ranges)) return true;
  } catch (const Diagnostic&) {
    return false;
  }
  return prove_difference_at_least(a, b, 0, ranges) && prove_difference_at_least(b, a, 0, ranges);
}
bool prove_not_equal(const DimExpr& a, const DimExpr& b, const SymbolRanges& ranges) {
  return prove_difference_at_least(a, b, 1, ranges) || prove_difference_at_least(b, a, 1, ranges);
}
bool prove_less_equal(const DimExpr& a, const DimExpr& b, const SymbolRanges& ranges) {
  return prove_difference_at_least(b, a, 0, ranges);
}
bool prove_less(const DimExpr& a, const DimExpr& b, const SymbolRanges& ranges) {
  return prove_difference_at_least(b, a, 1, ranges);
}

EvalResult evaluate(const DimExpr& e, const std::map<std::string, int64_t>& binding) {
  EvalResult result;
  result.value = eval_expr(e, binding, result.error);
  return result;
}

DimExpr substitute(const DimExpr& e, const std::map<std::string, DimExpr>& replacements) {
  auto leaf = [&](const AtomPtr& atom) -> DimExpr {
    auto it = replacements.find(atom->name);
    return it == replacements.end() ? from_atom(atom) : it->second;
  };
  return rebuild(e, no_ranges(), leaf, false);
}

std::optional<DimExpr> parse(std::string_view text, std::string* error) {
  Parser parser(text);
  auto result = parser.parse_all();
  if (!result && error) *error = parser.error;
  return result;
}

}  // namespace cuvil::sym

namespace cuvil::sym {
namespace {

void emit_postfix(const DimExpr& e, std::vector<PostfixOp>& out) {
  using K = PostfixOp::Kind;
  const Node& n = e.node();
  bool have = false;
  for (const Node::Term& t : n.terms) {
    // A coefficient of 1 is left out so that a bare symbol is one kSymbol op (the runtime
    // binds symbols from input dims that are exactly a symbol).
    bool first = true;
    for (const Node::AtomPtr& atom : t.monomial) {
      switch (atom->kind) {
        case Node::Kind::kSymbol: out.push_back({K::kSymbol, 0, atom->name}); break;
        case Node::Kind::kFloorDiv: case Node::Kind::kMod: {
          emit_postfix(atom->args[0], out);
          emit_postfix(atom->args[1], out);
          out.push_back({atom->kind == Node::Kind::kFloorDiv ? K::kFloorDiv : K::kMod, 0, {}});
          break;
        }
        case Node::Kind::kMin: case Node::Kind::kMax: {
          emit_postfix(atom->args[0], out);
          for (size_t i = 1; i < atom->args.size(); ++i) {
            emit_postfix(atom->args[i], out);
            out.push_back({atom->kind == Node::Kind::kMin ? K::kMin : K::kMax, 0, {}});
          }
          break;
        }
      }
      if (!first) out.push_back({K::kMul, 0, {}});
      first = false;
    }
    if (t.coeff != 1) {
      out.push_back({K::kConst, t.coeff, {}});
      out.push_back({K::kMul, 0, {}});
    }
    if (have) out.push_back({K::kAdd, 0, {}});
    have = true;
  }
  if (!have || n.constant != 0) {
    out.push_back({K::kConst, n.constant, {}});
    if (have) out.push_back({K::kAdd, 0, {}});
  }
}

}  // namespace

std::vector<PostfixOp> to_postfix(const DimExpr& e) {
  std::vector<PostfixOp> out;
  emit_postfix(e, out);
  return out;
}

std::optional<Range> parse_range(std::string_view text) {
  auto number = [](std::string_view s) -> std::optional<int64_t> {
    // 18 digits always fit in int64_t; longer would need overflow checks for no real use.
    if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string_view::npos)
      return std::nullopt;
    int64_t v = 0;
    std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
  };
  Range r;
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    auto n = number(text);
    if (!n) return std::nullopt;
    r.lo = r.hi = *n;
    return r;
  }
  auto lo = number(text.substr(0, colon));
  if (!lo) return std::nullopt;
  r.lo = *lo;
  std::string_view hi = text.substr(colon + 1);
  if (!hi.empty()) {
    auto h = number(hi);
    if (!h || *h < r.lo) return std::nullopt;
    r.hi = *h;
  }
  return r;
}

}  // namespace cuvil::sym
