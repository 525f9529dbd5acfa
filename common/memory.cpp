#include "common/memory.h"

#include <unistd.h>

#include <cstdio>
#include <limits>

namespace vitk {

namespace {
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
}

uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t out;
  return __builtin_mul_overflow(a, b, &out) ? kMax : out;
}

uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t out;
  return __builtin_add_overflow(a, b, &out) ? kMax : out;
}

uint64_t sat_product(std::initializer_list<int64_t> factors) {
  uint64_t out = 1;
  for (int64_t f : factors) out = sat_mul(out, f > 0 ? static_cast<uint64_t>(f) : 0);
  return out;
}

uint64_t machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return kMax;
  return sat_mul(static_cast<uint64_t>(pages), static_cast<uint64_t>(page));
}

std::string bytes_text(uint64_t bytes) {
  if (bytes == kMax) return "more than 16 EiB";
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return text;
}

std::string memory_shortfall(uint64_t bytes) {
  const uint64_t machine = machine_memory_bytes();
  if (bytes <= machine) return "";
  std::string need = "needs at least " + bytes_text(bytes);
  if (bytes != kMax) need += " (" + std::to_string(bytes) + " bytes)";
  return need + ", more than the " + bytes_text(machine) + " of memory this machine has";
}

}  // namespace vitk
