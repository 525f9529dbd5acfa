// The positional convolution (CPVT's PEG, vit/vit.h): a depthwise 3×3 convolution over the patch
// grid, added to the tokens. Channels are the innermost axis of the tokens, so every tap is a
// vector multiply-add over d contiguous floats.
#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ops/profile.h"
#include "vit/vit.h"

namespace vitk::vit {
namespace {

void check_pos_conv(const char* op, const Tensor& x, int64_t gh, int64_t gw, const Tensor& weight,
                    const Tensor& bias, const Tensor& out, const char* out_name) {
  auto fail = [&](const std::string& why) {
    throw Error(std::string(op) + ": tokens " + shape_str(x.shape()) + ", grid " +
                std::to_string(gh) + "x" + std::to_string(gw) + ", weight " +
                shape_str(weight.shape()) + ", bias " + shape_str(bias.shape()) + ", " + out_name +
                " " + shape_str(out.shape()) + ": " + why);
  };
  if (x.dtype() != DType::f32 || weight.dtype() != DType::f32 || bias.dtype() != DType::f32 ||
      out.dtype() != DType::f32)
    fail("all must be f32");
  if (x.rank() != 3) fail("the tokens must be [B, 1 + H·W, d]");
  if (gh < 1 || gw < 1 || x.dim(1) != 1 + gh * gw)
    fail("the tokens should be the class token and the " + std::to_string(gh * gw) +
         " patches of the grid");
  const int64_t d = x.dim(2);
  if (weight.shape() != Shape{d, 1, 3, 3}) fail("weight should be " + shape_str({d, 1, 3, 3}));
  if (bias.shape() != Shape{d}) fail("bias should be " + shape_str({d}));
  if (out.shape() != x.shape()) fail(std::string(out_name) + " should be shaped like the tokens");
}

// weight [d, 1, 3, 3] -> taps [9][d], so that a tap's channels are contiguous.
std::vector<float> tap_major(const Tensor& weight, int64_t d) {
  std::vector<float> taps(static_cast<size_t>(9 * d));
  const float* w = weight.f32();
  for (int64_t c = 0; c < d; ++c)
    for (int64_t k = 0; k < 9; ++k) taps[static_cast<size_t>(k * d + c)] = w[c * 9 + k];
  return taps;
}

// Calls visit(k, q) for each tap k = 3u + v of grid position (i, j) whose neighbour
// (i + u − 1, j + v − 1) lies on the gh × gw grid (padding 1); q is that neighbour's index.
template <class Visit>
inline void for_each_tap(int64_t i, int64_t j, int64_t gh, int64_t gw, Visit&& visit) {
  for (int64_t u = 0; u < 3; ++u) {
    const int64_t y = i + u - 1;
    if (y < 0 || y >= gh) continue;
    for (int64_t v = 0; v < 3; ++v) {
      const int64_t x = j + v - 1;
      if (x >= 0 && x < gw) visit(u * 3 + v, y * gw + x);
    }
  }
}

// out = in + bias (if any) + the depthwise 3×3 convolution of in's patch grid with taps [9][d];
// the class token's row is copied.
void add_grid_conv(const float* in, int64_t B, int64_t T, int64_t d, int64_t gh, int64_t gw,
                   const float* w, const float* bs, float* o) {
#pragma omp parallel for collapse(2) schedule(static) if (B * T * d > 65536)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = -1; i < gh; ++i) {  // -1: the class token's row
      const float* xb = in + b * T * d;
      float* ob = o + b * T * d;
      if (i < 0) {
        std::copy(xb, xb + d, ob);
        continue;
      }
      for (int64_t j = 0; j < gw; ++j) {
        const float* self = xb + (1 + i * gw + j) * d;
        float* dst = ob + (1 + i * gw + j) * d;
#pragma omp simd
        for (int64_t c = 0; c < d; ++c) dst[c] = self[c] + (bs ? bs[c] : 0.f);
        for_each_tap(i, j, gh, gw, [&](int64_t k, int64_t q) {
          const float* src = xb + (1 + q) * d;
          const float* tap = w + k * d;
#pragma omp simd
          for (int64_t c = 0; c < d; ++c) dst[c] += tap[c] * src[c];
        });
      }
    }
}

constexpr int64_t kChannelBlock = 16;

// acc[k][c] += Σ over images and grid positions of dout · x through tap k (k = 9: the bias, Σ
// dout), for the channels c0 .. c0 + n. W > 0 fixes n = W at compile time, so the channel loops
// become whole vector instructions and the local sums stay in registers; W = 0 is the general
// tail.
template <int64_t W>
void accumulate_kernel_grads(const float* g, const float* in, int64_t B, int64_t T, int64_t d,
                             int64_t gh, int64_t gw, int64_t c0, int64_t n,
                             float (&acc)[10][kChannelBlock]) {
  const int64_t width = W > 0 ? W : n;
  float sum[10][kChannelBlock] = {};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < gh; ++i)
      for (int64_t j = 0; j < gw; ++j) {
        const float* gp = g + (b * T + 1 + i * gw + j) * d + c0;
#pragma omp simd
        for (int64_t c = 0; c < width; ++c) sum[9][c] += gp[c];
        for_each_tap(i, j, gh, gw, [&](int64_t k, int64_t q) {
          const float* src = in + (b * T + 1 + q) * d + c0;
          float* a = sum[k];
#pragma omp simd
          for (int64_t c = 0; c < width; ++c) a[c] += gp[c] * src[c];
        });
      }
  for (int64_t k = 0; k < 10; ++k)
    for (int64_t c = 0; c < width; ++c) acc[k][c] += sum[k][c];
}

}  // namespace

