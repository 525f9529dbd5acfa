// The Transformer blocks: FeedForward, EncoderLayer and DecoderLayer, each with its forward and its
// hand-written backward. Both arrangements of PyTorch's TransformerEncoderLayer and
// TransformerDecoderLayer are supported:
//   post-norm (norm_first=False, the 2017 paper): y = norm(x + drop(f(x)))
//   pre-norm  (norm_first=True, ViT):             y = x + drop(f(norm(x)))
// Encoder layers also take stochastic depth (timm's DropPath): in training, each residual branch
// drop(f(.)) of each sample is multiplied by keep/(1 − p), keep ~ Bernoulli(1 − p).
#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/nn/nn.h"

namespace vitk::nn {

// ---- FeedForward ----

FeedForward::FeedForward(ParamStore& params, const std::string& name, int64_t d_model, int64_t d_ff,
                         ops::Activation activation, float dropout)
    : fc1_(params, name + ".fc1", d_model, d_ff),
      fc2_(params, name + ".fc2", d_ff, d_model),
      activation_(activation),
      dropout_(dropout) {}

Tensor FeedForward::forward(Context& ctx, const Tensor& x) {
  Tensor h = fc1_.forward(ctx, x);          // [.., d_ff]
  if (mixer_) h = mixer_->forward(ctx, h);  // pre-activation
  if (ctx.training) {
    h_ = h;  // backward needs f'(h)
    precision_ = ctx.precision;
    // With bf16 products and no dropout here, fc2 reads (and keeps) f(h) rounded to bf16: the
    // activation writes it so.
    const bool rounded = ctx.precision == ops::Precision::bf16 && dropout_.p == 0.f;
    Tensor a = ctx.alloc_uninit(h.shape(), rounded ? DType::bf16 : DType::f32);
    ops::activation_forward(activation_, h, a);
    return fc2_.forward(ctx, dropout_.forward(ctx, a));  // [.., d]
  }
  // Inference keeps nothing, so the activation can overwrite its input.
  h_ = Tensor();
  ops::activation_forward(activation_, h, h);
  return fc2_.forward(ctx, dropout_.forward(ctx, h));
}

Tensor FeedForward::backward(Context& ctx, const Tensor& dy) {
  if (h_.empty()) throw Error(fc1_.weight.name + ": backward without a training forward");
  // Both backwards return tensors of their own (fresh from the arena), so f'(h) can be applied in
  // place.
  Tensor da = dropout_.backward(ctx, fc2_.backward(ctx, dy));  // [.., d_ff]
  if (!mixer_ && precision_ == ops::Precision::bf16 && fc1_.bias) {
    // fc1's products read f'(h) ⊙ da rounded to bf16, as it is and transposed, and its bias
    // sums it: one pass makes all three.
    const int64_t d_ff = h_.dim(-1);
    Tensor g = ctx.alloc_uninit(h_.shape(), DType::bf16);
    Tensor g_t = ctx.alloc_uninit({d_ff, h_.numel() / d_ff}, DType::bf16);
    ops::activation_backward_rounded(activation_, h_, da, g, fc1_.bias->grad, g_t);
    return fc1_.backward_rounded(ctx, g, g_t);  // [.., d]
  }
  ops::activation_backward(activation_, h_, da, da);
  if (mixer_) da = mixer_->backward(ctx, da);
  return fc1_.backward(ctx, da);  // [.., d]
}

namespace {

// Stochastic depth of one residual branch: per sample b, scale[b] = keep_b / (1 − p) with
// keep_b ~ Bernoulli(1 − p), one draw per sample from ctx.rng, the same rule as ops::dropout.
// Applied while the branch is added to the residual stream, so that it costs no extra pass.
class DropPath {
 public:
  DropPath(std::string layer, float p) : layer_(std::move(layer)), p_(p) {
    if (!(p >= 0.f && p < 1.f))
      throw Error(layer_ + ": drop_path must be in [0, 1), not " + std::to_string(p));
  }

