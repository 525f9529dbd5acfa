// Patch extraction and its inverse. A P×P stride-P convolution is a matrix product over flattened
// non-overlapping patches, so the patch embedding needs only this rearrangement and ops::linear.
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
