"""Library entry point: ``optimize(gm, example_inputs, strategy=...) -> (GraphModule, Report)``."""

from __future__ import annotations

import time
import warnings
from collections import Counter
from typing import Iterable, Sequence

import torch
from torch.fx import GraphModule

from optimus_eq.cost import GPUCostModel
from optimus_eq.egraph import EGraph, Limits
from optimus_eq.extract import EGraphView, extract
from optimus_eq.patterns import DEFAULT_REGISTRY, PatternRegistry
from optimus_eq.report import Report

STRATEGIES = ("none", "greedy", "eqsat")

#: Reports of the most recent optimizations (newest last, at most 100), for the backend's users.
last_reports: list[Report] = []


def count_ops(gm: GraphModule) -> Counter:
    """Op kind -> number of FX nodes (``"split"``, ``"cat"``, ``"placeholder"``, ...)."""
    from optimus_bridge.vocab import op_kind

    return Counter(op_kind(n) for n in gm.graph.nodes)


def _strategy(name: str):
    if name == "eqsat":
        from optimus_eq import saturate

        return saturate
    if name == "greedy":
        import optimus_greedy

        return optimus_greedy
    raise ValueError(f"unknown strategy {name!r}; valid: {STRATEGIES}")


def _ensure_meta(gm: GraphModule, example_inputs: Sequence | None) -> None:
    """Give every node FakeTensor meta (dynamo graphs have it; symbolic_trace graphs do not)."""
    from optimus_bridge.translate import meta_val

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if all(meta_val(n) is not None for n in gm.graph.nodes if n.op != "output"):
        return
    if example_inputs is None:
        raise ValueError("the graph has no FakeTensor meta; pass example_inputs")
    if len(example_inputs) != len(placeholders):
        raise ValueError(f"{len(example_inputs)} example inputs for {len(placeholders)} placeholders")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = torch._guards.detect_fake_mode(example_inputs) or FakeTensorMode(allow_non_fake_inputs=True)
    FakeTensorProp(gm, mode).propagate(*example_inputs)
    for n in gm.graph.nodes:
        if "val" in n.meta:
            n.meta.setdefault("example_value", n.meta["val"])


