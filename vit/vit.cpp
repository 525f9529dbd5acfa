// The Vision Transformer: forward, hand-written backward and timm's initialisation.
//
// Forward (training keeps what backward needs):
//   patches = extract_patches(images)                    [B, N, K]   K = C·P·P, N = Hp·Wp
// or, with a convolutional stem of n stages (vit.h), channels-last maps m_0 = images,
//   m_i     = gelu(norm_i(windows3x3/s_i(m_(i-1)) · W_iᵀ + b_i))  [B, h_i, w_i, c_i]
//             (h_i = ⌈h_(i-1)/s_i⌉, stride s_i 1 or 2, padding 1)
//   patches = extract_windows(m_n, kernel = stride = P/S)        [B, N, c_n·(P/S)²]  S = ∏ s_i
//   emb     = patches · Wpatchᵀ + b                      [B, N, d]   Wpatch [d, C, P, P] as [d, K]
//   x       = dropout([cls; emb] + pos_embed)            [B, T, d]   T = N + 1
//   x       = [x[:, 0]; x[:, 1 + keep_b]]  (training with patch_drop: keep_b, the K kept patches
//             of image b, a random K of the N in random order)  [B, T', d]  T' = K + 1
//   h       = blocks(x)                                  [B, T', d]  (T' = T without it)
//             with, after each block i of pos_conv_blocks (no patch dropout then),
//             x ← pos_conv_i(x) = x + dwconv3x3_i(patch grid of x)   [B, T, d]
//             and, in the MLP of each block i of ffn_conv_blocks,
//             mlp(x) = fc2(gelu(h + dwconv3x3(patch grid of h))), h = fc1(x)   [B, T, d_ff]
//   pooled  = norm(h[:, 0])          (pool "token")      [B, d]
//           = fc_norm(mean_n h[:, 1 + n])  (pool "avg", n < T' − 1)  [B, d]
//   logits  = pooled · Wheadᵀ + b                        [B, classes]
// The final norm is per row, so for pool "token" only the class-token rows go through it (and
// through the head) in both directions: the other rows of h get exactly zero gradient there.
// Likewise the last block computes only the class token's row of its output: the model passes
// the class token as the block's only query row (nn::QueryRows), so only that row's attention
// output and MLP run, reading every token's key and value.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "vit/vit.h"

namespace vitk::vit {
namespace {

// A depthwise 3×3 convolution of a token sequence's patch grid, added to it (pos_conv_forward):
// tokens x [B, 1 + H·W, c] -> [B, 1 + H·W, c]. The positional convolutions (c = d, between
// blocks) and the MLP convolutions (c = d_ff, a block's MLP hook) are both this layer.
// Registers `prefix`.weight [c, 1, 3, 3] and `prefix`.bias [c] (no weight decay).
class GridConv : public nn::HiddenMixer {
 public:
  GridConv(ParamStore& params, const std::string& prefix, int64_t channels, int64_t grid_height,
           int64_t grid_width)
      : weight_(params.add(prefix + ".weight", {channels, 1, 3, 3})),
        bias_(params.add(prefix + ".bias", {channels}, /*decay=*/false)),
        gh_(grid_height),
        gw_(grid_width) {}

  // x [B, 1, c], the class token alone (the last block's MLP when the model reads only the class
  // token: its query rows), passes unchanged, as the class token does here always.
  Tensor forward(nn::Context& ctx, const Tensor& x) override {
    class_only_ = x.rank() == 3 && x.dim(1) == 1;
    input_ = ctx.training ? x : Tensor();
    if (class_only_) return x;
    Tensor out = ctx.alloc_uninit(x.shape());
    pos_conv_forward(x, gh_, gw_, weight_.value, bias_.value, out);
    return out;
  }

  Tensor backward(nn::Context& ctx, const Tensor& dout) override {
    if (input_.empty()) throw Error(weight_.name + ": backward without a training forward");
    if (class_only_) return dout;
    Tensor dx = ctx.alloc_uninit(dout.shape());
    pos_conv_backward(input_, dout, gh_, gw_, weight_.value, dx, weight_.grad, bias_.grad);
    return dx;
  }

