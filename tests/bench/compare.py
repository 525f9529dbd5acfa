#!/usr/bin/python3
"""vitk against PyTorch in one command: the speed figures of issue 8 measured side by side, in the
same run on the same inputs, and printed as one table of medians, ratios and targets; the ViT-B/16
inference rows also against ONNX Runtime (issue 30), a second anchor beside PyTorch.

    /usr/bin/python3 tests/bench/compare.py [--rounds 3] [--threads 2] [--only ROWS] [--markdown]
    /usr/bin/python3 tests/bench/compare.py --quick      # tiny sizes: a smoke test of the harness
    /usr/bin/python3 tests/bench/compare.py --dry-run    # what would run; needs neither side
    vitk bench compare [the same options]                # runs this script

Rows (`--only` takes row names or their prefixes, comma-separated: `--only vit-b16,mt-train`):
  vit-b16-224-b1, -224-b8, -384-b1   ViT-B/16 inference with random weights, the model alone on a
      random batch: PyTorch torchvision's vit_b_16(weights=None, image_size=...) in eval and
      inference mode, ONNX Runtime (the "ORT" columns) the same model exported by
      torch.onnx.export and run by onnxruntime-node (onnxruntime/run_vit.js), vitk `classify
      --benchmark --model` of the same weights imported (`vitk import --format torchvision`;
      `vitk quantize` of that for int8), or `--random-weights --config configs/vit-b16.ini`
      with --no-onnxruntime; each side one untimed batch, then batches for at least --seconds;
      images/s.
  vit-train   a ViT training step (width 192, depth 6, 3 heads, MLP 768, patch 4, 28x28x1,
      batch 128, AdamW, smoothing 0.1): forward, loss, backward, optimizer step on batches already
      in memory, no augmentation; vitk `bench vit-step` (random images), PyTorch
      vit_train_vs_pytorch.py's model and step on batches drawn from 1,024 Fashion-MNIST images
      (random ones when the dataset is missing); images/s.
  vit-finetune-384   a ViT-B/16 fine-tuning step at 384 x 384, batch 8 (patch grid 24 x 24,
      577 tokens, 1,000 classes, AdamW): forward, loss, backward, optimizer step on random images
      in memory; vitk `bench vit-step --model.KEY ...` (configs/vit-b16.ini's model at 384),
      PyTorch torchvision's vit_b_16(image_size=384) in training mode; one untimed step each,
      then the median step; images/s.
  mt-train    a translation training step (d 256, 3+3 layers, 4 heads, FFN 1024, 8k tied
      vocabulary, batch 128 x 32 source and 32 target tokens, Adam): vitk `bench mt-step`,
      PyTorch nn.Transformer (torch_transformer.py); target tokens/s.
  mt-greedy, mt-beam4   translating 500 sentences in batches of 32 with the same checkpoint:
      vitk `translate --greedy` / `--beam-size 4 --length-penalty 0.6` (cached decoder), PyTorch
      nn.Transformer's usual greedy loop (mt_decode_vs_pytorch.py; the beam row is compared with
      it too, as the issue's target is). Both times cover tokenization, search and
      detokenization, not start-up or model loading; sentences/s. Without --mt-model, a
      placeholder model of the issue's size is trained for a few steps on a generated corpus
      (speed only: its translations are noise, so its output lengths are not a real model's).
  ...-bf16    the same vitk runs with --precision bf16, when this binary's help lists it
      (`vitk classify --help`, `vitk train --help`, `vitk mt-train --help`) and the CPU has bf16
      products (`vitk env`); compared with PyTorch's f32 figure and with vitk's own f32 row.
  vit-b16-...-int8, mt-greedy-int8, mt-beam4-int8   the inference and decoding runs with
      --precision int8, when this binary's help lists int8 (`vitk classify --help`, `vitk
      translate --help`): on every CPU, with 7-bit activation codes where it lacks VNNI (a note
      on these rows quotes `vitk env`'s int8 line). Compared with PyTorch's (and ONNX Runtime's)
      f32 figure and with vitk's own rows: the 224 batch 1 row's targets are 3.5x ONNX
      Runtime's f32 figure and 1.6x vitk's bf16 row (when that is in the table), the decoding
      rows' 1.5x vitk's f32 row of the same search.

Every measurement is a child process of its own (vitk, or this script with PyTorch), so that no
idle PyTorch thread team sits beside vitk and each peak resident memory (os.wait4's ru_maxrss:
the kernel's high-water mark of that process) is that side's alone; PyTorch's includes the
Python interpreter and the torch library, whose size alone the header shows. Each round runs
both sides of every row, in alternating order from one round to the next, so both see the same
machine load; the table shows medians over --rounds.

PyTorch is Debian's python3-torch (and python3-torchvision, python3-h5py,
python3-sentencepiece) with OpenBLAS as the system BLAS (libopenblas0-openmp): when one is
missing, this script installs it with apt-get when run as root, and otherwise says what to
install.

ONNX Runtime is the npm package onnxruntime-node, pinned in tests/bench/onnxruntime/package.json
and its lockfile; when it is missing this script runs `npm ci --ignore-scripts` there (the
package's install script would fetch GPU libraries from outside; the CPU library is inside the
package). The model is PyTorch's of the row with fixed random weights (seed VIT_SEED, a random
head too), exported with opset 14 into --onnx-dir (a cache: about 330 MB per ViT-B/16 image size,
exported again when PyTorch's version changes). Before any timing, ONNX Runtime's logits for a
fixed batch of 2 must match PyTorch's within ONNX_TOLERANCE, or its columns stay empty with the
reason. Its session: intra-op threads = --threads, 1 inter-op thread, sequential execution,
graph optimisation level "all", f32. --no-onnxruntime leaves its columns out.
"""
import argparse
import collections
import datetime
import importlib.util
import json
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench_common import ROOT, VITK, check_blas, run_measured
import vitk_side

SCRIPT = os.path.abspath(__file__)
ORT_DIR = os.path.join(os.path.dirname(SCRIPT), "onnxruntime")
ORT_SCRIPT = os.path.join(ORT_DIR, "run_vit.js")
NODE = "node"
ORT_PACKAGE = "onnxruntime-node"
ORT_INSTALL = ["npm", "ci", "--ignore-scripts"]
VIT_SEED = 0  # the ViT's random weights, PyTorch's side and the ONNX export alike
ONNX_OPSET = 14
ONNX_TOLERANCE = 1e-4  # max |logit difference| of ONNX Runtime against PyTorch, both f32
APT_PACKAGES = {"torch": "python3-torch", "torchvision": "python3-torchvision",
                "numpy": "python3-numpy", "h5py": "python3-h5py",
                "sentencepiece": "python3-sentencepiece"}
BLAS_PACKAGE = "libopenblas0-openmp"

# ---- Rows --------------------------------------------------------------------------------------

# factor x the baseline: "pytorch" or "ort" (PyTorch's or ONNX Runtime's median of the row), or
# a precision, "f32" or "bf16": vitk's row of the same model and search in that precision.
Target = collections.namedtuple("Target", "factor baseline")
BASELINE_NAMES = {"pytorch": "PyTorch", "ort": "ORT", "f32": "vitk f32", "bf16": "vitk bf16"}
# key: the name --only takes; kind: what is measured; torch_key: the row whose PyTorch
# measurement this row is compared with (shared, measured once per round); f32_key: for a bf16
# or int8 row, its f32 row (the rows of one model and search share it); targets: a tuple of
# Target; params: the sizes.
Row = collections.namedtuple("Row",
                             "key title kind unit precision torch_key f32_key targets params")

