// Recursive-descent parser for the IR text form. Whitespace (newlines included) only separates
// tokens: every statement has a definite end, so the printer's layout is not needed to parse.
// Errors are thrown as a private ParseError holding a byte offset and turned into
// "line:column: message" at the top; the only recursion is graph -> node -> attribute ->
// graph, which counts its depth.
#include "ir/parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>

#include "support/checked.h"
#include "support/error.h"

namespace cuvil {
namespace {

struct ParseError {
  size_t offset;
  std::string message;
};

// The characters of an unquoted value name, graph name or attribute key (as the printer's
// value_ref); a trailing ':' is the type separator, never part of the name.
bool is_plain_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' ||
         c == '/' || c == '-';
}
bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A value as declared by `%name: type {sym_data}`, before it is added to a graph.
struct ValueDecl {
  std::string name;
  size_t offset = 0;
  ValueKind kind = ValueKind::Tensor;
  DType dtype = DType::Undefined;
  std::optional<Shape> shape;
  std::optional<std::vector<DimExpr>> sym_data;
};

// The names visible in one graph while it is parsed, and the enclosing graph's for captures.
struct Scope {
  Graph* graph;
  const Scope* parent;
  std::map<std::string, ValueId> names;  // own map: Graph::find skips empty names
};

class Parser {
 public:
  Parser(std::string_view text, const ParseOptions& options) : text_(text), options_(options) {}

  Model parse() {
    Model m;
    if (at_word("model")) parse_model_header(m);
    skip_space();
    m.graph = parse_graph(nullptr, 0);
    skip_space();
    if (pos_ < text_.size()) fail(pos_, "unexpected text after the main graph");
    return m;
  }

  size_t position() const { return pos_; }

 private:
  // ---- scanning ---------------------------------------------------------------------------

  [[noreturn]] void fail(size_t offset, std::string message) {
    throw ParseError{offset, std::move(message)};
  }