  bool owns(const Parameter* p) const { return p == &weight_ || p == &bias_; }

 private:
  Parameter& weight_;
  Parameter& bias_;
  int64_t gh_, gw_;
  Tensor input_;  // x, kept by a training forward
  bool class_only_ = false;
};

}  // namespace

struct VisionTransformer::Impl {
  Impl(ParamStore& params, const VitConfig& c);

  ParamStore& store;
  size_t first_param = 0, end_param = 0;  // this model's parameters in store.params()
  // Registered in timm's state-dict order: cls_token, pos_embed, patch_embed, blocks, norm or
  // fc_norm, head.
  Parameter* cls_token = nullptr;    // [1, 1, d]
  Parameter* pos_embed = nullptr;    // [1, T, d]
  Parameter* proj_weight = nullptr;  // [d, C, P, P]
  Parameter* proj_bias = nullptr;    // [d]
  struct StemStage {
    Parameter* weight = nullptr;  // [c_i, c_(i-1), 3, 3]
    Parameter* bias = nullptr;    // [c_i]
    std::optional<nn::LayerNorm> norm;
    int64_t in_channels = 0, out_channels = 0, stride = 2;
    Tensor cols;  // kept by a training forward: the 3×3 windows of the stage's input
    Tensor pre;   // kept: the normalised map before GELU [B, h·w, c_i]
  };
  std::vector<StemStage> stem;
  struct PosConv {
    int64_t after_block = 0;
    std::shared_ptr<GridConv> conv;  // d channels
  };
  std::vector<PosConv> pos_convs;                    // in block order
  std::vector<std::shared_ptr<GridConv>> ffn_convs;  // in block order, each set in its block's MLP
  nn::Dropout pos_drop;
  std::vector<nn::EncoderLayer> blocks;
  std::vector<const Parameter*> block_first;  // each block's first parameter (grads_final)
  std::optional<nn::LayerNorm> norm;          // pool "token"
  std::optional<nn::LayerNorm> fc_norm;       // pool "avg"
  std::optional<nn::Linear> head;

