// Packed weight forms (ops::WeightCache), scratch buffers for operands rounded to bf16, and the
// rounding itself.
#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ops/matmul_impl.h"
#include "common/ops/profile.h"

namespace vitk::ops {

struct WeightCache::Impl {
  struct Form {
    dnnl::memory::desc desc;  // the layout (and type) a primitive asked for
    // The layout of the plain weight it was made from (desc_key): w [N, K] or wᵀ as strides. A
    // square weight's forward (wᵀ) and backward-data (w) forms have the same dims and often the
    // same blocked layout, so the layout alone would hand one of them the other's transpose.
    std::string source;
    std::shared_ptr<void> data;
    size_t bytes = 0;
    uint64_t version = 0;
    bool built = false;
  };
  std::vector<Form> forms;
  int64_t packs = 0;
};

WeightCache::WeightCache() : impl_(std::make_unique<Impl>()) {}
WeightCache::~WeightCache() = default;

int64_t WeightCache::packs() const {
  return impl_->packs;
}

size_t WeightCache::bytes() const {
  size_t n = 0;
  for (const auto& f : impl_->forms) n += f.bytes;
  return n;
}

int WeightCache::forms() const {
  return static_cast<int>(impl_->forms.size());
}

void WeightCache::clear() {
  impl_->forms.clear();
}

bool prefer_packed_f32(int64_t m, int64_t k, int64_t n) {
  // With oneDNN 2.6 on the 2-core AVX-512 machine, `vitk bench ops --packed` showed the blocked
  // layout gaining for wide outputs (N ≥ 2K: qkv and fc1 of a ViT) and losing a little or
  // nothing elsewhere. On an AVX2 machine (AMD EPYC) the blocked layout lost: ViT-B/16 at 224,
  // batch 1, 2.3 images/s packed against 2.6 plain (`vitk classify --benchmark --random-weights
  // --config configs/vit-b16.ini --batch-size 1 [--plain-weights]`, 2026-11-27), so only
  // AVX-512 packs. From 512 rows on it packs every shape: on an Intel Xeon (AVX-512, no AMX) the
  // plain layout ran ViT-B/16's 577-row products (384 × 384) up to 1.5× slower than the packed
  // one, and packing all four raised 384 batch 1 from 2.0 to 2.2 images/s (2026-11-29).
  static const bool avx512 = cpu_isa().rfind("avx512", 0) == 0;
  return avx512 && (n >= 2 * k || m >= 512);
}

namespace detail {

void* scratch(ScratchSlot slot, size_t bytes) {
  struct Buffer {
    std::shared_ptr<void> data;
    size_t bytes = 0;
  };
  static thread_local Buffer buffers[kSlots];
  Buffer& b = buffers[slot];
  if (b.bytes < bytes) {
    b.data = aligned_alloc_shared(bytes);
    b.bytes = bytes;
  }
  return b.data.get();
}

int64_t span(const Operand& op) {
  int64_t n = 1;
  for (size_t i = 0; i < op.dims.size(); ++i) {
    if (op.dims[i] == 0) return 0;
    n += (op.dims[i] - 1) * op.strides[i];
  }
  return n;
}

Operand rounded(const Operand& op, ScratchSlot slot) {
  if (op.dtype == DType::bf16) return op;
  if (op.dtype != DType::f32)
    throw Error(std::string("bf16 product: an operand is ") + dtype_name(op.dtype));
  const int64_t n = span(op);
  Operand out = op;
  out.dtype = DType::bf16;
  auto* dst = static_cast<uint16_t*>(scratch(slot, static_cast<size_t>(n) * 2));
  out.data = dst;
  round_to_bf16(static_cast<const float*>(op.data), dst, n);
  return out;
}

std::string desc_key(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  std::ostringstream key;
  key << static_cast<int>(d.data_type) << ':' << static_cast<int>(d.format_kind) << '[';
  for (int i = 0; i < d.ndims; ++i) key << d.dims[i] << ',';
  key << "]s[";
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  for (int i = 0; i < d.ndims; ++i) key << b.strides[i] << ',';
  key << "]b[";
  for (int i = 0; i < b.inner_nblks; ++i) key << b.inner_idxs[i] << ':' << b.inner_blks[i] << ',';
  key << ']' << d.offset0;
  return key.str();
}

void reorder_into(const dnnl::memory::desc& from, const void* src, const dnnl::memory::desc& want,
                  void* dst) {
  const dnnl::primitive& prim =
      cached_primitive("reorder:" + desc_key(from) + "->" + desc_key(want), [&]() {
        return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), want));
      });
  dnnl::memory in = wrap(from, src), out = wrap(want, dst);
  prim.execute(stream(), {{DNNL_ARG_FROM, in}, {DNNL_ARG_TO, out}});
  stream().wait();
}

void reorder_into(const Operand& source, const dnnl::memory::desc& want, void* dst) {
  reorder_into(source.desc(), source.data, want, dst);
}

const void* weight_form(const Packing& packing, const Operand& source,
                        const dnnl::memory::desc& want) {
  profile::Scope scope("pack_weight");
  if (!packing.cache) {
    void* dst = scratch(kScratchWeight, want.get_size());
    reorder_into(source, want, dst);
    return dst;
  }
  WeightCache::Impl& cache = packing.cache->impl();
  const std::string source_key = desc_key(source.desc());
  auto it = std::find_if(
      cache.forms.begin(), cache.forms.end(),
      [&](const WeightCache::Impl::Form& f) { return f.desc == want && f.source == source_key; });
  if (it == cache.forms.end()) {
    WeightCache::Impl::Form f;
    f.desc = want;
    f.source = source_key;
    f.bytes = want.get_size();
    f.data = aligned_alloc_shared(f.bytes);
    cache.forms.push_back(std::move(f));
    it = cache.forms.end() - 1;
  }
  if (packing.plain_released) {
    if (!it->built) {
      // Made from a form of the same source (wᵀ or w) the cache holds: a reorder between layouts.
      auto from = std::find_if(cache.forms.begin(), cache.forms.end(),
                               [&](const auto& f) { return f.built && f.source == source_key; });
      if (from == cache.forms.end())
        throw Error("a weight's plain form was released before any packed form was made");
      reorder_into(from->desc, from->data.get(), want, it->data.get());
      it->version = from->version;
      it->built = true;
      ++cache.packs;
    }
    return it->data.get();
  }
  if (!it->built || it->version != packing.version) {
    reorder_into(source, want, it->data.get());
    it->version = packing.version;
    it->built = true;
    ++cache.packs;
  }
  return it->data.get();
}

}  // namespace detail
}  // namespace vitk::ops
