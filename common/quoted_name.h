#pragma once
// How messages show a name read from a file (a tensor, a key).
#include <cstdio>
#include <string>

namespace vitk {

// In single quotes, with control bytes escaped as \xNN, so that a NUL cannot cut the message off
// (what() is a C string) nor an escape sequence garble the terminal. UTF-8 passes unchanged.
inline std::string quoted_name(const std::string& name) {
  std::string out = "'";
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7f) {
      out += ch;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out + "'";
}

}  // namespace vitk
