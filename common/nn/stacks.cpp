// Encoder and Decoder: N layers "<name>.layers.<i>" and an optional final LayerNorm "<name>.norm",
// plus the decoder's incremental path (one target position at a time with per-layer caches).
#include <cstring>
#include <memory>
#include <utility>

#include "common/error.h"
#include "common/nn/nn.h"

namespace vitk::nn {

namespace {

std::string layer_name(const std::string& name, int i) {
  return name + ".layers." + std::to_string(i);
}

void check_layers(const std::string& name, int layers) {
  if (layers < 1)
    throw Error(name + ": a stack needs at least one layer, got " + std::to_string(layers));
}

}  // namespace

// ---- Encoder ----

struct Encoder::Impl {
  std::string name;
  // Filled once in the constructor (reserved, so never reallocated); the layers are handles to
  // their own state, so the vector's storage moving would not matter either.
  std::vector<EncoderLayer> layers;
  std::vector<const Parameter*> first;  // each layer's first parameter (Context::grads_final)
  std::unique_ptr<LayerNorm> norm;      // null without final_norm
};

Encoder::Encoder(ParamStore& params, const std::string& name, const LayerConfig& config, int layers,
                 bool final_norm)
    : impl_(std::make_shared<Impl>()) {
  check_layers(name, layers);
  impl_->name = name;
  impl_->layers.reserve(static_cast<size_t>(layers));
  for (int i = 0; i < layers; ++i) {
    const size_t first = params.params().size();
    impl_->layers.emplace_back(params, layer_name(name, i), config);
    impl_->first.push_back(&params.params()[first]);
  }
  if (final_norm)
    impl_->norm =
        std::make_unique<LayerNorm>(params, name + ".norm", config.d_model, config.norm_eps);
}

Tensor Encoder::forward(Context& ctx, const Tensor& x, const AttentionMask& mask) {
  Tensor h = x;  // [B, T, d]
  for (auto& layer : impl_->layers) h = layer.forward(ctx, h, mask);
  return impl_->norm ? impl_->norm->forward(ctx, h) : h;
}

Tensor Encoder::backward(Context& ctx, const Tensor& dy) {
  Tensor d = impl_->norm ? impl_->norm->backward(ctx, dy) : dy;
  for (size_t i = impl_->layers.size(); i-- > 0;) {
    d = impl_->layers[i].backward(ctx, d);
    ctx.gradients_final_from(*impl_->first[i]);
  }
  return d;
}

std::vector<EncoderLayer>& Encoder::layers() {
  return impl_->layers;
}

// ---- Decoder ----

struct Decoder::Impl {
  std::string name;
  std::vector<DecoderLayer> layers;
  std::vector<const Parameter*> first;  // each layer's first parameter (Context::grads_final)
  std::unique_ptr<LayerNorm> norm;
};

Decoder::Decoder(ParamStore& params, const std::string& name, const LayerConfig& config, int layers,
                 bool final_norm)
    : impl_(std::make_shared<Impl>()) {
  check_layers(name, layers);
  impl_->name = name;
  impl_->layers.reserve(static_cast<size_t>(layers));
  for (int i = 0; i < layers; ++i) {
    const size_t first = params.params().size();
    impl_->layers.emplace_back(params, layer_name(name, i), config);
    impl_->first.push_back(&params.params()[first]);
  }
  if (final_norm)
    impl_->norm =
        std::make_unique<LayerNorm>(params, name + ".norm", config.d_model, config.norm_eps);
}

Tensor Decoder::forward(Context& ctx, const Tensor& x, const Tensor& memory,
                        const AttentionMask& self_mask, const AttentionMask& memory_mask) {
  Tensor h = x;  // [B, Tt, d]
  for (auto& layer : impl_->layers) h = layer.forward(ctx, h, memory, self_mask, memory_mask);
  return impl_->norm ? impl_->norm->forward(ctx, h) : h;
}

Tensor Decoder::backward(Context& ctx, const Tensor& dy, Tensor* dmemory) {
  Tensor d = impl_->norm ? impl_->norm->backward(ctx, dy) : dy;
  // Every layer attends to the same memory: its gradient is the sum over the layers. The first
  // layer's d(memory) (fresh from the arena) becomes the sum.
  Tensor dmem_sum;
  for (size_t i = impl_->layers.size(); i-- > 0;) {
    Tensor dmem;
    d = impl_->layers[i].backward(ctx, d, &dmem);
    ctx.gradients_final_from(*impl_->first[i]);
    if (dmem_sum.empty())
      dmem_sum = dmem;
    else
      ops::accumulate(dmem_sum, dmem);
  }
  if (dmemory) *dmemory = dmem_sum;
  return d;
}

void Decoder::start(Context& ctx, const Tensor& memory, const Tensor& source_lengths,
                    int64_t capacity, State& state) {
  if (capacity < 1)
    throw Error(impl_->name + ": incremental decoding needs a capacity of at least one position");
  // Emptied, not freed: a cache whose storage already has the right shape is reused, so decoding
  // batch after batch with one State does not allocate.
  const size_t n = impl_->layers.size();
  state.self.resize(n);
  state.memory.resize(n);
  for (auto& cache : state.self) cache.length = 0;
  for (auto& cache : state.memory) cache.length = 0;
  state.source_lengths = source_lengths;
  state.capacity = capacity;
  for (size_t i = 0; i < n; ++i) impl_->layers[i].prepare_memory(ctx, memory, state.memory[i]);
}

Tensor Decoder::step(Context& ctx, const Tensor& x, State& state) {
  if (state.self.size() != impl_->layers.size() || state.memory.size() != impl_->layers.size())
    throw Error(impl_->name + ": step() before start()");
  Tensor h = x;  // [B, 1, d]
  for (size_t i = 0; i < impl_->layers.size(); ++i)
    h = impl_->layers[i].step(ctx, h, state.self[i], state.memory[i], state.source_lengths,
                              state.capacity);
  return impl_->norm ? impl_->norm->forward(ctx, h) : h;
}

int64_t Decoder::State::batch() const {
  return memory.empty() || memory[0].k.empty() ? 0 : memory[0].k.dim(0);
}

int64_t Decoder::State::position() const {
  return self.empty() ? 0 : self[0].length;
}

namespace {

// dst[i] = src[rows[i]] for the first `length` positions of each row of a cache tensor
// [B, H, capacity, dh]; dst [rows.size(), H, capacity, dh]. Positions past `length` are left as
// they are: nothing reads them before a step writes them.
void gather_rows(const Tensor& src, const std::vector<int64_t>& rows, int64_t length, Tensor& dst) {
  const int64_t H = src.dim(1), cap = src.dim(2), dh = src.dim(3);
  const int64_t n = static_cast<int64_t>(rows.size());
  const float* s = src.f32();
  float* d = dst.f32();
#pragma omp parallel for schedule(static) if (n * H * length * dh > 65536)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(d + (i * H + h) * cap * dh, s + (rows[static_cast<size_t>(i)] * H + h) * cap * dh,
                  sizeof(float) * static_cast<size_t>(length * dh));
}

}  // namespace