  void skip_space() {
    for (;;) {
      while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
      if (text_.substr(pos_, 2) != "//") return;
      while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
    }
  }

  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  char peek_raw(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  std::string describe_here() {
    skip_space();
    if (pos_ >= text_.size()) return "end of input";
    size_t end = pos_;
    while (end < text_.size() && end - pos_ < 20 && !is_space(text_[end])) ++end;
    return "'" + std::string(text_.substr(pos_, std::max<size_t>(end - pos_, 1))) + "'";
  }

  bool try_consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  bool try_consume(std::string_view s) {
    skip_space();
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }
  void expect(char c, const std::string& context) {
    if (!try_consume(c))
      fail(pos_, std::string("expected '") + c + "' " + context + ", found " + describe_here());
  }
  void expect(std::string_view s, const std::string& context) {
    if (!try_consume(s))
      fail(pos_, "expected '" + std::string(s) + "' " + context + ", found " + describe_here());
  }

  // [A-Za-z0-9_]+ ; empty when none.
  std::string read_word() {
    skip_space();
    size_t start = pos_;
    while (pos_ < text_.size() && is_word_char(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }
  // True (and consumed) when the next word is exactly `w`.
  bool at_word(std::string_view w) {
    skip_space();
    size_t start = pos_;
    if (read_word() == w) return true;
    pos_ = start;
    return false;
  }
  void expect_word(std::string_view w, const std::string& context) {
    if (!at_word(w))
      fail(pos_, "expected '" + std::string(w) + "' " + context + ", found " + describe_here());
  }

  // A string with the printer's escapes: \" \\ \xNN. A raw newline ends it as unterminated.
  std::string read_quoted(const char* what) {
    skip_space();
    if (peek_raw() != '"')
      fail(pos_, std::string("expected ") + what + ", found " + describe_here());
    const size_t start = pos_++;
    std::string out;
    for (;;) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') fail(start, "unterminated string");
      char c = text_[pos_];
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      char e = peek_raw(1);
      if (e == '"' || e == '\\') {
        out += e;
        pos_ += 2;
      } else if (e == 'x' && hex_digit(peek_raw(2)) >= 0 && hex_digit(peek_raw(3)) >= 0) {
        out += static_cast<char>(hex_digit(peek_raw(2)) * 16 + hex_digit(peek_raw(3)));
        pos_ += 4;
      } else {
        fail(pos_, "invalid escape in string (only \\\", \\\\ and \\xNN)");
      }
    }
    ++pos_;
    return out;
  }

  // Graph names and attribute keys: plain name characters or a quoted string.
  std::string read_name(const char* what) {
    if (peek() == '"') return read_quoted(what);
    size_t start = pos_;
    while (pos_ < text_.size() && is_plain_name_char(text_[pos_])) ++pos_;
    if (pos_ == start) fail(pos_, std::string("expected ") + what + ", found " + describe_here());
    return std::string(text_.substr(start, pos_ - start));
  }

  // `%name` or `%"quoted"`; returns the name, `*offset` is where the '%' is.
  std::string read_value_ref(size_t* offset) {
    skip_space();
    *offset = pos_;
    if (peek_raw() != '%') fail(pos_, "expected a value ('%name'), found " + describe_here());
    ++pos_;
    if (peek_raw() == '"') return read_quoted("a value name");
    size_t start = pos_;
    while (pos_ < text_.size() && is_plain_name_char(text_[pos_])) ++pos_;
    if (pos_ > start && text_[pos_ - 1] == ':') --pos_;  // the type separator
    if (pos_ == start) fail(*offset, "expected a value name after '%'");
    return std::string(text_.substr(start, pos_ - start));
  }

  // A number token: an optional '-', then letters, digits and '.', with '+'/'-' after an
  // exponent 'e'. Covers integers, %g floats, inf and nan (and a float attribute's 'f').
  std::string_view read_number_token(const char* what) {
    skip_space();
    size_t start = pos_;
    if (peek_raw() == '-') ++pos_;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      bool sign_after_exponent = (c == '+' || c == '-') && pos_ > start &&
                                 (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E');
      if (!is_word_char(c) && c != '.' && !sign_after_exponent) break;
      ++pos_;
    }
    if (pos_ == start || (pos_ == start + 1 && text_[start] == '-'))
      fail(start, std::string("expected ") + what + ", found " + describe_here());
    return text_.substr(start, pos_ - start);
  }

  template <typename T>
  T parse_number(std::string_view token, size_t offset, const char* what) {
    T value{};
    auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
    if (ec == std::errc::result_out_of_range)
      fail(offset, "'" + std::string(token) + "' is out of range for " + what);
    if (ec != std::errc() || end != token.data() + token.size())
      fail(offset, "expected " + std::string(what) + ", found '" + std::string(token) + "'");
    return value;
  }

  int64_t read_int(const char* what) {
    size_t offset = (skip_space(), pos_);
    return parse_number<int64_t>(read_number_token(what), offset, what);
  }
  int64_t read_int_in(int64_t lo, int64_t hi, const char* what) {
    size_t offset = (skip_space(), pos_);
    int64_t v = read_int(what);
    if (v < lo || v > hi)
      fail(offset, std::string(what) + " " + std::to_string(v) + " is out of range [" +
                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
  }

  // `[ item, item ]`, calling item() for each; `what` names the items ("of ints").
  template <typename Fn>
  void parse_list(const char* what, Fn item) {
    const std::string context = std::string("in a list ") + what;
    expect('[', context);
    if (try_consume(']')) return;
    do item();
    while (try_consume(','));
    expect(']', context);
  }

  // ---- dimension expressions --------------------------------------------------------------

  // The text from just after `open` to the matching `close`, which is consumed. Dimension
  // expressions contain parentheses and quoted symbols ("a]b" with \" and \\ escapes), so the
  // end is the first `close` outside both. Iterative: depth is only counted here;
  // sym::parse caps it.
  std::string_view read_bracketed(char open, char close, const char* what, size_t* inner_offset) {
    skip_space();
    const size_t start = pos_;
    if (peek_raw() != open) fail(pos_, std::string("expected '") + open + "' to start " + what);
    size_t i = ++pos_;
    int parens = 0;
    bool quoted = false;
    for (; i < text_.size(); ++i) {
      char c = text_[i];
      if (quoted) {
        if (c == '\\') ++i;
        else if (c == '"') quoted = false;
      } else if (c == '"') {
        quoted = true;
      } else if (c == '(') {
        ++parens;
      } else if (c == ')') {
        --parens;
      } else if (c == close && parens <= 0) {
        break;
      }
    }
    if (i >= text_.size()) fail(start, std::string("unterminated ") + what);
    *inner_offset = pos_;
    std::string_view inner = text_.substr(pos_, i - pos_);
    pos_ = i + 1;
    return inner;
  }

  // Splits at commas outside parentheses and quotes; each piece with its offset, trimmed.
  static std::vector<std::pair<std::string_view, size_t>> split_top_level(std::string_view s,
                                                                          size_t offset) {
    std::vector<std::pair<std::string_view, size_t>> pieces;
    auto add = [&](size_t b, size_t e) {
      while (b < e && is_space(s[b])) ++b;
      while (e > b && is_space(s[e - 1])) --e;
      pieces.emplace_back(s.substr(b, e - b), offset + b);
    };
    int parens = 0;
    bool quoted = false;
    size_t begin = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (quoted) {
        if (c == '\\') ++i;
        else if (c == '"') quoted = false;
      } else if (c == '"') {
        quoted = true;
      } else if (c == '(') {
        ++parens;
      } else if (c == ')') {
        --parens;
      } else if (c == ',' && parens == 0) {
        add(begin, i);
        begin = i + 1;
      }
    }
    add(begin, s.size());
    return pieces;
  }

  DimExpr parse_dim_expr(std::string_view text, size_t offset) {
    std::string error;
    std::optional<DimExpr> e = sym::parse(text, &error);
    if (e) return *e;
    // sym::parse reports "column N: message" within `text`; point at that column.
    size_t at = offset;
    if (error.rfind("column ", 0) == 0) {
      size_t colon = error.find(": ");
      size_t column = 0;
      auto [end, ec] = std::from_chars(error.data() + 7, error.data() + error.size(), column);
      if (ec == std::errc() && colon != std::string::npos && column >= 1 &&
          column <= text.size() + 1) {
        at = offset + column - 1;
        error = error.substr(colon + 2);
      }
    }
    fail(at, "bad dimension expression '" + std::string(text) + "': " + error);
  }

  // `[d, d, ...]`, `[]` or `[*]`.
  std::optional<Shape> parse_dims() {
    size_t offset = 0;
    std::string_view inner = read_bracketed('[', ']', "dimension list", &offset);
    auto pieces = split_top_level(inner, offset);
    if (pieces.size() == 1 && pieces[0].first == "*") return std::nullopt;
    Shape shape;
    if (pieces.size() == 1 && pieces[0].first.empty()) return shape;
    for (const auto& [piece, at] : pieces) {
      if (piece.empty()) fail(at, "empty dimension");
      if (piece == "?") shape.emplace_back(std::nullopt);
      else shape.emplace_back(parse_dim_expr(piece, at));
    }
    return shape;
  }

  // `{e, e, ...}` after a type: symbolic contents.
  std::vector<DimExpr> parse_sym_data() {
    size_t offset = 0;
    std::string_view inner = read_bracketed('{', '}', "symbolic contents", &offset);
    auto pieces = split_top_level(inner, offset);
    std::vector<DimExpr> out;
    if (pieces.size() == 1 && pieces[0].first.empty()) return out;
    for (const auto& [piece, at] : pieces) {
      if (piece.empty()) fail(at, "empty symbolic element");
      out.push_back(parse_dim_expr(piece, at));
    }
    return out;
  }

  // ---- types and values -------------------------------------------------------------------

  DType read_dtype() {
    skip_space();
    size_t start = pos_;
    std::string name = peek_raw() == '?' ? (++pos_, std::string("?")) : read_word();
    if (name == "?") return DType::Undefined;
    std::optional<DType> t = dtype_from_name(name);
    if (!t) {
      fail(start, name.empty() ? "expected a dtype, found " + describe_here()
                               : "unknown dtype '" + name + "'");
    }
    return *t;
  }

  // dtype[dims] | seq<dtype> | opt<dtype[dims]> | map | sparse | unknown (as type_to_string).
  void parse_type(ValueDecl& d) {
    skip_space();
    size_t start = pos_;
    std::string head = peek_raw() == '?' ? "" : read_word();
    if (head == "seq" && peek() == '<') {
      ++pos_;
      d.kind = ValueKind::Sequence;
      d.dtype = read_dtype();
      expect('>', "after a sequence's dtype");
      return;
    }
    if (head == "opt" && peek() == '<') {
      ++pos_;
      d.kind = ValueKind::Optional;
      d.dtype = read_dtype();
      d.shape = parse_dims();
      expect('>', "after an optional's type");
      return;
    }
    for (ValueKind k : {ValueKind::Map, ValueKind::SparseTensor, ValueKind::Unknown}) {
      if (head == value_kind_name(k)) {
        d.kind = k;
        return;
      }
    }
    pos_ = start;
    d.kind = ValueKind::Tensor;
    d.dtype = read_dtype();
    d.shape = parse_dims();
  }

  // `%name: type` with optional `{sym_data}`.
  ValueDecl parse_typed_value() {
    ValueDecl d;
    d.name = read_value_ref(&d.offset);
    expect(':', "between a value and its type");
    parse_type(d);
    if (peek() == '{') d.sym_data = parse_sym_data();
    return d;
  }

  ValueId define(Scope& scope, const ValueDecl& d) {
    if (scope.names.count(d.name))
      fail(d.offset, "value " + value_text(d.name) + " is defined twice in graph " +
                         graph_text(*scope.graph));
    ValueId id = scope.graph->add_value(d.name);
    Value& v = scope.graph->value(id);
    v.kind = d.kind;
    v.dtype = d.dtype;
    v.shape = d.shape;
    v.sym_data = d.sym_data;
    scope.names.emplace(d.name, id);
    return id;
  }

  ValueId lookup(const Scope& scope, const std::string& name, size_t offset) {
    auto it = scope.names.find(name);
    if (it == scope.names.end())
      fail(offset, "unknown value " + value_text(name) + " in graph " + graph_text(*scope.graph));
    return it->second;
  }

  static std::string value_text(const std::string& name) { return "'%" + name + "'"; }
  static std::string graph_text(const Graph& g) { return "'" + g.name + "'"; }

  // ---- constants --------------------------------------------------------------------------

  static std::optional<uint64_t> byte_size(DType dtype, int64_t numel) {
    int bits = dtype_bits(dtype);
    if (bits == 4) return (static_cast<uint64_t>(numel) + 1) / 2;
    return checked_mul_u64(static_cast<uint64_t>(numel), static_cast<uint64_t>(bits / 8));
  }

  template <typename T>
  static void append(std::vector<uint8_t>& bytes, T v) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    bytes.insert(bytes.end(), raw, raw + sizeof(T));
  }

  // An integer element of `dtype`, range-checked, appended little-endian.
  void append_int(std::vector<uint8_t>& bytes, DType dtype) {
    size_t offset = (skip_space(), pos_);
    std::string_view tok = read_number_token("an integer");
    const char* name = dtype_name(dtype);
    if (dtype == DType::UInt64) return append(bytes, parse_number<uint64_t>(tok, offset, name));
    int64_t v = parse_number<int64_t>(tok, offset, name);
    auto check = [&](auto sample) {
      using T = decltype(sample);
      if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          v > static_cast<int64_t>(std::numeric_limits<T>::max()))
        fail(offset, "'" + std::string(tok) + "' is out of range for " + name);
      append(bytes, static_cast<T>(v));
    };
    switch (dtype) {
      case DType::Int8: return check(int8_t{});
      case DType::UInt8: return check(uint8_t{});
      case DType::Int16: return check(int16_t{});
      case DType::UInt16: return check(uint16_t{});
      case DType::Int32: return check(int32_t{});
      case DType::UInt32: return check(uint32_t{});
      default: return check(int64_t{});
    }
  }

