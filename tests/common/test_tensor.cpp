#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "common/error.h"
#include "common/params.h"
#include "common/tensor.h"

using namespace vitk;

TEST(Tensor, OwningIsAlignedAndZeroed) {
  Tensor t({3, 5});
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.nbytes(), 60u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % kAlignment, 0u);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(t.f32()[i], 0.f);
  EXPECT_EQ(t.dim(-1), 5);
  EXPECT_THROW(t.dim(2), Error);
  EXPECT_THROW(t.bf16(), Error);
}

TEST(Tensor, ReshapeAndRowsShareMemory) {
  Tensor t({4, 6});
  for (int i = 0; i < 24; ++i) t.f32()[i] = static_cast<float>(i);
  Tensor r = t.reshaped({2, 12});
  EXPECT_EQ(r.data(), t.data());
  EXPECT_THROW(t.reshaped({5, 5}), Error);
  Tensor rows = t.rows(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 6}));
  EXPECT_EQ(rows.f32()[0], 6.f);
  rows.f32()[0] = -1;
  EXPECT_EQ(t.f32()[6], -1.f);
  EXPECT_THROW(t.rows(3, 5), Error);
  Tensor c = t.clone();
  c.f32()[0] = 42;
  EXPECT_EQ(t.f32()[0], 0.f);
}

TEST(Tensor, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly half-way between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3·2^-8 is half-way too; the even neighbour is 1 + 2^-6.
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  float values[4] = {0.5f, -2.f, 3.140625f, 1e-3f};
  uint16_t b[4];
  float back[4];
  f32_to_bf16(values, b, 4);
  bf16_to_f32(b, back, 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(back[i], values[i], std::fabs(values[i]) / 128);
}

TEST(Tensor, S8HoldsSignedBytes) {
  Tensor t({2, 3}, DType::s8);
  EXPECT_EQ(t.nbytes(), 6u);
  EXPECT_STREQ(dtype_name(t.dtype()), "s8");
  t.s8()[0] = -127;
  t.s8()[5] = 127;
  EXPECT_EQ(t.clone().s8()[0], -127);
  EXPECT_EQ(t.clone().s8()[5], 127);
  EXPECT_THROW(t.u8(), Error);
  EXPECT_THROW(Tensor({1}).s8(), Error);
}

TEST(Arena, ReusesMemoryAfterReset) {
  Arena arena;
  Tensor a = arena.alloc({1000});
  Tensor b = arena.alloc({3 << 20});  // spills into a second chunk
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kAlignment, 0u);
  size_t high = arena.high_water();
  EXPECT_GE(high, a.nbytes() + b.nbytes());
  arena.reset();
  EXPECT_EQ(arena.used(), 0u);
  size_t cap = arena.capacity();
  EXPECT_GE(cap, high);
  // The same sequence now fits in the single merged block: no new chunk.
  void* first = arena.alloc({1000}).data();
  arena.alloc({3 << 20});
  EXPECT_EQ(arena.capacity(), cap);
  arena.reset();
  EXPECT_EQ(arena.alloc({1000}).data(), first);
}

TEST(Arena, RewindFreesWhatCameAfterTheMark) {
  Arena arena;
  Tensor kept = arena.alloc({100});
  kept.fill(7.f);
  const Arena::Mark mark = arena.mark();
  const size_t used = arena.used();
  void* after_mark = arena.alloc({1000}).data();
  arena.alloc({3 << 20});  // spills into a second chunk, handed back by the rewind
  const size_t two_chunks = arena.capacity();
  arena.rewind(mark);
  EXPECT_EQ(arena.used(), used);
  EXPECT_LT(arena.capacity(), two_chunks);
  EXPECT_EQ(arena.alloc({1000}).data(), after_mark);        // the same place again
  EXPECT_EQ(kept.f32()[99], 7.f);                           // what came before is untouched
  EXPECT_GE(arena.high_water(), used + (size_t{3} << 22));  // the peak is remembered
  // A mark taken on an empty arena rewinds to its start; a mark ahead of the position is refused.
  Arena empty;
  const Arena::Mark start = empty.mark();
  empty.alloc({10});
  const Arena::Mark ahead = empty.mark();
  empty.rewind(start);
  EXPECT_EQ(empty.used(), 0u);
  EXPECT_THROW(empty.rewind(Arena::Mark{0, 64, 64}), Error);
  (void)ahead;
}

TEST(ParamStore, OneArenaForValuesOneForGradients) {
  ParamStore ps;
  ps.add("a.weight", {3, 5});
  ps.add("a.bias", {3}, false);
  EXPECT_THROW(ps.add("a.bias", {3}), Error);
  EXPECT_THROW(ps.add("bad", {0}), Error);
  ps.finalize();
  EXPECT_THROW(ps.add("late", {1}), Error);
  EXPECT_EQ(ps.numel(), 18);
  EXPECT_EQ(ps.arena_floats(), 32u);  // each parameter starts on a 64-byte line
  Parameter& w = ps.get("a.weight");
  Parameter& b = ps.get("a.bias");
  EXPECT_EQ(w.value.f32(), ps.values().f32());
  EXPECT_EQ(b.value.f32(), ps.values().f32() + 16);
  EXPECT_EQ(b.grad.f32(), ps.grads().f32() + 16);
  EXPECT_FALSE(b.decay);
  b.grad.fill(2.f);
  ps.zero_grad();
  EXPECT_EQ(b.grad.f32()[2], 0.f);
  EXPECT_THROW(ps.get("missing"), Error);
}
