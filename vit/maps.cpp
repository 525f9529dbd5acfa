// Attention rollout, the maps a classifier reads and position-embedding similarity.
#include "vit/maps.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace vitk::vit {
namespace {

void check_square(const Tensor& m, const char* what) {
  if (m.empty() || m.dtype() != DType::f32 || m.rank() != 2 || m.dim(0) != m.dim(1) || m.dim(0) < 1)
    throw Error(std::string("vit: ") + what + " must be f32 [T, T], not " + shape_str(m.shape()));
}

void check_tokens(const Tensor& m, const VitConfig& config) {
  check_square(m, "an attention matrix");
  if (m.dim(0) != config.tokens())
    throw Error("vit: an attention matrix of " + std::to_string(m.dim(0)) +
                " tokens does not fit the model's " + std::to_string(config.tokens()) + " (1 + " +
                std::to_string(config.grid_height()) + "x" + std::to_string(config.grid_width()) +
                " patches)");
}

// The weights the pooled representation gives each token of `matrix`'s rows: e_0 for the class
// token, 1/N on every patch row for the mean of the patches.
std::vector<double> pooled_row(const Tensor& matrix, const VitConfig& config) {
  const int64_t T = matrix.dim(0);
  const float* m = matrix.f32();
  std::vector<double> row(static_cast<size_t>(T), 0.0);
  if (config.pool == "avg") {
    for (int64_t i = 1; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) row[j] += m[i * T + j] / static_cast<double>(T - 1);
  } else {
    for (int64_t j = 0; j < T; ++j) row[j] = m[j];
  }
  return row;
}

}  // namespace

HeadFusion parse_head_fusion(const std::string& name) {
  if (name == "mean") return HeadFusion::mean;
  if (name == "max") return HeadFusion::max;
  throw UsageError("unknown head fusion '" + name + "' (expected mean or max)");
}

Tensor fuse_heads(const Tensor& weights, HeadFusion fusion) {
  if (weights.empty() || weights.dtype() != DType::f32 || weights.rank() != 3 ||
      weights.dim(0) < 1 || weights.dim(1) != weights.dim(2))
    throw Error("vit: attention weights must be f32 [H, T, T], not " + shape_str(weights.shape()));
  const int64_t H = weights.dim(0), TT = weights.dim(1) * weights.dim(2);
  Tensor out({weights.dim(1), weights.dim(2)});  // [T, T]
  const float* w = weights.f32();
  float* o = out.f32();
  for (int64_t k = 0; k < TT; ++k) {
    double acc = fusion == HeadFusion::max ? -INFINITY : 0.0;
    for (int64_t h = 0; h < H; ++h)
      acc = fusion == HeadFusion::max ? std::max(acc, static_cast<double>(w[h * TT + k]))
                                      : acc + w[h * TT + k];
    o[k] = static_cast<float>(fusion == HeadFusion::max ? acc : acc / static_cast<double>(H));
  }
  return out;
}

Tensor attention_rollout(const std::vector<Tensor>& layers) {
  if (layers.empty()) throw Error("vit: attention rollout needs at least one layer");
  const int64_t T = layers[0].dim(0);
  // R starts as the identity: before any layer each token is only itself.
  std::vector<double> r(static_cast<size_t>(T * T), 0.0), next(r.size()), a(r.size());
  for (int64_t i = 0; i < T; ++i) r[i * T + i] = 1.0;
  for (const Tensor& layer : layers) {
    check_square(layer, "an attention matrix");
    if (layer.dim(0) != T)
      throw Error("vit: attention rollout over layers of different sizes " +
                  shape_str(layers[0].shape()) + " and " + shape_str(layer.shape()));
    const float* w = layer.f32();
    for (int64_t i = 0; i < T; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < T; ++j) {
        a[i * T + j] = 0.5 * w[i * T + j] + (i == j ? 0.5 : 0.0);
        sum += a[i * T + j];
      }
      if (sum > 0)
        for (int64_t j = 0; j < T; ++j) a[i * T + j] /= sum;
    }
    // R ← A'·R: this layer mixes the tokens that already mix the inputs.
    std::fill(next.begin(), next.end(), 0.0);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t k = 0; k < T; ++k) {
        const double aik = a[i * T + k];
        if (aik == 0) continue;
        for (int64_t j = 0; j < T; ++j) next[i * T + j] += aik * r[k * T + j];
      }
    r.swap(next);
  }
  Tensor out({T, T});
  for (int64_t k = 0; k < T * T; ++k) out.f32()[k] = static_cast<float>(r[k]);
  return out;
}

