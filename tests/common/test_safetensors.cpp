// Strict JSON reading (common/io/json.h over nlohmann/json) and the safetensors reader: values of
// each dtype, and every way a file can be broken or lie about itself ending in one vitk::Error that
// names the file and tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "common/error.h"
#include "common/io/json.h"
#include "common/io/safetensors.h"
#include "util/safetensors_writer.h"
#include "util/test_util.h"

namespace {

namespace fs = std::filesystem;
using vitk::Error;
using vitk::io::as_array;
using vitk::io::as_bool;
using vitk::io::as_double;
using vitk::io::as_object;
using vitk::io::as_string;
using vitk::io::as_uint;
using vitk::io::Json;
using vitk::io::json_kind;
using vitk::io::member;
using vitk::io::parse_json;
using vitk::io::SafetensorsFile;

// ---- JSON ----

TEST(Json, ParsesEveryKindOfValue) {
  Json v = parse_json(
      " {\"a\": [1, -2.5e3, 0, true, false, null], \"s\": \"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9"
      "\\ud83d\\ude00\", \"o\": {}} ",
      "t");
  const Json& a = as_array(*member(v, "a"), "a");
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(as_uint(a[0], "a0"), 1u);
  EXPECT_DOUBLE_EQ(as_double(a[1], "a1"), -2500.0);
  EXPECT_TRUE(as_bool(a[3], "a3"));
  EXPECT_FALSE(as_bool(a[4], "a4"));
  EXPECT_STREQ(json_kind(a[5]), "null");
  EXPECT_EQ(as_string(*member(v, "s"), "s"), "x\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_TRUE(as_object(*member(v, "o"), "o").empty());
  EXPECT_EQ(member(v, "missing"), nullptr);
  // Each typed access names what it read and what it found instead.
  EXPECT_EQ(vitk::test::error_of([&] { as_string(a[0], "t: a[0]"); }),
            "t: a[0]: expected a string, got a number");
  EXPECT_EQ(vitk::test::error_of([&] { member(a, "k"); }),
            "JSON member 'k': expected an object, got an array");
}

TEST(Json, LargeIntegersAreExact) {
  EXPECT_EQ(as_uint(parse_json("18446744073709551615", "t"), "n"), 18446744073709551615ull);
  EXPECT_THROW(as_uint(parse_json("18446744073709551616", "t"), "n"), Error);
  EXPECT_THROW(as_uint(parse_json("1.0", "t"), "n"), Error);
  EXPECT_THROW(as_uint(parse_json("-1", "t"), "n"), Error);
  EXPECT_THROW(as_uint(parse_json("\"1\"", "t"), "n"), Error);
  EXPECT_NE(vitk::test::error_of([&] {
              as_uint(parse_json("-1", "t"), "n");
            }).find("n: expected a non-negative integer"),
            std::string::npos);
}

TEST(Json, RejectsWhatIsNotStrictJson) {
  const char* bad[] = {
      "",
      "{",
      "{\"a\":1,}",
      "[1,]",
      "{\"a\" 1}",
      "{a:1}",
      "'x'",
      "01",
      "1.",
      ".5",
      "1e",
      "+1",
      "NaN",
      "Infinity",
      "tru",
      "nul",
      "[1] [2]",
      "{\"a\":1,\"a\":2}",
      "\"\\x\"",
      "\"\\u12\"",
      "\"\\ud800\"",
      "\"\\udc00\"",
      "\"a\nb\"",
      "\"\xff\"",
      "\"\xc0\xaf\"",
      "\"\xed\xa0\x80\"",
      "/*c*/1",
      "\"abc",
      "[1 2]",
      "{\"a\":1 \"b\":2}",
  };
  for (const char* text : bad) EXPECT_THROW(parse_json(text, "t"), Error) << text;
  std::string deep(200, '[');
  deep += std::string(200, ']');
  EXPECT_THROW(parse_json(deep, "t"), Error);
}

TEST(Json, ErrorsSayWhereAndWhat) {
  const std::string duplicate =
      vitk::test::error_of([] { parse_json("{\"a\": 1, \"a\": 2}", "h.json"); });
  EXPECT_NE(duplicate.find("h.json"), std::string::npos) << duplicate;
  EXPECT_NE(duplicate.find("duplicate key \"a\""), std::string::npos) << duplicate;
  // Only in the object where it is repeated: the same key in two objects is fine.
  EXPECT_NO_THROW(parse_json("{\"a\": {\"a\": 1}, \"b\": {\"a\": 2}}", "t"));
  const std::string syntax = vitk::test::error_of([] { parse_json("{\n  \"a\": }", "h.json"); });
  EXPECT_EQ(syntax.rfind("h.json: JSON error at byte 10 (line 2, column 8): syntax error", 0), 0u)
      << syntax;
  const std::string deep =
      vitk::test::error_of([] { parse_json(std::string(129, '['), "d.json"); });
  EXPECT_EQ(deep, "d.json: JSON error: nested deeper than 128 levels");
}

// ---- safetensors ----

class Safetensors : public ::testing::Test {
 protected:
  std::string write(const std::string& bytes, const std::string& name = "m.safetensors") {
    std::string path = (dir_ / name).string();
    vitk::test::write_file(path, bytes);
    return path;
  }
  // A raw file: header text and `data_size` bytes of data.
  std::string raw(const std::string& header, size_t data_size) {
    return write(vitk::test::safetensors_bytes(header, std::string(data_size, '\0')));
  }
  // Opening throws an error whose message holds every one of `parts`.
  void expect_error(const std::string& path, std::initializer_list<std::string> parts) {
    try {
      SafetensorsFile f(path);
      ADD_FAILURE() << "no error for " << path;
    } catch (const Error& e) {
      std::string msg = e.what();
      for (const std::string& p : parts)
        EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  }
  vitk::test::TempDir temp_{"vitk_st"};
  fs::path dir_ = temp_.path();
};

vitk::Tensor values(vitk::Shape shape, float start) {
  vitk::Tensor t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = start + 0.25f * static_cast<float>(i);
  return t;
}

TEST_F(Safetensors, ReadsF32F16Bf16) {
  for (const char* dtype : {"F32", "F16", "BF16"}) {
    std::string path = write(vitk::test::safetensors_from({{"a.weight", values({2, 3}, -1.f)},
                                                           {"b", values({4}, 3.f)},
                                                           {"empty", vitk::Tensor({0, 5})}},
                                                          dtype));
    SafetensorsFile f(path);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    ASSERT_EQ(f.entries().size(), 3u);
    EXPECT_EQ(f.find("a.weight")->dtype, dtype);
    EXPECT_EQ(f.find("a.weight")->shape, (vitk::Shape{2, 3}));
    // Quarter steps from small integers are exact in every one of these types.
    vitk::Tensor a = f.read_f32("a.weight");
    for (int i = 0; i < 6; ++i) EXPECT_EQ(a.f32()[i], -1.f + 0.25f * static_cast<float>(i));
    vitk::Tensor b = f.read_f32("b");
    EXPECT_EQ(b.f32()[3], 3.75f);
    EXPECT_EQ(f.read_f32("empty").shape(), (vitk::Shape{0, 5}));
    EXPECT_THROW(f.read_f32("nope"), Error);
  }
}

TEST(F16, ConvertsEveryClassOfValue) {
  EXPECT_EQ(vitk::io::f16_to_f32(0x3C00), 1.f);
  EXPECT_EQ(vitk::io::f16_to_f32(0xC000), -2.f);
  EXPECT_EQ(vitk::io::f16_to_f32(0x7BFF), 65504.f);
  EXPECT_EQ(vitk::io::f16_to_f32(0x0001), std::ldexp(1.f, -24));  // smallest subnormal
  EXPECT_EQ(vitk::io::f16_to_f32(0x03FF), std::ldexp(1023.f, -24));
  EXPECT_EQ(vitk::io::f16_to_f32(0x0400), std::ldexp(1.f, -14));  // smallest normal
  EXPECT_TRUE(std::signbit(vitk::io::f16_to_f32(0x8000)));
  EXPECT_EQ(vitk::io::f16_to_f32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(vitk::io::f16_to_f32(0x7E00)));
}

TEST_F(Safetensors, ReadsTheTinyFixtures) {
  const std::string dir = std::string(VITK_SOURCE_DIR) + "/tests/fixtures/import/";
  SafetensorsFile tv(dir + "tiny_torchvision_f32.safetensors");
  SafetensorsFile timm(dir + "tiny_timm_bf16.safetensors");
  SafetensorsFile hf(dir + "tiny_hf_f16.safetensors");
  EXPECT_EQ(tv.find("encoder.layers.encoder_layer_1.self_attention.in_proj_weight")->shape,
            (vitk::Shape{96, 32}));
  EXPECT_EQ(timm.find("blocks.1.attn.qkv.weight")->dtype, "BF16");
  EXPECT_EQ(hf.find("vit.encoder.layer.0.attention.attention.key.bias")->dtype, "F16");
  // The BF16 file holds the F32 values rounded: within 2^-8 relative.
  vitk::Tensor a = tv.read_f32("conv_proj.weight");
  vitk::Tensor b = timm.read_f32("patch_embed.proj.weight");
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    EXPECT_NEAR(a.f32()[i], b.f32()[i], std::abs(a.f32()[i]) / 256 + 1e-30);
}

TEST_F(Safetensors, RejectsBrokenFiles) {
  const std::string ok = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(SafetensorsFile(raw(ok, 8)));

  expect_error(write("abc"), {"m.safetensors", "shorter than the 8-byte"});
  expect_error(write(vitk::test::safetensors_bytes("", "")), {"header length 0"});
  std::string huge(8, '\xff');
  expect_error(write(huge + "{}"), {"header length"});
  // Header length beyond the end of the file.
  std::string lying = vitk::test::safetensors_bytes(ok, std::string(8, '\0'));
  lying[0] = static_cast<char>(200);
  expect_error(write(lying), {"truncated", "header needs 200 bytes"});
  expect_error(raw("[1, 2]", 0), {"does not start with '{'"});
  expect_error(raw("{\"t\": }", 0), {"m.safetensors", "JSON error at byte"});
  expect_error(raw(R"({"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8),
               {"tensor 't'", "unknown dtype 'F33'"});
  expect_error(raw(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
               {"tensor 't'", "needs 12 bytes", "hold 8"});
  expect_error(raw(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
               {"tensor 't'", "non-negative integer"});
  expect_error(raw(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8),
               {"tensor 't'"});
  expect_error(raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
               {"tensor 't'", "end before they begin"});
  expect_error(raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
               {"tensor 't'", "[begin, end]"});
  expect_error(raw(R"({"t":{"dtype":"F32","shape":[2]}})", 8), {"tensor 't'", "data_offsets"});
  expect_error(raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8),
               {"tensor 't'", "unknown field 'x'"});
  expect_error(raw(R"({"t":[1]})", 8), {"tensor 't'", "expected an object"});
  expect_error(raw(R"({"__metadata__":{"k":1}})", 0), {"__metadata__ 'k'", "a string"});
  // A shape whose byte count overflows 64 bits.
  expect_error(
      raw(R"({"t":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
      {"tensor 't'", "too large"});
}

TEST_F(Safetensors, RejectsOffsetsThatLie) {
  // Truncated: the header promises more data than the file holds.
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                   20),
               {"m.safetensors", "tensor 'b'", "end at byte 24", "only 20", "truncated"});
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                   12),
               {"'a' and 'b' overlap"});
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
                   20),
               {"bytes 8..12", "belong to no tensor", "'b'"});
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12),
               {"4 bytes after the last tensor"});
  expect_error(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                   16),
               {"duplicate key \"a\""});
}

TEST_F(Safetensors, ReadsOnlyFloatingPointTensors) {
  std::string path = raw(R"({"i":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8);
  SafetensorsFile f(path);
  try {
    f.read_f32("i");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'i': dtype I64"), std::string::npos) << e.what();
  }
}

TEST_F(Safetensors, FileShrunkAfterOpening) {
  std::string path = write(vitk::test::safetensors_from({{"a", values({16}, 0.f)}}));
  SafetensorsFile f(path);
  fs::resize_file(path, fs::file_size(path) - 8);
  EXPECT_THROW(f.read_f32("a"), Error);
}

TEST_F(Safetensors, MissingFileAndDirectory) {
  expect_error((dir_ / "absent.safetensors").string(), {"cannot open", "absent.safetensors"});
  expect_error(dir_.string(), {"is a directory"});
}

}  // namespace
