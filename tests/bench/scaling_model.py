#!/usr/bin/python3
"""Data-parallel scaling on paper: how much of a training step N ranks would spend waiting for
the gradient all-reduce, from step times measured on this machine and the bandwidth term of a
ring all-reduce. Prints Markdown for common/dist/README.md ("Scaling on paper").

    /usr/bin/python3 tests/bench/scaling_model.py                 # about 3 minutes on 2 idle cores
    /usr/bin/python3 tests/bench/scaling_model.py --quick         # tiny batches: a smoke test
    /usr/bin/python3 tests/bench/scaling_model.py --vitk PATH --threads 4 --speedup 1,16

For each model (ViT-S/16 at 224, ViT-B/16 at 384, Transformer-base) it
  1. runs `vitk bench vit-step|mt-step --config ...` (the real training step: forward, loss,
     backward, optimizer, on random inputs held in memory) at two small batches that fit in
     memory, and reads the parameter count and the best round's time per step;
  2. fits step time = fixed + per-unit time x batch (units: images, or target tokens) through
     the two points, and extrapolates it to a per-rank batch (ViT-S/16: 128 images, ViT-B/16:
     32 images, Transformer-base: 25,000 target tokens); the fixed part is what a step costs
     whatever its batch (the optimizer over every parameter, zeroing the gradients), which a
     purely proportional scaling would multiply;
  3. takes the bytes each rank all-reduces per step: the f32 gradients, 4 bytes a parameter;
  4. computes the ring all-reduce time 2(N-1)/N x bytes / bandwidth for N = 2 ... 64 at 10, 25
     and 100 Gbit/s, and the predicted efficiency, compute / (compute + exposed communication),
     with no overlap and with perfect overlap with backward.

Assumptions (printed with the tables):
  - Ring all-reduce, bandwidth term only. No latency term (a ring pays about 2(N-1) message
    latencies per bucket), no time for the additions, no congestion; each link carries the
    stated bandwidth in each direction at once.
  - Weak scaling: every rank keeps the per-rank batch, so the global batch is N times it.
  - Every rank computes as fast as this machine with --threads (--speedup K: K times as fast).
  - No overlap: exposed = all-reduce time. Perfect overlap: backward is 2/3 of the step and
    hides as much of the all-reduce as it lasts, exposed = max(0, all-reduce - 2/3 x compute);
    this ignores the last bucket, which can only start when backward ends.
  - --clock cpu (the default): a step's time is its CPU time divided by the threads, with
    OMP_WAIT_POLICY=passive so that waiting threads do not spin: on a shared machine, the time
    the step would take on otherwise idle cores if the threads shared the work evenly (a little
    optimistic). --clock wall uses the wall clock, right on an idle machine only.

Standard library only; the figures come from the vitk binary (default build/vitk of this source
tree, --vitk to override).
"""
import argparse
import collections
import datetime
import math
import os
import re
import shlex
import subprocess
import sys
import textwrap

from bench_common import ROOT, VITK, run_measured

RANKS = [2, 4, 8, 16, 32, 64]
GBITS = [10, 25, 100]
BACKWARD_SHARE = 2.0 / 3.0

# The measured batches are (batch, length): images, or sentences of `length` source and target
# tokens; two of them for the fit, full size and --quick.
Model = collections.namedtuple("Model", "name bench args unit per_rank batches quick_batches")
MODELS = [
    Model("ViT-S/16 @224", "vit-step", ["--config", "configs/vit-s16.ini"], "image", 128,
          [(8, None), (16, None)], [(1, None), (2, None)]),
    Model("ViT-B/16 @384", "vit-step",
          ["--config", "configs/vit-b16.ini", "--model.image_size", "384"], "image", 32,
          [(2, None), (4, None)], [(1, None), (2, None)]),
    Model("Transformer-base", "mt-step", ["--config", "configs/transformer-base.ini"],
          "target token", 25000, [(16, 32), (48, 32)], [(2, 16), (4, 16)]),
]

# One run of `vitk bench`: its batch in units, the best round's wall and CPU seconds per step.
Point = collections.namedtuple("Point", "units wall cpu threads peak_mib command")
# A model's figures: parameters, the two points, the fitted fixed and per-unit seconds, and
# whether noise made the fit fall back to a proportional line.
Fit = collections.namedtuple("Fit", "parameters points fixed per_unit proportional")


