// The fused attention path of nn::MultiHeadAttention: ops::fused_attention_forward and _backward
// run the products and the softmax of one (batch, head) in cache, reading q, k and v in place in
// the projections (attention.cpp chooses it: dot scores, no mask, no dropout, f32, d_head 64 on
// AVX-512). The weights [B, H, Tq, Tk] are still written, for the backward and keep_weights.
#include "common/nn/attention_impl.h"

namespace vitk::nn::attention {

Tensor FusedPath::forward(Context& ctx, const Heads& in, float scale,
                          const ops::MatrixView& context) {
  const int64_t B = in.q.dims[0], H = in.q.dims[1], Tq = in.q.dims[2], Tk = in.k.dims[2];
  Tensor probs = ctx.alloc_uninit({B, H, Tq, Tk});  // [B, H, Tq, Tk]
  ops::fused_attention_forward(in.q, in.k, in.v, scale, probs, context);
  scale_ = scale;
  probs_ = ctx.training ? probs : Tensor();
  return probs;
}

void FusedPath::backward(const Heads& in, const Tensor& dcontext, const Heads& grad) const {
  const ops::MatrixView dctx = ops::heads_view(dcontext, in.q.dims[1], in.q.dims[3], 0);
  ops::fused_attention_backward(in.q, in.k, in.v, probs_, dctx, scale_, grad.q, grad.k, grad.v);
}

}  // namespace vitk::nn::attention