  // Kept by a training forward.
  bool trained = false;
  int64_t batch = 0;
  Tensor patches;  // [B, N, K]
  Tensor kept;     // patch dropout: int32 [B, kept_patches()], empty when nothing was dropped
  Tensor forced;   // force_kept_patches(): the next training forward's kept patches
  int64_t last_rows = 0;          // the rows of the last block's output: 1 (the class token) or all
  bool features_trained = false;  // the last training forward was features()
  ops::Precision precision = ops::Precision::f32;
};

VisionTransformer::Impl::Impl(ParamStore& params, const VitConfig& c)
    : store(params), pos_drop(c.dropout) {
  const int64_t d = c.d_model;
  first_param = params.params().size();
  cls_token = &params.add("cls_token", {1, 1, d}, /*decay=*/false);
  pos_embed = &params.add("pos_embed", {1, c.tokens(), d}, /*decay=*/false);
  int64_t in_channels = c.channels;
  stem.resize(c.stem_channels.size());
  for (size_t i = 0; i < stem.size(); ++i) {
    const std::string prefix = "patch_embed.stem." + std::to_string(i);
    const int64_t out_channels = c.stem_channels[i];
    stem[i].weight = &params.add(prefix + ".conv.weight", {out_channels, in_channels, 3, 3});
    stem[i].bias = &params.add(prefix + ".conv.bias", {out_channels}, /*decay=*/false);
    stem[i].norm.emplace(params, prefix + ".norm", out_channels, c.norm_eps);
    stem[i].in_channels = in_channels;
    stem[i].out_channels = out_channels;
    stem[i].stride = c.stem_stage_stride(i);
    in_channels = out_channels;
  }
  proj_weight = &params.add("patch_embed.proj.weight",
                            {d, c.proj_channels(), c.proj_kernel(), c.proj_kernel()});
  proj_bias = &params.add("patch_embed.proj.bias", {d}, /*decay=*/false);
  for (int64_t b : c.pos_conv_blocks) {  // after the patch embedding, as CPVT registers its PEG
    pos_convs.push_back({b, std::make_shared<GridConv>(params, "pos_conv." + std::to_string(b), d,
                                                       c.grid_height(), c.grid_width())});
  }
  blocks.reserve(static_cast<size_t>(c.layers));
  for (int i = 0; i < c.layers; ++i) {
    const std::string prefix = "blocks." + std::to_string(i);
    const size_t first = params.params().size();
    blocks.emplace_back(params, prefix, c.layer_config(i));
    block_first.push_back(&params.params()[first]);
    if (std::find(c.ffn_conv_blocks.begin(), c.ffn_conv_blocks.end(), i) == c.ffn_conv_blocks.end())
      continue;
    ffn_convs.push_back(std::make_shared<GridConv>(params, prefix + ".mlp.dwconv", c.d_ff,
                                                   c.grid_height(), c.grid_width()));
    blocks.back().feed_forward().set_mixer(ffn_convs.back());
  }
  if (c.pool == "token")
    norm.emplace(params, "norm", d, c.norm_eps);
  else
    fc_norm.emplace(params, "fc_norm", d, c.norm_eps);
  if (c.num_classes > 0) head.emplace(params, "head", d, c.num_classes);
  end_param = params.params().size();
}

VisionTransformer::VisionTransformer(ParamStore& params, const VitConfig& config)
    : config_(config) {
  config.validate();
  impl_ = std::make_shared<Impl>(params, config);
}

std::vector<nn::EncoderLayer>& VisionTransformer::blocks() {
  return impl_->blocks;
}

void VisionTransformer::init(ops::Rng& rng) {
  Impl& m = *impl_;
  if (!m.store.finalized()) throw Error("vit: init() needs ParamStore::finalize() first");
  const VitConfig& c = config_;
  // PyTorch's Conv2d default (kaiming_uniform with a = √5): uniform ±1/√fan_in, bias likewise
  // (the stem, the patch projection, the positional and MLP convolutions: fan_in 9, one channel).
  auto uniform = [&](Tensor& t, int64_t fan_in) {
    const float bound = 1.f / std::sqrt(static_cast<float>(fan_in));
    float* v = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i) v[i] = (2.f * rng.uniform() - 1.f) * bound;
  };
  auto stem_stage = [&](const Parameter* p) -> const Impl::StemStage* {
    for (const auto& s : m.stem)
      if (p == s.weight || p == s.bias) return &s;
    return nullptr;
  };
  auto depthwise = [&](const Parameter* p) {  // the positional and MLP convolutions
    for (const auto& pc : m.pos_convs)
      if (pc.conv->owns(p)) return true;
    for (const auto& fc : m.ffn_convs)
      if (fc->owns(p)) return true;
    return false;
  };
  for (size_t i = m.first_param; i < m.end_param; ++i) {
    Parameter& p = m.store.params()[i];
    const bool weight = p.name.size() > 7 && p.name.compare(p.name.size() - 7, 7, ".weight") == 0;
    if (&p == m.cls_token) {
      float* v = p.value.f32();
      for (int64_t j = 0; j < p.numel(); ++j) v[j] = static_cast<float>(rng.normal() * 1e-6);
    } else if (&p == m.proj_weight || &p == m.proj_bias) {
      uniform(p.value, c.proj_channels() * c.proj_kernel() * c.proj_kernel());
    } else if (const Impl::StemStage* s = stem_stage(&p)) {
      uniform(p.value, s->in_channels * 9);  // the stem's convolutions, as PyTorch's Conv2d
    } else if (depthwise(&p)) {
      uniform(p.value, 9);  // depthwise: one input channel per output channel
    } else if (&p == m.pos_embed || (weight && p.shape.size() == 2)) {
      nn::init_trunc_normal(p.value, 0.02f, rng);  // pos_embed and every Linear weight
    } else if (weight) {
      p.value.fill(1.f);  // the 1-D weights are LayerNorm gains
    } else {
      p.value.zero();  // Linear and LayerNorm biases
    }
  }
  m.store.mark_changed();
}

