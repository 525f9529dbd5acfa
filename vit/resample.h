#pragma once
// Resampling learned position embeddings to another patch grid, as PyTorch's
// F.interpolate(mode="bicubic" or "bilinear", antialias=False) does it, so that a model fine-tuned
// or run at another resolution sees the same positions as in timm, DeiT, Hugging Face or
// torchvision (bicubic) or the ViT paper's code (vit_jax: scipy's zoom of order 1, bilinear):
//   - bicubic: cubic convolution with A = −0.75 over a 4×4 neighbourhood, indices clamped at the
//     border;
//   - bilinear: the 2×2 neighbourhood, the source index clamped at 0 (align_corners = false) and
//     the right/bottom neighbour at the border;
//   - align_corners = false (timm, DeiT, Hugging Face): source = (dst + ½)·in/out − ½;
//   - align_corners = true (torchvision's interpolate_embeddings): source = dst·(in−1)/(out−1).
// The leading (class-token) rows are copied unchanged.
#include <cstdint>
#include <string>

#include "common/tensor.h"

namespace vitk::vit {

enum class PosInterpolation { bicubic, bilinear };
const char* interpolation_name(PosInterpolation mode);  // "bicubic", "bilinear"
// "bicubic" or "bilinear"; vitk::UsageError naming `option` otherwise.
PosInterpolation parse_pos_interpolation(const std::string& text, const std::string& option);

// src: grid [src_h·src_w, channels] row-major (row y, column x at y·src_w + x)
//  -> dst: grid [dst_h·dst_w, channels]. Same semantics as F.interpolate on the [1, channels,
// src_h, src_w] view with size = (dst_h, dst_w).
void resample_grid(const float* src, int64_t src_h, int64_t src_w, int64_t channels, float* dst,
                   int64_t dst_h, int64_t dst_w, bool align_corners,
                   PosInterpolation mode = PosInterpolation::bicubic);

// pos_embed f32 [1, prefix + src_h·src_w, d] -> [1, prefix + dst_h·dst_w, d]; the first
// `prefix` rows (the class token's) are copied. vitk::Error if the shape does not fit the grid.
Tensor resample_pos_embed(const Tensor& pos_embed, int64_t src_h, int64_t src_w, int64_t dst_h,
                          int64_t dst_w, bool align_corners, int64_t prefix = 1,
                          PosInterpolation mode = PosInterpolation::bicubic);

}  // namespace vitk::vit
