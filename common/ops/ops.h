#pragma once
// The maths of vitk: every op with its forward and its hand-written backward, side by side.
// Matrix products run on oneDNN; nothing outside common/ops includes dnnl.hpp.
//
// Conventions
// - Tensors are row-major and contiguous. "[M, K]" means: any rank, the last axis is K and the
//   leading axes flatten into M.
// - A backward ADDS into parameter gradients (dw, db, dgamma, dbeta, dtable) and OVERWRITES input
//   gradients (dx), unless a comment says otherwise. An empty Tensor as a gradient output means
//   "not needed" and skips that work.
// - Output tensors must be allocated by the caller with the right shape; a wrong shape or dtype
//   throws vitk::Error naming the op and both shapes.
#include <cstdint>
#include <memory>
#include <string>

#include "common/tensor.h"

namespace vitk::ops {

// ---- Threads and CPU ----
// Sets the OpenMP thread count for oneDNN and our loops. Call once, before the first op (vitk does
// it from --threads or OMP_NUM_THREADS).
void set_num_threads(int n);
int num_threads();
// oneDNN's view of the CPU, e.g. "avx512_core_bf16"; bf16_supported() is true when oneDNN can run
// bf16 matrix products natively on this CPU (AVX512_BF16). Setting the environment variable
// VITK_ISA_NO_BF16=1 makes it false on any CPU (tests of the refusal); VITK_MAX_ISA=avx512 does
// too, by lowering what oneDNN sees.
std::string cpu_isa();
bool bf16_supported();
// vnni_supported() is true when oneDNN multiplies u8 by s8 with VNNI (AVX512_VNNI or AVX_VNNI),
// the instructions that make int8 products fast and exact at the full 8-bit range; without them
// int8 products still run, exact, on 7-bit activation codes (see linear_forward_int8).
// VITK_ISA_NO_VNNI=1 makes it false on any CPU, as VITK_ISA_NO_BF16 does for bf16.
bool vnni_supported();

// vitk's own loops (GELU, softmax, layer norm, fused attention, quantisation, ...) are compiled
// once per level below, and one runs: the highest the CPU has (CPUID, and the registers the OS
// saves), no higher than oneDNN runs at, no higher than the environment variable VITK_MAX_ISA
// allows. VITK_MAX_ISA (baseline|avx2|avx512|avx512_vnni|avx512_bf16|amx|all, or oneDNN's names
// such as avx512_core_bf16) caps oneDNN as well, so one machine runs every lower level; a value it
// does not know is a vitk::UsageError naming it.
enum class KernelIsa { baseline, avx2, avx512 };  // x86-64 (SSE2), x86-64-v3, x86-64-v4
KernelIsa kernel_isa();
const char* kernel_isa_name(KernelIsa level);
// True when this process may run `level`: the CPU has it and VITK_MAX_ISA allows it.
bool kernel_isa_available(KernelIsa level);
// Runs `level` from now on in this process (tests of every level in one run); vitk::Error when it
// is not available. oneDNN's level cannot change once it has started: only VITK_MAX_ISA sets it.
void set_kernel_isa(KernelIsa level);
// VITK_MAX_ISA as set, or "".
std::string max_isa_setting();
// Reads VITK_MAX_ISA and caps oneDNN; every entry to oneDNN calls it first.
void apply_isa_cap();

// Number of oneDNN primitives created so far (a primitive is created once per shape and reused).
int64_t primitive_count();

// ---- Precision of the matrix products ----
// f32: everything in f32. bf16: mixed precision as PyTorch's CPU autocast: f32 inputs are rounded
// to bf16 for the product, accumulation and outputs stay f32 (master weights are never touched).
// int8: inference only, the linear layers' products on quantised operands (linear_forward_int8,
// on every CPU); the products below that take a Precision refuse it (vitk::Error), and so does
// training (vitk::UsageError).
enum class Precision { f32, bf16, int8 };
// "f32" | "bf16" | "int8"; vitk::UsageError otherwise
Precision parse_precision(const std::string& name);
const char* precision_name(Precision p);
// For headers and vitk env: the name, and for int8 how it runs on this CPU, e.g. "int8 (7-bit
// activations: no VNNI; other products f32)".
std::string describe_precision(Precision p);
// vitk::UsageError (exit 2) when p is bf16 and bf16_supported() is false, naming `option` and the
// ISA oneDNN sees; every command calls it before it loads or builds anything. int8 runs on every
// CPU (describe_precision says how).
void require_precision(Precision p, const std::string& option = "--precision");

// ---- Weights packed for the products ----
// The forms of one weight matrix w [N, K] that the products read: w rounded to bf16 and/or
// reordered into the blocked layout oneDNN's kernel asks for at the shapes at hand (oneDNN 2.6's
// bf16 kernels are fastest on that layout; the f32 ones are at some shapes). A form is built by
// one pass over w and kept with the version of w it was built from; a product given another
// version rebuilds it in place. So inference packs each weight once, and training once per
// optimizer step for each orientation (forward: wᵀ, backward-data: w). Forms are found by the
// layout oneDNN asks for, which depends on N and K (not on the number of rows), so a weight
// holds one or two. Not thread-safe: a cache serves one weight, used by one thread at a time.
class WeightCache {
 public:
  WeightCache();
  ~WeightCache();
  WeightCache(const WeightCache&) = delete;
  WeightCache& operator=(const WeightCache&) = delete;
  int64_t packs() const;  // forms built or rebuilt so far
  size_t bytes() const;   // memory held by the forms
  int forms() const;
  void clear();  // drops every form
  struct Impl;   // internal to common/ops
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// A weight w [N, K] as the linear products take it. `version` identifies w's contents: the
// owner changes it whenever it writes w (vitk::Parameter::version, bumped by the optimizers and
// by loading); a form in `cache` built at another version is stale and is rebuilt.
struct Weight {
  Tensor value;                  // f32 [N, K] (a bf16 value is used as it is, never cached)
  WeightCache* cache = nullptr;  // null: nothing kept (bf16 products then round w on every call)
  uint64_t version = 0;
  // f32 products: read the form in oneDNN's preferred layout from the cache where that measured
  // faster (see ops::prefer_packed_f32). bf16 products always pack.
  bool pack_f32 = false;
  bool force_pack_f32 = false;  // ... at every shape (benchmarks)
  // value's memory was given back after the cache's first form was made (inference keeping one
  // copy of the weights): the products read the cache only, a new layout made from a form it
  // holds.
  bool plain_released = false;
};
// Whether an f32 product [M, K]·[K, N] reads its weight in oneDNN's blocked layout when the
// caller allows it (Weight::pack_f32): where vitk bench ops measured it faster than the plain one.
bool prefer_packed_f32(int64_t m, int64_t k, int64_t n);

// ---- Linear: y = x · wᵀ + b ----
// x [M, K], w [N, K] (PyTorch's {out, in}), b [N] or empty, y [M, N]. x, w may be bf16 (both the
// same); y is f32 or bf16; accumulation is f32.
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
// dx [M, K] = dy · w (overwritten).
void linear_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx);
// dw [N, K] += dyᵀ · x; db [N] += Σ_rows dy (db may be empty).
void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db);
// Both of the above; any of dx, dw, db may be empty.
void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db);

