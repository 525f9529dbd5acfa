#pragma once
// The ops compiled once per instruction-set level. Their files (VITK_KERNEL_SOURCES in
// CMakeLists.txt) are built three times, for x86-64, x86-64-v3 (AVX2, FMA) and x86-64-v4
// (AVX-512), each time inside its own namespace, vitk::ops::isa_baseline, isa_avx2 or isa_avx512
// (the compile definition VITK_ISA_NAMESPACE). The op of ops.h with the same name (dispatch.cpp)
// calls the copy of the level kernel_isa() chose. Each level's objects are linked into one
// relocatable object whose only global symbols are its namespace's, so an inline function or a
// template compiled for AVX-512 there can never be the copy the rest of vitk calls.
//
// X(return type, name, (parameters), (arguments)): one line per function of those files that
// the rest of vitk calls. An overload is a line of its own.
#include <string>

#include "common/ops/ops.h"

#define VITK_KERNEL_FUNCTIONS(X)                                                                   \
  X(Activation, parse_activation, (const std::string& name), (name))                               \
  X(const char*, activation_name, (Activation a), (a))                                             \
  X(void, activation_forward, (Activation a, const Tensor& x, Tensor& y), (a, x, y))               \
  X(void, activation_backward, (Activation a, const Tensor& x, const Tensor& dy, Tensor& dx),      \
    (a, x, dy, dx))                                                                                \
  X(void, activation_backward_rounded,                                                             \
    (Activation a, const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dsum),                   \
    (a, x, dy, dx, dsum))                                                                          \
  X(void, activation_backward_rounded,                                                             \
    (Activation a, const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dsum, Tensor& dx_t),     \
    (a, x, dy, dx, dsum, dx_t))                                                                    \
  X(void, softmax_forward, (const Tensor& x, const Tensor& mask, Tensor& y), (x, mask, y))         \
  X(void, softmax_backward, (const Tensor& y, const Tensor& dy, Tensor& dx), (y, dy, dx))          \
  X(void, layernorm_forward,                                                                       \
    (const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y, Tensor& mean, \
     Tensor& rstd),                                                                                \
    (x, gamma, beta, eps, y, mean, rstd))                                                          \
  X(void, layernorm_backward,                                                                      \
    (const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,                 \
     const Tensor& dy, Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor& add),              \
    (x, gamma, mean, rstd, dy, dx, dgamma, dbeta, add))                                            \
  X(bool, fused_attention_supported, (const MatrixView& q, const MatrixView& k), (q, k))           \
  X(bool, fused_attention_supported, (int64_t head_dim), (head_dim))                               \
  X(void, fused_attention_forward,                                                                 \
    (const MatrixView& q, const MatrixView& k, const MatrixView& v, float scale, Tensor& probs,    \
     const MatrixView& context),                                                                   \
    (q, k, v, scale, probs, context))                                                              \
  X(void, fused_attention_backward,                                                                \
    (const MatrixView& q, const MatrixView& k, const MatrixView& v, const Tensor& probs,           \
     const MatrixView& dcontext, float scale, const MatrixView& dq, const MatrixView& dk,          \
     const MatrixView& dv),                                                                        \
    (q, k, v, probs, dcontext, scale, dq, dk, dv))                                                 \
  X(bool, blocked_attention_supported,                                                             \
    (const MatrixView& q, const MatrixView& k, const MatrixView& v), (q, k, v))                    \
  X(void, blocked_attention_forward,                                                               \
    (const MatrixView& q, const MatrixView& k, const MatrixView& v,                                \
     const BlockedAttention& options, Tensor& lse, const MatrixView& context),                     \
    (q, k, v, options, lse, context))                                                              \
  X(void, blocked_attention_backward,                                                              \
    (const MatrixView& q, const MatrixView& k, const MatrixView& v, const MatrixView& context,     \
     const Tensor& lse, const MatrixView& dcontext, const BlockedAttention& options,               \
     const MatrixView& dq, const MatrixView& dk, const MatrixView& dv),                            \
    (q, k, v, context, lse, dcontext, options, dq, dk, dv))                                        \
  X(int, int8_activation_levels, (), ())                                                           \
  X(QuantizedWeight, quantize_weight, (const Tensor& w), (w))                                      \
  X(QuantizedWeight, quantized_weight, (Tensor q, Tensor scales),                                  \
    (std::move(q), std::move(scales)))                                                             \
  X(void, linear_forward_int8, (const Tensor& x, QuantizedWeight& w, const Tensor& b, Tensor& y),  \
    (x, w, b, y))                                                                                  \
  X(CrossEntropyStats, cross_entropy_forward,                                                      \
    (const Tensor& logits, const Tensor& targets, float label_smoothing, int ignore_index),        \
    (logits, targets, label_smoothing, ignore_index))                                              \
  X(void, cross_entropy_backward,                                                                  \
    (const Tensor& logits, const Tensor& targets, float label_smoothing, int ignore_index,         \
     float scale, Tensor& dlogits),                                                                \
    (logits, targets, label_smoothing, ignore_index, scale, dlogits))                              \
  X(CrossEntropyStats, cross_entropy_forward_backward,                                             \
    (const Tensor& logits, const Tensor& targets, float label_smoothing, int ignore_index,         \
     float scale, Tensor& dlogits),                                                                \
    (logits, targets, label_smoothing, ignore_index, scale, dlogits))                              \
  X(CrossEntropyStats, soft_cross_entropy_forward, (const Tensor& logits, const Tensor& targets),  \
    (logits, targets))                                                                             \
  X(void, soft_cross_entropy_backward,                                                             \
    (const Tensor& logits, const Tensor& targets, float scale, Tensor& dlogits),                   \
    (logits, targets, scale, dlogits))                                                             \
  X(void, add, (const Tensor& a, const Tensor& b, Tensor& y), (a, b, y))                           \
  X(void, accumulate, (Tensor & y, const Tensor& x, float alpha), (y, x, alpha))                   \
  X(double, l2_norm, (const Tensor& t), (t))                                                       \
  X(double, clip_grad_norm, (Tensor & grads, double max_norm), (grads, max_norm))                  \
  X(void, round_to_bf16, (const Tensor& src, Tensor& dst), (src, dst))                             \
  X(void, round_to_bf16, (const float* src, uint16_t* dst, int64_t n), (src, dst, n))

// The declarations of one level's copies.
#define VITK_DECLARE_KERNEL_FUNCTION(ret, name, params, args) ret name params;
#define VITK_DECLARE_KERNEL_FUNCTIONS(level)          \
  namespace vitk::ops::level {                        \
  VITK_KERNEL_FUNCTIONS(VITK_DECLARE_KERNEL_FUNCTION) \
  }

VITK_DECLARE_KERNEL_FUNCTIONS(isa_baseline)
VITK_DECLARE_KERNEL_FUNCTIONS(isa_avx2)
VITK_DECLARE_KERNEL_FUNCTIONS(isa_avx512)
