"""torch.compile hooks: the ``optimus_eq`` backend (registered through the ``torch_dynamo_backends``
entry point) and :func:`backend` for options."""

from __future__ import annotations

import warnings
from typing import Callable


def backend(strategy: str = "eqsat", compile: bool = True, inductor_config: dict | None = None,
            pre_grad: bool = True, post_grad: bool = False, post_grad_hook: str = "pre",
            post_grad_options: dict | None = None, **options) -> Callable:
    """A torch.compile backend that optimizes the dynamo graph, then compiles it with Inductor.

    Args:
        strategy: ``"eqsat"``, ``"greedy"`` or ``"none"`` (Inductor alone).
        compile: hand the result to Inductor's ``compile_fx`` (False: run the optimized graph eagerly).
        inductor_config: Inductor config patches passed to ``compile_fx`` (e.g. ``{"triton.cudagraphs": True}``).
        pre_grad: optimize the Torch-IR graph dynamo captures (before AOTAutograd).
        post_grad: also optimize the Aten-IR graphs AOTAutograd produces (forward and backward), as
            Inductor's post-grad custom pass (:class:`optimus_bridge.post_grad.PostGradPass`); needs
            ``compile=True``. A post-grad pass already set in ``inductor_config`` or Inductor's config
            runs first.
        post_grad_hook: ``"pre"`` (``post_grad_custom_pre_pass``: before Inductor's own post-grad
            passes) or ``"post"`` (``post_grad_custom_post_pass``: after them).
        post_grad_options: options of the post-grad pass (default: ``options`` without ``patterns``).
        **options: passed to :func:`optimus_eq.optimize` (patterns, limits, extractor, ...).

    If Inductor fails on the optimized graph, the original graph is compiled instead (one warning).

    Raises:
        ValueError: for an unknown strategy or hook, or ``post_grad=True`` with ``compile=False``.
    """
    from optimus_eq.api import STRATEGIES, optimize

    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {STRATEGIES}")
    if post_grad and not compile:
        raise ValueError("post_grad=True needs compile=True (the post-grad pass runs inside Inductor)")
    base_patches = dict(inductor_config or {})
    if post_grad:
        from optimus_bridge.post_grad import PostGradPass, install

        pg_options = post_grad_options if post_grad_options is not None else \
            {k: v for k, v in options.items() if k != "patterns"}
        install(base_patches, PostGradPass(strategy, **pg_options), post_grad_hook)

    def optimus_eq_backend(gm, example_inputs):
        if pre_grad:
            optimized, report = optimize(gm, example_inputs, strategy=strategy, **options)
        else:
            optimized, report = gm, None
        if not compile:
            return optimized.forward
        from torch._inductor.compile_fx import compile_fx

        patches = dict(base_patches)
        try:
            return compile_fx(optimized, example_inputs, config_patches=patches)
        except Exception as exc:
            if optimized is gm or report is None:
                raise
            warnings.warn(f"optimus_eq: Inductor failed on the optimized graph ({type(exc).__name__}: {exc}); "
                          "compiling the original graph", stacklevel=2)
            report.fallback = f"inductor failed: {type(exc).__name__}: {exc}"
            return compile_fx(gm, example_inputs, config_patches=patches)

    return optimus_eq_backend


def optimus_eq_backend(gm, example_inputs):
    """The backend registered as ``"optimus_eq"``: eqsat, then Inductor."""
    return backend()(gm, example_inputs)
