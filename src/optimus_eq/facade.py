"""The public entry points that need the bridge: ``optimize`` (:mod:`optimus_eq.api`), the torch.compile
backend, Inductor's pre-grad and post-grad custom passes, and ``torch.export`` programs.

``import optimus_eq`` gives these names on first use (the package's ``__getattr__``): every core module is
imported through the package, so its ``__init__`` imports only the core, and this module, above the core and
the bridge, imports both (docs/DESIGN.md, "Layers").
"""

from __future__ import annotations

from optimus_bridge import post_grad as _post_grad
from optimus_bridge.backend import backend as _backend
from optimus_bridge.export import optimize_exported as _optimize_exported
from optimus_eq.api import STRATEGIES, count_ops, last_reports, optimize


def backend(strategy: str = "eqsat", **options):
    """A torch.compile backend: optimize with ``strategy``, then compile with Inductor's compile_fx.

    See :func:`optimus_bridge.backend.backend` for the options.
    """
    return _backend(strategy=strategy, **options)


def post_grad_pass(strategy: str = "eqsat", **options):
    """Inductor's post-grad custom pass (a ``CustomGraphPass`` with a ``uuid``) that optimizes the Aten-IR
    graphs AOTAutograd produces, forward and backward, in place.

    Set it as ``torch._inductor.config.post_grad_custom_pre_pass`` (or ``_post_pass``). ``options`` go to
    :func:`optimize` (``patterns`` are post-grad pattern names). See
    :class:`optimus_bridge.post_grad.PostGradPass`.
    """
    return _post_grad.PostGradPass(strategy, **options)


def optimize_exported(ep, example_inputs=None, strategy: str = "eqsat", **options):
    """Optimize a ``torch.export.ExportedProgram`` (Aten-IR, post-grad patterns) and export the result again:
    ``(ExportedProgram, Report)``. See :func:`optimus_bridge.export.optimize_exported`."""
    return _optimize_exported(ep, example_inputs, strategy, **options)


def pre_grad_pass(strategy: str = "eqsat", **options):
    """Inductor's pre-grad custom pass (``torch._inductor.config.pre_grad_custom_pass``, a ``CustomGraphPass``
    with a ``uuid``): optimizes the Torch-IR graph Dynamo captured, in place, inside ``backend="inductor"``.
    See :class:`optimus_bridge.post_grad.PreGradPass`."""
    return _post_grad.PreGradPass(strategy, **options)


__all__ = ["STRATEGIES", "backend", "count_ops", "last_reports", "optimize", "optimize_exported", "post_grad_pass",
           "pre_grad_pass"]
