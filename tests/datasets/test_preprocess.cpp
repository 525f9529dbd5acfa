// The eval transform against timm's: geometry computed by hand from torchvision's and timm's
// rules, and pixels against Pillow and torchvision outputs made by
// tests/fixtures/images/make_images.py.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "common/error.h"
#include "datasets/preprocess.h"

namespace {

using vitk::datasets::Preprocess;

const std::string kFixtures = std::string(VITK_SOURCE_DIR) + "/tests/fixtures/images/";

cv::Mat read_fixture(const std::string& name) {
  cv::Mat m = cv::imread(kFixtures + name, cv::IMREAD_UNCHANGED);
  EXPECT_FALSE(m.empty()) << name;
  return m;
}

int max_abs_diff(const cv::Mat& a, const cv::Mat& b) {
  if (a.size() != b.size() || a.type() != b.type()) return 1000;
  return static_cast<int>(cv::norm(a, b, cv::NORM_INF));
}

Preprocess imagenet(const std::string& interpolation = "bicubic", float crop = 0.875f) {
  Preprocess p;
  p.interpolation = interpolation;
  p.crop_fraction = crop;
  return p;
}

// {height, width} of the resize and the crop's {top, left}, for an image of h × w.
struct Geometry {
  int64_t rh, rw;
  int top, left;
};
Geometry geometry(int64_t h, int64_t w, const Preprocess& p, int64_t size_h, int64_t size_w) {
  auto [rh, rw] = vitk::datasets::eval_resize_size(h, w, p, size_h, size_w);
  cv::Rect crop = vitk::datasets::center_crop_rect(rh, rw, size_h, size_w);
  EXPECT_EQ(crop.height, size_h);
  EXPECT_EQ(crop.width, size_w);
  return {rh, rw, crop.y, crop.x};
}

// ---- Geometry: Resize(floor(size / crop_pct)) on the shorter side, CenterCrop ------------------

TEST(EvalGeometry, LandscapeAt224Crop0875) {
  // 256 on the short side; long side int(256·640/480) = 341; left round(58.5) = 58 (halves to
  // even, as Python's round: std::lround would give 59), top 16.
  Geometry g = geometry(480, 640, imagenet(), 224, 224);
  EXPECT_EQ(g.rh, 256);
  EXPECT_EQ(g.rw, 341);
  EXPECT_EQ(g.left, 58);
  EXPECT_EQ(g.top, 16);
}

TEST(EvalGeometry, PortraitAt224Crop09) {
  // floor(224 / 0.9) = 248; width short: 248 × int(248·500/375) = 330; top 53, left 12.
  Geometry g = geometry(500, 375, imagenet("bicubic", 0.9f), 224, 224);
  EXPECT_EQ(g.rw, 248);
  EXPECT_EQ(g.rh, 330);
  EXPECT_EQ(g.top, 53);
  EXPECT_EQ(g.left, 12);
}

TEST(EvalGeometry, SquareImageAndCropOne) {
  Geometry g = geometry(300, 300, imagenet(), 224, 224);
  EXPECT_EQ(g.rh, 256);
  EXPECT_EQ(g.rw, 256);
  EXPECT_EQ(g.top, 16);
  EXPECT_EQ(g.left, 16);
  // crop_pct 1: the short side becomes the size itself; 225 × 300 -> 224 × int(224·300/225).
  g = geometry(300, 225, imagenet("bicubic", 1.f), 224, 224);
  EXPECT_EQ(g.rw, 224);
  EXPECT_EQ(g.rh, 298);
  EXPECT_EQ(g.top, 37);
  EXPECT_EQ(g.left, 0);
}

TEST(EvalGeometry, CropFractionIsTheDecimalAUserWrote) {
  // Python: floor(224 / 0.8) = 280. The float 0.8f widened is 0.800000012, and 224 divided by
  // it is 279.99999..., which would floor to 279.
  EXPECT_EQ(geometry(400, 400, imagenet("bicubic", 0.8f), 224, 224).rh, 280);
  EXPECT_EQ(geometry(400, 400, imagenet("bicubic", 0.96f), 240, 240).rh, 250);
  EXPECT_EQ(geometry(400, 400, imagenet("bicubic", 0.95f), 224, 224).rh, 235);
}

TEST(EvalGeometry, RectangularModelKeepsTheAspectRatio) {
  // Target 160 × 224 at 0.875: scale size (182, 256); timm's ResizeKeepRatio scales by the
  // smaller ratio min(375/182, 500/256) = 1.953125 -> (192, 256), then crops 160 × 224.
  Geometry g = geometry(375, 500, imagenet(), 160, 224);
  EXPECT_EQ(g.rh, 192);
  EXPECT_EQ(g.rw, 256);
  EXPECT_EQ(g.top, 16);
  EXPECT_EQ(g.left, 16);
}

TEST(EvalGeometry, SquashIsAPlainResize) {
  Preprocess p = imagenet();
  p.resize = "squash";
  Geometry g = geometry(375, 500, p, 28, 28);
  EXPECT_EQ(g.rh, 28);
  EXPECT_EQ(g.rw, 28);
  EXPECT_EQ(g.top, 0);
  EXPECT_EQ(g.left, 0);
}

TEST(EvalGeometry, ExtremeAspectRatioIsAnErrorNotAnAllocation) {
  // 1 pixel wide and 100000 tall: the short side to 256 makes the long one 25.6 million; only
  // the 224 × 224 crop is ever computed.
  cv::Mat thin(100000, 1, CV_8UC3, cv::Scalar(10, 20, 30));
  std::vector<float> out(3 * 224 * 224);
  vitk::datasets::preprocess_image(thin, imagenet(), 224, 224, out.data());
  EXPECT_NEAR(out[0], (10.f / 255.f - 0.485f) / 0.229f, 1e-6f);
}

// ---- Pixels: Pillow's resize, bit for bit -----------------------------------------------------

TEST(ResizeLikePil, MatchesPillowForEveryInterpolation) {
  const cv::Mat src = read_fixture("resample_src.png");
  ASSERT_EQ(src.size(), cv::Size(23, 17));
  for (const char* name : {"bicubic", "bilinear", "area", "nearest"}) {
    for (cv::Size size : {cv::Size(10, 7), cv::Size(40, 31), cv::Size(9, 30)}) {
      const std::string file = std::string("resample_") + name + "_" + std::to_string(size.width) +
                               "x" + std::to_string(size.height) + ".png";
      cv::Mat got = vitk::datasets::resize_like_pil(src, size.height, size.width, name);
      EXPECT_EQ(max_abs_diff(got, read_fixture(file)), 0) << file;
    }
  }
}

TEST(ResizeLikePil, GreyConversionAndResizeMatchPillow) {
  // Pillow's convert("L") then resize: to_channels must use Pillow's luma, not OpenCV's.
  cv::Mat grey = vitk::datasets::to_channels(read_fixture("resample_src.png"), 1);
  cv::Mat got = vitk::datasets::resize_like_pil(grey, 7, 10, "bicubic");
  EXPECT_EQ(max_abs_diff(got, read_fixture("resample_gray_bicubic_10x7.png")), 0);
}

TEST(ResizeLikePil, RoiIsACropOfTheFullResult) {
  const cv::Mat src = read_fixture("resample_src.png");
  for (const char* name : {"bicubic", "bilinear", "area", "nearest"}) {
    cv::Mat full = vitk::datasets::resize_like_pil(src, 31, 40, name);
    cv::Rect roi(5, 3, 20, 17);
    cv::Mat part = vitk::datasets::resize_like_pil(src, 31, 40, name, roi);
    EXPECT_EQ(max_abs_diff(part, full(roi)), 0) << name;
  }
}

TEST(ResizeLikePil, SameSizeIsACopyAndBadArgumentsThrow) {
  const cv::Mat src = read_fixture("resample_src.png");
  EXPECT_EQ(max_abs_diff(vitk::datasets::resize_like_pil(src, 17, 23, "bicubic"), src), 0);
  EXPECT_THROW(vitk::datasets::resize_like_pil(src, 0, 5, "bicubic"), vitk::Error);
  EXPECT_THROW(vitk::datasets::resize_like_pil(src, 5, 5, "lanczos"), vitk::UsageError);
  EXPECT_THROW(vitk::datasets::resize_like_pil(src, 5, 5, "bicubic", cv::Rect(3, 3, 5, 5)),
               vitk::Error);
}

// ---- The whole transform against torchvision ---------------------------------------------------

std::vector<float> read_floats(const std::string& name) {
  std::ifstream in(kFixtures + name, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

TEST(EvalTransform, MatchesTorchvision) {
  // 23 × 17 source: bicubic 8 at 0.875 resizes to 12 × 9 and crops at left round(2) = 2, top
  // round(0.5) = 0; bilinear 12 at 0.9 resizes to 17 × 13 and crops at left round(2.5) = 2.
  const cv::Mat rgb = vitk::datasets::to_channels(read_fixture("resample_src.png"), 3);
  struct Case {
    const char* file;
    const char* interpolation;
    int size;
    float crop;
  };
  for (const Case& c : {Case{"eval_bicubic_8_0.875.f32", "bicubic", 8, 0.875f},
                        Case{"eval_bilinear_12_0.9.f32", "bilinear", 12, 0.9f}}) {
    const std::vector<float> want = read_floats(c.file);
    ASSERT_EQ(want.size(), size_t(3 * c.size * c.size)) << c.file;
    std::vector<float> got(want.size());
    vitk::datasets::preprocess_image(rgb, imagenet(c.interpolation, c.crop), c.size, c.size,
                                     got.data());
    float worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    EXPECT_LE(worst, 1e-6f) << c.file;
  }
}

// ---- Channels and normalisation
// -------------------------------------------------------------------

TEST(ToChannels, AlphaIsCompositedOnWhite) {
  cv::Mat bgra(1, 3, CV_8UC4);
  bgra.at<cv::Vec4b>(0, 0) = {0, 0, 255, 0};        // transparent red -> white
  bgra.at<cv::Vec4b>(0, 1) = {0, 0, 255, 255};      // opaque red
  bgra.at<cv::Vec4b>(0, 2) = {100, 100, 100, 128};  // 100·128/255 + 255·127/255 = 177.2
  cv::Mat rgb = vitk::datasets::to_channels(bgra, 3);
  EXPECT_EQ(rgb.at<cv::Vec3b>(0, 0), cv::Vec3b(255, 255, 255));
  EXPECT_EQ(rgb.at<cv::Vec3b>(0, 1), cv::Vec3b(255, 0, 0));  // RGB order now
  EXPECT_EQ(rgb.at<cv::Vec3b>(0, 2), cv::Vec3b(177, 177, 177));
  cv::Mat grey_alpha(1, 1, CV_8UC2, cv::Scalar(0, 0));
  EXPECT_EQ(vitk::datasets::to_channels(grey_alpha, 1).at<uint8_t>(0, 0), 255);
}

TEST(ToChannels, DepthsAndGrey) {
  cv::Mat deep(1, 2, CV_16UC1);
  deep.at<uint16_t>(0, 0) = 65535;
  deep.at<uint16_t>(0, 1) = 257 * 100;
  cv::Mat m = vitk::datasets::to_channels(deep, 3);
  EXPECT_EQ(m.type(), CV_8UC3);
  EXPECT_EQ(m.at<cv::Vec3b>(0, 0), cv::Vec3b(255, 255, 255));
  EXPECT_EQ(m.at<cv::Vec3b>(0, 1), cv::Vec3b(100, 100, 100));
  cv::Mat real(1, 1, CV_32FC3, cv::Scalar(0.f, 0.5f, 1.f));
  EXPECT_EQ(vitk::datasets::to_channels(real, 3).at<cv::Vec3b>(0, 0), cv::Vec3b(255, 128, 0));
  // Pillow's luma (R·19595 + G·38470 + B·7471 + 32768) >> 16; pure red 76, (10, 200, 30) 123.
  cv::Mat bgr(1, 2, CV_8UC3);
  bgr.at<cv::Vec3b>(0, 0) = {0, 0, 255};
  bgr.at<cv::Vec3b>(0, 1) = {30, 200, 10};
  cv::Mat grey = vitk::datasets::to_channels(bgr, 1);
  EXPECT_EQ(grey.at<uint8_t>(0, 0), 76);
  EXPECT_EQ(grey.at<uint8_t>(0, 1), (10 * 19595 + 200 * 38470 + 30 * 7471 + 32768) >> 16);
  EXPECT_THROW(vitk::datasets::to_channels(bgr, 2), vitk::Error);
}

TEST(Normalize, ChwAsTorchvision) {
  cv::Mat rgb(1, 2, CV_8UC3);
  rgb.at<cv::Vec3b>(0, 0) = {0, 128, 255};
  rgb.at<cv::Vec3b>(0, 1) = {255, 0, 7};
  Preprocess p;
  float out[6];
  vitk::datasets::normalize_to_chw(rgb, p, out);
  const uint8_t v[3][2] = {{0, 255}, {128, 0}, {255, 7}};
  for (int c = 0; c < 3; ++c)
    for (int x = 0; x < 2; ++x)
      EXPECT_EQ(out[c * 2 + x], (static_cast<float>(v[c][x]) / 255.f - p.mean[c]) / p.std[c]);
}

}  // namespace
