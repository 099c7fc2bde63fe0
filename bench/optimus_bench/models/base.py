"""What every benchmark model provides: a :class:`BenchCase` (model, example inputs, labels, loss)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

#: The size presets every model defines: ``"cpu"`` (small: CI and 2-core machines) and ``"gpu"``
#: (what the H200 matrix runs; sized so that the whole matrix compiles within the device budget).
SIZES = ("cpu", "gpu")


class ModelUnavailable(RuntimeError):
    """A model's optional dependency (torchvision, timm, transformers) is missing or broken here."""


@dataclass
class BenchCase:
    """One model, ready to benchmark.

    Attributes:
        name: the model's registry name (``"dhen"``, ``"bert"``, ...).
        model: the module, on its device, in train mode (the runner switches modes).
        inputs: positional example inputs of ``model`` for one iteration (batch first).
        labels: targets for the training step's loss (same batch size).
        loss_fn: ``loss_fn(output, labels) -> scalar tensor`` (inside the compiled region).
        batch_size: examples per iteration (for examples/s).
        config: the sizes it was built with (recorded in the results).
        dtype: parameter and floating input dtype.
        optimizer: the training step's optimizer (a name of :data:`OPTIMIZERS`; ``"none"``: forward and
            backward only). It runs eagerly after ``loss.backward()``, inside the timed iteration.
    """

    name: str
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    labels: torch.Tensor
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor]
    batch_size: int
    config: dict[str, Any] = field(default_factory=dict)
    dtype: torch.dtype = torch.float32
    optimizer: str = "none"


#: Optimizers a training step can end with: ``name -> (torch.optim class name, keyword arguments)``. The
#: foreach and fused variants are the multi-tensor kernels of torch.optim (one launch per chunk of
#: parameters instead of several per parameter); ``fused=True`` needs a CUDA or CPU device.
OPTIMIZERS: dict[str, tuple[str, dict[str, Any]] | None] = {
    "none": None,
    "sgd": ("SGD", {"lr": 1e-3, "momentum": 0.9, "foreach": False}),
    "sgd_foreach": ("SGD", {"lr": 1e-3, "momentum": 0.9, "foreach": True}),
    "adam": ("Adam", {"lr": 1e-4, "foreach": False}),
    "adam_foreach": ("Adam", {"lr": 1e-4, "foreach": True}),
    "adam_fused": ("Adam", {"lr": 1e-4, "fused": True}),
}


def make_optimizer(name: str, params) -> torch.optim.Optimizer | None:
    """The optimizer ``name`` (:data:`OPTIMIZERS`) over ``params``; ``None`` for ``"none"``.

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")
    spec = OPTIMIZERS[name]
    if spec is None:
        return None
    cls, kwargs = spec
    return getattr(torch.optim, cls)(params, **kwargs)


def bce_loss(out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy on logits, the click-through-rate loss of the recommendation models."""
    return nn.functional.binary_cross_entropy_with_logits(out.float().reshape(labels.shape), labels.float())


def ce_loss(out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of logits [B, C] against class ids [B] (the CNNs)."""
    return nn.functional.cross_entropy(out.float(), labels)


def mse_loss(out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean squared error against a random target of the output's shape (BERT's hidden states)."""
    return nn.functional.mse_loss(out.float(), labels.float())


def resolve_size(sizes: dict[str, dict[str, Any]], size: str | dict[str, Any], overrides: dict | None) -> dict:
    """The size preset ``size`` (``"cpu"``/``"gpu"``, or a full dict) with ``overrides`` applied.

    Raises:
        ValueError: for an unknown preset or an override key the model does not take.
    """
    if isinstance(size, dict):
        cfg = dict(size)
    elif size in sizes:
        cfg = dict(sizes[size])
    else:
        raise ValueError(f"unknown size {size!r}; valid: {sorted(sizes)}")
    for key, value in (overrides or {}).items():
        if key not in cfg:
            raise ValueError(f"unknown size key {key!r}; valid: {sorted(cfg)}")
        cfg[key] = type(cfg[key])(value) if cfg[key] is not None else value
    return cfg


def seeded(seed: int):
    """A context that seeds torch's global RNG (for module init) and restores it afterwards."""
    rng = torch.random.fork_rng(devices=[])

    class _Ctx:
        def __enter__(self):
            rng.__enter__()
            torch.manual_seed(seed)

        def __exit__(self, *exc):
            return rng.__exit__(*exc)

    return _Ctx()


def randn(gen: torch.Generator, *shape: int, device, dtype) -> torch.Tensor:
    """Standard normal tensor from ``gen`` (made on the CPU, so values match across devices)."""
    return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)