namespace {

// x [B, T, d]: x[b, 0] = cls + pos[0], x[b, 1 + n] = emb[b, n] + pos[1 + n]. Prepending the class
// token costs nothing extra: the position add is a pass over x anyway.
void embed_tokens(const Tensor& emb, const Tensor& cls, const Tensor& pos, Tensor& x) {
  const int64_t B = x.dim(0), T = x.dim(1), d = x.dim(2), N = T - 1;
  const float* e = emb.f32();
  const float* c = cls.f32();
  const float* p = pos.f32();
  float* out = x.f32();
#pragma omp parallel for collapse(2) schedule(static) if (B * T * d > 65536)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* src = t == 0 ? c : e + (b * N + t - 1) * d;
      const float* pt = p + t * d;
      float* dst = out + (b * T + t) * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dst[j] = src[j] + pt[j];
    }
}

// The reverse of embed_tokens, in one pass over dx [B, T, d]: dcls += Σ_b dx[b, 0],
// dpos[t] += Σ_b dx[b, t], demb[b, n] = dx[b, 1 + n] (overwritten, contiguous for the patch
// projection's backward). Sums over b run in a fixed order, whatever the thread count.
void split_token_grads(const Tensor& dx, Tensor& dcls, Tensor& dpos, Tensor& demb) {
  const int64_t B = dx.dim(0), T = dx.dim(1), d = dx.dim(2), N = T - 1;
  const float* g = dx.f32();
  float* gc = dcls.f32();
  float* gp = dpos.f32();
  float* ge = demb.f32();
#pragma omp parallel for schedule(static) if (B * T * d > 65536)
  for (int64_t t = 0; t < T; ++t) {
    float* acc = gp + t * d;
    for (int64_t b = 0; b < B; ++b) {
      const float* src = g + (b * T + t) * d;
      if (t == 0) {
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) gc[j] += src[j];
      } else {
        float* dst = ge + (b * N + t - 1) * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) dst[j] = src[j];
      }
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) acc[j] += src[j];
    }
  }
}

// pooled [B, d] = h[:, 0] (token) or the mean of h[:, 1:] (avg, as timm: the class token is left
// out).
void pool_forward(bool avg, const Tensor& h, Tensor& pooled) {
  const int64_t B = h.dim(0), T = h.dim(1), d = h.dim(2);
  const float* src = h.f32();
  float* out = pooled.f32();
  const float inv = 1.f / static_cast<float>(T - 1);
#pragma omp parallel for schedule(static) if (B * T * d > 65536)
  for (int64_t b = 0; b < B; ++b) {
    float* o = out + b * d;
    const float* hb = src + b * T * d;
    if (!avg) {
      for (int64_t j = 0; j < d; ++j) o[j] = hb[j];
      continue;
    }
    for (int64_t t = 1; t < T; ++t)
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) o[j] += hb[t * d + j];
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) o[j] *= inv;
  }
}

// dh [B, T, d] (zero-filled by the arena) from dpooled [B, d]: row 0 (token) or dpooled / N on
// every patch row (avg).
void pool_backward(bool avg, const Tensor& dpooled, Tensor& dh) {
  const int64_t B = dh.dim(0), T = dh.dim(1), d = dh.dim(2);
  const float* g = dpooled.f32();
  float* out = dh.f32();
  const float inv = 1.f / static_cast<float>(T - 1);
#pragma omp parallel for schedule(static) if (B * T * d > 65536)
  for (int64_t b = 0; b < B; ++b) {
    const float* gb = g + b * d;
    float* ob = out + b * T * d;
    if (!avg) {
      for (int64_t j = 0; j < d; ++j) ob[j] = gb[j];
      continue;
    }
    for (int64_t t = 1; t < T; ++t)
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) ob[t * d + j] = gb[j] * inv;
  }
}