Tensor patch_map(const Tensor& matrix, const VitConfig& config) {
  check_tokens(matrix, config);
  const std::vector<double> row = pooled_row(matrix, config);
  Tensor map({config.grid_height(), config.grid_width()});
  for (int64_t p = 0; p < config.patches(); ++p) map.f32()[p] = static_cast<float>(row[1 + p]);
  return map;
}

double class_token_share(const Tensor& matrix, const VitConfig& config) {
  check_tokens(matrix, config);
  return pooled_row(matrix, config)[0];
}

std::string pooled_from(const VitConfig& config) {
  return config.pool == "avg" ? "the mean of the patch tokens" : "the class token";
}

void keep_attention(VisionTransformer& model, bool keep) {
  for (nn::EncoderLayer& block : model.blocks()) block.attention().keep_weights = keep;
}

ImageAttention image_attention(VisionTransformer& model, int64_t row, HeadFusion fusion) {
  const VitConfig& config = model.config();
  ImageAttention out;
  std::vector<Tensor> fused;
  Tensor last;  // [H, T, T] of the last block
  for (nn::EncoderLayer& block : model.blocks()) {
    const Tensor& w = block.attention().weights();  // [B, H, T, T]
    if (w.empty() || w.rank() != 4)
      throw Error("vit: no attention weights kept (keep_attention(model, true) before forward)");
    if (row < 0 || row >= w.dim(0))
      throw Error("vit: image " + std::to_string(row) + " is outside the last batch of " +
                  std::to_string(w.dim(0)));
    last = w.rows(row, row + 1).reshaped({w.dim(1), w.dim(2), w.dim(3)});
    fused.push_back(fuse_heads(last, fusion));
  }
  const Tensor rollout = attention_rollout(fused);
  out.rollout = patch_map(rollout, config);
  out.rollout_class_share = class_token_share(rollout, config);
  out.layers = static_cast<int64_t>(fused.size());
  const int64_t H = last.dim(0), T = last.dim(1);
  for (int64_t h = 0; h < H; ++h)
    out.last_heads.push_back(patch_map(last.rows(h, h + 1).reshaped({T, T}), config));
  return out;
}

Tensor position_similarity(const Tensor& pos_embed, const VitConfig& config) {
  const int64_t N = config.patches(), d = config.d_model;
  if (pos_embed.dtype() != DType::f32 || pos_embed.numel() != (N + 1) * d)
    throw Error("vit: pos_embed " + shape_str(pos_embed.shape()) + " does not fit [1, " +
                std::to_string(N + 1) + ", " + std::to_string(d) + "]");
  const float* e = pos_embed.f32() + d;  // the patch rows, after the class token's
  std::vector<double> norm(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    double s = 0;
    for (int64_t k = 0; k < d; ++k) s += static_cast<double>(e[i * d + k]) * e[i * d + k];
    norm[i] = std::sqrt(s);
  }
  Tensor sim({N, N});
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < d; ++k) dot += static_cast<double>(e[i * d + k]) * e[j * d + k];
      const double denom = norm[i] * norm[j];
      sim.f32()[i * N + j] = static_cast<float>(denom > 0 ? dot / denom : 0.0);
    }
  return sim;
}

}  // namespace vitk::vit
