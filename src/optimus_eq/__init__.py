"""optimus-eq: equality saturation (and greedy) graph optimization of PyTorch FX graphs.

Library use::

    gm2, report = optimus_eq.optimize(gm, example_inputs, strategy="eqsat")

torch.export use::

    ep2, report = optimus_eq.optimize_exported(torch.export.export(model, args))

torch.compile use::

    torch.compile(model, backend="optimus_eq")                       # eqsat, then Inductor
    torch.compile(model, backend=optimus_eq.backend(strategy="greedy"))
    torch.compile(model, backend=optimus_eq.backend(post_grad=True))  # also the Aten-IR graphs (fw + bw)

Inductor's post-grad hook, for users who set Inductor's config themselves::

    torch._inductor.config.post_grad_custom_pre_pass = optimus_eq.post_grad_pass(strategy="eqsat")
    torch._inductor.config.pre_grad_custom_pass = optimus_eq.pre_grad_pass(strategy="eqsat")
"""

from optimus_eq.api import STRATEGIES, count_ops, last_reports, optimize
from optimus_eq.egraph import Limits
from optimus_eq.patterns import DEFAULT_REGISTRY, HorizontalPattern, Pattern, Rule
from optimus_eq.report import Report


def backend(strategy: str = "eqsat", **options):
    """A torch.compile backend: optimize with ``strategy``, then compile with Inductor's compile_fx.

    See :func:`optimus_bridge.backend.backend` for the options.
    """
    from optimus_bridge.backend import backend as _backend

    return _backend(strategy=strategy, **options)


def post_grad_pass(strategy: str = "eqsat", **options):
    """Inductor's post-grad custom pass (a ``CustomGraphPass`` with a ``uuid``) that optimizes the Aten-IR
    graphs AOTAutograd produces, forward and backward, in place.

    Set it as ``torch._inductor.config.post_grad_custom_pre_pass`` (or ``_post_pass``). ``options`` go to
    :func:`optimize` (``patterns`` are post-grad pattern names). See
    :class:`optimus_bridge.post_grad.PostGradPass`.
    """
    from optimus_bridge.post_grad import PostGradPass

    return PostGradPass(strategy, **options)


def optimize_exported(ep, example_inputs=None, strategy: str = "eqsat", **options):
    """Optimize a ``torch.export.ExportedProgram`` (Aten-IR, post-grad patterns) and export the result again:
    ``(ExportedProgram, Report)``. See :func:`optimus_bridge.export.optimize_exported`."""
    from optimus_bridge.export import optimize_exported as _optimize_exported

    return _optimize_exported(ep, example_inputs, strategy, **options)


def pre_grad_pass(strategy: str = "eqsat", **options):
    """Inductor's pre-grad custom pass (``torch._inductor.config.pre_grad_custom_pass``, a ``CustomGraphPass``
    with a ``uuid``): optimizes the Torch-IR graph Dynamo captured, in place, inside ``backend="inductor"``.
    See :class:`optimus_bridge.post_grad.PreGradPass`."""
    from optimus_bridge.post_grad import PreGradPass

    return PreGradPass(strategy, **options)


def list_patterns() -> list[tuple[str, tuple[str, ...], str]]:
    """Registered patterns as ``(name, IR levels, kind)``, in greedy pass order."""
    return [(p.name, p.levels, p.kind) for p in DEFAULT_REGISTRY]


__all__ = ["STRATEGIES", "DEFAULT_REGISTRY", "HorizontalPattern", "Limits", "Pattern", "Report", "Rule", "backend",
           "count_ops", "last_reports", "list_patterns", "optimize", "optimize_exported", "post_grad_pass", "pre_grad_pass"]