  // The body after `const` or `tensor<...>`: `[..]`, `0x..` or `elided<N>`, for a tensor of
  // the given dtype and dims.
  std::shared_ptr<const TensorData> parse_tensor_body(DType dtype, std::vector<int64_t> dims,
                                                      size_t decl_offset) {
    auto t = std::make_shared<TensorData>();
    t->dtype = dtype;
    t->dims = std::move(dims);
    std::optional<int64_t> numel = checked_numel(t->dims);
    if (!numel) fail(decl_offset, "constant has negative or overflowing dims");
    if (dtype == DType::Undefined) fail(decl_offset, "constant has no dtype");
    std::optional<uint64_t> bytes = byte_size(dtype, *numel);
    if (!bytes) fail(decl_offset, "constant size overflows");
    std::string type_text = std::string(dtype_name(dtype)) + "[";
    for (size_t i = 0; i < t->dims.size(); ++i)
      type_text += (i ? ", " : "") + std::to_string(t->dims[i]);
    type_text += "]";

    skip_space();
    const size_t body = pos_;
    if (dtype == DType::String) {
      parse_list("of strings", [&] { t->strings.push_back(read_quoted("a string")); });
      if (t->strings.size() != static_cast<uint64_t>(*numel))
        fail(body, "constant " + type_text + " needs " + std::to_string(*numel) + " strings, got " +
                       std::to_string(t->strings.size()));
      return t;
    }
    if (at_word("elided")) {
      expect('<', "after 'elided'");
      int64_t n = read_int_in(0, std::numeric_limits<int64_t>::max(), "elided byte count");
      expect('>', "after the elided byte count");
      if (static_cast<uint64_t>(n) != *bytes)
        fail(body, "elided<" + std::to_string(n) + "> does not match the " +
                       std::to_string(*bytes) + " bytes of " + type_text);
      auto total = checked_add_u64(elided_bytes_, *bytes);
      if (!total || *total > options_.max_elided_bytes)
        fail(body, "elided constants exceed the limit of " +
                       std::to_string(options_.max_elided_bytes) + " bytes");
      elided_bytes_ = *total;
      t->bytes.assign(static_cast<size_t>(*bytes), 0);
      return t;
    }
    if (peek_raw() == '0' && peek_raw(1) == 'x') {
      pos_ += 2;
      size_t start = pos_;
      while (pos_ < text_.size() && hex_digit(text_[pos_]) >= 0) ++pos_;
      size_t digits = pos_ - start;
      if (digits % 2 != 0) fail(start, "odd number of hex digits");
      if (digits / 2 != *bytes)
        fail(body, "constant " + type_text + " needs " + std::to_string(*bytes) + " bytes, got " +
                       std::to_string(digits / 2));
      for (size_t i = start; i < pos_; i += 2)
        t->bytes.push_back(
            static_cast<uint8_t>(hex_digit(text_[i]) * 16 + hex_digit(text_[i + 1])));
      return t;
    }
    if (peek_raw() != '[')
      fail(body, "expected '[', '0x' or 'elided<N>' for a constant, found " + describe_here());
    const bool is_int = dtype_is_integer(dtype) && dtype_bits(dtype) >= 8;
    if (!is_int && dtype != DType::Bool && dtype != DType::Float && dtype != DType::Double)
      fail(body, std::string(dtype_name(dtype)) + " constants are written in hex (0x...)");
    int64_t count = 0;
    parse_list("of constant elements", [&] {
      ++count;
      if (count > *numel) return;  // reported below; keep parsing to stay in the text
      if (is_int) return append_int(t->bytes, dtype);
      if (dtype == DType::Bool) {
        size_t at = (skip_space(), pos_);
        if (at_word("true")) return t->bytes.push_back(1);
        if (at_word("false")) return t->bytes.push_back(0);
        fail(at, "expected true or false, found " + describe_here());
      }
      size_t at = (skip_space(), pos_);
      std::string_view tok = read_number_token("a number");
      if (dtype == DType::Float) append(t->bytes, parse_number<float>(tok, at, "f32"));
      else append(t->bytes, parse_number<double>(tok, at, "f64"));
    });
    if (count != *numel)
      fail(body, "constant " + type_text + " needs " + std::to_string(*numel) + " elements, got " +
                     std::to_string(count));
    return t;
  }