VIT_B16 = dict(patch_size=16, layers=12, heads=12, d_model=768, d_ff=3072, classes=1000)
VIT_TINY = dict(patch_size=16, layers=2, heads=2, d_model=64, d_ff=128, classes=10)
MT_SMALL = dict(d_model=256, heads=4, d_ff=1024, layers=3, decoder_layers=3, vocab=8000)
MT_TINY = dict(d_model=64, heads=2, d_ff=128, layers=1, decoder_layers=1, vocab=300)


def make_rows(quick):
    """Every row in table order, at the issue's sizes or (quick) tiny ones."""
    rows = []
    vit = VIT_TINY if quick else VIT_B16
    name = "tiny ViT" if quick else "ViT-B/16"
    for size, batch in ((224, 1), (224, 8), (384, 1)):
        image = size // 7 if quick else size  # quick: 32 and 48, patch grids 2x2 and 3x3
        image -= image % vit["patch_size"]
        key = f"vit-b16-{size}-b{batch}"
        params = dict(vit, image_size=image, batch=batch)
        first = (size, batch) == (224, 1)  # the only ViT inference row the issues set targets
        title = f"{name} {image} batch {batch}"
        rows.append(Row(key, title, "vit-infer", "images/s", "f32", key, None,
                        (Target(3.5, "pytorch"),) if first else (), params))
        rows.append(Row(key + "-bf16", title + " bf16", "vit-infer", "images/s", "bf16", key, key,
                        (Target(1.7, "f32"),) if first else (), params))
        rows.append(Row(key + "-int8", title + " int8", "vit-infer", "images/s", "int8", key, key,
                        (Target(3.5, "ort"), Target(1.6, "bf16")) if first else (), params))
    train = dict(batch=8, steps=2, warmup=1) if quick else dict(batch=128, steps=10, warmup=2)
    rows.append(Row("vit-train", "ViT training step, batch %d" % train["batch"], "vit-train",
                    "images/s", "f32", "vit-train", None, (Target(2.5, "pytorch"),), train))
    rows.append(Row("vit-train-bf16", "ViT training step, batch %d, bf16" % train["batch"],
                    "vit-train", "images/s", "bf16", "vit-train", "vit-train",
                    (Target(2.5, "pytorch"),), train))
    # Fine-tuning at the higher resolution (224 -> 384), the mission's workload.
    tune = (dict(VIT_TINY, image_size=48, batch=2, steps=2, warmup=1) if quick
            else dict(VIT_B16, image_size=384, batch=8, steps=2, warmup=1))
    title = f"{name} {tune['image_size']} fine-tuning step, batch {tune['batch']}"
    rows.append(Row("vit-finetune-384", title, "vit-finetune", "images/s", "f32",
                    "vit-finetune-384", None, (Target(3.0, "pytorch"),), tune))
    rows.append(Row("vit-finetune-384-bf16", title + ", bf16", "vit-finetune", "images/s",
                    "bf16", "vit-finetune-384", "vit-finetune-384", (Target(5.0, "pytorch"),),
                    tune))
    mt = dict(batch=8, length=8, steps=2, warmup=1) if quick else dict(batch=128, length=32,
                                                                          steps=5, warmup=2)
    title = "MT training step, %dx%d tokens" % (mt["batch"], mt["length"])
    rows.append(Row("mt-train", title, "mt-train", "target tokens/s", "f32", "mt-train", None,
                    (Target(2.5, "pytorch"),), mt))
    rows.append(Row("mt-train-bf16", title + ", bf16", "mt-train", "target tokens/s", "bf16",
                    "mt-train", "mt-train", (Target(2.5, "pytorch"),), mt))
    n = 20 if quick else 500
    # Both searches are compared with PyTorch's greedy loop, the issue's baseline.
    for key, search, what in (("mt-greedy", ["--greedy"], "greedy"),
                              ("mt-beam4", ["--beam-size", "4", "--length-penalty", "0.6"],
                               "beam 4")):
        versus = "" if key == "mt-greedy" else " (vs PyTorch greedy)"
        params = dict(sentences=n, search=search)
        rows.append(Row(key, f"MT decoding, {what}, {n} sentences{versus}", "mt-decode",
                        "sentences/s", "f32", "mt-greedy", None, (Target(5.0, "pytorch"),),
                        params))
        rows.append(Row(key + "-int8", f"MT decoding, {what}, {n} sentences, int8{versus}",
                        "mt-decode", "sentences/s", "int8", "mt-greedy", key,
                        (Target(1.5, "f32"),), params))
    return rows


def select_rows(rows, only):
    """The rows named by --only (comma-separated names or prefixes ending at a '-'): all rows
    when empty. Unknown names are a usage error listing the rows."""
    if not only:
        return rows
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    chosen = []
    for w in wanted:
        hits = [r for r in rows if r.key == w or r.key.startswith(w + "-")]
        if not hits:
            raise ValueError(f"--only: no row '{w}'; rows: " + ", ".join(r.key for r in rows))
        chosen += [r for r in hits if r not in chosen]
    return [r for r in rows if r in chosen]  # table order


# ---- The table ---------------------------------------------------------------------------------

def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    return a / b if a is not None and b else None


def target_checks(row, vitk, baselines, times="x", ge=">="):
    """[(target text, achieved factor or None, met: True, False or None when not known)], one
    for each target of `row` whose baseline is part of this run. baselines: {"pytorch", "ort",
    "f32", "bf16": that side's median, None when it has no figure}; a baseline it does not hold
    (no ONNX Runtime side, no bf16 row in the table) leaves its target out. Against another vitk
    row the text ends with the achieved factor, which no column of the table shows."""
    checks = []
    for target in row.targets:
        if target.baseline not in baselines:
            continue
        got = ratio(vitk, baselines[target.baseline])
        text = f"{ge} {target.factor:g}{times} {BASELINE_NAMES[target.baseline]}"
        if got is not None and target.baseline not in ("pytorch", "ort"):
            text += f" ({fmt_ratio(got, times)})"
        checks.append((text, got, None if got is None else got >= target.factor))
    return checks


def met_text(checks):
    """The "met?" cell: "no" when a target is missed, "yes" when every one is known and met."""
    met = [m for _, _, m in checks]
    return "no" if False in met else "yes" if met and None not in met else ""


def fmt_value(v):
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def fmt_ratio(r, times="x"):
    return "-" if r is None else f"{r:.2f}{times}"


def fmt_mib(v):
    return "-" if v is None else f"{v:.0f}"


# One row's results over the rounds: values (units/s) and peak RSS in MiB of each side, and
# notes (failures, what the PyTorch column is). ort and ort_rss are ONNX Runtime's, None for a
# row without an ONNX Runtime side (its cells stay blank; an empty list prints "-").
Result = collections.namedtuple("Result", "row vitk torch vitk_rss torch_rss notes ort ort_rss",
                                defaults=(None, None))


