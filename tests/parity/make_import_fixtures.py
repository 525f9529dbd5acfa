#!/usr/bin/python3
"""Writes the fixtures of `vitk import` and of position-embedding resampling (tests/fixtures/import/).

Run with Debian's PyTorch (python3-torch 1.13, python3-torchvision, python3-h5py):

    /usr/bin/python3 tests/parity/make_import_fixtures.py

Files (all small; `--out DIR` writes elsewhere):
  resample.h5                  position embeddings [1, 1 + h*w, d] before and after
                               F.interpolate(mode="bicubic", antialias=False) to another grid
                               (computed in float64 from the float32 input),
                               both align_corners modes, square, rectangular, up and down
                               (group case_NN: attributes src_h, src_w, dst_h, dst_w,
                               align_corners, the same as the i32 dataset grid; datasets input,
                               output).
  resample_bilinear.h5         the same cases with F.interpolate(mode="bilinear"), as the ViT
                               paper's code resamples (scipy's zoom of order 1).
  tiny_torchvision_f32.safetensors   torchvision's own VisionTransformer (image 32, patch 8,
                                     2 layers, 2 heads, width 32, MLP 64, 10 classes) with fixed
                                     random weights, torchvision's names, F32;
  tiny_timm_bf16.safetensors         the same weights in timm's names, rounded to BF16;
  tiny_hf_f16.safetensors            the same weights in Hugging Face's names
                                     (ViTForImageClassification), rounded to F16;
  tiny_vit.h5                  input/x32 [2, 3, 32, 32], input/x48, input/x40x56 and the logits
                               each source library computes from its file:
                               logits/<format>_32, logits/<format>_48 (torchvision: after its own
                               interpolate_embeddings, align_corners=True; timm and hf:
                               F.interpolate with align_corners=False, as timm and Hugging Face
                               resample), logits/timm_40x56 (a rectangular 5x7 grid).
                               The hf logits use LayerNorm eps 1e-12 (Hugging Face's), the others
                               1e-6.

Logits are computed in float64 from the float32 (or rounded BF16/F16) weights, so that the C++
test's 1e-4 tolerance measures vitk, not PyTorch's float32 rounding. The safetensors files are
written by write_safetensors below (the Python safetensors package is not in Debian).
"""
import argparse
import json
import math
import pathlib
import struct

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from torchvision.models.vision_transformer import VisionTransformer, interpolate_embeddings

DEFAULT_OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "import"

IMAGE, PATCH, LAYERS, HEADS, WIDTH, MLP, CLASSES = 32, 8, 2, 2, 32, 64, 10
SEED = 2024


# ---- safetensors ----
_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.float64: "F64"}


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: torch tensor}; written in the given order, header padded with spaces to a
    multiple of 8 bytes as the reference writer does."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        # Raw little-endian bytes; 16-bit types through an int16 view (numpy has no bfloat16).
        raw = (t.view(torch.int16) if t.element_size() == 2 else t).numpy().tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


# ---- torchvision -> timm / Hugging Face names ----
def timm_name(tv):
    fixed = {"class_token": "cls_token", "encoder.pos_embedding": "pos_embed",
             "conv_proj.weight": "patch_embed.proj.weight",
             "conv_proj.bias": "patch_embed.proj.bias", "encoder.ln.weight": "norm.weight",
             "encoder.ln.bias": "norm.bias", "heads.head.weight": "head.weight",
             "heads.head.bias": "head.bias"}
    if tv in fixed:
        return fixed[tv]
    prefix = "encoder.layers.encoder_layer_"
    assert tv.startswith(prefix), tv
    index, rest = tv[len(prefix):].split(".", 1)
    rest = {"ln_1.weight": "norm1.weight", "ln_1.bias": "norm1.bias",
            "ln_2.weight": "norm2.weight", "ln_2.bias": "norm2.bias",
            "self_attention.in_proj_weight": "attn.qkv.weight",
            "self_attention.in_proj_bias": "attn.qkv.bias",
            "self_attention.out_proj.weight": "attn.proj.weight",
            "self_attention.out_proj.bias": "attn.proj.bias",
            "mlp.0.weight": "mlp.fc1.weight", "mlp.0.bias": "mlp.fc1.bias",
            "mlp.3.weight": "mlp.fc2.weight", "mlp.3.bias": "mlp.fc2.bias"}[rest]
    return f"blocks.{index}.{rest}"


def to_timm(state):
    return {timm_name(k): v for k, v in state.items()}


