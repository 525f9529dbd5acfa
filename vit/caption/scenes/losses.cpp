// Guided attention and the article loss (vit/caption/scenes/losses.h) on the captioning model's
// loss hooks.
#include "vit/caption/scenes/losses.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "common/error.h"
#include "common/ops/ops.h"

namespace vitk::caption::scenes {

double guided_attention(const CaptionModel::LossHooks& model,
                        const std::vector<AttentionGuide>& guides, float lambda, float grad_scale) {
  Tensor& dw = model.attention_grad("guided_attention");
  const Tensor& w = model.attention("guided_attention");  // [B, H, Tt, Tm]
  const Tensor& lengths = model.target_lengths();
  const int64_t B = w.dim(0), H = w.dim(1), Tt = w.dim(2), Tm = w.dim(3);
  double total = 0;
  for (const AttentionGuide& g : guides) {
    if (g.row < 0 || g.row >= B || g.position < 0 || g.position >= lengths.i32()[g.row])
      throw Error("caption: guided_attention at row " + std::to_string(g.row) + ", position " +
                  std::to_string(g.position) + ": outside the batch's captions");
    double mass = 0;  // Σ_{i ∈ memory} α_ti, α the mean over the heads
    for (const int32_t i : g.memory) {
      if (i < 0 || i >= Tm)
        throw Error("caption: guided_attention memory row " + std::to_string(i) + " of " +
                    std::to_string(Tm));
      for (int64_t h = 0; h < H; ++h)
        mass += w.f32()[((g.row * H + h) * Tt + g.position) * Tm + i] / static_cast<double>(H);
    }
    mass = std::max(mass, 1e-30);
    total -= lambda * std::log(mass);
    // d/dα_hti of −λ log(mass) is −λ / (H · mass) for i in the set, 0 elsewhere
    const float d = static_cast<float>(-lambda / (static_cast<double>(H) * mass) * grad_scale);
    for (const int32_t i : g.memory)
      for (int64_t h = 0; h < H; ++h) dw.f32()[((g.row * H + h) * Tt + g.position) * Tm + i] += d;
  }
  return total;
}

namespace {

// log softmax(z / tau) of one row of V logits, in double.
void log_softmax_row(const float* z, int64_t V, double tau, std::vector<double>& out) {
  out.resize(static_cast<size_t>(V));
  double top = -std::numeric_limits<double>::infinity(), sum = 0;
  for (int64_t v = 0; v < V; ++v) top = std::max(top, static_cast<double>(z[v]) / tau);
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(z[v]) / tau - top);
  const double log_sum = top + std::log(sum);
  for (int64_t v = 0; v < V; ++v)
    out[static_cast<size_t>(v)] = static_cast<double>(z[v]) / tau - log_sum;
}

// The teacher's term of article_loss on the cells' logits [G, V]: returns the sum over the rows
// of α · D and ADDS scale times its gradient to dlogits.
double teacher_term(const Tensor& logits, const std::vector<AttentionGuide>& guides,
                    const ArticleTeacher& teacher, float scale, Tensor& dlogits) {
  const int64_t G = logits.dim(0), V = logits.dim(1);
  const int64_t K = static_cast<int64_t>(teacher.tokens.size());
  const double alpha = teacher.alpha, tau = teacher.tau;
  if (teacher.hard) {  // α · −log p[token of argmax t]: the cross-entropy of those tokens
    Tensor targets({G}, DType::i32), d({G, V});
    for (int64_t j = 0; j < G; ++j) {
      const float* t = guides[static_cast<size_t>(j)].teacher;
      targets.i32()[j] = teacher.tokens[static_cast<size_t>(std::max_element(t, t + K) - t)];
    }
    const double mean = ops::cross_entropy_forward_backward(
                            logits, targets, 0.f, -100,
                            static_cast<float>(alpha) * scale * static_cast<float>(G), d)
                            .loss;
    ops::accumulate(dlogits, d);
    return alpha * mean * static_cast<double>(G);
  }
  // α τ² KL(q ‖ softmax(z/τ) at the tokens), q = softmax(t/τ): gradient α τ (softmax(z/τ) − q)
  std::vector<double> ls, q(static_cast<size_t>(K));
  double total = 0;
  for (int64_t j = 0; j < G; ++j) {
    const float* t = guides[static_cast<size_t>(j)].teacher;
    float* dz = dlogits.f32() + j * V;
    log_softmax_row(logits.f32() + j * V, V, tau, ls);
    double top = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t k = 0; k < K; ++k) top = std::max(top, static_cast<double>(t[k]) / tau);
    for (int64_t k = 0; k < K; ++k) sum += std::exp(static_cast<double>(t[k]) / tau - top);
    std::vector<double> d(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v)
      d[static_cast<size_t>(v)] = alpha * tau * std::exp(ls[static_cast<size_t>(v)]);
    for (int64_t k = 0; k < K; ++k) {
      const double log_q = static_cast<double>(t[k]) / tau - top - std::log(sum);
      const size_t tok = static_cast<size_t>(teacher.tokens[static_cast<size_t>(k)]);
      total += alpha * tau * tau * std::exp(log_q) * (log_q - ls[tok]);
      d[tok] -= alpha * tau * std::exp(log_q);
    }
    for (int64_t v = 0; v < V; ++v) dz[v] += static_cast<float>(scale * d[static_cast<size_t>(v)]);
  }
  return total;
}

