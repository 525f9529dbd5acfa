#!/usr/bin/env bash
# The build refuses an #include that points up a layer: a file compiled as part of a layer, with
# that layer's include roots (CMakeLists.txt), finds the headers of its own layer and of those
# below, and fails with "No such file" on a header of a layer above.
#
#   bash tests/layers_test.sh CXX LAYERS_DIR [-I... of the system libraries]
set -euo pipefail
cxx=$1 layers=$2
shift 2
system=("$@")
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT

failures=0
# compiles LAYER HEADER EXPECT: EXPECT is "ok" or "refused".
compiles() {
  local layer=$1 header=$2 expect=$3 roots=()
  case $layer in
    core) roots=(core) ;;
    data) roots=(data core) ;;
    translation) roots=(translation core) ;;
    vit) roots=(vit data core) ;;
    caption) roots=(caption vit data core) ;;
    caption_scenes) roots=(caption_scenes caption vit data core) ;;
    api) roots=(api caption vit data translation core) ;;
    public) roots=() ;;  # a program that links libvitk: the installed headers alone
  esac
  local flags=()
  for r in "${roots[@]}"; do flags+=("-I$layers/$r"); done
  # The public API's include root (<vitk/vitk.h>), beside the layers' in the build tree.
  [[ $layer == api || $layer == public ]] && flags+=("-I$layers/../include")
  printf '#include "%s"\n' "$header" >"$probe/probe.cpp"
  if "$cxx" -std=c++17 -fsyntax-only -fopenmp "${flags[@]}" "${system[@]}" "$probe/probe.cpp" \
      >"$probe/out.txt" 2>&1; then
    got=ok
  elif grep -q "No such file" "$probe/out.txt"; then
    got=refused
  else
    got="failed otherwise: $(head -c 400 "$probe/out.txt")"
  fi
  if [[ $got == "$expect" ]]; then
    echo "ok: the $layer layer including \"$header\": $got"
  else
    echo "FAIL: the $layer layer including \"$header\": expected $expect, got $got" >&2
    failures=$((failures + 1))
  fi
}

compiles core common/tensor.h ok
compiles core common/train/trainer.h ok
compiles core datasets/dataset.h refused
compiles core common/seq2seq/config.h refused
compiles core vit/vit.h refused
compiles data datasets/tokenizer.h ok
compiles data common/nn/nn.h ok
compiles data vit/vit.h refused
compiles data common/seq2seq/config.h refused
compiles translation common/seq2seq/model.h ok
compiles translation datasets/tokenizer.h refused
compiles translation vit/vit.h refused
compiles vit vit/vit.h ok
compiles vit datasets/loader.h ok
compiles vit common/seq2seq/model.h refused
compiles vit tools/cli.h refused
compiles vit vit/caption/model.h refused
compiles caption vit/caption/model.h ok
compiles caption vit/vit.h ok
compiles caption common/seq2seq/model.h refused
compiles caption tools/cli.h refused
compiles caption vit/caption/scenes/extras.h refused
compiles caption_scenes vit/caption/scenes/extras.h ok
compiles caption_scenes vit/caption/task.h ok
compiles caption_scenes datasets/scenes.h ok
compiles caption_scenes common/seq2seq/model.h refused
compiles caption_scenes tools/cli.h refused
compiles api tools/api/internal.h ok
compiles api vitk/vitk.h ok
compiles api tools/cli.h refused
compiles api vit/caption/scenes/extras.h refused
compiles public vitk/vitk.h ok
compiles public vitk/opencv.h ok
compiles public common/tensor.h refused
compiles public tools/api/internal.h refused

((failures == 0)) || { echo "$failures case(s) wrong" >&2; exit 1; }
