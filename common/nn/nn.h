#pragma once
// The Transformer core shared by the Vision Transformer and the translation model: layers with a
// forward and a hand-written backward each, no autograd (tests/README.md: how each is checked).
//
// Conventions
// - A layer registers its parameters in a ParamStore under a PyTorch-style prefix, e.g.
//   "encoder.layers.3" + ".attn.qkv.weight"; names follow timm's ViT blocks (norm1, attn.qkv,
//   attn.proj, norm2, mlp.fc1, mlp.fc2), so timm checkpoints map one to one.
// - forward() takes its outputs and the activations backward() needs from ctx.arena; the caller
//   resets the arena once per step. With ctx.training == false nothing is kept and dropout is off.
// - A layer object runs once per step: backward() uses what the last forward() kept.
// - backward() takes d(output), returns d(input) (a fresh arena tensor) and ADDS into parameter
//   gradients.
// - Activations are f32, [B, T, d] row-major.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/ops/ops.h"
#include "common/params.h"
#include "common/tensor.h"

namespace vitk::nn {

// Which computation a MultiHeadAttention forward should run for the dot and scaled-dot scores: a
// request that the layer honours where it can (AttentionPath is what it ran).
enum class AttentionKernel {
  automatic,     // the faster per shape, blocked when [B, H, Tq, Tk] would be large
  materialized,  // the weights [B, H, Tq, Tk] in memory: the fused kernel where it applies
  blocked,       // ops::blocked_attention_*: memory O(T·d), never the [Tq, Tk] matrix
  reference,     // the plain path alone (tests compare the others with it)
};

// The path one MultiHeadAttention forward ran, chosen once from the request, the score, the mask,
// dropout, the precision and the shape, and recorded for its backward.
enum class AttentionPath {
  reference,  // the weights in memory: score, mask, softmax, dropout and products, any score
  fused,      // one kernel per (batch, head) in cache: dot scores, no mask, no dropout, f32
  blocked,    // flash-style, never the [Tq, Tk] weights: dot scores, f32
};
const char* attention_path_name(AttentionPath p);  // "reference" | "fused" | "blocked"

struct Context {
  bool training = false;
  Arena* arena = nullptr;   // required
  ops::Rng* rng = nullptr;  // required when training with dropout > 0
  // Of the matrix products (Linear, attention); everything else is f32 either way. With bf16 the
  // products read weights packed once per parameter version (Parameter::version) and round
  // activations to bf16; accumulation, outputs, norms, softmax, GELU and losses stay f32.
  ops::Precision precision = ops::Precision::f32;
  // Inference (training == false) at f32: read the weights of the products where oneDNN's blocked
  // layout is faster (ops::prefer_packed_f32) from their packed forms, made once per parameter
  // version. Off by default; the commands that only run a loaded model turn it on.
  bool packed_weights = false;
  // Inference only: the Linear layers multiply int8 weights, quantised once per output channel,
  // by activations quantised per row on the fly (ops::linear_forward_int8); `precision` then
  // applies to the other products (attention's, the patch embedding, a tied output layer). Set
  // with set_inference_precision.
  bool int8_weights = false;
  // A model loaded to run at one precision (classify, eval, translate): each Linear weight is kept
  // in the one form its products read, its f32 value released (release_value) once that form is
  // made: quantised with int8_weights, packed for oneDNN at f32 (where packed_weights and
  // ops::prefer_packed_f32 choose it) and bf16. Off when the model also runs at another precision.
  bool one_copy_of_weights = false;
  // Inference that reads only a model's output (classify, eval): a model may rewind the arena
  // (Arena::rewind) after each block, once it has copied the block's output out, so the arena
  // holds one block's activations rather than every block's. Ignored while attention layers keep
  // their weights (attention maps) and in training.
  bool free_block_activations = false;
  // Tests and benchmarks force one. Blocked applies only to dot and scaled-dot scores without
  // keep_weights (materialized otherwise) and refuses the diagonal mask.
  AttentionKernel attention_kernel = AttentionKernel::automatic;
  // Set by a data-parallel training step (common/train/step.h): a model's backward calls
  // gradients_final_from(p) when every gradient at p's arena offset and above is final for this
  // step, so that summing those over the ranks starts while backward goes on. A model may call it
  // only where that holds for its registration order (the stacks do after each layer: the layers
  // after it, registered later, are done); tests check it (GradReducer's verify mode).
  std::function<void(size_t offset)> grads_final = {};
  void gradients_final_from(const Parameter& first) const {
    if (grads_final) grads_final(first.offset);
  }
  Tensor alloc(Shape shape);  // from arena, zero-filled (throws vitk::Error if there is none)
  // From arena, not initialised: for outputs that are overwritten entirely (Arena::alloc_uninit).
  Tensor alloc_uninit(Shape shape, DType dtype = DType::f32);
};

// ctx's products for an inference command's --precision: f32 and bf16 as they are; int8 sets
// int8_weights and runs the other products in bf16 where the CPU has it (ops::bf16_supported),
// else in f32.
void set_inference_precision(Context& ctx, ops::Precision precision);

// p's int8 form (Parameter::quantized), quantised from p.value on first use and whenever p.version
// has changed since; vitk::Error naming p for a value ops::quantize_weight refuses.
ops::QuantizedWeight& quantized_of(Parameter& p);

// A parameter as the linear products take it: its value (viewed as `as` when given, e.g. a
// convolution weight [d, C, P, P] as [d, C·P·P]), its version and, where ctx's precision or
// packed_weights asks for packed forms, its cache (made on first use).
ops::Weight weight_of(Parameter& p, const Context& ctx, const Shape& as = {});

// ---- Basic layers ----
class Linear {
 public:
  // weight [out, in] (truncated-normal init is the model's job), bias [out] (no weight decay).
  Linear(ParamStore& params, const std::string& name, int64_t in_features, int64_t out_features,
         bool with_bias = true);
  // [..., in] -> [..., out]; x f32, or bf16 already rounded for bf16 products. y is f32, or with
  // bf16 products `out` bf16: rounded as the product writes it (for a reader that rounds it).
  Tensor forward(Context& ctx, const Tensor& x, DType out = DType::f32);
  Tensor backward(Context& ctx, const Tensor& dy);
  // After a bf16 forward: the backward from dy already rounded to bf16 whose bias gradient the
  // caller has added (ops::activation_backward_rounded), so the products alone; dy_t, if not
  // empty, is dy's transpose (bf16 [out, rows]), which the weight gradient reads.
  Tensor backward_rounded(Context& ctx, const Tensor& dy, const Tensor& dy_t = Tensor());
  Parameter& weight;
  Parameter* bias = nullptr;
  int64_t in, out;

