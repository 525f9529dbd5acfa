// A strict recursive-descent JSON parser (RFC 8259). Small on purpose: safetensors headers are
// the only untrusted JSON vitk reads, so every deviation is an error rather than a guess.
#include "common/io/json.h"

#include <cerrno>
#include <cstdlib>

#include "common/error.h"

namespace vitk::io {

namespace {
constexpr int kMaxDepth = 128;
}  // namespace

class JsonParser {
 public:
  JsonParser(const std::string& text, const std::string& source) : s_(text), source_(source) {}

  Json parse() {
    skip_space();
    Json v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(source_ + ": JSON error at byte " + std::to_string(pos_) + ": " + what);
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  void skip_space() {
    while (!at_end() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  void expect(char c) {
    if (peek() != c || at_end()) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  void literal(const char* word) {
    for (const char* p = word; *p; ++p, ++pos_)
      if (at_end() || s_[pos_] != *p) fail(std::string("invalid literal, expected '") + word + "'");
  }

  Json value(int depth) {
    if (depth > kMaxDepth) fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    Json v;
    if (at_end()) fail("unexpected end of text, expected a value");
    switch (peek()) {
      case '{':
        v.kind_ = Json::Kind::object;
        object(v, depth);
        break;
      case '[':
        v.kind_ = Json::Kind::array;
        array(v, depth);
        break;
      case '"':
        v.kind_ = Json::Kind::string;
        v.text_ = string();
        break;
      case 't':
        literal("true");
        v.kind_ = Json::Kind::boolean;
        v.bool_ = true;
        break;
      case 'f':
        literal("false");
        v.kind_ = Json::Kind::boolean;
        break;
      case 'n':
        literal("null");
        break;
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) {
          v.kind_ = Json::Kind::number;
          v.text_ = number();
        } else {
          fail(std::string("unexpected character '") + peek() + "'");
        }
    }
    return v;
  }

  void object(Json& v, int depth) {
    expect('{');
    skip_space();
    if (peek() == '}' && !at_end()) {
      ++pos_;
      return;
    }
    while (true) {
      skip_space();
      if (peek() != '"' || at_end()) fail("expected a string key");
      size_t key_pos = pos_;
      std::string key = string();
      skip_space();
      expect(':');
      skip_space();
      Json member = value(depth + 1);
      if (!v.object_.emplace(key, std::move(member)).second) {
        pos_ = key_pos;
        fail("duplicate key \"" + key + "\"");
      }
      skip_space();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      expect('}');
      return;
    }
  }

  void array(Json& v, int depth) {
    expect('[');
    skip_space();
    if (peek() == ']' && !at_end()) {
      ++pos_;
      return;
    }
    while (true) {
      skip_space();
      v.array_.push_back(value(depth + 1));
      skip_space();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      expect(']');
      return;
    }
  }

  std::string number() {
    size_t begin = pos_;
    auto digits = [&] {
      size_t start = pos_;
      while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - start;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0' && !at_end()) {
      ++pos_;
      if (peek() >= '0' && peek() <= '9' && !at_end()) fail("leading zero in a number");
    } else if (digits() == 0) {
      fail("expected a digit");
    }
    if (peek() == '.' && !at_end()) {
      ++pos_;
      if (digits() == 0) fail("expected a digit after '.'");
    }
    if ((peek() == 'e' || peek() == 'E') && !at_end()) {
      ++pos_;
      if ((peek() == '+' || peek() == '-') && !at_end()) ++pos_;
      if (digits() == 0) fail("expected a digit in the exponent");
    }
    return s_.substr(begin, pos_ - begin);
  }

  unsigned hex4() {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      if (at_end()) fail("unexpected end of text in a \\u escape");
      char c = s_[pos_];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("invalid hex digit in a \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // One UTF-8 sequence starting at pos_, copied to out; rejects overlong forms, surrogates and
  // code points above U+10FFFF.
  void utf8_char(std::string& out) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(s_[i]); };
    unsigned char c = byte(pos_);
    int extra;
    unsigned cp;
    if (c < 0x80) {
      extra = 0, cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1, cp = c & 0x1Fu;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, cp = c & 0x0Fu;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, cp = c & 0x07u;
    } else {
      fail("invalid UTF-8");
    }
    if (pos_ + static_cast<size_t>(extra) >= s_.size()) fail("truncated UTF-8 sequence");
    for (int i = 1; i <= extra; ++i) {
      unsigned char d = byte(pos_ + static_cast<size_t>(i));
      if ((d & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (d & 0x3Fu);
    }
    static const unsigned kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("invalid UTF-8");
    out.append(s_, pos_, static_cast<size_t>(extra) + 1);
    pos_ += static_cast<size_t>(extra) + 1;
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        utf8_char(out);
        continue;
      }
      ++pos_;
      if (at_end()) fail("unterminated string");
      char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("unpaired surrogate in a \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.compare(pos_, 2, "\\u") != 0) fail("unpaired surrogate in a \\u escape");
            pos_ += 2;
            unsigned low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("unpaired surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }

  const std::string& s_;
  const std::string& source_;
  size_t pos_ = 0;
};

const char* Json::kind_name(Kind kind) {
  switch (kind) {
    case Kind::null:
      return "null";
    case Kind::boolean:
      return "a boolean";
    case Kind::number:
      return "a number";
    case Kind::string:
      return "a string";
    case Kind::array:
      return "an array";
    case Kind::object:
      return "an object";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong_kind(const std::string& what, const char* expected, Json::Kind got) {
  throw Error(what + ": expected " + expected + ", got " + Json::kind_name(got));
}
}  // namespace

const std::string& Json::as_string(const std::string& what) const {
  if (kind_ != Kind::string) wrong_kind(what, "a string", kind_);
  return text_;
}

bool Json::as_bool(const std::string& what) const {
  if (kind_ != Kind::boolean) wrong_kind(what, "a boolean", kind_);
  return bool_;
}

double Json::as_double(const std::string& what) const {
  if (kind_ != Kind::number) wrong_kind(what, "a number", kind_);
  return std::strtod(text_.c_str(), nullptr);
}

uint64_t Json::as_uint(const std::string& what) const {
  if (kind_ != Kind::number) wrong_kind(what, "a non-negative integer", kind_);
  if (text_.find_first_not_of("0123456789") != std::string::npos)
    throw Error(what + ": expected a non-negative integer, got " + text_);
  errno = 0;
  unsigned long long v = std::strtoull(text_.c_str(), nullptr, 10);
  if (errno == ERANGE) throw Error(what + ": integer " + text_ + " is too large");
  return v;
}

const std::vector<Json>& Json::as_array(const std::string& what) const {
  if (kind_ != Kind::array) wrong_kind(what, "an array", kind_);
  return array_;
}

const std::map<std::string, Json>& Json::as_object(const std::string& what) const {
  if (kind_ != Kind::object) wrong_kind(what, "an object", kind_);
  return object_;
}

const Json* Json::find(const std::string& key) const {
  if (kind_ != Kind::object) wrong_kind("JSON member '" + key + "'", "an object", kind_);
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &it->second;
}

Json parse_json(const std::string& text, const std::string& source) {
  return JsonParser(text, source).parse();
}

}  // namespace vitk::io