def ring_allreduce_seconds(nbytes, ranks, gbit_per_s):
    """The bandwidth term of a ring all-reduce of nbytes over `ranks` ranks: each rank sends and
    receives 2(N-1)/N of the data (reduce-scatter, then all-gather)."""
    return 2.0 * (ranks - 1) / ranks * nbytes * 8.0 / (gbit_per_s * 1e9)


# TCP over Ethernet with a 1500-byte MTU carries 1448 bytes of data in each 1514-byte frame
# (Ethernet, IP and TCP headers with timestamps): the share of a link's rate the gradients get.
TCP_PAYLOAD_SHARE = 1448.0 / 1514.0


def allreduce_seconds(nbytes, ranks, gbit_per_s, latency_s=0.0, buckets=1):
    """vitk's all-reduce over TCP (reduce-scatter by recursive halving, then all-gather by
    recursive doubling: Rabenseifner's algorithm, which common/dist asks Open MPI for): the
    ring's bandwidth term at TCP's share of the link, and one one-way latency per step, 2 log2(N)
    steps for each bucket. Checked against runs on two hosts by tests/bench/hosts.py."""
    steps = 2 * math.ceil(math.log2(ranks)) if ranks > 1 else 0
    return (ring_allreduce_seconds(nbytes, ranks, gbit_per_s * TCP_PAYLOAD_SHARE) +
            buckets * steps * latency_s)


def efficiency(compute, comm, overlap):
    """compute / (compute + exposed communication); with overlap, backward (BACKWARD_SHARE of
    the step) hides as much of the all-reduce as it lasts."""
    exposed = max(0.0, comm - BACKWARD_SHARE * compute) if overlap else comm
    return compute / (compute + exposed)


def fit_line(points, seconds):
    """(fixed, per-unit) seconds of the line through two (units, seconds) points; with a
    negative intercept (noise), the line through the origin and the larger point instead."""
    (u1, s1), (u2, s2) = sorted(zip(points, seconds))
    per_unit = (s2 - s1) / (u2 - u1)
    fixed = s1 - per_unit * u1
    if fixed < 0 or per_unit <= 0:
        return 0.0, s2 / u2
    return fixed, per_unit


def parse_step_bench(text):
    """(parameters, best s/step, median s/step, best CPU s/step, threads) from the output of
    `vitk bench vit-step|mt-step`."""
    params = re.search(r"^(?:vit|mt)-step model: .*; (\d+) parameters", text, re.M)
    step = re.search(r"^(?:vit|mt)-step: .*, (\d+) threads: best ([0-9.]+) ms/step .*median "
                     r"([0-9.]+) ms/step; best ([0-9.]+) CPU ms/step", text, re.M)
    if not params or not step:
        raise ValueError("no parameter count or step time in vitk's output:\n" + text)
    return (int(params.group(1)), float(step.group(2)) / 1e3, float(step.group(3)) / 1e3,
            float(step.group(4)) / 1e3, int(step.group(1)))


def measure(vitk, model, a):
    """Runs the model's benchmark at each of its batches; returns a Fit."""
    env = dict(os.environ)
    if a.clock == "cpu":
        env["OMP_WAIT_POLICY"] = "passive"
    points, parameters = [], None
    for batch, length in (model.quick_batches if a.quick else model.batches):
        cmd = [vitk, "bench", model.bench, *model.args, "--batch-size", str(batch), "--steps",
               str(a.steps), "--repeats", str(a.repeats), "--threads", str(a.threads),
               "--no-breakdown"]
        if length:
            cmd += ["--length", str(length)]
        m = run_measured(cmd, env=env)
        parameters, wall, _, cpu, threads = parse_step_bench(m.stdout)
        shown = ("OMP_WAIT_POLICY=passive " if a.clock == "cpu" else "") + " ".join(
            ["vitk"] + [shlex.quote(c) for c in cmd[1:]])
        points.append(Point(batch * (length or 1), wall, cpu, threads, m.peak_rss_mib, shown))
    seconds = [p.cpu / p.threads if a.clock == "cpu" else p.wall for p in points]
    fixed, per_unit = fit_line([p.units for p in points], seconds)
    proportional = fixed == 0 and len(points) > 1
    return Fit(parameters, points, fixed, per_unit, proportional)


