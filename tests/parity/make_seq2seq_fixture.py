#!/usr/bin/python3
"""Writes the PyTorch parity fixtures of vitk's translation model (tests/fixtures/seq2seq/*.h5).

Run with Debian's PyTorch (python3-torch, python3-h5py):

    /usr/bin/python3 tests/parity/make_seq2seq_fixture.py

The reference is the model of "Attention Is All You Need" written with PyTorch's own layers:
nn.Embedding scaled by sqrt(d_model) plus the paper's sinusoids, nn.TransformerEncoder and
nn.TransformerDecoder (final LayerNorms only with norm_first, as vitk: a post-norm layer already
ends in one), and a bias-free output layer, tied to the embedding or not. The loss is
F.cross_entropy(ignore_index=0 (pad), label_smoothing=0.1), the mean over the non-pad target
tokens. Parameters are drawn from fixed seeds; the reference outputs and gradients are computed in
float64 from the float32 parameters (as make_core_fixtures.py does) and stored as float32.

One HDF5 file per case holds:
  attributes          the model settings under vitk's config keys (vocab_size, d_model, heads, d_ff,
                      layers, decoder_layers, activation, pre_norm, tied_embeddings, max_length,
                      dropout, attention_dropout), label_smoothing, torch_version
  param/<vitk name>   the parameters under vitk's names (common/seq2seq/model.h)
  input/source, input/source_lengths, input/target_in, input/target_out, input/target_lengths
  output/logits [B, Tt, V], output/loss [1]
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

D_MODEL, HEADS, D_FF = core.D_MODEL, core.HEADS, core.D_FF  # the core maps assume this width
VOCAB = 11
PAD, BOS, EOS = 0, 2, 3
SMOOTHING = 0.1
MAX_LENGTH = 32
SOURCE_LENGTHS = [6, 3, 5]  # with EOS
TARGET_LENGTHS = [4, 5, 2]  # BOS + tokens (target_in) or tokens + EOS (target_out)

DEFAULT_OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "seq2seq"


def sinusoids(length, d):
    """pe[pos, 2i] = sin(pos / 10000^(2i/d)), pe[pos, 2i+1] = cos(...)"""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    freq = torch.pow(10000.0, -torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(length, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe


class Reference(nn.Module):
    def __init__(self, layers, activation, norm_first, tied):
        super().__init__()
        self.tied = tied
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        enc = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation,
                                         batch_first=True, norm_first=norm_first)
        dec = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation,
                                         batch_first=True, norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(enc, layers,
                                             norm=nn.LayerNorm(D_MODEL) if norm_first else None,
                                             enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec, layers,
                                             norm=nn.LayerNorm(D_MODEL) if norm_first else None)
        if not tied:
            self.dec_embed = nn.Embedding(VOCAB, D_MODEL)
            self.out = nn.Linear(D_MODEL, VOCAB, bias=False)

    def forward(self, source, source_lengths, target_in, target_lengths):
        scale = math.sqrt(D_MODEL)
        dtype = self.embed.weight.dtype
        pe = sinusoids(MAX_LENGTH, D_MODEL).to(dtype)
        ts, tt = source.shape[1], target_in.shape[1]
        src_pad = core.padding_mask(source_lengths, ts)
        tgt_pad = core.padding_mask(target_lengths, tt)
        xs = self.embed(source) * scale + pe[:ts]
        memory = self.encoder(xs, src_key_padding_mask=src_pad)
        embed_t = self.embed if self.tied else self.dec_embed
        xt = embed_t(target_in) * scale + pe[:tt]
        h = self.decoder(xt, memory, tgt_mask=core.causal_mask(tt), tgt_key_padding_mask=tgt_pad,
                         memory_key_padding_mask=src_pad)
        w = self.embed.weight if self.tied else self.out.weight
        return h @ w.t()


def names(layers, norm_first, tied):
    m = {}
    for i in range(layers):
        m.update(core.encoder_layer_names(f"encoder.layers.{i}", f"encoder.layers.{i}."))
        m.update(core.decoder_layer_names(f"decoder.layers.{i}", f"decoder.layers.{i}."))
    if norm_first:
        m.update(core.same_names("encoder.norm", "encoder.norm"))
        m.update(core.same_names("decoder.norm", "decoder.norm"))
    if tied:
        m["embed_tokens.weight"] = ("embed.weight", None)
    else:
        m["encoder.embed_tokens.weight"] = ("embed.weight", None)
        m["decoder.embed_tokens.weight"] = ("dec_embed.weight", None)
        m["output_projection.weight"] = ("out.weight", None)
    return m


def make_batch(gen):
    """Random symbols 4..VOCAB-1; the source ends in EOS; padding is 0."""
    b = len(SOURCE_LENGTHS)
    source = torch.zeros(b, max(SOURCE_LENGTHS), dtype=torch.long)
    target_in = torch.zeros(b, max(TARGET_LENGTHS), dtype=torch.long)
    target_out = torch.zeros_like(target_in)
    for i, (ls, lt) in enumerate(zip(SOURCE_LENGTHS, TARGET_LENGTHS)):
        source[i, :ls - 1] = torch.randint(4, VOCAB, (ls - 1,), generator=gen)
        source[i, ls - 1] = EOS
        y = torch.randint(4, VOCAB, (lt - 1,), generator=gen)
        target_in[i, 0] = BOS
        target_in[i, 1:lt] = y
        target_out[i, :lt - 1] = y
        target_out[i, lt - 1] = EOS
    return source, target_in, target_out


def run(model, batch, dtype):
    model = copy.deepcopy(model).to(dtype)
    model.train()  # dropout is 0; train() keeps PyTorch off its inference fast path
    source, target_in, target_out = batch
    logits = model(source, SOURCE_LENGTHS, target_in, TARGET_LENGTHS)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), target_out.reshape(-1), ignore_index=PAD,
                           label_smoothing=SMOOTHING)
    loss.backward()
    grads = {n: p.grad.detach().double().numpy() for n, p in model.named_parameters()}
    return logits.detach().double().numpy(), float(loss), grads


def write_case(path, seed, layers, activation, norm_first, tied):
    gen = torch.Generator().manual_seed(seed)
    model = Reference(layers, activation, norm_first, tied)
    core.randomize(model, gen)
    mapping = names(layers, norm_first, tied)
    core.check_mapping(model, mapping)
    batch = make_batch(gen)
    logits, loss, grads = run(model, batch, torch.float64)
    logits32, loss32, _ = run(model, batch, torch.float32)
    params = {n: p.detach().double().numpy() for n, p in model.named_parameters()}
    config = {"vocab_size": VOCAB, "d_model": D_MODEL, "heads": HEADS, "d_ff": D_FF,
              "layers": layers, "decoder_layers": layers, "activation": activation,
              "pre_norm": "true" if norm_first else "false",
              "tied_embeddings": "true" if tied else "false", "max_length": MAX_LENGTH,
              "dropout": 0, "attention_dropout": 0}
    with h5py.File(path, "w", libver="earliest", track_order=False) as f:
        for key, value in config.items():
            f.attrs[key] = str(value)
        f.attrs["label_smoothing"] = SMOOTHING
        f.attrs["torch_version"] = str(torch.__version__)

        def put(name, array, dtype=np.float32):
            f.create_dataset(name, data=np.asarray(array, dtype=dtype), track_times=False)

        source, target_in, target_out = batch
        put("input/source", source.numpy(), np.int32)
        put("input/source_lengths", SOURCE_LENGTHS, np.int32)
        put("input/target_in", target_in.numpy(), np.int32)
        put("input/target_out", target_out.numpy(), np.int32)
        put("input/target_lengths", TARGET_LENGTHS, np.int32)
        put("output/logits", logits)
        put("output/loss", [loss])
        for vitk_name, (torch_name, rows) in sorted(mapping.items()):
            sel = rows if rows is not None else slice(None)
            put(f"param/{vitk_name}", params[torch_name][sel])
            put(f"grad/param/{vitk_name}", grads[torch_name][sel])
    print(f"{path.name}: {len(mapping)} parameters, {path.stat().st_size} bytes, loss {loss:.6f} "
          f"(PyTorch float32: {loss32:.6f}, max logit difference "
          f"{np.abs(logits32 - logits).max():.2e})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # reproducible sums
    torch.use_deterministic_algorithms(True)
    write_case(args.out / "01_post_relu_tied.h5", 201, 2, "relu", False, True)
    write_case(args.out / "02_pre_gelu_untied.h5", 202, 2, "gelu", True, False)


if __name__ == "__main__":
    main()
