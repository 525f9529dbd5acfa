// Position encodings: the paper's fixed sinusoids and a learned table.
#include <cmath>

#include "common/error.h"
#include "common/nn/nn.h"
#include "common/ops/ops.h"

namespace vitk::nn {

// Column c uses the frequency of its pair, 1 / 10000^(2i/d) with 2i = c rounded down to even, so
// that an odd d_model ends in a sine column without a cosine partner. Computed in double: at
// positions of a few thousand, pos · frequency in float would already be off in the third digit.
Tensor sinusoidal_positions(int64_t length, int64_t d_model) {
  if (length < 0 || d_model < 1)
    throw Error("sinusoidal_positions: bad shape [" + std::to_string(length) + ", " +
                std::to_string(d_model) + "]");
  Tensor pe({length, d_model});  // [T, d]
  float* p = pe.f32();
  for (int64_t c = 0; c < d_model; c += 2) {
    const double inv_freq =
        std::pow(10000.0, -static_cast<double>(c) / static_cast<double>(d_model));
    for (int64_t pos = 0; pos < length; ++pos) {
      const double angle = static_cast<double>(pos) * inv_freq;
      p[pos * d_model + c] = static_cast<float>(std::sin(angle));
      if (c + 1 < d_model) p[pos * d_model + c + 1] = static_cast<float>(std::cos(angle));
    }
  }
  return pe;
}

Tensor embed_tokens(Context& ctx, const Tensor& ids, const Tensor& table, float scale,
                    const Tensor& positions, int64_t first) {
  const int64_t B = ids.dim(0), T = ids.numel() / B, d = table.dim(1);
  if (first < 0 || first + T > positions.dim(0) || positions.dim(1) != d)
    throw Error("embed_tokens: positions " + std::to_string(first) + ".." +
                std::to_string(first + T) + " of a table " + shape_str(positions.shape()));
  Tensor x = ctx.alloc({B, T, d});  // [B, T, d]
  ops::embedding_forward(ids, table, x, scale);
  const float* pe = positions.f32() + first * d;
  float* out = x.f32();
#pragma omp parallel for schedule(static) if (B * T * d > 65536)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      float* row = out + (b * T + t) * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) row[j] += pe[t * d + j];
    }
  return x;
}

// No weight decay on the table, as timm's pos_embed.
LearnedPositions::LearnedPositions(ParamStore& params, const std::string& name, int64_t length,
                                   int64_t d_model)
    : table(params.add(name, {length, d_model}, /*decay=*/false)) {}

namespace {

void check_positions(const Parameter& table, const Tensor& x) {
  if (x.rank() != 3 || x.dim(1) > table.shape[0] || x.dim(2) != table.shape[1] ||
      x.dtype() != DType::f32)
    throw Error(table.name + ": input " + shape_str(x.shape()) + " does not fit the table " +
                shape_str(table.shape) + " (want f32 [B, T <= " + std::to_string(table.shape[0]) +
                ", " + std::to_string(table.shape[1]) + "])");
}

}  // namespace

Tensor LearnedPositions::forward(Context& ctx, const Tensor& x) {
  check_positions(table, x);
  const int64_t B = x.dim(0), n = x.dim(1) * x.dim(2);  // rows [0, T) of the table are contiguous
  Tensor y = ctx.alloc_uninit(x.shape());               // [B, T, d]
  const float* xs = x.f32();
  const float* ts = table.value.f32();
  float* ys = y.f32();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i) ys[b * n + i] = xs[b * n + i] + ts[i];
  return y;
}

Tensor LearnedPositions::backward(Context& /*ctx*/, const Tensor& dy) {
  check_positions(table, dy);
  const int64_t B = dy.dim(0), n = dy.dim(1) * dy.dim(2);
  float* g = table.grad.f32();
  const float* d = dy.f32();
  // Batch-outer so that the sum over b for each table entry is in a fixed order.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i) g[i] += d[b * n + i];
  return dy;
}

}  // namespace vitk::nn
