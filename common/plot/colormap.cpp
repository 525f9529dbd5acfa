// Colours: viridis, interpolated between nine of its published colours, and a categorical
// palette for line charts.
#include <algorithm>
#include <cmath>

#include "common/plot/plot.h"

namespace vitk::plot {
namespace {

// Viridis at t = 0, 1/8, ..., 1 (matplotlib's _viridis_data, as R's viridisLite lists them), RGB.
// Between them the map is close to straight in RGB, so linear interpolation stays within a few
// levels of the full 256-entry table while keeping its monotone rise in lightness.
constexpr unsigned char kViridis[9][3] = {
    {0x44, 0x01, 0x54}, {0x47, 0x2D, 0x7B}, {0x3B, 0x52, 0x8B},
    {0x2C, 0x72, 0x8E}, {0x21, 0x90, 0x8C}, {0x27, 0xAD, 0x81},
    {0x5D, 0xC8, 0x63}, {0xAA, 0xDC, 0x32}, {0xFD, 0xE7, 0x25}};

// matplotlib's "tab10", RGB.
constexpr unsigned char kTab10[10][3] = {{0x1f, 0x77, 0xb4}, {0xff, 0x7f, 0x0e}, {0x2c, 0xa0, 0x2c},
                                         {0xd6, 0x27, 0x28}, {0x94, 0x67, 0xbd}, {0x8c, 0x56, 0x4b},
                                         {0xe3, 0x77, 0xc2}, {0x7f, 0x7f, 0x7f}, {0xbc, 0xbd, 0x22},
                                         {0x17, 0xbe, 0xcf}};

}  // namespace

cv::Vec3b viridis(double t) {
  if (std::isnan(t)) return cv::Vec3b(160, 160, 160);
  t = std::fmin(1.0, std::fmax(0.0, t)) * 8.0;
  const int i = std::min(7, static_cast<int>(t));
  const double f = t - i;
  cv::Vec3b bgr;
  for (int c = 0; c < 3; ++c) {
    const double v = kViridis[i][c] + f * (kViridis[i + 1][c] - kViridis[i][c]);
    bgr[2 - c] = static_cast<unsigned char>(std::lround(v));
  }
  return bgr;
}

cv::Scalar series_colour(int i) {
  const unsigned char* c = kTab10[((i % 10) + 10) % 10];
  return cv::Scalar(c[2], c[1], c[0]);
}

}  // namespace vitk::plot