def optimize(
    gm: GraphModule,
    example_inputs: Sequence | None = None,
    strategy: str = "eqsat",
    *,
    patterns: Iterable[str] | None = None,
    limits: Limits | None = None,
    extractor: str = "auto",
    cost_model: GPUCostModel | None = None,
    ilp_seconds: float = 10.0,
    ilp_max_nodes: int = 40_000,
    registry: PatternRegistry = DEFAULT_REGISTRY,
    pattern_options: dict | None = None,
) -> tuple[GraphModule, Report]:
    """Optimize a Torch-IR FX graph with one search strategy over the registered pattern set.

    Args:
        gm: the graph, e.g. as dynamo hands it to a backend (parameters are placeholders). Nodes
            should carry FakeTensor meta (``example_value`` or ``val``); otherwise it is computed from
            ``example_inputs``.
        example_inputs: one tensor per placeholder (only needed when meta is missing).
        strategy: ``"eqsat"`` (equality saturation + cost-based extraction), ``"greedy"`` (Optimus-
            style destructive passes in a fixed order) or ``"none"`` (unchanged).
        patterns: names of the patterns to use (default: all ``pre_grad`` patterns).
        limits: iteration, e-node and time limits of the search.
        extractor: ``"auto"``, ``"tree"`` or ``"ilp"`` (see :mod:`optimus_eq.extract`).
        cost_model: the GPU cost model (microseconds per e-node).
        ilp_seconds: time budget of the ILP extractor, seconds.
        ilp_max_nodes: ``"auto"`` uses the ILP only up to this many reachable e-nodes.
        registry: where patterns are looked up.
        pattern_options: pattern name -> options of that pattern (horizontal patterns:
            ``min_fuse_set_size``, ``max_fuse_set_size``, ``max_fuse_search_depth``).

    Returns:
        ``(graph, report)``: a new GraphModule with the same inputs and outputs (the input ``gm``
        itself for ``"none"`` or after a fallback) and a :class:`Report`.

    Raises:
        ValueError: for an unknown strategy, pattern or option name (the message lists the valid ones).

    Any failure inside translation, search, extraction or lowering returns the original graph with
    one warning naming the cause (``report.fallback``); the user's model is never made wrong.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {STRATEGIES}")
    chosen = registry.select(patterns, "pre_grad")
    pattern_options = dict(pattern_options or {})
    _check_options(chosen, pattern_options)
    report = Report(strategy=strategy)
    report.ops_before = count_ops(gm)
    report.nodes_before = len(gm.graph.nodes)
    start = time.perf_counter()
    result = gm
    if strategy != "none":
        phases = ["translate"]
        try:
            result = _run(gm, example_inputs, strategy, chosen, limits or Limits(), extractor,
                          cost_model or GPUCostModel(), ilp_seconds, ilp_max_nodes, registry, report, phases,
                          pattern_options)
        except Exception as exc:  # fail-safe: never break the user's model
            report.fallback = f"{phases[-1]} failed: {type(exc).__name__}: {exc}"
            warnings.warn(f"optimus_eq: {report.fallback}; returning the original graph", stacklevel=2)
            _counters()["fallback"] += 1
            result = gm
    report.times["total"] = time.perf_counter() - start
    report.ops_after = count_ops(result)
    report.nodes_after = len(result.graph.nodes)
    for name, n in report.patterns_fired.items():
        _counters()[name] += n
    last_reports.append(report)
    del last_reports[:-100]
    return result, report


def _check_options(chosen, options: dict) -> None:
    from optimus_eq.horizontal.driver import pattern_options

    by_name = {p.name: p for p in chosen}
    unknown = [n for n in options if n not in by_name]
    if unknown:
        raise ValueError(f"options for pattern(s) not chosen {unknown}; chosen: {sorted(by_name)}")
    for name in options:
        if by_name[name].kind == "horizontal":
            pattern_options(by_name[name], options)


def _counters():
    from torch._dynamo.utils import counters

    return counters["optimus_eq"]


def _run(gm, example_inputs, strategy, patterns, limits, extractor, cost_model, ilp_seconds, ilp_max_nodes,
         registry, report, phases, pattern_options=None) -> GraphModule:
    from optimus_bridge.lower import lower
    from optimus_bridge.translate import translate

    search_mod = _strategy(strategy)

    t0 = time.perf_counter()
    _ensure_meta(gm, example_inputs)
    tr = translate(gm)
    egraph = EGraph(patterns, subsume=search_mod.SUBSUME)
    egraph.insert(tr.rows)
    report.left_opaque = len(tr.kept)
    if tr.normalized and "normalization_pass" in {p.name for p in patterns}:
        report.patterns_fired["normalization_pass"] = tr.normalized
    report.times["translate"] = (t1 := time.perf_counter()) - t0

    phases.append("search")
    from optimus_eq.horizontal import HorizontalContext, fuse_round

    hctx = HorizontalContext(tr, cost_model, extractor, ilp_seconds, ilp_max_nodes, pattern_options or {})
    result = search_mod.search(egraph, patterns, limits,
                               horizontal=lambda eg, ps, destructive: fuse_round(eg, ps, hctx, destructive))
    report.patterns_fired.update(hctx.fired)
    report.iterations, report.stop_reason = result.iterations, result.stop_reason
    for rule, n in result.rule_matches.items():
        owner = registry.owner_of(rule)
        if owner is not None and n:
            report.patterns_fired[owner] += n
    report.times["search"] = (t2 := time.perf_counter()) - t1

    phases.append("extract")
    view = EGraphView.from_egraph(egraph)
    if view.inconsistent:
        raise RuntimeError(f"inconsistent e-graph after search ({view.inconsistent[0]})")
    report.egraph_nodes, report.egraph_classes = len(view.nodes), len(view.classes)
    root_nodes = list(dict.fromkeys(tr.roots))
    roots = list(dict.fromkeys(view.node_of[tr.node_id[n]] for n in root_nodes))
    forced = {nid for nid, en in view.nodes.items()
              if en.op in ("Leaf", "Apply") and en.literals and en.literals[0] in tr.opaque_keys}
    ex = extract(view, roots, forced, cost_model, method=extractor, seconds=ilp_seconds,
                 ilp_max_nodes=ilp_max_nodes)
    report.extractor, report.extract_note, report.cost_after = ex.method, ex.note, ex.dag_cost
    report.times["extract"] = (t3 := time.perf_counter()) - t2

    phases.append("lower")
    out = lower(tr, view, ex.choice)
    report.times["lower"] = time.perf_counter() - t3
    return out
