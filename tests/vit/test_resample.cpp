// Position-embedding resampling against F.interpolate(mode="bicubic") (tests/fixtures/import/
// resample.h5, written by tests/parity/make_import_fixtures.py, computed in float64 from float32
// inputs), and its properties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "util/fixture_io.h"
#include "vit/resample.h"

namespace {

using vitk::Tensor;

const std::string kFixture = std::string(VITK_SOURCE_DIR) + "/tests/fixtures/import/resample.h5";

TEST(Resample, MatchesPyTorchBicubic) {
  vitk::test::FixtureFile f(kFixture);
  const auto cases = f.names("/");
  ASSERT_EQ(cases.size(), 16u);
  int align_cases = 0;
  for (const std::string& name : cases) {
    Tensor input = f.read_f32(name + "/input");
    Tensor want = f.read_f32(name + "/output");
    Tensor grid = f.read_i32(name + "/grid");  // src_h, src_w, dst_h, dst_w, align_corners
    ASSERT_EQ(grid.numel(), 5) << name;
    const int32_t* g = grid.i32();
    const int64_t sh = g[0], sw = g[1], dh = g[2], dw = g[3];
    const bool align = g[4] != 0;
    align_cases += align;
    Tensor got = vitk::vit::resample_pos_embed(input, sh, sw, dh, dw, align);
    ASSERT_EQ(got.shape(), want.shape()) << name;
    double max_err = 0;
    for (int64_t i = 0; i < got.numel(); ++i)
      max_err = std::max(max_err, static_cast<double>(std::abs(got.f32()[i] - want.f32()[i])));
    EXPECT_LT(max_err, 1e-6) << name << ": " << sh << "x" << sw << " -> " << dh << "x" << dw
                             << " align_corners " << align;
    // The two modes differ by far more than the tolerance, so the fixture tells them apart.
    if (sh * sw > 1 && (sh != dh || sw != dw)) {
      Tensor other = vitk::vit::resample_pos_embed(input, sh, sw, dh, dw, !align);
      double diff = 0;
      for (int64_t i = 0; i < other.numel(); ++i)
        diff = std::max(diff, static_cast<double>(std::abs(other.f32()[i] - want.f32()[i])));
      EXPECT_GT(diff, 1e-2) << name;
    }
    // The class token's row is copied bit for bit.
    for (int64_t c = 0; c < input.dim(2); ++c) EXPECT_EQ(got.f32()[c], input.f32()[c]) << name;
  }
  EXPECT_EQ(align_cases, 8);
}

// The same cases resampled bilinearly, as the ViT paper's code does (resample_bilinear.h5, the
// same script), and against a direct reading of PyTorch's rule: the source coordinate clamped at
// 0, its two neighbours, the right one stopping at the border.
float bilinear_reference(const Tensor& pos, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                         bool align, int64_t y, int64_t x, int64_t c) {
  auto source = [align](int64_t o, int64_t in, int64_t out) {
    if (align) return out > 1 ? static_cast<double>(o) * (in - 1) / (out - 1) : 0.0;
    return std::max(0.0, (static_cast<double>(o) + 0.5) * in / out - 0.5);
  };
  const double ry = source(y, sh, dh), rx = source(x, sw, dw);
  const int64_t y0 = static_cast<int64_t>(ry), x0 = static_cast<int64_t>(rx);
  const int64_t y1 = y0 + (y0 < sh - 1), x1 = x0 + (x0 < sw - 1);
  const double ty = ry - y0, tx = rx - x0;
  auto at = [&](int64_t yy, int64_t xx) {
    return static_cast<double>(pos.f32()[(1 + yy * sw + xx) * pos.dim(2) + c]);
  };
  return static_cast<float>((1 - ty) * ((1 - tx) * at(y0, x0) + tx * at(y0, x1)) +
                            ty * ((1 - tx) * at(y1, x0) + tx * at(y1, x1)));
}

TEST(Resample, BilinearMatchesPyTorchAndTheReferenceRule) {
  vitk::test::FixtureFile f(std::string(VITK_SOURCE_DIR) +
                            "/tests/fixtures/import/resample_bilinear.h5");
  const auto cases = f.names("/");
  ASSERT_EQ(cases.size(), 16u);
  for (const std::string& name : cases) {
    Tensor input = f.read_f32(name + "/input");
    Tensor want = f.read_f32(name + "/output");
    const Tensor grid = f.read_i32(name + "/grid");
    const int32_t* g = grid.i32();
    const int64_t sh = g[0], sw = g[1], dh = g[2], dw = g[3];
    const bool align = g[4] != 0;
    Tensor got = vitk::vit::resample_pos_embed(input, sh, sw, dh, dw, align, 1,
                                               vitk::vit::PosInterpolation::bilinear);
    ASSERT_EQ(got.shape(), want.shape()) << name;
    const int64_t d = input.dim(2);
    for (int64_t c = 0; c < d; ++c) EXPECT_EQ(got.f32()[c], input.f32()[c]) << name;
    for (int64_t y = 0; y < dh; ++y)
      for (int64_t x = 0; x < dw; ++x)
        for (int64_t c = 0; c < d; ++c) {
          const float v = got.f32()[(1 + y * dw + x) * d + c];
          ASSERT_NEAR(v, want.f32()[(1 + y * dw + x) * d + c], 1e-6)
              << name << " " << y << "," << x;
          ASSERT_NEAR(v, bilinear_reference(input, sh, sw, dh, dw, align, y, x, c), 1e-6)
              << name << " " << y << "," << x;
        }
    // Upsampling a grid of more than one position: bilinear is not bicubic.
    if (sh * sw > 1 && dh * dw > sh * sw) {
      Tensor cubic = vitk::vit::resample_pos_embed(input, sh, sw, dh, dw, align);
      double diff = 0;
      for (int64_t i = 0; i < got.numel(); ++i)
        diff = std::max(diff, static_cast<double>(std::abs(cubic.f32()[i] - got.f32()[i])));
      EXPECT_GT(diff, 1e-3) << name;
    }
  }
  EXPECT_EQ(vitk::vit::parse_pos_interpolation("bilinear", "--pos-interpolation"),
            vitk::vit::PosInterpolation::bilinear);
  try {
    vitk::vit::parse_pos_interpolation("nearest", "--pos-interpolation");
    ADD_FAILURE();
  } catch (const vitk::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--pos-interpolation must be 'bicubic' or 'bilinear'"),
              std::string::npos);
  }
}

