#!/usr/bin/python3
"""Data-parallel training on two hosts over TCP, measured against the scaling model: two network
namespaces of this machine (tools/netns_cluster.sh), one rank of one thread each, the link shaped
to a rate and a one-way delay. Root. Prints Markdown for common/dist/hosts.md.

    /usr/bin/python3 tests/bench/hosts.py [--only vit,mt] [--rates 10000,1000,100] [--delays 0,1]
                                          [--steps N] [--vitk build/vitk]

For each model (the Fashion-MNIST ViT, configs/vit-fmnist.ini, batch 128; transformer-small,
configs/transformer-small.ini, --max-tokens 4096 on a generated corpus) and each link, two runs
of --max-steps STEPS with --profile:
  one bucket  --bucket-mb 4096: the whole gradient in one all-reduce, started when backward ends,
              so none of it is hidden: its `all-reduce wait` is the all-reduce's own time;
  buckets     --bucket-mb 1: a bucket starts as soon as backward is done with its layers, so
              part of the all-reduce runs under the rest of backward.
Figures are per step, from rank 0's --profile (its first step left out): the step's time and
its `all-reduce wait`; --max-steps 12 of the ViT, 30 of the translation model. A wait also holds
the ranks waiting for each other, so the fastest link (the first rate, 10 Gbit/s, no delay) is
the baseline, and each slower link is compared with it:
  extra wait  = one bucket's wait - the baseline's: what the slower link added (measured);
  model       = what the scaling model adds for the same bytes and links
                (scaling_model.allreduce_seconds: bandwidth, TCP's share of the wire, latency);
  step        = measured, and as the model puts it: the baseline's step + the model's extra;
  hidden      = 1 - (1 MB buckets' extra wait) / (one bucket's extra wait): the share of the
                added all-reduce time that backward covered.
--from-log FILE prints the table again from the standard error of an earlier run.
Standard library only.
"""
import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import ROOT, VITK  # noqa: E402
from data_parallel import corpus  # noqa: E402
import scaling_model  # noqa: E402

CLUSTER = os.path.join(ROOT, "tools", "netns_cluster.sh")
RSH = os.path.join(ROOT, "tools", "netns_rsh.sh")
FMNIST = "/usr/share/datasets/fashion-mnist"
PREFIX = "vitkbench"
ONE_BUCKET_MB, SMALL_BUCKET_MB = 4096, 1


def cluster(*args, check=True):
    p = subprocess.run(["bash", CLUSTER] + list(args), capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit("netns_cluster.sh %s: %s%s" % (" ".join(args), p.stdout, p.stderr))
    return p


def run(vitk, hostfile, args, workdir, bucket_mb):
    """One training run on the two hosts; returns (seconds per step, wait seconds per step,
    parameters)."""
    out = os.path.join(workdir, "out")
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["bash", CLUSTER, "exec", PREFIX + "1", "/usr/bin/env", "OMP_NUM_THREADS=1", "mpirun",
           "--allow-run-as-root", "--hostfile", hostfile, "-np", "2",
           "--mca", "plm_rsh_agent", RSH, "--mca", "btl", "tcp,self",
           "--mca", "btl_tcp_if_include", "192.0.2.0/24",
           "--mca", "oob_tcp_if_include", "192.0.2.0/24", "-x", "OMP_NUM_THREADS",
           vitk] + args + ["--output", out, "--threads", "1", "--profile",
                           "--bucket-mb", str(bucket_mb)]
    p = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    # Progress lines end in carriage returns and erase-line codes; the figures are after them.
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", p.stdout.replace("\r", "\n"))
    if p.returncode != 0:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), text[-3000:], p.stderr[-3000:]))
    params = re.search(r"^parameters: ([0-9,]+)|; ([0-9]+) parameters$", text, re.M)
    total = re.search(r"^breakdown \(--profile.*total ([0-9.]+) ms", text, re.M)
    wait = re.search(r"^\s*([0-9.]+) ms\s+[0-9.]+%\s+x\d+\s+all-reduce wait", text, re.M)
    if not (params and total and wait):
        sys.exit("no figures in the output of %s:\n%s" % (" ".join(cmd), text[-3000:]))
    count = int((params.group(1) or params.group(2)).replace(",", ""))
    return float(total.group(1)) / 1e3, float(wait.group(1)) / 1e3, count


def measure(a, models, work):
    """Runs every model on every link; returns {(model, rate, delay, bucket_mb): (step, wait,
    parameters)} and logs each run on standard error."""
    links = [(int(r), float(d)) for d in a.delays.split(",") for r in a.rates.split(",")]
    figures = {}
    cluster("down", "--prefix", PREFIX)
    try:
        for rate, delay in links:
            shaping = ["--rate", str(rate)] + (["--delay", str(delay)] if delay else [])
            hostfile = cluster("up", "2", "--prefix", PREFIX, "--dir", work,
                               *shaping).stdout.strip().splitlines()[-1]
            for name, args in models.items():
                for bucket in (ONE_BUCKET_MB, SMALL_BUCKET_MB):
                    f = run(a.vitk, hostfile, args, work, bucket)
                    figures[(name, rate, delay, bucket)] = f
                    print(LOG_LINE % (name, rate, delay, bucket, f[0], f[1], f[2]),
                          file=sys.stderr, flush=True)
            cluster("down", "--prefix", PREFIX)
    finally:
        cluster("down", "--prefix", PREFIX, check=False)
    return figures