  // `tensor<dtype[d, d]> body` (an attribute or list element).
  std::shared_ptr<const TensorData> parse_tensor_literal() {
    size_t start = (skip_space(), pos_);
    expect_word("tensor", "for a tensor");
    expect('<', "after 'tensor'");
    DType dtype = read_dtype();
    std::vector<int64_t> dims;
    parse_list("of tensor dims", [&] {
      dims.push_back(read_int_in(0, std::numeric_limits<int64_t>::max(), "tensor dim"));
    });
    expect('>', "after a tensor's type");
    return parse_tensor_body(dtype, std::move(dims), start);
  }

  // ---- model, graphs, statements ----------------------------------------------------------

  void parse_model_header(Model& m) {
    expect('{', "after 'model'");
    while (!try_consume('}')) {
      skip_space();
      size_t at = pos_;
      std::string key = read_word();
      if (key == "ir_version") {
        expect('=', "after 'ir_version'");
        m.ir_version = read_int("an ir_version");
      } else if (key == "opset") {
        std::string domain = read_quoted("an opset domain");
        expect('=', "after the opset domain");
        int64_t version = read_int("an opset version");
        if (!m.opset_imports.emplace(domain, version).second)
          fail(at, "opset \"" + domain + "\" is given twice");
      } else if (key == "producer") {
        expect('=', "after 'producer'");
        std::string p = read_quoted("the producer");
        size_t space = p.rfind(' ');
        m.producer_name = p.substr(0, space);
        m.producer_version = space == std::string::npos ? "" : p.substr(space + 1);
      } else if (key == "inlined_function") {
        m.local_functions.push_back(read_quoted("a function name"));
      } else if (key == "dim") {
        parse_dim_range(m);
      } else if (key.empty()) {
        fail(at, "expected a model field or '}', found " + describe_here());
      } else {
        fail(at, "unknown model field '" + key + "'");
      }
    }
  }

