#!/usr/bin/python3
"""Training speed of the small translation Transformer in PyTorch and in vitk, same machine, same run.

The size of issue 7's comparison and of configs/transformer-small.ini: d_model 256, 3 + 3 post-norm
layers, 4 heads, FFN 1024 (ReLU), dropout 0.1, one 8,000-token vocabulary whose embedding is also
the output layer, label smoothing 0.1, Adam (0.9, 0.98, eps 1e-9); batches of 128 sentences of 32
source and 32 target tokens (4,096 target tokens per step).

    /usr/bin/python3 tests/bench/mt_train_vs_pytorch.py [--vitk build/vitk] [--rounds 3]

PyTorch: torch.nn.Transformer (batch_first) between a scaled embedding + sinusoids and the tied
output layer (tests/bench/torch_transformer.py), with the causal mask and padding masks, on random
ids in memory; its time per step is
the median over --steps steps after --warmup. vitk: `vitk bench mt-step` (the same step on random
ids: forward, loss, backward, Adam), its median round. Suites alternate so that both see the same
machine load. Prints target tokens/s and the ratio.
"""
import argparse
import statistics
import sys
import time

try:
    import torch
    from torch import nn
except ImportError:
    sys.exit("mt_train_vs_pytorch.py: needs PyTorch: apt-get install python3-torch")
from bench_common import VITK, check_blas, torch_in_child  # noqa: E402
from torch_transformer import TorchTransformer  # noqa: E402
from vitk_side import step_bench  # noqa: E402

SIZE = dict(d_model=256, heads=4, d_ff=1024, layers=3, decoder_layers=3, dropout=0.1)
VOCAB = 8000


def torch_seconds_per_step(batch, length, steps, warmup):
    torch.manual_seed(0)
    model = TorchTransformer(VOCAB, **SIZE)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=0)
    vocab = VOCAB
    times = []
    for step in range(warmup + steps):
        src = torch.randint(4, vocab, (batch, length))
        tgt_in = torch.randint(4, vocab, (batch, length))
        tgt_out = torch.randint(4, vocab, (batch, length))
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(src, tgt_in)
        loss = loss_fn(logits.reshape(-1, vocab), tgt_out.reshape(-1))
        loss.backward()
        opt.step()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vitk", default=VITK)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--length", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per suite and round")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    check_blas(__file__)
    torch.set_num_threads(args.threads)
    tokens = args.batch * args.length
    if args.torch_child:
        print(torch_seconds_per_step(args.batch, args.length, args.steps, args.warmup))
        return
    print(f"PyTorch {torch.__version__} vs vitk, {args.threads} threads, Transformer "
          f"d={SIZE['d_model']} {SIZE['layers']}+{SIZE['layers']} layers heads={SIZE['heads']} "
          f"ffn={SIZE['d_ff']} vocabulary={VOCAB} (tied), batch {args.batch}x"
          f"{args.length}, {args.rounds} rounds", flush=True)
    torch_times, vitk_times = [], []
    for r in range(args.rounds):
        torch_times.append(torch_in_child(__file__))
        vitk_times.append(step_bench(args.vitk, "mt-step", args.threads, args.batch, args.steps,
                                     length=args.length)[0])
        print(f"round {r + 1}: PyTorch {tokens / torch_times[-1]:7.0f} target tokens/s, "
              f"vitk {tokens / vitk_times[-1]:7.0f} target tokens/s", flush=True)
    t, v = statistics.median(torch_times), statistics.median(vitk_times)
    print(f"median: PyTorch {tokens / t:.0f} target tokens/s ({t * 1e3:.0f} ms/step), "
          f"vitk {tokens / v:.0f} target tokens/s ({v * 1e3:.0f} ms/step), "
          f"vitk/PyTorch = {t / v:.2f}x")


if __name__ == "__main__":
    main()