def table_lines(results, markdown=False):
    """The comparison table as lines of text: plain columns, or a Markdown table. ONNX
    Runtime's three columns ("ORT") are there when a row has an ONNX Runtime side."""
    # vitk's rows by (their f32 row, precision): the vitk baselines of a bf16 or int8 row.
    by_precision = {(r.row.f32_key or r.row.key, r.row.precision): r for r in results}
    times = "×" if markdown else "x"
    with_ort = any(r.ort is not None for r in results)
    head = ["row", "vitk", "PyTorch"] + (["ORT"] if with_ort else []) + [
        "unit", "vitk/PyTorch"] + (["vitk/ORT"] if with_ort else []) + [
        "target", "met?", "vitk peak MiB", "PyTorch peak MiB"] + (
        ["ORT peak MiB"] if with_ort else [])
    body, notes = [], []
    for res in results:
        row = res.row
        v, t = median_or_none(res.vitk), median_or_none(res.torch)
        o = median_or_none(res.ort) if res.ort is not None else None
        blank = res.ort is None  # no ONNX Runtime side: blank, not "-"
        baselines = {"pytorch": t} if blank else {"pytorch": t, "ort": o}
        for precision in ("f32", "bf16"):
            other = by_precision.get((row.f32_key, precision))
            if other:
                baselines[precision] = median_or_none(other.vitk)
        checks = target_checks(row, v, baselines, times, "≥" if markdown else ">=")
        mark = ""
        for note in res.notes:
            if note not in notes:
                notes.append(note)
            mark += f" [{notes.index(note) + 1}]"
        cells = {"row": row.title + mark, "vitk": fmt_value(v), "PyTorch": fmt_value(t),
                 "ORT": "" if blank else fmt_value(o), "unit": row.unit,
                 "vitk/PyTorch": fmt_ratio(ratio(v, t), times),
                 "vitk/ORT": "" if blank else fmt_ratio(ratio(v, o), times),
                 "target": "; ".join(text for text, _, _ in checks), "met?": met_text(checks),
                 "vitk peak MiB": fmt_mib(median_or_none(res.vitk_rss)),
                 "PyTorch peak MiB": fmt_mib(median_or_none(res.torch_rss)),
                 "ORT peak MiB": "" if blank else fmt_mib(median_or_none(res.ort_rss))}
        body.append([cells[h] for h in head])
    text_columns = [head.index(h) for h in ("row", "unit", "target", "met?")]  # left-aligned
    lines = []
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(" --- " if i in text_columns else " ---: "
                                    for i in range(len(head))) + "|")
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        if notes:
            lines.append("")
    else:
        widths = [max(len(c[i]) for c in [head] + body) for i in range(len(head))]
        for cells in [head] + body:
            lines.append("  ".join(c.ljust(w) if i in text_columns else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
    lines += [f"[{i + 1}] {n}" for i, n in enumerate(notes)]
    return lines


# ---- What runs: vitk's commands and PyTorch's child specifications ------------------------------

# onnx: {image size: OnnxModel} of the ViT rows' ONNX Runtime side, None to leave it out;
# vit_files: {image size: VitkFiles} of the same model for vitk, None for random weights.
Settings = collections.namedtuple(
    "Settings", "vitk threads seconds quick mt_model mt_sentences workdir onnx vit_files",
    defaults=(None, None))
# vitk checkpoints of the exported model: imported (f32, also run at bf16) and quantised (int8).
VitkFiles = collections.namedtuple("VitkFiles", "f32 int8")
# An exported model of one image size: its path, and why ONNX Runtime does not time it (a failed
# export or parity check), or None.
# weights: the model's .safetensors (torchvision's names), for vitk; None when not exported.
OnnxModel = collections.namedtuple("OnnxModel", "path problem weights", defaults=(None,))


def vitk_model_args(params, files=None):
    """vitk classify's model: the checkpoint of the row's precision when `files` (VitkFiles) has
    one, else --random-weights of configs/vit-b16.ini with the row's sizes."""
    if files is not None:
        return ["--model", files.int8 if params.get("precision") == "int8" else files.f32]
    args = ["--random-weights", "--config", os.path.join(ROOT, "configs", "vit-b16.ini")]
    for key, value in (("image_size", params["image_size"]), ("patch_size", params["patch_size"]),
                       ("layers", params["layers"]), ("heads", params["heads"]),
                       ("d_model", params["d_model"]), ("d_ff", params["d_ff"]),
                       ("num_classes", params["classes"])):
        args += [f"--model.{key}", str(value)]
    return args


def precision_of(row):
    return None if row.precision == "f32" else row.precision


def vit_args(row, s):
    """vitk_model_args of a ViT inference row: from the imported files of its image size when
    prepare_vitk_files made them."""
    files = (s.vit_files or {}).get(row.params["image_size"])
    return vitk_model_args(dict(row.params, precision=row.precision), files)


def run_vitk(row, s):
    """(units/s, Measured, hypotheses or None) of the vitk side of `row`."""
    p = row.params
    if row.kind == "vit-infer":
        value, m = vitk_side.classify_benchmark(s.vitk, s.threads, p["batch"], s.seconds,
                                                vit_args(row, s), precision_of(row))
        return value, m, None
    if row.kind == "vit-train":
        sec, m = vitk_side.step_bench(s.vitk, "vit-step", s.threads, p["batch"], p["steps"],
                                      precision=precision_of(row))
        return p["batch"] / sec, m, None
    if row.kind == "vit-finetune":
        sec, m = vitk_side.step_bench(s.vitk, "vit-step", s.threads, p["batch"], p["steps"],
                                      precision=precision_of(row), model=finetune_model(p))
        return p["batch"] / sec, m, None
    if row.kind == "mt-train":
        sec, m = vitk_side.step_bench(s.vitk, "mt-step", s.threads, p["batch"], p["steps"],
                                      length=p["length"], precision=precision_of(row))
        return p["batch"] * p["length"] / sec, m, None
    if row.kind == "mt-decode":
        wall, own, hyps, m = vitk_side.translate(s.vitk, s.mt_model, s.mt_sentences, s.threads,
                                                 p["search"], precision=precision_of(row))
        return len(s.mt_sentences) / (own if own > 0 else wall), m, hyps
    raise ValueError(row.kind)


def finetune_model(p):
    """`vitk bench vit-step`'s --model.KEY options for the fine-tuning row's ViT."""
    keys = dict(image_size=p["image_size"], patch_size=p["patch_size"], channels=3,
                num_classes=p["classes"], d_model=p["d_model"], heads=p["heads"], d_ff=p["d_ff"],
                layers=p["layers"], activation="gelu", pre_norm="true")
    return [arg for key, value in keys.items() for arg in (f"--model.{key}", str(value))]


def vitk_command(row, s):
    """The command run_vitk runs, for --dry-run (the same helpers build it)."""
    p = row.params
    prec = ["--precision", row.precision] if precision_of(row) else []
    if row.kind == "vit-infer":
        return [s.vitk, "classify", "--benchmark", "--batch-size", str(p["batch"]),
                "--benchmark-seconds", str(s.seconds), "--threads",
                str(s.threads)] + vit_args(row, s) + prec
    if row.kind in ("vit-train", "mt-train", "vit-finetune"):
        what = "mt-step" if row.kind == "mt-train" else "vit-step"
        length = ["--length", str(p["length"])] if "length" in p else []
        model = finetune_model(p) if row.kind == "vit-finetune" else []
        return [s.vitk, "bench", what, "--threads", str(s.threads), "--batch-size",
                str(p["batch"]), "--steps", str(p["steps"]), "--repeats", "1",
                "--no-breakdown"] + length + model + prec
    return [s.vitk, "translate", "--model", str(s.mt_model), "--input", "SENTENCES", "--output",
            "HYPOTHESES", "--threads", str(s.threads), "--batch-size", "32"] + p["search"] + prec


def torch_spec(row, s, hyp_out=None):
    """What a PyTorch child measures for `row` (a JSON-able dict)."""
    spec = dict(kind=row.kind, threads=s.threads, params=row.params)
    if row.kind == "vit-infer":
        spec.update(seconds=s.seconds, vit_b_16=not s.quick)
    if row.kind == "vit-finetune":
        spec.update(vit_b_16=not s.quick)
    if row.kind == "mt-decode":
        spec.update(model=s.mt_model, sentences=os.path.join(s.workdir, "sentences.txt"),
                    hyp_out=hyp_out)
    return spec


def run_torch(spec):
    """(units/s, Measured, PyTorch's version) of a PyTorch child running `spec`."""
    env = dict(os.environ, OMP_NUM_THREADS=str(spec["threads"]))
    m = run_measured([sys.executable, SCRIPT, "--torch-child", json.dumps(spec)], env=env)
    answer = json.loads(m.stdout.strip().splitlines()[-1])
    return answer["value"], m, answer.get("torch", "")


def has_ort_side(row, s):
    """Whether `row` has ONNX Runtime columns: the ViT inference rows, unless left out."""
    return s.onnx is not None and row.kind == "vit-infer"


def ort_spec(row, s):
    """What run_vit.js measures for the ViT row `row` (a JSON-able dict); None when this row's
    model is not there to time (no export, or the parity check failed)."""
    model = s.onnx.get(row.params["image_size"]) if s.onnx else None
    if model is None or model.problem:
        return None
    return dict(mode="time", model=model.path, threads=s.threads, batch=row.params["batch"],
                image_size=row.params["image_size"], seconds=s.seconds)


def node_command(spec):
    return [NODE, ORT_SCRIPT, json.dumps(spec)]


def run_node(spec):
    """The JSON answer and the Measured of run_vit.js running `spec`."""
    m = run_measured(node_command(spec))
    return json.loads(m.stdout.strip().splitlines()[-1]), m


def run_ort(spec):
    """(images/s, Measured, onnxruntime-node's version) of ONNX Runtime timing `spec`."""
    answer, m = run_node(spec)
    return answer["value"], m, answer.get("version", "")


def onnx_stem(params, full):
    """The file name, without extension, of the exported model for a ViT row's params: every
    size, the seed and the opset, so that a cached file is only reused for the same model."""
    name = "vit_b_16" if full else "vit"
    return (f"{name}-{params['image_size']}px-p{params['patch_size']}-l{params['layers']}"
            f"-h{params['heads']}-d{params['d_model']}-f{params['d_ff']}-c{params['classes']}"
            f"-seed{VIT_SEED}-opset{ONNX_OPSET}")


def export_spec(row, s, directory):
    """What the export child makes for the image size of `row`: the .onnx file, a fixed input
    batch and PyTorch's logits for it (raw float32), and a JSON of what made them."""
    p = {k: v for k, v in row.params.items() if k != "batch"}
    stem = os.path.join(directory, onnx_stem(p, not s.quick))
    return dict(params=p, vit_b_16=not s.quick, seed=VIT_SEED, opset=ONNX_OPSET,
                threads=s.threads, check_batch=2, model=stem + ".onnx",
                weights=stem + ".safetensors", input=stem + ".input.f32",
                reference=stem + ".logits.f32", meta=stem + ".json")


def run_export(spec):
    """(answer, Measured) of the export child: answer has "cached" and "torch"."""
    env = dict(os.environ, OMP_NUM_THREADS=str(spec["threads"]))
    m = run_measured([sys.executable, SCRIPT, "--onnx-export-child", json.dumps(spec)], env=env)
    return json.loads(m.stdout.strip().splitlines()[-1]), m


def build_torch_vit(p, full):
    """PyTorch's ViT of a row, in eval mode, random weights from VIT_SEED: torchvision's
    vit_b_16(weights=None) at full size, its VisionTransformer at the row's sizes otherwise.
    torchvision initialises the head to zeros, which would make every logit 0 and a parity
    check of the logits empty: the head gets random weights too."""
    import torch
    from torchvision.models import vit_b_16
    from torchvision.models.vision_transformer import VisionTransformer
    torch.manual_seed(VIT_SEED)
    if full:
        model = vit_b_16(weights=None, image_size=p["image_size"])
    else:
        model = VisionTransformer(image_size=p["image_size"], patch_size=p["patch_size"],
                                  num_layers=p["layers"], num_heads=p["heads"],
                                  hidden_dim=p["d_model"], mlp_dim=p["d_ff"],
                                  num_classes=p["classes"])
    head = model.heads.head
    with torch.no_grad():
        head.weight.normal_(0.0, head.in_features ** -0.5)
        head.bias.normal_(0.0, 0.1)
    return model.eval()


def onnx_export_child(spec):
    """Exports the ViT of `spec` (export_spec) unless the files are already there from the same
    spec and PyTorch version; prints one JSON line."""
    import time
    import torch
    torch.set_num_threads(spec["threads"])
    key = {k: spec[k] for k in ("params", "vit_b_16", "seed", "opset", "check_batch")}
    key["torch"] = torch.__version__
    key["weights"] = "safetensors"  # caches from before the weights were written are redone
    try:
        with open(spec["meta"], encoding="utf-8") as f:
            cached = json.load(f) == key
    except (OSError, ValueError):
        cached = False
    cached = cached and all(os.path.exists(spec[k])
                            for k in ("model", "weights", "input", "reference"))
    start = time.perf_counter()
    if not cached:
        if os.path.exists(spec["meta"]):
            os.remove(spec["meta"])  # the meta file is written last: it marks a complete set
        p = spec["params"]
        model = build_torch_vit(p, spec["vit_b_16"])
        x = torch.randn(spec["check_batch"], 3, p["image_size"], p["image_size"],
                        generator=torch.Generator().manual_seed(spec["seed"] + 1))
        with torch.inference_mode():
            logits = model(x)
        partial = spec["model"] + ".partial"
        # Traced with autograd on: under no_grad nn.MultiheadAttention would take its fused
        # inference path, an op the ONNX exporter cannot write. The batch axis is left free:
        # one file serves every batch size of the image size (the check runs a batch of 2).
        torch.onnx.export(model, x[:1], partial, opset_version=spec["opset"],
                          input_names=["images"], output_names=["logits"],
                          dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}})
        os.replace(partial, spec["model"])
        # The same weights for vitk (`vitk import --format torchvision`).
        sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))
        from make_import_fixtures import write_safetensors
        write_safetensors(spec["weights"] + ".partial", model.state_dict())
        os.replace(spec["weights"] + ".partial", spec["weights"])
        for name, t in (("input", x), ("reference", logits)):
            with open(spec[name], "wb") as f:
                f.write(t.contiguous().numpy().astype("<f4").tobytes())
        with open(spec["meta"], "w", encoding="utf-8") as f:
            json.dump(key, f)
    print(json.dumps({"cached": cached, "torch": torch.__version__,
                      "seconds": time.perf_counter() - start}))


