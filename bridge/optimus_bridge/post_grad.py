"""Inductor's post-grad hook: optimize the Aten-IR graphs AOTAutograd produces (forward and backward).

Inductor calls ``config.post_grad_custom_pre_pass`` / ``post_grad_custom_post_pass`` with the
``torch.fx.Graph`` of every graph it compiles, after AOTAutograd (torch/_inductor/fx_passes/post_grad.py,
``post_grad_passes``), and expects the graph edited in place. :class:`PostGradPass` is such a pass, a
``CustomGraphPass`` (torch/_inductor/custom_graph_pass.py) whose :meth:`~PostGradPass.uuid` keys
Inductor's FX graph cache: it changes when this package's source, the options or the registered
patterns change.

The pre pass (the default hook) runs before Inductor's own post-grad pattern passes and
``remove_noop_ops``, so they also see (and clean up after) the optimized graph; the post pass runs after
them, right before lowering.
"""

from __future__ import annotations

import functools
import hashlib
import os
import warnings
from typing import Any, Sequence

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch.fx import Graph, GraphModule, Node

import optimus_greedy
from optimus_bridge.lower_table import INSIDE_INDUCTOR
from optimus_eq import api
from optimus_eq.patterns import DEFAULT_REGISTRY
from optimus_eq.report import Report

HOOKS = {"pre": "post_grad_custom_pre_pass", "post": "post_grad_custom_post_pass"}


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
    """sha256 of the source files of optimus_eq, optimus_greedy and optimus_bridge."""
    h = hashlib.sha256()
    roots = [os.path.dirname(m.__file__) for m in (api, optimus_greedy)] + [os.path.dirname(__file__)]
    for root in roots:
        for folder, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    h.update(os.path.relpath(path, os.path.dirname(root)).encode())
                    with open(path, "rb") as f:
                        h.update(f.read())
    return h.hexdigest()


def _registry_fingerprint(registry) -> str:
    """The registered patterns (names, levels, rule texts): user registrations change the uuid."""
    parts = [f"{p.name}|{p.levels}|{p.kind}|" + ";".join(r.to_egglog("x", False) for r in p.rules)
             for p in registry]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


class PostGradPass(CustomGraphPass):
    """optimus-eq as an Inductor post-grad custom pass (Aten-IR).

    Args:
        strategy: ``"eqsat"``, ``"greedy"`` or ``"none"``.
        **options: passed to :func:`optimus_eq.optimize` (``patterns``: post-grad pattern names,
            ``limits``, ``extractor``, ...); ``level`` is always ``"post_grad"``.

    Calling it on a graph optimizes the graph in place (:func:`optimize_in_place`); any internal failure
    leaves the graph exactly as it was, with one warning. The reports go to
    :data:`optimus_eq.last_reports` (``report.level == "post_grad"``) and the firings to
    ``torch._dynamo.utils.counters["optimus_eq"]`` under the pattern names; ``"post_grad_graphs"`` counts
    the graphs seen.

    Raises:
        ValueError: for an unknown strategy or pattern name, or ``pattern_options`` of a pattern not chosen
            (a pre-grad one) or with unknown option names, at construction.
    """

    #: the IR level of the graphs Inductor hands this hook
    LEVEL = "post_grad"

    def __init__(self, strategy: str = "eqsat", **options: Any) -> None:
        if strategy not in api.STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; valid: {api.STRATEGIES}")
        if "level" in options:
            raise TypeError(f"{type(self).__name__} always optimizes at level {self.LEVEL!r}")
        # names, types, ranges and option dictionaries checked now, not inside Inductor's compile
        api.check_options(strategy, f"{type(self).__name__}()", level=self.LEVEL, **options)
        self.strategy, self.options = strategy, options

    def __call__(self, graph: Graph) -> None:
        token = INSIDE_INDUCTOR.set(True)
        try:
            optimize_in_place(graph, self.strategy, level=self.LEVEL, **self.options)
        finally:
            INSIDE_INDUCTOR.reset(token)

    def uuid(self) -> str:
        """Identifies the pass for Inductor's cache: source files, strategy, options, registered patterns."""
        opts = {k: v for k, v in self.options.items() if k != "registry"}
        text = "|".join([_source_hash(), self.LEVEL, self.strategy, repr(sorted(opts.items(), key=lambda kv: kv[0])),
                         _registry_fingerprint(self.options.get("registry", DEFAULT_REGISTRY))])
        return hashlib.sha256(text.encode()).hexdigest()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(strategy={self.strategy!r})"


class PreGradPass(PostGradPass):
    """optimus-eq as Inductor's pre-grad custom pass (``torch._inductor.config.pre_grad_custom_pass``):
    the Torch-IR graph Dynamo captured, optimized in place before AOTAutograd, so a user keeps
    ``backend="inductor"`` and every Inductor option. Same arguments, reports and fail-safe as
    :class:`PostGradPass` (``level`` is ``"pre_grad"``; ``patterns`` are pre-grad names). Its ``uuid`` lets
    Inductor run it after the cache lookup (``pre_grad_pass_timing`` "late").

    Inductor runs its own pre-grad passes, the built-in Optimus passes among them, before this hook on the
    same graph (torch/_inductor/fx_passes/pre_grad.py); turn them off (``pre_grad_fusion_options = {}``)
    to let this pass own the patterns.
    """

    LEVEL = "pre_grad"


