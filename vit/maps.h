#pragma once
// The values behind the pictures of a ViT (`vitk classify --attention-dir`, `vitk plot positions
// --model`): attention rollout (Abnar & Zuidema, 2020), the patch maps a classifier reads, and the
// similarity of learned position embeddings (the ViT paper's figure 7). Matrices are f32 Tensors
// [rows, cols]; the maths runs in double.
#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor.h"
#include "vit/vit.h"

namespace vitk::vit {

enum class HeadFusion { mean, max };
HeadFusion parse_head_fusion(const std::string& name);  // "mean" | "max" (vitk::UsageError)

// One layer's attention of one image, weights [H, T, T] -> [T, T]: the mean of the heads, or
// their element-wise maximum (rows then no longer sum to 1; the rollout renormalises them).
Tensor fuse_heads(const Tensor& weights, HeadFusion fusion);

// Attention rollout over layers (each [T, T], first layer first): with the residual connection
// counted as attention to oneself, A' = 0.5·A + 0.5·I with every row renormalised to sum to 1,
// then R = A'_L · … · A'_1. Row i of R is how much token i of the output draws on each input
// token; every row sums to 1.
Tensor attention_rollout(const std::vector<Tensor>& layers);

// The row of a [T, T] matrix (T = 1 + patches) that the classifier reads, over the patches only,
// as the patch grid [grid_height, grid_width]: the class token's row (pool "token"), or the mean
// of the patch tokens' rows (pool "avg": the head sees the mean of the patch tokens).
Tensor patch_map(const Tensor& matrix, const VitConfig& config);
// What the class token's column holds in that row (the share not drawn on the grid).
double class_token_share(const Tensor& matrix, const VitConfig& config);
// "the class token" or "the mean of the patch tokens"
std::string pooled_from(const VitConfig& config);

// Sets keep_weights on every block's attention (the next forward keeps [B, H, T, T] per block).
void keep_attention(VisionTransformer& model, bool keep);

struct ImageAttention {
  Tensor rollout;                  // [grid_height, grid_width]: patch_map of the rollout
  double rollout_class_share = 0;  // class_token_share of the rollout
  std::vector<Tensor> last_heads;  // per head of the last block, patch_map of its weights
  int64_t layers = 0;
};
// The maps of image `row` of the model's last forward, which ran with keep_attention(model, true).
// vitk::Error when the weights were not kept or the row is outside the batch.
ImageAttention image_attention(VisionTransformer& model, int64_t row, HeadFusion fusion);

// Cosine similarity of the position embedding of each patch to that of every patch: pos_embed
// [1, 1 + N, d] (the class token's row first, left out) -> [N, N], N = grid_height·grid_width,
// patches in row-major grid order.
Tensor position_similarity(const Tensor& pos_embed, const VitConfig& config);

}  // namespace vitk::vit
