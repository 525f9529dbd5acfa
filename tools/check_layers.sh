#!/usr/bin/env bash
# Checks that every #include of the project's own headers points down the layers (see the layer
# list in CMakeLists.txt): the core (common/ but common/seq2seq/) includes only the core; datasets/
# the core and itself; common/seq2seq/ (translation) the core and itself; vit/ the core, datasets/
# and itself but not vit/caption/; vit/caption/ (captioning) the core, datasets/, vit/ and itself
# but not vit/caption/scenes/; vit/caption/scenes/ (the generated scenes' extras of captioning)
# those and itself; tools/api/ (the public API, <vitk/vitk.h>) the models but not the scenes'
# extras, and not the rest of tools/. tools/ and tests/ sit on top. Prints each include that points up and exits 1 if
# there is one.
#
#   bash tools/check_layers.sh [SOURCE_ROOT]
set -euo pipefail
cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}"

bad=0
# check FOLDER EXCLUDED_SUBFOLDER ALLOWED_PREFIXES...: the quoted includes of FOLDER's files (but
# those under EXCLUDED_SUBFOLDER) must each start with one of the prefixes, and none may start
# with common/seq2seq/, vit/caption/ or vit/caption/scenes/ unless that prefix is allowed.
check() {
  local folder=$1 excluded=$2
  shift 2
  local files
  files=$(find "$folder" -type f \( -name '*.cpp' -o -name '*.h' \) | { if [[ -n $excluded ]]; then grep -v "^$excluded/"; else cat; fi; } | sort)
  local file line target ok prefix
  for file in $files; do
    while IFS= read -r line; do
      target=$(sed -E 's/^[0-9]+:[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1/' <<<"$line")
      # A bare name is a header beside the file.
      [[ $target == */* ]] || continue
      ok=0
      for prefix in "$@"; do
        if [[ $target == "$prefix"* ]]; then ok=1; fi
      done
      if [[ $target == common/seq2seq/* && " $* " != *" common/seq2seq/ "* ]]; then ok=0; fi
      if [[ $target == vit/caption/* && " $* " != *" vit/caption/ "* ]]; then ok=0; fi
      if [[ $target == vit/caption/scenes/* && " $* " != *" vit/caption/scenes/ "* ]]; then ok=0; fi
      if ((!ok)); then
        echo "$file:${line%%:*}: includes \"$target\": $folder may include only $*" >&2
        bad=1
      fi
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" || true)
  done
}

check common common/seq2seq common/
check datasets "" common/ datasets/
check common/seq2seq "" common/ common/seq2seq/
check vit vit/caption common/ datasets/ vit/
check vit/caption vit/caption/scenes common/ datasets/ vit/ vit/caption/
check vit/caption/scenes "" common/ datasets/ vit/ vit/caption/ vit/caption/scenes/
check tools/api "" common/ datasets/ vit/ vit/caption/ common/seq2seq/ tools/api/ vitk/

if ((bad)); then
  echo "check_layers.sh: includes that point up a layer (CMakeLists.txt lists the layers)" >&2
  exit 1
fi
echo "check_layers.sh: every include points down the layers"
