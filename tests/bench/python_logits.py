#!/usr/bin/env python3
"""The Python module's speed and size against the command's: `clf.logits` on the 10,000
Fashion-MNIST test images (numpy arrays, in calls of --batch images) against `vitk eval` on the
same IDX files, with the same threads, one after the other in this run; and the resident memory
`import vitk` adds to a bare python3.

    PYTHONPATH=build/python /usr/bin/python3 tests/bench/python_logits.py [--vitk build/vitk]

Both sides compute the same thing: the script checks that its top-1 accuracy is eval's.
"""

import argparse
import gzip
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def read_idx(path):
    """An IDX file (gzip) as a uint8 array of its dimensions."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if data[:2] != b"\0\0" or data[2] != 8:
        sys.exit(f"{path}: not an IDX file of unsigned bytes")
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def python_side(args, images, labels):
    import vitk

    clf = vitk.Classifier(args.model, threads=args.threads, batch_size=args.batch)
    clf.logits(images[:args.batch])  # oneDNN's primitives made, weights packed
    start = time.perf_counter()
    logits = [clf.logits(images[i:i + args.batch]) for i in range(0, len(images), args.batch)]
    seconds = time.perf_counter() - start
    accuracy = float((np.concatenate(logits).argmax(axis=1) == labels).mean())
    return len(images) / seconds, accuracy


def eval_side(args):
    done = subprocess.run([args.vitk, "eval", "--model", str(args.model), "--data", str(args.data),
                           "--threads", str(args.threads), "--batch-size", str(args.eval_batch)],
                          capture_output=True, text=True, check=True)
    speed = re.search(r"^([\d.]+) images/s$", done.stdout, re.M)
    right = re.search(r"^top-1 accuracy: .*\((\d+) of (\d+) images\)$", done.stdout, re.M)
    if not speed or not right:
        sys.exit(f"cannot read images/s and top-1 in vitk eval's output:\n{done.stdout}")
    return float(speed.group(1)), int(right.group(1)) / int(right.group(2))


def median(runs):
    """The run of median speed: (images/s, accuracy)."""
    return sorted(runs)[len(runs) // 2]


def resident_mib(code):
    """VmRSS of a fresh python3 after running code, in MiB."""
    out = subprocess.run([sys.executable, "-c", code + "\nprint(open('/proc/self/status').read())"],
                         capture_output=True, text=True, check=True).stdout
    return int(re.search(r"^VmRSS:\s+(\d+) kB", out, re.M).group(1)) / 1024


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vitk", default=os.environ.get("VITK_BINARY", str(ROOT / "build" / "vitk")))
    p.add_argument("--model", default=ROOT / "vit" / "models" / "fmnist-vit.h5")
    p.add_argument("--data", default=Path("/usr/share/datasets/fashion-mnist"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=256, help="images per logits() call (and the "
                   "Classifier's batch_size)")
    p.add_argument("--rounds", type=int, default=1, help="runs of each side (medians shown)")
    p.add_argument("--eval-batch", type=int, default=None,
                   help="vitk eval's --batch-size (default: --batch)")
    args = p.parse_args()
    args.eval_batch = args.eval_batch or args.batch

    bare = resident_mib("pass")
    imported = resident_mib("import vitk")
    print(f"import vitk: {imported - bare:.1f} MiB resident above a bare python3 "
          f"({imported:.1f} against {bare:.1f} MiB)")

    images = read_idx(args.data / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(args.data / "t10k-labels-idx1-ubyte.gz")
    # Rounds alternate the sides, so that both see the same load; medians reported.
    python_runs, eval_runs = [], []
    for round in range(args.rounds):
        sides = [lambda: python_runs.append(python_side(args, images, labels)),
                 lambda: eval_runs.append(eval_side(args))]
        for side in sides if round % 2 == 0 else reversed(sides):
            side()
    python_speed, python_accuracy = median(python_runs)
    eval_speed, eval_accuracy = median(eval_runs)
    print(f"clf.logits, {len(images)} images in calls of {args.batch}, {args.threads} threads: "
          f"{python_speed:.1f} images/s (top-1 {100 * python_accuracy:.2f}%)")
    print(f"vitk eval, batch {args.eval_batch}, {args.threads} threads: "
          f"{eval_speed:.1f} images/s (top-1 {100 * eval_accuracy:.2f}%)")
    print(f"Python / eval: {python_speed / eval_speed:.2f}")
    if abs(python_accuracy - eval_accuracy) > 1e-4:
        sys.exit("the two sides disagree on the accuracy: they did not compute the same thing")


if __name__ == "__main__":
    main()