LOG_LINE = "%s rate %d delay %g bucket %d MB: step %.4f s, wait %.4f s, parameters %d"
LOG_RE = re.compile(r"^(\w+) rate (\d+) delay ([0-9.]+) bucket (\d+) MB: step ([0-9.]+) s, "
                    r"wait ([0-9.]+) s, parameters (\d+)$")


def read_log(path):
    figures = {}
    for line in open(path):
        m = LOG_RE.match(line.strip())
        if m:
            figures[(m.group(1), int(m.group(2)), float(m.group(3)), int(m.group(4)))] = (
                float(m.group(5)), float(m.group(6)), int(m.group(7)))
    return figures


def table(figures):
    """Markdown rows: each link against the baseline (the fastest link without delay)."""
    names = sorted({k[0] for k in figures}, key=lambda n: ["vit", "mt"].index(n))
    links = sorted({(k[1], k[2]) for k in figures}, key=lambda l: (l[1], -l[0]))
    base_rate, base_delay = links[0]
    rows = ["| model | link | step, one bucket | model | model / measured | extra wait | model "
            "| step, 1 MB buckets | hidden |", "| --- | --- | ---: | ---: | ---: | ---: | ---: "
            "| ---: | ---: |"]
    for name in names:
        base_one = figures[(name, base_rate, base_delay, ONE_BUCKET_MB)]
        base_small = figures[(name, base_rate, base_delay, SMALL_BUCKET_MB)]
        nbytes = 4 * base_one[2]
        base_model = scaling_model.allreduce_seconds(nbytes, 2, base_rate / 1000.0, base_delay / 1e3)
        for rate, delay in links:
            one = figures[(name, rate, delay, ONE_BUCKET_MB)]
            small = figures[(name, rate, delay, SMALL_BUCKET_MB)]
            link = "%g Gbit/s" % (rate / 1000.0) + (", %g ms" % delay if delay else "")
            label = "%s (%.1f MB of gradients)" % (name, nbytes / 1e6) if (rate, delay) == links[0] \
                else name
            if (rate, delay) == (base_rate, base_delay):
                rows.append("| %s | %s (baseline) | %.0f ms | | | wait %.0f ms | | %.0f ms | |" % (
                    label, link, one[0] * 1e3, one[1] * 1e3, small[0] * 1e3))
                continue
            extra = one[1] - base_one[1]
            model_extra = scaling_model.allreduce_seconds(
                nbytes, 2, rate / 1000.0, delay / 1e3) - base_model
            model_step = base_one[0] + model_extra
            small_extra = small[1] - base_small[1]
            hidden = "%.0f%%" % (100 * (1 - small_extra / extra)) if extra > 0.02 else "-"
            rows.append("| %s | %s | %.0f ms | %.0f ms | %.2f | %.0f ms | %.0f ms | %.0f ms | %s |" % (
                label, link, one[0] * 1e3, model_step * 1e3, model_step / one[0], extra * 1e3,
                model_extra * 1e3, small[0] * 1e3, hidden))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vitk", default=VITK)
    ap.add_argument("--steps", type=int, default=0,
                    help="steps a run (default: 12 of the ViT, 30 of the translation model, "
                         "whose first steps make oneDNN primitives for new shapes on each rank)")
    ap.add_argument("--only", default="vit,mt")
    ap.add_argument("--rates", default="10000,1000,100", help="Mbit/s, the fastest first")
    ap.add_argument("--delays", default="0,1", help="one-way milliseconds, 0 first")
    ap.add_argument("--from-log", help="print the table from this earlier run's standard error")
    a = ap.parse_args()
    if a.from_log:
        figures = read_log(a.from_log)
    else:
        check = cluster("check", "--rate", "100", "--delay", "1", check=False)
        if check.returncode != 0:
            sys.exit("hosts.py: " + (check.stdout + check.stderr).strip())
        work = tempfile.mkdtemp(prefix="vitk-hosts-")
        models = {}
        if "vit" in a.only:
            if not os.path.isdir(FMNIST):
                sys.exit(FMNIST + " is missing: apt-get install dataset-fashion-mnist")
            models["vit"] = ["train", "--config", os.path.join(ROOT, "configs/vit-fmnist.ini"),
                             "--batch-size", "128", "--max-steps", str(a.steps or 12)]
        if "mt" in a.only:
            tsv, valid = os.path.join(work, "corpus.tsv"), os.path.join(work, "valid.tsv")
            corpus(tsv)
            corpus(valid, pairs=32, seed=2)
            models["mt"] = ["mt-train", "--config",
                            os.path.join(ROOT, "configs/transformer-small.ini"), "--train", tsv,
                            "--valid", valid, "--max-steps", str(a.steps or 30), "--valid-freq",
                            "1000000", "--vocab-size", "2000", "--max-tokens", "4096"]
        try:
            figures = measure(a, models, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print("%s, %s, %d cores; 2 hosts x 1 rank x 1 thread; %s" % (
        datetime.date.today().isoformat(), cpu, os.cpu_count(), " ".join(sys.argv[1:])))
    print()
    print("\n".join(table(figures)))


if __name__ == "__main__":
    main()
