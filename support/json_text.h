// JSON string literals for the JSON files cuvil writes (the compile report, cuvil-run's run
// report, run traces): quotes, backslash and control characters escaped, every other byte
// as it is. Header-only, so the runtime uses it without linking cuvil_support.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace cuvil {

// Appends `s` as a JSON string literal, quotes included.
inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

inline std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

}  // namespace cuvil