def wrap(text, indent=""):
    """Prose at the repository's 100 columns; never breaks an option at its hyphens."""
    return textwrap.fill(text, 100, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=False)


def cpu_isa(vitk):
    """What oneDNN sees, from `vitk env` ("avx512_core_bf16")."""
    out = subprocess.run([vitk, "env"], capture_output=True, text=True).stdout
    match = re.search(r"^cpu isa: (.+)$", out, re.M)
    return match.group(1).strip() if match else "unknown ISA"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def units(n, unit):
    return f"{n:,} {unit}" + ("" if n == 1 else "s")


def number(x):
    return f"{x:.3g}" if x < 100 else f"{x:,.0f}"


def batch_for(compute, per_unit, fixed):
    """The smallest whole batch whose step computes for at least `compute` seconds."""
    return max(1, math.ceil((compute - fixed) / per_unit - 1e-9))


def assumptions(clock, threads, speedups):
    step = (f"a step's time is its CPU time divided by its {threads} threads, run with "
            "OMP_WAIT_POLICY=passive so that waiting threads do not count: the time on otherwise "
            "idle cores if the threads share the work evenly (a little optimistic)"
            if clock == "cpu" else "a step's time is the wall clock of the best round")
    faster = ("; the tables for ranks K times as fast as this machine divide it by K"
              if any(k != 1 for k in speedups) else "")
    return [
        "All-reduce: a ring, bandwidth term only, 2(N−1)/N · bytes / bandwidth; bytes = 4 × "
        "parameters (f32 gradients), MB = 10⁶ bytes, Gbit/s = 10⁹ bit/s. No latency term (a ring "
        "pays about 2(N−1) message latencies per bucket), no time for the additions, no "
        "congestion.",
        "Weak scaling: every rank keeps the per-rank batch; the global batch is N times it.",
        f"Compute: {step}. Step time = fixed + per-unit time × batch, fitted through the two "
        "measured batches and extrapolated to the per-rank batch (the fixed part, mostly the "
        f"optimizer over every parameter, does not grow with the batch){faster}.",
        "No overlap: exposed communication = all-reduce time. Perfect overlap: backward is 2/3 "
        "of the step and hides as much all-reduce as it lasts, exposed = max(0, all-reduce − "
        "2/3 · compute); this ignores the last bucket, which starts only when backward ends.",
        "Efficiency = compute / (compute + exposed); the speed-up over one rank is N times it.",
    ]