// Patch dropout's draw, as timm's (argsort of one random key per patch, the first K): per image,
// N keys hash(seed, first + b·N + n) from ctx.rng, the patches of the K smallest, in key order.
// One reserve for the batch, so the draw does not depend on the thread count.
Tensor draw_kept_patches(nn::Context& ctx, int64_t B, int64_t N, int64_t K) {
  if (!ctx.rng) throw Error("vit: patch_drop in training needs nn::Context::rng");
  Tensor kept({B, K}, DType::i32);  // owned: kept_patches() outlives the step's arena
  int32_t* out = kept.i32();
  const uint64_t seed = ctx.rng->seed(), first = ctx.rng->reserve(static_cast<uint64_t>(B * N));
  std::vector<std::pair<uint64_t, int32_t>> keys(static_cast<size_t>(N));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < N; ++n)
      keys[static_cast<size_t>(n)] = {
          ops::Rng::hash(seed, first + static_cast<uint64_t>(b * N + n)), static_cast<int32_t>(n)};
    std::partial_sort(keys.begin(), keys.begin() + K, keys.end());
    for (int64_t k = 0; k < K; ++k) out[b * K + k] = keys[static_cast<size_t>(k)].second;
  }
  return kept;
}

// Patch dropout's gather and its adjoint, between all tokens full [B, T, d] and the kept ones
// kept_x [B, 1 + K, d] (the class token's row, then the rows 1 + kept[b, k]): to_kept copies
// full's rows into kept_x; otherwise kept_x's rows go back to their places in full (zero-filled
// by the arena, so the dropped patches' rows stay 0).
void copy_kept_tokens(bool to_kept, const Tensor& kept, Tensor& full, Tensor& kept_x) {
  const int64_t B = full.dim(0), T = full.dim(1), d = full.dim(2), K = kept.dim(1);
  const int32_t* idx = kept.i32();
  float* f = full.f32();
  float* k = kept_x.f32();
#pragma omp parallel for schedule(static) if (B * K * d > 65536)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t <= K; ++t) {
      float* all_row = f + (b * T + (t == 0 ? 0 : 1 + idx[b * K + t - 1])) * d;
      float* kept_row = k + (b * (K + 1) + t) * d;
      const float* src = to_kept ? all_row : kept_row;
      float* dst = to_kept ? kept_row : all_row;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dst[j] = src[j];
    }
}

}  // namespace

const Tensor& VisionTransformer::kept_patches() const {
  return impl_->kept;
}

void VisionTransformer::force_kept_patches(const Tensor& indices) {
  const VitConfig& c = config_;
  const int64_t N = c.patches(), K = c.kept_patches();
  if (c.patch_drop <= 0) throw Error("vit: forced kept patches, but the model's patch_drop is 0");
  if (indices.dtype() != DType::i32 || indices.rank() != 2 || indices.dim(1) != K)
    throw Error("vit: forced kept patches " + shape_str(indices.shape()) + " should be i32 [B, " +
                std::to_string(K) + "] (patch_drop " + std::to_string(c.patch_drop) + " keeps " +
                std::to_string(K) + " of " + std::to_string(N) + ")");
  const int32_t* idx = indices.i32();
  for (int64_t b = 0; b < indices.dim(0); ++b) {
    std::vector<bool> seen(static_cast<size_t>(N), false);
    for (int64_t k = 0; k < K; ++k) {
      const int32_t i = idx[b * K + k];
      if (i < 0 || i >= N || seen[static_cast<size_t>(i)])
        throw Error("vit: forced kept patches: row " + std::to_string(b) + " has " +
                    (i < 0 || i >= N
                         ? "index " + std::to_string(i) + " outside [0, " + std::to_string(N) + ")"
                         : "patch " + std::to_string(i) + " twice"));
      seen[static_cast<size_t>(i)] = true;
    }
  }
  impl_->forced = indices.clone();
}

