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
  int64_t K, S, pad;       // kernel, stride, zero padding
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
  g.K = kernel, g.S = stride, g.pad = pad;
  const Shape want{g.B, g.Ho * g.Wo, g.C * kernel * kernel};
  if (cols.shape() != want) fail("cols should be " + shape_str(want));
  if (channels_last)
    g.sb = g.H * g.W * g.C, g.sc = 1, g.sh = g.W * g.C, g.sw = g.C;
  else
    g.sb = g.C * g.H * g.W, g.sc = g.H * g.W, g.sh = g.W, g.sw = 1;
  return g;
}

// Calls visit(col, pixel) for every tap (i, j) of the windows in output row oy of image b: col
// indexes cols at (b, oy·Wo + ox, (0·K + i)·K + j) (channel c adds c·K·K), pixel the input at
// (b, 0, y, x) (channel c adds c·sc), or −1 where the tap falls in the zero padding. Extraction
// and folding walk the same taps; only what they do at each differs.
template <typename Visit>
void for_each_window_tap(const WindowGeometry& g, int64_t b, int64_t oy, Visit&& visit) {
  const int64_t row = g.C * g.K * g.K;
  for (int64_t ox = 0; ox < g.Wo; ++ox) {
    const int64_t window = (b * g.Ho * g.Wo + oy * g.Wo + ox) * row;
    for (int64_t i = 0; i < g.K; ++i) {
      const int64_t y = oy * g.S - g.pad + i;
      for (int64_t j = 0; j < g.K; ++j) {
        const int64_t x = ox * g.S - g.pad + j;
        const bool inside = y >= 0 && y < g.H && x >= 0 && x < g.W;
        visit(window + i * g.K + j, inside ? b * g.sb + y * g.sh + x * g.sw : int64_t{-1});
      }
    }
  }
}

}  // namespace

void extract_windows(const Tensor& input, bool channels_last, int64_t kernel, int64_t stride,
                     int64_t pad, Tensor& cols) {
  const WindowGeometry g =
      check_windows("extract_windows", input, channels_last, kernel, stride, pad, cols);
  const int64_t KK = g.K * g.K;
  const float* src = input.f32();
  float* dst = cols.f32();
#pragma omp parallel for collapse(2) schedule(static) if (cols.numel() > 65536)
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t oy = 0; oy < g.Ho; ++oy)
      for_each_window_tap(g, b, oy, [&](int64_t col, int64_t pixel) {
        for (int64_t c = 0; c < g.C; ++c)
          dst[col + c * KK] = pixel < 0 ? 0.f : src[pixel + c * g.sc];
      });
}

void fold_windows(const Tensor& cols, bool channels_last, int64_t kernel, int64_t stride,
                  int64_t pad, Tensor& input) {
  const WindowGeometry g =
      check_windows("fold_windows", input, channels_last, kernel, stride, pad, cols);
  const int64_t KK = g.K * g.K;
  const float* src = cols.f32();
  float* dst = input.f32();
  // Windows overlap, so one thread per image: each image's sums run in a fixed order.
#pragma omp parallel for schedule(static) if (cols.numel() > 65536)
  for (int64_t b = 0; b < g.B; ++b) {
    std::fill(dst + b * g.sb, dst + (b + 1) * g.sb, 0.f);
    for (int64_t oy = 0; oy < g.Ho; ++oy)
      for_each_window_tap(g, b, oy, [&](int64_t col, int64_t pixel) {
        if (pixel < 0) return;
        for (int64_t c = 0; c < g.C; ++c) dst[pixel + c * g.sc] += src[col + c * KK];
      });
  }
}

}  // namespace vitk::vit
