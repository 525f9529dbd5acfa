#pragma once
// Writing .safetensors files in tests: well-formed ones from named f32 tensors, and raw ones from
// a header text and data bytes (to build broken files on purpose).
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "common/tensor.h"

namespace vitk::test {

// [8-byte little-endian length][header][data]
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

struct NamedTensor {
  std::string name;
  Tensor value;  // f32
};

inline std::string shape_json(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// F32, or "F16" / "BF16" (values rounded to nearest even; F16 only for values in its range).
inline std::string safetensors_from(const std::vector<NamedTensor>& tensors,
                                    const std::string& dtype = "F32") {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::string data;
  for (const NamedTensor& t : tensors) {
    const float* v = t.value.f32();
    const size_t n = static_cast<size_t>(t.value.numel());
    std::string raw;
    if (dtype == "F32") {
      raw.assign(reinterpret_cast<const char*>(v), n * 4);
    } else {
      raw.resize(n * 2);
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        if (dtype == "BF16") {
          h = f32_to_bf16(v[i]);
        } else {  // F16 of a normal value, round to nearest even
          uint32_t b;
          std::memcpy(&b, &v[i], 4);
          const uint32_t sign = (b >> 16) & 0x8000u;
          const int32_t exp = static_cast<int32_t>((b >> 23) & 0xFF) - 127 + 15;
          uint32_t mant = b & 0x7FFFFFu;
          if (exp <= 0 || exp >= 31 || (b & 0x7FFFFFFFu) == 0) {
            h = static_cast<uint16_t>(sign);  // zero (tests use normal values)
          } else {
            uint32_t m = mant >> 13, rest = mant & 0x1FFFu;
            uint32_t hv = (static_cast<uint32_t>(exp) << 10) | m;
            if (rest > 0x1000u || (rest == 0x1000u && (m & 1))) ++hv;
            h = static_cast<uint16_t>(sign | hv);
          }
        }
        std::memcpy(&raw[i * 2], &h, 2);
      }
    }
    header += ",\"" + t.name + "\":{\"dtype\":\"" + dtype +
              "\",\"shape\":" + shape_json(t.value.shape()) + ",\"data_offsets\":[" +
              std::to_string(data.size()) + "," + std::to_string(data.size() + raw.size()) + "]}";
    data += raw;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  return safetensors_bytes(header, data);
}

}  // namespace vitk::test
