#pragma once
// A small strict JSON parser (RFC 8259) for safetensors headers and Hugging Face config files:
// no comments, no trailing commas, no duplicate keys, no NaN, UTF-8 checked, nesting at most 128
// deep. Numbers keep their text so that integers of 64 bits read back exactly.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace vitk::io {

class Json {
 public:
  enum class Kind { null, boolean, number, string, array, object };

  Kind kind() const { return kind_; }
  bool is_object() const { return kind_ == Kind::object; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_number() const { return kind_ == Kind::number; }

  // Typed access; each throws vitk::Error (naming `what`) when the value is of another kind.
  const std::string& as_string(const std::string& what) const;
  bool as_bool(const std::string& what) const;
  double as_double(const std::string& what) const;
  // A number written as a non-negative integer that fits 64 bits ("12", not "12.0" nor "-1").
  uint64_t as_uint(const std::string& what) const;
  const std::vector<Json>& as_array(const std::string& what) const;
  // Keys in sorted order (std::map); the order in the text is not kept.
  const std::map<std::string, Json>& as_object(const std::string& what) const;
  // Member of an object, or nullptr when absent (vitk::Error when this is not an object).
  const Json* find(const std::string& key) const;

  static const char* kind_name(Kind kind);  // "null", "a boolean", "a number", ...

  // The text of a number, or the value of a string, as written (after unescaping).
  const std::string& text() const { return text_; }

 private:
  friend class JsonParser;
  Kind kind_ = Kind::null;
  bool bool_ = false;
  std::string text_;  // number text or string value
  std::vector<Json> array_;
  std::map<std::string, Json> object_;
};

// Parses the whole of text (surrounding whitespace allowed). Throws vitk::Error "<source>: JSON
// error at byte N: ..." on anything that is not one valid JSON value.
Json parse_json(const std::string& text, const std::string& source);

}  // namespace vitk::io
