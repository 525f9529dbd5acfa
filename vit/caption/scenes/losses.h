#pragma once
// The loss terms of vitk's generated scenes on a captioning model (vit/caption/model.h), outside
// the model: they read what its last training forward kept and hand their gradients to the next
// backward() through CaptionModel::LossHooks, as the model's own attention penalty does.
//
// Guided attention (supervised attention, as Marian's guided alignment for translation): for each
// guide, −λ · log Σ_{i ∈ memory} α_ti of image `row` at decoder position t (the position that
// writes the guided token), α the last decoder layer's cross-attention weights (the mean over its
// heads): the attention there should fall inside the given memory rows (a named article's
// patches).
//
// The article loss, an auxiliary classification of the named articles that reads no attention:
// for each guide, the output layer W reads the mean of the guide's memory rows of image `row` as
// it reads a decoder state, and should write the guide's token (the article's noun):
// λ · −log softmax(W · mean_{i ∈ memory} m_i)[token]. No parameter of its own: each cell's tokens
// learn to say their article in the words the decoder writes.
//
// With a teacher (knowledge distillation, with DeiT's names: Hinton et al., 2015; Touvron et al.,
// 2021), a classifier's logits t for each article (AttentionGuide::teacher, one per class) take a
// share α of each guide's term:
//   (1 − α) · −log p[token] + α · D,  p = softmax(z), z = W · mean_{i ∈ memory} m_i
//   soft: D = τ² · Σ_k q_k · (log q_k − log softmax(z / τ)[tokens_k]),  q = softmax(t / τ)
//   hard: D = −log p[tokens_k*],  k* = argmax_k t_k (the lower k on a tie)
// where tokens_k is the noun of the teacher's class k. The student's softmaxes run over the whole
// vocabulary, so the student also learns to give the other words nothing.
#include <cstdint>
#include <vector>

#include "vit/caption/model.h"

namespace vitk::caption::scenes {

// A word of the batch's captions that names an article, and the article's place in the memory.
struct AttentionGuide {
  int64_t row = 0, position = 0;   // the image's row in the batch, the decoder position there
  std::vector<int32_t> memory;     // memory rows, each < Tm (the article's cell)
  int32_t token = -1;              // the token written there (article_loss)
  const float* teacher = nullptr;  // article_loss with a teacher: its logits for the article
};

// Guided attention over `guides` (the last training forward must have kept the attention
// weights: CaptionModel::keep_attention_weights). Returns the sum over the guides; the next
// backward() adds grad_scale times its gradient.
double guided_attention(const CaptionModel::LossHooks& model,
                        const std::vector<AttentionGuide>& guides, float lambda, float grad_scale);

struct ArticleTeacher {
  std::vector<int32_t> tokens;  // the noun token of each of the teacher's classes
  float alpha = 0.5f;           // the teacher's share, in [0, 1]
  float tau = 1.f;              // soft: the temperature of both softmaxes, > 0
  bool hard = false;
};

// The article loss over `guides`, distilled from `teacher` when given (then every guide needs its
// logits). Returns the sum over the guides; the next backward() adds grad_scale times its
// gradient (to W and the encoder).
double article_loss(const CaptionModel::LossHooks& model, const std::vector<AttentionGuide>& guides,
                    float lambda, float grad_scale, const ArticleTeacher* teacher = nullptr);

}  // namespace vitk::caption::scenes
