#!/usr/bin/python3
"""Lists every function definition longer than 120 lines in the tracked .cpp and .h files outside
tests/ and exits 1 if there is one (the project's rule: a long function is split into named steps).

    /usr/bin/python3 tools/check_function_lengths.py [SOURCE_ROOT] [--max N] [--verbose]

--max N holds functions to N lines instead (--max 0 lists every function with its length);
--verbose also lists the exempt option tables. The files are those git tracks under SOURCE_ROOT
(without git, every .cpp and .h under it but in hidden and build* folders).

What counts as a function. The files are read with their comments, string and character literals
and preprocessor lines blanked out, and their braces matched. At namespace scope (the file's top
level, inside `namespace ... {` or `extern "C" {`) and inside a class body (`class`, `struct`,
`union`, `enum`), a `{` opens a function body when the declaration before it (the text since the
previous `;`, `{` or `}` of that scope) has a parameter list `(` and no `=` outside parentheses
(`= {` is a variable's initializer, `= [] {` a lambda held in a variable: neither is counted).
Everything inside a function body (lambdas, local classes, nested blocks) is part of that
function. A function's length is its lines from the first line of its declaration (its
`template <...>` line included) to the line of its closing `}`, both counted; it is too long
when that is more than 120.

The one exemption, option tables. A function is exempt when all three hold:
  1. its unqualified name matches add_*options* or register_* (e.g. add_vit_options,
     register_bench_commands);
  2. its body calls `add_options()`;
  3. at least half of its lines are lines of `add_options()` statements: from the line where
     `add_options()` is called to the line of the `;` that ends that statement.
Any other function, however much of it declares options, is held to the limit.
"""
import argparse
import os
import re
import subprocess
import sys

LIMIT = 120
KEYWORDS_CLASS = re.compile(r"(?:typedef\s+)?(?:class|struct|union|enum)\b")
EXEMPT_NAME = re.compile(r"^(?:add_\w*options\w*|register_\w+)$")


def quoted_end(text, i):
    """Where the string or character literal opened by the quote at text[i] ends (after its
    closing quote; at the end of the line for an unclosed one)."""
    j = i + 1
    while j < len(text) and text[j] != text[i] and text[j] != "\n":
        j += 2 if text[j] == "\\" else 1
    return j + 1


