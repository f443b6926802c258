// Text from a model file (locations, names, numbers) shown in a diagnostic: bytes that would
// cut the message short (NUL ends what()) or drive a terminal (ESC, other control bytes) are
// shown as \xNN escapes. Everything else, UTF-8 included, is kept as written.
#pragma once

#include <string>
#include <string_view>

namespace cuvil::frontend {

inline std::string printable(std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f || c == '\\') {
      out += '\\';
      if (c == '\\') {
        out += '\\';
        continue;
      }
      out += 'x';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace cuvil::frontend