 private:
  // dx, and the weight's gradient and db's (empty: none), from the kept input.
  Tensor backward_products(Context& ctx, const Tensor& dy, Tensor db,
                           const Tensor& dy_t = Tensor());
  // The int8 product of an inference forward (Context::int8_weights) into y (f32 or bf16).
  void forward_int8(Context& ctx, const Tensor& x, Tensor& y);
  Tensor x_;  // the input kept for backward: f32, or its bf16 rounding with bf16 products
  ops::Precision precision_ = ops::Precision::f32;  // of the last forward
};

class LayerNorm {
 public:
  LayerNorm(ParamStore& params, const std::string& name, int64_t dim, float eps = 1e-5f);
  // x f32; out bf16: the result rounded to bf16 as it is written, for a bf16 product that reads it.
  Tensor forward(Context& ctx, const Tensor& x, DType out = DType::f32);
  Tensor backward(Context& ctx, const Tensor& dy);
  // backward(dy) + add in one pass (a pre-norm block's residual gradient).
  Tensor backward(Context& ctx, const Tensor& dy, const Tensor& add);
  Parameter& weight;  // 1 after init_defaults()
  Parameter& bias;
  float eps;

 private:
  Tensor x_, mean_, rstd_;
};

class Dropout {
 public:
  explicit Dropout(float probability = 0.f) : p(probability) {}
  Tensor forward(Context& ctx, const Tensor& x);  // identity (same tensor) unless training, p > 0
  Tensor backward(Context& ctx, const Tensor& dy);
  float p;

