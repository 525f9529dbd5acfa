#!/usr/bin/python3
"""One encoder layer at ViT-B/16 size and one decoder layer at Transformer-base size, timed in
PyTorch and in vitk on the same machine in the same run, alternating suites so that both see the
same load. Prints medians and the speed-up of vitk over PyTorch.

    /usr/bin/python3 tests/bench/core_vs_pytorch.py [--vitk build/vitk] [--threads 2] [--rounds 3]

Needs Debian's python3-torch and OpenBLAS as the system BLAS:
    apt-get install python3-torch libopenblas0-openmp
Debian's PyTorch calls whatever libblas.so.3 the alternatives system points at; with only the
reference BLAS installed it multiplies matrices at about 3 GFLOP/s here, which is no baseline.
vitk itself needs neither.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

try:
    import torch
    from torch import nn
except ImportError:
    sys.exit("core_vs_pytorch.py: needs PyTorch: apt-get install python3-torch")
from bench_common import check_blas  # noqa: E402


def seconds_per_call(fn, min_seconds, repeats):
    fn()
    rounds = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        rounds.append(elapsed / n)
    return statistics.median(rounds)


def torch_suite(min_seconds, repeats):
    torch.manual_seed(0)
    rows = {}
    enc = nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu",
                                     layer_norm_eps=1e-6, batch_first=True, norm_first=True)
    x = torch.randn(8, 197, 768)
    dy = torch.randn(8, 197, 768)
    enc.eval()

    def enc_forward():
        with torch.no_grad():
            enc(x)

    rows[("vit-b16-encoder", "forward")] = seconds_per_call(enc_forward, min_seconds, repeats)
    enc.train()
    xg = x.clone().requires_grad_(True)

    def enc_train():
        enc(xg).backward(dy)

    rows[("vit-b16-encoder", "forward+backward")] = seconds_per_call(enc_train, min_seconds,
                                                                      repeats)
    dec = nn.TransformerDecoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
    t = torch.randn(32, 32, 512)
    mem = torch.randn(32, 32, 512)
    dy = torch.randn(32, 32, 512)
    causal = torch.triu(torch.full((32, 32), float("-inf")), diagonal=1)
    dec.eval()

    def dec_forward():
        with torch.no_grad():
            dec(t, mem, tgt_mask=causal)

    rows[("transformer-base-decoder", "forward")] = seconds_per_call(dec_forward, min_seconds,
                                                                      repeats)
    dec.train()
    tg = t.clone().requires_grad_(True)
    mg = mem.clone().requires_grad_(True)

    def dec_train():
        dec(tg, mg, tgt_mask=causal).backward(dy)

    rows[("transformer-base-decoder", "forward+backward")] = seconds_per_call(
        dec_train, min_seconds, repeats)
    return rows


def vitk_suite(vitk, threads, min_seconds, repeats):
    out = subprocess.run([vitk, "bench", "layers", "--threads", str(threads), "--repeats",
                          str(repeats), "--min-time", str(min_seconds)],
                         check=True, capture_output=True, text=True).stdout
    rows, shapes = {}, {}
    for line in out.splitlines():
        layer, pass_, shape, seconds = line.split("\t")
        rows[(layer, pass_)] = float(seconds)
        shapes[layer] = shape
    return rows, shapes


def main():
    blas = check_blas(__file__)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vitk", default="build/vitk")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="alternating suites of each")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch_runs, vitk_runs, shapes = [], [], {}
    for _ in range(args.rounds):
        torch_runs.append(torch_suite(args.min_time, args.repeats))
        rows, shapes = vitk_suite(args.vitk, args.threads, args.min_time, args.repeats)
        vitk_runs.append(rows)
    print(f"PyTorch {torch.__version__} ({os.path.basename(os.path.dirname(blas))}) vs vitk, "
          f"{args.threads} threads, medians of {args.rounds} alternating rounds x {args.repeats} "
          "repeats")
    print(f"{'layer':26} {'pass':17} {'PyTorch ms':>11} {'vitk ms':>9} {'speed-up':>9}  shape")
    for key in torch_runs[0]:
        t = statistics.median(r[key] for r in torch_runs) * 1e3
        v = statistics.median(r[key] for r in vitk_runs) * 1e3
        print(f"{key[0]:26} {key[1]:17} {t:11.2f} {v:9.2f} {t / v:8.2f}x  {shapes.get(key[0], '')}")


if __name__ == "__main__":
    main()
