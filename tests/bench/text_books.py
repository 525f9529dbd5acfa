#!/usr/bin/python3
"""fastText against vitk's text classifier on the Bible book-classification set (66 classes, the
set datasets/bible_corpus.py writes to --out/books/), printed as one markdown table.

    /usr/bin/python3 tests/bench/text_books.py --data data/bible/books --lang es
    /usr/bin/python3 tests/bench/text_books.py --data data/bible/books --lang en \\
        --vitk build/vitk --vitk-model runs/books-en/model.h5=vitk --vitk-minutes vitk=42
    /usr/bin/python3 tests/bench/text_books.py ... --skip-fasttext --vitk-model CKPT   # vitk only

Rows:
  fastText, word n-grams 2   `fasttext supervised -wordNgrams 2 -thread 2` (other options at
      their defaults) on train.LANG.tsv turned into fastText's `__label__Gen text` lines;
  fastText, autotuned        `fasttext supervised -autotune-validation valid.ft
      -autotune-duration SECONDS -thread 2`; the settings it chose are printed below;
  one row per --vitk-model CKPT[=NAME]: `VITK text-eval --model CKPT --data test.LANG.tsv
      --groups groups.tsv --json`, whose JSON (top1, macro_f1, count, groups) is taken as is.
fastText's models predict test.LANG.tsv's texts (`fasttext predict M test.txt 1`) and are scored
here. Train minutes: wall time of `fasttext supervised` (autotune's search included); for vitk,
--vitk-minutes NAME=MIN, else the sum of the `seconds` column of metrics.csv beside CKPT.

Prints a header (CPU, date, command), then | model | train minutes | top-1 | macro-F1 | and one
column per group of groups.tsv with test verses: the top-1 accuracy (the exact book) on that
group's verses. All figures are percentages of the test set. --json OUT also writes the rows.
Standard library only; fastText is Debian's (apt-get install fasttext).
"""
import argparse
import collections
import csv
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

FASTTEXT = "fasttext"
LABEL = "__label__"
TUNED = ("epoch", "dim", "wordNgrams", "minn", "maxn", "minCount", "bucket", "loss")


# ---- Metrics ---------------------------------------------------------------------------------


def top1(gold, pred):
    """Percent of items whose prediction equals the label."""
    return 100.0 * sum(g == p for g, p in zip(gold, pred)) / len(gold)


def macro_f1(gold, pred):
    """Mean per-class F1, in percent, over the classes that are true or predicted at least once
    (scikit-learn's average="macro", and `vitk text-eval`'s): a true class never predicted, or a
    class only predicted, counts as F1 0."""
    true_count = collections.Counter(gold)
    pred_count = collections.Counter(pred)
    hits = collections.Counter(g for g, p in zip(gold, pred) if g == p)
    classes = set(true_count) | set(pred_count)
    f1s = [2.0 * hits[c] / (true_count[c] + pred_count[c]) for c in classes]
    return 100.0 * sum(f1s) / len(f1s)


def group_accuracy(gold, pred, group_of):
    """{group: percent of that group's items predicted exactly}, for the groups with items, in
    the order of their first label in group_of (a dict label -> group in groups.tsv's order)."""
    right, total = collections.Counter(), collections.Counter()
    for g, p in zip(gold, pred):
        total[group_of[g]] += 1
        right[group_of[g]] += g == p
    order = dict.fromkeys(group_of.values())
    return {group: 100.0 * right[group] / total[group] for group in order if total[group]}


def score(gold, pred, group_of):
    """The figures vitk's text-eval --json prints, computed here from predictions."""
    return {"top1": top1(gold, pred), "macro_f1": macro_f1(gold, pred), "count": len(gold),
            "groups": group_accuracy(gold, pred, group_of)}


# ---- Data and processes ----------------------------------------------------------------------


def read_tsv(path):
    """[(text, label)] of a `text<TAB>label` file."""
    with open(path, encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]


