#!/usr/bin/python3
"""Writes the PyTorch parity fixtures of vitk's Transformer core (tests/fixtures/core/*.h5).

Run with Debian's PyTorch (python3-torch, python3-h5py):

    /usr/bin/python3 tests/parity/make_core_fixtures.py

Each case builds one PyTorch module (nn.MultiheadAttention, nn.TransformerEncoderLayer,
nn.TransformerDecoderLayer, nn.Transformer), draws its parameters and inputs from fixed seeds, runs
it forward in train() mode with dropout 0 (so PyTorch's inference fast path, which turns padded
inputs into nested tensors, is never taken), then backward on the scalar loss L = sum(y * w).
Parameters and inputs are float32 values; the reference outputs and gradients are computed from
them in float64 and stored as float32 (see write_case for why).

One HDF5 file per case holds (tests/parity/README.md has the full list):
  attributes         the configuration (d_model, heads, d_ff, activation, norm_first, causal, ...)
  param/<vitk name>  the parameters, renamed to vitk's names (common/nn/nn.h)
  input/x, input/memory, input/x_lengths, input/memory_lengths, input/loss_weight
  output/y
  grad/x, grad/memory, grad/param/<vitk name>

The loss weight w is zero on padded query rows (t >= x_lengths[b]), so PyTorch's values there never
reach a gradient; the C++ test compares y on valid rows only.
"""
import argparse
import copy
import pathlib

import h5py
import numpy as np
import torch
from torch import nn

D_MODEL, HEADS, D_FF = 16, 4, 32
X_LENGTHS = [5, 3, 4]  # query / target sequences, T = 5
MEMORY_LENGTHS = [7, 2, 6]  # memory / source sequences, T = 7
EPS = 1e-5
# The C++ test's tolerance, used here only to report how close PyTorch's own float32 result is to
# a float64 run of the same case.
RTOL, ATOL = 1e-5, 1e-6

DEFAULT_OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "core"


# ---- masks (PyTorch convention: True = not allowed) ----
def padding_mask(lengths, length):
    """key_padding_mask [B, T]: True on padded positions."""
    return torch.arange(length)[None, :] >= torch.tensor(lengths)[:, None]


def causal_mask(length):
    """attn_mask [T, T]: True above the diagonal, so query i sees keys 0..i."""
    return torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)


# ---- PyTorch -> vitk parameter names ----
# A mapping is {vitk name: (PyTorch parameter name, row slice or None)}.
def attention_names(vitk, torch_prefix, cross, d=D_MODEL):
    m = {}
    if cross:
        m[f"{vitk}.q.weight"] = (f"{torch_prefix}in_proj_weight", slice(0, d))
        m[f"{vitk}.q.bias"] = (f"{torch_prefix}in_proj_bias", slice(0, d))
        m[f"{vitk}.kv.weight"] = (f"{torch_prefix}in_proj_weight", slice(d, 3 * d))
        m[f"{vitk}.kv.bias"] = (f"{torch_prefix}in_proj_bias", slice(d, 3 * d))
    else:
        m[f"{vitk}.qkv.weight"] = (f"{torch_prefix}in_proj_weight", None)
        m[f"{vitk}.qkv.bias"] = (f"{torch_prefix}in_proj_bias", None)
    m[f"{vitk}.proj.weight"] = (f"{torch_prefix}out_proj.weight", None)
    m[f"{vitk}.proj.bias"] = (f"{torch_prefix}out_proj.bias", None)
    return m


def same_names(vitk, torch_name, suffixes=("weight", "bias")):
    return {f"{vitk}.{s}": (f"{torch_name}.{s}", None) for s in suffixes}


def feed_forward_names(vitk, torch_prefix):
    return {**same_names(f"{vitk}.fc1", f"{torch_prefix}linear1"),
            **same_names(f"{vitk}.fc2", f"{torch_prefix}linear2")}


def encoder_layer_names(vitk, torch_prefix):
    return {**attention_names(f"{vitk}.attn", f"{torch_prefix}self_attn.", cross=False),
            **feed_forward_names(f"{vitk}.mlp", torch_prefix),
            **same_names(f"{vitk}.norm1", f"{torch_prefix}norm1"),
            **same_names(f"{vitk}.norm2", f"{torch_prefix}norm2")}


