// Pillow's resampling (libImaging/Resample.c and the nearest-neighbour scale of Geometry.c),
// reproduced so that vitk's eval transform gives timm's numbers exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "datasets/preprocess.h"

namespace vitk::datasets {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS

struct Filter {
  double (*weight)(double);
  double support;
};

double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}
double bilinear(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}
double box(double x) {
  return x > -0.5 && x <= 0.5 ? 1.0 : 0.0;
}

// For output indices [begin, end) of out_size: the first input index, how many inputs, and their
// fixed-point weights (ksize slots per output). Index by xx - begin. Only the outputs asked for
// are computed: a centre crop of an image with an extreme aspect ratio needs a sliver of a huge
// resized image.
struct Coefficients {
  int ksize = 0, begin = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;
};

Coefficients precompute(int in_size, int64_t out_size, int begin, int end, const Filter& filter) {
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = filter.support * filterscale;
  Coefficients c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.begin = begin;
  c.first.resize(end - begin);
  c.count.resize(end - begin);
  c.weights.assign(static_cast<size_t>(end - begin) * c.ksize, 0);
  std::vector<double> k(c.ksize);
  for (int xx = begin; xx < end; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // Pillow truncates toward zero here, then clamps.
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[x] = filter.weight((x + xmin - center + 0.5) * ss);
      ww += k[x];
    }
    int32_t* out = &c.weights[static_cast<size_t>(xx - begin) * c.ksize];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? k[x] / ww : k[x];
      out[x] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits)
                                          : 0.5 + v * (1 << kPrecisionBits));
    }
    c.first[xx - begin] = xmin;
    c.count[xx - begin] = xmax;
  }
  return c;
}

inline uint8_t clip8(int32_t v) {
  v >>= kPrecisionBits;  // arithmetic shift, as Pillow's
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Rows [y0, y1) of src filtered horizontally to the outputs c covers.
template <int C>
void horizontal(const cv::Mat& src, int y0, int y1, const Coefficients& c, cv::Mat& dst) {
  const int outputs = static_cast<int>(c.first.size());
  dst.create(y1 - y0, outputs, src.type());
  for (int y = y0; y < y1; ++y) {
    const uint8_t* in = src.ptr<uint8_t>(y);
    uint8_t* out = dst.ptr<uint8_t>(y - y0);
    for (int i = 0; i < outputs; ++i) {
      const int32_t* k = &c.weights[static_cast<size_t>(i) * c.ksize];
      const uint8_t* p = in + c.first[i] * C;
      int32_t ss[C];
      for (int ch = 0; ch < C; ++ch) ss[ch] = 1 << (kPrecisionBits - 1);
      for (int x = 0; x < c.count[i]; ++x)
        for (int ch = 0; ch < C; ++ch) ss[ch] += p[x * C + ch] * k[x];
      for (int ch = 0; ch < C; ++ch) out[i * C + ch] = clip8(ss[ch]);
    }
  }
}

// The outputs c covers, filtered vertically from src, whose row 0 is input row `offset`.
void vertical(const cv::Mat& src, int offset, const Coefficients& c, cv::Mat& dst) {
  const int outputs = static_cast<int>(c.first.size());
  const int values = src.cols * src.channels();
  dst.create(outputs, src.cols, src.type());
  std::vector<int32_t> ss(values);
  for (int i = 0; i < outputs; ++i) {
    const int32_t* k = &c.weights[static_cast<size_t>(i) * c.ksize];
    std::fill(ss.begin(), ss.end(), 1 << (kPrecisionBits - 1));
    for (int y = 0; y < c.count[i]; ++y) {
      const uint8_t* in = src.ptr<uint8_t>(c.first[i] + y - offset);
      const int32_t w = k[y];
      for (int v = 0; v < values; ++v) ss[v] += in[v] * w;
    }
    uint8_t* out = dst.ptr<uint8_t>(i);
    for (int v = 0; v < values; ++v) out[v] = clip8(ss[v]);
  }
}

// Pillow's ImagingScaleAffine: source index (int)(scale·(x + 0.5)), accumulated by repeated
// addition as Pillow does it.
std::vector<int> nearest_index(int in_size, int64_t out_size, int begin, int end) {
  const double a = static_cast<double>(in_size) / static_cast<double>(out_size);
  std::vector<int> index(end - begin);
  double pos = a * 0.5;
  for (int x = 0; x < end; ++x) {
    if (x >= begin) {
      int i = pos < 0.0 ? -1 : static_cast<int>(pos);
      index[x - begin] = i < 0 ? 0 : i >= in_size ? in_size - 1 : i;
    }
    pos += a;
  }
  return index;
}

cv::Mat nearest(const cv::Mat& src, int64_t height, int64_t width, cv::Rect roi) {
  const std::vector<int> xs = nearest_index(src.cols, width, roi.x, roi.x + roi.width);
  const std::vector<int> ys = nearest_index(src.rows, height, roi.y, roi.y + roi.height);
  const size_t pixel = src.elemSize();
  cv::Mat out(roi.height, roi.width, src.type());
  for (int y = 0; y < roi.height; ++y) {
    const uint8_t* in = src.ptr<uint8_t>(ys[y]);
    uint8_t* o = out.ptr<uint8_t>(y);
    for (int x = 0; x < roi.width; ++x) std::copy_n(in + xs[x] * pixel, pixel, o + x * pixel);
  }
  return out;
}

}  // namespace