Tensor VisionTransformer::run_blocks(nn::Context& ctx, const Tensor& images,
                                     bool class_row_allowed) {
  Impl& m = *impl_;
  const VitConfig& c = config_;
  if (images.dtype() != DType::f32 || images.rank() != 4 || images.dim(0) < 1 ||
      images.dim(1) != c.channels || images.dim(2) != c.image_height ||
      images.dim(3) != c.image_width)
    throw Error("vit: images " + shape_str(images.shape()) + " should be f32 [B, " +
                std::to_string(c.channels) + ", " + std::to_string(c.image_height) + ", " +
                std::to_string(c.image_width) + "] (the model's channels and image size)");
  const int64_t B = images.dim(0), N = c.patches(), T = c.tokens(), d = c.d_model;
  const int64_t K = c.proj_channels() * c.proj_kernel() * c.proj_kernel();
  m.trained = false;  // until this forward has succeeded

  Tensor patches = ctx.alloc_uninit({B, N, K});  // [B, N, K]
  if (m.stem.empty()) {
    extract_patches(images, c.patch_size, patches);
  } else {
    Tensor map = images;  // [B, C, H, W], then channels-last [B, h, w, c_i]
    int64_t h = c.image_height, w = c.image_width;
    for (size_t i = 0; i < m.stem.size(); ++i) {
      Impl::StemStage& s = m.stem[i];
      // 3×3, stride 1 or 2, padding 1
      const int64_t ho = (h - 1) / s.stride + 1, wo = (w - 1) / s.stride + 1;
      Tensor cols = ctx.alloc_uninit({B, ho * wo, s.in_channels * 9});
      extract_windows(map, /*channels_last=*/i > 0, 3, s.stride, 1, cols);
      Tensor y = ctx.alloc_uninit({B, ho * wo, s.out_channels});
      ops::linear_forward(cols, nn::weight_of(*s.weight, ctx, {s.out_channels, s.in_channels * 9}),
                          s.bias->value, y, ctx.precision);
      Tensor pre = s.norm->forward(ctx, y);
      Tensor act = ctx.alloc_uninit(pre.shape());
      ops::activation_forward(ops::Activation::gelu, pre, act);
      s.cols = ctx.training ? cols : Tensor();
      s.pre = ctx.training ? pre : Tensor();
      map = act.reshaped({B, ho, wo, s.out_channels});
      h = ho, w = wo;
    }
    extract_windows(map, /*channels_last=*/true, c.proj_kernel(), c.proj_kernel(), 0, patches);
  }
  Tensor emb = ctx.alloc_uninit({B, N, d});  // [B, N, d]
  ops::linear_forward(patches, nn::weight_of(*m.proj_weight, ctx, {d, K}), m.proj_bias->value, emb,
                      ctx.precision);
  Tensor x = ctx.alloc_uninit({B, T, d});  // [B, T, d]
  embed_tokens(emb, m.cls_token->value, m.pos_embed->value, x);
  x = m.pos_drop.forward(ctx, x);
  Tensor kept;  // patch dropout: int32 [B, K]
  if (ctx.training && c.patch_drop > 0) {
    const int64_t Kp = c.kept_patches();
    if (!m.forced.empty()) {
      if (m.forced.dim(0) != B)
        throw Error("vit: forced kept patches for " + std::to_string(m.forced.dim(0)) +
                    " images, the batch has " + std::to_string(B));
      kept = m.forced;
      m.forced = Tensor();
    } else {
      kept = draw_kept_patches(ctx, B, N, Kp);
    }
    Tensor xk = ctx.alloc_uninit({B, Kp + 1, d});  // [B, T', d]
    copy_kept_tokens(/*to_kept=*/true, kept, x, xk);
    x = xk;
  }

  nn::AttentionMask mask;  // every key visible, or all but the query's own (diag_mask)
  mask.diagonal = c.diag_mask;
  // Pool "token" reads only the class token's row of the last block, so that block computes only
  // that row (its keys and values still come from every token): the same logits and gradients
  // for about 3/4 less of the block's products (its qkv projection still runs on every token). Not
  // when a positional convolution follows the block, with the diagonal mask (its rule is per query)
  // or when attention maps read the block's weights.
  const size_t last = m.blocks.size() - 1;
  const bool class_row_only =
      class_row_allowed && c.pool == "token" && !c.diag_mask &&
      !m.blocks[last].attention().keep_weights &&
      (m.pos_convs.empty() || m.pos_convs.back().after_block != static_cast<int64_t>(last));
  // free_block_activations: each block's output goes to `carry`, and what the block allocated
  // after `mark` (its activations and its output) is handed back before the next block.
  // Not when attention maps keep every block's weights (they live in the arena).
  const bool free_blocks = !ctx.training && ctx.free_block_activations &&
                           std::none_of(m.blocks.begin(), m.blocks.end(), [](nn::EncoderLayer& b) {
                             return b.attention().keep_weights;
                           });
  Tensor carry;
  Arena::Mark mark;
  if (free_blocks) {
    carry = ctx.alloc_uninit(x.shape(), x.dtype());
    mark = ctx.arena->mark();
  }
  auto pc = m.pos_convs.begin();
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    // [B, T', d], or [B, 1, d] for the class row alone
    const nn::QueryRows queries =
        i == last && class_row_only ? nn::QueryRows::first(1) : nn::QueryRows::all();
    x = m.blocks[i].forward(ctx, x, mask, queries);
    if (pc != m.pos_convs.end() && pc->after_block == static_cast<int64_t>(i)) {
      x = pc->conv->forward(ctx, x);
      ++pc;
    }
    if (free_blocks) {  // the block's input (in carry from block 1 on) is no longer needed
      Tensor out = Tensor::view(carry.data(), x.shape(), x.dtype());
      out.copy_from(x);
      ctx.arena->rewind(mark);
      x = out;
    }
  }

  m.trained = ctx.training;
  m.precision = ctx.precision;
  m.batch = B;
  m.patches = ctx.training ? patches : Tensor();
  m.kept = kept;
  m.last_rows = x.dim(1);
  return x;
}

