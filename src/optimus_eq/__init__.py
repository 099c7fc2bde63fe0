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

from optimus_eq.report import Report

#: Names of :mod:`optimus_eq.facade`, imported on first use (PEP 562): every core module is imported through
#: this package, and the facade imports the bridge, which imports the core (docs/DESIGN.md, "Layers").
_FACADE = frozenset(["STRATEGIES", "backend", "count_ops", "last_reports", "optimize", "optimize_exported",
                     "post_grad_pass", "pre_grad_pass"])
#: Names of the core that import torch and egglog, also imported on first use: ``import optimus_eq`` (and so
#: ``optimus-eq --help``, whose module lives in this package) loads neither.
_CORE = frozenset(["DEFAULT_REGISTRY", "HorizontalPattern", "Limits", "Pattern", "Rule"])


def __getattr__(name: str):
    if name in _FACADE:
        from optimus_eq import facade  # first use of a public entry point: the bridge, then the facade

        globals().update({n: getattr(facade, n) for n in _FACADE})
        return globals()[name]
    if name in _CORE:
        from optimus_eq.egraph import Limits
        from optimus_eq.patterns import DEFAULT_REGISTRY, HorizontalPattern, Pattern, Rule

        globals().update(DEFAULT_REGISTRY=DEFAULT_REGISTRY, HorizontalPattern=HorizontalPattern, Limits=Limits,
                         Pattern=Pattern, Rule=Rule)
        return globals()[name]
    raise AttributeError(f"module 'optimus_eq' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _FACADE | _CORE)


def list_patterns() -> list[tuple[str, tuple[str, ...], str]]:
    """Registered patterns as ``(name, IR levels, kind)``, in greedy pass order."""
    from optimus_eq.patterns import DEFAULT_REGISTRY

    return [(p.name, p.levels, p.kind) for p in DEFAULT_REGISTRY]


__all__ = ["STRATEGIES", "DEFAULT_REGISTRY", "HorizontalPattern", "Limits", "Pattern", "Report", "Rule", "backend",
           "count_ops", "last_reports", "list_patterns", "optimize", "optimize_exported", "post_grad_pass", "pre_grad_pass"]
