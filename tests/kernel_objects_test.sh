#!/usr/bin/env bash
# What the build made of the kernels compiled per ISA level (CMakeLists.txt, VITK_KERNEL_SOURCES):
# - each level's object exports only its own namespace, vitk::ops::isa_LEVEL: every inline
#   function and template it compiled for that level (std::vector's, Tensor's) is private to it,
#   so the linker can never hand the rest of vitk a copy built for a higher level;
# - it holds no mutable data outside that namespace (a private copy of a shared static would
#   split one variable in two);
# - its instructions are those of its level: no 256-bit registers at baseline, no 512-bit ones
#   at avx2, and 512-bit ones at avx512 (the fused attention tiles).
#
#   bash tests/kernel_objects_test.sh NM OBJDUMP KERNELS_DIR
set -euo pipefail
nm=$1 objdump=$2 dir=$3
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

for level in baseline avx2 avx512; do
  object=$dir/$level.o
  [[ -f $object ]] || { fail "$object was not built"; continue; }
  prefix="_ZN4vitk3ops$((${#level} + 4))isa_${level}"
  # Global and weak definitions.
  exported=$("$nm" --defined-only -g "$object" | awk '{print $3}' | grep -v "^$prefix" || true)
  [[ -z $exported ]] ||
    fail "$level.o exports symbols outside isa_$level: $(head -5 <<<"$exported" | c++filt | tr '\n' ' ')"
  count=$("$nm" --defined-only -g "$object" | grep -c "$prefix" || true)
  ((count > 10)) ||
    fail "$level.o exports $count functions of isa_$level (expected the ops of kernel_functions.h)"
  # Writable data (b: bss, d: data) of anything but the level's namespace; typeinfo, vtables and
  # the personality routine's reference are written once, by the loader.
  shared=$("$nm" --defined-only "$object" | awk '$2 ~ /^[bd]$/ {print $3}' | c++filt |
           grep -v "isa_$level\|^typeinfo \|^vtable \|^DW\.ref\." || true)
  [[ -z $shared ]] ||
    fail "$level.o holds writable data outside isa_$level: $(head -5 <<<"$shared" | tr '\n' ' ')"
  code=$("$objdump" -d --no-show-raw-insn "$object")
  ymm=$(grep -c "%ymm" <<<"$code" || true)
  zmm=$(grep -c "%zmm" <<<"$code" || true)
  case $level in
    baseline) ((ymm == 0 && zmm == 0)) || fail "baseline.o uses AVX registers ($ymm ymm, $zmm zmm)" ;;
    avx2) ((zmm == 0 && ymm > 0)) || fail "avx2.o: $ymm ymm and $zmm zmm instructions (want ymm only)" ;;
    avx512) ((zmm > 0)) || fail "avx512.o uses no 512-bit registers" ;;
  esac
  echo "$level.o: $count exported functions of isa_$level, $ymm ymm and $zmm zmm instructions"
done
((failures == 0)) || exit 1
echo "kernel objects: private but for their namespace, instructions of their level"