 private:
  Tensor mask_;
  bool applied_ = false;
};

// Sets every parameter named "*norm*.weight" to 1 and every other parameter to 0 after
// ParamStore::finalize(); models then draw their weights (vitk::nn::init_trunc_normal).
void init_defaults(ParamStore& params);
// N(0, std) redrawn outside [a, b], as timm's trunc_normal_(t, std=std, a=-2, b=2): the bounds
// are absolute, so with std = 0.02 (timm's ViT init) the cut is at 100σ and changes nothing.
void init_trunc_normal(Tensor& t, float std, ops::Rng& rng, double a = -2.0, double b = 2.0);

// ---- Attention ----
// Which keys each query may see: padding by per-sequence key lengths, causal, or both. Masked
// scores get −inf before the softmax; a query that sees no key at all gets zero weights (and a
// zero output), never NaN.
struct AttentionMask {
  Tensor key_lengths;   // i32 [B]; empty: every key is valid
  bool causal = false;  // query i sees key j only if j <= i + (Tk − Tq)
  // Query i does not see key i + (Tk − Tq), its own position in self-attention: the diagonal
  // masking of LSA (Lee et al., 2021, "Vision Transformer for Small-Size Datasets"). Not taken by
  // the blocked kernel or incremental decoding.
  bool diagonal = false;
  // Whether any rule above hides a key: the kernels that take no mask check this alone, so a new
  // rule is added here once.
  bool hides_keys() const { return causal || diagonal || !key_lengths.empty(); }
};

enum class Score {
  scaled_dot,  // q·k / √d_head (default)
  dot,         // q·k
  general,     // Luong: qᵀ W k, W [d_head, d_head] shared by the heads ("score.weight")
  additive,  // Bahdanau: vᵀ tanh(W_q q + W_k k), W_q, W_k [a, d_head], v [a] shared by the heads
};
Score parse_score(const std::string& name);  // "scaled_dot" | "dot" | "general" | "additive"
const char* score_name(Score s);

struct AttentionConfig {
  int64_t d_model = 512;
  int64_t heads = 8;
  Score score = Score::scaled_dot;
  int64_t additive_dim = 0;  // a for the additive score; 0 means d_head
  float dropout = 0.f;       // on the attention weights
  bool cross = false;        // Q from x, K and V from memory
  bool bias = true;          // biases in the projections
};

// The positions of a self-attention input that query, as a model passes them in: every position
// (the default) or the first n. Keys and values still come from every position, and the rows
// computed are exactly those rows of the full result, so a model that reads only some rows of a
// layer's output (the ViT's class token) skips the other rows' work. Not with a causal or diagonal
// mask (their rules place the queries at every position) or with the general and additive scores.
class QueryRows {
 public:
  static QueryRows all() { return QueryRows(); }
  static QueryRows first(int64_t n) { return QueryRows(n); }
  // Of `positions`: how many query (the layer checks that it is 1 to positions).
  int64_t count(int64_t positions) const { return all_ ? positions : first_; }

 private:
  QueryRows() = default;
  explicit QueryRows(int64_t n) : all_(false), first_(n) {}
  bool all_ = true;
  int64_t first_ = 0;
};

// Keys and values of one attention layer for incremental decoding, [B, H, capacity, d_head].
struct KVCache {
  Tensor k, v;
  int64_t length = 0;  // positions filled
};

// Multi-head attention. Self-attention: one fused projection "qkv" [3d, d] (rows: q, k, v, each
// head's d_head rows contiguous, as PyTorch's in_proj_weight); cross-attention: "q" [d, d] and
// "kv" [2d, d]. Output projection "proj" [d, d].
class MultiHeadAttention {
 public:
  MultiHeadAttention(ParamStore& params, const std::string& name, AttentionConfig config);
  // x [B, Tq, d]; memory [B, Tk, d] for cross-attention (empty for self) -> [B, Tq, d]. With
  // bf16 products in training, x may be bf16 already (a pre-norm block's rounded norm output).
  // Self-attention with queries = QueryRows::first(n): only x's first n positions query ->
  // [B, n, d], those rows of the full result.
  Tensor forward(Context& ctx, const Tensor& x, const Tensor& memory, const AttentionMask& mask,
                 QueryRows queries = QueryRows::all());
  // Returns dx; for cross-attention also writes d(memory) into *dmemory (a fresh arena tensor).
  Tensor backward(Context& ctx, const Tensor& dy, Tensor* dmemory = nullptr);

  // Attention weights [B, H, Tq, Tk] of the last forward, kept when keep_weights is set.
  bool keep_weights = false;
  const Tensor& weights() const { return weights_; }
  // d(loss)/d(weights) [B, H, Tq, Tk] of a loss term that reads the kept weights of the last
  // training forward (captioning's doubly stochastic attention penalty), set before backward(),
  // which adds it and empties it. With keep_weights a training forward takes the reference path,
  // the one that holds the weights for it.
  Tensor dweights;

