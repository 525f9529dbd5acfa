#!/usr/bin/python3
"""Writes the PyTorch parity fixtures of vitk's Vision Transformer (tests/fixtures/vit/*.h5).

Run with Debian's PyTorch (python3-torch, python3-h5py):

    /usr/bin/python3 tests/parity/make_vit_fixtures.py

timm is not a dependency: the model below is a small re-implementation of timm's
VisionTransformer (timm/models/vision_transformer.py) with its parameter names and its
computation: PatchEmbed (a P x P stride-P Conv2d, flattened to tokens), a class token prepended,
learned positions added, pre-norm Blocks (norm1, attn with a fused qkv and proj, norm2, mlp with
fc1, exact GELU, fc2; LayerNorm eps 1e-6), then either the final norm and the class token
(global_pool="token") or the mean of the patch tokens and fc_norm (global_pool="avg"), and the
head. The cases with "stem_channels" add vitk's convolutional stem in front of the patch
projection (not a timm model; vit/vit.h): per stage a 3x3 Conv2d with padding 1 and stride 2 (or
the stage's entry in "stem_strides"), a LayerNorm over the channels and GELU, as an
nn.Sequential under patch_embed.stem. Dropout and
stochastic depth are 0, as in timm's eval, so the run is deterministic. The cases with
"patch_drop" keep, as timm's PatchDropout does in training, the patch tokens of a draw made here
(the first max(1, int(N * (1 - patch_drop))) of an argsort of random keys per image) after the
positions are added, with the class token in front; the draw is stored so that vitk replays it.
The cases with "pos_conv_blocks" add vitk's positional convolution (CPVT's PEG; vit/vit.h) after
those blocks: the patch tokens as their grid, plus a depthwise 3x3 Conv2d (padding 1, with bias)
of themselves, under pos_conv.<block>; the class token passes unchanged. The cases with
"diag_mask" hide every token's own key from its query (LSA's diagonal masking: the score is set
to -inf before the softmax), in every block. The cases with "ffn_conv_blocks" give those blocks'
MLPs vitk's MLP convolution (vit/vit.h): fc1's output, its patch rows as their grid, plus a
depthwise 3x3 Conv2d (padding 1, with bias) of itself, under mlp.dwconv, before GELU; the class
token's row passes unchanged.

Each case draws random parameters and images from a fixed seed, computes the logits, the mean
cross-entropy against random targets and its gradients w.r.t. the images and every parameter.
Parameters and images are float32 values; the reference is computed from them in float64 and
stored as float32 (as make_core_fixtures.py does; the torch_float32_* attributes record how far
PyTorch's own float32 run is from it).

One HDF5 file per case holds:
  attributes           the configuration (image_height, image_width, patch_size, channels,
                       num_classes, d_model, heads, d_ff, layers, pool, norm_eps and, with a
                       stem, stem_channels as "c1,c2" and maybe stem_strides as "1,2";
                       pos_conv_blocks and ffn_conv_blocks as "0,1"; diag_mask as 1),
                       batch, seed,
                       torch_version, torch_float32_{max_abs,error}_{logits,dimages,dparams}
  param/<timm name>    the parameters (vitk registers the same names)
  input/images         [B, C, H, W]
  input/targets        int32 [B]
  input/kept           int32 [B, K] (patch_drop cases): the kept patches, in token order
  output/logits        [B, num_classes]
  output/loss          [1], the mean cross-entropy
  grad/images, grad/param/<timm name>   gradients of the loss
"""
import argparse
import copy
import pathlib

import h5py
import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

EPS = 1e-6
RTOL, ATOL = 1e-5, 1e-6  # the C++ test's rule, used only to report PyTorch's float32 error

DEFAULT_OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "vit"


