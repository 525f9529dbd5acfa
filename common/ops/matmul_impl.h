#pragma once
// Internal to common/ops: the matmul primitive runner shared by the linear products (matmul.cpp)
// and the batched ones (bmm.cpp), operands rounded to bf16 into scratch buffers, and the weight
// forms of ops::WeightCache (weight_cache.cpp) and ops::QuantizedWeight (int8.cpp).
#include <cstdint>
#include <string>

#include "common/ops/dnnl_context.h"
#include "common/ops/ops.h"

namespace vitk::ops::detail {

// A matrix operand as oneDNN sees it: logical dims and element strides, batch axes first.
struct Operand {
  dnnl::memory::dims dims;
  dnnl::memory::dims strides;
  DType dtype = DType::f32;
  const void* data = nullptr;
  dnnl::memory::desc desc() const { return dnnl::memory::desc(dims, dnnl_type(dtype), strides); }
};

// How the B operand of a product is read when it is a weight: `b` then describes the weight's
// plain f32 master (a transpose expressed by strides), and the product reads it as `dtype` in the
// layout oneDNN asks for (format any), from `cache` at `version` (built there when missing or
// stale) or, without a cache, from a scratch buffer rebuilt on every call.
struct Packing {
  DType dtype = DType::bf16;
  WeightCache* cache = nullptr;
  uint64_t version = 0;
  // The plain weight's memory is gone (Weight::plain_released): a missing form is made from one
  // the cache holds, and the forms are never stale.
  bool plain_released = false;
};

// c = alpha · a · b (+ bias) + beta · c, with one matmul primitive per shape, layout and
// constants, created on first use and cached.
void run_matmul(const Operand& a, const Operand& b, const Operand* bias, const Operand& c,
                float alpha, float beta, const Packing* packing = nullptr);

// Scratch buffers reused from call to call (per thread): slot i grows to the largest size asked
// and is never shrunk, so the steady state of a loop allocates nothing.
enum ScratchSlot {
  kScratchA = 0,
  kScratchB = 1,
  kScratchDy = 2,
  kScratchWeight = 3,
  kScratchDyT = 4,  // dyᵀ of a bf16 weight gradient (matmul.cpp)
  kSlots = 5
};
void* scratch(ScratchSlot slot, size_t bytes);

// Elements from the first to the last one a view touches (1 + Σ (dim − 1)·stride).
int64_t span(const Operand& op);
// op itself when it is bf16; otherwise the memory it spans rounded to bf16 into `slot`, with the
// same dims and strides.
Operand rounded(const Operand& op, ScratchSlot slot);

// The form of weight `source` (plain f32 or bf16) laid out as `want`: from packing.cache (rebuilt
// when its version is not packing.version) or, without a cache, reordered into scratch.
const void* weight_form(const Packing& packing, const Operand& source,
                        const dnnl::memory::desc& want);

// dst (laid out as `want`) = source, converting the type: one reorder primitive per pair of
// layouts.
void reorder_into(const Operand& source, const dnnl::memory::desc& want, void* dst);
void reorder_into(const dnnl::memory::desc& from, const void* src, const dnnl::memory::desc& want,
                  void* dst);

// A string that identifies a memory descriptor (dims, type, strides, blocks): for cache keys.
std::string desc_key(const dnnl::memory::desc& md);

}  // namespace vitk::ops::detail