  // Incremental decoding (inference only). Self-attention: x [B, 1, d] is the next position; its
  // key and value are appended to cache (allocated on first use for `capacity` positions) and the
  // query attends to every cached position. Cross-attention: prepare_memory() projects the
  // memory's keys and values once; step() then attends to them with key_lengths.
  void prepare_memory(Context& ctx, const Tensor& memory, KVCache& cache);
  Tensor step(Context& ctx, const Tensor& x, KVCache& cache, int64_t capacity,
              const Tensor& key_lengths = Tensor());

  const AttentionConfig& config() const { return config_; }
  AttentionPath path() const;  // of the last forward

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  AttentionConfig config_;
  Tensor weights_;
};

// ---- Feed-forward, layers and stacks ----
struct LayerConfig {
  int64_t d_model = 512;
  int64_t heads = 8;
  int64_t d_ff = 2048;
  ops::Activation activation = ops::Activation::relu;
  bool pre_norm = false;  // false: LN(x + Sublayer(x)) (2017); true: x + Sublayer(LN(x)) (ViT)
  float dropout = 0.f;    // residual and FFN dropout
  float attention_dropout = 0.f;
  // Stochastic depth (encoder layers): each residual branch of each sample is dropped with this
  // probability and the kept ones scaled by 1/(1 − p), as timm's DropPath; training only.
  float drop_path = 0.f;
  float norm_eps = 1e-5f;
  Score score = Score::scaled_dot;
  int64_t additive_dim = 0;
};

// A transform of the feed-forward block's hidden tokens h [B, T, d_ff] -> [B, T, d_ff], run
// between fc1 and the activation: a model's hook for mixing neighbouring tokens there (the ViT's
// depthwise convolution over the patch grid, as PVTv2's and CeiT's feed-forward blocks). forward
// keeps what backward needs when ctx.training; backward returns d(h) from d(out) as a fresh
// tensor and adds its own parameters' gradients.
class HiddenMixer {
 public:
  virtual ~HiddenMixer() = default;
  virtual Tensor forward(Context& ctx, const Tensor& h) = 0;
  virtual Tensor backward(Context& ctx, const Tensor& dout) = 0;
};

// fc1 [d_ff, d] -> (mixer) -> activation -> dropout -> fc2 [d, d_ff]  ("mlp.fc1", "mlp.fc2")
class FeedForward {
 public:
  FeedForward(ParamStore& params, const std::string& name, int64_t d_model, int64_t d_ff,
              ops::Activation activation, float dropout);
  Tensor forward(Context& ctx, const Tensor& x);
  Tensor backward(Context& ctx, const Tensor& dy);
  // Runs mixer on fc1's output from the next forward on (nullptr: none, the default).
  void set_mixer(std::shared_ptr<HiddenMixer> mixer) { mixer_ = std::move(mixer); }