Tensor VisionTransformer::forward(nn::Context& ctx, const Tensor& images) {
  Impl& m = *impl_;
  if (!m.head) throw Error("vit: the model has no head (num_classes 0): use features()");
  m.features_trained = false;
  const int64_t d = config_.d_model;
  Tensor x = run_blocks(ctx, images, /*class_row_allowed=*/true);  // [B, T' or 1, d]
  const bool avg = config_.pool == "avg";
  Tensor pooled = ctx.alloc({images.dim(0), d});  // [B, d]
  pool_forward(avg, x, pooled);
  pooled = avg ? m.fc_norm->forward(ctx, pooled) : m.norm->forward(ctx, pooled);
  return m.head->forward(ctx, pooled);  // [B, classes]
}

Tensor VisionTransformer::features(nn::Context& ctx, const Tensor& images) {
  Impl& m = *impl_;
  if (!m.norm) throw Error("vit: features() needs pool \"token\" (its norm covers every token)");
  m.features_trained = false;
  Tensor x = run_blocks(ctx, images, /*class_row_allowed=*/false);  // [B, T', d]
  Tensor y = m.norm->forward(ctx, x);                               // [B, T', d]
  m.features_trained = ctx.training;
  return y;
}

void VisionTransformer::features_backward(nn::Context& ctx, const Tensor& dfeatures,
                                          Tensor* dimages) {
  Impl& m = *impl_;
  if (!m.trained || !m.features_trained)
    throw Error("vit: features_backward without a training features()");
  const Shape want{m.batch, m.last_rows, config_.d_model};
  if (dfeatures.dtype() != DType::f32 || dfeatures.shape() != want)
    throw Error("vit: dfeatures " + shape_str(dfeatures.shape()) + " should be f32 " +
                shape_str(want) + " like the features of the last forward");
  blocks_backward(ctx, m.norm->backward(ctx, dfeatures), dimages);
}

void VisionTransformer::backward(nn::Context& ctx, const Tensor& dlogits, Tensor* dimages) {
  Impl& m = *impl_;
  const VitConfig& c = config_;
  if (!m.trained) throw Error("vit: backward without a training forward");
  const int64_t B = m.batch, d = c.d_model;
  if (dlogits.dtype() != DType::f32 || dlogits.shape() != Shape{B, c.num_classes})
    throw Error("vit: dlogits " + shape_str(dlogits.shape()) + " should be f32 " +
                shape_str({B, c.num_classes}) + " like the logits of the last forward");

  if (m.features_trained) throw Error("vit: backward after features(): use features_backward");
  const bool avg = c.pool == "avg";
  Tensor dpooled = m.head->backward(ctx, dlogits);  // [B, d]
  dpooled = avg ? m.fc_norm->backward(ctx, dpooled) : m.norm->backward(ctx, dpooled);
  // [B, T', d] (T' the tokens the blocks saw) or [B, 1, d] (the class token's row alone), zero
  // where the pooling did not look
  Tensor dx = ctx.alloc({B, m.last_rows, d});
  pool_backward(avg, dpooled, dx);
  blocks_backward(ctx, dx, dimages);
}