// The same products on a Weight at a precision, as the layers call them. x and dy are f32 (x may
// also be bf16 already: a layer's rounded copy kept for its backward); y, dx f32; dw, db f32 and
// accumulated in f32 (the master gradients). With bf16, f32 operands are rounded into scratch
// buffers reused from call to call, w comes from its cache, and db sums the f32 dy.
void linear_forward(const Tensor& x, const Weight& w, const Tensor& b, Tensor& y,
                    Precision precision);
void linear_backward_data(const Tensor& dy, const Weight& w, Tensor& dx, Precision precision);
void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db,
                             Precision precision);
// dy is rounded once for both products. The bf16 weight gradient reads dyᵀ as a plain matrix
// (about 1.3× faster in oneDNN 2.6 than a strided transpose): made in the pass that rounds an f32
// dy, transposed from a bf16 dy, or given as dy_t: bf16 [N, M], dy's transpose, for a bf16 dy
// whose producer wrote both (activation_backward_rounded).
void linear_backward(const Tensor& x, const Weight& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db, Precision precision, const Tensor& dy_t = Tensor());

// ---- int8 linear products (inference) ----
// The scheme CTranslate2 runs on CPUs: weights quantised once, symmetrically per output channel;
// activations quantised on the fly, symmetrically per row (token); exact integer products with
// s32 accumulation; the result dequantised and the bias added in f32. Everything else (norms,
// softmax, GELU, residuals, attention's batched products) stays f32.
//
// Both quantisations round to nearest with ties to even (std::nearbyint): the CPU's rounding
// instructions do that by default, so the quantising loops vectorise, and it is unbiased on exact
// ties (std::round pushes every tie outwards). Each value is then off by at most half its scale.

