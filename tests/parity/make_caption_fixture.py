#!/usr/bin/python3
"""Writes the PyTorch parity fixtures of vitk's captioning model (tests/fixtures/caption/*.h5).

Run with Debian's PyTorch (python3-torch, python3-h5py):

    /usr/bin/python3 tests/parity/make_caption_fixture.py

The reference: the ViT of make_vit_fixtures.py (timm's layout) without its head, its final norm
applied to every token (timm's forward_features), as the memory (all tokens, or all but the class
token), plus, in the memory_positions case, a fixed 2-D sine-cosine code of each patch's grid row
and column (the Transformer paper's 1-D sinusoids of each, side by side; zero on the class
token); token embeddings plus learned positions; PyTorch's nn.TransformerDecoderLayer (norm_first,
GELU, dropout 0) stacked by nn.TransformerDecoder with a final LayerNorm; a bias-free output layer,
tied to the embedding or not. The loss is F.cross_entropy(ignore_index=0 (pad),
label_smoothing=0.1), the mean over the non-pad target tokens, plus the doubly stochastic
attention penalty of Show, Attend and Tell averaged over the images:
    lambda * sum_i (1 - sum_t alpha_ti)^2,
alpha the last decoder layer's cross-attention weights averaged over its heads, t over each
caption's positions. Parameters are drawn from fixed seeds; outputs and gradients are computed in
float64 from the float32 parameters and stored as float32.

One HDF5 file per case holds:
  attributes          vitk's [model] keys (image_size, patch_size, ..., vocab_size, max_length,
                      decoder_layers, decoder_heads, decoder_d_ff, tie_embeddings,
                      memory_class_token, memory_positions), label_smoothing, penalty (lambda), torch_version
  param/<vitk name>   the parameters under vitk's names (vit/caption/model.h)
  input/images, input/target_in, input/target_out, input/target_lengths
  output/logits [B, Tt, V], output/loss [1] (cross-entropy), output/penalty [1] (mean over images)
  grad/param/<vitk name>, grad/images: of loss + penalty
"""
import argparse
import copy
import pathlib
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_core_fixtures as core  # noqa: E402  (the decoder layer's name map, masks)
import make_vit_fixtures as vitfx  # noqa: E402  (the ViT, its randomisation)

VOCAB = 13
PAD, BOS, EOS = 0, 2, 3
SMOOTHING = 0.1
MAX_LENGTH = 8
TARGET_LENGTHS = [4, 6, 2]  # BOS + words (target_in) or words + EOS (target_out)
DEC_HEADS, DEC_FF = 2, 24

DEFAULT_OUT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "caption"


