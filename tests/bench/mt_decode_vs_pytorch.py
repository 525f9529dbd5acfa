#!/usr/bin/python3
"""Decoding speed of a vitk translation model in vitk and in PyTorch, same machine, same run.

    /usr/bin/python3 tests/bench/mt_decode_vs_pytorch.py --model runs/mt/avg.h5 \\
        [--input data/bible/test.es --input data/bible/valid.es] [--sentences 500] [--rounds 3]

Both translate the same --sentences lines (the inputs in order, repeated if too few) with the same
weights: vitk with `vitk translate` (greedy, then beam 4 with length penalty 0.6; batches of 32,
cached keys and values), PyTorch with torch.nn.Transformer loaded from the checkpoint
(tests/bench/torch_transformer.py) and the usual greedy loop that runs the decoder over the whole
prefix at every step, in batches of 32 sentences sorted by length, at most source length + 50 new
tokens, as vitk. Times are medians over --rounds rounds and include the tokenization; vitk's
include its start-up and model loading. Also prints how many greedy translations are identical.
Needs python3-torch, python3-h5py and python3-sentencepiece.
"""
import argparse
import os
import statistics
import sys
import time

try:
    import sentencepiece
    import torch
except ImportError as e:
    sys.exit(f"mt_decode_vs_pytorch.py: {e}: apt-get install python3-torch python3-h5py "
             "python3-sentencepiece")
from bench_common import ROOT, VITK, check_blas  # noqa: E402
from torch_transformer import EOS, PAD, load_vitk_checkpoint  # noqa: E402
from vitk_side import read_sentences, translate  # noqa: E402


def torch_greedy(model, sp, sentences, batch, offset):
    """Translations of `sentences`; each at most its source length (with EOS) + `offset` tokens
    and the model's max_length, as vitk's search limits them."""
    ids = [sp.encode(s) + [EOS] for s in sentences]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = [None] * len(ids)
    max_length = model.pe.shape[0]
    for start in range(0, len(order), batch):
        rows = order[start:start + batch]
        width = max(len(ids[i]) for i in rows)
        src = torch.full((len(rows), width), PAD, dtype=torch.long)
        for r, i in enumerate(rows):
            src[r, :len(ids[i])] = torch.tensor(ids[i])
        for r, hyp in zip(rows, model.greedy(src, min(width + offset, max_length - 1))):
            out[r] = sp.decode(hyp[:min(len(ids[r]) + offset, max_length)])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vitk", default=VITK)
    ap.add_argument("--model", required=True, help="a vitk mt-train checkpoint")
    ap.add_argument("--input", action="append",
                    help="source sentences (default: data/bible/test.es and valid.es)")
    ap.add_argument("--sentences", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    check_blas(__file__)
    inputs = args.input or [os.path.join(ROOT, "data", "bible", n)
                            for n in ("test.es", "valid.es")]
    sentences = read_sentences(inputs, args.sentences)
    torch.set_num_threads(args.threads)
    model, spm_bytes = load_vitk_checkpoint(args.model)
    sp = sentencepiece.SentencePieceProcessor(model_proto=spm_bytes)
    n = len(sentences)
    print(f"PyTorch {torch.__version__} vs vitk, {args.threads} threads, {n} sentences from "
          f"{', '.join(inputs)}, model {args.model}, {args.rounds} rounds", flush=True)
    t_greedy, v_greedy, v_beam = [], [], []
    for r in range(args.rounds):
        start = time.perf_counter()
        torch_out = torch_greedy(model, sp, sentences, 32, 50)
        t_greedy.append(time.perf_counter() - start)
        seconds, _, vitk_out, _ = translate(args.vitk, args.model, sentences, args.threads,
                                            ["--greedy"])
        v_greedy.append(seconds)
        seconds, _, _, _ = translate(args.vitk, args.model, sentences, args.threads,
                                     ["--beam-size", "4", "--length-penalty", "0.6"])
        v_beam.append(seconds)
        print(f"round {r + 1}: PyTorch greedy {n / t_greedy[-1]:.1f} sentences/s, vitk greedy "
              f"{n / v_greedy[-1]:.1f}, vitk beam 4 {n / v_beam[-1]:.1f}", flush=True)
    same = sum(a == b for a, b in zip(torch_out, vitk_out))
    t, g, b = (statistics.median(x) for x in (t_greedy, v_greedy, v_beam))
    print(f"median sentences/s: PyTorch greedy loop {n / t:.1f}, vitk greedy {n / g:.1f} "
          f"({t / g:.2f}x PyTorch), vitk beam 4 {n / b:.1f} ({t / b:.2f}x PyTorch greedy)")
    print(f"identical greedy translations: {same}/{n}")


if __name__ == "__main__":
    main()
