// The ops of kernel_functions.h: each calls the copy compiled for the level kernel_isa() chose.
#include <utility>

#include "common/ops/kernel_functions.h"
#include "common/ops/ops.h"

namespace vitk::ops {

#define VITK_DISPATCH(ret, name, params, args) \
  ret name params {                            \
    switch (kernel_isa()) {                    \
      case KernelIsa::avx512:                  \
        return isa_avx512::name args;          \
      case KernelIsa::avx2:                    \
        return isa_avx2::name args;            \
      default:                                 \
        return isa_baseline::name args;        \
    }                                          \
  }

VITK_KERNEL_FUNCTIONS(VITK_DISPATCH)

}  // namespace vitk::ops