def decoder_layer_names(vitk, torch_prefix, d=D_MODEL):
    return {**attention_names(f"{vitk}.self_attn", f"{torch_prefix}self_attn.", cross=False),
            **attention_names(f"{vitk}.cross_attn", f"{torch_prefix}multihead_attn.", cross=True,
                              d=d),
            **feed_forward_names(f"{vitk}.mlp", torch_prefix),
            **same_names(f"{vitk}.norm1", f"{torch_prefix}norm1"),
            **same_names(f"{vitk}.norm2", f"{torch_prefix}norm2"),
            **same_names(f"{vitk}.norm3", f"{torch_prefix}norm3")}


def transformer_names(encoder_layers, decoder_layers):
    m = {}
    for i in range(encoder_layers):
        m.update(encoder_layer_names(f"encoder.layers.{i}", f"encoder.layers.{i}."))
    m.update(same_names("encoder.norm", "encoder.norm"))
    for i in range(decoder_layers):
        m.update(decoder_layer_names(f"decoder.layers.{i}", f"decoder.layers.{i}."))
    m.update(same_names("decoder.norm", "decoder.norm"))
    return m


def check_mapping(module, mapping):
    """Every PyTorch parameter row is mapped exactly once."""
    params = dict(module.named_parameters())
    covered = {name: np.zeros(p.shape[0], dtype=int) for name, p in params.items()}
    for vitk_name, (torch_name, rows) in mapping.items():
        if torch_name not in params:
            raise KeyError(f"{vitk_name}: PyTorch has no parameter {torch_name}")
        covered[torch_name][rows if rows is not None else slice(None)] += 1
    for name, count in covered.items():
        if not (count == 1).all():
            raise ValueError(f"{name} is not covered exactly once by the vitk names")


# ---- parameters and inputs ----
def randomize(module, generator):
    """Replaces PyTorch's initialisation (zero attention biases, unit norms) with random values,
    so that a bias or norm that vitk ignores cannot go unnoticed."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif p.dim() == 1:
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / p.shape[1] ** 0.5)  # outputs of order 1


def make_inputs(generator, with_memory):
    batch, t = len(X_LENGTHS), max(X_LENGTHS)
    x = torch.randn(batch, t, D_MODEL, generator=generator)
    memory = None
    if with_memory:
        memory = torch.randn(batch, max(MEMORY_LENGTHS), D_MODEL, generator=generator)
    weight = torch.randn(batch, t, D_MODEL, generator=generator)
    weight[padding_mask(X_LENGTHS, t)] = 0.0  # padded query rows do not count
    return x, memory, weight


# ---- running a case ----
def run(module, forward, x, memory, weight, dtype):
    """Forward in train() mode, backward of sum(y * weight), in `dtype`. Returns numpy arrays."""
    module = module.to(dtype).train()
    module.zero_grad(set_to_none=True)
    x = x.detach().to(dtype).clone().requires_grad_()
    if memory is not None:
        memory = memory.detach().to(dtype).clone().requires_grad_()
    y = forward(module, x, memory)
    (y * weight.to(dtype)).sum().backward()
    out = {"y": y.detach(), "grad_x": x.grad}
    if memory is not None:
        out["grad_memory"] = memory.grad
    grads = {name: p.grad for name, p in module.named_parameters()}
    return {k: v.double().numpy() for k, v in out.items()}, \
        {k: v.double().numpy() for k, v in grads.items()}


def errors(got, want):
    """(max |got - want|, max |got - want| / (RTOL |want| + ATOL)); the ratio is <= 1 when the
    C++ test's tolerance is met."""
    if got.size == 0:
        return 0.0, 0.0
    err = np.abs(got - want)
    return float(err.max()), float(np.max(err / (RTOL * np.abs(want) + ATOL)))


def float32_errors(outputs, grads, ref_outputs, ref_grads):
    """PyTorch's float32 errors against the reference, grouped as the C++ test prints vitk's:
    y (valid rows), dx, dmemory, dparams (every parameter gradient)."""
    valid = ~padding_mask(X_LENGTHS, max(X_LENGTHS)).numpy()
    groups = {"y": errors(outputs["y"][valid], ref_outputs["y"][valid]),
              "dx": errors(outputs["grad_x"], ref_outputs["grad_x"])}
    if "grad_memory" in outputs:
        groups["dmemory"] = errors(outputs["grad_memory"], ref_outputs["grad_memory"])
    per_param = [errors(grads[k], ref_grads[k]) for k in grads]
    groups["dparams"] = (max(e[0] for e in per_param), max(e[1] for e in per_param))
    return groups