  // y = x + scale[b] · s per sample (plain x + s when not applied); x, s, y [B, T, d].
  void add(Context& ctx, const Tensor& x, const Tensor& s, Tensor& y) {
    applied_ = ctx.training && p_ > 0.f;
    if (!applied_) {
      ops::add(x, s, y);
      return;
    }
    if (!ctx.rng) throw Error(layer_ + ": drop_path in training needs nn::Context::rng");
    const int64_t B = x.dim(0), n = x.numel() / B;
    scale_ = ctx.alloc_uninit({B});  // [B]
    float* scale = scale_.f32();
    const uint64_t seed = ctx.rng->seed(), first = ctx.rng->reserve(static_cast<uint64_t>(B));
    const float kept = 1.f / (1.f - p_);
    for (int64_t b = 0; b < B; ++b)
      scale[b] = ops::Rng::to_uniform(ops::Rng::hash(seed, first + static_cast<uint64_t>(b))) >= p_
                     ? kept
                     : 0.f;
    const float* xp = x.f32();
    const float* sp = s.f32();
    float* yp = y.f32();
#pragma omp parallel for schedule(static) if (B * n > 65536)
    for (int64_t b = 0; b < B; ++b) {
      const float k = scale[b];
      const float* xb = xp + b * n;
      const float* sb = sp + b * n;
      float* yb = yp + b * n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) yb[i] = xb[i] + k * sb[i];
    }
  }

  // d(branch) from d(y): dy itself when not applied, else a fresh tensor dy ⊙ scale[b].
  Tensor backward(Context& ctx, const Tensor& dy) {
    if (!applied_) return dy;
    const int64_t B = dy.dim(0), n = dy.numel() / B;
    Tensor ds = ctx.alloc_uninit(dy.shape());
    const float* scale = scale_.f32();
    const float* g = dy.f32();
    float* out = ds.f32();
#pragma omp parallel for schedule(static) if (B * n > 65536)
    for (int64_t b = 0; b < B; ++b) {
      const float k = scale[b];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[b * n + i] = k * g[b * n + i];
    }
    return ds;
  }

 private:
  std::string layer_;
  float p_;
  bool applied_ = false;
  Tensor scale_;  // [B]: 0 or 1/(1 − p), kept for backward
};

// x [B, T, d] -> its first R positions [B, R, d] (x itself when R = T).
Tensor first_rows(Context& ctx, const Tensor& x, int64_t R) {
  const int64_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  if (R == T) return x;
  Tensor y = ctx.alloc_uninit({B, R, d});
  for (int64_t b = 0; b < B; ++b) std::copy_n(x.f32() + b * T * d, R * d, y.f32() + b * R * d);
  return y;
}

// dx [B, T, d] += g [B, R, d] on dx's first R positions.
void add_first_rows(Tensor& dx, const Tensor& g) {
  const int64_t B = dx.dim(0), T = dx.dim(1), R = g.dim(1), d = dx.dim(2);
  if (R == T) return ops::accumulate(dx, g);
  for (int64_t b = 0; b < B; ++b) {
    float* out = dx.f32() + b * T * d;
    const float* in = g.f32() + b * R * d;
#pragma omp simd
    for (int64_t i = 0; i < R * d; ++i) out[i] += in[i];
  }
}

// One sublayer with its layer norm, its residual dropout, its stochastic depth and its residual
// connection, in either arrangement. The sublayer itself is passed in as a function, so that the
// same code serves self-attention, cross-attention, the feed-forward block and the incremental
// decoding path.
class Residual {
 public:
  Residual(ParamStore& params, const std::string& layer, const std::string& norm_name,
           const LayerConfig& config, float drop_path = 0.f)
      : norm_(params, layer + "." + norm_name, config.d_model, config.norm_eps),
        dropout_(config.dropout),
        drop_path_(layer, drop_path),
        pre_norm_(config.pre_norm) {}

  // x [B, T, d]; sublayer: [B, T, d] -> [B, R, d], the first R positions (R = T but for an
  // encoder layer's query rows), so the residual adds x's first R rows.
  template <typename Sublayer>
  Tensor forward(Context& ctx, const Tensor& x, Sublayer&& sublayer) {
    if (pre_norm_) {
      // Every sublayer starts with a Linear on the norm's output: with bf16 products in training
      // that product reads it rounded, so the norm writes it so.
      const bool rounded = ctx.training && ctx.precision == ops::Precision::bf16;
      Tensor s = dropout_.forward(
          ctx, sublayer(norm_.forward(ctx, x, rounded ? DType::bf16 : DType::f32)));
      const Tensor xr = first_rows(ctx, x, s.dim(1));
      Tensor y = ctx.alloc_uninit(s.shape());
      drop_path_.add(ctx, xr, s, y);
      return y;
    }
    Tensor s = dropout_.forward(ctx, sublayer(x));
    const Tensor xr = first_rows(ctx, x, s.dim(1));
    Tensor r = ctx.alloc_uninit(s.shape());  // x + s, kept by the norm for its backward
    drop_path_.add(ctx, xr, s, r);
    return norm_.forward(ctx, r);
  }

