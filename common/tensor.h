#pragma once
// Tensor: a shape, a dtype and 64-byte aligned memory, either owned or a view into an arena.
// Row-major and contiguous; nothing more than the models need.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace vitk {

// s8 holds the quantised weights of int8 products (ops::QuantizedWeight).
enum class DType : uint8_t { f32, bf16, i32, u8, s8 };

size_t dtype_size(DType dt);
const char* dtype_name(DType dt);

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[8, 197, 768]"

constexpr size_t kAlignment = 64;

// Round-to-nearest-even conversion, as PyTorch and oneDNN do it; NaN stays NaN. Inline, so that
// loops writing bf16 (ops::activation_forward) vectorise.
inline uint16_t f32_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
float bf16_to_f32(uint16_t x);
void f32_to_bf16(const float* src, uint16_t* dst, size_t n);
void bf16_to_f32(const uint16_t* src, float* dst, size_t n);

class Tensor {
 public:
  Tensor() = default;
  // Owning, zero-filled, 64-byte aligned.
  explicit Tensor(Shape shape, DType dtype = DType::f32);
  // A non-owning view of memory that outlives the tensor (an arena, a mapped file).
  static Tensor view(void* data, Shape shape, DType dtype = DType::f32);

  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  bool empty() const { return data_ == nullptr; }
  bool owning() const { return storage_ != nullptr; }

  void* data() { return data_; }
  const void* data() const { return data_; }
  // Typed access; throws vitk::Error if the dtype differs.
  float* f32();
  const float* f32() const;
  uint16_t* bf16();
  const uint16_t* bf16() const;
  int32_t* i32();
  const int32_t* i32() const;
  uint8_t* u8();
  const uint8_t* u8() const;
  int8_t* s8();
  const int8_t* s8() const;

  // The same memory under another shape with the same number of elements (shares ownership).
  Tensor reshaped(Shape shape) const;
  // Rows [begin, end) of the first axis, as a view sharing ownership.
  Tensor rows(int64_t begin, int64_t end) const;

  Tensor clone() const;  // owning deep copy
  void zero();
  void fill(float value);               // f32 only
  void copy_from(const Tensor& other);  // same shape and dtype

 private:
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::f32;
};

// One large aligned block handed out as views. reset() frees everything at once; a step that needs
// more than the block spills into extra chunks, and the next reset() merges them into one block of
// the high-water size, so the steady state of a loop never calls malloc.
class Arena {
 public:
  explicit Arena(size_t bytes = 0);
  Tensor alloc(Shape shape, DType dtype = DType::f32);  // zero-filled
  // Not initialised (whatever the last step left there): for outputs that an op overwrites
  // entirely, where zero-filling would be a wasted pass over memory.
  Tensor alloc_uninit(Shape shape, DType dtype = DType::f32);
  // Tests: with poison on, alloc_uninit() fills its memory with 0xFF bytes (a NaN in f32 and bf16)
  // so that any read before a write shows up in the results. Initially on when the environment
  // variable VITK_POISON_ARENA is set to a non-empty value other than "0".
  void set_poison(bool on) { poison_ = on; }
  bool poison() const { return poison_; }
  void reset();
  // A point to come back to: rewind(mark) frees everything allocated after mark() (tensors from
  // then on must not be read again), handing back the chunks added since to the system. For
  // inference that keeps only each block's output (nn::Context::free_block_activations).
  struct Mark {
    size_t chunk = 0, chunk_used = 0, used = 0;
  };
  Mark mark() const;
  void rewind(const Mark& m);
  size_t used() const { return used_; }
  size_t capacity() const;
  size_t high_water() const { return high_water_; }

 private:
  struct Chunk {
    std::shared_ptr<void> memory;
    size_t size = 0;
    size_t used = 0;
  };
  void* take(size_t bytes);
  std::vector<Chunk> chunks_;
  size_t used_ = 0;
  size_t high_water_ = 0;
  bool poison_ = false;
};

std::shared_ptr<void> aligned_alloc_shared(size_t bytes);

}  // namespace vitk