def to_hf(state):
    """ViTForImageClassification's names; in_proj split into query, key, value."""
    out = {}
    for k, v in state.items():
        t = timm_name(k)
        if t.startswith("blocks."):
            _, i, rest = t.split(".", 2)
            p = f"vit.encoder.layer.{i}."
            kind, wb = rest.rsplit(".", 1)
            if kind == "attn.qkv":
                for part, (name) in enumerate(["query", "key", "value"]):
                    n = v.shape[0] // 3
                    out[f"{p}attention.attention.{name}.{wb}"] = v[part * n:(part + 1) * n]
                continue
            new = {"norm1": "layernorm_before", "norm2": "layernorm_after",
                   "attn.proj": "attention.output.dense", "mlp.fc1": "intermediate.dense",
                   "mlp.fc2": "output.dense"}[kind]
            out[f"{p}{new}.{wb}"] = v
        else:
            new = {"cls_token": "vit.embeddings.cls_token",
                   "pos_embed": "vit.embeddings.position_embeddings",
                   "patch_embed.proj.weight": "vit.embeddings.patch_embeddings.projection.weight",
                   "patch_embed.proj.bias": "vit.embeddings.patch_embeddings.projection.bias",
                   "norm.weight": "vit.layernorm.weight", "norm.bias": "vit.layernorm.bias",
                   "head.weight": "classifier.weight", "head.bias": "classifier.bias"}[t]
            out[new] = v
    return out


# ---- the model ----
def make_model(image_size, eps=1e-6):
    return VisionTransformer(image_size=image_size, patch_size=PATCH, num_layers=LAYERS,
                             num_heads=HEADS, hidden_dim=WIDTH, mlp_dim=MLP,
                             num_classes=CLASSES,
                             norm_layer=lambda d: torch.nn.LayerNorm(d, eps=eps))


