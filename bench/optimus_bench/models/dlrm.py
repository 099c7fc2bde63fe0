"""DLRM / DCN-v2-style model: embedding bags, dot interaction and a low-rank mixture cross net.

Sources:
- M. Naumov et al., "Deep Learning Recommendation Model for Personalization and Recommendation
  Systems", arXiv:1906.00091 (2019); code github.com/facebookresearch/dlrm (``dlrm_s_pytorch.py``): one
  ``nn.EmbeddingBag`` (sum pooling) per sparse feature, a bottom MLP on the dense features, the dot
  interaction (pairwise dot products of the [dense; sparse] vectors, strictly lower triangle) and a top
  MLP. Its Criteo Kaggle configuration (``bench/dlrm_s_criteo_kaggle.sh``): 13 dense and 26 sparse
  features, embedding dim 16, bottom MLP 13-512-256-64-16, top MLP 512-256-1.
- R. Wang et al., "DCN V2: Improved Deep & Cross Network", arXiv:2008.13535 (WWW 2021), Sec. 3.2, and
  TorchRec's ``torchrec.modules.crossnet.LowRankMixtureCrossNet``: K low-rank experts per cross layer
  ``x0 * (U_i g(C_i g(V_i^T x))) + b``, stacked on a new last axis and mixed by a softmax gate.
- The "concatenate pooled embeddings, then split per feature" step is what TorchRec's
  ``KeyedTensor`` (``EmbeddingBagCollection`` output, ``.to_dict()``) does: a cat followed by a split,
  the junk that Optimus' ``split_cat`` passes were written for.

Sizes: ``gpu`` keeps the Criteo Kaggle shape (13 dense, 26 sparse features, 100k rows per table here)
and MLP widths (bottom 13-512-256-dim, top 512-256-1) with embedding dim 64, multi-hot pooling 4, 4
experts of rank 64, 2 cross layers, batch 4096.

Inputs: ``dense: [B, 13]`` float and ``sparse: [B, F, P]`` int64 ids (P ids pooled per feature).
Output: logits ``[B, 1]``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from optimus_bench.models.base import BenchCase, bce_loss, randn, resolve_size, seeded

SIZES: dict[str, dict[str, Any]] = {
    "cpu": {"batch": 16, "dense": 13, "features": 8, "rows": 1000, "dim": 8, "pooling": 2, "bottom": 32,
            "top": 32, "experts": 2, "rank": 4, "cross_layers": 1},
    "gpu": {"batch": 4096, "dense": 13, "features": 26, "rows": 100_000, "dim": 64, "pooling": 4,
            "bottom": 512, "top": 512, "experts": 4, "rank": 64, "cross_layers": 2},
}


def mlp(sizes: list[int], last_act: bool = True) -> nn.Sequential:
    """Linear/ReLU stack with the given layer widths."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if last_act or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class LowRankMixtureCrossNet(nn.Module):
    """DCN-v2 cross net with a mixture of low-rank experts: ``[B, N] -> [B, N]``."""

    def __init__(self, width: int, layers: int, experts: int, rank: int) -> None:
        super().__init__()
        self.v = nn.ModuleList(nn.ModuleList(nn.Linear(width, rank, bias=False) for _ in range(experts))
                               for _ in range(layers))
        self.c = nn.ModuleList(nn.ModuleList(nn.Linear(rank, rank, bias=False) for _ in range(experts))
                               for _ in range(layers))
        self.u = nn.ModuleList(nn.ModuleList(nn.Linear(rank, width, bias=False) for _ in range(experts))
                               for _ in range(layers))
        self.gates = nn.ModuleList(nn.ModuleList(nn.Linear(width, 1, bias=False) for _ in range(experts))
                                   for _ in range(layers))
        self.bias = nn.ParameterList(nn.Parameter(torch.zeros(width)) for _ in range(layers))

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        x = x0
        for v, c, u, g, b in zip(self.v, self.c, self.u, self.gates, self.bias):
            outs = [x0 * (ui(torch.relu(ci(torch.relu(vi(x))))) + b) for vi, ci, ui in zip(v, c, u)]
            experts = torch.stack(outs, dim=2)                                # [B, N, K]
            gating = torch.softmax(torch.stack([gi(x) for gi in g], dim=1), dim=1)  # [B, K, 1]
            x = torch.bmm(experts, gating).squeeze(2) + x
        return x


class DLRMDCN(nn.Module):
    """DLRM with a DCN-v2 mixture cross net over the interaction output."""

    def __init__(self, dense: int, features: int, rows: int, dim: int, bottom: int, top: int, experts: int,
                 rank: int, cross_layers: int) -> None:
        super().__init__()
        self.dim = dim
        self.bags = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(features))
        self.bottom = mlp([dense, bottom, bottom // 2, dim])
        n = features + 1
        li, lj = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        width = dim + n * (n - 1) // 2
        self.cross = LowRankMixtureCrossNet(width, cross_layers, experts, rank)
        self.top = mlp([width, top, top // 2, 1], last_act=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        d = self.bottom(dense)                                                  # [B, dim]
        pooled = torch.cat([bag(sparse[:, f]) for f, bag in enumerate(self.bags)], dim=1)  # KeyedTensor values
        per_feature = torch.split(pooled, self.dim, dim=1)                      # .to_dict()
        t = torch.stack([d, *per_feature], dim=1)                               # [B, F+1, dim]
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]               # dot interaction
        return self.top(self.cross(torch.cat([d, z], dim=1)))


def build(size: str | dict = "cpu", *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
          seed: int = 0, overrides: dict | None = None) -> BenchCase:
    """The DLRM/DCN-v2-style model at a size preset (``SIZES``) with example inputs and labels."""
    cfg = resolve_size(SIZES, size, overrides)
    with seeded(seed):
        model = DLRMDCN(cfg["dense"], cfg["features"], cfg["rows"], cfg["dim"], cfg["bottom"], cfg["top"],
                        cfg["experts"], cfg["rank"], cfg["cross_layers"])
    gen = torch.Generator().manual_seed(seed + 1)
    dense = randn(gen, cfg["batch"], cfg["dense"], device=device, dtype=dtype)
    sparse = torch.randint(0, cfg["rows"], (cfg["batch"], cfg["features"], cfg["pooling"]), generator=gen).to(device)
    labels = torch.randint(0, 2, (cfg["batch"], 1), generator=gen).to(device, dtype)
    return BenchCase("dlrm", model.to(device, dtype), (dense, sparse), labels, bce_loss, cfg["batch"], cfg, dtype)
