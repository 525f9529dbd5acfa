// Fuzzes the strict JSON reader (common/io/json.cpp: nlohmann/json plus the duplicate-key and
// depth checks) and the typed accessors every reader of a parsed document uses.
#include <exception>
#include <string>

#include "common/io/json.h"

namespace {

// Every accessor on every value, as a reader of a safetensors header or config.json would call
// them; each either returns or throws vitk::Error.
void walk(const vitk::io::Json& v, int depth) {
  using namespace vitk::io;
  (void)json_kind(v);
  const auto attempt = [](auto&& f) {
    try {
      f();
    } catch (const std::exception&) {
    }
  };
  attempt([&] { (void)as_string(v, "v"); });
  attempt([&] { (void)as_bool(v, "v"); });
  attempt([&] { (void)as_double(v, "v"); });
  attempt([&] { (void)as_uint(v, "v"); });
  attempt([&] { (void)member(v, "dtype"); });
  if (depth > 200) __builtin_trap();  // the reader refuses nesting deeper than 128
  if (v.is_array())
    for (const Json& item : as_array(v, "v")) walk(item, depth + 1);
  if (v.is_object())
    for (const auto& item : as_object(v, "v").items()) walk(item.value(), depth + 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const vitk::io::Json j = vitk::io::parse_json(text, "fuzz.json");
    walk(j, 0);
    // What was read writes back and reads again to the same value.
    const vitk::io::Json again = vitk::io::parse_json(j.dump(), "dump");
    if (again != j && !j.dump().empty()) __builtin_trap();
  } catch (const std::exception&) {
  }
  return 0;
}
