#!/usr/bin/env bash
# Checks the Markdown pages of the repository and prints each problem, naming the file:
#   - a page longer than its limit (README.md 320 lines, configs/README.md 200,
#     tests/bench/README.md 200, common/dist/README.md 150, any other page 250);
#   - a page that names an issue number ("issue 30", "Issues #31", a bare "#32") or a
#     "stop N", or a design file that is not in the repository (DESIGN[.]md);
#   - a file that is not Markdown (code, scripts) that names DESIGN[.]md;
#   - a relative link [text](path) or [text](path#anchor) whose file does not exist, that leaves
#     the repository, or whose anchor no heading of the target page produces (GitHub's slugs:
#     lowercase, punctuation but - and _ dropped, spaces to -, -1, -2 for repeated headings).
# Exits 1 if there is a problem, 0 otherwise. Needs bash, grep, wc and python3 (standard library).
#
#   bash tools/check_docs.sh [SOURCE_ROOT]
set -uo pipefail
cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" || exit 2

# The files to check: git's tracked files, or every file outside the build folders when the tree
# is not a git checkout (a source archive).
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files)
else
  mapfile -t files < <(find . -type f -not -path './.git/*' -not -path './build*' \
                         -not -path '*/node_modules/*' | sed 's|^\./||' | sort)
fi
pages=()
others=()
for f in "${files[@]}"; do
  [[ -f $f ]] || continue
  case $f in
    *.md) pages+=("$f") ;;
    *) others+=("$f") ;;
  esac
done

bad=0
problem() {
  echo "check_docs: $*"
  bad=1
}

# Line limits.
for f in "${pages[@]}"; do
  case $f in
    README.md) limit=320 ;;
    configs/README.md | tests/bench/README.md) limit=200 ;;
    common/dist/README.md) limit=150 ;;
    *) limit=250 ;;
  esac
  lines=$(wc -l <"$f")
  if ((lines > limit)); then
    problem "$f: $lines lines, more than its limit of $limit"
  fi
done

# Issue numbers, stops and the missing design file in the pages.
pattern='[Ii]ssues? #?[0-9]+|(^|[[:space:](])#[0-9]+\b|\b[Ss]tops? [0-9]+\b|DESIGN[.]md'
for f in "${pages[@]}"; do
  while IFS= read -r hit; do
    problem "$f:${hit%%:*}: names an issue, a stop or a file outside the repository: ${hit#*:}"
  done < <(grep -nE "$pattern" "$f")
done

# The missing design file in code, scripts and build files.
for f in "${others[@]}"; do
  while IFS= read -r hit; do
    problem "$f:${hit%%:*}: cites DESIGN[.]md, which is not in the repository"
  done < <(grep -InE 'DESIGN[.]md' "$f")
done

# Relative links and their anchors.
if ((${#pages[@]} > 0)); then
  if ! python3 - "${pages[@]}" <<'PY'
import os
import re
import sys

pages = sys.argv[1:]
root = os.path.realpath(".")
fence = re.compile(r"^\s*(```|~~~)")
heading = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
html_anchor = re.compile(r"""<a\s+(?:name|id)\s*=\s*["']([^"']+)["']""", re.I)
link = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
inline_code = re.compile(r"`[^`]*`")


def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks."""
    inside = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if fence.match(line):
                inside = not inside
                continue
            if not inside:
                yield number, line.rstrip("\n")


def slug(text):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text)                      # HTML tags go
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ " or c.isspace())
    return re.sub(r"\s", "-", text)


anchor_cache = {}


def anchors(path):
    if path not in anchor_cache:
        found, seen = set(), {}
        for _, line in prose_lines(path):
            m = heading.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                found.add(base if n == 0 else f"{base}-{n}")
                seen[base] = n + 1
            for a in html_anchor.findall(line):
                found.add(a)
        anchor_cache[path] = found
    return anchor_cache[path]


bad = False
for page in pages:
    for number, line in prose_lines(page):
        for target in link.findall(inline_code.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto:, ...
                continue
            path, _, anchor = target.partition("#")
            if path:
                full = os.path.realpath(os.path.join(os.path.dirname(page), path))
            else:
                full = os.path.realpath(page)
            where = f"check_docs: {page}:{number}: link {target}"
            if full != root and not full.startswith(root + os.sep):
                print(f"{where} leaves the repository")
                bad = True
            elif not os.path.exists(full):
                print(f"{where}: no such file")
                bad = True
            elif anchor:
                if not full.endswith(".md") or os.path.isdir(full):
                    print(f"{where}: an anchor into a file that is not a Markdown page")
                    bad = True
                elif anchor not in anchors(full):
                    print(f"{where}: no heading of {os.path.relpath(full, root)} has that anchor")
                    bad = True
sys.exit(1 if bad else 0)
PY
  then
    bad=1
  fi
fi

if ((bad)); then
  echo "check_docs: FAILED"
  exit 1
fi
echo "check_docs: ${#pages[@]} pages, ${#others[@]} other files: OK"