def summary(models, fits):
    out = ["| model | parameters | gradient MB per step | measured s per step: wall (CPU ÷ "
           "threads) | fixed s per step | s per image or token | peak memory MiB |",
           "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for model in models:
        f = fits[model.name]
        measured = ", ".join(f"{units(p.units, model.unit)}: {p.wall:.2f} ({p.cpu / p.threads:.2f})"
                             for p in f.points)
        out.append(f"| {model.name} | {f.parameters:,} | {4e-6 * f.parameters:.1f} | {measured} "
                   f"| {'none (noise: a line through 0)' if f.proportional else f'{f.fixed:.2f}'} "
                   f"| {f.per_unit:.4g} | "
                   f"{max(p.peak_mib for p in f.points):,.0f} |")
    return out


def tables(models, fits, speedup):
    """Markdown lines: all-reduce times and efficiencies for every model, N and bandwidth; then
    the per-rank batch each target needs."""
    out = [wrap("Compute per step at the per-rank batch: " + ", ".join(
        f"{m.name} {(fits[m.name].fixed + fits[m.name].per_unit * m.per_rank) / speedup:.1f} s"
        for m in models) + "."), ""]
    head = (["model", "N"] + [f"all-reduce s, {g} Gbit/s" for g in GBITS]
            + [f"no overlap, {g}" for g in GBITS] + [f"overlap, {g}" for g in GBITS])
    out.append("| " + " | ".join(head) + " |")
    out.append("| --- " + "| ---: " * (len(head) - 1) + "|")
    for model in models:
        f = fits[model.name]
        compute = (f.fixed + f.per_unit * model.per_rank) / speedup
        for n in RANKS:
            comm = [ring_allreduce_seconds(4.0 * f.parameters, n, g) for g in GBITS]
            cells = [model.name if n == RANKS[0] else "", str(n)] + [number(c) for c in comm]
            cells += [f"{100 * efficiency(compute, c, False):.1f}%" for c in comm]
            cells += [f"{100 * efficiency(compute, c, True):.1f}%" for c in comm]
            out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out += [wrap(f"Smallest per-rank batch at N = {RANKS[-1]} (fewer ranks need a little less) "
                 "for 90% efficiency without overlap (compute ≥ 9 × all-reduce), and for perfect "
                 "overlap to hide the whole all-reduce (2/3 × compute ≥ all-reduce):"), "",
            "| model | " + " | ".join(f"90%, no overlap, {g} Gbit/s" for g in GBITS) + " | "
            + " | ".join(f"hidden, {g} Gbit/s" for g in GBITS) + " |",
            "| --- " + "| ---: " * (2 * len(GBITS)) + "|"]
    for model in models:
        f = fits[model.name]
        fixed, per_unit = f.fixed / speedup, f.per_unit / speedup
        comm = [ring_allreduce_seconds(4.0 * f.parameters, RANKS[-1], g) for g in GBITS]
        cells = [units(batch_for(9 * c, per_unit, fixed), model.unit) for c in comm]
        cells += [units(batch_for(c / BACKWARD_SHARE, per_unit, fixed), model.unit)
                  for c in comm]
        out.append(f"| {model.name} | " + " | ".join(cells) + " |")
    return out


def version(vitk):
    try:
        return subprocess.run([vitk, "--version"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"scaling_model.py: cannot run {vitk}: {e}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vitk", default=VITK, help="the vitk binary (default: build/vitk)")
    p.add_argument("--threads", type=int, default=2, help="threads of every measurement")
    p.add_argument("--steps", type=int, default=1, help="timed steps per round")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds (the best is used)")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                   help="a step's time: CPU time / threads with OMP_WAIT_POLICY=passive "
                        "(default; steady on a shared machine) or the wall clock")
    p.add_argument("--speedup", default="1",
                   help="comma-separated factors: tables for ranks this many times as fast "
                        "as this machine (e.g. 1,16)")
    p.add_argument("--quick", action="store_true",
                   help="tiny batches, one step: a smoke test, not a measurement")
    a = p.parse_args()
    if a.quick:
        a.steps, a.repeats = 1, 1
    try:
        speedups = [float(s) for s in a.speedup.split(",")]
    except ValueError:
        sys.exit(f"scaling_model.py: --speedup takes numbers separated by commas, not "
                 f"'{a.speedup}'")
    if not speedups or min(speedups) <= 0:
        sys.exit("scaling_model.py: --speedup must be positive")
    os.chdir(ROOT)  # the configs/ paths are the source tree's
    vitk_version = version(a.vitk)
    load_before = "%.2f %.2f %.2f" % os.getloadavg()
    fits = {}
    for model in MODELS:
        print(f"measuring {model.name} ...", file=sys.stderr, flush=True)
        fits[model.name] = measure(a.vitk, model, a)
    load_after = "%.2f %.2f %.2f" % os.getloadavg()

    command = " ".join(["/usr/bin/python3 tests/bench/scaling_model.py"]
                       + [shlex.quote(x) for x in sys.argv[1:]])
    lines = [
        wrap(f"Measured {datetime.date.today().isoformat()} on {cpu_model()} ({cpu_isa(a.vitk)}),"
             f" {os.cpu_count()} logical CPUs, {a.threads} threads per measurement, "
             f"{vitk_version}; load average (1, 5, 15 min) {load_before} before and "
             f"{load_after} after" + ("; --quick: tiny batches, not a measurement"
                                      if a.quick else "") + "."),
        "",
        f"Made by `{command}`, which ran:",
        "",
    ]
    lines += [f"- `{p.command}`" for m in MODELS for p in fits[m.name].points]
    lines += ["", "Assumptions:", ""]
    lines += [wrap(f"- {x}", "  ") for x in assumptions(a.clock, a.threads, speedups)]
    lines += ["", wrap("Per-rank batches: " + ", ".join(
        f"{m.name} {units(m.per_rank, m.unit)}" for m in MODELS) + "."), ""]
    lines += summary(MODELS, fits)
    for speedup in speedups:
        lines += ["", "### Ranks as fast as this machine" if speedup == 1
                  else f"### Ranks {speedup:g} times as fast as this machine", ""]
        lines += tables(MODELS, fits, speedup)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