cv::Mat resize_like_pil(const cv::Mat& image, int64_t height, int64_t width,
                        const std::string& interpolation, cv::Rect roi) {
  if (image.empty() || image.depth() != CV_8U || image.channels() > 4)
    throw Error("resize_like_pil: expected an 8-bit image of 1 to 4 channels");
  // Sides fit an int; only the roi is ever allocated.
  constexpr int64_t kMaxSide = int64_t(1) << 30;
  if (height <= 0 || width <= 0 || height > kMaxSide || width > kMaxSide)
    throw Error("cannot resize a " + std::to_string(image.cols) + "x" + std::to_string(image.rows) +
                " image to " + std::to_string(width) + "x" + std::to_string(height) +
                " (aspect ratio too extreme)");
  if (roi.empty()) {
    if (height > 1 << 16 || width > 1 << 16) throw Error("resize_like_pil: output too large");
    roi = cv::Rect(0, 0, static_cast<int>(width), static_cast<int>(height));
  }
  if (roi.x < 0 || roi.y < 0 || roi.x + int64_t(roi.width) > width ||
      roi.y + int64_t(roi.height) > height)
    throw Error("resize_like_pil: roi outside the output");
  // Pillow copies an image resized to its own size.
  if (height == image.rows && width == image.cols) return image(roi).clone();

  Filter filter{};
  if (interpolation == "nearest") return nearest(image, height, width, roi);
  if (interpolation == "bicubic")
    filter = {bicubic, 2.0};
  else if (interpolation == "bilinear")
    filter = {bilinear, 1.0};
  else if (interpolation == "area")
    filter = {box, 0.5};
  else
    parse_interpolation(interpolation);  // throws the usage error

  const bool need_horizontal = width != image.cols, need_vertical = height != image.rows;
  // Input rows the requested output rows read.
  Coefficients cy;
  int row_first = roi.y, row_last = roi.y + roi.height;
  if (need_vertical) {
    cy = precompute(image.rows, height, roi.y, roi.y + roi.height, filter);
    row_first = image.rows, row_last = 0;
    for (size_t i = 0; i < cy.first.size(); ++i) {
      row_first = std::min(row_first, cy.first[i]);
      row_last = std::max(row_last, cy.first[i] + cy.count[i]);
    }
  }
  cv::Mat rows;  // input rows [row_first, row_last), filtered horizontally to the roi's columns
  if (need_horizontal) {
    const Coefficients cx = precompute(image.cols, width, roi.x, roi.x + roi.width, filter);
    switch (image.channels()) {
      case 1:
        horizontal<1>(image, row_first, row_last, cx, rows);
        break;
      case 2:
        horizontal<2>(image, row_first, row_last, cx, rows);
        break;
      case 3:
        horizontal<3>(image, row_first, row_last, cx, rows);
        break;
      default:
        horizontal<4>(image, row_first, row_last, cx, rows);
    }
  } else {
    rows = image(cv::Range(row_first, row_last), cv::Range(roi.x, roi.x + roi.width));
  }
  if (!need_vertical) return rows.clone();
  cv::Mat out;
  vertical(rows, row_first, cy, out);
  return out;
}

}  // namespace vitk::datasets
