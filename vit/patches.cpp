// Patch extraction and its inverse. A P×P stride-P convolution is a matrix product over flattened
// non-overlapping patches, so the patch embedding needs only this rearrangement and ops::linear.
#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "vit/vit.h"

namespace vitk::vit {
namespace {

// Checks images [B, C, H, W] against patches [B, (H/P)·(W/P), C·P·P] for `op`.
void check_shapes(const char* op, const Tensor& images, int64_t patch, const Tensor& patches) {
  auto fail = [&](const std::string& why) {
    throw Error(std::string(op) + ": images " + shape_str(images.shape()) + ", patches " +
                shape_str(patches.shape()) + ", patch size " + std::to_string(patch) + ": " + why);
  };
  if (images.dtype() != DType::f32 || patches.dtype() != DType::f32) fail("both must be f32");
  if (images.rank() != 4) fail("images must be [B, C, H, W]");
  if (patch < 1) fail("the patch size must be positive");
  const int64_t B = images.dim(0), C = images.dim(1), H = images.dim(2), W = images.dim(3);
  if (H % patch || W % patch) fail("the patch size does not divide the image size");
  const Shape want{B, (H / patch) * (W / patch), C * patch * patch};
  if (patches.shape() != want) fail("patches should be " + shape_str(want));
}

// Calls copy(image_row, patch_row) for every row of P pixels: image_row points into images at
// (b, c, gy·P + i, gx·P), patch_row into patches at (b, gy·Wp + gx, (c·P + i)·P). One thread per
// (image, patch row) pair; every pair writes disjoint memory.
template <typename Copy>
void for_each_patch_row(int64_t B, int64_t C, int64_t H, int64_t W, int64_t P, Copy&& copy) {
  const int64_t Hp = H / P, Wp = W / P, K = C * P * P;
#pragma omp parallel for collapse(2) schedule(static) if (B * C * H * W > 65536)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t gy = 0; gy < Hp; ++gy)
      for (int64_t gx = 0; gx < Wp; ++gx) {
        const int64_t patch_offset = ((b * Hp + gy) * Wp + gx) * K;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t i = 0; i < P; ++i) {
            const int64_t image_offset = ((b * C + c) * H + gy * P + i) * W + gx * P;
            copy(image_offset, patch_offset + (c * P + i) * P);
          }
      }
}

}  // namespace

void extract_patches(const Tensor& images, int64_t patch, Tensor& patches) {
  check_shapes("extract_patches", images, patch, patches);
  const float* src = images.f32();
  float* dst = patches.f32();
  const size_t row = static_cast<size_t>(patch) * sizeof(float);
  for_each_patch_row(images.dim(0), images.dim(1), images.dim(2), images.dim(3), patch,
                     [&](int64_t image, int64_t p) { std::memcpy(dst + p, src + image, row); });
}

void fold_patches(const Tensor& patches, int64_t patch, Tensor& images) {
  check_shapes("fold_patches", images, patch, patches);
  const float* src = patches.f32();
  float* dst = images.f32();
  const size_t row = static_cast<size_t>(patch) * sizeof(float);
  // The patches tile the image exactly, so every pixel is written once.
  for_each_patch_row(images.dim(0), images.dim(1), images.dim(2), images.dim(3), patch,
                     [&](int64_t image, int64_t p) { std::memcpy(dst + image, src + p, row); });
}

}  // namespace vitk::vit