def write_case(path, attrs, module, mapping, forward, x, memory, weight):
    """Runs the case and writes its file. The reference is computed in float64 from the float32
    parameters and inputs (exact as float64) and rounded to float32 when stored: PyTorch's own
    float32 result differs from it by up to about 1.7x the C++ test's tolerance (the gradients
    sum many terms of order 10), so a float32 reference could fail an implementation that is as
    accurate as PyTorch. That float32 distance is kept in the torch_float32_* attributes."""
    check_mapping(module, mapping)
    outputs, grads = run(copy.deepcopy(module), forward, x, memory, weight, torch.float64)
    f32_outputs, f32_grads = run(copy.deepcopy(module), forward, x, memory, weight, torch.float32)
    torch_errors = float32_errors(f32_outputs, f32_grads, outputs, grads)
    torch_error = max(ratio for _, ratio in torch_errors.values())
    params = {name: p.detach().double().numpy() for name, p in module.named_parameters()}

    def rows(arrays, torch_name, sel):
        a = arrays[torch_name]
        return a[sel] if sel is not None else a

    with h5py.File(path, "w", libver="earliest", track_order=False) as f:
        for key, value in attrs.items():
            f.attrs[key] = value
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["torch_float32_error"] = torch_error
        for group, (max_abs, ratio) in torch_errors.items():
            f.attrs[f"torch_float32_max_abs_{group}"] = max_abs
            f.attrs[f"torch_float32_error_{group}"] = ratio

        def put(name, array, dtype=np.float32):
            f.create_dataset(name, data=np.asarray(array, dtype=dtype), track_times=False)

        put("input/x", x)
        put("input/x_lengths", X_LENGTHS, np.int32)
        if memory is not None:
            put("input/memory", memory)
            put("input/memory_lengths", MEMORY_LENGTHS, np.int32)
        put("input/loss_weight", weight)
        put("output/y", outputs["y"])
        put("grad/x", outputs["grad_x"])
        if memory is not None:
            put("grad/memory", outputs["grad_memory"])
        for vitk_name, (torch_name, sel) in sorted(mapping.items()):
            put(f"param/{vitk_name}", rows(params, torch_name, sel))
            put(f"grad/param/{vitk_name}", rows(grads, torch_name, sel))
    print(f"{path.name}: {len(mapping)} parameters, {path.stat().st_size} bytes, "
          f"PyTorch's float32 result: {torch_error:.3f} of the tolerance")


def base_attrs(kind, prefix, seed, causal, with_memory):
    attrs = {"kind": kind, "prefix": prefix, "seed": seed, "d_model": D_MODEL, "heads": HEADS,
             "batch": len(X_LENGTHS), "x_len": max(X_LENGTHS),
             "x_lengths": np.array(X_LENGTHS, np.int32), "causal": int(causal), "eps": EPS}
    if with_memory:
        attrs["memory_len"] = max(MEMORY_LENGTHS)
        attrs["memory_lengths"] = np.array(MEMORY_LENGTHS, np.int32)
    return attrs


# ---- the cases ----
def attention_case(out, name, seed, causal, cross):
    gen = torch.Generator().manual_seed(seed)
    mha = nn.MultiheadAttention(D_MODEL, HEADS, dropout=0.0, batch_first=True)
    randomize(mha, gen)
    x, memory, weight = make_inputs(gen, with_memory=cross)
    x_pad = padding_mask(X_LENGTHS, x.shape[1])

    def forward(m, q, mem):
        if cross:
            mem_pad = padding_mask(MEMORY_LENGTHS, mem.shape[1])
            return m(q, mem, mem, key_padding_mask=mem_pad, need_weights=False)[0]
        mask = causal_mask(q.shape[1]) if causal else None
        return m(q, q, q, key_padding_mask=x_pad, attn_mask=mask, need_weights=False)[0]

    attrs = base_attrs("mha_cross" if cross else "mha_self", "attn", seed, causal, cross)
    attrs["cross"] = int(cross)
    write_case(out / name, attrs, mha, attention_names("attn", "", cross), forward, x, memory,
               weight)


