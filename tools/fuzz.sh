#!/usr/bin/env bash
# Runs every parser's libFuzzer harness (tests/fuzz/README.md) for SECONDS each (default 60), one
# after another, in build-fuzz/ (configured and built with clang here when needed). Each runs on
# a scratch copy of its seed corpus (tests/fuzz/corpus/<parser>/); the table at the end gives each
# harness's executions and coverage (libFuzzer's last "#N DONE cov: X ft: Y" line). A crash, a
# sanitizer report, a timeout or an out-of-memory input is copied to
# tests/fuzz/regressions/<parser>/, where the ctest test fuzz_replay_<parser> replays it once the
# parser is fixed.
#
#   tools/fuzz.sh [SECONDS] [PARSER...]    e.g. tools/fuzz.sh 1800, tools/fuzz.sh 60 json image
#
# Scratch copies live in /dev/shm when writable (else $TMPDIR or /tmp).
# Environment: FUZZ_JOBS=N runs N harnesses at once (default 1); FUZZ_MERGE=1 merges new inputs
# of at most 4 KB back into the committed corpus (keep it small: review before committing).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
parsers_all=(safetensors json metrics_csv idx image parallel captions tokenizer checkpoint ini)

seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || { echo "fuzz.sh: SECONDS must be a positive integer, got '$seconds'" >&2; exit 2; }
shift || true
parsers=("$@")
((${#parsers[@]})) || parsers=("${parsers_all[@]}")
for p in "${parsers[@]}"; do
  [[ " ${parsers_all[*]} " == *" $p "* ]] || { echo "fuzz.sh: unknown parser '$p' (one of: ${parsers_all[*]})" >&2; exit 2; }
done

build=$root/build-fuzz
if [[ ! -f $build/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ nice -n 5 cmake -S "$root" -B "$build" -DVITK_FUZZ=ON -DVITK_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only" \
    -DCMAKE_C_FLAGS_RELEASE="-O1 -gline-tables-only"
fi
targets=()
for p in "${parsers[@]}"; do targets+=("fuzz_$p"); done
nice -n 5 cmake --build "$build" -j"${FUZZ_BUILD_JOBS:-2}" --target "${targets[@]}"

# Scratch space in memory when there is some: the file-reading harnesses write every input to a
# file, which costs more than the parse on a disk (1.6 ms against 0.04 ms here).
scratch=${TMPDIR:-/tmp}
[[ -d /dev/shm && -w /dev/shm ]] && scratch=/dev/shm
work=$(mktemp -d "$scratch/vitk_fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

run_one() {
  local p=$1 dir=$work/$1
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp -r "$root/tests/fuzz/corpus/$p/." "$dir/corpus/"
  # A hang of 10 s, 2 GB of memory or a single allocation of 1 GB is a finding. The harness's
  # standard output is closed. The checkpoint harness runs in fork mode, which goes on after a
  # crash: most of what it reaches is libhdf5, whose crashes would otherwise end a run within
  # seconds (tests/fuzz/README.md).
  local extra=()
  [[ $p == checkpoint ]] && extra=(-fork=1 -ignore_crashes=1)
  (cd "$dir" && TMPDIR=$dir LSAN_OPTIONS=suppressions=$root/tests/fuzz/lsan_hdf5.supp \
    OMP_NUM_THREADS=1 nice -n 5 "$build/tests/fuzz/fuzz_$p" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -close_fd_mask=1 -print_final_stats=1 \
    "${extra[@]}" -artifact_prefix="$dir/artifacts/" "$dir/corpus" >"$dir/log" 2>&1) || true
}

running=0
for p in "${parsers[@]}"; do
  echo "fuzz.sh: fuzz_$p for ${seconds}s"
  run_one "$p" &
  running=$((running + 1))
  if ((running >= ${FUZZ_JOBS:-1})); then wait -n || true; running=$((running - 1)); fi
done
wait

status=0
printf '\n%-12s %14s %8s %8s %9s  %s\n' parser executions cov ft corpus result
for p in "${parsers[@]}"; do
  dir=$work/$p
  # "#N DONE cov: ..." ends a plain run; a fork-mode run's last status line is "#N: cov: ...".
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE|^#[0-9]+: cov' "$dir/log" | tail -1 || true)
  last_line=$(grep -E '^#[0-9]+:?[[:space:]]' "$dir/log" | tail -1 || true)
  line=${done_line:-$last_line}
  execs=$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$line")
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$line")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$line")
  corp=$(sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$line")
  result=ok
  shopt -s nullglob
  artifacts=("$dir"/artifacts/*)
  shopt -u nullglob
  if ((${#artifacts[@]})); then
    result="FOUND ${#artifacts[@]}:"
    mkdir -p "$root/tests/fuzz/regressions/$p"
    for a in "${artifacts[@]}"; do
      name=$(basename "$a")
      cp "$a" "$root/tests/fuzz/regressions/$p/$name"
      result+=" tests/fuzz/regressions/$p/$name"
    done
    cp "$dir/log" "$root/build-fuzz/fuzz_$p.log"
    result+=" (log: build-fuzz/fuzz_$p.log)"
    status=1
  elif [[ -z $done_line ]]; then
    result="no DONE line (log: build-fuzz/fuzz_$p.log)"
    cp "$dir/log" "$root/build-fuzz/fuzz_$p.log"
    status=1
  fi
  printf '%-12s %14s %8s %8s %9s  %s\n' "$p" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result"
  if [[ ${FUZZ_MERGE:-0} == 1 && -z ${artifacts[*]-} ]]; then
    # Only new inputs of at most 4 KB that add coverage to the committed corpus.
    mkdir -p "$dir/small"
    find "$dir/corpus" -type f -size -4097c -exec cp {} "$dir/small/" \;
    (cd "$dir" && "$build/tests/fuzz/fuzz_$p" -merge=1 -close_fd_mask=3 \
      "$root/tests/fuzz/corpus/$p" "$dir/small" >/dev/null 2>&1) || true
  fi
done
echo "fuzz.sh: $(date -u +%F), ${seconds}s per harness, $(clang++ --version | head -1)"
exit $status