def sinusoids(length, d):
    """[length, d]: the Transformer paper's code, sin in even columns and cos in odd ones, column
    pair i at frequency 10000^(-2i/d)."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    angle = pos * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    return torch.stack((angle.sin(), angle.cos()), dim=2).reshape(length, d)


def sincos_2d(rows, cols, d):
    """[rows * cols, d]: the 1-D code of each patch's row in the first half of d, of its column
    in the second."""
    r = sinusoids(rows, d // 2).repeat_interleave(cols, dim=0)
    c = sinusoids(cols, d // 2).repeat(rows, 1)
    return torch.cat((r, c), dim=1)


class Captioner(nn.Module):
    def __init__(self, cfg, layers, tied, class_token, positions=False):
        super().__init__()
        d = cfg["d_model"]
        self.class_token = class_token
        self.positions = positions
        self.tied = tied
        self.encoder = vitfx.VisionTransformer(cfg)
        del self.encoder.head  # no head: num_classes 0
        self.embed_tokens = nn.Embedding(VOCAB, d)
        self.embed_positions = nn.Parameter(torch.zeros(MAX_LENGTH, d))
        layer = nn.TransformerDecoderLayer(d, DEC_HEADS, DEC_FF, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, layers, norm=nn.LayerNorm(d))
        if not tied:
            self.output_projection = nn.Linear(d, VOCAB, bias=False)

    def features(self, images):
        """timm's forward_features: the blocks, then the final norm on every token."""
        e = self.encoder
        x = e.patch_embed(images)
        x = torch.cat((e.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + e.pos_embed
        for i, block in enumerate(e.blocks):
            x = block(x)
            if str(i) in e.pos_conv:
                b, n, d = x.shape
                grid = x[:, 1:].transpose(1, 2).reshape(b, d, *e.grid)
                grid = grid + e.pos_conv[str(i)](grid)
                x = torch.cat((x[:, :1], grid.flatten(2).transpose(1, 2)), dim=1)
        return e.norm(x)

    def forward(self, images, target_in, target_lengths):
        """Logits [B, Tt, V] and the last layer's cross-attention weights [B, Tt, Tm]."""
        memory = self.features(images)
        if self.positions:
            code = sincos_2d(*self.encoder.grid, memory.shape[2]).to(memory.dtype)
            memory = memory + torch.cat((torch.zeros_like(code[:1]), code))
        if not self.class_token:
            memory = memory[:, 1:]
        tt = target_in.shape[1]
        x = self.embed_tokens(target_in) + self.embed_positions[:tt]
        mask, pad = core.causal_mask(tt), core.padding_mask(target_lengths, tt)
        weights = None
        for layer in self.decoder.layers:
            # nn.TransformerDecoderLayer's norm_first forward, written out to read the weights
            h = layer.norm1(x)
            x = x + layer.self_attn(h, h, h, attn_mask=mask, key_padding_mask=pad,
                                    need_weights=False)[0]
            h = layer.norm2(x)
            ca, weights = layer.multihead_attn(h, memory, memory, need_weights=True,
                                               average_attn_weights=True)
            x = x + ca
            x = x + layer.linear2(F.gelu(layer.linear1(layer.norm3(x))))
        # the written-out layers are PyTorch's own
        want = self.decoder(self.embed_tokens(target_in) + self.embed_positions[:tt], memory,
                            tgt_mask=mask, tgt_key_padding_mask=pad)
        h = self.decoder.norm(x)
        assert torch.allclose(h, want, atol=1e-6), "written-out decoder differs from PyTorch's"
        w = self.embed_tokens.weight if self.tied else self.output_projection.weight
        return h @ w.t(), weights


def names(cfg, layers, tied):
    m = {}
    for name in vitfx.VisionTransformer(cfg).state_dict():
        if not name.startswith(("head.", "fc_norm.")):
            m[name] = (f"encoder.{name}", None)
    for i in range(layers):
        m.update(core.decoder_layer_names(f"decoder.layers.{i}", f"decoder.layers.{i}."))
    m.update(core.same_names("decoder.norm", "decoder.norm"))
    m["decoder.embed_tokens.weight"] = ("embed_tokens.weight", None)
    m["decoder.embed_positions.weight"] = ("embed_positions", None)
    if not tied:
        m["output_projection.weight"] = ("output_projection.weight", None)
    return m


def make_targets(gen):
    b = len(TARGET_LENGTHS)
    target_in = torch.zeros(b, max(TARGET_LENGTHS), dtype=torch.long)
    target_out = torch.zeros_like(target_in)
    for i, lt in enumerate(TARGET_LENGTHS):
        y = torch.randint(4, VOCAB, (lt - 1,), generator=gen)
        target_in[i, 0] = BOS
        target_in[i, 1:lt] = y
        target_out[i, :lt - 1] = y
        target_out[i, lt - 1] = EOS
    return target_in, target_out


def run(model, images, target_in, target_out, penalty, dtype):
    model = copy.deepcopy(model).to(dtype).train()  # dropout is 0
    x = images.detach().to(dtype).clone().requires_grad_()
    logits, alpha = model(x, target_in, TARGET_LENGTHS)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), target_out.reshape(-1), ignore_index=PAD,
                           label_smoothing=SMOOTHING)
    valid = ~core.padding_mask(TARGET_LENGTHS, target_in.shape[1])  # [B, Tt]
    coverage = (alpha * valid[:, :, None].to(dtype)).sum(dim=1)  # [B, Tm]
    pen = penalty * ((1.0 - coverage) ** 2).sum(dim=1).mean()
    (loss + pen).backward()
    grads = {n: p.grad.detach().double().numpy() for n, p in model.named_parameters()}
    return (logits.detach().double().numpy(), float(loss), float(pen), x.grad.double().numpy(),
            grads)


