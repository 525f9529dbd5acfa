#pragma once
// Resampling learned position embeddings to another patch grid, as PyTorch's
// F.interpolate(mode="bicubic", antialias=False) does it, so that a model fine-tuned or run at
// another resolution sees the same positions as in timm, DeiT, Hugging Face or torchvision:
//   - cubic convolution with A = −0.75 over a 4×4 neighbourhood, indices clamped at the border;
//   - align_corners = false (timm, DeiT, Hugging Face): source = (dst + ½)·in/out − ½;
//   - align_corners = true (torchvision's interpolate_embeddings): source = dst·(in−1)/(out−1).
// The leading (class-token) rows are copied unchanged.
#include <cstdint>

#include "common/tensor.h"

namespace vitk::vit {

// src: grid [src_h·src_w, channels] row-major (row y, column x at y·src_w + x)
//  -> dst: grid [dst_h·dst_w, channels]. Same semantics as F.interpolate on the [1, channels,
// src_h, src_w] view with size = (dst_h, dst_w).
void resample_grid_bicubic(const float* src, int64_t src_h, int64_t src_w, int64_t channels,
                           float* dst, int64_t dst_h, int64_t dst_w, bool align_corners);

// pos_embed f32 [1, prefix + src_h·src_w, d] -> [1, prefix + dst_h·dst_w, d]; the first
// `prefix` rows (the class token's) are copied. vitk::Error if the shape does not fit the grid.
Tensor resample_pos_embed(const Tensor& pos_embed, int64_t src_h, int64_t src_w, int64_t dst_h,
                          int64_t dst_w, bool align_corners, int64_t prefix = 1);

}  // namespace vitk::vit
