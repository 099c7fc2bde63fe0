"""Benchmark models, one module per family, behind one registry.

>>> from optimus_bench.models import MODELS, build
>>> case = build("dhen", "cpu")          # BenchCase: model, inputs, labels, loss_fn, batch_size

Every model has a ``cpu`` and a ``gpu`` size preset (its module's ``SIZES``), cites its source and the
origin of its sizes in its docstring, and builds with random weights and seeded inputs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch

from optimus_bench.models.base import SIZES, BenchCase, ModelUnavailable


@dataclass(frozen=True)
class ModelEntry:
    """Where a model lives: ``module:function`` under :mod:`optimus_bench.models`, a family, a blurb."""

    module: str
    function: str
    family: str
    blurb: str
    sizes_attr: str = "SIZES"

    def builder(self):
        return getattr(importlib.import_module(f"optimus_bench.models.{self.module}"), self.function)

    def sizes(self) -> dict:
        return getattr(importlib.import_module(f"optimus_bench.models.{self.module}"), self.sizes_attr)


MODELS: dict[str, ModelEntry] = {
    "dhen": ModelEntry("dhen", "build", "recommendation", "DHEN-style hierarchical ensemble (arXiv:2203.11014)"),
    "wukong": ModelEntry("wukong", "build", "recommendation", "Wukong-style FMB + LCB stack (arXiv:2403.02545)"),
    "interformer": ModelEntry("interformer", "build", "recommendation",
                              "Interformer-style interaction/sequence/cross arches (arXiv:2411.09852)"),
    "dlrm": ModelEntry("dlrm", "build", "recommendation",
                       "DLRM embedding bags + dot interaction + DCN-v2 mixture cross net"),
    "towers": ModelEntry("towers", "build", "recommendation",
                         "per-feature MLP towers (split -> N small MLPs -> cat) and a head"),
    "launch_bound": ModelEntry("launch_bound", "build", "illustrative",
                               "many tiny parallel branches per layer (split/LN/Linear/act/stack/unbind/cat)"),
    "bert": ModelEntry("bert", "build", "transformer", "HuggingFace BertModel from its config"),
    "inception_v3": ModelEntry("vision", "build_inception_v3", "cnn", "torchvision Inception-v3",
                               "INCEPTION_SIZES"),
    "resnext50": ModelEntry("vision", "build_resnext50", "cnn", "torchvision ResNeXt-50 32x4d", "RESNEXT_SIZES"),
}


def build(name: str, size: str | dict = "cpu", *, device: str | torch.device = "cpu",
          dtype: torch.dtype = torch.float32, seed: int = 0, overrides: dict | None = None) -> BenchCase:
    """Build model ``name`` at ``size`` (``"cpu"``, ``"gpu"`` or a full size dict).

    Raises:
        ValueError: unknown model name (the message lists the valid ones) or size key.
        ModelUnavailable: an optional dependency of the model is missing here.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
    return MODELS[name].builder()(size, device=device, dtype=dtype, seed=seed, overrides=overrides)


__all__ = ["MODELS", "SIZES", "BenchCase", "ModelEntry", "ModelUnavailable", "build"]
