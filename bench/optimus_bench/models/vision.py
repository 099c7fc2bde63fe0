"""CNNs with parallel branches from torchvision (or timm): Inception-v3 and ResNeXt-50 (32x4d).

Sources:
- C. Szegedy et al., "Rethinking the Inception Architecture for Computer Vision", CVPR 2016;
  ``torchvision.models.inception_v3`` (pytorch/vision, torchvision/models/inception.py): every Inception
  block runs 3-4 convolution branches side by side and concatenates them along channels.
- S. Xie et al., "Aggregated Residual Transformations for Deep Neural Networks" (ResNeXt), CVPR 2017;
  ``torchvision.models.resnext50_32x4d`` (torchvision/models/resnet.py): grouped convolutions, 32
  parallel paths per block expressed as one conv with ``groups=32``.
Both with random weights (``weights=None``), no download; timm's ``inception_v3`` /
``resnext50_32x4d`` are used when torchvision is missing. Inception-v3's dropout before the classifier
is off (``dropout=0.0``), as BERT's is, so that a training step is deterministic and comparable with
eager.

Sizes: ``gpu`` is the models' ImageNet input (299x299 for Inception-v3, 224x224 for ResNeXt-50, 1000
classes) at batch 32; ``cpu`` is a 75x75 (Inception's minimum) / 64x64 input, 10 classes, batch 2.

torchvision and timm are imported lazily: on a machine where they are missing or do not import next to
the installed torch (this repository's 2-core CPU machines, torch 2.13), :func:`build_inception_v3` and
:func:`build_resnext50` raise :class:`ModelUnavailable` and the runner records the cell as skipped.

Input: images ``[B, 3, H, W]``. Output: logits ``[B, classes]``.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from optimus_bench.models.base import BenchCase, ModelUnavailable, ce_loss, randn, resolve_size, seeded

INCEPTION_SIZES: dict[str, dict[str, Any]] = {
    "cpu": {"batch": 2, "image": 75, "classes": 10},
    "gpu": {"batch": 32, "image": 299, "classes": 1000},
}
RESNEXT_SIZES: dict[str, dict[str, Any]] = {
    "cpu": {"batch": 2, "image": 64, "classes": 10},
    "gpu": {"batch": 32, "image": 224, "classes": 1000},
}


def _constructor(torchvision_name: str, timm_name: str) -> Callable[..., nn.Module]:
    """A constructor ``f(num_classes) -> nn.Module`` from torchvision, else timm.

    Raises:
        ModelUnavailable: when neither imports (the message names both errors).
    """
    errors = []
    try:
        import torchvision.models as tvm

        ctor = getattr(tvm, torchvision_name)
        if torchvision_name == "inception_v3":
            return lambda num_classes: ctor(weights=None, aux_logits=False, init_weights=False, dropout=0.0,
                                            num_classes=num_classes)
        return lambda num_classes: ctor(weights=None, num_classes=num_classes)
    except Exception as exc:  # ImportError, or an operator registration error against this torch
        errors.append(f"torchvision: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    try:
        import timm

        return lambda num_classes: timm.create_model(timm_name, pretrained=False, num_classes=num_classes,
                                                     drop_rate=0.0)
    except Exception as exc:
        errors.append(f"timm: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    raise ModelUnavailable(f"{torchvision_name} needs torchvision or timm, and neither imports here ("
                           + "; ".join(errors) + ")")


def _build(name: str, sizes: dict, tv: str, tm: str, size, device, dtype, seed, overrides) -> BenchCase:
    cfg = resolve_size(sizes, size, overrides)
    ctor = _constructor(tv, tm)
    with seeded(seed):
        model = ctor(cfg["classes"])
    gen = torch.Generator().manual_seed(seed + 1)
    x = randn(gen, cfg["batch"], 3, cfg["image"], cfg["image"], device=device, dtype=dtype)
    labels = torch.randint(0, cfg["classes"], (cfg["batch"],), generator=gen).to(device)
    return BenchCase(name, model.to(device, dtype), (x,), labels, ce_loss, cfg["batch"], cfg, dtype)


def build_inception_v3(size: str | dict = "cpu", *, device: str | torch.device = "cpu",
                       dtype: torch.dtype = torch.float32, seed: int = 0, overrides: dict | None = None) -> BenchCase:
    """Inception-v3 (no auxiliary head) at a size preset, with images and class labels."""
    return _build("inception_v3", INCEPTION_SIZES, "inception_v3", "inception_v3", size, device, dtype, seed,
                  overrides)


def build_resnext50(size: str | dict = "cpu", *, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32, seed: int = 0, overrides: dict | None = None) -> BenchCase:
    """ResNeXt-50 32x4d at a size preset, with images and class labels."""
    return _build("resnext50", RESNEXT_SIZES, "resnext50_32x4d", "resnext50_32x4d", size, device, dtype, seed,
                  overrides)
