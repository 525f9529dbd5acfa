#pragma once
// Reading .safetensors files (Hugging Face's format, also what timm and the Hub publish):
//   [8 bytes: N, unsigned little-endian] [N bytes: JSON header] [raw tensor data]
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the start of the data), plus an optional "__metadata__" object of strings.
// Everything is checked when the file is opened, before any tensor is read: the header length,
// the JSON (strictly), dtype names, that each byte range matches its shape and dtype, lies inside
// the file, and that the ranges neither overlap nor leave holes (the format's own rule). Every
// error is a vitk::Error naming the file and, where there is one, the tensor.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/tensor.h"

namespace vitk::io {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as written: "F32", "F16", "BF16", "I64", ...
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

class SafetensorsFile {
 public:
  // Opens and validates path (vitk::Error on any problem).
  explicit SafetensorsFile(std::string path);

  const std::string& path() const { return path_; }
  // In the order of their data (the order a writer laid them out).
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor converted to f32. F32, F16, BF16 and F64 are read; any other dtype, or a name
  // that is not in the file, throws vitk::Error naming the file and the tensor.
  Tensor read_f32(const std::string& name) const;

  // Header limit, as in the reference implementation: a larger value is a corrupt file, not a
  // large model.
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

 private:
  std::string path_;
  uint64_t data_start_ = 0;  // 8 + header length
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Bytes per element of a safetensors dtype name, 0 if the name is not one of the format's.
size_t safetensors_dtype_size(const std::string& dtype);

// IEEE 754 half precision -> single, exactly (subnormals, infinities and NaN included).
float f16_to_f32(uint16_t h);

}  // namespace vitk::io