namespace vitk::vit {
namespace {

struct WindowGeometry {
  int64_t B, C, H, W, Ho, Wo;
  int64_t sb, sc, sh, sw;  // element strides of the input
};

WindowGeometry check_windows(const char* op, const Tensor& input, bool channels_last,
                             int64_t kernel, int64_t stride, int64_t pad, const Tensor& cols) {
  auto fail = [&](const std::string& why) {
    throw Error(std::string(op) + ": input " + shape_str(input.shape()) +
                (channels_last ? " [B, H, W, C]" : " [B, C, H, W]") + ", cols " +
                shape_str(cols.shape()) + ", kernel " + std::to_string(kernel) + ", stride " +
                std::to_string(stride) + ", padding " + std::to_string(pad) + ": " + why);
  };
  if (input.dtype() != DType::f32 || cols.dtype() != DType::f32) fail("both must be f32");
  if (input.rank() != 4) fail("the input must have rank 4");
  if (kernel < 1 || stride < 1 || pad < 0 || pad >= kernel)
    fail("need kernel >= 1, stride >= 1 and 0 <= padding < kernel");
  WindowGeometry g{};
  g.B = input.dim(0);
  g.C = channels_last ? input.dim(3) : input.dim(1);
  g.H = channels_last ? input.dim(1) : input.dim(2);
  g.W = channels_last ? input.dim(2) : input.dim(3);
  if (g.H + 2 * pad < kernel || g.W + 2 * pad < kernel) fail("the kernel is larger than the input");
  g.Ho = (g.H + 2 * pad - kernel) / stride + 1;
  g.Wo = (g.W + 2 * pad - kernel) / stride + 1;
  const Shape want{g.B, g.Ho * g.Wo, g.C * kernel * kernel};
  if (cols.shape() != want) fail("cols should be " + shape_str(want));
  if (channels_last)
    g.sb = g.H * g.W * g.C, g.sc = 1, g.sh = g.W * g.C, g.sw = g.C;
  else
    g.sb = g.C * g.H * g.W, g.sc = g.H * g.W, g.sh = g.W, g.sw = 1;
  return g;
}

}  // namespace

void extract_windows(const Tensor& input, bool channels_last, int64_t kernel, int64_t stride,
                     int64_t pad, Tensor& cols) {
  const WindowGeometry g =
      check_windows("extract_windows", input, channels_last, kernel, stride, pad, cols);
  const int64_t K = kernel, KK = K * K, row = g.C * KK;
  const float* src = input.f32();
  float* dst = cols.f32();
#pragma omp parallel for collapse(2) schedule(static) if (cols.numel() > 65536)
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t oy = 0; oy < g.Ho; ++oy)
      for (int64_t ox = 0; ox < g.Wo; ++ox) {
        float* out = dst + (b * g.Ho * g.Wo + oy * g.Wo + ox) * row;
        const float* in = src + b * g.sb;
        for (int64_t i = 0; i < K; ++i) {
          const int64_t y = oy * stride - pad + i;
          for (int64_t j = 0; j < K; ++j) {
            const int64_t x = ox * stride - pad + j;
            if (y < 0 || y >= g.H || x < 0 || x >= g.W) {
              for (int64_t c = 0; c < g.C; ++c) out[c * KK + i * K + j] = 0.f;
              continue;
            }
            const float* pixel = in + y * g.sh + x * g.sw;
            for (int64_t c = 0; c < g.C; ++c) out[c * KK + i * K + j] = pixel[c * g.sc];
          }
        }
      }
}

void fold_windows(const Tensor& cols, bool channels_last, int64_t kernel, int64_t stride,
                  int64_t pad, Tensor& input) {
  const WindowGeometry g =
      check_windows("fold_windows", input, channels_last, kernel, stride, pad, cols);
  const int64_t K = kernel, KK = K * K, row = g.C * KK;
  const float* src = cols.f32();
  float* dst = input.f32();
  // Windows overlap, so one thread per image: each image's sums run in a fixed order.
#pragma omp parallel for schedule(static) if (cols.numel() > 65536)
  for (int64_t b = 0; b < g.B; ++b) {
    float* out = dst + b * g.sb;
    std::fill(out, out + g.sb, 0.f);
    for (int64_t oy = 0; oy < g.Ho; ++oy)
      for (int64_t ox = 0; ox < g.Wo; ++ox) {
        const float* window = src + (b * g.Ho * g.Wo + oy * g.Wo + ox) * row;
        for (int64_t i = 0; i < K; ++i) {
          const int64_t y = oy * stride - pad + i;
          if (y < 0 || y >= g.H) continue;
          for (int64_t j = 0; j < K; ++j) {
            const int64_t x = ox * stride - pad + j;
            if (x < 0 || x >= g.W) continue;
            float* pixel = out + y * g.sh + x * g.sw;
            for (int64_t c = 0; c < g.C; ++c) pixel[c * g.sc] += window[c * KK + i * K + j];
          }
        }
      }
  }
}

}  // namespace vitk::vit