// Each guide's cell as one row of `pooled` [G, d]: the mean of its memory rows of `memory`
// [B, Tm, d]; and the noun it should write, nouns [G]. Checks the guides (and that each has the
// teacher's logits when there is a teacher).
void pool_cells(const Tensor& memory, int64_t V, const std::vector<AttentionGuide>& guides,
                bool teacher, Tensor& pooled, Tensor& nouns) {
  const int64_t B = memory.dim(0), Tm = memory.dim(1), d = memory.dim(2);
  for (int64_t j = 0; j < static_cast<int64_t>(guides.size()); ++j) {
    const AttentionGuide& g = guides[static_cast<size_t>(j)];
    if (g.row < 0 || g.row >= B || g.token < 0 || g.token >= V || g.memory.empty())
      throw Error("caption: article_loss guide at row " + std::to_string(g.row) + ", token " +
                  std::to_string(g.token) + ", " + std::to_string(g.memory.size()) +
                  " memory rows: outside the batch or the vocabulary, or no cell");
    float* mean = pooled.f32() + j * d;
    const float n = static_cast<float>(g.memory.size());
    for (const int32_t i : g.memory) {
      if (i < 0 || i >= Tm)
        throw Error("caption: article_loss memory row " + std::to_string(i) + " of " +
                    std::to_string(Tm));
      const float* row = memory.f32() + (g.row * Tm + i) * d;
      for (int64_t k = 0; k < d; ++k) mean[k] += row[k] / n;
    }
    nouns.i32()[j] = g.token;
    if (teacher && !g.teacher)
      throw Error("caption: article_loss guide " + std::to_string(j) + " has no teacher logits");
  }
}

void check_teacher(const ArticleTeacher& teacher, int64_t V) {
  if (teacher.tokens.empty() || !(teacher.alpha >= 0.f && teacher.alpha <= 1.f) ||
      !(teacher.tau > 0.f) || !std::isfinite(teacher.tau))
    throw Error("caption: article_loss teacher needs classes, alpha in [0, 1] and tau > 0");
  for (const int32_t t : teacher.tokens)
    if (t < 0 || t >= V)
      throw Error("caption: article_loss teacher token " + std::to_string(t) + " of " +
                  std::to_string(V));
}

}  // namespace

double article_loss(const CaptionModel::LossHooks& model, const std::vector<AttentionGuide>& guides,
                    float lambda, float grad_scale, const ArticleTeacher* teacher) {
  model.require_training_forward("article_loss");
  if (guides.empty()) return 0;
  const Tensor& memory = model.memory();    // [B, Tm, d]
  const Tensor& W = model.output_weight();  // [V, d]
  const int64_t Tm = memory.dim(1), d = memory.dim(2), V = W.dim(0);
  const int64_t G = static_cast<int64_t>(guides.size());
  Tensor pooled({G, d}), nouns({G}, DType::i32);  // zero-filled
  pool_cells(memory, V, guides, teacher != nullptr, pooled, nouns);
  if (teacher) check_teacher(*teacher, V);
  // The output layer on the cells, and the cross-entropy of their nouns: λ times the sum over the
  // guides, G times the mean that the cross-entropy returns and differentiates.
  Tensor logits({G, V}), dlogits({G, V}), dpooled({G, d}), no_bias;
  ops::linear_forward(pooled, W, Tensor(), logits);
  // With a teacher the nouns' share is 1 − α, and the teacher's term adds the rest.
  const float scale = lambda * grad_scale, nouns_share = teacher ? 1.f - teacher->alpha : 1.f;
  double loss_sum =
      nouns_share * static_cast<double>(G) *
      ops::cross_entropy_forward_backward(logits, nouns, 0.f, -100,
                                          nouns_share * scale * static_cast<float>(G), dlogits)
          .loss;
  if (teacher) loss_sum += teacher_term(logits, guides, *teacher, scale, dlogits);
  Tensor& doutput = model.output_weight_grad();
  Tensor& dmemory = model.memory_grad();
  ops::linear_backward(pooled, W, dlogits, dpooled, doutput, no_bias);  // dW +=
  for (int64_t j = 0; j < G; ++j) {  // each memory row of a cell gets 1/n of its mean's gradient
    const AttentionGuide& g = guides[static_cast<size_t>(j)];
    const float n = static_cast<float>(g.memory.size());
    for (const int32_t i : g.memory) {
      float* row = dmemory.f32() + (g.row * Tm + i) * d;
      for (int64_t k = 0; k < d; ++k) row[k] += dpooled.f32()[j * d + k] / n;
    }
  }
  return lambda * loss_sum;
}

}  // namespace vitk::caption::scenes
