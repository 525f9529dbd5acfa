// int8 checkpoints in-process (common/io/checkpoint.h): the int8 tensors, their row scales and
// sums round-trip and load only to run; damaged ones are refused naming the tensor, a load that
// fails leaves the model as it was, and a packed int8 form is not written. (`vitk quantize`, which
// writes them: tools/test_quantize.cpp.)
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/ops/ops.h"
#include "common/params.h"
#include "util/test_util.h"

namespace {

using vitk::Parameter;
using vitk::ParamStore;
using vitk::Shape;
using vitk::Tensor;
using vitk::test::contains;
using vitk::test::error_of;
using vitk::test::TempDir;

// A store of one linear layer, fc.weight [4, 3] and fc.bias [4], with distinct values.
struct Layer {
  ParamStore store;
  Parameter& weight = store.add("fc.weight", {4, 3});
  Parameter& bias = store.add("fc.bias", {4}, false);
  explicit Layer(bool gradients = true) {
    store.finalize(gradients);
    for (int64_t i = 0; i < 12; ++i) weight.value.f32()[i] = 0.1f * static_cast<float>(i - 5);
    for (int64_t i = 0; i < 4; ++i) bias.value.f32()[i] = static_cast<float>(i);
    store.mark_changed();
  }
  // fc.weight as `vitk quantize` leaves it: its int8 form, its f32 value released.
  void quantize() {
    weight.quantized = std::make_shared<vitk::ops::QuantizedWeight>(
        vitk::ops::quantize_weight(weight.value.clone()));
    vitk::release_value(weight);
  }
};

TEST(QuantizedCheckpoint, Int8TensorsRoundTripAndLoadOnlyToRun) {
  const TempDir dir("vitk_quantized");
  const std::string path = (dir.path() / "q.h5").string();
  Layer saved;
  saved.quantize();
  vitk::io::CheckpointMeta meta;
  meta.config["d"] = "3";
  vitk::io::save_checkpoint(path, saved.store, meta);
  EXPECT_EQ(vitk::io::read_checkpoint_meta(path).quantization, "int8");
  const auto listed = vitk::io::list_checkpoint(path);
  ASSERT_EQ(listed.size(), 3u);  // fc.bias, fc.weight, fc.weight_scale
  EXPECT_EQ(listed[2].first, "fc.weight_scale");
  EXPECT_EQ(listed[2].second, Shape{4});

  Layer loaded(/*gradients=*/false);
  vitk::io::load_checkpoint(path, loaded.store, nullptr, /*int8=*/true);
  ASSERT_TRUE(loaded.weight.value_released && loaded.weight.quantized);
  const vitk::ops::QuantizedWeight &a = *saved.weight.quantized, &b = *loaded.weight.quantized;
  EXPECT_EQ(std::vector<int8_t>(a.values.s8(), a.values.s8() + 12),
            std::vector<int8_t>(b.values.s8(), b.values.s8() + 12));
  EXPECT_EQ(std::vector<float>(a.scales.f32(), a.scales.f32() + 4),
            std::vector<float>(b.scales.f32(), b.scales.f32() + 4));
  EXPECT_EQ(std::vector<int32_t>(a.sums.i32(), a.sums.i32() + 4),
            std::vector<int32_t>(b.sums.i32(), b.sums.i32() + 4));
  EXPECT_FALSE(loaded.bias.value_released);
  EXPECT_EQ(loaded.bias.value.f32()[3], 3.f);

  // Training, averaging and fine-tuning load without int8: refused, naming the file and the way.
  Layer trainable;
  const std::string e = error_of([&] { vitk::io::load_checkpoint(path, trainable.store); });
  EXPECT_TRUE(contains(e, path) && contains(e, "quantised to int8") &&
              contains(e, "vitk quantize") && contains(e, "f32 checkpoint"))
      << e;
}

TEST(QuantizedCheckpoint, DamagedInt8TensorsAreRefusedNamingThem) {
  const TempDir dir("vitk_quantized");
  struct Case {
    const char* name;
    std::function<void(vitk::ops::QuantizedWeight&)> damage;
    const char* said;
  };
  const std::vector<Case> cases = {
      {"nan_scale", [](auto& q) { q.scales.f32()[1] = std::nanf(""); }, "scale 1 is nan"},
      {"negative_scale", [](auto& q) { q.scales.f32()[2] = -1.f; }, "scale 2 is -1"},
      {"minus_128", [](auto& q) { q.values.s8()[5] = -128; }, "q[1, 2] is -128"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = (dir.path() / (std::string(c.name) + ".h5")).string();
    Layer saved;
    saved.quantize();
    c.damage(*saved.weight.quantized);
    vitk::io::save_checkpoint(path, saved.store, {});
    Layer loaded(false);
    const std::string e =
        error_of([&] { vitk::io::load_checkpoint(path, loaded.store, nullptr, true); });
    EXPECT_TRUE(contains(e, path) && contains(e, "fc.weight") && contains(e, c.said)) << e;
    EXPECT_FALSE(loaded.weight.value_released) << "a failed load changed the model";
  }
  // The scales of an int8 tensor deleted, as h5py's `del f["fc.weight_scale"]` would.
  {
    const std::string path = (dir.path() / "no_scale.h5").string();
    Layer saved;
    saved.quantize();
    vitk::io::save_checkpoint(path, saved.store, {});
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    EXPECT_GE(H5Ldelete(file, "fc.weight_scale", H5P_DEFAULT), 0);
    H5Fclose(file);
    Layer loaded(false);
    const std::string e =
        error_of([&] { vitk::io::load_checkpoint(path, loaded.store, nullptr, true); });
    EXPECT_TRUE(contains(e, "int8 tensor 'fc.weight' has no dataset 'fc.weight_scale'")) << e;
  }
  // A packed int8 form is oneDNN's layout for one CPU: not written.
  Layer packed;
  packed.quantize();
  Tensor x({2, 3}), y({2, 4});
  vitk::ops::linear_forward_int8(x, *packed.weight.quantized, Tensor(), y);
  const std::string e = error_of(
      [&] { vitk::io::save_checkpoint((dir.path() / "packed.h5").string(), packed.store, {}); });
  EXPECT_TRUE(contains(e, "fc.weight") && contains(e, "packed")) << e;
}

}  // namespace
