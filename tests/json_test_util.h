// A small strict JSON reader for tests that check the JSON cuvil writes (run traces, run
// reports): objects, arrays, strings with escapes (\uXXXX below U+0080 only, which is all
// cuvil writes), numbers, true/false/null. Anything malformed is a parse error with its byte
// offset, so a test fails on JSON that Perfetto or json.tool would refuse.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cuvil::test {

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object;

  bool has(const std::string& key) const { return type == Type::kObject && object.count(key); }
  const Json& operator[](const std::string& key) const {
    static const Json null;
    auto it = object.find(key);
    return it == object.end() ? null : it->second;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}
  // Parses the whole text; false with *error set ("offset N: ...") on malformed input.
  bool parse(Json* out, std::string* error) {
    pos_ = 0;
    error_.clear();
    bool ok = value(out);
    skip_ws();
    if (ok && pos_ != s_.size()) ok = fail("trailing characters");
    if (!ok && error) *error = error_;
    return ok;
  }

 private:
  bool fail(const std::string& what) {
    if (error_.empty()) error_ = "offset " + std::to_string(pos_) + ": " + what;
    return false;
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool literal(const char* word) {
    const std::string w = word;
    if (s_.compare(pos_, w.size(), w) != 0) return fail("bad literal");
    pos_ += w.size();
    return true;
  }
  bool string_value(std::string* out) {
    if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a string");
    ++pos_;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c < 0x20) return fail("control character in a string");
      if (c == '\\') {
        if (++pos_ >= s_.size()) return fail("unterminated escape");
        char e = s_[pos_++];
        switch (e) {
          case '"': *out += '"'; break;
          case '\\': *out += '\\'; break;
          case '/': *out += '/'; break;
          case 'b': *out += '\b'; break;
          case 'f': *out += '\f'; break;
          case 'n': *out += '\n'; break;
          case 'r': *out += '\r'; break;
          case 't': *out += '\t'; break;
          case 'u': {
            if (pos_ + 4 > s_.size()) return fail("short \\u escape");
            long v = std::strtol(s_.substr(pos_, 4).c_str(), nullptr, 16);
            pos_ += 4;
            if (v >= 0x80) return fail("\\u escape above U+007F (not written by cuvil)");
            *out += static_cast<char>(v);
            break;
          }
          default: return fail("bad escape");
        }
      } else {
        *out += static_cast<char>(c);
        ++pos_;
      }
    }
    if (pos_ >= s_.size()) return fail("unterminated string");
    ++pos_;
    return true;
  }
  bool value(Json* out) {
    skip_ws();
    if (pos_ >= s_.size()) return fail("unexpected end");
    char c = s_[pos_];
    if (c == '{') {
      out->type = Json::Type::kObject;
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
      for (;;) {
        skip_ws();
        std::string key;
        if (!string_value(&key)) return false;
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':'");
        ++pos_;
        if (out->object.count(key)) return fail("duplicate key '" + key + "'");
        if (!value(&out->object[key])) return false;
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
        if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
        return fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      out->type = Json::Type::kArray;
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
      for (;;) {
        out->array.emplace_back();
        if (!value(&out->array.back())) return false;
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
        if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
        return fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      out->type = Json::Type::kString;
      return string_value(&out->string);
    }
    if (c == 't') { out->type = Json::Type::kBool; out->boolean = true; return literal("true"); }
    if (c == 'f') { out->type = Json::Type::kBool; return literal("false"); }
    if (c == 'n') return literal("null");
    // A number in JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      size_t b = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - b;
    };
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      return fail("bad value");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return fail("bad fraction");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return fail("bad exponent");
    }
    out->type = Json::Type::kNumber;
    out->number = std::strtod(s_.substr(start, pos_ - start).c_str(), nullptr);
    return true;
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace cuvil::test
