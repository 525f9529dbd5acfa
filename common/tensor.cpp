#include "common/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>
#include <sstream>

#include "common/error.h"

namespace vitk {

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::u8:
    case DType::s8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::u8:
      return "u8";
    case DType::s8:
      return "s8";
  }
  return "?";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

float bf16_to_f32(uint16_t x) {
  uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void f32_to_bf16(const float* src, uint16_t* dst, size_t n) {
#pragma omp parallel for simd if (n > 65536)
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
#pragma omp parallel for simd if (n > 65536)
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

std::shared_ptr<void> aligned_alloc_shared(size_t bytes) {
  // Large blocks (the arena's, the optimizer's, the weights') are mapped from the kernel: its pages
  // are zero and take no memory until first written, so a weight that is never written (one
  // loaded as int8, or the part of an arena a short run never reaches) costs nothing. They are
  // asked for in 2 MiB pages where the kernel grants them on request (transparent huge pages in
  // "madvise" mode, Debian's default): passes that stride across a big activation, such as the
  // transposes of the bf16 weight gradients, otherwise miss the TLB on almost every row.
  constexpr size_t kHugePage = size_t{2} << 20;
  if (bytes >= 2 * kHugePage) {
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    // One huge page more, to start on a huge-page boundary.
    const size_t mapped = rounded + kHugePage;
    void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
      throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
    const auto start = (reinterpret_cast<uintptr_t>(base) + kHugePage - 1) / kHugePage * kHugePage;
    void* p = reinterpret_cast<void*>(start);
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without huge pages, 4 KiB ones
#endif
    return std::shared_ptr<void>(p, [base, mapped](void*) { munmap(base, mapped); });
  }
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (!p) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, rounded);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

static void check_shape(const Shape& shape) {
  for (int64_t d : shape)
    if (d < 0) throw Error("negative dimension in shape " + shape_str(shape));
}

Tensor::Tensor(Shape shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
  check_shape(shape_);
  storage_ = aligned_alloc_shared(nbytes());
  data_ = storage_.get();
}

Tensor Tensor::view(void* data, Shape shape, DType dtype) {
  check_shape(shape);
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

int64_t Tensor::dim(int i) const {
  int r = rank();
  int j = i < 0 ? i + r : i;
  if (j < 0 || j >= r)
    throw Error("axis " + std::to_string(i) + " out of range for shape " + shape_str(shape_));
  return shape_[j];
}

namespace {
template <typename T>
T* typed(void* data, DType have, DType want) {
  if (have != want)
    throw Error(std::string("tensor holds ") + dtype_name(have) + ", not " + dtype_name(want));
  return static_cast<T*>(data);
}
}  // namespace

float* Tensor::f32() {
  return typed<float>(data_, dtype_, DType::f32);
}
const float* Tensor::f32() const {
  return typed<float>(data_, dtype_, DType::f32);
}
uint16_t* Tensor::bf16() {
  return typed<uint16_t>(data_, dtype_, DType::bf16);
}
const uint16_t* Tensor::bf16() const {
  return typed<uint16_t>(data_, dtype_, DType::bf16);
}
int32_t* Tensor::i32() {
  return typed<int32_t>(data_, dtype_, DType::i32);
}
const int32_t* Tensor::i32() const {
  return typed<int32_t>(data_, dtype_, DType::i32);
}
uint8_t* Tensor::u8() {
  return typed<uint8_t>(data_, dtype_, DType::u8);
}
const uint8_t* Tensor::u8() const {
  return typed<uint8_t>(data_, dtype_, DType::u8);
}
int8_t* Tensor::s8() {
  return typed<int8_t>(data_, dtype_, DType::s8);
}
const int8_t* Tensor::s8() const {
  return typed<int8_t>(data_, dtype_, DType::s8);
}

Tensor Tensor::reshaped(Shape shape) const {
  check_shape(shape);
  if (shape_numel(shape) != numel())
    throw Error("cannot reshape " + shape_str(shape_) + " to " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  if (rank() < 1 || begin < 0 || end < begin || end > shape_[0])
    throw Error("rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") out of range for shape " + shape_str(shape_));
  Tensor t = *this;
  size_t row_bytes = shape_[0] ? nbytes() / static_cast<size_t>(shape_[0]) : 0;
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(begin) * row_bytes;
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

void Tensor::zero() {
  if (nbytes()) std::memset(data_, 0, nbytes());
}

void Tensor::fill(float value) {
  float* p = f32();
  int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void Tensor::copy_from(const Tensor& other) {
  if (other.shape_ != shape_ || other.dtype_ != dtype_)
    throw Error("copy between " + shape_str(other.shape_) + " " + dtype_name(other.dtype_) +
                " and " + shape_str(shape_) + " " + dtype_name(dtype_));
  if (nbytes()) std::memmove(data_, other.data_, nbytes());
}

namespace {
bool poison_from_env() {
  const char* v = std::getenv("VITK_POISON_ARENA");
  return v && *v && std::strcmp(v, "0") != 0;
}

// memset in parallel: zero-filling a [6400, 768] activation is 20 MB.
void fill_bytes(void* p, int value, size_t bytes) {
  constexpr size_t kBlock = size_t{1} << 18;
  if (bytes < 2 * kBlock) {
    std::memset(p, value, bytes);
    return;
  }
  const int64_t blocks = static_cast<int64_t>((bytes + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t begin = static_cast<size_t>(b) * kBlock;
    std::memset(static_cast<char*>(p) + begin, value, std::min(kBlock, bytes - begin));
  }
}
}  // namespace

Arena::Arena(size_t bytes) : poison_(poison_from_env()) {
  if (bytes) chunks_.push_back({aligned_alloc_shared(bytes), bytes, 0});
}

size_t Arena::capacity() const {
  size_t c = 0;
  for (const auto& ch : chunks_) c += ch.size;
  return c;
}

void* Arena::take(size_t bytes) {
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  Chunk* chunk = chunks_.empty() ? nullptr : &chunks_.back();
  if (!chunk || chunk->used + rounded > chunk->size) {
    size_t size = std::max(rounded, chunk ? chunk->size : size_t{1} << 20);
    chunks_.push_back({aligned_alloc_shared(size), size, 0});
    chunk = &chunks_.back();
  }
  void* p = static_cast<char*>(chunk->memory.get()) + chunk->used;
  chunk->used += rounded;
  used_ += rounded;
  if (used_ > high_water_) high_water_ = used_;
  return p;
}

Tensor Arena::alloc(Shape shape, DType dtype) {
  check_shape(shape);
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* p = take(bytes);
  fill_bytes(p, 0, bytes);
  return Tensor::view(p, std::move(shape), dtype);
}

Tensor Arena::alloc_uninit(Shape shape, DType dtype) {
  check_shape(shape);
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* p = take(bytes);
  if (poison_) fill_bytes(p, 0xff, bytes);
  return Tensor::view(p, std::move(shape), dtype);
}

Arena::Mark Arena::mark() const {
  if (chunks_.empty()) return {};
  return {chunks_.size() - 1, chunks_.back().used, used_};
}

void Arena::rewind(const Mark& m) {
  if (chunks_.empty()) return;
  if (m.chunk >= chunks_.size() || m.used > used_)
    throw Error("arena: rewind to a mark that is not behind the current position");
  chunks_.resize(m.chunk + 1);
  chunks_.back().used = m.chunk_used;
  used_ = m.used;
}

void Arena::reset() {
  if (chunks_.size() > 1) {
    chunks_.clear();
    chunks_.push_back({aligned_alloc_shared(high_water_), high_water_, 0});
  }
  for (auto& ch : chunks_) ch.used = 0;
  used_ = 0;
}

}  // namespace vitk