// With align_corners = true the corner positions of the two grids coincide, so corner values are
// kept.
TEST(Resample, AlignCornersKeepsTheCorners) {
  const int64_t sh = 3, sw = 4, dh = 7, dw = 5;
  Tensor pos({1, 1 + sh * sw, 1});
  for (int64_t i = 0; i < sh * sw; ++i) pos.f32()[1 + i] = static_cast<float>(i * i % 7);
  Tensor out = vitk::vit::resample_pos_embed(pos, sh, sw, dh, dw, true);
  const float* s = pos.f32() + 1;
  const float* o = out.f32() + 1;
  EXPECT_FLOAT_EQ(o[0], s[0]);
  EXPECT_FLOAT_EQ(o[dw - 1], s[sw - 1]);
  EXPECT_FLOAT_EQ(o[(dh - 1) * dw], s[(sh - 1) * sw]);
  EXPECT_FLOAT_EQ(o[dh * dw - 1], s[sh * sw - 1]);
}

TEST(Resample, ConstantStaysConstant) {
  for (bool align : {false, true}) {
    Tensor pos({1, 1 + 5 * 3, 2});
    pos.fill(0.75f);
    Tensor out = vitk::vit::resample_pos_embed(pos, 5, 3, 2, 9, align);
    for (int64_t i = 0; i < out.numel(); ++i) EXPECT_NEAR(out.f32()[i], 0.75f, 1e-6);
  }
}

TEST(Resample, RejectsShapesThatDoNotFitTheGrid) {
  Tensor pos({1, 1 + 16, 4});
  EXPECT_THROW(vitk::vit::resample_pos_embed(pos, 4, 5, 6, 6, false), vitk::Error);
  EXPECT_THROW(vitk::vit::resample_pos_embed(pos, 4, 4, 0, 6, false), vitk::Error);
  EXPECT_THROW(vitk::vit::resample_pos_embed(Tensor({17, 4}), 4, 4, 6, 6, false), vitk::Error);
  EXPECT_NO_THROW(vitk::vit::resample_pos_embed(Tensor({1, 16, 4}), 4, 4, 6, 6, false, 0));
}

}  // namespace