def read_groups(path):
    """{label: group} of groups.tsv, in its order."""
    return dict(read_tsv(path))


def run(cmd):
    """Runs cmd; returns (stdout, wall seconds). Exits with cmd's stderr if it fails."""
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit(f"text_books.py: {cmd[0]} not found"
                 + (" (apt-get install fasttext)" if cmd[0] == FASTTEXT else ""))
    if done.returncode != 0:
        sys.exit(f"text_books.py: `{shlex.join(cmd)}` failed (exit {done.returncode}):\n"
                 f"{done.stderr.strip()}")
    return done.stdout, time.perf_counter() - start


# ---- fastText --------------------------------------------------------------------------------


def write_fasttext(rows, path, labels=True):
    """rows as fastText input: `__label__Gen text` lines, or the texts alone."""
    with open(path, "w", encoding="utf-8") as f:
        for text, label in rows:
            f.write(f"{LABEL}{label} {text}\n" if labels else text + "\n")


def autotune_choice(model):
    """'epoch 25, dim 100, ...': the settings autotune chose, from `fasttext dump M args` (fastText
    0.9.2 does not print them; its dump leaves out the learning rate)."""
    out, _ = run([FASTTEXT, "dump", model, "args"])
    values = dict(line.split(None, 1) for line in out.splitlines() if " " in line)
    return ", ".join(f"{key} {values[key]}" for key in TUNED if key in values)


def fasttext_rows(path, test, group_of, autotune_seconds):
    """The two fastText rows, trained in a temporary folder on path["train"] and path["valid"]
    (the {split: TSV} of main) and scored on test (its rows)."""
    with tempfile.TemporaryDirectory(prefix="text_books.") as tmp:
        ft = {split: os.path.join(tmp, f"{split}.ft") for split in ("train", "valid")}
        for split, file in ft.items():
            write_fasttext(read_tsv(path[split]), file)
        ft["test"] = os.path.join(tmp, "test.txt")
        write_fasttext(test, ft["test"], labels=False)
        ft["model"] = os.path.join(tmp, "model")
        setups = [("fastText, word n-grams 2", ["-wordNgrams", "2"]),
                  ("fastText, autotuned", ["-autotune-validation", ft["valid"],
                                           "-autotune-duration", str(autotune_seconds)])]
        return [fasttext_row(name, options, ft, test, group_of) for name, options in setups]


def fasttext_row(name, options, ft, test, group_of):
    """Trains ft["model"] with options, predicts ft["test"], scores against test's labels."""
    _, seconds = run([FASTTEXT, "supervised", "-input", ft["train"], "-output", ft["model"],
                      *options, "-thread", "2"])
    model = ft["model"] + ".bin"
    predicted, _ = run([FASTTEXT, "predict", model, ft["test"], "1"])
    pred = [line.strip().removeprefix(LABEL) for line in predicted.splitlines()]
    gold = [label for _, label in test]
    if len(pred) != len(gold):
        sys.exit(f"text_books.py: fastText predicted {len(pred)} lines for {len(gold)} verses")
    row = {"model": name, "minutes": seconds / 60, **score(gold, pred, group_of)}
    if "-autotune-duration" in options:
        row["settings"] = autotune_choice(model)
    return row


def fasttext_version():
    try:
        return subprocess.run(["dpkg-query", "-W", "-f", "${Version}", FASTTEXT],
                              capture_output=True, text=True).stdout.strip() or "unknown"
    except FileNotFoundError:
        return "unknown"


# ---- vitk ------------------------------------------------------------------------------------


def metrics_minutes(checkpoint):
    """Training minutes of the run that wrote checkpoint: the sum of the `seconds` column (each
    row's seconds since the previous one) of metrics.csv beside it, or None."""
    path = os.path.join(os.path.dirname(os.path.abspath(checkpoint)), "metrics.csv")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or not all(row.get("seconds") for row in rows):
        return None
    return sum(float(row["seconds"]) for row in rows) / 60