def torch_finetune_seconds(p, full):
    """PyTorch's median seconds per fine-tuning step of the row's ViT (training mode, AdamW,
    cross-entropy) on one random batch in memory, after p["warmup"] untimed steps."""
    import time
    import torch
    model = build_torch_vit(p, full).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(p["batch"], 3, p["image_size"], p["image_size"])
    y = torch.randint(0, p["classes"], (p["batch"],))
    times = []
    for step in range(p["warmup"] + p["steps"]):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
        if step >= p["warmup"]:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def torch_child(spec):
    """The PyTorch side of one measurement, in a child process: prints one JSON line."""
    import torch  # here only: the parent process never imports PyTorch
    torch.set_num_threads(spec["threads"])
    p, kind, value = spec.get("params", {}), spec["kind"], 0.0
    if kind == "idle" and spec.get("torchvision"):
        import torchvision  # noqa: F401  (its size, for the header's baseline)
    elif kind == "vit-infer":
        from core_vs_pytorch import seconds_per_call
        model = build_torch_vit(p, spec["vit_b_16"])  # the model ONNX Runtime's side exports
        x = torch.randn(p["batch"], 3, p["image_size"], p["image_size"])
        with torch.inference_mode():
            value = p["batch"] / seconds_per_call(lambda: model(x), spec["seconds"], 1)
    elif kind == "vit-train":
        import numpy as np
        from vit_train_vs_pytorch import DATA, load_idx, torch_seconds_per_step
        # Batches are drawn from 1,024 images in memory (vitk's step uses one random batch): the
        # data's size stays out of the peak memory, and a step's time does not depend on it.
        if os.path.isdir(DATA):
            images = load_idx("train-images-idx3-ubyte.gz", 16)[:1024 * 28 * 28]
            labels = load_idx("train-labels-idx1-ubyte.gz", 8)[:1024]
        else:
            rng = np.random.default_rng(0)
            images = rng.integers(0, 256, 1024 * 28 * 28, dtype=np.uint8)
            labels = rng.integers(0, 10, 1024, dtype=np.uint8)
        value = p["batch"] / torch_seconds_per_step(images, labels, p["batch"], p["steps"],
                                                    p["warmup"])
    elif kind == "vit-finetune":
        value = p["batch"] / torch_finetune_seconds(p, spec.get("vit_b_16", True))
    elif kind == "mt-train":
        from mt_train_vs_pytorch import torch_seconds_per_step
        value = p["batch"] * p["length"] / torch_seconds_per_step(p["batch"], p["length"],
                                                                  p["steps"], p["warmup"])
    elif kind == "mt-decode":
        import time
        import sentencepiece
        from mt_decode_vs_pytorch import torch_greedy
        from torch_transformer import load_vitk_checkpoint
        model, spm = load_vitk_checkpoint(spec["model"])
        sp = sentencepiece.SentencePieceProcessor(model_proto=spm)
        with open(spec["sentences"], encoding="utf-8") as f:
            sentences = [line.rstrip("\n") for line in f]
        start = time.perf_counter()
        hyps = torch_greedy(model, sp, sentences, 32, 50)
        value = len(sentences) / (time.perf_counter() - start)
        if spec.get("hyp_out"):
            with open(spec["hyp_out"], "w", encoding="utf-8") as f:
                f.write("\n".join(hyps) + "\n")
    print(json.dumps({"value": value, "torch": torch.__version__}))


