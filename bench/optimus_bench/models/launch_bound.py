"""The launch-bound illustrative model: hundreds of tiny parallel branches per layer.

Each layer splits ``x: [B, N*D]`` into N field slices, runs LayerNorm -> Linear -> activation on each
slice (N tiny independent branches), stacks the results to ``[B, N, D]``, unbinds them again and
concatenates them back to ``[B, N*D]`` (the stack/unbind/cat "junk" that model code written field by
field carries), and adds a residual. With N in the hundreds, eager and plain Inductor launch several
kernels per branch per layer, so kernel launches, not FLOPs, set the time: the case that Optimus'
horizontal fusion (torch/_inductor/fx_passes/group_batch_fusion.py: ``batch_layernorm``,
``batch_linear``, ``batch_relu``/``batch_tanh``) and split/cat passes (split_cat.py) were written for,
and the model the project's brief (``shared/DESIGN.md``) calls "tangled, branchy".

Source: written for this project after the per-field "split -> per-field module -> cat" pattern of
recommendation model code that the Optimus passes target (PyTorch Inductor's group_batch_fusion tests,
test/inductor/test_group_batch_fusion.py, build such models).

Sizes: ``gpu`` is 32 branches of width 32 in 2 layers, batch 2048. Inductor's compile time grows with
the branch count (one or more kernels per branch): on the H200 it needed 36.5 s for 64 branches x 2
layers (inference, cold cache; measured here), 117 s for a 128-branch model and over 280 s for 512
branches (issue 4), so the default keeps the whole benchmark matrix inside its device budget. Pass
``--set launch_bound.branches=128`` (512, 1024: the paper's scale, issue 12) for the regime the model is
named for; ``batch``, ``dim`` and ``layers`` are knobs too.

Training step: ``optimizer`` (default ``adam_fused``; ``--set launch_bound.optimizer=none`` for forward
and backward alone, or any name of ``optimus_bench.models.base.OPTIMIZERS``) runs after the backward,
so one iteration is ``zero_grad(set_to_none=True)``, forward, backward and a fused optimizer step.

Input: ``x: [B, N*D]``. Output: logits ``[B, 1]``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from optimus_bench.models.base import OPTIMIZERS, BenchCase, bce_loss, randn, resolve_size, seeded

SIZES: dict[str, dict[str, Any]] = {
    "cpu": {"batch": 16, "branches": 8, "dim": 8, "layers": 2, "optimizer": "adam_fused"},
    "gpu": {"batch": 2048, "branches": 32, "dim": 32, "layers": 2, "optimizer": "adam_fused"},
}

_ACTIVATIONS = (torch.relu, torch.tanh, torch.sigmoid)


class BranchLayer(nn.Module):
    """split -> per-branch LayerNorm -> Linear -> activation -> stack -> unbind -> cat, plus residual."""

    def __init__(self, branches: int, dim: int, activation) -> None:
        super().__init__()
        self.dim, self.act = dim, activation
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(branches))
        self.linears = nn.ModuleList(nn.Linear(dim, dim) for _ in range(branches))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pieces = torch.split(x, self.dim, dim=1)
        ys = [self.act(lin(norm(p))) for p, norm, lin in zip(pieces, self.norms, self.linears)]
        stacked = torch.stack(ys, dim=1)                       # [B, N, D]
        return torch.cat(torch.unbind(stacked, dim=1), dim=1) + x


class LaunchBound(nn.Module):
    """``layers`` branch layers (activations cycle relu, tanh, sigmoid) and a linear head."""

    def __init__(self, branches: int, dim: int, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(BranchLayer(branches, dim, _ACTIVATIONS[i % 3]) for i in range(layers))
        self.head = nn.Linear(branches * dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def build(size: str | dict = "cpu", *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
          seed: int = 0, overrides: dict | None = None) -> BenchCase:
    """The launch-bound model at a size preset (``SIZES``) with example inputs and labels.

    Raises:
        ValueError: an unknown size preset or key, or an unknown ``optimizer`` name.
    """
    cfg = resolve_size(SIZES, size, overrides)
    if cfg["optimizer"] not in OPTIMIZERS:  # a bad --set fails here, not after the first compile
        raise ValueError(f"unknown optimizer {cfg['optimizer']!r}; valid: {', '.join(OPTIMIZERS)}")
    with seeded(seed):
        model = LaunchBound(cfg["branches"], cfg["dim"], cfg["layers"])
    gen = torch.Generator().manual_seed(seed + 1)
    x = randn(gen, cfg["batch"], cfg["branches"] * cfg["dim"], device=device, dtype=dtype)
    labels = torch.randint(0, 2, (cfg["batch"], 1), generator=gen).to(device, dtype)
    return BenchCase("launch_bound", model.to(device, dtype), (x,), labels, bce_loss, cfg["batch"], cfg, dtype,
                     optimizer=cfg["optimizer"])