void Decoder::State::reorder(const std::vector<int64_t>& rows, bool with_memory) {
  const int64_t B = batch();
  if (B == 0 || memory.size() != self.size())
    throw Error("Decoder::State::reorder: the state was never started (call Decoder::start())");
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n < 1) throw Error("Decoder::State::reorder: no rows");
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i] < 0 || rows[i] >= B)
      throw Error("Decoder::State::reorder: row " + std::to_string(rows[i]) + " at index " +
                  std::to_string(i) + " is outside the batch of " + std::to_string(B));
  if (!with_memory && n != B)
    throw Error("Decoder::State::reorder: " + std::to_string(n) + " rows for a batch of " +
                std::to_string(B) + "; changing the batch size needs memory = true");

  // Self-attention caches: the filled prefix into a spare buffer of the new shape, then swap, so
  // that a decoding loop reorders without allocating.
  spare.resize(2 * self.size());
  for (size_t l = 0; l < self.size(); ++l) {
    KVCache& c = self[l];
    if (c.k.empty() || c.length == 0) continue;  // nothing cached yet: step() allocates
    if (c.k.dim(0) != B)
      throw Error("Decoder::State::reorder: self-attention cache " + shape_str(c.k.shape()) +
                  " of layer " + std::to_string(l) + " does not hold " + std::to_string(B) +
                  " rows");
    const Shape shape{n, c.k.dim(1), c.k.dim(2), c.k.dim(3)};
    for (int kv = 0; kv < 2; ++kv) {
      Tensor& buffer = spare[2 * l + static_cast<size_t>(kv)];
      Tensor& cache = kv == 0 ? c.k : c.v;
      if (buffer.empty() || buffer.shape() != shape) buffer = Tensor(shape);
      gather_rows(cache, rows, c.length, buffer);
      std::swap(buffer, cache);
    }
  }
  if (!with_memory) return;
  for (KVCache& c : memory) {
    const Shape shape{n, c.k.dim(1), c.k.dim(2), c.k.dim(3)};
    Tensor k(shape), v(shape);
    gather_rows(c.k, rows, c.length, k);
    gather_rows(c.v, rows, c.length, v);
    c.k = k;
    c.v = v;
  }
  if (!source_lengths.empty()) {
    if (source_lengths.dtype() != DType::i32 || source_lengths.numel() != B)
      throw Error("Decoder::State::reorder: source_lengths " + shape_str(source_lengths.shape()) +
                  " is not i32 [" + std::to_string(B) + "]");
    Tensor lengths({n}, DType::i32);
    for (int64_t i = 0; i < n; ++i)
      lengths.i32()[i] = source_lengths.i32()[rows[static_cast<size_t>(i)]];
    source_lengths = lengths;
  }
}

std::vector<DecoderLayer>& Decoder::layers() {
  return impl_->layers;
}

}  // namespace vitk::nn
