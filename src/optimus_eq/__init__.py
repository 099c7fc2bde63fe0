"""optimus-eq: equality saturation (and greedy) graph optimization of PyTorch FX graphs.

Library use::

    gm2, report = optimus_eq.optimize(gm, example_inputs, strategy="eqsat")

torch.compile use::

    torch.compile(model, backend="optimus_eq")                       # eqsat, then Inductor
    torch.compile(model, backend=optimus_eq.backend(strategy="greedy"))
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


def list_patterns() -> list[tuple[str, tuple[str, ...], str]]:
    """Registered patterns as ``(name, IR levels, kind)``, in greedy pass order."""
    return [(p.name, p.levels, p.kind) for p in DEFAULT_REGISTRY]


__all__ = ["STRATEGIES", "DEFAULT_REGISTRY", "HorizontalPattern", "Limits", "Pattern", "Report", "Rule", "backend",
           "count_ops",
           "last_reports", "list_patterns", "optimize"]
