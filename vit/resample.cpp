// Bicubic and bilinear resampling with PyTorch's conventions (aten/src/ATen/native/UpSample.h:
// area_pixel_compute_scale, area_pixel_compute_source_index with cubic = true or false,
// get_cubic_upsample_coefficients, upsample_get_value_bounded), computed in double: PyTorch's own
// float32 kernel computes the source positions in float, which puts its result up to ~3e-6 from
// the exact one on a 14 -> 24 grid; in double we stay within float32 rounding of it.
#include "vit/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"

namespace vitk::vit {

namespace {

constexpr double kCubicA = -0.75;

// |x| <= 1
double cubic1(double x) {
  return ((kCubicA + 2) * x - (kCubicA + 3)) * x * x + 1;
}
// 1 < |x| < 2
double cubic2(double x) {
  return ((kCubicA * x - 5 * kCubicA) * x + 8 * kCubicA) * x - 4 * kCubicA;
}

// For each output index along one axis: four clamped source indices and their weights (bilinear
// uses the first two).
struct Taps {
  std::vector<int64_t> index;  // [out, 4]
  std::vector<double> weight;  // [out, 4]
};

Taps axis_taps(int64_t in, int64_t out, bool align_corners, PosInterpolation mode) {
  double scale;
  if (align_corners)
    scale = out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  else
    scale = static_cast<double>(in) / static_cast<double>(out);
  Taps taps;
  taps.index.resize(static_cast<size_t>(out) * 4);
  taps.weight.resize(static_cast<size_t>(out) * 4);
  for (int64_t o = 0; o < out; ++o) {
    double real = align_corners ? scale * static_cast<double>(o)
                                : scale * (static_cast<double>(o) + 0.5) - 0.5;
    if (mode == PosInterpolation::bilinear) {
      // Linear clamps the source index at 0; its right neighbour stops at the border.
      real = std::max(real, 0.0);
      const int64_t i0 = std::min(static_cast<int64_t>(real), in - 1);
      const double t = real - static_cast<double>(i0);
      const int64_t at = o * 4;
      taps.index[static_cast<size_t>(at)] = i0;
      taps.index[static_cast<size_t>(at + 1)] = std::min(i0 + 1, in - 1);
      taps.index[static_cast<size_t>(at + 2)] = taps.index[static_cast<size_t>(at + 3)] = i0;
      taps.weight[static_cast<size_t>(at)] = 1 - t;
      taps.weight[static_cast<size_t>(at + 1)] = t;
      taps.weight[static_cast<size_t>(at + 2)] = taps.weight[static_cast<size_t>(at + 3)] = 0;
      continue;
    }
    // No clamp at 0 for cubic: the taps left of the border are clamped instead.
    const double floor_real = std::floor(real);
    const int64_t i0 = static_cast<int64_t>(floor_real);
    const double t = real - floor_real;
    const double w[4] = {cubic2(t + 1), cubic1(t), cubic1(1 - t), cubic2(2 - t)};
    for (int k = 0; k < 4; ++k) {
      int64_t i = i0 - 1 + k;
      i = i < 0 ? 0 : (i > in - 1 ? in - 1 : i);
      taps.index[static_cast<size_t>(o * 4 + k)] = i;
      taps.weight[static_cast<size_t>(o * 4 + k)] = w[k];
    }
  }
  return taps;
}

}  // namespace

const char* interpolation_name(PosInterpolation mode) {
  return mode == PosInterpolation::bilinear ? "bilinear" : "bicubic";
}

PosInterpolation parse_pos_interpolation(const std::string& text, const std::string& option) {
  if (text == "bicubic") return PosInterpolation::bicubic;
  if (text == "bilinear") return PosInterpolation::bilinear;
  throw UsageError(option + " must be 'bicubic' or 'bilinear', got '" + text + "'");
}

void resample_grid(const float* src, int64_t src_h, int64_t src_w, int64_t channels, float* dst,
                   int64_t dst_h, int64_t dst_w, bool align_corners, PosInterpolation mode) {
  if (src_h <= 0 || src_w <= 0 || dst_h <= 0 || dst_w <= 0 || channels <= 0)
    throw Error("resample: grid sizes and channels must be positive");
  // PyTorch copies when the size does not change; the taps would give the same values (t = 0
  // puts weight 1 on the source pixel), but a copy is exact whatever the rounding.
  if (src_h == dst_h && src_w == dst_w) {
    std::memcpy(dst, src, static_cast<size_t>(src_h * src_w * channels) * sizeof(float));
    return;
  }
  const Taps ty = axis_taps(src_h, dst_h, align_corners, mode);
  const Taps tx = axis_taps(src_w, dst_w, align_corners, mode);
  std::vector<double> acc(static_cast<size_t>(channels));
  for (int64_t y = 0; y < dst_h; ++y) {
    for (int64_t x = 0; x < dst_w; ++x) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int ky = 0; ky < 4; ++ky) {
        const int64_t sy = ty.index[static_cast<size_t>(y * 4 + ky)];
        const double wy = ty.weight[static_cast<size_t>(y * 4 + ky)];
        for (int kx = 0; kx < 4; ++kx) {
          const int64_t sx = tx.index[static_cast<size_t>(x * 4 + kx)];
          const double w = wy * tx.weight[static_cast<size_t>(x * 4 + kx)];
          const float* row = src + (sy * src_w + sx) * channels;
          for (int64_t c = 0; c < channels; ++c) acc[static_cast<size_t>(c)] += w * row[c];
        }
      }
      float* out = dst + (y * dst_w + x) * channels;
      for (int64_t c = 0; c < channels; ++c)
        out[c] = static_cast<float>(acc[static_cast<size_t>(c)]);
    }
  }
}

Tensor resample_pos_embed(const Tensor& pos_embed, int64_t src_h, int64_t src_w, int64_t dst_h,
                          int64_t dst_w, bool align_corners, int64_t prefix,
                          PosInterpolation mode) {
  if (pos_embed.dtype() != DType::f32 || pos_embed.rank() != 3 || pos_embed.dim(0) != 1 ||
      prefix < 0 || pos_embed.dim(1) != prefix + src_h * src_w)
    throw Error("pos_embed " + shape_str(pos_embed.shape()) + " does not fit a " +
                std::to_string(src_h) + "x" + std::to_string(src_w) + " grid with " +
                std::to_string(prefix) + " leading token(s): expected f32 [1, " +
                std::to_string(prefix + src_h * src_w) + ", d]");
  if (dst_h <= 0 || dst_w <= 0)
    throw Error("pos_embed: cannot resample to a " + std::to_string(dst_h) + "x" +
                std::to_string(dst_w) + " grid");
  const int64_t d = pos_embed.dim(2);
  Tensor out({1, prefix + dst_h * dst_w, d});
  const float* src = pos_embed.f32();
  float* dst = out.f32();
  std::memcpy(dst, src, static_cast<size_t>(prefix * d) * sizeof(float));
  resample_grid(src + prefix * d, src_h, src_w, d, dst + prefix * d, dst_h, dst_w, align_corners,
                mode);
  return out;
}

}  // namespace vitk::vit