def layer_attrs(kind, seed, norm_first, activation, causal, with_memory):
    attrs = base_attrs(kind, "layer", seed, causal, with_memory)
    attrs.update({"d_ff": D_FF, "activation": activation, "norm_first": int(norm_first)})
    return attrs


def encoder_layer_case(out, name, seed, norm_first, activation):
    gen = torch.Generator().manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation,
                                       layer_norm_eps=EPS, batch_first=True,
                                       norm_first=norm_first)
    randomize(layer, gen)
    x, _, weight = make_inputs(gen, with_memory=False)

    def forward(m, src, _):
        return m(src, src_key_padding_mask=padding_mask(X_LENGTHS, src.shape[1]))

    attrs = layer_attrs("encoder_layer", seed, norm_first, activation, False, False)
    write_case(out / name, attrs, layer, encoder_layer_names("layer", ""), forward, x, None,
               weight)


def decoder_layer_case(out, name, seed, norm_first, activation):
    gen = torch.Generator().manual_seed(seed)
    layer = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation,
                                       layer_norm_eps=EPS, batch_first=True,
                                       norm_first=norm_first)
    randomize(layer, gen)
    x, memory, weight = make_inputs(gen, with_memory=True)

    def forward(m, tgt, mem):
        return m(tgt, mem, tgt_mask=causal_mask(tgt.shape[1]),
                 tgt_key_padding_mask=padding_mask(X_LENGTHS, tgt.shape[1]),
                 memory_key_padding_mask=padding_mask(MEMORY_LENGTHS, mem.shape[1]))

    attrs = layer_attrs("decoder_layer", seed, norm_first, activation, True, True)
    write_case(out / name, attrs, layer, decoder_layer_names("layer", ""), forward, x, memory,
               weight)


def transformer_case(out, name, seed, layers=2, activation="relu"):
    """nn.Transformer: x is the (embedded) target, memory the (embedded) source."""
    gen = torch.Generator().manual_seed(seed)
    model = nn.Transformer(D_MODEL, HEADS, layers, layers, D_FF, dropout=0.0,
                           activation=activation, layer_norm_eps=EPS, batch_first=True,
                           norm_first=False)
    randomize(model, gen)
    x, memory, weight = make_inputs(gen, with_memory=True)

    def forward(m, tgt, src):
        src_pad = padding_mask(MEMORY_LENGTHS, src.shape[1])
        return m(src, tgt, tgt_mask=causal_mask(tgt.shape[1]), src_key_padding_mask=src_pad,
                 tgt_key_padding_mask=padding_mask(X_LENGTHS, tgt.shape[1]),
                 memory_key_padding_mask=src_pad)

    attrs = layer_attrs("transformer", seed, False, activation, True, True)
    attrs.update({"prefix": "", "encoder_layers": layers, "decoder_layers": layers,
                  "final_norm": 1})
    write_case(out / name, attrs, model, transformer_names(layers, layers), forward, x, memory,
               weight)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # reproducible sums
    torch.use_deterministic_algorithms(True)

    attention_case(args.out, "01_mha_self_padding.h5", 101, causal=False, cross=False)
    attention_case(args.out, "02_mha_self_causal.h5", 102, causal=True, cross=False)
    attention_case(args.out, "03_mha_cross.h5", 103, causal=False, cross=True)
    encoder_layer_case(args.out, "04_encoder_post_relu.h5", 104, False, "relu")
    encoder_layer_case(args.out, "05_encoder_post_gelu.h5", 105, False, "gelu")
    encoder_layer_case(args.out, "06_encoder_pre_relu.h5", 106, True, "relu")
    encoder_layer_case(args.out, "07_encoder_pre_gelu.h5", 107, True, "gelu")
    decoder_layer_case(args.out, "08_decoder_post_relu.h5", 108, False, "relu")
    decoder_layer_case(args.out, "09_decoder_pre_gelu.h5", 109, True, "gelu")
    transformer_case(args.out, "10_transformer.h5", 110)


if __name__ == "__main__":
    main()