  // sublayer_backward: d(sublayer output) -> d(sublayer input), a fresh tensor (every layer's
  // backward allocates its result), so the residual gradient can be added into it.
  // dy [B, R, d] -> dx [B, T, d].
  template <typename SublayerBackward>
  Tensor backward(Context& ctx, const Tensor& dy, SublayerBackward&& sublayer_backward) {
    if (pre_norm_) {
      Tensor ds = drop_path_.backward(ctx, dy);
      Tensor dn = sublayer_backward(dropout_.backward(ctx, ds));  // d(norm output) [B, T, d]
      if (dn.dim(1) == dy.dim(1))  // d(norm input) + dy, the residual's share, in the norm's pass
        return norm_.backward(ctx, dn, dy);
      Tensor dx = norm_.backward(ctx, dn);
      add_first_rows(dx, dy);
      return dx;
    }
    Tensor dr = norm_.backward(ctx, dy);  // d(x + s)
    Tensor dx = sublayer_backward(dropout_.backward(ctx, drop_path_.backward(ctx, dr)));
    add_first_rows(dx, dr);
    return dx;
  }

 private:
  LayerNorm norm_;
  Dropout dropout_;
  DropPath drop_path_;
  bool pre_norm_;
};

AttentionConfig attention_config(const LayerConfig& c, bool cross) {
  AttentionConfig a;
  a.d_model = c.d_model;
  a.heads = c.heads;
  a.score = c.score;
  a.additive_dim = c.additive_dim;
  a.dropout = c.attention_dropout;
  a.cross = cross;
  return a;
}

void check_input(const std::string& layer, const char* what, const Tensor& x, int64_t d_model) {
  if (x.rank() != 3 || x.dim(2) != d_model || x.dtype() != DType::f32)
    throw Error(layer + ": " + what + " " + shape_str(x.shape()) + " is not f32 [B, T, " +
                std::to_string(d_model) + "]");
}

}  // namespace

// ---- EncoderLayer ----

// Members are declared in the order their parameters are registered: norm1, attn, norm2, mlp.
struct EncoderLayer::Impl {
  Impl(ParamStore& params, const std::string& prefix, const LayerConfig& c)
      : name(prefix),
        d_model(c.d_model),
        attn_block(params, prefix, "norm1", c, c.drop_path),
        attn(params, prefix + ".attn", attention_config(c, /*cross=*/false)),
        mlp_block(params, prefix, "norm2", c, c.drop_path),
        mlp(params, prefix + ".mlp", c.d_model, c.d_ff, c.activation, c.dropout) {}

  std::string name;
  int64_t d_model;
  Residual attn_block;
  MultiHeadAttention attn;
  Residual mlp_block;
  FeedForward mlp;
  bool trained = false;  // the last forward kept its activations
};

EncoderLayer::EncoderLayer(ParamStore& params, const std::string& name, const LayerConfig& config)
    : impl_(std::make_shared<Impl>(params, name, config)) {}

Tensor EncoderLayer::forward(Context& ctx, const Tensor& x, const AttentionMask& mask,
                             QueryRows queries) {
  Impl& m = *impl_;
  check_input(m.name, "input", x, m.d_model);
  m.trained = ctx.training;
  // Only the attention's queries shrink: everything after it is per position.
  Tensor h = m.attn_block.forward(
      ctx, x, [&](const Tensor& t) { return m.attn.forward(ctx, t, Tensor(), mask, queries); });
  return m.mlp_block.forward(ctx, h, [&](const Tensor& t) { return m.mlp.forward(ctx, t); });
}

Tensor EncoderLayer::backward(Context& ctx, const Tensor& dy) {
  Impl& m = *impl_;
  if (!m.trained) throw Error(m.name + ": backward without a training forward");
  Tensor dh =
      m.mlp_block.backward(ctx, dy, [&](const Tensor& d) { return m.mlp.backward(ctx, d); });
  return m.attn_block.backward(ctx, dh, [&](const Tensor& d) { return m.attn.backward(ctx, d); });
}

MultiHeadAttention& EncoderLayer::attention() {
  return impl_->attn;
}

FeedForward& EncoderLayer::feed_forward() {
  return impl_->mlp;
}

// ---- DecoderLayer ----