  // `dim symbol = lo:hi` or `dim symbol = lo:` (no upper bound).
  void parse_dim_range(Model& m) {
    skip_space();
    const size_t at = pos_;
    if (peek_raw() == '"') {
      // Quoted as symbolic.cpp writes it: \" and \\ escapes, anything else raw.
      for (++pos_; pos_ < text_.size() && text_[pos_] != '"'; ++pos_)
        if (text_[pos_] == '\\') ++pos_;
      if (pos_ >= text_.size()) fail(at, "unterminated quoted symbol");
      ++pos_;
    } else {
      read_word();
    }
    std::string_view token = text_.substr(at, pos_ - at);
    std::optional<std::string> symbol = parse_dim_expr(token, at).as_symbol();
    if (!symbol) fail(at, "expected a symbol name after 'dim'");
    expect('=', "after the dim symbol");
    sym::Range r;
    r.lo = read_int("a range bound");
    expect(':', "in a dim range");
    char c = peek();
    if ((c >= '0' && c <= '9') || c == '-') r.hi = read_int("a range bound");
    m.ranges.set(*symbol, r);
  }

  std::shared_ptr<Graph> parse_graph(const Scope* parent, int depth) {
    skip_space();
    if (depth > options_.max_graph_depth)
      fail(pos_, "graphs nest deeper than " + std::to_string(options_.max_graph_depth) + " levels");
    expect_word("graph", parent ? "for a subgraph" : "to start the main graph");
    auto g = std::make_shared<Graph>();
    g->name = read_name("a graph name");
    g->parent = parent ? parent->graph : nullptr;
    Scope scope{g.get(), parent, {}};

    expect('(', "after the graph name");
    if (!try_consume(')')) {
      do g->inputs.push_back(define(scope, parse_typed_value()));
      while (try_consume(','));
      expect(')', "after the graph inputs");
    }
    expect("->", "after the graph inputs");
    std::vector<std::pair<std::string, size_t>> outputs;
    expect('(', "before the graph outputs");
    if (!try_consume(')')) {
      do {
        size_t at = 0;
        std::string name = read_value_ref(&at);
        outputs.emplace_back(std::move(name), at);
      } while (try_consume(','));
      expect(')', "after the graph outputs");
    }
    expect('{', "to open the graph body");
    while (!try_consume('}')) {
      if (pos_ >= text_.size()) fail(pos_, "graph " + graph_text(*g) + " is not closed with '}'");
      parse_statement(scope, depth);
    }
    for (const auto& [name, at] : outputs) g->outputs.push_back(lookup(scope, name, at));
    return g;
  }

