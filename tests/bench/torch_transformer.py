"""The translation Transformer of vitk (common/seq2seq/model.h) written with PyTorch's own layers,
for the benchmark scripts: nn.Transformer (batch_first) between one embedding, scaled by
sqrt(d_model) plus the paper's sinusoids, and a bias-free output layer tied to that embedding. A
post-norm model has no final norms (a post-norm layer already ends in one), as vitk and fairseq.

load_vitk_checkpoint() builds it from a `vitk mt-train` checkpoint with vitk's weights (the name
map of tests/parity/make_core_fixtures.py), so both programs translate with the same model.
"""
import math
import pathlib
import sys
import warnings

import torch
from torch import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "parity"))
import make_core_fixtures as core  # noqa: E402  (vitk <-> PyTorch parameter names)

PAD, UNK, BOS, EOS = 0, 1, 2, 3  # vitk's fixed SentencePiece ids

# In evaluation mode nn.TransformerEncoder takes its nested-tensor fast path for padded batches
# (good for its speed) and warns that the API is a prototype, once per run.
warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")


class TorchTransformer(nn.Module):
    def __init__(self, vocab, d_model=256, heads=4, d_ff=1024, layers=3, decoder_layers=3,
                 dropout=0.1, activation="relu", norm_first=False, max_length=1024, eps=1e-5):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model, padding_idx=PAD)
        nn.init.normal_(self.embed.weight, 0.0, d_model ** -0.5)
        self.transformer = nn.Transformer(d_model, heads, layers, decoder_layers, d_ff, dropout,
                                          activation=activation, layer_norm_eps=eps,
                                          batch_first=True, norm_first=norm_first)
        if not norm_first:
            self.transformer.encoder.norm = None
            self.transformer.decoder.norm = None
        self.dropout = nn.Dropout(dropout)
        pos = torch.arange(max_length, dtype=torch.float64)[:, None]
        freq = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        pe = torch.zeros(max_length, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(pos * freq)
        pe[:, 1::2] = torch.cos(pos * freq)
        self.register_buffer("pe", pe.float())

    def embed_tokens(self, ids):
        return self.dropout(self.embed(ids) * math.sqrt(self.d_model) + self.pe[:ids.shape[1]])

    def encode(self, src):
        return self.transformer.encoder(self.embed_tokens(src), src_key_padding_mask=src == PAD)

    def decode(self, tgt, memory, src_pad, last_only=False):
        """Logits [B, Tt, V] of every target position (no cache: the whole prefix again), or
        with last_only those of the last position, [B, V]."""
        causal = self.transformer.generate_square_subsequent_mask(tgt.shape[1])
        h = self.transformer.decoder(self.embed_tokens(tgt), memory, tgt_mask=causal,
                                     tgt_key_padding_mask=tgt == PAD,
                                     memory_key_padding_mask=src_pad)
        return nn.functional.linear(h[:, -1] if last_only else h, self.embed.weight)

    def forward(self, src, tgt):
        return self.decode(tgt, self.encode(src), src == PAD)

    @torch.no_grad()
    def greedy(self, src, max_new):
        """The usual PyTorch greedy loop: encode once, then each step runs the decoder over the
        whole prefix and appends the arg-max of the last position; stops when every row has
        produced EOS. src: [B, Ts] padded ids with EOS. Returns one list of ids per row (no BOS,
        no EOS)."""
        memory = self.encode(src)
        src_pad = src == PAD
        b = src.shape[0]
        out = torch.full((b, 1), BOS, dtype=torch.long)
        done = torch.zeros(b, dtype=torch.bool)
        for _ in range(max_new):
            nxt = self.decode(out, memory, src_pad, last_only=True).argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
            out = torch.cat([out, nxt[:, None]], 1)
            done |= nxt == EOS
            if done.all():
                break
        result = []
        for row in out[:, 1:].tolist():
            ids = []
            for t in row:
                if t in (EOS, PAD):
                    break
                ids.append(t)
            result.append(ids)
        return result


def load_vitk_checkpoint(path):
    """(model in eval mode, SentencePiece model bytes) from a `vitk mt-train` checkpoint with tied
    embeddings."""
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        cfg = {k[len("config."):]: v.decode() for k, v in f.attrs.items()
               if k.startswith("config.")}
        if cfg.get("type") != "transformer" or cfg.get("tied_embeddings") != "true":
            sys.exit(f"{path}: not a translation checkpoint with tied embeddings")
        layers, dec_layers = int(cfg["layers"]), int(cfg["decoder_layers"])
        norm_first = cfg["pre_norm"] == "true"
        model = TorchTransformer(int(cfg["vocab_size"]), int(cfg["d_model"]), int(cfg["heads"]),
                                 int(cfg["d_ff"]), layers, dec_layers, 0.0, cfg["activation"],
                                 norm_first, int(cfg["max_length"]), float(cfg["norm_eps"]))
        mapping = {"embed_tokens.weight": ("embed.weight", None)}
        for i in range(layers):
            mapping.update(core.encoder_layer_names(f"encoder.layers.{i}",
                                                    f"transformer.encoder.layers.{i}."))
        for i in range(dec_layers):
            mapping.update(core.decoder_layer_names(f"decoder.layers.{i}",
                                                    f"transformer.decoder.layers.{i}.",
                                                    d=int(cfg["d_model"])))
        if norm_first:
            mapping.update(core.same_names("encoder.norm", "transformer.encoder.norm"))
            mapping.update(core.same_names("decoder.norm", "transformer.decoder.norm"))
        core.check_mapping(model, mapping)
        params = dict(model.named_parameters())
        with torch.no_grad():
            for vitk_name, (torch_name, rows) in mapping.items():
                value = torch.from_numpy(np.asarray(f[vitk_name], dtype=np.float32))
                target = params[torch_name]
                if rows is None:
                    target.copy_(value)
                else:
                    target[rows] = value
        spm = bytes(np.asarray(f["files/sentencepiece.model"], dtype=np.uint8))
    model.eval()
    return model, spm