# ---- Prerequisites, the machine, the translation model ------------------------------------------

def missing_packages(rows, onnxruntime=False):
    """Debian packages PyTorch's side of `rows` needs that are not installed; with onnxruntime,
    also Node and npm for ONNX Runtime's side of the ViT rows."""
    modules = {"torch"}
    kinds = {r.kind for r in rows}
    if kinds & {"vit-infer", "vit-finetune"}:
        modules.add("torchvision")
    if "vit-train" in kinds:
        modules.add("numpy")
    if "mt-train" in kinds:  # its model comes from tests/parity/make_core_fixtures.py
        modules.add("h5py")
    if "mt-decode" in kinds:
        modules |= {"numpy", "h5py", "sentencepiece"}
    missing = [APT_PACKAGES[m] for m in sorted(modules) if importlib.util.find_spec(m) is None]
    if "openblas" not in os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3"):
        missing.append(BLAS_PACKAGE)
    if onnxruntime and "vit-infer" in kinds:
        missing += [package for command, package in (("node", "nodejs"), ("npm", "npm"))
                    if shutil.which(command) is None]
    return missing


def ensure_packages(rows, onnxruntime=False):
    missing = missing_packages(rows, onnxruntime)
    if not missing:
        return
    cmd = ["apt-get", "install", "-y"] + missing
    if os.geteuid() != 0:
        sys.exit("compare.py: PyTorch's (or ONNX Runtime's) side needs Debian packages that "
                 "are missing: "
                 f"{' '.join(missing)}; run this script as root to have them installed, or "
                 f"install them: sudo {' '.join(cmd)}")
    print(f"compare.py: installing what PyTorch's (or ONNX Runtime's) side needs: "
          f"{' '.join(cmd)}", flush=True)
    if subprocess.run(cmd).returncode != 0:  # stale package lists: update once and retry
        subprocess.run(["apt-get", "update"], check=True)
        subprocess.run(cmd, check=True)


def pinned_ort_version(directory=ORT_DIR):
    """onnxruntime-node's version in package.json (pinned) and the one installed in
    node_modules (None when it is not installed)."""
    def version(path, dependency=False):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        return data.get("dependencies", {}).get(ORT_PACKAGE) if dependency else data.get("version")
    return (version(os.path.join(directory, "package.json"), True),
            version(os.path.join(directory, "node_modules", ORT_PACKAGE, "package.json")))


def ensure_onnxruntime(directory=ORT_DIR, log=print):
    """Installs onnxruntime-node from the lockfile (`npm ci --ignore-scripts` in `directory`)
    when it is missing or not the pinned version. --ignore-scripts: the package's install script
    downloads GPU libraries from outside the npm registry, which this machine cannot reach and
    the CPU rows do not need (the CPU library is inside the package). Exits with the command to
    run when npm fails."""
    pinned, installed = pinned_ort_version(directory)
    if installed is not None and installed == pinned:
        return
    where = os.path.relpath(directory)
    where = directory if where.startswith("..") else where
    how = (f"(cd {where} && {' '.join(ORT_INSTALL)}), or leave ONNX Runtime out with "
           "--no-onnxruntime")
    what = "is not installed" if installed is None else f"is {installed}, not the pinned {pinned}"
    log(f"compare.py: {ORT_PACKAGE} {what}: installing it for ONNX Runtime's side: "
        f"{' '.join(ORT_INSTALL)} in {directory}")
    try:
        done = subprocess.run(ORT_INSTALL, cwd=directory, capture_output=True, text=True)
    except OSError as e:
        sys.exit(f"compare.py: cannot run npm ({e}); install {ORT_PACKAGE}: {how}")
    pinned, installed = pinned_ort_version(directory)
    if done.returncode != 0 or installed != pinned:
        head = "\n".join((done.stderr or done.stdout).strip().splitlines()[:8])  # npm: cause first
        sys.exit(f"compare.py: {' '.join(ORT_INSTALL)} failed in {directory}:\n{head}\n"
                 f"install {ORT_PACKAGE} {pinned}: {how}")


def training_jobs():
    """Command lines of vitk training runs on this machine (other than ours): a loaded machine."""
    jobs = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        # A copy of the binary under another name counts too (`/tmp/vitk-mt mt-train ...`).
        if (len(argv) > 1 and os.path.basename(argv[0]).startswith(b"vitk")
                and argv[1] in (b"train", b"mt-train", b"finetune")):
            jobs.append(f"{pid} " + b" ".join(argv).decode("utf-8", "replace").strip())
    return jobs


def machine_line():
    load = "%.2f %.2f %.2f" % os.getloadavg()
    jobs = training_jobs()
    state = (f"UNDER LOAD: {len(jobs)} vitk training job(s) running" if jobs
             else "no vitk training job running")
    return f"load average {load}; {state}"


def generated_corpus(directory, quick, n_test):
    """A parallel corpus of made-up languages for the placeholder model: train.tsv, valid.tsv and
    test.src (n_test source sentences). Each target sentence is its source's words, each mapped
    to its own target word, in reverse order. Seeded: the same files every run."""
    rng = random.Random(8)
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    words = 300 if quick else 6000

    def lexicon(cons, vows):
        out = set()
        while len(out) < words:
            out.add("".join(rng.choice(cons) + rng.choice(vows)
                            for _ in range(rng.randint(1, 4))))
        return sorted(out)

    src_words = lexicon(consonants, vowels)
    tgt_words = lexicon(consonants.upper() + "hjwxy", vowels + "y")
    rng.shuffle(tgt_words)
    mapping = dict(zip(src_words, tgt_words))

    def sentence():
        src = [rng.choice(src_words) for _ in range(rng.randint(4, 18))]
        return " ".join(src), " ".join(mapping[w] for w in reversed(src))

    os.makedirs(directory, exist_ok=True)
    for name, count in (("train.tsv", 400 if quick else 12000), ("valid.tsv", 10 if quick else 32)):
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.writelines("\t".join(sentence()) + "\n" for _ in range(count))
    with open(os.path.join(directory, "test.src"), "w", encoding="utf-8") as f:
        f.writelines(sentence()[0] + "\n" for _ in range(n_test))
    return os.path.join(directory, "test.src")


