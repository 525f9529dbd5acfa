#pragma once
// Helpers of the two-rank tests (vitk_mpi_tests).
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/dist/world.h"

namespace vitk::dist::mpi_test {

// Lowers the largest count of one MPI call while it lives, so that small buffers go in chunks as
// buffers of more than INT_MAX elements would.
class SmallCounts {
 public:
  explicit SmallCounts(size_t n) { detail::set_max_count(n); }
  ~SmallCounts() { detail::set_max_count(INT_MAX); }
  SmallCounts(const SmallCounts&) = delete;
  SmallCounts& operator=(const SmallCounts&) = delete;
};

// Rank-dependent inputs that every rank can work out for every other rank: built from the bits of
// a hash of (i, rank), with no maths library involved (whose results may differ between a loop
// and its inlined copy), signs mixed and exponents within 2^-8..2^8 so that sums round.
inline uint64_t mix(size_t i, int rank) {
  uint64_t h = (uint64_t{i} + 1) * 0x9E3779B97F4A7C15ull ^
               (static_cast<uint64_t>(rank) + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

inline float input_float(size_t i, int rank) {
  const uint64_t h = mix(i, rank);
  const uint32_t bits =
      static_cast<uint32_t>((h >> 63) << 31 | (119 + (h >> 40) % 16) << 23 | (h & 0x7FFFFF));
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline double input_double(size_t i, int rank) {
  const uint64_t h = mix(i, rank);
  const uint64_t bits =
      (h >> 63) << 63 | (1015 + (h >> 52) % 16) << 52 | (h & ((uint64_t{1} << 52) - 1));
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

}  // namespace vitk::dist::mpi_test
