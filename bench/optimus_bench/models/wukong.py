"""Wukong-style model: stacked factorization-machine blocks (FMB) and linear compression blocks (LCB).

Source: B. Zhang et al., "Wukong: Towards a Scaling Law for Large-Scale Recommendation",
arXiv:2403.02545 (Meta, 2024), Sec. 3: an interaction stack of identical layers; each layer runs an FMB
(pairwise dot products of the fields, optimized as X (X^T P) with a projection P, flattened, LayerNorm,
MLP, reshaped to n_F fields) and an LCB (a linear map along the field axis to n_L fields) side by side,
concatenates them along the field axis and adds a residual (a field-axis projection when the field
count changes) followed by LayerNorm. Public code: the open reimplementation
github.com/clabrugere/wukong-recommendation and Alibaba's TorchEasyRec (docs/source/models/wukong.md).

Sizes: ``gpu`` follows TorchEasyRec's example configuration (lcb_feature_num 16, fmb_feature_num 16,
compressed_feature_num 8, feature MLP 1024-512) at embedding dim 64 with 3 layers, batch 2048.

Inputs: pooled embeddings ``x: [B, n, d]``. Output: logits ``[B, 1]``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from optimus_bench.models.base import BenchCase, bce_loss, randn, resolve_size, seeded

SIZES: dict[str, dict[str, Any]] = {
    "cpu": {"batch": 8, "fields": 8, "dim": 16, "layers": 2, "n_fmb": 4, "n_lcb": 4, "rank": 4, "hidden": 32},
    "gpu": {"batch": 2048, "fields": 32, "dim": 64, "layers": 3, "n_fmb": 16, "n_lcb": 16, "rank": 8,
            "hidden": 1024},
}


class FactorizationMachineBlock(nn.Module):
    """FMB: ``[B, n, d] -> [B, n_fmb, d]`` via X (X^T P) (rank-``rank`` compressed pairwise products)."""

    def __init__(self, fields: int, dim: int, n_out: int, rank: int, hidden: int) -> None:
        super().__init__()
        self.proj = nn.Parameter(torch.randn(fields, rank) / fields ** 0.5)
        self.norm = nn.LayerNorm(fields * rank)
        self.mlp = nn.Sequential(nn.Linear(fields * rank, hidden), nn.ReLU(), nn.Linear(hidden, n_out * dim))
        self.n_out, self.dim = n_out, dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xp = x.transpose(1, 2) @ self.proj                     # [B, d, rank]
        inter = (x @ xp).flatten(1)                             # [B, n*rank]
        return self.mlp(self.norm(inter)).view(-1, self.n_out, self.dim)


class LinearCompressionBlock(nn.Module):
    """LCB: a linear map along the field axis, ``[B, n, d] -> [B, n_lcb, d]``."""

    def __init__(self, fields: int, n_out: int) -> None:
        super().__init__()
        self.linear = nn.Linear(fields, n_out, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.transpose(1, 2)).transpose(1, 2)


class WukongLayer(nn.Module):
    """One layer: LN(cat(FMB(x), LCB(x)) + residual(x)), ``[B, n, d] -> [B, n_fmb + n_lcb, d]``."""

    def __init__(self, fields: int, dim: int, n_fmb: int, n_lcb: int, rank: int, hidden: int) -> None:
        super().__init__()
        self.fmb = FactorizationMachineBlock(fields, dim, n_fmb, rank, hidden)
        self.lcb = LinearCompressionBlock(fields, n_lcb)
        out = n_fmb + n_lcb
        self.residual = None if out == fields else LinearCompressionBlock(fields, out)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        res = x if self.residual is None else self.residual(x)
        return self.norm(torch.cat([self.fmb(x), self.lcb(x)], dim=1) + res)


class Wukong(nn.Module):
    """Stacked Wukong layers and an MLP head: ``x [B, n, d] -> logits [B, 1]``."""

    def __init__(self, fields: int, dim: int, layers: int, n_fmb: int, n_lcb: int, rank: int, hidden: int):
        super().__init__()
        blocks, n = [], fields
        for _ in range(layers):
            blocks.append(WukongLayer(n, dim, n_fmb, n_lcb, rank, hidden))
            n = n_fmb + n_lcb
        self.layers = nn.ModuleList(blocks)
        self.head = nn.Sequential(nn.Linear(n * dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x.flatten(1))


def build(size: str | dict = "cpu", *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
          seed: int = 0, overrides: dict | None = None) -> BenchCase:
    """The Wukong-style model at a size preset (``SIZES``) with example inputs and labels."""
    cfg = resolve_size(SIZES, size, overrides)
    with seeded(seed):
        model = Wukong(cfg["fields"], cfg["dim"], cfg["layers"], cfg["n_fmb"], cfg["n_lcb"], cfg["rank"],
                       cfg["hidden"])
    gen = torch.Generator().manual_seed(seed + 1)
    x = randn(gen, cfg["batch"], cfg["fields"], cfg["dim"], device=device, dtype=dtype)
    labels = torch.randint(0, 2, (cfg["batch"], 1), generator=gen).to(device, dtype)
    return BenchCase("wukong", model.to(device, dtype), (x,), labels, bce_loss, cfg["batch"], cfg, dtype)
