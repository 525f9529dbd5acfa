#pragma once
// Tests of vitk's own kernels at every instruction-set level they are compiled for
// (ops::KernelIsa: baseline, avx2, avx512), in one process: a suite declared with
// VITK_AT_EVERY_ISA_LEVEL(Suite) runs each of its TEST_P(Suite, ...) once per level, as
// Isa/Suite.Name/avx2, and a level this CPU (or VITK_MAX_ISA) does not allow is a skip that says
// so. oneDNN's level is fixed per process: the ctest entries isa_level_* run the ISA-dependent
// suites again under a lower VITK_MAX_ISA (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "common/ops/ops.h"

namespace vitk::test {

class AtEveryIsaLevel : public ::testing::TestWithParam<ops::KernelIsa> {
 protected:
  void SetUp() override {
    if (!ops::kernel_isa_available(GetParam()))
      GTEST_SKIP() << ops::kernel_isa_name(GetParam()) << " kernels do not run here (the CPU or "
                   << "VITK_MAX_ISA allows " << ops::kernel_isa_name(ops::kernel_isa()) << ")";
    ops::set_kernel_isa(GetParam());
  }
  void TearDown() override { ops::set_kernel_isa(saved_); }

 private:
  ops::KernelIsa saved_ = ops::kernel_isa();
};

inline std::string isa_level_name(const ::testing::TestParamInfo<ops::KernelIsa>& p) {
  return ops::kernel_isa_name(p.param);
}

}  // namespace vitk::test

namespace vitk::ops {
// The level by name in GoogleTest's messages (and ctest's test names), not as four bytes.
inline void PrintTo(KernelIsa level, std::ostream* out) {
  *out << kernel_isa_name(level);
}
}  // namespace vitk::ops

#define VITK_AT_EVERY_ISA_LEVEL(Suite)                                                  \
  class Suite : public ::vitk::test::AtEveryIsaLevel {};                                \
  INSTANTIATE_TEST_SUITE_P(                                                             \
      Isa, Suite,                                                                       \
      ::testing::Values(::vitk::ops::KernelIsa::baseline, ::vitk::ops::KernelIsa::avx2, \
                        ::vitk::ops::KernelIsa::avx512),                                \
      ::vitk::test::isa_level_name)
