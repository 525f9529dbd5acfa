// Fuzzes the safetensors reader (common/io/safetensors.cpp): the 8-byte header length, the JSON
// header, dtypes, shapes and data offsets (checked when the file is opened), then every tensor
// read as f32. A vitk::Error is the expected answer to a bad file.
#include <exception>

#include "common/io/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vitk::fuzz::ScratchFile file("safetensors", ".safetensors");
  try {
    const vitk::io::SafetensorsFile f(file.write(data, size));
    for (const auto& [key, value] : f.metadata()) (void)(key.size() + value.size());
    for (const vitk::io::SafetensorsEntry& e : f.entries()) {
      if (f.find(e.name) != &e) __builtin_trap();  // the index must agree with the list
      try {
        const vitk::Tensor t = f.read_f32(e.name);
        if (t.numel() != vitk::shape_numel(e.shape)) __builtin_trap();
      } catch (const std::exception&) {  // a dtype read_f32 does not convert
      }
    }
  } catch (const std::exception&) {
  }
  return 0;
}
