"""torch.compile hooks: the ``optimus_eq`` backend (registered through the ``torch_dynamo_backends``
entry point) and :func:`backend` for options."""

from __future__ import annotations

import warnings
from typing import Callable


def backend(strategy: str = "eqsat", compile: bool = True, inductor_config: dict | None = None,
            **options) -> Callable:
    """A torch.compile backend that optimizes the dynamo graph, then compiles it with Inductor.

    Args:
        strategy: ``"eqsat"``, ``"greedy"`` or ``"none"`` (Inductor alone).
        compile: hand the result to Inductor's ``compile_fx`` (False: run the optimized graph eagerly).
        inductor_config: Inductor config patches passed to ``compile_fx`` (e.g. ``{"triton.cudagraphs": True}``).
        **options: passed to :func:`optimus_eq.optimize` (patterns, limits, extractor,
            pre_grad_fusion_options / post_grad_fusion_options in the built-in Optimus format, ...).

    Raises:
        ValueError, NotImplementedError: for a bad strategy or pattern name, at once (not at the first
            compile).

    If Inductor fails on the optimized graph, the original graph is compiled instead (one warning).
    """
    from optimus_eq.api import STRATEGIES, optimize

    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {STRATEGIES}")
    _check_options(options)

    def optimus_eq_backend(gm, example_inputs):
        optimized, report = optimize(gm, example_inputs, strategy=strategy, **options)
        if not compile:
            return optimized.forward
        from torch._inductor.compile_fx import compile_fx

        patches = dict(inductor_config or {})
        try:
            return compile_fx(optimized, example_inputs, config_patches=patches)
        except Exception as exc:
            if optimized is gm:
                raise
            warnings.warn(f"optimus_eq: Inductor failed on the optimized graph ({type(exc).__name__}: {exc}); "
                          "compiling the original graph", stacklevel=2)
            report.fallback = f"inductor failed: {type(exc).__name__}: {exc}"
            return compile_fx(gm, example_inputs, config_patches=patches)

    return optimus_eq_backend


def _check_options(options: dict) -> None:
    """Validate pattern names and Optimus option dictionaries when the backend is built."""
    from optimus_eq.api import DEFAULT_REGISTRY
    from optimus_eq.options import select_patterns

    select_patterns(options.get("registry", DEFAULT_REGISTRY), options.get("patterns"), "pre_grad",
                    pre_grad_fusion_options=options.get("pre_grad_fusion_options"),
                    post_grad_fusion_options=options.get("post_grad_fusion_options"))


def optimus_eq_backend(gm, example_inputs):
    """The backend registered as ``"optimus_eq"``: eqsat, then Inductor."""
    return backend()(gm, example_inputs)