void pos_conv_forward(const Tensor& x, int64_t gh, int64_t gw, const Tensor& weight,
                      const Tensor& bias, Tensor& out) {
  check_pos_conv("pos_conv_forward", x, gh, gw, weight, bias, out, "out");
  const int64_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  ops::profile::Scope scope("pos_conv_forward", B * T, d);
  const std::vector<float> taps = tap_major(weight, d);
  add_grid_conv(x.f32(), B, T, d, gh, gw, taps.data(), bias.f32(), out.f32());
}

void pos_conv_backward(const Tensor& x, const Tensor& dout, int64_t gh, int64_t gw,
                       const Tensor& weight, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  check_pos_conv("pos_conv_backward", x, gh, gw, weight, dbias, dout, "dout");
  if (dx.shape() != x.shape() || dx.dtype() != DType::f32 || dweight.shape() != weight.shape() ||
      dweight.dtype() != DType::f32)
    throw Error("pos_conv_backward: dx " + shape_str(dx.shape()) + " and dweight " +
                shape_str(dweight.shape()) + " should be f32 " + shape_str(x.shape()) + " and " +
                shape_str(weight.shape()));
  const int64_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  ops::profile::Scope scope("pos_conv_backward", B * T, d);
  const float* in = x.f32();
  const float* g = dout.f32();
  // dx = dout + the transposed convolution of dout: out[p] reads x[p + (u − 1, v − 1)] through
  // tap (u, v), so x[q] receives dout[q − (u − 1, v − 1)] through it, which is the same
  // convolution with the kernel turned by 180°.
  const std::vector<float> taps = tap_major(weight, d);
  std::vector<float> turned(taps.size());
  for (int64_t k = 0; k < 9; ++k)
    std::copy_n(taps.begin() + k * d, d, turned.begin() + (8 - k) * d);
  {
    ops::profile::Scope dx_scope("pos_conv_backward_data", B * T, d);
    add_grid_conv(g, B, T, d, gh, gw, turned.data(), nullptr, dx.f32());
  }
  // dweight and dbias: each thread owns a block of channels and sums over images and positions
  // in one fixed order.
  const int64_t blocks = (d + kChannelBlock - 1) / kChannelBlock;
  float* gw_out = dweight.f32();
  float* gb_out = dbias.f32();
#pragma omp parallel for schedule(static) if (B * T * d > 65536)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kChannelBlock, n = std::min(kChannelBlock, d - c0);
    float acc[10][kChannelBlock] = {};  // 9 taps, then the bias
    if (n == kChannelBlock)
      accumulate_kernel_grads<kChannelBlock>(g, in, B, T, d, gh, gw, c0, kChannelBlock, acc);
    else
      accumulate_kernel_grads<0>(g, in, B, T, d, gh, gw, c0, n, acc);
    for (int64_t c = 0; c < n; ++c) {
      for (int64_t k = 0; k < 9; ++k) gw_out[(c0 + c) * 9 + k] += acc[k][c];
      gb_out[c0 + c] += acc[9][c];
    }
  }
}

}  // namespace vitk::vit