// A weight w [N, K] ({out, in}) quantised: w[n, k] ≈ scales[n] · q[n, k], scales[n] =
// max_k |w[n, k]| / 127, q = w / scales[n] rounded, in [-127, 127]. A row of zeros has scale 0
// and q = 0 (never a division by zero). At inference it is the only copy of the weight: the first
// product replaces the plain q by the layout oneDNN's kernel reads (reordered once, kept) and
// every later product reads that. Move-only, so that no second copy keeps the plain form alive.
// Not thread-safe: one weight, used by one thread at a time (as WeightCache).
struct QuantizedWeight {
  int64_t n = 0, k = 0;  // w's shape [N, K]
  Tensor values;         // s8: q [N, K] until the first product; then the packed bytes
  Tensor scales;         // f32 [N]
  Tensor sums;           // i32 [N]: Σ_k q[n, k] (takes the activations' offset out of products)
  struct Layout;         // internal to common/ops: oneDNN's layout of the packed values
  std::shared_ptr<const Layout> layout;  // null while values holds the plain q [N, K]
  bool packed() const { return layout != nullptr; }
  size_t bytes() const { return values.nbytes() + scales.nbytes() + sums.nbytes(); }

  QuantizedWeight() = default;
  QuantizedWeight(QuantizedWeight&&) = default;
  QuantizedWeight& operator=(QuantizedWeight&&) = default;
  QuantizedWeight(const QuantizedWeight&) = delete;
  QuantizedWeight& operator=(const QuantizedWeight&) = delete;
};
// w f32 [N, K] (rank 2, non-empty); vitk::Error naming the op and the shape otherwise. Per row,
// scale = max |w| / 127; an all-zero row gets scale 0 and q all zero (quantized_weight takes a
// zero scale for such a row only).
QuantizedWeight quantize_weight(const Tensor& w);
// A weight quantised before (a checkpoint of `vitk quantize`): q s8 [N, K] in [-127, 127] and
// scales f32 [N], finite and >= 0, taken as they are (the row sums computed); vitk::Error saying
// which condition fails, and where, otherwise. A scale of 0 is taken only for a row of q that is
// all zero, as quantize_weight writes an all-zero row of w: over any other row it would zero
// values the file holds, so it is damage.
QuantizedWeight quantized_weight(Tensor q, Tensor scales);

// Activations are quantised per row m: x[m, k] ≈ s[m] · q[m, k], s[m] = max_k |x[m, k]| / L,
// q = x / s[m] rounded, |q| ≤ L, with L = int8_activation_levels(): 127 when vnni_supported()
// (VNNI), 63 otherwise. Why 63: without VNNI, oneDNN 2.6 multiplies u8 by s8 with vpmaddubsw,
// which saturates the sum of each pair of products to 16 bits; q is handed to it as u8 (q + 128,
// or q + 64 with L = 63), and only 7-bit codes keep every pair (2 · 127 · 127 < 2^15) exact.
// A zero row has s = 0 and gives y = b; a row holding a NaN or an infinity gives NaN outputs.
int int8_activation_levels();
// y [M, N] (f32) = x [M, K] (f32) · wᵀ + b (f32 [N] or empty): y[m, n] = s[m] · scales[n] ·
// Σ_k q[m, k] · q_w[n, k] + b[n], the sum exact in s32, the rest in f32. Packs w on its first
// call (see QuantizedWeight); oneDNN's primitives are created once per shape and reused.
void linear_forward_int8(const Tensor& x, QuantizedWeight& w, const Tensor& b, Tensor& y);

// dst (bf16, same numel) = src (f32) rounded to nearest even, in parallel for large tensors.
void round_to_bf16(const Tensor& src, Tensor& dst);
void round_to_bf16(const float* src, uint16_t* dst, int64_t n);