def vitk_row(vitk, spec, test_path, groups_path, minutes):
    """The row of `--vitk-model CKPT[=NAME]`: vitk text-eval's JSON, named and timed."""
    checkpoint, _, name = spec.partition("=")
    name = name or f"vitk {checkpoint}"
    cmd = [vitk, "text-eval", "--model", checkpoint, "--data", test_path,
           "--groups", groups_path, "--json"]
    out, _ = run(cmd)
    try:
        result = json.loads(out)
        figures = {key: result[key] for key in ("top1", "macro_f1", "count", "groups")}
    except (ValueError, KeyError, TypeError) as e:
        sys.exit(f"text_books.py: `{shlex.join(cmd)}` printed no valid JSON ({e!r}):\n{out}")
    return {"model": name, "minutes": minutes.get(name, metrics_minutes(checkpoint)), **figures}


# ---- Output ----------------------------------------------------------------------------------


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return "unknown CPU"
    return next((line.split(":", 1)[1].strip() for line in out.splitlines()
                 if line.startswith("Model name")), "unknown CPU")


def cell(value, digits=1):
    return "—" if value is None else f"{value:.{digits}f}"


def table(rows, groups):
    """The markdown table of rows, one column per group."""
    head = ["model", "train minutes", "top-1", "macro-F1", *groups]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], cell(r["minutes"], 2), cell(r["top1"]), cell(r["macro_f1"]),
                 *(cell(r["groups"].get(g)) for g in groups)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="data/bible/books", help="the books/ folder")
    parser.add_argument("--lang", choices=("es", "en"), default="es")
    parser.add_argument("--autotune-seconds", type=int, default=300)
    parser.add_argument("--skip-fasttext", action="store_true", help="print only vitk rows")
    parser.add_argument("--vitk", default="build/vitk", help="the vitk executable")
    parser.add_argument("--vitk-model", action="append", default=[], metavar="CKPT[=NAME]")
    parser.add_argument("--vitk-minutes", action="append", default=[], metavar="NAME=MIN")
    parser.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    args = parser.parse_args()
    try:
        pairs = [s.rsplit("=", 1) for s in args.vitk_minutes]
        args.vitk_minutes = {name: float(minutes) for name, minutes in pairs}
    except ValueError:
        parser.error("--vitk-minutes takes NAME=MIN")
    if args.skip_fasttext and not args.vitk_model:
        parser.error("--skip-fasttext leaves no rows without --vitk-model")
    return args


def report(args, rows, test, group_of):
    """Prints the header, the table and autotune's settings; writes --json."""
    labels = {label for _, label in test}
    groups = list(dict.fromkeys(group for label, group in group_of.items() if label in labels))
    command = "/usr/bin/python3 " + shlex.join(sys.argv)
    date = datetime.date.today().isoformat()
    print(f"CPU: {cpu_name()}; {date}; {command}")
    fasttext = "" if args.skip_fasttext else f"; fastText {fasttext_version()}"
    print(f"test: {len(test)} verses ({args.lang}){fasttext}\n")
    print(table(rows, groups))
    for r in rows:
        if r.get("settings"):
            print(f"\n{r['model']}: {r['settings']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"cpu": cpu_name(), "date": date, "command": command, "lang": args.lang,
                       "rows": rows}, f, indent=1)


def main():
    args = parse_args()
    path = {split: os.path.join(args.data, f"{split}.{args.lang}.tsv")
            for split in ("train", "valid", "test")}
    groups_path = os.path.join(args.data, "groups.tsv")
    group_of = read_groups(groups_path)
    test = read_tsv(path["test"])
    rows = [] if args.skip_fasttext else fasttext_rows(path, test, group_of, args.autotune_seconds)
    for spec in args.vitk_model:
        rows.append(vitk_row(args.vitk, spec, path["test"], groups_path, args.vitk_minutes))
    report(args, rows, test, group_of)


if __name__ == "__main__":
    main()
