#!/usr/bin/python3
"""Training speed of the issue's ViT recipe in PyTorch and in vitk, same machine, same run.

The recipe: a ViT of width 192, depth 6, 3 heads, MLP 768, patch 4 on 28x28 Fashion-MNIST images,
batch 128, AdamW (lr 1e-3, weight decay 0.05), cross-entropy with label smoothing 0.1.

    /usr/bin/python3 tests/bench/vit_train_vs_pytorch.py [--vitk build/vitk] [--rounds 3]

PyTorch trains on batches already in memory with no augmentation (the cheapest it can do), and
its time per step is the median over --steps steps after --warmup. vitk runs `vitk train` with
its whole pipeline (IDX reading, background loader, the preset's augmentation); its time per
step is (time of a run of W + N steps - time of a run of W steps) / N, which cancels start-up,
data loading and the final checkpoint. Suites alternate so that both see the same machine load.

Needs Debian's python3-torch with OpenBLAS as the system BLAS (apt-get install python3-torch
libopenblas0-openmp) and the dataset-fashion-mnist package.
"""
import argparse
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

try:
    import torch
    from torch import nn
except ImportError:
    sys.exit("vit_train_vs_pytorch.py: needs PyTorch: apt-get install python3-torch")

from bench_common import ROOT, VITK, check_blas, torch_in_child  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
RECIPE = dict(d_model=192, layers=6, heads=3, d_ff=768, patch_size=4)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = ((q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads, d_ff):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, eps=1e-6)
        self.attn = Attention(d, heads)
        self.norm2 = nn.LayerNorm(d, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """timm's VisionTransformer layout (class token, learned positions, pre-norm blocks)."""

    def __init__(self, d_model, layers, heads, d_ff, patch_size, image=28, channels=1, classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(channels, d_model, patch_size, patch_size)
        tokens = (image // patch_size) ** 2 + 1
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, d_model) * 0.02)
        self.blocks = nn.Sequential(*[Block(d_model, heads, d_ff) for _ in range(layers)])
        self.norm = nn.LayerNorm(d_model, eps=1e-6)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def load_idx(name, offset):
    with gzip.open(os.path.join(DATA, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def torch_seconds_per_step(images, labels, batch, steps, warmup):
    torch.manual_seed(0)
    model = ViT(**RECIPE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    x_all = torch.from_numpy(images.reshape(-1, 1, 28, 28).astype(np.float32) / 255.0)
    x_all = (x_all - 0.2860) / 0.3530
    y_all = torch.from_numpy(labels.astype(np.int64))
    times = []
    for step in range(warmup + steps):
        idx = torch.randint(0, x_all.shape[0], (batch,))
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x_all[idx]), y_all[idx])
        loss.backward()
        opt.step()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def vitk_run(vitk, config, threads, steps, batch, out):
    cmd = [vitk, "train", "--config", config, "--data", DATA, "--output", out,
           "--max-steps", str(steps), "--batch-size", str(batch), "--threads", str(threads)]
    for key, value in RECIPE.items():
        cmd += [f"--model.{key}", str(value)]
    cmd += ["--model.stem_channels", "none"]  # the preset's stem is not part of the recipe
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def vitk_seconds_per_step(vitk, config, threads, batch, steps, warmup):
    with tempfile.TemporaryDirectory() as out:
        short = vitk_run(vitk, config, threads, warmup, batch, os.path.join(out, "a"))
        long = vitk_run(vitk, config, threads, warmup + steps, batch, os.path.join(out, "b"))
    return (long - short) / steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vitk", default=VITK)
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "vit-fmnist.ini"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=60, help="timed steps per suite and round")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    check_blas(__file__)
    torch.set_num_threads(args.threads)
    images = load_idx("train-images-idx3-ubyte.gz", 16)
    labels = load_idx("train-labels-idx1-ubyte.gz", 8)
    if args.torch_child:
        print(torch_seconds_per_step(images, labels, args.batch, args.steps,
                                     args.warmup))
        return
    print(f"PyTorch {torch.__version__} vs vitk, {args.threads} threads, ViT d={RECIPE['d_model']} "
          f"depth={RECIPE['layers']} heads={RECIPE['heads']} mlp={RECIPE['d_ff']} "
          f"patch={RECIPE['patch_size']}, batch {args.batch}, {args.rounds} rounds", flush=True)
    torch_times, vitk_times = [], []
    for r in range(args.rounds):
        torch_times.append(torch_in_child(__file__))
        vitk_times.append(vitk_seconds_per_step(args.vitk, args.config, args.threads, args.batch,
                                                args.steps, args.warmup))
        print(f"round {r + 1}: PyTorch {args.batch / torch_times[-1]:7.1f} images/s, "
              f"vitk {args.batch / vitk_times[-1]:7.1f} images/s", flush=True)
    t, v = statistics.median(torch_times), statistics.median(vitk_times)
    print(f"median: PyTorch {args.batch / t:.1f} images/s ({t * 1e3:.0f} ms/step), "
          f"vitk {args.batch / v:.1f} images/s ({v * 1e3:.0f} ms/step), "
          f"vitk/PyTorch = {t / v:.2f}x")


if __name__ == "__main__":
    main()