def blank(text):
    """text with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = list(text)
    n = len(text)
    i = 0
    line_start = True  # only whitespace since the last newline

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c == "#":
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            wipe(i, j)
            i = j
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c == '"':
            raw = re.search(r"(?:^|[^\w])(?:u8|u|U|L)?R$", text[max(0, i - 3) : i])
            if raw:
                m = re.match(r'"([^(\s]*)\(', text[i:])
                end = text.find(")" + (m.group(1) if m else "") + '"', i)
                j = n if end < 0 else end + len(m.group(1) if m else "") + 2
            else:
                j = quoted_end(text, i)
            wipe(i, j)
            i = j
        elif c == "'":
            # A digit separator (1'000'000) sits inside a number; a character literal does not.
            k = i
            while k > 0 and (text[k - 1].isalnum() or text[k - 1] in "_.'"):
                k -= 1
            if k < i and text[k].isdigit():
                i += 1
                continue
            j = quoted_end(text, i)
            wipe(i, j)
            i = j
        else:
            i += 1
    return "".join(out)


def strip_templates(header):
    """header without its leading `template <...>` clauses."""
    h = header.strip()
    while h.startswith("template"):
        m = re.match(r"template\s*<", h)
        if not m:
            break
        depth, k = 1, m.end()
        while k < len(h) and depth:
            depth += {"<": 1, ">": -1}.get(h[k], 0)
            k += 1
        h = h[k:].strip()
    return h


def top_level(h):
    """Yields (index, char) of h's characters outside parentheses, brackets and braces (an
    opening one included)."""
    depth = 0
    for k, ch in enumerate(h):
        if ch in ")]}":
            depth -= 1
        elif depth == 0:
            yield k, ch
        if ch in "([{":
            depth += 1


def has_assignment(h):
    """Whether h has an `=` outside parentheses that is not part of an operator's name or a
    comparison (a variable's initializer)."""
    h = re.sub(r"operator\s*[^\s(]+", "operator", h)
    for k, ch in top_level(h):
        if ch == "=" and h[k - 1 : k] not in ("=", "!", "<", ">") and h[k + 1 : k + 2] != "=":
            return True
    return False


def kind_of(header, in_parens):
    """'ns', 'class', 'func' or 'other' for the block a `{` after `header` opens."""
    if in_parens:
        return "other"
    h = strip_templates(header)
    if re.match(r"(?:inline\s+)?namespace\b", h) or (h.startswith("extern") and "(" not in h):
        return "ns"
    if KEYWORDS_CLASS.match(h) and not re.search(r"\)\s*(?:const|noexcept|override|final|\s)*$", h):
        return "class"
    if "(" in h and not has_assignment(h):
        return "func"
    return "other"


def function_name(header):
    """The name a function's declaration gives it: the word before its parameter list."""
    h = strip_templates(header)
    m = re.search(r"(operator\s*(?:\(\)|[^\s(]+))\s*\(", h)
    if m:
        return m.group(1).replace(" ", "")
    angle = 0
    for k, ch in top_level(h):
        if ch == "<":
            angle += 1
        elif ch == ">" and h[k - 1] != "-":
            angle -= 1
        elif ch == "(" and angle <= 0:
            m = re.search(r"([~\w][\w:~]*)\s*$", h[:k])
            return m.group(1) if m else h[:k].strip()
    return h.split("(")[0].strip()


def table_lines(body, first_line):
    """Line numbers of body's add_options() statements (from the call to the ending `;`)."""
    lines = set()
    for m in re.finditer(r"\badd_options\s*\(\s*\)", body):
        depth, k = 0, m.end()
        while k < len(body):
            ch = body[k]
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
                if depth < 0:
                    break
            elif ch == ";" and depth == 0:
                break
            k += 1
        a = first_line + body.count("\n", 0, m.start())
        b = first_line + body.count("\n", 0, k)
        lines.update(range(a, b + 1))
    return lines


def functions(text):
    """(name, first line, last line, exempt) of every function defined in text."""
    code = blank(text)
    found = []
    stack = []  # (kind, name, first line, index of the block's `{`) of the open blocks
    header_start = 0  # where the declaration before the next `{` of this scope starts
    paren = 0
    line = 1
    inside = 0  # depth of the blocks open inside a 'func', 'other' or 'init' block
    for i, ch in enumerate(code):
        if ch == "\n":
            line += 1
        elif inside:
            if ch == "{":
                inside += 1
            elif ch == "}":
                inside -= 1
                if inside == 0:
                    kind, name, first, body = stack.pop()
                    if kind == "func":
                        found.append((name, first, line, exempt(name, code[body:i], first, line)))
                    if kind != "init":  # a member's braces: the constructor's body comes next
                        header_start = i + 1
        elif ch in "([":
            paren += 1
        elif ch in ")]":
            paren -= 1
        elif ch == ";" and paren == 0:
            header_start = i + 1
        elif ch == "{":
            header = code[header_start:i]
            kind = kind_of(header, paren > 0)
            if kind == "func" and re.search(r"\)\s*:(?!:)", header) and re.search(r"\w$", header):
                kind = "init"  # `Foo() : a_{x}`: a member initialised with braces
            offset = len(header) - len(header.lstrip())
            first = line - code.count("\n", header_start + offset, i)
            if kind == "func":
                classes = [s[1] for s in stack if s[0] == "class"]
                name = "::".join(classes + [function_name(header)])
            else:
                name = class_name(header) if kind == "class" else ""
            stack.append((kind, name, first, i))
            if kind in ("func", "other", "init"):
                inside = 1
            else:
                header_start = i + 1
        elif ch == "}":
            if stack:
                stack.pop()
            header_start = i + 1
    return found


def class_name(header):
    m = re.match(r"(?:class|struct|union|enum(?:\s+class)?)\s+(?:\w+\s+)*?([\w:]+)\s*(?:final\b|:|$)",
                 strip_templates(header).strip())
    return m.group(1) if m else ""


def exempt(name, body, first, last):
    short = name.split("::")[-1]
    if not EXEMPT_NAME.match(short) or not re.search(r"\badd_options\s*\(\s*\)", body):
        return False
    return 2 * len(table_lines(body, first)) >= last - first + 1


def source_files(root):
    """The .cpp and .h files git tracks under root; without git (a source tarball), every one
    under root but in hidden folders and build*/ folders."""
    try:
        listed = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", "*.cpp", "*.h"],
                                check=True, capture_output=True, text=True).stdout
        return [f for f in listed.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = [d for d in subfolders if not d.startswith((".", "build"))]
            found += [os.path.relpath(os.path.join(folder, n), root)
                      for n in names if n.endswith((".cpp", ".h"))]
        return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=".", help="the source tree (a git work tree)")
    parser.add_argument("--max", type=int, default=LIMIT, help="most lines a function may have")
    parser.add_argument("--verbose", action="store_true", help="also list the exempt tables")
    args = parser.parse_args()
    files = sorted(f for f in source_files(args.root) if not f.startswith("tests/"))
    long_ones, exempted = [], []
    for path in files:
        with open(f"{args.root}/{path}", encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name, first, last, is_exempt in functions(text):
            length = last - first + 1
            if length <= args.max:
                continue
            (exempted if is_exempt else long_ones).append((path, first, name, length))
    for path, first, name, length in long_ones:
        print(f"{path}:{first}: {name}: {length} lines (at most {args.max})")
    if args.verbose:
        for path, first, name, length in exempted:
            print(f"{path}:{first}: {name}: {length} lines, exempt (an option table)")
    if long_ones:
        print(f"{len(long_ones)} function(s) longer than {args.max} lines; split them into named "
              "steps (see the header of tools/check_function_lengths.py)")
        return 1
    print(f"no function longer than {args.max} lines in {len(files)} files"
          f" ({len(exempted)} option table(s) exempt)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