// Stochastic depth is an encoder-layer setting (nn.h): the decoder's branches ignore drop_path.
struct DecoderLayer::Impl {
  Impl(ParamStore& params, const std::string& prefix, const LayerConfig& c)
      : name(prefix),
        d_model(c.d_model),
        self_block(params, prefix, "norm1", c),
        self_attn(params, prefix + ".self_attn", attention_config(c, /*cross=*/false)),
        cross_block(params, prefix, "norm2", c),
        cross_attn(params, prefix + ".cross_attn", attention_config(c, /*cross=*/true)),
        mlp_block(params, prefix, "norm3", c),
        mlp(params, prefix + ".mlp", c.d_model, c.d_ff, c.activation, c.dropout) {}

  std::string name;
  int64_t d_model;
  Residual self_block;
  MultiHeadAttention self_attn;
  Residual cross_block;
  MultiHeadAttention cross_attn;
  Residual mlp_block;
  FeedForward mlp;
  bool trained = false;
};

DecoderLayer::DecoderLayer(ParamStore& params, const std::string& name, const LayerConfig& config)
    : impl_(std::make_shared<Impl>(params, name, config)) {}

Tensor DecoderLayer::forward(Context& ctx, const Tensor& x, const Tensor& memory,
                             const AttentionMask& self_mask, const AttentionMask& memory_mask) {
  Impl& m = *impl_;
  check_input(m.name, "input", x, m.d_model);
  check_input(m.name, "memory", memory, m.d_model);
  if (memory.dim(0) != x.dim(0))
    throw Error(m.name + ": memory " + shape_str(memory.shape()) + " and input " +
                shape_str(x.shape()) + " differ in batch size");
  m.trained = ctx.training;
  Tensor h = m.self_block.forward(
      ctx, x, [&](const Tensor& t) { return m.self_attn.forward(ctx, t, Tensor(), self_mask); });
  h = m.cross_block.forward(
      ctx, h, [&](const Tensor& t) { return m.cross_attn.forward(ctx, t, memory, memory_mask); });
  return m.mlp_block.forward(ctx, h, [&](const Tensor& t) { return m.mlp.forward(ctx, t); });
}

Tensor DecoderLayer::backward(Context& ctx, const Tensor& dy, Tensor* dmemory) {
  Impl& m = *impl_;
  if (!m.trained) throw Error(m.name + ": backward without a training forward");
  Tensor dh =
      m.mlp_block.backward(ctx, dy, [&](const Tensor& d) { return m.mlp.backward(ctx, d); });
  // The attention computes d(memory) anyway; a caller that does not want it passes nullptr.
  Tensor dmem;
  dh = m.cross_block.backward(
      ctx, dh, [&](const Tensor& d) { return m.cross_attn.backward(ctx, d, &dmem); });
  if (dmemory) *dmemory = dmem;
  return m.self_block.backward(ctx, dh,
                               [&](const Tensor& d) { return m.self_attn.backward(ctx, d); });
}

void DecoderLayer::prepare_memory(Context& ctx, const Tensor& memory, KVCache& memory_cache) {
  Impl& m = *impl_;
  if (ctx.training) throw Error(m.name + ": prepare_memory() is for inference only");
  check_input(m.name, "memory", memory, m.d_model);
  m.cross_attn.prepare_memory(ctx, memory, memory_cache);
}

Tensor DecoderLayer::step(Context& ctx, const Tensor& x, KVCache& self_cache,
                          const KVCache& memory_cache, const Tensor& source_lengths,
                          int64_t capacity) {
  Impl& m = *impl_;
  if (ctx.training) throw Error(m.name + ": step() is for inference only");
  check_input(m.name, "step input", x, m.d_model);
  if (x.dim(1) != 1)
    throw Error(m.name + ": step() takes one position, got " + shape_str(x.shape()));
  // The inference forwards of the norms drop whatever a training forward kept.
  m.trained = false;
  // MultiHeadAttention::step() takes a mutable cache for both kinds; cross-attention only reads
  // the keys and values prepare_memory() wrote, so the const_cast does not modify the cache.
  KVCache& memory_kv = const_cast<KVCache&>(memory_cache);
  Tensor h = m.self_block.forward(ctx, x, [&](const Tensor& t) {
    return m.self_attn.step(ctx, t, self_cache, capacity);  // [B, 1, d]
  });
  h = m.cross_block.forward(ctx, h, [&](const Tensor& t) {
    return m.cross_attn.step(ctx, t, memory_kv, memory_kv.length, source_lengths);
  });
  return m.mlp_block.forward(ctx, h, [&](const Tensor& t) { return m.mlp.forward(ctx, t); });
}

MultiHeadAttention& DecoderLayer::cross_attention() {
  return impl_->cross_attn;
}

}  // namespace vitk::nn
