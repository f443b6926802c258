// Tests for ir/symbolic: canonical forms, division semantics, the text form and its parser,
// bounds, range-aware simplification, proofs, evaluation and substitution. The last suite
// checks the rewrites against a plain reference evaluator on random expressions.
#include "ir/symbolic.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "support/error.h"

namespace cuvil::sym {

// Lets GoogleTest print expressions in failure messages.
static void PrintTo(const DimExpr& e, std::ostream* os) { *os << e.to_string(); }

namespace {

DimExpr S(const std::string& name) { return DimExpr::symbol(name); }

DimExpr P(const std::string& text) {
  std::string error;
  auto e = parse(text, &error);
  EXPECT_TRUE(e.has_value()) << text << ": " << error;
  return e.value_or(DimExpr(-424242));
}

std::string parse_error(const std::string& text) {
  std::string error;
  auto e = parse(text, &error);
  EXPECT_FALSE(e.has_value()) << text << " parsed as " << e->to_string();
  return error;
}

int64_t eval(const DimExpr& e, const std::map<std::string, int64_t>& binding) {
  EvalResult r = evaluate(e, binding);
  EXPECT_TRUE(r.value.has_value()) << e.to_string() << ": " << r.error;
  return r.value.value_or(-424242);
}

SymbolRanges ranges(const std::map<std::string, Range>& r) {
  SymbolRanges out;
  for (const auto& [name, range] : r) out.set(name, range);
  return out;
}

const DimExpr a = S("a"), b = S("b"), c = S("c"), n = S("n"), m = S("m");

// ---- canonical form -----------------------------------------------------------------------

TEST(SymbolicCanonical, RingIdentities) {
  EXPECT_EQ(a + b, b + a);
  EXPECT_EQ(a * b, b * a);
  EXPECT_EQ((a + b) * (a - b), a * a - b * b);
  EXPECT_EQ(2 * (a + 1) - 2, 2 * a);
  EXPECT_EQ((a + b) + c, a + (b + c));
  EXPECT_EQ(a * (b + c), a * b + a * c);
  EXPECT_NE(a + b, a + c);
  EXPECT_NE(a * a, a);
  EXPECT_EQ(a - a, DimExpr(0));
  EXPECT_EQ(-(-a), a);
  EXPECT_EQ(0 * (a + b), DimExpr());
}

TEST(SymbolicCanonical, Accessors) {
  EXPECT_TRUE(DimExpr(7).is_constant());
  EXPECT_EQ(DimExpr(7).constant(), 7);
  EXPECT_EQ(DimExpr().constant(), 0);
  EXPECT_FALSE(n.is_constant());
  EXPECT_EQ(n.constant(), std::nullopt);
  EXPECT_EQ((n - n + 3).constant(), 3);
  EXPECT_EQ(n.as_symbol(), "n");
  EXPECT_EQ((n + 1).as_symbol(), std::nullopt);
  EXPECT_EQ((2 * n).as_symbol(), std::nullopt);
  EXPECT_EQ(floordiv(n, 2).as_symbol(), std::nullopt);
  EXPECT_EQ((b * a + max(S("z"), floordiv(c, m))).symbols(),
            (std::vector<std::string>{"a", "b", "c", "m", "z"}));
  EXPECT_TRUE(DimExpr(3).symbols().empty());
}

TEST(SymbolicCanonical, OrderIsTotalAndIndependentOfConstruction) {
  std::vector<DimExpr> v = {n * m, DimExpr(3), n + 1, floordiv(n, 2), a, max(a, b), n * n, b};
  std::vector<DimExpr> w(v.rbegin(), v.rend());
  std::sort(v.begin(), v.end());
  std::sort(w.begin(), w.end());
  EXPECT_EQ(v, w);
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    EXPECT_TRUE(v[i] < v[i + 1]);
    EXPECT_FALSE(v[i + 1] < v[i]);
  }
  EXPECT_FALSE(n < n);
  // Built in different orders, printed identically.
  EXPECT_EQ((c + b * a + 1 + floordiv(a, 2)).to_string(),
            (floordiv(a, 2) + 1 + a * b + c).to_string());
}

TEST(SymbolicCanonical, CopiesShareTheNode) {
  DimExpr e = 2 * n * m + floordiv(n, 3);
  DimExpr copy = e;
  EXPECT_EQ(&copy.node(), &e.node());
}

// ---- division -----------------------------------------------------------------------------

int64_t py_floordiv(int64_t x, int64_t y) {
  return static_cast<int64_t>(std::floor(static_cast<double>(x) / static_cast<double>(y)));
}

TEST(SymbolicDivision, ConstantsFollowPython) {
  // Python: 7 // 2 == 3, -7 // 2 == -4, 7 // -2 == -4, -7 // -2 == 3, and % has the sign of
  // the divisor.
  EXPECT_EQ(floordiv(7, 2), DimExpr(3));
  EXPECT_EQ(floordiv(-7, 2), DimExpr(-4));
  EXPECT_EQ(floordiv(7, -2), DimExpr(-4));
  EXPECT_EQ(floordiv(-7, -2), DimExpr(3));
  EXPECT_EQ(mod(7, 2), DimExpr(1));
  EXPECT_EQ(mod(-7, 2), DimExpr(1));
  EXPECT_EQ(mod(7, -2), DimExpr(-1));
  EXPECT_EQ(mod(-7, -2), DimExpr(-1));
  EXPECT_EQ(ceildiv(7, 2), DimExpr(4));
  EXPECT_EQ(ceildiv(-7, 2), DimExpr(-3));
  EXPECT_EQ(ceildiv(7, -2), DimExpr(-3));
  EXPECT_EQ(ceildiv(-7, -2), DimExpr(4));
  EXPECT_EQ(floordiv(6, 3), DimExpr(2));
  EXPECT_EQ(floordiv(-6, 3), DimExpr(-2));
  EXPECT_EQ(mod(INT64_MIN, -1), DimExpr(0));
  EXPECT_EQ(floordiv(INT64_MIN, 1), DimExpr(INT64_MIN));
}

TEST(SymbolicDivision, SymbolicFormsAgreeWithPythonOnNegativeValues) {
  // Evaluated for negative bindings too: the canonical rewrites must hold for all integers.
  for (int64_t divisor : {-5, -3, -2, 2, 3, 4, 7}) {
    DimExpr f = floordiv(3 * n - 2, divisor);
    DimExpr cl = ceildiv(n + 1, divisor);
    DimExpr md = mod(5 * n + 1, divisor);
    for (int64_t v = -20; v <= 20; ++v) {
      int64_t fl = py_floordiv(3 * v - 2, divisor);
      EXPECT_EQ(eval(f, {{"n", v}}), fl) << f.to_string() << " n=" << v;
      EXPECT_EQ(eval(cl, {{"n", v}}), -py_floordiv(-(v + 1), divisor)) << cl.to_string();
      EXPECT_EQ(eval(md, {{"n", v}}), 5 * v + 1 - divisor * py_floordiv(5 * v + 1, divisor))
          << md.to_string() << " n=" << v;
    }
  }
}

TEST(SymbolicDivision, DivisibleTermsAreSplitOut) {
  EXPECT_EQ(floordiv(n, 1), n);
  EXPECT_EQ(floordiv(4 * n + 8, 4), n + 2);
  EXPECT_EQ(floordiv(6 * n * m - 3 * m, 3), 2 * n * m - m);
  EXPECT_EQ(floordiv(4 * n + m, 4), n + floordiv(m, 4));
  EXPECT_EQ(floordiv(8 * n + m + 5, 4), 2 * n + 1 + floordiv(m + 1, 4));
  EXPECT_EQ(floordiv(n + 5, 4), floordiv(n + 1, 4) + 1);
  EXPECT_EQ(floordiv(-n, -1), n);
  EXPECT_EQ(floordiv(n, -1), -n);
  // A common factor of the divisor and the remaining coefficients cancels.
  EXPECT_EQ(floordiv(2 * n + 1, 4), floordiv(n, 2));
  EXPECT_EQ(mod(2 * n + 1, 4), 2 * mod(n, 2) + 1);
  // Nested constant divisions merge.
  EXPECT_EQ(floordiv(floordiv(n, 2), 3), floordiv(n, 6));
}

TEST(SymbolicDivision, CeilAndFloorOfTheShiftedValueShareOneForm) {
  EXPECT_EQ(ceildiv(n, 4), floordiv(n + 3, 4));
  EXPECT_EQ(ceildiv(n, 2), floordiv(n + 1, 2));
  EXPECT_EQ(ceildiv(n + 7, 8), floordiv(n + 14, 8));
  EXPECT_EQ(ceildiv(n + 7, 8), floordiv(n + 6, 8) + 1);
  EXPECT_EQ(floordiv(-n, 4), -ceildiv(n, 4));
  EXPECT_EQ(floordiv(1 - n, 3), -floordiv(n + 1, 3));
  EXPECT_EQ(ceildiv(n, 4).to_string(), "floordiv(n + 3, 4)");
  // The argument's leading term (in canonical order) is kept positive.
  EXPECT_EQ(ceildiv(2 * n - m, 3), floordiv(2 * n - m + 2, 3));
  EXPECT_EQ(ceildiv(2 * n - m, 3).to_string(), "-floordiv(m - 2*n, 3)");
  EXPECT_EQ(ceildiv(n, -2).to_string(), "-floordiv(n, 2)");
  // Coefficients c does not divide stay in the argument; mod reduces them.
  EXPECT_EQ(floordiv(5 * n, 4).to_string(), "floordiv(5*n, 4)");
  EXPECT_EQ(mod(5 * n, 4), mod(n, 4));
  EXPECT_EQ(mod(-n, 4), mod(3 * n, 4));
}

TEST(SymbolicDivision, NonConstantDivisors) {
  // n may be 0, so floordiv(n, n) must keep its division by zero.
  EXPECT_EQ(floordiv(n, n).to_string(), "floordiv(n, n)");
  EXPECT_EQ(mod(n, n).to_string(), "mod(n, n)");
  EXPECT_EQ(floordiv(0, n).to_string(), "floordiv(0, n)");
  // n + 1 >= 1 always.
  EXPECT_EQ(floordiv(n + 1, n + 1), DimExpr(1));
  EXPECT_EQ(floordiv(2 * n + 2, n + 1), DimExpr(2));
  EXPECT_EQ(mod(3 * n + 3, n + 1), DimExpr(0));
  EXPECT_EQ(floordiv(6 * n * m * (m + 1), 2 * (m + 1)), 3 * m * n);  // 2*m + 2 >= 2
  EXPECT_EQ(floordiv(n * m + n + 1, m + 1).to_string(), "floordiv(m*n + n + 1, m + 1)");
  EXPECT_EQ(floordiv(6 * n * m * m + 4 * m * m, 2 * m * m).to_string(),
            "floordiv(6*m*m*n + 4*m*m, 2*m*m)");  // m*m may be 0
  EXPECT_EQ(floordiv(-n, -m), floordiv(n, m));
  EXPECT_EQ(mod(n, -m), -mod(-n, m));
  for (int64_t x : {-7, -1, 0, 4, 9}) {
    for (int64_t y : {-3, -1, 2, 5}) {
      EXPECT_EQ(eval(floordiv(n, m), {{"n", x}, {"m", y}}), py_floordiv(x, y));
      EXPECT_EQ(eval(mod(n, -m), {{"n", x}, {"m", y}}), x - (-y) * py_floordiv(x, -y));
    }
  }
}

TEST(SymbolicDivision, DivisionByConstantZeroThrows) {
  try {
    floordiv(n, 0);
    FAIL() << "floordiv(n, 0) did not throw";
  } catch (const Diagnostic& d) {
    EXPECT_EQ(d.code(), ExitCode::kInvalidModel);
    EXPECT_NE(std::string(d.what()).find("division by zero"), std::string::npos) << d.what();
  }
  EXPECT_THROW(mod(n, 0), Diagnostic);
  EXPECT_THROW(ceildiv(n, 0), Diagnostic);
  EXPECT_THROW(floordiv(3, n - n), Diagnostic);
}

// ---- mod ----------------------------------------------------------------------------------

TEST(SymbolicMod, Rules) {
  EXPECT_EQ(mod(n, 1), DimExpr(0));
  EXPECT_EQ(mod(n, -1), DimExpr(0));
  EXPECT_EQ(mod(4 * n, 4), DimExpr(0));
  EXPECT_EQ(mod(4 * n + 6, 4), DimExpr(2));
  EXPECT_EQ(mod(4 * n + m + 5, 4), mod(m + 1, 4));
  EXPECT_EQ(mod(12 * n * m + 7 * m, 4), mod(3 * m, 4));
  EXPECT_EQ(mod(mod(n, 8), 4), mod(n, 4));
  EXPECT_EQ(mod(mod(n, 4), 8), mod(n, 4));    // mod(n, 4) < 8 already
  EXPECT_NE(mod(mod(n, 6), 4), mod(n, 4));    // 4 does not divide 6
  EXPECT_EQ(floordiv(mod(n, 4), 4), DimExpr(0));
  EXPECT_EQ(mod(n, 4).to_string(), "mod(n, 4)");
}

// ---- min / max ----------------------------------------------------------------------------

TEST(SymbolicMinMax, FlattenSortDedupe) {
  EXPECT_EQ(min(min(a, b), c), min(a, min(b, c)));
  EXPECT_EQ(min(min(a, b), c).to_string(), "min(a, b, c)");
  EXPECT_EQ(min(c, min(b, a)).to_string(), "min(a, b, c)");
  EXPECT_EQ(max(max(a, b), max(b, c)).to_string(), "max(a, b, c)");
  EXPECT_EQ(min(a, b), min(b, a));
  EXPECT_EQ(min(a, a), a);
  EXPECT_EQ(max(a, max(b, a)), max(a, b));
  // min inside max is not flattened.
  EXPECT_EQ(max(min(a, b), c).to_string(), "max(c, min(a, b))");
}

TEST(SymbolicMinMax, FoldsWhatTheSignsDecide) {
  EXPECT_EQ(min(3, 5), DimExpr(3));
  EXPECT_EQ(max(-3, 5), DimExpr(5));
  EXPECT_EQ(min(min(n, 7), 5).to_string(), "min(n, 5)");
  EXPECT_EQ(max(max(n, 0), 5).to_string(), "max(n, 5)");
  // Symbols are non-negative.
  EXPECT_EQ(max(n, 0), n);
  EXPECT_EQ(min(n, 0), DimExpr(0));
  EXPECT_EQ(max(-n, 0), DimExpr(0));
  EXPECT_EQ(min(n * m, -1), DimExpr(-1));
  EXPECT_EQ(max(floordiv(n, 3), 0), floordiv(n, 3));
  EXPECT_EQ(max(mod(n, 3), 0), mod(n, 3));
  EXPECT_EQ(min(min(n, m), 0), DimExpr(0));
  // Constant differences pick one side.
  EXPECT_EQ(min(n, n + 1), n);
  EXPECT_EQ(max(n - 2, n), n);
  EXPECT_EQ(max(n + m, n), n + m);
  EXPECT_EQ(min(2 * n, n).to_string(), "n");
  // Undecided stays.
  EXPECT_EQ(min(n, m).to_string(), "min(m, n)");
  EXPECT_EQ(max(n - 1, 0).to_string(), "max(n - 1, 0)");
}

// ---- text form ----------------------------------------------------------------------------

TEST(SymbolicPrint, Golden) {
  DimExpr batch = S("batch"), seq = S("seq");
  EXPECT_EQ((2 * batch * seq + floordiv(seq, 2) - 1).to_string(),
            "2*batch*seq + floordiv(seq, 2) - 1");
  EXPECT_EQ((seq - 1 + 2 * seq * batch + floordiv(seq, 2)).to_string(),
            "2*batch*seq + seq + floordiv(seq, 2) - 1");
  EXPECT_EQ(DimExpr().to_string(), "0");
  EXPECT_EQ(DimExpr(-5).to_string(), "-5");
  EXPECT_EQ(((n + 1) * (n + 1)).to_string(), "n*n + 2*n + 1");
  EXPECT_EQ((-(2 * n + 3)).to_string(), "-2*n - 3");
  EXPECT_EQ((3 - n).to_string(), "-n + 3");
  EXPECT_EQ((a - b - 2 * c).to_string(), "a - b - 2*c");
  EXPECT_EQ(mod(3 * n + 1, 5).to_string(), "mod(3*n + 1, 5)");
  EXPECT_EQ(max(n, 5).to_string(), "max(n, 5)");
  EXPECT_EQ(min(a, max(b, 3)).to_string(), "min(a, max(b, 3))");
  EXPECT_EQ(floordiv(n - 1, m).to_string(), "floordiv(n - 1, m)");
}

TEST(SymbolicPrint, QuotedNames) {
  EXPECT_EQ((2 * S("N + 1")).to_string(), "2*\"N + 1\"");
  EXPECT_EQ(S("a\"b\\c").to_string(), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(S("min").to_string(), "\"min\"");  // a function name is quoted
  EXPECT_EQ(S("9lives").to_string(), "\"9lives\"");
  EXPECT_EQ(S("").to_string(), "\"\"");
  EXPECT_EQ(S("_x9").to_string(), "_x9");
  EXPECT_EQ(S("batch_size").to_string(), "batch_size");
}

TEST(SymbolicPrint, Int64MinHasAParseableForm) {
  EXPECT_EQ((n + INT64_MIN).to_string(), "n + -9223372036854775808");
  EXPECT_EQ((INT64_MIN * n + 1).to_string(), "-9223372036854775808*n + 1");
  EXPECT_EQ((m - n * m + INT64_MIN * n).to_string(), "-m*n + m + -9223372036854775808*n");
  EXPECT_EQ(DimExpr(INT64_MIN).to_string(), "-9223372036854775808");
}

TEST(SymbolicParse, RoundTrip) {
  std::vector<DimExpr> cases = {
      DimExpr(),
      DimExpr(42),
      DimExpr(INT64_MIN),
      DimExpr(INT64_MAX),
      n + INT64_MIN,
      INT64_MIN * n * m + INT64_MAX,
      2 * S("batch") * S("seq") + floordiv(S("seq"), 2) - 1,
      (a + b) * (a - b) * c,
      floordiv(n + 3, 4) * m,
      ceildiv(n, 2),
      ceildiv(3 * n + m, 7),
      mod(-n, 4),
      mod(n, -m),
      floordiv(n, m) - floordiv(m, n),
      min(min(a, max(b, 3)), c - 1),
      max(min(a, b), floordiv(c, 2) + 1),
      min(n, 4096) * max(m, 1),
      S("N + 1") * S("a\"b\\c") - S("min") + S("max") * S("") + S("x y"),
      floordiv(S("tokens (padded)") + 7, 8),
      -a * b - c,
  };
  for (const DimExpr& e : cases) {
    std::string text = e.to_string();
    std::string error;
    auto back = parse(text, &error);
    ASSERT_TRUE(back.has_value()) << text << ": " << error;
    EXPECT_EQ(*back, e) << text << " came back as " << back->to_string();
    EXPECT_EQ(back->to_string(), text);
  }
}

TEST(SymbolicParse, InfixInput) {
  EXPECT_EQ(P("1 + 2*3"), DimExpr(7));
  EXPECT_EQ(P("(1 + 2)*3"), DimExpr(9));
  EXPECT_EQ(P("a - b - c"), a - b - c);
  EXPECT_EQ(P("a - (b - c)"), a - b + c);
  EXPECT_EQ(P("-(n - 1)"), -n + 1);
  EXPECT_EQ(P("- - n"), n);
  EXPECT_EQ(P("n - -3"), n + 3);
  EXPECT_EQ(P("-2*n*m"), -2 * n * m);
  EXPECT_EQ(P("2*(a+b) - -3*ceildiv(n,4)"), 2 * a + 2 * b + 3 * ceildiv(n, 4));
  EXPECT_EQ(P("  floordiv( n+1 ,\t2 )\n"), floordiv(n + 1, 2));
  EXPECT_EQ(P("ceildiv(n, 4)"), floordiv(n + 3, 4));
  EXPECT_EQ(P("mod(n, 3)"), mod(n, 3));
  EXPECT_EQ(P("min(a, b, c, 3)"), min(min(a, b), min(c, 3)));
  EXPECT_EQ(P("max(n, 0)"), n);
  EXPECT_EQ(P("((((n))))"), n);
  EXPECT_EQ(P("\"min\" + min(\"min\", 2)"), S("min") + min(S("min"), 2));
  EXPECT_EQ(P("min*2"), 2 * S("min"));  // a name not followed by '(' is a symbol
  EXPECT_EQ(P("9223372036854775807"), DimExpr(INT64_MAX));
  EXPECT_EQ(P("-9223372036854775808"), DimExpr(INT64_MIN));
}

TEST(SymbolicParse, ErrorsNameTheColumn) {
  EXPECT_EQ(parse_error(""), "column 1: unexpected end of input");
  EXPECT_EQ(parse_error("n +"), "column 4: unexpected end of input");
  EXPECT_EQ(parse_error("(n"), "column 3: expected ')'");
  EXPECT_EQ(parse_error("n $ 1"), "column 3: unexpected '$'");
  EXPECT_EQ(parse_error("n m"), "column 3: unexpected 'm'");
  EXPECT_EQ(parse_error("2n"), "column 2: unexpected 'n'");
  EXPECT_EQ(parse_error("a + foo(n)"), "column 5: unknown function 'foo'");
  EXPECT_EQ(parse_error("floordiv(n)"), "column 1: floordiv takes 2 arguments, got 1");
  EXPECT_EQ(parse_error("mod(n, 2, 3)"), "column 1: mod takes 2 arguments, got 3");
  EXPECT_EQ(parse_error("max(n)"), "column 1: max takes at least 2 arguments, got 1");
  EXPECT_EQ(parse_error("min(n, )"), "column 8: unexpected ')'");
  EXPECT_EQ(parse_error("min(n, 2"), "column 9: expected ')'");
  EXPECT_EQ(parse_error("x + \"abc"), "column 5: unterminated quoted name");
  EXPECT_EQ(parse_error("\"a\\x\""),
            "column 3: invalid escape in quoted name (only \\\" and \\\\)");
  EXPECT_EQ(parse_error("1 + 9223372036854775808"), "column 5: integer literal out of range");
  EXPECT_EQ(parse_error("-9223372036854775809"), "column 1: integer literal out of range");
  std::string error = parse_error("n + floordiv(m, 2 - 2)");
  EXPECT_EQ(error.rfind("column 5: ", 0), 0u) << error;
  EXPECT_NE(error.find("division by zero"), std::string::npos) << error;
  error = parse_error("9223372036854775807 + 1");
  EXPECT_EQ(error.rfind("column 21: ", 0), 0u) << error;
  EXPECT_NE(error.find("overflows"), std::string::npos) << error;
  // A null error pointer is allowed.
  EXPECT_FALSE(parse("(", nullptr).has_value());
}

TEST(SymbolicParse, DeepNestingIsRejectedNotOverflowed) {
  auto nested = [](int depth, const std::string& open, const std::string& close) {
    std::string s;
    for (int i = 0; i < depth; ++i) s += open;
    s += "n";
    for (int i = 0; i < depth; ++i) s += close;
    return s;
  };
  EXPECT_EQ(P(nested(200, "(", ")")), n);
  EXPECT_EQ(P(nested(200, "max(0, ", ")")), n);
  for (const std::string& text : {nested(300, "(", ")"), nested(100000, "(", ")"),
                                  nested(300, "min(n, ", ")"), nested(100000, "-", "")}) {
    std::string error = parse_error(text);
    EXPECT_NE(error.find("nests deeper than 256 levels"), std::string::npos) << error;
    EXPECT_EQ(error.rfind("column ", 0), 0u);
  }
}

// ---- bounds -------------------------------------------------------------------------------

TEST(SymbolicBounds, IntervalArithmetic) {
  SymbolRanges r = ranges({{"n", {1, 8}}, {"m", {0, 4}}, {"k", {-5, 3}}});
  auto check = [&](const DimExpr& e, int64_t lo, int64_t hi) {
    Bounds bd = bounds(e, r);
    EXPECT_EQ(bd.lo, lo) << e.to_string();
    EXPECT_EQ(bd.hi, hi) << e.to_string();
  };
  check(2 * n - m + 1, -1, 17);
  check(n * m, 0, 32);
  check(S("k") * S("k"), -15, 25);  // sound, not exact
  check(floordiv(n, 2), 0, 4);
  check(floordiv(S("k"), 2), -3, 1);
  check(floordiv(n, m + 1), 0, 8);
  check(mod(n, 3), 0, 2);
  check(mod(m, 8), 0, 4);
  check(min(n, m), 0, 4);
  check(max(n, m), 1, 8);
  check(DimExpr(7), 7, 7);
  // Unlisted symbols are [0, unbounded).
  check(S("z"), 0, INT64_MAX);
  check(-S("z"), INT64_MIN, 0);
  check(S("z") - n, -8, INT64_MAX);
  check(n - S("z"), INT64_MIN, 8);
  check(floordiv(n, S("k")), INT64_MIN, INT64_MAX);  // divisor of either sign
  check(mod(S("z"), 5), 0, 4);
}

TEST(SymbolicBounds, Saturates) {
  SymbolRanges r = ranges({{"n", {0, 10}}, {"m", {-10, 10}}});
  Bounds bd = bounds(DimExpr(INT64_MAX / 2) * n, r);
  EXPECT_EQ(bd.lo, 0);
  EXPECT_EQ(bd.hi, INT64_MAX);
  bd = bounds(DimExpr(INT64_MAX / 2) * S("m") * S("m") + INT64_MIN + 1, r);
  EXPECT_EQ(bd.lo, INT64_MIN);
  EXPECT_EQ(bd.hi, INT64_MAX);
  bd = bounds(S("z") * S("z") * S("z") * S("z"), r);
  EXPECT_EQ(bd.lo, 0);
  EXPECT_EQ(bd.hi, INT64_MAX);
  bd = bounds(-S("z") * S("y") - 5, r);
  EXPECT_EQ(bd.lo, INT64_MIN);
  EXPECT_EQ(bd.hi, -5);
  bd = bounds(DimExpr(INT64_MIN) * n, r);
  EXPECT_EQ(bd.lo, INT64_MIN);
  EXPECT_EQ(bd.hi, 0);
}

// ---- simplify -----------------------------------------------------------------------------

TEST(SymbolicSimplify, RangeAwareRewrites) {
  SymbolRanges small = ranges({{"n", {0, 7}}, {"m", {1, 4096}}, {"p", {8, 15}}, {"q", {5, 5}}});
  EXPECT_EQ(simplify(min(m, 4096), small), m);
  EXPECT_EQ(simplify(min(m, 100), small).to_string(), "min(m, 100)");
  EXPECT_EQ(simplify(max(m - 1, 0), small), m - 1);
  EXPECT_EQ(simplify(floordiv(n, 8), small), DimExpr(0));
  EXPECT_EQ(simplify(floordiv(S("p"), 8), small), DimExpr(1));
  EXPECT_EQ(simplify(mod(n, 8), small), n);
  EXPECT_EQ(simplify(mod(S("p"), 8), small), S("p") - 8);
  EXPECT_EQ(simplify(floordiv(m, m), small), DimExpr(1));
  EXPECT_EQ(simplify(floordiv(3 * m * n, m), small), 3 * n);
  EXPECT_EQ(simplify(mod(3 * m * n, m), small), DimExpr(0));
  EXPECT_EQ(simplify(floordiv(6 * m * m * n + 4 * m * m, 2 * m * m), small), 3 * n + 2);
  EXPECT_EQ(simplify(floordiv(n, m + 7), small), DimExpr(0));
  EXPECT_EQ(simplify(mod(n, m + 7), small), n);
  // mod(x, y) is x only while x < y: at n == m == 4 the value is 0.
  EXPECT_EQ(simplify(mod(n, m), ranges({{"n", {0, 3}}, {"m", {4, 9}}})), n);
  EXPECT_EQ(simplify(mod(n, m), ranges({{"n", {0, 4}}, {"m", {4, 9}}})), mod(n, m));
  EXPECT_EQ(simplify(S("q") * n + 1, small), 5 * n + 1);
  // Nested: the inner min decides the outer floordiv.
  EXPECT_EQ(simplify(floordiv(min(m, 7), 8) + 2 * max(S("q") - 5, m), small), 2 * m);
  // Without ranges nothing changes; floordiv(n, n) needs n >= 1.
  EXPECT_EQ(simplify(floordiv(n, n), SymbolRanges()), floordiv(n, n));
  EXPECT_EQ(simplify(floordiv(n, n), small), floordiv(n, n));
  EXPECT_EQ(simplify(min(n, 4096), SymbolRanges()), min(n, 4096));
  // A divisor proven 0 keeps the division instead of throwing.
  SymbolRanges zero = ranges({{"z", {0, 0}}});
  DimExpr e = floordiv(n, S("z")) + mod(n, S("z"));
  EXPECT_EQ(simplify(e, zero), e);
}

// ---- proofs -------------------------------------------------------------------------------

TEST(SymbolicProof, EqualAndNotEqual) {
  SymbolRanges none;
  EXPECT_TRUE(prove_equal(floordiv(n + 5, 4), floordiv(n + 1, 4) + 1, none));
  EXPECT_TRUE(prove_equal(ceildiv(n, 8), floordiv(n + 7, 8), none));
  EXPECT_FALSE(prove_equal(n, m, none));
  EXPECT_TRUE(prove_equal(n, m, ranges({{"n", {3, 3}}, {"m", {3, 3}}})));
  EXPECT_TRUE(prove_equal(min(n, 4096), n, ranges({{"n", {0, 4096}}})));
  EXPECT_FALSE(prove_equal(min(n, 4096), n, none));
  EXPECT_TRUE(prove_not_equal(n + 1, n, none));
  EXPECT_TRUE(prove_not_equal(n, -1, none));
  EXPECT_FALSE(prove_not_equal(n, m, none));
  EXPECT_FALSE(prove_not_equal(n, n, none));
  EXPECT_TRUE(prove_not_equal(n, m, ranges({{"n", {0, 3}}, {"m", {4, 9}}})));
}

TEST(SymbolicProof, Ordering) {
  SymbolRanges none;
  EXPECT_TRUE(prove_less_equal(n, n + 1, none));
  EXPECT_TRUE(prove_less(n, n + 1, none));
  EXPECT_TRUE(prove_less_equal(n, n, none));
  EXPECT_FALSE(prove_less(n, n, none));
  EXPECT_FALSE(prove_less_equal(n + 1, n, none));
  EXPECT_FALSE(prove_less_equal(n, m, none));
  EXPECT_TRUE(prove_less_equal(0, n * m, none));
  EXPECT_TRUE(prove_less_equal(floordiv(n, 2), floordiv(n, 2) + mod(m, 3), none));
  EXPECT_TRUE(prove_less_equal(n, 4096, ranges({{"n", {0, 4096}}})));
  EXPECT_FALSE(prove_less(n, 4096, ranges({{"n", {0, 4096}}})));
  EXPECT_TRUE(prove_less(n, m, ranges({{"n", {0, 3}}, {"m", {4, 9}}})));
  // min/max are related to their own arguments, not only through bounds.
  EXPECT_TRUE(prove_less_equal(n, max(n, m), none));
  EXPECT_TRUE(prove_less_equal(min(n, m), m, none));
  EXPECT_TRUE(prove_less_equal(min(n, m) + 1, n + 1, none));
  EXPECT_FALSE(prove_less_equal(max(n, m), n, none));
  EXPECT_TRUE(prove_less_equal(max(n, m), n + m, none));  // needs a case split
  EXPECT_TRUE(prove_less_equal(min(n, 10), 10, none));
  EXPECT_TRUE(prove_equal(max(n, m) + min(n, m), n + m, none));
}

TEST(SymbolicProof, NeverThrows) {
  SymbolRanges none;
  EXPECT_FALSE(prove_equal(INT64_MAX, -1, none));          // the difference overflows
  EXPECT_NO_THROW(prove_less_equal(INT64_MIN * n, n, none));  // n - INT64_MIN*n overflows
  EXPECT_NO_THROW(prove_not_equal(DimExpr(INT64_MIN), 1, none));
  EXPECT_NO_THROW(prove_less(n * INT64_MAX, -n, none));
}

// ---- evaluate -----------------------------------------------------------------------------

TEST(SymbolicEvaluate, Values) {
  DimExpr e = 2 * S("batch") * S("seq") + floordiv(S("seq"), 2) - 1;
  EXPECT_EQ(eval(e, {{"batch", 3}, {"seq", 7}}), 2 * 3 * 7 + 3 - 1);
  EXPECT_EQ(eval(min(n, m) + max(n, m), {{"n", 4}, {"m", -9}}), -5);
  EXPECT_EQ(eval(mod(n, m), {{"n", -7}, {"m", 3}}), 2);
  EXPECT_EQ(eval(ceildiv(n, m), {{"n", 7}, {"m", 2}}), 4);
  EXPECT_EQ(eval(S("N + 1") * 2, {{"N + 1", 21}}), 42);
  EXPECT_EQ(eval(DimExpr(INT64_MIN), {}), INT64_MIN);
  EXPECT_EQ(eval(n - INT64_MAX, {{"n", -1}}), INT64_MIN);
}

TEST(SymbolicEvaluate, ErrorsAreReturned) {
  EvalResult r = evaluate(n + m, {{"n", 1}});
  EXPECT_FALSE(r.value.has_value());
  EXPECT_EQ(r.error, "symbol m is not bound");
  r = evaluate(2 * S("x y"), {});
  EXPECT_EQ(r.error, "symbol \"x y\" is not bound");
  r = evaluate(floordiv(n, m) + 1, {{"n", 1}, {"m", 0}});
  EXPECT_FALSE(r.value.has_value());
  EXPECT_EQ(r.error, "division by zero in floordiv(n, m)");
  r = evaluate(mod(n + 1, m), {{"n", 1}, {"m", 0}});
  EXPECT_EQ(r.error, "division by zero in mod(n + 1, m)");
  r = evaluate(n * n, {{"n", int64_t{1} << 32}});
  EXPECT_FALSE(r.value.has_value());
  EXPECT_EQ(r.error, "overflow evaluating n*n");
  r = evaluate(n + 1, {{"n", INT64_MAX}});
  EXPECT_EQ(r.error, "overflow evaluating n + 1");
  r = evaluate(floordiv(n, m), {{"n", INT64_MIN}, {"m", -1}});
  EXPECT_FALSE(r.value.has_value());
  EXPECT_EQ(r.error, "overflow evaluating floordiv(n, m)");
  r = evaluate(mod(n, m), {{"n", INT64_MIN}, {"m", -1}});
  EXPECT_EQ(r.value, 0);
  EXPECT_TRUE(r.error.empty());
}

// ---- overflow in constant arithmetic ------------------------------------------------------

void expect_overflow(const std::function<DimExpr()>& fn, const char* what) {
  try {
    DimExpr e = fn();
    ADD_FAILURE() << what << " did not throw; got " << e.to_string();
  } catch (const Diagnostic& d) {
    EXPECT_EQ(d.code(), ExitCode::kInvalidModel) << what;
    EXPECT_NE(std::string(d.what()).find("dimension arithmetic overflows"), std::string::npos)
        << what << ": " << d.what();
  }
}

TEST(SymbolicOverflow, ConstantArithmeticThrows) {
  expect_overflow([] { return DimExpr(INT64_MAX) + 1; }, "INT64_MAX + 1");
  expect_overflow([] { return DimExpr(INT64_MIN) - 1; }, "INT64_MIN - 1");
  expect_overflow([] { return -DimExpr(INT64_MIN); }, "-INT64_MIN");
  expect_overflow([] { return n * INT64_MAX + n; }, "coefficient sum");
  expect_overflow([] { return (n + 2) * INT64_MAX; }, "scaled constant");
  expect_overflow([] { return (n + (int64_t{1} << 32)) * (m + (int64_t{1} << 32)); }, "product");
  expect_overflow([] { return floordiv(INT64_MIN, -1); }, "floordiv(INT64_MIN, -1)");
  expect_overflow([] { return n - INT64_MIN * m; }, "n - INT64_MIN*m");
  // The limit itself is fine.
  EXPECT_EQ((DimExpr(INT64_MAX - 1) + 1).constant(), INT64_MAX);
  EXPECT_EQ((n + INT64_MIN - n).constant(), INT64_MIN);
}

TEST(SymbolicOverflow, HugeProductsAreRejected) {
  DimExpr sum;
  for (int i = 0; i < 20; ++i) sum = sum + S("s" + std::to_string(i));
  try {
    DimExpr e = sum * sum * sum;  // 1540 terms is fine, the next product is not
    EXPECT_EQ(e.symbols().size(), 20u);
    e = e * sum;
    ADD_FAILURE() << "product with " << e.symbols().size() << " symbols did not throw";
  } catch (const Diagnostic& d) {
    EXPECT_NE(std::string(d.what()).find("too large"), std::string::npos) << d.what();
  }
}

// ---- substitute ---------------------------------------------------------------------------

TEST(SymbolicSubstitute, ReplacesAndRecanonicalises) {
  EXPECT_EQ(substitute(floordiv(n - 1, 2), {{"n", m + 1}}), floordiv(m, 2));
  EXPECT_EQ(substitute(min(n, 8) * m, {{"n", DimExpr(4)}}), 4 * m);
  EXPECT_EQ(substitute(n * n - m * m, {{"n", a + b}, {"m", a - b}}), 4 * a * b);
  EXPECT_EQ(substitute(n + m, {{"n", m}, {"m", n}}), n + m);  // simultaneous, not chained
  EXPECT_EQ(substitute(n + 1, {{"n", n + 1}}), n + 2);
  EXPECT_EQ(substitute(floordiv(n, m), {{"m", n}, {"n", 2 * n + 2}}), floordiv(2 * n + 2, n));
  EXPECT_EQ(substitute(max(a, b) + c, {}), max(a, b) + c);
  EXPECT_EQ(substitute(mod(n * m, 6), {{"m", DimExpr(3)}}), 3 * mod(n, 2));
  EXPECT_EQ(substitute(max(S("x y"), 1), {{"x y", DimExpr(0)}}), DimExpr(1));
  EXPECT_THROW(substitute(floordiv(m, n), {{"n", DimExpr(0)}}), Diagnostic);
}

// ---- randomized agreement with a reference evaluator --------------------------------------

using Binding = std::map<std::string, int64_t>;
using Value = std::optional<int64_t>;  // nullopt: undefined (a division by zero)
using Reference = std::function<Value(const Binding&)>;

struct Sample {
  DimExpr expr;
  Reference ref;
};

Sample constant_sample(int64_t k) {
  return {k, [k](const Binding&) { return Value(k); }};
}

// `expr` was built from x and y; its reference applies `op` to their reference values.
Sample combined(DimExpr expr, const Sample& x, const Sample& y, Value (*op)(int64_t, int64_t)) {
  Reference rx = x.ref, ry = y.ref;
  return {std::move(expr), [rx, ry, op](const Binding& b) -> Value {
            Value u = rx(b), v = ry(b);
            if (!u || !v) return std::nullopt;
            return op(*u, *v);
          }};
}

// Builds random expressions together with a direct evaluation of what was built, so every
// rewrite the constructors make is checked against plain integer arithmetic.
class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  Sample gen(int depth) {
    uint32_t choice = pick(depth <= 0 ? 2 : 10);
    if (choice == 0) return constant_sample(static_cast<int64_t>(pick(15)) - 7);
    if (choice == 1) {
      std::string name(1, static_cast<char>('a' + pick(3)));
      return {S(name), [name](const Binding& b) { return Value(b.at(name)); }};
    }
    Sample x = gen(depth - 1);
    Sample y = choice == 4 ? gen(0) : gen(depth - 1);  // products stay low-degree
    // Half the divisors are a non-zero constant; a divisor that folded to 0 is replaced.
    if (choice >= 5 && choice <= 7 && (pick(2) == 0 || y.expr.constant() == 0)) {
      int64_t k = static_cast<int64_t>(pick(11)) - 5;
      y = constant_sample(k == 0 ? 3 : k);
    }
    switch (choice) {
      case 2:
        return combined(x.expr + y.expr, x, y, [](int64_t u, int64_t v) { return Value(u + v); });
      case 3:
        return combined(x.expr - y.expr, x, y, [](int64_t u, int64_t v) { return Value(u - v); });
      case 4:
        return combined(x.expr * y.expr, x, y, [](int64_t u, int64_t v) { return Value(u * v); });
      case 5:
        return combined(floordiv(x.expr, y.expr), x, y, [](int64_t u, int64_t v) {
          return v == 0 ? Value() : Value(py_floordiv(u, v));
        });
      case 6:
        return combined(ceildiv(x.expr, y.expr), x, y, [](int64_t u, int64_t v) {
          return v == 0 ? Value() : Value(-py_floordiv(-u, v));
        });
      case 7:
        return combined(mod(x.expr, y.expr), x, y, [](int64_t u, int64_t v) {
          return v == 0 ? Value() : Value(u - v * py_floordiv(u, v));
        });
      case 8:
        return combined(min(x.expr, y.expr), x, y,
                        [](int64_t u, int64_t v) { return Value(std::min(u, v)); });
      default:
        return combined(max(x.expr, y.expr), x, y,
                        [](int64_t u, int64_t v) { return Value(std::max(u, v)); });
    }
  }

 private:
  uint32_t pick(uint32_t n) { return rng_() % n; }  // mt19937 output is the same everywhere
  std::mt19937 rng_;
};

std::vector<Binding> grid(const SymbolRanges& r) {
  std::vector<int64_t> values = {0, 1, 2, 3, 5, 7, 8, 11, 16, 20};
  std::vector<Binding> out;
  for (int64_t x : values)
    for (int64_t y : values)
      for (int64_t z : values) {
        Binding b = {{"a", x}, {"b", y}, {"c", z}};
        bool inside = true;
        for (const auto& [name, v] : b) {
          Range rg = r.get(name);
          inside = inside && v >= rg.lo && v <= rg.hi;
        }
        if (inside) out.push_back(b);
      }
  return out;
}

TEST(SymbolicProperty, CanonicalFormsAgreeWithReference) {
  Generator gen(12345);
  std::vector<Binding> points = grid(SymbolRanges());
  int checked = 0;
  for (int i = 0; i < 400; ++i) {
    Sample s = gen.gen(3);
    std::string text = s.expr.to_string();
    std::string error;
    auto back = parse(text, &error);
    ASSERT_TRUE(back.has_value()) << text << ": " << error;
    EXPECT_EQ(*back, s.expr) << text << " came back as " << back->to_string();
    Bounds bd = bounds(s.expr, SymbolRanges());
    for (const Binding& b : points) {
      auto want = s.ref(b);
      if (!want) continue;  // canonicalisation may remove a division by zero, never add one
      EvalResult got = evaluate(s.expr, b);
      ASSERT_TRUE(got.value.has_value()) << text << ": " << got.error;
      ASSERT_EQ(*got.value, *want) << text << " at a=" << b.at("a") << " b=" << b.at("b")
                                   << " c=" << b.at("c");
      ASSERT_LE(bd.lo, *want) << text;
      ASSERT_GE(bd.hi, *want) << text;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100000);
}

TEST(SymbolicProperty, SimplifyBoundsAndProofsAreSound) {
  SymbolRanges r = ranges({{"a", {0, 7}}, {"b", {2, 11}}, {"c", {5, 20}}});
  Generator gen(777);
  std::vector<Binding> points = grid(r);
  ASSERT_GT(points.size(), 100u);
  std::vector<Sample> samples;
  int simplified = 0;
  for (int i = 0; i < 300; ++i) {
    Sample s = gen.gen(3);
    DimExpr simple = simplify(s.expr, r);
    simplified += simple != s.expr;
    auto back = parse(simple.to_string(), nullptr);
    ASSERT_TRUE(back.has_value()) << simple.to_string();
    EXPECT_EQ(*back, simple);
    Bounds bd = bounds(s.expr, r);
    for (const Binding& b : points) {
      auto want = s.ref(b);
      if (!want) continue;
      EvalResult got = evaluate(simple, b);
      ASSERT_TRUE(got.value.has_value()) << s.expr.to_string() << " -> " << simple.to_string();
      ASSERT_EQ(*got.value, *want) << s.expr.to_string() << " -> " << simple.to_string();
      ASSERT_LE(bd.lo, *want) << s.expr.to_string();
      ASSERT_GE(bd.hi, *want) << s.expr.to_string();
    }
    samples.push_back(s);
  }
  EXPECT_GT(simplified, 20);  // the ranges must actually decide something
  int proven = 0;
  for (size_t i = 0; i + 1 < samples.size(); ++i) {
    const Sample& x = samples[i];
    const Sample& y = samples[i + 1];
    bool le = prove_less_equal(x.expr, y.expr, r), lt = prove_less(x.expr, y.expr, r);
    bool eq = prove_equal(x.expr, y.expr, r), ne = prove_not_equal(x.expr, y.expr, r);
    proven += le + lt + eq + ne;
    for (const Binding& b : points) {
      auto u = x.ref(b), v = y.ref(b);
      if (!u || !v) continue;
      EXPECT_TRUE(!le || *u <= *v) << x.expr.to_string() << " <= " << y.expr.to_string();
      EXPECT_TRUE(!lt || *u < *v) << x.expr.to_string() << " < " << y.expr.to_string();
      EXPECT_TRUE(!eq || *u == *v) << x.expr.to_string() << " == " << y.expr.to_string();
      EXPECT_TRUE(!ne || *u != *v) << x.expr.to_string() << " != " << y.expr.to_string();
    }
  }
  EXPECT_GT(proven, 10);
}

}  // namespace
}  // namespace cuvil::sym