// ---- Batched matrix product (attention) ----
// c = alpha · op(a) · op(b) + beta · c, where op(t) is t or its transpose over the last two
// axes. a, b, c have rank 2, 3 or 4; their leading (batch) axes must be equal. Example: scores [B,
// H, Tq, Tk] = q [B, H, Tq, D] · k [B, H, Tk, D]ᵀ with trans_b = true.
// With precision bf16, f32 a and b are rounded to bf16 for the product (c stays as it is).
void bmm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha = 1.f,
         float beta = 0.f, Precision precision = Precision::f32);
// Gradients of c = alpha · op(a) · op(b): da and db are OVERWRITTEN (either may be empty).
void bmm_backward(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& dc,
                  float alpha, Tensor& da, Tensor& db, Precision precision = Precision::f32);

// ---- Batched matrix product on strided views (attention without head copies) ----
// A batch of matrices read or written in place: logical dims [batch..., rows, cols] (rank 2 to 4)
// and element strides, e.g. the heads inside a fused qkv projection, or a transpose.
struct MatrixView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape dims, strides;
  MatrixView t() const;  // the transpose over the last two axes (strides swapped, no copy)
};
// The whole (contiguous) tensor as [batch..., rows, cols].
MatrixView matrix_view(const Tensor& t);
// Column block `block` of x [B, T, n·heads·dh] as heads [B, heads, T, dh]: block 1 of the fused
// qkv projection [B, T, 3·d] is k, and block 0 of a context [B, T, d] is its heads.
MatrixView heads_view(const Tensor& x, int64_t heads, int64_t head_dim, int64_t block);
// c = alpha · a · b + beta · c; batch axes equal, views of c must not overlap a or b. With
// precision bf16, f32 a and b are rounded to bf16 for the product (accumulation and c stay f32):
// the span of memory each view covers is rounded into a scratch buffer, so a caller that reads
// several views of one tensor (q, k and v of a fused projection) rounds it once itself
// (round_to_bf16) and passes bf16 views.
void bmm(const MatrixView& a, const MatrixView& b, const MatrixView& c, float alpha = 1.f,
         float beta = 0.f, Precision precision = Precision::f32);

// ---- Fused attention: softmax(scale · q·kᵀ)·v per batch and head, in cache ----
// q [B, H, Tq, dh], k and v [B, H, Tk, dh]: f32 views with contiguous rows (heads_view of the
// fused projection); probs [B, H, Tq, Tk] f32 contiguous, written (the backward needs it);
// context [B, H, Tq, dh], a view, written. No mask and no dropout: callers use bmm and
// softmax_forward for those. fused_attention_supported() is false when this build or shape has
// no kernel (it needs AVX-512 and dh = 64).
bool fused_attention_supported(const MatrixView& q, const MatrixView& k);
// Whether the heads_view()s of an f32 projection with heads of this size qualify: the choice of a
// path before the projection exists.
bool fused_attention_supported(int64_t head_dim);
void fused_attention_forward(const MatrixView& q, const MatrixView& k, const MatrixView& v,
                             float scale, Tensor& probs, const MatrixView& context);
// dq, dk, dv (views shaped like q, k, v) overwritten, from dcontext and the forward's probs.
void fused_attention_backward(const MatrixView& q, const MatrixView& k, const MatrixView& v,
                              const Tensor& probs, const MatrixView& dcontext, float scale,
                              const MatrixView& dq, const MatrixView& dk, const MatrixView& dv);

// ---- Blocked ("flash") attention: softmax(scale · q·kᵀ + mask)·v without the [Tq, Tk] matrix ----
// Per (batch, head) and block of query rows, the keys are visited block by block with a running
// maximum and sum (online softmax); the forward writes the context and the log-sum-exp of every
// query row, which is all its backward needs: it recomputes the block scores from q, k and the
// log-sum-exp (FlashAttention-2). No buffer larger than one block of queries × one block of keys
// per thread (plus packed copies of one head's q, k, v: O(T · dh)). Results do not depend on the
// thread count.
struct BlockedAttention {
  float scale = 1.f;    // 1/√dh for scaled-dot scores
  Tensor key_lengths;   // i32 [B], values in [0, Tk]; empty: every key is visible
  bool causal = false;  // query i sees key j only if j <= i + (Tk − Tq)
  // Dropout on the attention weights (training): weight (b, h, i, j) is dropped when
  // Rng::to_uniform(Rng::hash(seed, counter + ((b·H + h)·Tq + i)·Tk + j)) < dropout and the
  // others are scaled by 1/(1 − dropout): the mask dropout_forward draws for [B, H, Tq, Tk] with
  // the same seed and first counter.
  float dropout = 0.f;
  uint64_t seed = 0, counter = 0;
};
// q [B, H, Tq, dh], k and v [B, H, Tk, dh]: f32 views whose rows are contiguous (any dh; dh = 16,
// 32, ... 128 run without padding). False for anything else.
bool blocked_attention_supported(const MatrixView& q, const MatrixView& k, const MatrixView& v);
// context [B, H, Tq, dh] (a view) and lse [B, H, Tq] f32 (log Σ_j exp(score), −inf for a query
// that sees no key, whose context is 0) are written.
void blocked_attention_forward(const MatrixView& q, const MatrixView& k, const MatrixView& v,
                               const BlockedAttention& options, Tensor& lse,
                               const MatrixView& context);