 private:
  Linear fc1_, fc2_;
  ops::Activation activation_;
  Dropout dropout_;
  std::shared_ptr<HiddenMixer> mixer_;
  Tensor h_;                                        // pre-activation [.., d_ff]
  ops::Precision precision_ = ops::Precision::f32;  // of the last training forward
};

// "norm1", "attn", "norm2", "mlp"
class EncoderLayer {
 public:
  EncoderLayer(ParamStore& params, const std::string& name, const LayerConfig& config);
  // x [B, T, d] -> [B, T, d], or with queries = QueryRows::first(n) the first n positions of the
  // output, [B, n, d] (self-attention reads every position's key and value; everything after it
  // is per position); backward then takes dy [B, n, d] and returns dx [B, T, d].
  Tensor forward(Context& ctx, const Tensor& x, const AttentionMask& mask,
                 QueryRows queries = QueryRows::all());
  Tensor backward(Context& ctx, const Tensor& dy);
  MultiHeadAttention& attention();
  FeedForward& feed_forward();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// "norm1", "self_attn" (causal), "norm2", "cross_attn", "norm3", "mlp"
class DecoderLayer {
 public:
  DecoderLayer(ParamStore& params, const std::string& name, const LayerConfig& config);
  // x [B, Tt, d], memory [B, Ts, d]; self_mask usually {target lengths, causal}, memory_mask
  // {source lengths}.
  Tensor forward(Context& ctx, const Tensor& x, const Tensor& memory,
                 const AttentionMask& self_mask, const AttentionMask& memory_mask);
  // Returns dx and writes d(memory) into *dmemory (fresh arena tensor).
  Tensor backward(Context& ctx, const Tensor& dy, Tensor* dmemory);
  // One target position, x [B, 1, d], with the caches of this layer.
  Tensor step(Context& ctx, const Tensor& x, KVCache& self_cache, const KVCache& memory_cache,
              const Tensor& source_lengths, int64_t capacity);
  void prepare_memory(Context& ctx, const Tensor& memory, KVCache& memory_cache);
  MultiHeadAttention& cross_attention();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// N encoder layers "layers.0" ... and, when final_norm, "norm" (pre-norm models; nn.Transformer
// always has it).
class Encoder {
 public:
  Encoder(ParamStore& params, const std::string& name, const LayerConfig& config, int layers,
          bool final_norm);
  Tensor forward(Context& ctx, const Tensor& x, const AttentionMask& mask);
  Tensor backward(Context& ctx, const Tensor& dy);
  std::vector<EncoderLayer>& layers();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

class Decoder {
 public:
  Decoder(ParamStore& params, const std::string& name, const LayerConfig& config, int layers,
          bool final_norm);
  Tensor forward(Context& ctx, const Tensor& x, const Tensor& memory,
                 const AttentionMask& self_mask, const AttentionMask& memory_mask);
  Tensor backward(Context& ctx, const Tensor& dy, Tensor* dmemory);

  // Incremental decoding: start() projects the memory for every layer's cross-attention and
  // empties the self-attention caches; step() runs one position x [B, 1, d] -> [B, 1, d].
  struct State {
    std::vector<KVCache> self, memory;
    Tensor source_lengths;
    int64_t capacity = 0;
    // Gathers along the batch axis: row i of the new state is row rows[i] of the old one (beam
    // search: the beam each surviving hypothesis extends). With memory = true the cross-attention
    // caches and source_lengths move too, and rows.size() may differ from the batch size (expand B
    // sentences into B·K beams, drop finished sentences); with memory = false only the
    // self-attention caches move, for a permutation among rows whose memories are equal (the
    // beams of one sentence), and the batch size must stay. Only the filled prefix of each cache
    // is copied, into buffers kept in `spare` and reused from step to step. Before the first
    // step the self-attention caches are still empty and stay so. vitk::Error for a row outside
    // the batch or a state that was never started.
    void reorder(const std::vector<int64_t>& rows, bool memory = true);
    int64_t batch() const;      // rows of the state (from the memory caches; 0 before start())
    int64_t position() const;   // target positions cached so far (0 right after start())
    std::vector<Tensor> spare;  // reorder()'s double buffers
  };
  void start(Context& ctx, const Tensor& memory, const Tensor& source_lengths, int64_t capacity,
             State& state);
  Tensor step(Context& ctx, const Tensor& x, State& state);
  std::vector<DecoderLayer>& layers();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// ---- Positions ----
// The paper's sinusoids: pe[pos, 2i] = sin(pos / 10000^(2i/d)), pe[pos, 2i+1] = cos(...), [T, d].
Tensor sinusoidal_positions(int64_t length, int64_t d_model);

// Token embeddings plus positions: x [B, T, d] = scale · table[ids] + positions[first + t], ids
// i32 [B, T] (or [B]), table [V, d], positions [length, d] with first + T <= length (the
// translation model's sinusoids, the captioning model's learned table; first > 0 when decoding
// one position at a time). The gradient is ops::embedding_backward's and the positions' own.
Tensor embed_tokens(Context& ctx, const Tensor& ids, const Tensor& table, float scale,
                    const Tensor& positions, int64_t first);

// Learned position embeddings "name" [length, d], added to x [B, T <= length, d].
class LearnedPositions {
 public:
  LearnedPositions(ParamStore& params, const std::string& name, int64_t length, int64_t d_model);
  Tensor forward(Context& ctx, const Tensor& x);
  Tensor backward(Context& ctx, const Tensor& dy);  // dx = dy; accumulates the table gradient
  Parameter& table;
};

}  // namespace vitk::nn
