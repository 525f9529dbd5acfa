#!/usr/bin/python3
"""Writes the PyTorch parity fixtures of vitk's text classifier (tests/fixtures/text/*.h5).

Run with Debian's PyTorch (python3-torch, python3-h5py):

    /usr/bin/python3 tests/parity/make_text_classifier_fixture.py

The reference is common/seq2seq/text_model.h written with PyTorch's own layers: nn.Embedding
scaled by sqrt(d_model) plus the sinusoids of make_seq2seq_fixture.py, nn.TransformerEncoder
(post-norm, or norm_first with a final LayerNorm) with src_key_padding_mask, then the mean over
each sentence's positions (pool "mean") or the output row of a learned class token (pool "cls":
cls_token + pe[0] prepended, the tokens then at positions 1..T), and an nn.Linear head. The loss
is F.cross_entropy(label_smoothing=0.1), the mean over the sentences. Parameters are drawn from
fixed seeds; the reference outputs and gradients are computed in float64 from the float32
parameters (as make_core_fixtures.py does) and stored as float32.

One HDF5 file per case holds:
  attributes          the model settings under vitk's config keys (vocab_size, num_classes,
                      d_model, heads, d_ff, layers, activation, pool, pre_norm, max_length, dropout,
                      attention_dropout), label_smoothing, torch_version,
                      torch_float32_max_abs_logits (PyTorch's own float32 logits against these)
  param/<vitk name>   the parameters under vitk's names (common/seq2seq/text_model.h)
  input/ids [B, T], input/lengths [B], input/labels [B] (int32)
  output/logits [B, C], output/loss [1]
  grad/param/<vitk name>
"""
import argparse
import copy
import math
import pathlib
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_core_fixtures as core  # noqa: E402  (the layer name maps and the randomisation)
from make_seq2seq_fixture import sinusoids  # noqa: E402

D_MODEL, HEADS, D_FF = core.D_MODEL, core.HEADS, core.D_FF  # the core maps assume this width
VOCAB = 12
CLASSES = 4
PAD, EOS = 0, 3
SMOOTHING = 0.1
MAX_LENGTH = 16
LENGTHS = [6, 3, 5]  # with EOS
LABELS = [2, 0, 3]

DEFAULT_OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "text"


class Reference(nn.Module):
    def __init__(self, layers, activation, norm_first, pool):
        super().__init__()
        self.pool = pool
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        if pool == "cls":
            self.cls_token = nn.Parameter(torch.zeros(1, 1, D_MODEL))
        enc = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation,
                                         batch_first=True, norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(enc, layers,
                                             norm=nn.LayerNorm(D_MODEL) if norm_first else None,
                                             enable_nested_tensor=False)
        self.head = nn.Linear(D_MODEL, CLASSES)

    def forward(self, ids, lengths):
        dtype = self.embed.weight.dtype
        pe = sinusoids(MAX_LENGTH, D_MODEL).to(dtype)
        b, t = ids.shape
        first = 1 if self.pool == "cls" else 0
        x = self.embed(ids) * math.sqrt(D_MODEL) + pe[first:first + t]
        key_lengths = list(lengths)
        if self.pool == "cls":
            x = torch.cat([(self.cls_token + pe[0]).expand(b, 1, D_MODEL), x], dim=1)
            key_lengths = [n + 1 for n in lengths]
        h = self.encoder(x, src_key_padding_mask=core.padding_mask(key_lengths, x.shape[1]))
        if self.pool == "cls":
            pooled = h[:, 0]
        else:
            valid = (~core.padding_mask(lengths, t)).to(dtype)[:, :, None]  # [B, T, 1]
            pooled = (h * valid).sum(1) / valid.sum(1)
        return self.head(pooled)


def names(layers, norm_first, pool):
    m = {}
    for i in range(layers):
        m.update(core.encoder_layer_names(f"encoder.layers.{i}", f"encoder.layers.{i}."))
    if norm_first:
        m.update(core.same_names("encoder.norm", "encoder.norm"))
    m["encoder.embed_tokens.weight"] = ("embed.weight", None)
    if pool == "cls":
        m["cls_token"] = ("cls_token", None)
    m.update(core.same_names("head", "head"))
    return m


def make_ids(gen):
    """Random symbols 4..VOCAB-1, then EOS; padding is 0."""
    ids = torch.zeros(len(LENGTHS), max(LENGTHS), dtype=torch.long)
    for i, n in enumerate(LENGTHS):
        ids[i, :n - 1] = torch.randint(4, VOCAB, (n - 1,), generator=gen)
        ids[i, n - 1] = EOS
    return ids


def run(model, ids, dtype):
    model = copy.deepcopy(model).to(dtype)
    model.train()  # dropout is 0; train() keeps PyTorch off its inference fast path
    logits = model(ids, LENGTHS)
    loss = F.cross_entropy(logits, torch.tensor(LABELS), label_smoothing=SMOOTHING)
    loss.backward()
    grads = {n: p.grad.detach().double().numpy() for n, p in model.named_parameters()}
    return logits.detach().double().numpy(), float(loss), grads


def write_case(path, seed, layers, activation, norm_first, pool):
    gen = torch.Generator().manual_seed(seed)
    model = Reference(layers, activation, norm_first, pool)
    core.randomize(model, gen)
    mapping = names(layers, norm_first, pool)
    core.check_mapping(model, mapping)
    ids = make_ids(gen)
    logits, loss, grads = run(model, ids, torch.float64)
    logits32, loss32, _ = run(model, ids, torch.float32)
    params = {n: p.detach().double().numpy() for n, p in model.named_parameters()}
    config = {"vocab_size": VOCAB, "num_classes": CLASSES, "d_model": D_MODEL, "heads": HEADS,
              "d_ff": D_FF, "layers": layers, "activation": activation, "pool": pool,
              "pre_norm": "true" if norm_first else "false", "max_length": MAX_LENGTH,
              "dropout": 0, "attention_dropout": 0}
    float32_error = float(np.abs(logits32 - logits).max())
    with h5py.File(path, "w", libver="earliest", track_order=False) as f:
        for key, value in config.items():
            f.attrs[key] = str(value)
        f.attrs["label_smoothing"] = SMOOTHING
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["torch_float32_max_abs_logits"] = float32_error

        def put(name, array, dtype=np.float32):
            f.create_dataset(name, data=np.asarray(array, dtype=dtype), track_times=False)

        put("input/ids", ids.numpy(), np.int32)
        put("input/lengths", LENGTHS, np.int32)
        put("input/labels", LABELS, np.int32)
        put("output/logits", logits)
        put("output/loss", [loss])
        for vitk_name, (torch_name, rows) in sorted(mapping.items()):
            sel = rows if rows is not None else slice(None)
            put(f"param/{vitk_name}", params[torch_name][sel])
            put(f"grad/param/{vitk_name}", grads[torch_name][sel])
    print(f"{path.name}: {len(mapping)} parameters, {path.stat().st_size} bytes, loss {loss:.6f} "
          f"(PyTorch float32: {loss32:.6f}, max logit difference {float32_error:.2e})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # reproducible sums
    torch.use_deterministic_algorithms(True)
    write_case(args.out / "01_post_relu_mean.h5", 301, 2, "relu", False, "mean")
    write_case(args.out / "02_pre_gelu_cls.h5", 302, 2, "gelu", True, "cls")


if __name__ == "__main__":
    main()