  // True (and consumed) when the next word is `w` not followed by '<': `const` and `capture`
  // are keywords, `const<1>(...)` is an op of that name.
  bool at_keyword(std::string_view w) {
    size_t start = pos_;
    if (at_word(w) && peek() != '<') return true;
    pos_ = start;
    return false;
  }

  void parse_statement(Scope& scope, int depth) {
    Graph& g = *scope.graph;
    std::vector<std::optional<ValueDecl>> outs;
    if (peek() != '=') {
      do {
        skip_space();
        if (peek_raw() == '_') {
          ++pos_;
          outs.emplace_back(std::nullopt);
        } else if (peek_raw() == '%') {
          outs.emplace_back(parse_typed_value());
        } else {
          fail(pos_, "expected a value, '_', '=' or '}', found " + describe_here());
        }
      } while (try_consume(','));
    }
    expect('=', "after the defined values");

    const bool single = outs.size() == 1 && outs[0];
    if (single && at_keyword("capture")) {
      const ValueDecl& d = *outs[0];
      if (!scope.parent) fail(d.offset, "capture " + value_text(d.name) + " in the main graph");
      auto it = scope.parent->names.find(d.name);
      if (it == scope.parent->names.end())
        fail(d.offset, "capture " + value_text(d.name) + " names no value of the enclosing graph " +
                           graph_text(*scope.parent->graph));
      ValueId id = define(scope, d);
      g.value(id).outer = it->second;
      g.captures.push_back(id);
      return;
    }
    if (single && at_keyword("const")) {
      const ValueDecl& d = *outs[0];
      if (d.kind != ValueKind::Tensor)
        fail(d.offset, "constant " + value_text(d.name) + " must be a tensor");
      std::vector<int64_t> dims;
      bool is_static = d.shape.has_value();
      for (const Dim& dim : d.shape.value_or(Shape{})) {
        int64_t extent = dim && dim->is_constant() ? *dim->constant() : -1;
        is_static = is_static && extent >= 0;
        dims.push_back(extent);
      }
      if (!is_static)
        fail(d.offset,
             "constant " + value_text(d.name) + " needs a shape of non-negative integers");
      auto data = parse_tensor_body(d.dtype, std::move(dims), d.offset);
      ValueId id = define(scope, d);
      g.value(id).is_initializer = true;
      g.value(id).data = std::move(data);
      return;
    }
    parse_node(scope, std::move(outs), depth);
  }

