"""Per-feature MLP towers: the commonest shape of a recommendation model's dense arch.

The dense input ``x: [B, N*D]`` is split into N features; each feature runs its own MLP of ``layers`` Linear
layers (width ``hidden``, ReLU between them, the last of width ``out``); the towers' outputs are concatenated
and a Linear head gives the logit ``[B, 1]``. Per layer, the N Linears are identical and independent: Optimus'
``batch_linear`` makes each layer one batched GEMM, so a tower of L layers is L GEMMs instead of N*L.

Source: the per-feature tower of user-style models (``optimus_bench.corpus.FeatureTowers``, whose module this
is), after the per-field arches of DLRM-style models (arXiv:1906.00091) and the towers of multi-task models.
Sizes: ``gpu`` 32 features of width 32, towers 32 -> 64 -> 64 -> 16, batch 2048 (launch-bound on one GPU:
N*L = 96 GEMMs of [2048, 32] x [32, 64] unbatched).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from optimus_bench.corpus import FeatureTowers
from optimus_bench.models.base import OPTIMIZERS, BenchCase, bce_loss, randn, resolve_size, seeded

SIZES: dict[str, dict[str, Any]] = {
    "cpu": {"batch": 16, "features": 6, "dim": 16, "hidden": 32, "out": 4, "layers": 3, "optimizer": "adam_fused"},
    "gpu": {"batch": 2048, "features": 32, "dim": 32, "hidden": 64, "out": 16, "layers": 3,
            "optimizer": "adam_fused"},
}


class Towers(nn.Module):
    """N per-feature towers (:class:`optimus_bench.corpus.FeatureTowers`) and a Linear head: ``[B, N*D] -> [B, 1]``."""

    def __init__(self, features: int, dim: int, hidden: int, out: int, layers: int) -> None:
        super().__init__()
        widths = (dim,) + (hidden,) * (layers - 1) + (out,)
        self.towers = FeatureTowers(features, widths)
        self.head = nn.Linear(features * out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.towers(x))


def build(size: str | dict = "cpu", *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
          seed: int = 0, overrides: dict | None = None) -> BenchCase:
    """The towers model at a size preset (``SIZES``) with example inputs and labels.

    Raises:
        ValueError: an unknown size preset or key, an unknown ``optimizer`` name, or ``layers`` < 1.
    """
    cfg = resolve_size(SIZES, size, overrides)
    if cfg["optimizer"] not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {cfg['optimizer']!r}; valid: {', '.join(OPTIMIZERS)}")
    if cfg["layers"] < 1:
        raise ValueError(f"layers must be at least 1, got {cfg['layers']}")
    with seeded(seed):
        model = Towers(cfg["features"], cfg["dim"], cfg["hidden"], cfg["out"], cfg["layers"])
    gen = torch.Generator().manual_seed(seed + 1)
    x = randn(gen, cfg["batch"], cfg["features"] * cfg["dim"], device=device, dtype=dtype)
    labels = torch.randint(0, 2, (cfg["batch"], 1), generator=gen).to(device, dtype)
    return BenchCase("towers", model.to(device, dtype), (x,), labels, bce_loss, cfg["batch"], cfg, dtype,
                     optimizer=cfg["optimizer"])