void VisionTransformer::blocks_backward(nn::Context& ctx, Tensor dx, Tensor* dimages) {
  Impl& m = *impl_;
  const VitConfig& c = config_;
  const int64_t B = m.batch, N = c.patches(), T = c.tokens(), d = c.d_model;
  const int64_t K = c.proj_channels() * c.proj_kernel() * c.proj_kernel();
  auto pc = m.pos_convs.rbegin();
  for (size_t i = m.blocks.size(); i-- > 0;) {
    if (pc != m.pos_convs.rend() && pc->after_block == static_cast<int64_t>(i)) {
      dx = pc->conv->backward(ctx, dx);
      ++pc;
    }
    dx = m.blocks[i].backward(ctx, dx);
    // Block i, its MLP convolution, the later blocks, the norm and the head are done; the
    // positional convolutions, registered before the blocks, are not claimed here.
    ctx.gradients_final_from(*m.block_first[i]);
  }
  if (!m.kept.empty()) {
    Tensor full = ctx.alloc({B, T, d});  // [B, T, d]: 0 for the dropped patches
    copy_kept_tokens(/*to_kept=*/false, m.kept, full, dx);
    dx = full;
  }
  dx = m.pos_drop.backward(ctx, dx);

  Tensor demb = ctx.alloc_uninit({B, N, d});  // [B, N, d]
  split_token_grads(dx, m.cls_token->grad, m.pos_embed->grad, demb);
  Tensor dw = m.proj_weight->grad.reshaped({d, K});
  ops::linear_backward_weights(m.patches, demb, dw, m.proj_bias->grad, m.precision);
  if (!dimages && m.stem.empty()) return;
  nn::Context at_forward = ctx;
  at_forward.precision = m.precision;
  Tensor dpatches = ctx.alloc_uninit({B, N, K});  // [B, N, K]
  ops::linear_backward_data(demb, nn::weight_of(*m.proj_weight, at_forward, {d, K}), dpatches,
                            m.precision);
  if (m.stem.empty()) {
    *dimages = ctx.alloc_uninit({B, c.channels, c.image_height, c.image_width});
    fold_patches(dpatches, c.patch_size, *dimages);
    return;
  }
  // The stem's map sizes, from the image down.
  std::vector<int64_t> hs{c.image_height}, ws{c.image_width};
  for (size_t i = 0; i < m.stem.size(); ++i)
    hs.push_back((hs.back() - 1) / m.stem[i].stride + 1),
        ws.push_back((ws.back() - 1) / m.stem[i].stride + 1);
  const size_t n = m.stem.size();
  Tensor dmap = ctx.alloc_uninit({B, hs[n], ws[n], c.proj_channels()});
  fold_windows(dpatches, /*channels_last=*/true, c.proj_kernel(), c.proj_kernel(), 0, dmap);
  for (size_t i = n; i-- > 0;) {
    Impl::StemStage& s = m.stem[i];
    Tensor dact = dmap.reshaped(s.pre.shape());  // [B, h·w, c_i]
    ops::activation_backward(ops::Activation::gelu, s.pre, dact, dact);
    Tensor dy = s.norm->backward(ctx, dact);
    Tensor dw_stage = s.weight->grad.reshaped({s.out_channels, s.in_channels * 9});
    ops::linear_backward_weights(s.cols, dy, dw_stage, s.bias->grad, m.precision);
    if (i == 0 && !dimages) break;
    Tensor dcols = ctx.alloc_uninit(s.cols.shape());
    ops::linear_backward_data(
        dy, nn::weight_of(*s.weight, at_forward, {s.out_channels, s.in_channels * 9}), dcols,
        m.precision);
    dmap = i > 0 ? ctx.alloc_uninit({B, hs[i], ws[i], s.in_channels})
                 : ctx.alloc_uninit({B, c.channels, c.image_height, c.image_width});
    fold_windows(dcols, /*channels_last=*/i > 0, 3, s.stride, 1, dmap);
  }
  if (dimages) *dimages = dmap;  // the last fold wrote the images' gradient
}

}  // namespace vitk::vit
