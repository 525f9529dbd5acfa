// Incremental decoding for multi-head attention: one query position at a time against a cache of
// keys and values [B, H, capacity, dh]. The query is a single row per head, so the scores and the
// weighted sum of values are matrix-vector products over the filled prefix of the cache, written
// as plain loops: no copy of the prefix and no oneDNN primitive per prefix length.
#include <algorithm>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/nn/attention_impl.h"

namespace vitk::nn {
namespace {

// Owning [B, H, length, dh] cache storage, reused when the shape already fits so that a decoding
// loop over many batches does not allocate.
void ensure_cache(Tensor& t, const Shape& shape) {
  if (t.empty() || !t.owning() || t.shape() != shape) t = Tensor(shape);
}

}  // namespace

void MultiHeadAttention::prepare_memory(Context& ctx, const Tensor& memory, KVCache& cache) {
  Impl& m = *impl_;
  if (!config_.cross)
    throw Error(m.name +
                ": prepare_memory() is for cross-attention; self-attention fills its "
                "cache in step()");
  const int64_t d = m.d, H = m.heads, dh = m.head_dim;
  if (memory.empty() || memory.dtype() != DType::f32 || memory.rank() != 3 || memory.dim(2) != d ||
      memory.dim(0) < 1 || memory.dim(1) < 1)
    throw Error(m.name + ": memory must be f32 [B, Tk, " + std::to_string(d) + "], not " +
                shape_str(memory.shape()));
  const int64_t B = memory.dim(0), Tk = memory.dim(1);
  Context inference = ctx;
  inference.training = false;
  Tensor kvp = m.kv->forward(inference, memory);  // [B, Tk, 2d]: k then v
  ensure_cache(cache.k, {B, H, Tk, dh});          // [B, H, Tk, dh]
  ensure_cache(cache.v, {B, H, Tk, dh});          // [B, H, Tk, dh]
  attention::split_heads(ops::heads_view(kvp, H, dh, 0), cache.k);
  attention::split_heads(ops::heads_view(kvp, H, dh, 1), cache.v);
  cache.length = Tk;
}

Tensor MultiHeadAttention::step(Context& ctx, const Tensor& x, KVCache& cache, int64_t capacity,
                                const Tensor& key_lengths) {
  Impl& m = *impl_;
  const int64_t d = m.d, H = m.heads, dh = m.head_dim;
  if (x.empty() || x.dtype() != DType::f32 || x.rank() != 3 || x.dim(1) != 1 || x.dim(2) != d ||
      x.dim(0) < 1)
    throw Error(m.name + ": step() takes one position, f32 [B, 1, " + std::to_string(d) +
                "], not " + shape_str(x.shape()));
  const int64_t B = x.dim(0);
  // step() never trains: Linear and Dropout must neither keep activations nor drop.
  Context inference = ctx;
  inference.training = false;
  Tensor qh = inference.alloc({B, H, 1, dh});  // [B, H, 1, dh]
  int64_t length = 0;                          // cached positions the query attends to

  if (config_.cross) {
    if (cache.k.empty() || cache.v.empty())
      throw Error(m.name + ": cross-attention step() before prepare_memory()");
    if (cache.k.rank() != 4 || cache.k.dim(0) != B || cache.k.dim(1) != H || cache.k.dim(3) != dh ||
        cache.v.shape() != cache.k.shape() || cache.length < 1 || cache.length > cache.k.dim(2))
      throw Error(m.name + ": memory cache " + shape_str(cache.k.shape()) + " (length " +
                  std::to_string(cache.length) + ") does not fit x " + shape_str(x.shape()));
    length = cache.length;
    if (!key_lengths.empty()) attention::check_key_lengths(m.name, key_lengths, B, length);
    Tensor qp = m.q->forward(inference, x);  // [B, 1, d]
    attention::split_heads(ops::heads_view(qp, H, dh, 0), qh);
  } else {
    if (cache.k.empty() || (cache.length == 0 && cache.k.shape() != Shape{B, H, capacity, dh})) {
      if (capacity < 1)
        throw Error(m.name + ": KV cache capacity must be >= 1, not " + std::to_string(capacity));
      cache.k = Tensor({B, H, capacity, dh});  // [B, H, capacity, dh]
      cache.v = Tensor({B, H, capacity, dh});  // [B, H, capacity, dh]
      cache.length = 0;
    }
    if (cache.k.rank() != 4 || cache.k.dim(0) != B || cache.k.dim(1) != H || cache.k.dim(3) != dh ||
        cache.v.shape() != cache.k.shape())
      throw Error(m.name + ": KV cache " + shape_str(cache.k.shape()) + " does not fit x " +
                  shape_str(x.shape()));
    const int64_t cap = cache.k.dim(2), pos = cache.length;
    if (pos >= cap)
      throw Error(m.name + ": KV cache capacity " + std::to_string(cap) +
                  " exceeded (step at position " + std::to_string(pos) + ")");
    if (!key_lengths.empty()) attention::check_key_lengths(m.name, key_lengths, B, cap);
    Tensor qkvp = m.qkv->forward(inference, x);  // [B, 1, 3d]: q, k, v
    attention::split_heads(ops::heads_view(qkvp, H, dh, 0), qh);
    const float* src = qkvp.f32();
    float* kc = cache.k.f32();
    float* vc = cache.v.f32();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t at = ((b * H + h) * cap + pos) * dh;
        std::memcpy(kc + at, src + b * 3 * d + d + h * dh, sizeof(float) * dh);
        std::memcpy(vc + at, src + b * 3 * d + 2 * d + h * dh, sizeof(float) * dh);
      }
    cache.length = length = pos + 1;  // causal by construction: the prefix is the past
  }

  Tensor probs = inference.alloc({B, H, 1, length});  // [B, H, 1, L]: scores, then softmax
  attention::score_step(inference, m.score, qh, cache.k, length, probs);
  Tensor additive_mask;  // [B, 1, 1, L]
  if (!key_lengths.empty()) {
    additive_mask = inference.alloc({B, 1, 1, length});
    const int32_t* len = key_lengths.i32();
    float* p = additive_mask.f32();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = len[b]; j < length; ++j)
        p[b * length + j] = -std::numeric_limits<float>::infinity();
  }
  ops::softmax_forward(probs, additive_mask, probs);
  weights_ = keep_weights ? probs.clone() : Tensor();

  // context[b, h] = Σ_j probs[b, h, j] · v[b, h, j]
  Tensor context_h = inference.alloc({B, H, 1, dh});  // [B, H, 1, dh]
  const int64_t cap = cache.v.dim(2);
  const float* pp = probs.f32();
  const float* vp = cache.v.f32();
  float* cp = context_h.f32();
#pragma omp parallel for schedule(static) if (B * H * length * dh > 16384)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    float* out = cp + bh * dh;
    for (int64_t j = 0; j < length; ++j) {
      const float w = pp[bh * length + j];
      if (w == 0.f) continue;
      const float* vr = vp + (bh * cap + j) * dh;
#pragma omp simd
      for (int64_t c = 0; c < dh; ++c) out[c] += w * vr[c];
    }
  }
  Tensor context = inference.alloc({B, 1, d});  // [B, 1, d]
  attention::merge_heads(context_h, ops::heads_view(context, H, dh, 0));
  return m.proj->forward(inference, context);  // [B, 1, d]
}

}  // namespace vitk::nn