// dq, dk, dv (views shaped like q, k, v) overwritten, from the forward's context and lse.
void blocked_attention_backward(const MatrixView& q, const MatrixView& k, const MatrixView& v,
                                const MatrixView& context, const Tensor& lse,
                                const MatrixView& dcontext, const BlockedAttention& options,
                                const MatrixView& dq, const MatrixView& dk, const MatrixView& dv);

// ---- Softmax over the last axis, with an optional additive mask ----
// y = softmax(x + mask). x, y [..., N] (y may be x). mask is empty or f32 with the same rank as x
// and each axis equal to x's or 1 (broadcast), e.g. [B, 1, 1, Tk] for padding, [Tq, Tk] padded to
// [1, 1, Tq, Tk] for causal. Masked entries hold -inf. A row whose entries are all -inf yields
// zeros, never NaN.
void softmax_forward(const Tensor& x, const Tensor& mask, Tensor& y);
// dx = y ⊙ (dy − Σ(dy ⊙ y)) per row (overwritten; dx may be dy).
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx);

// ---- Layer normalization over the last axis ----
// x, y [M, N]; gamma, beta [N]; mean, rstd [M] are written when non-empty (training) for backward.
// y may be bf16: the result rounded as it is written (the input of a bf16 product).
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                       Tensor& y, Tensor& mean, Tensor& rstd);
// dx [M, N] overwritten; dgamma, dbeta [N] accumulated (either may be empty). With `add`
// non-empty ([M, N]), dx = add + d(input) in the same pass: a pre-norm block's residual gradient
// (dx may be add).
void layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                        Tensor& dbeta, const Tensor& add = Tensor());

// ---- Activations ----
// GELU is the exact erf form, 0.5·x·(1 + erf(x/√2)), as torch.nn.GELU() by default.
enum class Activation { relu, gelu };
Activation parse_activation(
    const std::string& name);  // "relu" | "gelu"; vitk::UsageError otherwise
const char* activation_name(Activation a);
// y may be x; y may also be bf16 (x f32): f(x) rounded to bf16 as it is written, the input of a
// bf16 product without a rounding pass of its own.
void activation_forward(Activation a, const Tensor& x, Tensor& y);
// dx = dy ⊙ f'(x), overwritten (dx may be dy).
void activation_backward(Activation a, const Tensor& x, const Tensor& dy, Tensor& dx);
// The same gradient g = dy ⊙ f'(x) [M, N] for a bf16 product with a bias: dx (bf16, x's shape) =
// g rounded, and dsum [N] += Σ_rows g of the f32 g, in one pass that never writes g itself. The
// same bits as activation_backward, round_to_bf16 and the bias gradient of linear_backward.
void activation_backward_rounded(Activation a, const Tensor& x, const Tensor& dy, Tensor& dx,
                                 Tensor& dsum);
// ... and dx_t (bf16 [N, M]) = dx's transpose, from the same pass: the dy_t of linear_backward.
void activation_backward_rounded(Activation a, const Tensor& x, const Tensor& dy, Tensor& dx,
                                 Tensor& dsum, Tensor& dx_t);

