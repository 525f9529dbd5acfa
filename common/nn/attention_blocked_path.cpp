// The blocked ("flash") attention path of nn::MultiHeadAttention: ops::blocked_attention_forward
// and _backward visit the keys block by block with an online softmax, reading q, k and v in place
// in the projections, and never hold the weights [B, H, Tq, Tk]. The masks and the dropout draw go
// to the kernel; the backward recomputes the weights from q, k and each query's log-sum-exp.
// attention.cpp chooses it for dot scores without keep_weights or the diagonal mask, where the
// weights would be large or a mask lets it skip blocks of keys.
#include "common/nn/attention_impl.h"

namespace vitk::nn::attention {

void BlockedPath::forward(Context& ctx, const Heads& in, float scale, const AttentionMask& mask,
                          float dropout, const ops::MatrixView& context) {
  const int64_t B = in.q.dims[0], H = in.q.dims[1], Tq = in.q.dims[2], Tk = in.k.dims[2];
  ops::BlockedAttention& o = options_;
  o = ops::BlockedAttention();
  o.scale = scale;
  o.causal = mask.causal;
  if (!mask.key_lengths.empty()) {  // a copy: the caller's tensor may change before backward
    o.key_lengths = ctx.alloc_uninit({B}, DType::i32);
    o.key_lengths.copy_from(mask.key_lengths);
  }
  if (ctx.training && dropout > 0.f) {  // the counters Dropout would reserve for the weights
    o.dropout = dropout;
    o.seed = ctx.rng->seed();
    o.counter = ctx.rng->reserve(static_cast<uint64_t>(B * H * Tq * Tk));
  }
  Tensor lse = ctx.alloc_uninit({B, H, Tq});  // [B, H, Tq]
  ops::blocked_attention_forward(in.q, in.k, in.v, o, lse, context);
  if (ctx.training) {
    context_ = context, lse_ = lse;
  } else {
    context_ = ops::MatrixView(), lse_ = Tensor(), o.key_lengths = Tensor();
  }
}

void BlockedPath::backward(const Heads& in, const Tensor& dcontext, const Heads& grad) const {
  const ops::MatrixView dctx = ops::heads_view(dcontext, in.q.dims[1], in.q.dims[3], 0);
  ops::blocked_attention_backward(in.q, in.k, in.v, context_, lse_, dctx, options_, grad.q, grad.k,
                                  grad.v);
}

}  // namespace vitk::nn::attention
