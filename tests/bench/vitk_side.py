"""The vitk half of the PyTorch comparisons in tests/bench/: run a vitk subcommand, read its
figure from its output. Standard library only (compare.py's parent process never imports
PyTorch). Every function returns the figure and the bench_common.Measured of the process, whose
peak_rss_mib is vitk's peak resident memory for that run."""
import os
import re
import subprocess
import sys
import tempfile

from bench_common import run_measured


class VitkOutputError(RuntimeError):
    """vitk ran but did not print the figure we look for (its output changed?)."""


def _search(pattern, text, cmd):
    match = re.search(pattern, text)
    if not match:
        raise VitkOutputError(f"no /{pattern}/ in the output of {' '.join(cmd)}:\n{text}")
    return match


def precisions(vitk, subcommand):
    """The values `vitk SUBCOMMAND --help` lists for --precision ({"f32", "bf16", "int8"} from
    its option line `--precision f32|bf16|int8 (=f32)`; empty without the option): how the
    comparison finds out what this binary can do without running it. Only an option line counts,
    not a usage example such as `vitk classify ... --precision bf16`."""
    out = subprocess.run([vitk, subcommand, "--help"], capture_output=True, text=True)
    match = re.search(r"^\s*--precision\s+([\w|]+)", out.stdout + out.stderr, re.M)
    return set(match.group(1).split("|")) if match else set()


def parse_classify_benchmark(text, cmd=("vitk classify",)):
    """Images per second from `vitk classify --benchmark` without images."""
    return float(_search(r"model alone, batch \d+, .*?: ([0-9.]+) images/s", text, cmd).group(1))


def classify_benchmark(vitk, threads, batch, seconds, model_args, precision=None):
    """(images/s, Measured) of `vitk classify --benchmark`: the model alone on random input, one
    untimed warm-up batch, then batches for at least `seconds`. model_args: e.g. ["--model",
    "vit.h5"] or ["--random-weights", "--config", "configs/vit-b16.ini", "--model.image_size",
    "384"]."""
    cmd = [vitk, "classify", "--benchmark", "--batch-size", str(batch),
           "--benchmark-seconds", str(seconds), "--threads", str(threads)] + list(model_args)
    if precision:
        cmd += ["--precision", precision]
    m = run_measured(cmd)
    return parse_classify_benchmark(m.stdout, cmd), m


def parse_step_bench(text, cmd=("vitk bench",)):
    """Seconds per step from `vitk bench vit-step|mt-step` (its median round)."""
    return float(_search(r"median ([0-9.]+) ms/step", text, cmd).group(1)) / 1e3


def step_bench(vitk, what, threads, batch, steps, length=None, precision=None, model=()):
    """(seconds per training step, Measured) of `vitk bench vit-step` or `mt-step`: two untimed
    warm-up steps (as the PyTorch side skips two), then one round of `steps` steps (forward, loss, backward, optimizer) on random
    data in memory; no profiled round."""
    cmd = [vitk, "bench", what, "--threads", str(threads), "--batch-size", str(batch), "--steps",
           str(steps), "--repeats", "1", "--no-breakdown"]
    if length is not None:
        cmd += ["--length", str(length)]
    cmd += list(model)  # --model.KEY VALUE pairs: another model than the benchmark's own
    if precision:
        cmd += ["--precision", precision]
    m = run_measured(cmd)
    return parse_step_bench(m.stdout, cmd), m


def read_sentences(paths, n):
    """`n` non-empty lines of the files `paths`, in order, repeated if there are too few."""
    lines = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            lines += [line.rstrip("\n") for line in f if line.strip()]
    if not lines:
        sys.exit("no sentences in " + ", ".join(paths))
    return [lines[i % len(lines)] for i in range(n)]


def parse_translate_seconds(text, cmd=("vitk translate",)):
    """Seconds of `vitk translate`'s own timer (tokenization, search and detokenization; not the
    start-up, the model loading or the writing), from its last stderr line."""
    return float(_search(r"vitk: translated \d+ sentences .*? in ([0-9.]+) s", text, cmd).group(1))


def translate(vitk, model, sentences, threads, extra, batch=32, precision=None):
    """(wall seconds of the whole process, vitk's own seconds, translations, Measured) of
    `vitk translate` on `sentences` in batches of `batch`; `extra`: e.g. ["--greedy"]."""
    with tempfile.TemporaryDirectory() as tmp:
        src, hyp = os.path.join(tmp, "src"), os.path.join(tmp, "hyp")
        with open(src, "w", encoding="utf-8") as f:
            f.write("\n".join(sentences) + "\n")
        cmd = [vitk, "translate", "--model", model, "--input", src, "--output", hyp,
               "--threads", str(threads), "--batch-size", str(batch)] + list(extra)
        if precision:
            cmd += ["--precision", precision]
        m = run_measured(cmd)
        with open(hyp, encoding="utf-8") as f:
            hyps = [line.rstrip("\n") for line in f]
    return m.seconds, parse_translate_seconds(m.stderr, cmd), hyps, m
