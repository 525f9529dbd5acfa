#include "common/ops/dnnl_context.h"

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "common/error.h"
#include "common/ops/ops.h"

namespace vitk::ops {
namespace detail {

namespace {
std::atomic<int64_t> g_primitives{0};
}

dnnl::engine& engine() {
  apply_isa_cap();
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

const dnnl::primitive& cached_primitive(const std::string& key,
                                        const std::function<dnnl::primitive()>& make) {
  static std::mutex mutex;
  static std::unordered_map<std::string, dnnl::primitive> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  dnnl::primitive p;
  try {
    p = make();
  } catch (const dnnl::error& e) {
    throw Error("oneDNN cannot create the primitive for " + key + ": " + e.what());
  }
  ++g_primitives;
  return cache.emplace(key, std::move(p)).first->second;
}

dnnl::memory::data_type dnnl_type(DType dt) {
  switch (dt) {
    case DType::f32:
      return dnnl::memory::data_type::f32;
    case DType::bf16:
      return dnnl::memory::data_type::bf16;
    case DType::i32:
      return dnnl::memory::data_type::s32;
    case DType::u8:
      return dnnl::memory::data_type::u8;
    case DType::s8:
      return dnnl::memory::data_type::s8;
  }
  return dnnl::memory::data_type::undef;
}

}  // namespace detail

void set_num_threads(int n) {
  if (n < 1) throw UsageError("--threads must be at least 1, not " + std::to_string(n));
  omp_set_num_threads(n);
}

int num_threads() {
  return omp_get_max_threads();
}

std::string cpu_isa() {
  apply_isa_cap();
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "unknown";
  }
}

namespace {

// The environment variable set to anything but "" or "0": tests of what happens on a CPU without
// the instructions, run on one that has them (VITK_ISA_NO_BF16, VITK_ISA_NO_VNNI).
bool hidden(const char* variable) {
  const char* v = std::getenv(variable);
  return v && *v && std::string(v) != "0";
}

}  // namespace

bool bf16_supported() {
  if (hidden("VITK_ISA_NO_BF16")) return false;
  apply_isa_cap();
  auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

bool vnni_supported() {
  if (hidden("VITK_ISA_NO_VNNI")) return false;
  apply_isa_cap();
  // Every ISA oneDNN 2.6 ranks above avx512_core_vnni includes VNNI.
  auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx2_vnni || isa == dnnl::cpu_isa::avx512_core_vnni ||
         isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

Precision parse_precision(const std::string& name) {
  if (name == "f32") return Precision::f32;
  if (name == "bf16") return Precision::bf16;
  if (name == "int8") return Precision::int8;
  throw UsageError("--precision must be f32, bf16 or int8, not '" + name + "'");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::f32:
      return "f32";
    case Precision::bf16:
      return "bf16";
    case Precision::int8:
      return "int8";
  }
  return "?";
}

std::string describe_precision(Precision p) {
  if (p != Precision::int8) return precision_name(p);
  return std::string("int8 (") +
         (vnni_supported() ? "8-bit activations, VNNI" : "7-bit activations: no VNNI") +
         "; other products " + (bf16_supported() ? "bf16" : "f32") + ")";
}

void require_precision(Precision p, const std::string& option) {
  if (p != Precision::bf16 || bf16_supported()) return;
  std::string why = "oneDNN sees " + cpu_isa();
  if (hidden("VITK_ISA_NO_BF16")) why += ", and VITK_ISA_NO_BF16 hides its bf16 instructions";
  throw UsageError(option + " bf16 needs a CPU with AVX512_BF16 (" + why + "); use " + option +
                   " f32");
}

int64_t primitive_count() {
  return detail::g_primitives.load();
}

}  // namespace vitk::ops
