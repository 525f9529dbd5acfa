// The safetensors reader: header validation up front, then one read per tensor.
#include "common/io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "common/error.h"
#include "common/io/input_file.h"
#include "common/io/json.h"
#include "common/quoted_name.h"

namespace vitk::io {

namespace {

static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559,
              "safetensors data is IEEE 754");

bool host_is_little_endian() {
  const uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

std::string in_quotes(const std::string& s) {
  return quoted_name(s);
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {  // infinity or NaN (payload kept)
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // ±0
    bits = sign;
  } else {  // subnormal: shift the mantissa up until it is normal
    exponent = 127 - 15 + 1;
    while (!(mantissa & 0x400u)) mantissa <<= 1, --exponent;
    bits = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  const std::string& p = path_;
  if (!host_is_little_endian())
    throw Error(p + ": reading safetensors needs a little-endian machine");
  std::error_code ec;
  std::ifstream in = open_input_file(p, "a safetensors file");
  const uint64_t file_size = std::filesystem::file_size(p, ec);
  if (ec) throw Error("cannot read the size of " + p + ": " + ec.message());
  if (file_size < 8)
    throw Error(p + ": not a safetensors file: " + std::to_string(file_size) +
                " bytes, shorter than the 8-byte header length");

  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  if (!in) throw Error(p + ": cannot read the header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len < 2 || header_len > kMaxHeaderBytes)
    throw Error(p + ": not a safetensors file: header length " + std::to_string(header_len) +
                " is outside 2.." + std::to_string(kMaxHeaderBytes) + " bytes");
  if (header_len > file_size - 8)
    throw Error(p + ": truncated: the header needs " + std::to_string(header_len) +
                " bytes but the file has only " + std::to_string(file_size - 8) +
                " after the length");
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  if (!in) throw Error(p + ": cannot read the " + std::to_string(header_len) + "-byte header");
  if (header[0] != '{')
    throw Error(p + ": not a safetensors file: the header does not start with '{'");
  data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - data_start_;

  const Json root = parse_json(header, p + " (safetensors header)");
  for (const auto& [name, value] : as_object(root, p + ": the header").items()) {
    const std::string where = p + ": tensor " + in_quotes(name);
    if (name == "__metadata__") {
      for (const auto& [key, text] : as_object(value, p + ": __metadata__").items())
        metadata_[key] = as_string(text, p + ": __metadata__ " + in_quotes(key));
      continue;
    }
    SafetensorsEntry e;
    e.name = name;
    for (const auto& field : as_object(value, where).items()) {
      const std::string& key = field.key();
      if (key != "dtype" && key != "shape" && key != "data_offsets")
        throw Error(where + ": unknown field " + in_quotes(key));
    }
    const Json* dtype = member(value, "dtype");
    const Json* shape = member(value, "shape");
    const Json* offsets = member(value, "data_offsets");
    if (!dtype || !shape || !offsets)
      throw Error(where + ": needs \"dtype\", \"shape\" and \"data_offsets\"");
    e.dtype = as_string(*dtype, where + " dtype");
    const size_t element = safetensors_dtype_size(e.dtype);
    if (element == 0) throw Error(where + ": unknown dtype " + in_quotes(e.dtype));
    // The byte count, checked for overflow as it grows: a hostile shape must not wrap around.
    uint64_t bytes = element;
    for (const Json& d : as_array(*shape, where + " shape")) {
      uint64_t n = as_uint(d, where + " shape");
      if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (n != 0 && bytes > std::numeric_limits<uint64_t>::max() / n))
        throw Error(where + ": shape is too large");
      bytes *= n;
      e.shape.push_back(static_cast<int64_t>(n));
    }
    const Json& range = as_array(*offsets, where + " data_offsets");
    if (range.size() != 2) throw Error(where + ": data_offsets must be [begin, end]");
    e.begin = as_uint(range[0], where + " data_offsets");
    e.end = as_uint(range[1], where + " data_offsets");
    if (e.end < e.begin)
      throw Error(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                  std::to_string(e.end) + "] end before they begin");
    if (e.end - e.begin != bytes)
      throw Error(where + ": " + e.dtype + " " + shape_str(e.shape) + " needs " +
                  std::to_string(bytes) + " bytes but data_offsets [" + std::to_string(e.begin) +
                  ", " + std::to_string(e.end) + "] hold " + std::to_string(e.end - e.begin));
    if (e.end > data_size)
      throw Error(where + ": data_offsets end at byte " + std::to_string(e.end) +
                  " of the data, but the file holds only " + std::to_string(data_size) +
                  " bytes of data (truncated?)");
    entries_.push_back(std::move(e));
  }

  // The byte ranges must tile the data exactly: no overlap, no hole, nothing after the last.
  std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : entries_) {
    if (e.begin < covered)
      throw Error(p + ": tensors " + in_quotes(previous->name) + " and " + in_quotes(e.name) +
                  " overlap (data_offsets " + std::to_string(e.begin) + " < " +
                  std::to_string(covered) + ")");
    if (e.begin > covered)
      throw Error(p + ": bytes " + std::to_string(covered) + ".." + std::to_string(e.begin) +
                  " of the data belong to no tensor (before " + in_quotes(e.name) + ")");
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size)
    throw Error(p + ": " + std::to_string(data_size - covered) +
                " bytes after the last tensor's data belong to no tensor");
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Tensor SafetensorsFile::read_f32(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  const std::string where = path_ + ": tensor " + in_quotes(name);
  if (!e) throw Error(where + " is not in the file");
  if (e->dtype != "F32" && e->dtype != "F16" && e->dtype != "BF16" && e->dtype != "F64")
    throw Error(where + ": dtype " + e->dtype +
                " is not a floating-point type vitk reads (F32, F16, BF16, F64)");
  Tensor out(e->shape, DType::f32);
  const size_t n = static_cast<size_t>(out.numel());
  if (n == 0) return out;
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw Error("cannot open " + path_ + ": " + std::strerror(errno));
  in.seekg(static_cast<std::streamoff>(data_start_ + e->begin));
  const size_t bytes = static_cast<size_t>(e->end - e->begin);
  auto read = [&](void* dst) {
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
    if (!in || static_cast<size_t>(in.gcount()) != bytes)
      throw Error(where + ": cannot read its " + std::to_string(bytes) +
                  " bytes (file truncated or changed since it was opened?)");
  };
  float* dst = out.f32();
  if (e->dtype == "F32") {
    read(dst);
  } else if (e->dtype == "F64") {
    std::vector<double> raw(n);
    read(raw.data());
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(raw[i]);
  } else {
    std::vector<uint16_t> raw(n);
    read(raw.data());
    if (e->dtype == "BF16")
      bf16_to_f32(raw.data(), dst, n);
    else
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(raw[i]);
  }
  return out;
}

}  // namespace vitk::io