def write_case(path, seed, cfg, layers, tied, class_token, penalty, positions=False):
    gen = torch.Generator().manual_seed(seed)
    model = Captioner(cfg, layers, tied, class_token, positions)
    vitfx.randomize(model, gen)
    mapping = names(cfg, layers, tied)
    core.check_mapping(model, mapping)
    batch = len(TARGET_LENGTHS)
    images = torch.randn(batch, cfg["channels"], cfg["image_height"], cfg["image_width"],
                         generator=gen)
    target_in, target_out = make_targets(gen)
    logits, loss, pen, dimages, grads = run(model, images, target_in, target_out, penalty,
                                            torch.float64)
    logits32, loss32, _, _, _ = run(model, images, target_in, target_out, penalty, torch.float32)
    params = {n: p.detach().double().numpy() for n, p in model.named_parameters()}
    attrs = {"image_size": f"{cfg['image_height']}x{cfg['image_width']}",
             "patch_size": cfg["patch_size"], "channels": cfg["channels"],
             "d_model": cfg["d_model"], "heads": cfg["heads"], "d_ff": cfg["d_ff"],
             "layers": cfg["layers"], "pool": "token", "norm_eps": vitfx.EPS,
             "stem_channels": cfg.get("stem_channels", "none"),
             "pos_conv_blocks": cfg.get("pos_conv_blocks", "none"),
             "vocab_size": VOCAB, "max_length": MAX_LENGTH, "decoder_layers": layers,
             "decoder_heads": DEC_HEADS, "decoder_d_ff": DEC_FF, "decoder_dropout": 0,
             "tie_embeddings": "true" if tied else "false",
             "memory_class_token": "true" if class_token else "false",
             "memory_positions": "true" if positions else "false"}
    with h5py.File(path, "w", libver="earliest", track_order=False) as f:
        for key, value in attrs.items():
            f.attrs[key] = str(value)
        f.attrs["label_smoothing"] = SMOOTHING
        f.attrs["penalty"] = penalty
        f.attrs["torch_version"] = str(torch.__version__)

        def put(name, array, dtype=np.float32):
            f.create_dataset(name, data=np.asarray(array, dtype=dtype), track_times=False)

        put("input/images", images.numpy())
        put("input/target_in", target_in.numpy(), np.int32)
        put("input/target_out", target_out.numpy(), np.int32)
        put("input/target_lengths", TARGET_LENGTHS, np.int32)
        put("output/logits", logits)
        put("output/loss", [loss])
        put("output/penalty", [pen])
        put("grad/images", dimages)
        for vitk_name, (torch_name, rows) in sorted(mapping.items()):
            sel = rows if rows is not None else slice(None)
            put(f"param/{vitk_name}", params[torch_name][sel])
            put(f"grad/param/{vitk_name}", grads[torch_name][sel])
    print(f"{path.name}: {len(mapping)} parameters, {path.stat().st_size} bytes, loss {loss:.6f} "
          f"penalty {pen:.6f} (PyTorch float32: {loss32:.6f}, max logit difference "
          f"{np.abs(logits32 - logits).max():.2e})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # reproducible sums
    torch.use_deterministic_algorithms(True)
    # The class token in the memory, a tied output layer, one encoder block.
    write_case(args.out / "01_rgb_tied_class_token.h5", 301,
               vitfx.config("token", 3, 8, 8, 2, 1, 1), 2, True, True, 0.5)
    # A stem and a positional convolution, the patch tokens alone, an untied output layer.
    write_case(args.out / "02_gray_stem_untied_patches.h5", 302,
               vitfx.config("token", 1, 12, 8, 4, 2, 1, stem="6", pos_conv="0"), 2, False, False,
               1.0)
    # The memory's 2-D sine-cosine positions, on a 3x2 patch grid, with the class token.
    write_case(args.out / "03_positions_class_token.h5", 303,
               vitfx.config("token", 1, 12, 8, 4, 1, 1, pos_conv="0"), 1, True, True, 0.5,
               positions=True)


if __name__ == "__main__":
    main()
