"""Interformer-style model: interleaved interaction and sequence arches, bridged by gated summaries.

Source: Z. Zeng et al., "InterFormer: Towards Effective Heterogeneous Interaction Learning for
Click-Through Rate Prediction", arXiv:2411.09852 (Meta, 2024), Sec. 4 and Fig. 3. Each block has
(1) an interaction arch over the non-sequence features together with a summary of the sequence,
(2) a sequence arch (multi-head self-attention over the sequence, whose first tokens are replaced by a
summary of the non-sequence features), and (3) a cross arch that builds those summaries: the sequence
summary is the CLS tokens, a PMA (pooling by multi-head attention with learned seeds) and the most
recent tokens, concatenated and gated (``s * sigmoid(W s)``); the non-sequence summary is a linear
compression along the field axis, gated the same way. That is many slices (CLS / recent tokens) and cats
per block: the split/cat junk this project targets. No official code is public; written from the paper.
The interaction module here is an inner-product interaction (Z Z^T, flattened, projected back), the
DLRM-style choice the paper lists among its options.

Sizes: ``gpu`` uses 32 non-sequence fields and a 64-token sequence of dim 64, 2 blocks, batch 1024;
the paper's public-dataset setups (Amazon, Taobao, KuaiVideo) have tens of fields and sequences of
tens to a hundred items.

Inputs: ``x: [B, n, d]`` (pooled non-sequence embeddings) and ``seq: [B, T, d]`` (sequence item
embeddings, CLS tokens prepended by the model). Output: logits ``[B, 1]``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from optimus_bench.models.base import BenchCase, bce_loss, randn, resolve_size, seeded

SIZES: dict[str, dict[str, Any]] = {
    "cpu": {"batch": 8, "fields": 8, "seq_len": 16, "dim": 16, "blocks": 2, "heads": 2, "n_cls": 2, "n_pma": 2,
            "n_recent": 2},
    "gpu": {"batch": 1024, "fields": 32, "seq_len": 64, "dim": 64, "blocks": 2, "heads": 4, "n_cls": 4,
            "n_pma": 4, "n_recent": 4},
}


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    """Scaled dot-product attention with ``heads`` heads: q [B, Lq, d], k/v [B, Lk, d] -> [B, Lq, d]."""
    b, lq, d = q.shape
    split = lambda t: t.reshape(b, -1, heads, d // heads).transpose(1, 2)  # noqa: E731
    att = torch.softmax(split(q) @ split(k).transpose(-1, -2) / (d // heads) ** 0.5, dim=-1)
    return (att @ split(v)).transpose(1, 2).reshape(b, lq, d)


class Gate(nn.Module):
    """Self-gating ``s * sigmoid(W s)`` over the last dim."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.w = nn.Linear(dim, dim)

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return s * torch.sigmoid(self.w(s))


class InterformerBlock(nn.Module):
    """One block: cross-arch summaries, interaction arch on x, sequence arch on seq."""

    def __init__(self, fields: int, seq_len: int, dim: int, heads: int, n_cls: int, n_pma: int,
                 n_recent: int) -> None:
        super().__init__()
        self.heads, self.n_cls, self.n_recent = heads, n_cls, n_recent
        n_sum = n_cls + n_pma + n_recent
        # cross arch
        self.pma_seeds = nn.Parameter(torch.randn(n_pma, dim) / dim ** 0.5)
        self.pma_kv = nn.Linear(dim, 2 * dim)
        self.seq_gate = Gate(dim)
        self.compress = nn.Linear(fields, n_cls)
        self.x_gate = Gate(dim)
        # interaction arch (inner products of [x; seq summary])
        z = fields + n_sum
        self.inter = nn.Linear(z * z, fields * dim)
        self.x_norm = nn.LayerNorm(dim)
        # sequence arch
        self.qkv = nn.Linear(dim, 3 * dim)
        self.seq_out = nn.Linear(dim, dim)
        self.seq_norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, seq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, d = x.shape
        # cross arch: sequence summary = [CLS tokens; PMA; recent tokens], gated
        cls, body = seq[:, : self.n_cls], seq[:, self.n_cls:]
        k, v = self.pma_kv(body).chunk(2, dim=-1)
        pma = _attention(self.pma_seeds.expand(b, -1, -1), k, v, self.heads)
        seq_sum = self.seq_gate(torch.cat([cls, pma, body[:, -self.n_recent:]], dim=1))
        # non-sequence summary: field-axis compression, gated
        x_sum = self.x_gate(self.compress(x.transpose(1, 2)).transpose(1, 2))
        # interaction arch
        z = torch.cat([x, seq_sum], dim=1)
        inter = (z @ z.transpose(1, 2)).flatten(1)
        x = self.x_norm(x + self.inter(inter).view(b, n, d))
        # sequence arch: the non-sequence summary takes the CLS slots
        s = torch.cat([x_sum, body], dim=1)
        q, kk, vv = self.qkv(s).split(d, dim=-1)
        seq = self.seq_norm(s + self.seq_out(_attention(q, kk, vv, self.heads)))
        return x, seq


class Interformer(nn.Module):
    """Stacked Interformer blocks and an MLP head: ``(x [B, n, d], seq [B, T, d]) -> logits [B, 1]``."""

    def __init__(self, fields: int, seq_len: int, dim: int, blocks: int, heads: int, n_cls: int, n_pma: int,
                 n_recent: int) -> None:
        super().__init__()
        self.cls = nn.Parameter(torch.randn(n_cls, dim) / dim ** 0.5)
        self.blocks = nn.ModuleList(InterformerBlock(fields, seq_len, dim, heads, n_cls, n_pma, n_recent)
                                    for _ in range(blocks))
        self.n_cls = n_cls
        self.head = nn.Sequential(nn.Linear((fields + n_cls) * dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, 1))

    def forward(self, x: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
        seq = torch.cat([self.cls.expand(x.shape[0], -1, -1), seq], dim=1)
        for block in self.blocks:
            x, seq = block(x, seq)
        return self.head(torch.cat([x, seq[:, : self.n_cls]], dim=1).flatten(1))


def build(size: str | dict = "cpu", *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
          seed: int = 0, overrides: dict | None = None) -> BenchCase:
    """The Interformer-style model at a size preset (``SIZES``) with example inputs and labels."""
    cfg = resolve_size(SIZES, size, overrides)
    with seeded(seed):
        model = Interformer(cfg["fields"], cfg["seq_len"], cfg["dim"], cfg["blocks"], cfg["heads"], cfg["n_cls"],
                            cfg["n_pma"], cfg["n_recent"])
    gen = torch.Generator().manual_seed(seed + 1)
    x = randn(gen, cfg["batch"], cfg["fields"], cfg["dim"], device=device, dtype=dtype)
    seq = randn(gen, cfg["batch"], cfg["seq_len"], cfg["dim"], device=device, dtype=dtype)
    labels = torch.randint(0, 2, (cfg["batch"], 1), generator=gen).to(device, dtype)
    return BenchCase("interformer", model.to(device, dtype), (x, seq), labels, bce_loss, cfg["batch"], cfg, dtype)