# ---- timm's VisionTransformer, reduced to what vitk implements ----
class ChannelNorm(nn.LayerNorm):
    """LayerNorm over the channels of a [B, C, H, W] map."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class StemStage(nn.Module):
    def __init__(self, channels_in, channels_out, stride):
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, kernel_size=3, stride=stride, padding=1)
        self.norm = ChannelNorm(channels_out, eps=EPS)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.norm(self.conv(x)))


class PatchEmbed(nn.Module):
    def __init__(self, patch, channels, dim, stem_channels=(), stem_strides=()):
        super().__init__()
        if stem_channels:
            stages, c = [], channels
            for i, out in enumerate(stem_channels):
                stride = stem_strides[i] if stem_strides else 2
                stages.append(StemStage(c, out, stride))
                c, patch = out, patch // stride
            self.stem = nn.Sequential(*stages)
            channels = c
        self.proj = nn.Conv2d(channels, dim, kernel_size=patch, stride=patch)

    def forward(self, x):  # [B, C, H, W] -> [B, Hp * Wp, d], patches in row-major grid order
        if hasattr(self, "stem"):
            x = self.stem(x)
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, dim, heads, diag_mask=False):
        super().__init__()
        self.heads = heads
        self.diag_mask = diag_mask
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # [B, H, N, dh] each
        scores = (q * self.scale) @ k.transpose(-2, -1)
        if self.diag_mask:  # LSA: no token attends to itself
            self_key = torch.eye(n, dtype=torch.bool, device=x.device)
            scores = scores.masked_fill(self_key, float("-inf"))
        attn = scores.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Module):
    def __init__(self, dim, hidden, grid=None):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.grid = grid  # with a grid: the MLP convolution on the hidden patch rows
        if grid:
            self.dwconv = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        h = self.fc1(x)
        if self.grid:
            b, n, c = h.shape
            grid = h[:, 1:].transpose(1, 2).reshape(b, c, *self.grid)
            grid = grid + self.dwconv(grid)
            h = torch.cat((h[:, :1], grid.flatten(2).transpose(1, 2)), dim=1)
        return self.fc2(self.act(h))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, diag_mask=False, grid=None):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=EPS)
        self.attn = Attention(dim, heads, diag_mask)
        self.norm2 = nn.LayerNorm(dim, eps=EPS)
        self.mlp = Mlp(dim, hidden, grid)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        patches = (cfg["image_height"] // cfg["patch_size"]) * (cfg["image_width"] // cfg["patch_size"])
        self.pool = cfg["pool"]
        stem = [int(c) for c in cfg["stem_channels"].split(",")] if "stem_channels" in cfg else []
        strides = [int(s) for s in cfg["stem_strides"].split(",")] if "stem_strides" in cfg else []
        self.patch_embed = PatchEmbed(cfg["patch_size"], cfg["channels"], d, stem, strides)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embed = nn.Parameter(torch.zeros(1, patches + 1, d))
        self.grid = (cfg["image_height"] // cfg["patch_size"], cfg["image_width"] // cfg["patch_size"])
        blocks = cfg["pos_conv_blocks"].split(",") if "pos_conv_blocks" in cfg else []
        self.pos_conv = nn.ModuleDict({b: nn.Conv2d(d, d, 3, padding=1, groups=d) for b in blocks})
        ffn_conv = cfg["ffn_conv_blocks"].split(",") if "ffn_conv_blocks" in cfg else []
        self.blocks = nn.Sequential(*[Block(d, cfg["heads"], cfg["d_ff"], bool(cfg.get("diag_mask")),
                                            self.grid if str(i) in ffn_conv else None)
                                      for i in range(cfg["layers"])])
        # timm: fc_norm replaces norm when pooling by average.
        self.norm = nn.LayerNorm(d, eps=EPS) if self.pool == "token" else nn.Identity()
        self.fc_norm = nn.LayerNorm(d, eps=EPS) if self.pool == "avg" else nn.Identity()
        self.head = nn.Linear(d, cfg["num_classes"])

    def forward(self, images, kept=None):
        x = self.patch_embed(images)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        if kept is not None:  # timm's PatchDropout with a given draw
            index = kept.long().unsqueeze(-1).expand(-1, -1, x.shape[2])
            x = torch.cat((x[:, :1], x[:, 1:].gather(1, index)), dim=1)
        for i, block in enumerate(self.blocks):
            x = block(x)
            if str(i) in self.pos_conv:  # CPVT's PEG: the patch grid plus its depthwise conv
                b, n, d = x.shape
                grid = x[:, 1:].transpose(1, 2).reshape(b, d, *self.grid)
                grid = grid + self.pos_conv[str(i)](grid)
                x = torch.cat((x[:, :1], grid.flatten(2).transpose(1, 2)), dim=1)
        x = self.norm(x)
        x = x[:, 1:].mean(dim=1) if self.pool == "avg" else x[:, 0]
        return self.head(self.fc_norm(x))


# ---- parameters and inputs ----
def randomize(model, generator):
    """Random values instead of timm's init (zero biases, unit norms, a class token of 1e-6), so
    that a bias, norm, position or class token that vitk mishandles cannot go unnoticed."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if name in ("cls_token", "pos_embed"):
                p.copy_(0.5 * noise)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif p.dim() == 1:
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / (p[0].numel() ** 0.5))  # outputs of order 1 (conv: fan-in C*P*P)


