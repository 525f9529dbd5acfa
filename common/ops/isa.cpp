// Which instruction-set level runs: vitk's own loops (compiled once per KernelIsa, see
// kernel_functions.h) and oneDNN's (which JIT-compiles its own for the CPU it finds). Both are
// chosen once, from what the CPU has, capped by VITK_MAX_ISA.
#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string>

#include "common/error.h"
#include "common/ops/dnnl_context.h"
#include "common/ops/ops.h"

namespace vitk::ops {
namespace {

struct Cap {
  const char* name;         // as VITK_MAX_ISA spells it
  const char* onednn_name;  // oneDNN's name for the same cap, accepted too ("" when the same)
  dnnl::cpu_isa onednn;     // the cap given to oneDNN
  KernelIsa kernels;        // the highest level of our own loops it allows
};

// From the lowest level to the highest.
const Cap kCaps[] = {
    {"baseline", "sse41", dnnl::cpu_isa::sse41, KernelIsa::baseline},
    {"avx2", "", dnnl::cpu_isa::avx2, KernelIsa::avx2},
    {"avx512", "avx512_core", dnnl::cpu_isa::avx512_core, KernelIsa::avx512},
    {"avx512_vnni", "avx512_core_vnni", dnnl::cpu_isa::avx512_core_vnni, KernelIsa::avx512},
    {"avx512_bf16", "avx512_core_bf16", dnnl::cpu_isa::avx512_core_bf16, KernelIsa::avx512},
    {"amx", "avx512_core_amx", dnnl::cpu_isa::avx512_core_amx, KernelIsa::avx512},
    {"all", "", dnnl::cpu_isa::all, KernelIsa::avx512},
};

// "baseline, avx2, ... or all": the values VITK_MAX_ISA takes, for its error message.
std::string cap_names() {
  std::string names;
  const size_t n = std::size(kCaps);
  for (size_t i = 0; i < n; ++i)
    names += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + kCaps[i].name;
  return names;
}

// The highest level of our own loops this CPU can run, from CPUID and what the OS saves (the
// compilers' __builtin_cpu_supports checks both). Feature by feature, as clang 14 knows no
// "x86-64-v3": AVX2, FMA and BMI2 stand for x86-64-v3 (every CPU with them has its F16C, MOVBE
// and LZCNT too), AVX-512 F, BW, DQ, VL and CD are x86-64-v4.
KernelIsa cpu_kernel_isa() {
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                  __builtin_cpu_supports("avx512cd");
  return v4 ? KernelIsa::avx512 : v3 ? KernelIsa::avx2 : KernelIsa::baseline;
}

// The level oneDNN runs at (after the cap) as a level of our loops.
KernelIsa onednn_kernel_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core:
    case dnnl::cpu_isa::avx512_core_vnni:
    case dnnl::cpu_isa::avx512_core_bf16:
    case dnnl::cpu_isa::avx512_core_amx:
      return KernelIsa::avx512;
    case dnnl::cpu_isa::avx2:
    case dnnl::cpu_isa::avx2_vnni:
      return KernelIsa::avx2;
    default:
      return KernelIsa::baseline;
  }
}

struct Choice {
  std::string setting;                   // VITK_MAX_ISA, "" when unset
  KernelIsa best = KernelIsa::baseline;  // what the CPU and the cap allow
  KernelIsa current = KernelIsa::baseline;
};

// Reads VITK_MAX_ISA and caps oneDNN before its first primitive: oneDNN takes a cap only once per
// process, before it has looked at the CPU. A value we do not know is an error naming the variable
// (every command's first oneDNN call reaches here, so it is reported at start-up).
Choice& choice() {
  static Choice c = [] {
    Choice made;
    const char* v = std::getenv("VITK_MAX_ISA");
    made.setting = v ? v : "";
    KernelIsa cap = KernelIsa::avx512;
    if (!made.setting.empty()) {
      const Cap* found = nullptr;
      for (const Cap& entry : kCaps)
        if (made.setting == entry.name || made.setting == entry.onednn_name) found = &entry;
      if (!found) throw UsageError("VITK_MAX_ISA=" + made.setting + ": expected " + cap_names());
      try {
        dnnl::set_max_cpu_isa(found->onednn);
      } catch (const dnnl::error& e) {
        throw Error(std::string("VITK_MAX_ISA: oneDNN refused the cap: ") + e.what());
      }
      cap = found->kernels;
    }
    made.best = std::min({cap, cpu_kernel_isa(), onednn_kernel_isa()});
    made.current = made.best;
    return made;
  }();
  return c;
}

}  // namespace

void apply_isa_cap() {
  (void)choice();
}

KernelIsa kernel_isa() {
  return choice().current;
}

const char* kernel_isa_name(KernelIsa level) {
  switch (level) {
    case KernelIsa::baseline:
      return "baseline";
    case KernelIsa::avx2:
      return "avx2";
    case KernelIsa::avx512:
      return "avx512";
  }
  return "?";
}

bool kernel_isa_available(KernelIsa level) {
  return level <= choice().best;
}

void set_kernel_isa(KernelIsa level) {
  if (!kernel_isa_available(level))
    throw Error(std::string("set_kernel_isa: ") + kernel_isa_name(level) +
                " is above what runs here (" + kernel_isa_name(choice().best) + ")");
  choice().current = level;
}

std::string max_isa_setting() {
  return choice().setting;
}

}  // namespace vitk::ops