class ChainedPass(CustomGraphPass):
    """Several post-grad passes run in order as one (a user's own pass, then ours), with one uuid.

    The uuid is None (Inductor then skips its cache) if any member is a plain callable without one.
    """

    def __init__(self, passes: Sequence) -> None:
        self.passes = list(passes)

    def __call__(self, graph: Graph) -> None:
        for p in self.passes:
            p(graph)

    def uuid(self):
        ids = [p.uuid() if hasattr(p, "uuid") else None for p in self.passes]
        if any(i is None for i in ids):
            return None
        return hashlib.sha256(repr(ids).encode()).hexdigest()


def install(config_patches: dict, post_grad_pass: CustomGraphPass, hook: str = "pre") -> dict:
    """Add ``post_grad_pass`` to Inductor ``config_patches`` (a dict for ``compile_fx``) at ``hook``.

    A pass the user already set (in ``config_patches`` or in ``torch._inductor.config``) runs first.
    Returns ``config_patches``.

    Raises:
        ValueError: for a hook other than ``"pre"`` or ``"post"``.
    """
    if hook not in HOOKS:
        raise ValueError(f"unknown hook {hook!r}; valid: {sorted(HOOKS)}")
    import torch._inductor.config as inductor_config

    key = HOOKS[hook]
    existing = config_patches.get(key, getattr(inductor_config, key, None))
    if existing is None:
        config_patches[key] = post_grad_pass
    else:
        members = list(existing) if isinstance(existing, (list, tuple)) else [existing]
        config_patches[key] = ChainedPass([*members, post_grad_pass])
    return config_patches


def optimize_in_place(graph: Graph | GraphModule, strategy: str = "eqsat", level: str = "post_grad",
                      **options: Any):
    """Optimize an Aten-IR (``level="post_grad"``) or Torch-IR (``"pre_grad"``) graph in place: its nodes are
    replaced by the optimized graph's.

    ``graph`` is the ``torch.fx.Graph`` Inductor hands a custom pass (its ``owning_module`` supplies the
    attributes of ``get_attr`` nodes) or a GraphModule. Placeholders (and their meta) stay; every other
    node is replaced by the lowered graph's, which keeps opaque nodes (and so the order of side effects)
    in their original relative order; ``val`` meta is filled. The module is recompiled.

    Returns:
        the :class:`optimus_eq.Report` (``report.fallback`` says why the graph was left as it was).
    """
    gm = graph if isinstance(graph, GraphModule) else graph.owning_module
    api._counters()[f"{level}_graphs"] += 1
    if gm is None:
        warnings.warn(f"optimus_eq: {level} graph has no owning module; left unchanged", stacklevel=2)
        report = Report(strategy=strategy, level=level)
        report.fallback = "graph has no owning module"
        return report
    new_gm, report = api.optimize(gm, None, strategy=strategy, level=level, **options)
    if new_gm is gm:
        return report
    try:
        replace_graph(gm.graph, new_gm.graph)
    except Exception as exc:  # replace_graph restored the graph
        report.fallback = f"in-place replacement failed: {type(exc).__name__}: {exc}"
        warnings.warn(f"optimus_eq: {report.fallback}; graph left unchanged", stacklevel=2)
        api._counters()["fallback"] += 1
        return report
    gm.recompile()
    return report


def replace_graph(graph: Graph, new_graph: Graph) -> None:
    """Replace every non-placeholder node of ``graph`` by (copies of) ``new_graph``'s, in place.

    ``new_graph`` must have the same placeholders (same count and targets) in the same order.
    On failure before the old nodes are removed, ``graph`` is restored and the exception re-raised.

    Raises:
        ValueError: if the placeholders differ or an old node would still be used.
    """
    old_ph = [n for n in graph.nodes if n.op == "placeholder"]
    new_ph = [n for n in new_graph.nodes if n.op == "placeholder"]
    if [n.target for n in old_ph] != [n.target for n in new_ph]:
        raise ValueError("the optimized graph has other placeholders")
    old_out = next(n for n in reversed(graph.nodes) if n.op == "output")
    new_out = next(n for n in reversed(new_graph.nodes) if n.op == "output")
    old_body = [n for n in graph.nodes if n.op not in ("placeholder", "output")]
    env: dict[Node, Node] = dict(zip(new_ph, old_ph))
    added: list[Node] = []
    old_args = old_out.args
    try:
        with graph.inserting_before(old_out):
            for n in new_graph.nodes:
                if n.op in ("placeholder", "output"):
                    continue
                env[n] = graph.node_copy(n, lambda a: env[a])
                added.append(env[n])
        old_out.args = torch.fx.node.map_arg(new_out.args, lambda a: env[a])
        body = set(old_body)
        for n in old_body:
            if any(u not in body for u in n.users):
                raise ValueError(f"old node {n.name} is still used")
    except Exception:
        old_out.args = old_args
        for n in reversed(added):
            graph.erase_node(n)
        raise
    for n in reversed(old_body):
        graph.erase_node(n)
