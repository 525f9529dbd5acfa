#!/usr/bin/env bash
# The ISA-dependent suites (ops products, attention paths, int8, model parity) again with vitk and
# oneDNN both capped at a lower level: VITK_MAX_ISA=LEVEL. oneDNN takes its level once per
# process, so each level is a process of its own. Exit 77 (a skip, with the reason) when the cap
# changes nothing here: the CPU has no more than LEVEL, and the main run already covers it.
#
#   bash tests/isa_level_test.sh LEVEL VITK_BINARY TESTS_BINARY GTEST_FILTER
set -euo pipefail
level=$1 vitk=$2 tests=$3 filter=$4
own=$("$vitk" env | grep "^cpu isa:")
capped_env=$(VITK_MAX_ISA=$level "$vitk" env)
capped=$(grep "^cpu isa:" <<<"$capped_env")
if [[ $own == "$capped" ]]; then
  echo "skip: VITK_MAX_ISA=$level leaves oneDNN at this CPU's own level (${own#cpu isa: })"
  exit 77
fi
echo "VITK_MAX_ISA=$level: ${capped}, $(grep '^kernels:' <<<"$capped_env")"
VITK_MAX_ISA=$level exec "$tests" --gtest_filter="$filter" --gtest_brief=1