  // The op after '=': `"domain"::Op<opset>(inputs) {attrs} @"name"`; op types that are not
  // identifiers are quoted.
  void parse_node(Scope& scope, std::vector<std::optional<ValueDecl>> outs, int depth) {
    Graph& g = *scope.graph;
    Node n;
    auto read_op_type = [&] {
      if (peek() == '"') return read_quoted("an op type");
      std::string word = read_word();
      if (word.empty()) fail(pos_, "expected an op type, found " + describe_here());
      return word;
    };
    if (peek() == '"') {
      std::string q = read_quoted("an op");
      if (try_consume("::")) {
        n.domain = std::move(q);
        n.op_type = read_op_type();
      } else {
        n.op_type = std::move(q);
      }
    } else {
      n.op_type = read_op_type();
    }
    expect('<', "before the op's opset version");
    n.opset =
        static_cast<int>(read_int_in(0, std::numeric_limits<int32_t>::max(), "opset version"));
    expect('>', "after the op's opset version");
    n.op = op_from_name(n.domain, n.op_type).value_or(OpKind::Unknown);

    expect('(', "before the op's inputs");
    if (!try_consume(')')) {
      do {
        skip_space();
        if (peek_raw() == '_') {
          ++pos_;
          n.inputs.push_back(kNoValue);
        } else {
          size_t at = 0;
          std::string name = read_value_ref(&at);
          n.inputs.push_back(lookup(scope, name, at));
        }
      } while (try_consume(','));
      expect(')', "after the op's inputs");
    }

    if (try_consume('{')) {
      do {
        skip_space();
        size_t at = pos_;
        std::string key = read_name("an attribute name");
        if (n.attrs.count(key)) fail(at, "attribute '" + key + "' is given twice");
        expect('=', "after the attribute name");
        n.attrs.emplace(key, parse_attribute(scope, depth));
      } while (try_consume(','));
      expect('}', "after the attributes");
    }

    const int32_t index = static_cast<int32_t>(g.nodes.size());
    n.name =
        try_consume('@') ? read_quoted("a node name") : n.op_type + "_" + std::to_string(index);
    // Outputs are defined after the inputs are resolved: a node cannot read its own output.
    for (const auto& d : outs) {
      if (!d) {
        n.outputs.push_back(kNoValue);
        continue;
      }
      ValueId id = define(scope, *d);
      g.value(id).producer = index;
      n.outputs.push_back(id);
    }
    g.nodes.push_back(std::move(n));
  }