// ---- Random numbers and dropout ----
// A counter-based generator: the value at (seed, counter) does not depend on the thread count, and
// the whole state is two integers, so a resumed run draws exactly what the original would have.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t counter() const { return counter_; }
  void set_state(uint64_t seed, uint64_t counter) { seed_ = seed, counter_ = counter; }
  uint64_t next_u64();  // one draw
  float uniform();      // one draw in [0, 1)
  double normal();      // one draw N(0, 1)
  // Reserves n consecutive counters and returns the first; value i is hash(seed, first + i).
  uint64_t reserve(uint64_t n) {
    uint64_t first = counter_;
    counter_ += n;
    return first;
  }
  // splitmix64's output function applied to a state derived from the seed, stepped counter
  // times. Inline so that loops drawing a mask per element (blocked attention) vectorise.
  static uint64_t hash(uint64_t seed, uint64_t counter) {
    return mix(mix(seed) + (counter + 1) * 0x9e3779b97f4a7c15ull);
  }
  static float to_uniform(uint64_t bits) { return static_cast<float>(bits >> 40) * 0x1p-24f; }

 private:
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t seed_ = 0;
  uint64_t counter_ = 0;
};

// y = x ⊙ keep / (1 − p), keep[i] ~ Bernoulli(1 − p) stored in mask (u8, same numel as x).
// p = 0 copies x and sets mask to all ones. y may be x.
void dropout_forward(const Tensor& x, float p, Rng& rng, Tensor& y, Tensor& mask);
// dx = dy ⊙ keep / (1 − p), overwritten (dx may be dy).
void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx);

// ---- Embedding lookup ----
// ids i32 [M], table [V, D], y [M, D]: y[i] = scale · table[ids[i]]. An id outside [0, V) throws
// vitk::Error naming the id and its position.
void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y, float scale = 1.f);
// dtable[ids[i]] += scale · dy[i] (scatter-add; repeated ids accumulate, deterministically).
void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable, float scale = 1.f);

// ---- Residual add ----
// y = a + b (y may be a or b). Its backward hands dy to both inputs: use accumulate() or reuse dy.
void add(const Tensor& a, const Tensor& b, Tensor& y);
// y += alpha · x
void accumulate(Tensor& y, const Tensor& x, float alpha = 1.f);

// ---- Cross-entropy over logits ----
// logits [M, C] f32, targets i32 [M]. Per row: (1 − ε)·(−log p_t) + ε·mean_c(−log p_c),
// as torch.nn.functional.cross_entropy(label_smoothing=ε). Rows whose target is ignore_index count
// for nothing; the loss is the mean over the other rows (0 when none). A target outside [0, C)
// other than ignore_index throws vitk::Error.
struct CrossEntropyStats {
  double loss = 0;      // mean over counted rows
  int64_t count = 0;    // rows counted
  int64_t correct = 0;  // counted rows whose arg-max logit is the target
};
CrossEntropyStats cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                        float label_smoothing = 0.f, int ignore_index = -100);
// dlogits [M, C] = scale · d(mean loss)/d(logits), overwritten; ignored rows get zeros.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, float label_smoothing,
                            int ignore_index, float scale, Tensor& dlogits);
// Both in one pass over the logits (the same results). dlogits may be logits itself: the
// gradient then overwrites the logits, which saves a buffer and memory traffic.
CrossEntropyStats cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets,
                                                 float label_smoothing, int ignore_index,
                                                 float scale, Tensor& dlogits);

// ---- Cross-entropy with soft targets (Mixup, CutMix) ----
// logits [M, C] f32, targets f32 [M, C], one distribution per row (label smoothing already folded
// in). Per row: −Σ_c t_c · log p_c, the mean over the rows, as timm's SoftTargetCrossEntropy.
// `correct` counts rows whose arg-max logit is the arg-max target (the dominant class of a mix;
// first index on ties).
CrossEntropyStats soft_cross_entropy_forward(const Tensor& logits, const Tensor& targets);
// dlogits [M, C] = scale · d(mean loss)/d(logits) = scale · (p · Σ_c t_c − t) / M, overwritten.
void soft_cross_entropy_backward(const Tensor& logits, const Tensor& targets, float scale,
                                 Tensor& dlogits);

// ---- Gradient clipping ----
// L2 norm of all values (accumulated in double).
double l2_norm(const Tensor& t);
// Scales t in place by max_norm / (norm + 1e-6) when that factor is below 1, as
// torch.nn.utils.clip_grad_norm_; returns the norm before clipping. Used on the flat gradient
// arena.
double clip_grad_norm(Tensor& grads, double max_norm);

}  // namespace vitk::ops