def randomize(model, generator):
    """Replaces torchvision's initialisation (zero head, unit norms, zero class token) with random
    values of order one, so that nothing vitk ignores can go unnoticed."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or \
                    name == "encoder.ln.weight":
                p.copy_(1.0 + 0.1 * noise)
            elif name in ("class_token", "encoder.pos_embedding"):
                p.copy_(0.5 * noise)
            elif p.dim() == 1:
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / math.sqrt(p[0].numel()))


def forward_any(model, x, pos):
    """torchvision's VisionTransformer.forward for any grid (it asserts a square image of its
    own size): patches, class token, positions `pos`, the blocks, the final norm, the head."""
    n = x.shape[0]
    t = model.conv_proj(x).flatten(2).transpose(1, 2)
    t = torch.cat([model.class_token.expand(n, -1, -1), t], dim=1) + pos
    t = model.encoder.ln(model.encoder.layers(t))
    return model.heads(t[:, 0])


def resample(pos, grid, new_grid, align_corners, mode="bicubic"):
    """timm's resample_abs_pos_embed (antialias off) / torchvision's interpolate_embeddings."""
    cls, rest = pos[:, :1], pos[:, 1:]
    d = pos.shape[2]
    img = rest.reshape(1, grid[0], grid[1], d).permute(0, 3, 1, 2)
    img = F.interpolate(img, size=new_grid, mode=mode, align_corners=align_corners)
    return torch.cat([cls, img.permute(0, 2, 3, 1).reshape(1, -1, d)], dim=1)


def rounded(state, dtype):
    return {k: v.to(dtype) for k, v in state.items()}


def logits(state32, eps, x, pos):
    """float64 logits of the model with these (float32-valued) weights and positions."""
    model = make_model(IMAGE, eps)
    model.load_state_dict(state32)
    model = model.double().train()  # train(): no fast path; dropout is 0
    with torch.no_grad():
        return forward_any(model, x.double(), pos.double()).float()


def tiny_vit(out):
    gen = torch.Generator().manual_seed(SEED)
    model = make_model(IMAGE)
    randomize(model, gen)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x32 = torch.randn(2, 3, 32, 32, generator=gen)
    x48 = torch.randn(2, 3, 48, 48, generator=gen)
    x40x56 = torch.randn(2, 3, 40, 56, generator=gen)
    grid = (IMAGE // PATCH,) * 2

    # torchvision: its forward at 32 and, after interpolate_embeddings, at 48.
    with torch.no_grad():
        ref = model.double().train()(x32.double()).float()
        assert torch.allclose(ref, logits(state, 1e-6, x32, state["encoder.pos_embedding"]),
                              atol=1e-6)
    state48 = interpolate_embeddings(48, PATCH, dict(state))
    model48 = make_model(48)
    model48.load_state_dict(state48)
    with torch.no_grad():
        tv48 = model48.double().train()(x48.double()).float()
    pos48_tv = state48["encoder.pos_embedding"]
    assert torch.allclose(pos48_tv, resample(state["encoder.pos_embedding"], grid, (6, 6), True))
    results = {"torchvision_32": logits(state, 1e-6, x32, state["encoder.pos_embedding"]),
               "torchvision_48": tv48}
    assert torch.allclose(results["torchvision_48"],
                          logits(state, 1e-6, x48, pos48_tv), atol=1e-6)
    write_safetensors(out / "tiny_torchvision_f32.safetensors", state, {"format": "pt"})

    # timm (BF16 file) and Hugging Face (F16 file): the same weights, rounded as stored.
    for fmt, dtype, eps, rename in (("timm", torch.bfloat16, 1e-6, to_timm),
                                    ("hf", torch.float16, 1e-12, to_hf)):
        low = rounded(state, dtype)
        back = {k: v.float() for k, v in low.items()}
        pos = back["encoder.pos_embedding"]
        results[f"{fmt}_32"] = logits(back, eps, x32, pos)
        results[f"{fmt}_48"] = logits(back, eps, x48, resample(pos, grid, (6, 6), False))
        if fmt == "timm":
            results["timm_40x56"] = logits(back, eps, x40x56, resample(pos, grid, (5, 7), False))
        name = {"timm": "tiny_timm_bf16.safetensors", "hf": "tiny_hf_f16.safetensors"}[fmt]
        write_safetensors(out / name, rename(low), {"format": "pt"})

    with h5py.File(out / "tiny_vit.h5", "w", libver="earliest", track_order=False) as f:
        for key, value in {"image_size": IMAGE, "patch_size": PATCH, "layers": LAYERS,
                           "heads": HEADS, "d_model": WIDTH, "d_ff": MLP,
                           "num_classes": CLASSES, "seed": SEED,
                           "torch_version": str(torch.__version__)}.items():
            f.attrs[key] = value
        for name, x in (("x32", x32), ("x48", x48), ("x40x56", x40x56)):
            f.create_dataset(f"input/{name}", data=x.numpy(), track_times=False)
        for name, y in sorted(results.items()):
            f.create_dataset(f"logits/{name}", data=y.numpy(), track_times=False)
    for name, y in sorted(results.items()):
        print(f"logits/{name}: {list(y.shape)}, max |logit| {y.abs().max():.3f}")


# ---- resampling ----
RESAMPLE_CASES = [  # (src_h, src_w, dst_h, dst_w)
    (4, 4, 6, 6),    # up, square
    (6, 6, 4, 4),    # down
    (3, 5, 7, 2),    # rectangular, up in one axis and down in the other
    (14, 14, 24, 24),  # ViT-B/16 at 224 -> 384
    (2, 2, 5, 3),
    (1, 1, 3, 2),    # a single source position
    (5, 4, 1, 1),    # a single target position (align_corners: scale 0)
    (5, 4, 5, 4),    # same size: a copy
]


def resample_fixture(out, mode="bicubic"):
    gen = torch.Generator().manual_seed(SEED + 1)
    d = 5
    name = "resample.h5" if mode == "bicubic" else f"resample_{mode}.h5"
    with h5py.File(out / name, "w", libver="earliest", track_order=False) as f:
        k = 0
        for src_h, src_w, dst_h, dst_w in RESAMPLE_CASES:
            pos = torch.randn(1, 1 + src_h * src_w, d, generator=gen)
            for align in (False, True):
                # The reference in float64 from the float32 input: PyTorch's own float32 result
                # is up to ~3e-6 from it on values of magnitude 3 (kept as an attribute).
                y = resample(pos.double(), (src_h, src_w), (dst_h, dst_w), align, mode)
                y32 = resample(pos, (src_h, src_w), (dst_h, dst_w), align, mode)
                g = f.create_group(f"case_{k:02d}")
                for key, value in (("src_h", src_h), ("src_w", src_w), ("dst_h", dst_h),
                                   ("dst_w", dst_w), ("align_corners", int(align))):
                    g.attrs[key] = value
                # The same numbers as a dataset, for readers of datasets only.
                g.create_dataset("grid", data=np.array([src_h, src_w, dst_h, dst_w, int(align)],
                                                       np.int32), track_times=False)
                g.create_dataset("input", data=pos.numpy(), track_times=False)
                g.attrs["torch_float32_max_abs_error"] = float((y32.double() - y).abs().max())
                g.create_dataset("output", data=y.float().numpy(), track_times=False)
                k += 1
    print(f"{name}: {k} cases")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # reproducible sums
    resample_fixture(args.out)
    resample_fixture(args.out, "bilinear")
    tiny_vit(args.out)
    total = sum(p.stat().st_size for p in args.out.iterdir())
    print(f"{args.out}: {total} bytes")


if __name__ == "__main__":
    main()