def run(model, images, targets, kept, dtype):
    """Logits, loss and gradients in `dtype`, as float64 numpy arrays."""
    model = model.to(dtype).train()  # dropout is 0 anyway
    model.zero_grad(set_to_none=True)
    x = images.detach().to(dtype).clone().requires_grad_()
    logits = model(x, kept)
    loss = F.cross_entropy(logits, targets.long())
    loss.backward()
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(1), "dimages": x.grad}
    grads = {name: p.grad for name, p in model.named_parameters()}
    return ({k: v.double().numpy() for k, v in out.items()},
            {k: v.double().numpy() for k, v in grads.items()})


def errors(got, want):
    err = np.abs(got - want)
    scale = max(1.0, float(np.abs(want).max()))
    return float(err.max()), float(np.max(err / (RTOL * np.abs(want) + ATOL * scale)))


def write_case(out, name, seed, cfg, batch):
    gen = torch.Generator().manual_seed(seed)
    model = VisionTransformer(cfg)
    randomize(model, gen)
    images = torch.randn(batch, cfg["channels"], cfg["image_height"], cfg["image_width"],
                         generator=gen)
    targets = torch.randint(0, cfg["num_classes"], (batch,), generator=gen, dtype=torch.int32)
    kept = None
    if "patch_drop" in cfg:
        patches = (cfg["image_height"] // cfg["patch_size"]) * (cfg["image_width"] // cfg["patch_size"])
        keep = max(1, int(patches * (1.0 - cfg["patch_drop"])))
        kept = torch.argsort(torch.randn(batch, patches, generator=gen), dim=-1)[:, :keep]
        kept = kept.to(torch.int32)

    outputs, grads = run(copy.deepcopy(model), images, targets, kept, torch.float64)
    f32_outputs, f32_grads = run(copy.deepcopy(model), images, targets, kept, torch.float32)
    torch_errors = {"logits": errors(f32_outputs["logits"], outputs["logits"]),
                    "dimages": errors(f32_outputs["dimages"], outputs["dimages"])}
    per_param = [errors(f32_grads[k], grads[k]) for k in grads]
    torch_errors["dparams"] = (max(e[0] for e in per_param), max(e[1] for e in per_param))
    params = {k: p.detach().double().numpy() for k, p in model.named_parameters()}

    path = out / name
    with h5py.File(path, "w", libver="earliest", track_order=False) as f:
        for key, value in cfg.items():
            f.attrs[key] = value
        f.attrs["norm_eps"] = EPS
        f.attrs["batch"] = batch
        f.attrs["seed"] = seed
        f.attrs["torch_version"] = str(torch.__version__)
        for group, (max_abs, ratio) in torch_errors.items():
            f.attrs[f"torch_float32_max_abs_{group}"] = max_abs
            f.attrs[f"torch_float32_error_{group}"] = ratio

        def put(key, array, dtype=np.float32):
            f.create_dataset(key, data=np.asarray(array, dtype=dtype), track_times=False)

        put("input/images", images)
        put("input/targets", targets, np.int32)
        if kept is not None:
            put("input/kept", kept, np.int32)
        put("output/logits", outputs["logits"])
        put("output/loss", outputs["loss"])
        put("grad/images", outputs["dimages"])
        for k in sorted(params):
            put(f"param/{k}", params[k])
            put(f"grad/param/{k}", grads[k])
    worst = max(ratio for _, ratio in torch_errors.values())
    print(f"{name}: {len(params)} parameters, {path.stat().st_size} bytes, "
          f"PyTorch's float32 result: {worst:.3f} of the tolerance")


def config(pool, channels, height, width, patch, layers, classes, stem=None, strides=None,
           patch_drop=None, pos_conv=None, diag_mask=False, ffn_conv=None):
    cfg = {"image_height": height, "image_width": width, "patch_size": patch,
           "channels": channels, "num_classes": classes, "d_model": 16, "heads": 4, "d_ff": 32,
           "layers": layers, "pool": pool}
    if stem:
        cfg["stem_channels"] = stem
    if strides:
        cfg["stem_strides"] = strides
    if patch_drop:
        cfg["patch_drop"] = patch_drop
    if pos_conv:
        cfg["pos_conv_blocks"] = pos_conv
    if diag_mask:
        cfg["diag_mask"] = 1
    if ffn_conv:
        cfg["ffn_conv_blocks"] = ffn_conv
    return cfg


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # reproducible sums
    torch.use_deterministic_algorithms(True)

    write_case(args.out, "01_token_rgb_square.h5", 201, config("token", 3, 8, 8, 2, 2, 5), 3)
    write_case(args.out, "02_avg_gray_rect.h5", 202, config("avg", 1, 8, 12, 4, 2, 4), 3)
    write_case(args.out, "03_token_gray_rect.h5", 203, config("token", 1, 6, 10, 2, 1, 3), 2)
    # Two stem stages and a 1x1 projection (the Fashion-MNIST shape), one stage and a 2x2 one.
    write_case(args.out, "04_stem_avg_gray.h5", 204,
               config("avg", 1, 12, 8, 4, 1, 4, stem="6,5"), 3)
    write_case(args.out, "05_stem_token_rgb_rect.h5", 205,
               config("token", 3, 8, 12, 4, 1, 3, stem="4"), 2)
    # Stride-1 stages around a stride-2 one (12x8 -> 12x8 -> 6x4 -> 6x4), then a 2x2 projection.
    write_case(args.out, "06_stem_strides_avg_rgb.h5", 206,
               config("avg", 3, 12, 8, 4, 1, 3, stem="8,8,6", strides="1,2,1"), 2)
    # Patch dropout (24 patches, 18 kept per image) under both poolings, one behind a stem.
    write_case(args.out, "07_patch_drop_avg_gray.h5", 207,
               config("avg", 1, 12, 8, 2, 2, 4, patch_drop=0.25), 3)
    write_case(args.out, "08_patch_drop_stem_token_rgb.h5", 208,
               config("token", 3, 8, 12, 4, 1, 3, stem="6", patch_drop=0.5), 2)
    # Positional convolutions after both blocks (a 6x4 grid) and, behind a stem, after block 0.
    write_case(args.out, "09_pos_conv_avg_gray.h5", 209,
               config("avg", 1, 12, 8, 2, 2, 4, pos_conv="0,1"), 3)
    write_case(args.out, "10_pos_conv_stem_token_rgb.h5", 210,
               config("token", 3, 8, 12, 4, 2, 3, stem="6", pos_conv="0"), 2)
    # The diagonal mask in both blocks, and with patch dropout (fewer tokens) behind a stem.
    write_case(args.out, "11_diag_mask_avg_gray.h5", 211,
               config("avg", 1, 12, 8, 2, 2, 4, diag_mask=True), 3)
    write_case(args.out, "12_diag_mask_patch_drop_token_rgb.h5", 212,
               config("token", 3, 8, 12, 4, 1, 3, stem="6", patch_drop=0.5, diag_mask=True), 2)
    # MLP convolutions in both blocks (a 6x4 grid) and, behind a stem, in block 0 of two with a
    # positional convolution after it and the diagonal mask.
    write_case(args.out, "13_ffn_conv_avg_gray.h5", 213,
               config("avg", 1, 12, 8, 2, 2, 4, ffn_conv="0,1"), 3)
    write_case(args.out, "14_ffn_conv_pos_conv_stem_token_rgb.h5", 214,
               config("token", 3, 8, 12, 4, 2, 3, stem="6", pos_conv="0", diag_mask=True,
                      ffn_conv="0"), 2)


if __name__ == "__main__":
    main()