def placeholder_command(s, directory, steps):
    size = MT_TINY if s.quick else MT_SMALL
    cmd = [s.vitk, "mt-train", "--config", os.path.join(ROOT, "configs", "transformer-small.ini"),
           "--train", os.path.join(directory, "train.tsv"),
           "--valid", os.path.join(directory, "valid.tsv"), "--output",
           os.path.join(directory, "run"), "--max-steps", str(steps), "--valid-freq", str(steps),
           "--warmup-steps", "50", "--threads", str(s.threads), "--vocab-size",
           str(size["vocab"]), "--seed", "1", "--log-interval", "10"]
    for key in ("d_model", "heads", "d_ff", "layers", "decoder_layers"):
        cmd += [f"--model.{key}", str(size[key])]
    return cmd


# ---- The run ------------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Rows: vit-b16-224-b1, vit-b16-224-b8, vit-b16-384-b1 (and each with -bf16 and "
               "-int8), vit-train(-bf16), mt-train(-bf16), mt-greedy(-int8), mt-beam4(-int8). "
               "See the top of tests/bench/compare.py for what each one times.")
    ap.add_argument("--vitk", default=VITK, help="the vitk binary (default: build/vitk)")
    ap.add_argument("--rounds", type=int, help="rounds of every row; the table shows medians "
                    "(default 3; 1 with --quick)")
    ap.add_argument("--threads", type=int, default=2, help="threads of both sides (default 2)")
    ap.add_argument("--only", default="", metavar="ROWS",
                    help="comma-separated rows or prefixes: vit-b16, vit-b16-224-b1, vit-train, "
                         "mt-train, mt-greedy, mt-beam4, mt, ... (default: all)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny models and few steps: a smoke test of the harness, not a figure")
    ap.add_argument("--seconds", type=float,
                    help="ViT inference: time batches for at least this long per side and round "
                         "(default 10; 0.3 with --quick)")
    ap.add_argument("--mt-model", metavar="CKPT",
                    help="a vitk mt-train checkpoint (tied embeddings) for the decoding rows "
                         "(default: train a placeholder on a generated corpus)")
    ap.add_argument("--mt-input", action="append", metavar="FILE",
                    help="source sentences for the decoding rows, repeatable (default with "
                         "--mt-model: data/bible/test.es and valid.es)")
    ap.add_argument("--placeholder-steps", type=int, default=30, metavar="N",
                    help="training steps of the placeholder translation model (default 30)")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--dry-run", action="store_true",
                    help="print what would run and an empty table; runs nothing but "
                         "`vitk env` and `vitk ... --help` (no PyTorch needed)")
    ap.add_argument("--no-onnxruntime", action="store_true",
                    help="leave out ONNX Runtime's columns of the ViT inference rows (no Node, "
                         "no npm, no export)")
    ap.add_argument("--onnx-dir", metavar="DIR",
                    help="where the ViT models exported for ONNX Runtime are kept and reused "
                         "(about 330 MB per ViT-B/16 image size; default "
                         "$XDG_CACHE_HOME/vitk/onnx or ~/.cache/vitk/onnx)")
    ap.add_argument("--keep", metavar="DIR",
                    help="work in DIR and keep it (placeholder model, sentences, translations)")
    ap.add_argument("--torch-child", metavar="SPEC", help=argparse.SUPPRESS)
    ap.add_argument("--onnx-export-child", metavar="SPEC", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.seconds is None:
        args.seconds = 0.3 if args.quick else 10.0
    if args.rounds < 1 or args.threads < 1 or not args.seconds > 0:
        ap.error("--rounds and --threads must be at least 1, --seconds positive")
    return args, ap


def vitk_env(vitk):
    """`vitk env`'s output (the CPU's bf16 and int8 products); None without a binary to ask."""
    if not os.access(vitk, os.X_OK):
        return None
    return subprocess.run([vitk, "env"], capture_output=True, text=True).stdout


def precision_support(vitk, rows, env):
    """{row key: reason it is left out} for the bf16 and int8 rows this binary cannot run (env:
    vitk_env's answer). A row is kept when `vitk <subcommand> --help` lists its precision among
    --precision's values (classify for inference, translate for decoding, train and mt-train for
    the training steps, which bench vit-step/mt-step then run). A bf16 row also needs bf16
    products, which `vitk env` denies ("bf16: no") on a CPU without AVX512_BF16 or AMX; int8
    runs on every CPU (without VNNI, on 7-bit activation codes: int8_note)."""
    sub = {"vit-infer": "classify", "mt-decode": "translate", "vit-train": "train",
           "vit-finetune": "train", "mt-train": "mt-train"}
    known, out = {}, {}
    for r in rows:
        if r.precision == "f32":
            continue
        name = sub[r.kind]
        if env is None:
            out[r.key] = f"no vitk binary at {vitk} to ask whether it has a {r.precision} path"
            continue
        if r.precision == "bf16" and "bf16: no" in env:
            out[r.key] = "this CPU has no bf16 products (`vitk env`: bf16: no)"
            continue
        if name not in known:
            known[name] = vitk_side.precisions(vitk, name)
        if r.precision not in known[name]:
            out[r.key] = (f"`vitk {name} --help` lists no {r.precision} for --precision: this "
                          f"binary has no {r.precision} path")
    return out


def int8_note(env):
    """The int8 rows' note: which int8 products ran, from `vitk env`'s int8 line (VNNI with
    8-bit activations, or 7-bit activation codes without it); None when it has no such line."""
    match = re.search(r"^int8: (.+)$", env or "", re.M)
    return f"int8 products (`vitk env`): {match.group(1)}" if match else None


def prepare_translation(args, s, rows, log):
    """Settings with the translation model and the sentences, making the placeholder model when
    no --mt-model was given. Returns (settings, note for the decoding rows or None)."""
    if not any(r.kind == "mt-decode" for r in rows):
        return s, None
    n = max(r.params["sentences"] for r in rows if r.kind == "mt-decode")
    note = None
    if args.mt_model:
        model = args.mt_model
        inputs = args.mt_input or [os.path.join(ROOT, "data", "bible", f)
                                   for f in ("test.es", "valid.es")]
    else:
        directory = os.path.join(s.workdir, "placeholder")
        steps = 3 if args.quick else args.placeholder_steps
        cmd = placeholder_command(s, directory, steps)
        model = os.path.join(directory, "run", "last.h5")
        inputs = [os.path.join(directory, "test.src")]
        size = "tiny" if args.quick else "d 256, 3+3 layers, 8k vocabulary"
        note = (f"placeholder translation model ({size}): "
                f"{steps} steps of `vitk mt-train` on a generated corpus; its output is noise, so "
                "its lengths are not a real model's (give --mt-model for the issue's figure)")
        if args.dry_run:
            print(f"placeholder model: {' '.join(cmd)}")
        else:
            log(f"training the placeholder translation model ({steps} steps)...")
            generated_corpus(directory, args.quick, n)
            m = run_measured(cmd, check=False)
            if m.returncode != 0:
                sys.exit(f"compare.py: the placeholder model failed ({' '.join(cmd)}):\n"
                         + m.stdout[-2000:] + m.stderr[-2000:])
    if args.dry_run:
        return s._replace(mt_model=model, mt_sentences=["..."] * n), note
    missing = [p for p in inputs if not os.path.exists(p)]
    if missing:
        sys.exit(f"compare.py: --mt-input: no such file: {', '.join(missing)}")
    sentences = vitk_side.read_sentences(inputs, n)
    with open(os.path.join(s.workdir, "sentences.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(sentences) + "\n")
    return s._replace(mt_model=model, mt_sentences=sentences), note


def default_onnx_dir():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "vitk", "onnx")


def check_spec(export, s):
    """run_vit.js's parity check of an exported model (export: its export_spec)."""
    p = export["params"]
    return dict(mode="check", model=export["model"], threads=s.threads,
                batch=export["check_batch"], image_size=p["image_size"], input=export["input"],
                reference=export["reference"])


def parity_problem(diff, tolerance=ONNX_TOLERANCE):
    """Why ONNX Runtime's logits do not count as PyTorch's model (None when they do)."""
    if diff is None:
        return "its logits are not numbers (NaN) where PyTorch's are"
    if diff > tolerance:
        return f"its logits differ from PyTorch's by up to {diff:.2g} (more than {tolerance:g})"
    return None


def prepare_onnx(args, s, rows, log, exporter=None, checker=None):
    """Settings with ONNX Runtime's models, and lines for the header. For each image size of the
    ViT inference rows: export PyTorch's model (or find it in --onnx-dir) and check, before any
    timing, that ONNX Runtime's logits for a fixed batch match PyTorch's (max |difference| at
    most ONNX_TOLERANCE). A size whose export or check fails keeps an OnnxModel with the problem:
    its rows' ONNX Runtime cells stay "-", with the reason as a note. exporter(spec) and
    checker(spec) default to run_export and run_node; --dry-run prints what would run."""
    vit_rows = [r for r in rows if r.kind == "vit-infer"]
    if args.no_onnxruntime or not vit_rows:
        return s, []
    exporter, checker = exporter or run_export, checker or run_node
    directory = args.onnx_dir or default_onnx_dir()
    models, lines, version = {}, [], None
    by_size = {}
    for r in vit_rows:
        by_size.setdefault(r.params["image_size"], r)
    for size, row in sorted(by_size.items()):
        spec = export_spec(row, s, directory)
        if args.dry_run:
            print(f"ONNX export {size}: " + shlex.join(
                [sys.executable, SCRIPT, "--onnx-export-child", json.dumps(spec)]))
            print(f"ONNX parity {size}: {shlex.join(node_command(check_spec(spec, s)))}")
            models[size] = OnnxModel(spec["model"], None)
            continue
        os.makedirs(directory, exist_ok=True)
        what = f"{size}x{size}"
        try:
            log(f"ONNX Runtime: the {what} model: exporting it or finding it in {directory}...")
            answer, m = exporter(spec)
            how = ("cached" if answer["cached"] else
                   f"exported in {answer['seconds']:.0f} s, peak {m.peak_rss_mib:.0f} MiB")
            check, _ = checker(check_spec(spec, s))
        except Exception as e:  # noqa: BLE001  (a failed export or check is a note, not the end)
            problem = failure_note("the ONNX export or parity check", e)
            models[size] = OnnxModel(spec["model"], problem)
            lines.append(f"ONNX Runtime, {what}: {problem}")
            continue
        version = check.get("version", version)
        diff = check.get("max_abs_diff")
        models[size] = OnnxModel(spec["model"], parity_problem(diff), spec["weights"])
        shown = "NaN" if diff is None else f"{diff:.1e}"
        lines.append(f"ONNX Runtime parity, {what}: max |logit difference| against PyTorch "
                     f"{shown} on a fixed batch of {spec['check_batch']} (limit "
                     f"{ONNX_TOLERANCE:g}: {'ok' if models[size].problem is None else 'FAILED'}); "
                     f"{os.path.basename(spec['model'])} {how}")
    head = (f"ORT: ONNX Runtime{' ' + version if version else ''} (onnxruntime-node), f32, "
            f"{s.threads} intra-op threads, 1 inter-op, sequential, graph optimisation \"all\"; "
            f"the PyTorch model exported with opset {ONNX_OPSET}, seed {VIT_SEED}, in {directory}")
    return s._replace(onnx=models), [head] + lines


def prepare_vitk_files(s, log, runner=None):
    """Settings whose ViT rows run vitk on the weights ONNX Runtime and PyTorch run: for each
    exported image size, `vitk import --format torchvision` of its .safetensors and `vitk
    quantize` of that, into the work directory. vitk's times and peak memory then include loading
    a checkpoint, as a deployment would (the int8 row reads int8 weights, never f32 ones). A size
    whose import fails keeps random weights, with a header line that says why."""
    runner = runner or run_measured
    files, lines = {}, []
    for size, model in sorted((s.onnx or {}).items()):
        if model.weights is None:
            continue
        f32 = os.path.join(s.workdir, f"vit-{size}.h5")
        int8 = os.path.join(s.workdir, f"vit-{size}-int8.h5")
        try:
            runner([s.vitk, "import", "--format", "torchvision", model.weights, "--out", f32])
            runner([s.vitk, "quantize", f32, "--out", int8])
        except Exception as e:  # noqa: BLE001  (random weights then, with the reason)
            lines.append(f"vitk, {size}x{size}: random weights: "
                         + failure_note("importing the exported weights", e))
            continue
        files[size] = VitkFiles(f32, int8)
        log(f"vitk: {size}x{size}: imported {os.path.basename(model.weights)} and quantised it")
    if files:
        lines.insert(0, "vitk: the same weights, `vitk import --format torchvision` of the "
                        "exported model's state_dict and, for int8, `vitk quantize` of that; "
                        "each run loads its checkpoint (in its peak memory)")
    return s._replace(vit_files=files or None), lines


def failure_note(side, err):
    if isinstance(err, subprocess.CalledProcessError):
        tail = (err.stderr or "").strip().splitlines()
        # A child's JSON spec (the PyTorch, export and ONNX Runtime children) shows as SPEC.
        cmd = ["SPEC" if str(a).startswith("{") else str(a) for a in err.cmd[:4]]
        return f"{side} failed: {' '.join(cmd)}...: " + (
            tail[-1] if tail else f"exit {err.returncode}")
    return f"{side} failed: {err}"


def measure(rows, s, rounds, log, vitk_runner=None, torch_runner=None, ort_runner=None):
    """Runs every round and returns one Result per row (in row order). Rows that share a PyTorch
    baseline (torch_key) share one PyTorch measurement per round, and one ONNX Runtime
    measurement where they have that side (has_ort_side); in each round, PyTorch runs before
    ONNX Runtime and ONNX Runtime before the vitk rows in odd rounds, the other way round in even
    ones. A failure is a note on the row(s), not the end; a vitk row that failed once is not run
    again. The runners default to run_vitk(row, s), run_torch(spec) and run_ort(spec); each
    returns (units/s, Measured, extra)."""
    vitk_runner = vitk_runner or run_vitk
    torch_runner = torch_runner or run_torch
    ort_runner = ort_runner or run_ort
    results = {r.key: Result(r, [], [], [], [], []) for r in rows}
    groups = collections.defaultdict(list)  # torch_key: its rows, in table order
    for r in rows:
        groups[r.torch_key].append(r)
    torch_values = {key: ([], []) for key in groups}  # units/s and peak MiB of each round
    all_rows = {r.key: r for r in make_rows(s.quick)}
    ort_values, ort_specs = {}, {}  # the same, of ONNX Runtime; its spec, None if left out
    for key, group in groups.items():
        if has_ort_side(all_rows[key], s):
            ort_values[key] = ([], [])
            ort_specs[key] = ort_spec(all_rows[key], s)
            model = s.onnx.get(all_rows[key].params["image_size"])
            if ort_specs[key] is None:
                note = ("ONNX Runtime left out: "
                        + (model.problem if model else "no exported model of this size"))
                for r in group:
                    results[r.key].notes.append(note)
    torch_hyp = os.path.join(s.workdir, "torch.hyp")
    hyps = {}

    def attempt(tag, side, targets, run, values, rss):
        """run() -> (value, Measured, extra): records value and peak memory, or a note."""
        try:
            value, m, extra = run()
        except Exception as e:  # noqa: BLE001  (a failed side is a note, not the end)
            note = failure_note(side, e)
            for r in targets:
                if note not in results[r.key].notes:
                    results[r.key].notes.append(note)
            log(f"{tag}: {note}")
            return None
        values.append(value)
        rss.append(m.peak_rss_mib)
        log(f"{tag}: {side} {fmt_value(value)} {targets[0].unit}, peak {m.peak_rss_mib:.0f} MiB")
        return extra

    for rnd in range(rounds):
        for key, group in groups.items():
            base = all_rows[key]
            spec = torch_spec(base, s, torch_hyp if base.kind == "mt-decode" else None)
            tag = f"round {rnd + 1}/{rounds} {key}"

            def torch_side():
                attempt(tag, "PyTorch", group, lambda: torch_runner(spec), *torch_values[key])

            def ort_side():
                if ort_specs.get(key) is not None:
                    attempt(tag, "ONNX Runtime", group, lambda: ort_runner(ort_specs[key]),
                            *ort_values[key])

            def vitk_side_():
                for r in group:
                    res = results[r.key]
                    if any(n.startswith("vitk failed") for n in res.notes):
                        continue  # failed once (a missing option, a bad model): not again
                    h = attempt(f"round {rnd + 1}/{rounds} {r.key}", "vitk", [r],
                                lambda: vitk_runner(r, s), res.vitk, res.vitk_rss)
                    if h is not None:
                        hyps[r.key] = h

            sides = (torch_side, ort_side, vitk_side_)
            for side in (sides if rnd % 2 == 0 else reversed(sides)):
                side()
    # Do both sides translate alike? (greedy: the same model and the same search)
    if "mt-greedy" in hyps and os.path.exists(torch_hyp):
        with open(torch_hyp, encoding="utf-8") as f:
            theirs = [line.rstrip("\n") for line in f]
        same = sum(a == b for a, b in zip(hyps["mt-greedy"], theirs))
        results["mt-greedy"].notes.append(f"identical greedy translations, vitk and PyTorch: "
                                          f"{same}/{len(hyps['mt-greedy'])}")
    out = []
    for r in rows:
        values, rss = torch_values[r.torch_key]
        res = results[r.key]._replace(torch=values, torch_rss=rss)
        if r.torch_key in ort_values:
            res = res._replace(ort=ort_values[r.torch_key][0], ort_rss=ort_values[r.torch_key][1])
        if r.precision != "f32":
            res.notes.append("PyTorch and ORT columns: the f32 row's" if res.ort is not None
                             else "PyTorch column: the f32 row's PyTorch")
        out.append(res)
    return out


def main(argv=None):
    args, ap = parse_args(argv)
    if args.torch_child:
        torch_child(json.loads(args.torch_child))
        return 0
    if args.onnx_export_child:
        onnx_export_child(json.loads(args.onnx_export_child))
        return 0
    try:
        rows = select_rows(make_rows(args.quick), args.only)
    except ValueError as e:
        ap.error(str(e))

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    if not args.dry_run:
        if not os.access(args.vitk, os.X_OK):
            sys.exit(f"compare.py: {args.vitk} is not an executable: build vitk first "
                     "(cmake --build build) or give --vitk")
        wants_ort = not args.no_onnxruntime and any(r.kind == "vit-infer" for r in rows)
        ensure_packages(rows, wants_ort)
        check_blas(__file__)
        if wants_ort:
            ensure_onnxruntime(log=log)
    env = vitk_env(args.vitk)
    skipped = precision_support(args.vitk, rows, env)
    active = [r for r in rows if r.key not in skipped]
    with_ort = not args.no_onnxruntime and any(r.kind == "vit-infer" for r in active)
    workdir = args.keep or tempfile.mkdtemp(prefix="vitk-compare-")
    os.makedirs(workdir, exist_ok=True)
    try:
        s = Settings(args.vitk, args.threads, args.seconds, args.quick, None, None, workdir)
        when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        print(f"vitk against PyTorch{' and ONNX Runtime' if with_ort else ''}, {when}: "
              f"{args.threads} threads, medians of {args.rounds} "
              f"round(s){', --quick sizes (not a figure)' if args.quick else ''}")
        print(f"machine at the start: {machine_line()}", flush=True)
        s, mt_note = prepare_translation(args, s, rows, log)
        if args.dry_run:
            s, _ = prepare_onnx(args, s, active, log)
            for r in rows:
                if r.key in skipped:
                    print(f"{r.key}: left out: {skipped[r.key]}")
                    continue
                print(f"{r.key}: vitk: {' '.join(map(str, vitk_command(r, s)))}")
                if r.torch_key == r.key:
                    print(f"{r.key}: PyTorch child: {json.dumps(torch_spec(r, s))}")
                    if has_ort_side(r, s):
                        print(f"{r.key}: ONNX Runtime: {shlex.join(node_command(ort_spec(r, s)))}")
            results = [Result(r, [], [], [], [], [], *(([], []) if has_ort_side(r, s) else ()))
                       for r in active]
        else:
            version = subprocess.run([args.vitk, "--version"], capture_output=True,
                                     text=True).stdout.strip()
            idle = run_measured([args.vitk, "--version"])
            with_torchvision = any(r.kind in ("vit-infer", "vit-finetune") for r in rows)
            _, torch_idle, torch_version = run_torch(
                dict(kind="idle", threads=args.threads, torchvision=with_torchvision))
            print(f"{version}; PyTorch {torch_version} with "
                  f"{os.path.basename(os.path.dirname(check_blas(__file__)))}")
            ort_idle = ""
            if with_ort:
                answer, m = run_node(dict(mode="idle"))
                ort_idle = (f", node + require('{ORT_PACKAGE}') {answer['version']} "
                            f"{m.peak_rss_mib:.0f} MiB")
            print(f"peak RSS of doing nothing: vitk --version {idle.peak_rss_mib:.0f} MiB, "
                  f"python3 + import torch{', torchvision' if with_torchvision else ''} "
                  f"{torch_idle.peak_rss_mib:.0f} MiB{ort_idle}", flush=True)
            s, onnx_lines = prepare_onnx(args, s, active, log)
            s, vitk_lines = prepare_vitk_files(s, log)
            onnx_lines += vitk_lines
            if onnx_lines:
                print("\n".join(onnx_lines), flush=True)
            results = measure(active, s, args.rounds, log)
        int8 = int8_note(env)
        for res in results:  # what ran, before what happened: the placeholder, the int8 mode
            if int8 and res.row.precision == "int8":
                res.notes.insert(0, int8)
            if mt_note and res.row.kind == "mt-decode":
                res.notes.insert(0, mt_note)
        print("\n".join(table_lines(results, args.markdown)))
        for reason in sorted(set(skipped.values())):
            keys = ", ".join(k for k, v in skipped.items() if v == reason)
            print(f"left out: {keys}: {reason}")
        print(f"machine at the end: {machine_line()}")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