  Attribute parse_attribute(const Scope& scope, int depth) {
    using K = Attribute::Kind;
    Attribute a;
    skip_space();
    const size_t start = pos_;
    if (peek_raw() == '"') {
      a.kind = K::String;
      a.s = read_quoted("a string");
      return a;
    }
    const std::string word = read_word();
    auto strings_of = [&](K kind) {
      a.kind = kind;
      parse_list("of strings", [&] { a.strings.push_back(read_quoted("a string")); });
    };
    if (word == "graph") {
      pos_ = start;
      a.kind = K::Graph;
      a.g = parse_graph(&scope, depth + 1);
    } else if (word == "graphs" && peek() == '[') {
      a.kind = K::Graphs;
      parse_list("of graphs", [&] { a.graphs.push_back(parse_graph(&scope, depth + 1)); });
    } else if (word == "tensor" && peek() == '<') {
      pos_ = start;
      a.kind = K::Tensor;
      a.t = parse_tensor_literal();
    } else if (word == "tensors" && peek() == '[') {
      a.kind = K::Tensors;
      parse_list("of tensors", [&] { a.tensors.push_back(parse_tensor_literal()); });
    } else if (word == "ints" && peek() == '[') {
      a.kind = K::Ints;
      parse_list("of ints", [&] { a.ints.push_back(read_int("an integer")); });
    } else if (word == "floats" && peek() == '[') {
      a.kind = K::Floats;
      parse_list("of floats", [&] {
        size_t at = (skip_space(), pos_);
        a.floats.push_back(parse_number<float>(read_number_token("a float"), at, "a float"));
      });
    } else if (word == "strings" && peek() == '[') {
      strings_of(K::Strings);
    } else if (word == attribute_kind_name(K::SparseTensor) && peek() == '[') {
      strings_of(K::SparseTensor);
    } else if (word == attribute_kind_name(K::TypeProto) && peek() == '[') {
      strings_of(K::TypeProto);
    } else if (word == attribute_kind_name(K::SparseTensors) && peek() == '[') {
      strings_of(K::SparseTensors);
    } else if (word == attribute_kind_name(K::TypeProtos) && peek() == '[') {
      strings_of(K::TypeProtos);
    } else {
      // A number: `12` is an int, `1.5f` (also `inff`, `-nanf`) a float.
      pos_ = start;
      std::string_view tok = read_number_token("an attribute value");
      if (tok.size() > 1 && tok.back() == 'f') {
        a.kind = K::Float;
        a.f = parse_number<float>(tok.substr(0, tok.size() - 1), start, "a float attribute");
      } else {
        if (tok.find('.') != std::string_view::npos)
          fail(start, "expected an int attribute, found '" + std::string(tok) +
                          "' (a float attribute ends in 'f')");
        a.kind = K::Int;
        a.i = parse_number<int64_t>(tok, start, "an int attribute");
      }
    }
    return a;
  }

  std::string_view text_;
  const ParseOptions& options_;
  size_t pos_ = 0;
  uint64_t elided_bytes_ = 0;
};

std::string line_column(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return std::to_string(line) + ":" + std::to_string(offset - line_start + 1);
}

}  // namespace

std::optional<Model> parse_model(std::string_view text, std::string* error,
                                 const ParseOptions& options) {
  Parser parser(text, options);
  try {
    return parser.parse();
  } catch (const ParseError& e) {
    if (error) *error = line_column(text, e.offset) + ": " + e.message;
  } catch (const Diagnostic& d) {
    // Symbolic arithmetic reports overflow this way; it belongs to the current position.
    if (error) *error = line_column(text, parser.position()) + ": " + d.what();
  }
  return std::nullopt;
}

}  // namespace cuvil
