// The row scales of int8 weights (common/ops quantized weights, common/io/checkpoint.h): a zero
// scale is what quantize_weight gives an all-zero row, stored as an all-zero row, and is taken
// only so; a zero scale over a row that holds values (scales zeroed by damage or by hand) is
// refused naming the tensor, and so is a file marked quantization=int8 that holds no int8 matrix.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/io/checkpoint.h"
#include "common/ops/ops.h"
#include "common/params.h"
#include "util/test_util.h"

namespace {

using vitk::Tensor;
using vitk::test::contains;
using vitk::test::error_of;
using vitk::test::TempDir;

// fc.weight [3, 4]: row 0 all zero, row 1 of denormals too small for any int8 step (max / 127
// is 0 in f32), row 2 ordinary; and fc.bias [3].
struct Layer {
  vitk::ParamStore store;
  vitk::Parameter& weight = store.add("fc.weight", {3, 4});
  vitk::Parameter& bias = store.add("fc.bias", {3}, false);
  explicit Layer(bool gradients = true) {
    store.finalize(gradients);
    float* w = weight.value.f32();
    for (int64_t i = 0; i < 4; ++i) {
      w[i] = 0.f;
      w[4 + i] = (i % 2 ? -1.f : 1.f) * 1e-44f;
      w[8 + i] = 0.25f * static_cast<float>(i + 1);
    }
    for (int64_t i = 0; i < 3; ++i) bias.value.f32()[i] = static_cast<float>(i);
    store.mark_changed();
  }
  void quantize() {
    weight.quantized = std::make_shared<vitk::ops::QuantizedWeight>(
        vitk::ops::quantize_weight(weight.value.clone()));
    vitk::release_value(weight);
  }
};

// Every value of the f32 dataset `name` of the file at `path` set to 0, as h5py's
// f[name][...] = 0 would.
void zero_dataset(const std::string& path, const std::string& name) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  const hid_t ds = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  ASSERT_GE(ds, 0) << name;
  const hid_t space = H5Dget_space(ds);
  std::vector<float> zeros(static_cast<size_t>(H5Sget_simple_extent_npoints(space)), 0.f);
  EXPECT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data()), 0);
  H5Sclose(space), H5Dclose(ds), H5Fclose(file);
}

// The root attribute `name` = `value` (a fixed-length string, as h5py writes a str), added to the
// file at `path`.
void set_root_attr(const std::string& path, const std::string& name, const std::string& value) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  if (H5Aexists(file, name.c_str()) > 0) H5Adelete(file, name.c_str());
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size());
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(H5Awrite(attr, type, value.data()), 0);
  H5Aclose(attr), H5Sclose(space), H5Tclose(type), H5Fclose(file);
}

TEST(Int8Scales, AZeroScaleIsTakenOnlyOverAnAllZeroRow) {
  Tensor q({2, 3}, vitk::DType::s8), scales({2});
  const int8_t values[] = {0, 0, 0, 5, -7, 0};
  std::copy(values, values + 6, q.s8());
  scales.f32()[0] = 0.f;  // over zeros: what quantize_weight writes for an all-zero row
  scales.f32()[1] = 0.5f;
  const vitk::ops::QuantizedWeight ok = vitk::ops::quantized_weight(q.clone(), scales.clone());
  EXPECT_EQ(ok.sums.i32()[1], -2);

  scales.f32()[1] = 0.f;  // over 5, -7, 0: the row would read as zeros
  const std::string e = error_of([&] { vitk::ops::quantized_weight(q.clone(), scales.clone()); });
  EXPECT_TRUE(contains(e, "scale 1 is 0 but row 1 is not all zero (q[1, 0] = 5)")) << e;
}

// quantize_weight gives both an all-zero row and a row of denormals scale 0 over zeros, so that
// what vitk quantize writes always loads; the ordinary row keeps its scale.
TEST(Int8Scales, ZeroAndDenormalRowsQuantiseToZerosThatLoad) {
  Layer layer;
  const vitk::ops::QuantizedWeight w = vitk::ops::quantize_weight(layer.weight.value.clone());
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(w.scales.f32()[r], 0.f) << r;
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(w.values.s8()[r * 4 + i], 0) << r << ", " << i;
  }
  EXPECT_FLOAT_EQ(w.scales.f32()[2], 1.f / 127.f);
  EXPECT_EQ(w.values.s8()[11], 127);

  const TempDir dir("vitk_int8_scales");
  const std::string path = (dir.path() / "q.h5").string();
  layer.quantize();
  vitk::io::save_checkpoint(path, layer.store, {});
  Layer loaded(/*gradients=*/false);
  vitk::io::load_checkpoint(path, loaded.store, nullptr, /*int8=*/true);
  ASSERT_TRUE(loaded.weight.quantized);
  EXPECT_EQ(loaded.weight.quantized->scales.f32()[0], 0.f);
}

// A head's scales zeroed in the file (h5py: f["fc.weight_scale"][...] = 0): refused at load,
// naming the file and the tensor, the model untouched.
TEST(Int8Scales, ZeroedScalesInAFileAreRefusedNamingTheTensor) {
  const TempDir dir("vitk_int8_scales");
  const std::string path = (dir.path() / "zeroed.h5").string();
  Layer saved;
  saved.quantize();
  vitk::io::save_checkpoint(path, saved.store, {});
  zero_dataset(path, "fc.weight_scale");
  Layer loaded(false);
  const std::string e =
      error_of([&] { vitk::io::load_checkpoint(path, loaded.store, nullptr, true); });
  EXPECT_TRUE(contains(e, path) && contains(e, "int8 tensor 'fc.weight'") &&
              contains(e, "scale 2 is 0 but row 2 is not all zero"))
      << e;
  EXPECT_FALSE(loaded.weight.value_released) << "a failed load changed the model";
}

// quantization=int8 on a file of f32 tensors only: it would run at f32 under an int8 name.
TEST(Int8Scales, AFileMarkedInt8WithoutAnInt8MatrixIsRefusedNamingTheFile) {
  const TempDir dir("vitk_int8_scales");
  const std::string path = (dir.path() / "marked.h5").string();
  Layer saved;
  vitk::io::save_checkpoint(path, saved.store, {});
  set_root_attr(path, "quantization", "int8");
  ASSERT_EQ(vitk::io::read_checkpoint_meta(path).quantization, "int8");
  Layer loaded(false);
  const std::string e =
      error_of([&] { vitk::io::load_checkpoint(path, loaded.store, nullptr, true); });
  EXPECT_TRUE(contains(e, path + ": is marked quantization='int8' but holds no int8 matrix")) << e;
}

}  // namespace
