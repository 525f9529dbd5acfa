#!/usr/bin/python3
"""Long sequences: one ViT-B/16-sized pre-norm encoder layer (d 768, 12 heads, MLP 3072, GELU,
batch 1) at 1,024, 2,048 and 4,096 tokens, forward (inference) and forward + backward, in vitk
(blocked "flash" attention, and for contrast the materialized [H, T, T] weights) and in PyTorch
1.13's nn.TransformerEncoderLayer, each case in a process of its own. Prints the median time per
call and the memory each case adds to its process (peak resident set less the peak before the
first call), with ratios.

    /usr/bin/python3 tests/bench/long_attention_vs_pytorch.py [--vitk build/vitk] [--threads 2]
        [--lengths 1024,2048,4096] [--repeats 3]

Needs Debian's python3-torch and OpenBLAS as the system BLAS (see core_vs_pytorch.py).
"""
import argparse
import os
import resource
import statistics
import sys
import time

from bench_common import ROOT, check_blas, run_measured

PASSES = ("forward", "forward+backward")


def torch_case(length, pass_, repeats, threads):
    """Runs in the child: prints 'result seconds setup_kib peak_kib'."""
    import torch
    from torch import nn
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu",
                                       layer_norm_eps=1e-6, batch_first=True, norm_first=True)
    x = torch.randn(1, length, 768)
    dy = torch.randn(1, length, 768)
    training = pass_ == "forward+backward"
    layer.train(training)
    if training:
        x.requires_grad_(True)

    def call():
        if training:
            layer(x).backward(dy)
        else:
            with torch.no_grad():
                layer(x)

    setup = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    call()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("result", statistics.median(seconds), setup, peak)


def parse_result(text, tag, who):
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == tag:
            return [float(w) for w in words[1:]]
    sys.exit(f"long_attention_vs_pytorch.py: {who} printed no result:\n{text}")


def vitk_case(vitk, length, pass_, kernel, repeats, threads):
    out = run_measured([vitk, "bench", "attention-memory", "--child-length", str(length),
                        "--child-pass", pass_, "--child-kernel", kernel, "--repeats",
                        str(repeats), "--threads", str(threads)]).stdout
    seconds, _cpu, _arena, setup, peak = parse_result(out, "attention-memory-result", "vitk")
    return seconds, (peak - setup) / 1024.0


def torch_case_in_child(length, pass_, repeats, threads):
    out = run_measured([sys.executable, os.path.abspath(__file__), "--torch-child", str(length),
                        pass_, "--repeats", str(repeats), "--threads", str(threads)]).stdout
    seconds, setup, peak = parse_result(out, "result", "PyTorch")
    return seconds, (peak - setup) / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vitk", default=os.path.join(ROOT, "build", "vitk"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", default="1024,2048,4096")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per case, after one")
    ap.add_argument("--torch-child", nargs=2, metavar=("T", "PASS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_child:
        torch_case(int(args.torch_child[0]), args.torch_child[1], args.repeats, args.threads)
        return
    blas = check_blas(__file__)
    lengths = [int(t) for t in args.lengths.split(",") if t]
    print(f"one pre-norm encoder layer, d 768, 12 heads, MLP 3072, batch 1, {args.threads} "
          f"threads; median of {args.repeats} calls; PyTorch 1.13 "
          f"({os.path.basename(os.path.dirname(blas))})")
    print("MiB = what the case adds to its process's peak resident set (peak less the peak "
          "before the first call)")
    print(f"{'T':>6}  {'pass':17} {'PyTorch s':>10} {'vitk s':>8} {'speed':>7}   "
          f"{'PyTorch MiB':>11} {'vitk MiB':>9} {'memory':>7}   {'materialized s':>14} "
          f"{'MiB':>7}")
    for length in lengths:
        for pass_ in PASSES:
            ts, tm = torch_case_in_child(length, pass_, args.repeats, args.threads)
            vs, vm = vitk_case(args.vitk, length, pass_, "blocked", args.repeats, args.threads)
            ms, mm = vitk_case(args.vitk, length, pass_, "materialized", args.repeats,
                               args.threads)
            print(f"{length:6d}  {pass_:17} {ts:10.3f} {vs:8.3f} {ts / vs:6.2f}x   {tm:11.1f} "
                  f"{vm:9.1f} {tm / vm:6.2f}x   {ms:14.3f} {mm:7.1f}", flush=True)


if __name__ == "__main__":
    main()
