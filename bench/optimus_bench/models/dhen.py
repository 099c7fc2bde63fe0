"""DHEN-style model: a deep, hierarchical ensemble of heterogeneous interaction modules.

Source: B. Zhang et al., "DHEN: A Deep and Hierarchical Ensemble Network for Large-Scale Click-Through
Rate Prediction", arXiv:2203.11014 (Meta, 2022), Sec. 3 and Fig. 2: every layer runs several interaction
modules (self-attention, DCN cross, linear, convolution, AdvancedDLRM) side by side on the same
[B, fields, dim] input, combines their outputs (concatenation + linear projection here), and adds a
shortcut followed by a normalization; layers are stacked. No official code is public; this is written
from the paper. The modules here: multi-head self-attention over fields (QKV projection split into
three), a low-rank DCN cross over the flattened fields, per-field linear modules (the input unbound per
field, one ``nn.Linear`` per field, stacked back) and a linear compression along the field axis.

Sizes: the paper's production model is not public; the ``gpu`` preset (32 fields of dim 64, batch
2048) is in the range of the public CTR benchmarks the paper family uses (Criteo: 26 sparse + 13 dense
features, embedding dims 16-128) and of production batch sizes (thousands), with 2 layers so that the
whole benchmark matrix compiles inside the device budget (measured on the H200: Inductor alone took
9.7 s (inference) and 21.5 s (training step) to compile 4 layers from a cold cache; see
``bench/README.md``). ``--set dhen.layers=8`` gives the paper's deeper stacks.

Inputs: pooled embeddings ``x: [B, F, D]`` (the embedding lookup itself is not part of the dense arch
that torch.compile sees in production; DLRM models it separately). Output: logits ``[B, 1]``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from optimus_bench.models.base import BenchCase, bce_loss, randn, resolve_size, seeded

SIZES: dict[str, dict[str, Any]] = {
    "cpu": {"batch": 8, "fields": 8, "dim": 16, "layers": 2, "heads": 2, "rank": 8},
    "gpu": {"batch": 2048, "fields": 32, "dim": 64, "layers": 2, "heads": 4, "rank": 64},
}


class FieldSelfAttention(nn.Module):
    """Multi-head self-attention across fields: [B, F, D] -> [B, F, D] (QKV from one Linear, split)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, f, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.reshape(b, f, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        return self.out((att @ v).transpose(1, 2).reshape(b, f, d))


class LowRankCross(nn.Module):
    """DCN-v2 low-rank cross layer on the flattened fields: x0 * (U V^T x + b) + x, [B, F*D] -> same."""

    def __init__(self, width: int, rank: int) -> None:
        super().__init__()
        self.v = nn.Linear(width, rank, bias=False)
        self.u = nn.Linear(rank, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.flatten(1)
        return (flat * self.u(self.v(flat)) + flat).view_as(x)


class PerFieldLinear(nn.Module):
    """One Linear per field: unbind fields, project each, stack back ([B, F, D] -> [B, F, D])."""

    def __init__(self, fields: int, dim: int) -> None:
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(dim, dim) for _ in range(fields))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([lin(t) for lin, t in zip(self.linears, torch.unbind(x, dim=1))], dim=1)


class FieldCompression(nn.Module):
    """Linear mixing along the field axis: [B, F, D] -> [B, F, D]."""

    def __init__(self, fields: int) -> None:
        super().__init__()
        self.mix = nn.Linear(fields, fields)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mix(x.transpose(1, 2)).transpose(1, 2)


class DHENLayer(nn.Module):
    """One DHEN layer: ensemble of four interaction modules, concatenated, projected, shortcut + norm."""

    def __init__(self, fields: int, dim: int, heads: int, rank: int) -> None:
        super().__init__()
        self.modules_ = nn.ModuleList([
            FieldSelfAttention(dim, heads), LowRankCross(fields * dim, rank),
            PerFieldLinear(fields, dim), FieldCompression(fields),
        ])
        self.proj = nn.Linear(len(self.modules_) * dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ens = torch.cat([m(x) for m in self.modules_], dim=-1)
        return self.norm(self.proj(ens) + x)


class DHEN(nn.Module):
    """Stacked DHEN layers and an MLP head: ``x [B, F, D] -> logits [B, 1]``."""

    def __init__(self, fields: int, dim: int, layers: int, heads: int, rank: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DHENLayer(fields, dim, heads, rank) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(fields * dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x.flatten(1))


def build(size: str | dict = "cpu", *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
          seed: int = 0, overrides: dict | None = None) -> BenchCase:
    """The DHEN-style model at a size preset (``SIZES``) with example inputs and labels."""
    cfg = resolve_size(SIZES, size, overrides)
    with seeded(seed):
        model = DHEN(cfg["fields"], cfg["dim"], cfg["layers"], cfg["heads"], cfg["rank"])
    gen = torch.Generator().manual_seed(seed + 1)
    x = randn(gen, cfg["batch"], cfg["fields"], cfg["dim"], device=device, dtype=dtype)
    labels = torch.randint(0, 2, (cfg["batch"], 1), generator=gen).to(device, dtype)
    return BenchCase("dhen", model.to(device, dtype), (x,), labels, bce_loss, cfg["batch"], cfg, dtype)
