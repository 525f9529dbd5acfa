#pragma once
// JSON through nlohmann/json (Debian's nlohmann-json3-dev), read strictly: RFC 8259 (no comments,
// no trailing commas, no NaN, UTF-8 checked) as the library does, plus what it lets through and
// untrusted input must not: duplicate keys (the library keeps the last; a reader of the same file
// would see another tensor) and nesting deeper than 128 levels. For safetensors headers (the one
// untrusted JSON vitk reads) and Hugging Face config files.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace vitk::io {

using Json = nlohmann::json;  // objects keep their keys sorted

// Parses the whole of text (surrounding whitespace allowed). Throws vitk::Error "<source>: JSON
// error at byte N (line L, column C): ..." on anything that is not one valid JSON value.
Json parse_json(const std::string& text, const std::string& source);

// "null", "a boolean", "a number", "a string", "an array", "an object".
const char* json_kind(const Json& value);

// Typed access; each throws vitk::Error "<what>: expected <kind>, got <kind>" when the value is of
// another kind.
const std::string& as_string(const Json& value, const std::string& what);
bool as_bool(const Json& value, const std::string& what);
double as_double(const Json& value, const std::string& what);
// A number written as a non-negative integer that fits 64 bits ("12", not "12.0" nor "-1").
uint64_t as_uint(const Json& value, const std::string& what);
// The value itself, checked to be an array or an object (iterate an object with .items()).
const Json& as_array(const Json& value, const std::string& what);
const Json& as_object(const Json& value, const std::string& what);
// The member `key` of an object, or nullptr when absent (vitk::Error when value is no object).
const Json* member(const Json& value, const std::string& key);

}  // namespace vitk::io
