"""Library entry point: ``optimize(gm, example_inputs, strategy=...) -> (GraphModule, Report)``."""

from __future__ import annotations

import inspect
import time
import warnings
from collections import Counter
from typing import Iterable, Sequence

from torch.fx import GraphModule

from optimus_bridge.aten import ATEN_IR, translate_aten
from optimus_bridge.eager_terms import eager_terms
from optimus_bridge.grad_facts import facts as grad_facts, gradient_info
from optimus_bridge.graph_meta import _check_example_inputs, _ensure_meta, ir_level  # noqa: F401 (ir_level: public here)
from optimus_bridge import regions
from optimus_bridge.lower import lower
from optimus_bridge.plan_check import dearer_than_input
from optimus_bridge.provenance import kept_ops, kept_reasons, node_fates, rewritten_classes
from optimus_bridge.translate import translate
from optimus_bridge.vocab import op_kind
from optimus_eq import strategy as strategies, validate
from optimus_eq.ablation.taso import fingerprint
from optimus_eq.cost import GPUCostModel
from optimus_eq.egraph import EGraph, Limits, is_rust_panic
from optimus_eq.extract import EGraphView, NoAcyclicTerm, extract, input_cost, limit_notes, no_gc
from optimus_eq.extract.fusion import op_kinds
from optimus_eq.extract.grad import packable_leaves
from optimus_eq.horizontal import HorizontalContext, fuse_round
from optimus_eq.horizontal.driver import pattern_options as horizontal_options
from optimus_eq.logs import log_report
from optimus_eq.options import option_notes, select_patterns
from optimus_eq.plan_credit import credit_rewrites, groups_in_plan
from optimus_eq.patterns import DEFAULT_REGISTRY, PatternRegistry
from optimus_eq.report import Report

STRATEGIES = tuple(strategies.TABLE)  # ("none", "greedy", "eqsat", "taso", "tensat")
#: IR levels: Torch-IR graphs from dynamo (``pre_grad``), Aten-IR graphs from AOTAutograd (``post_grad``).
LEVELS = ("pre_grad", "post_grad")

#: Reports of the most recent optimizations (newest last, at most 100), for the backend's users.
last_reports: list[Report] = []


def count_ops(gm: GraphModule) -> Counter:
    """Op kind -> number of FX nodes (``"split"``, ``"cat"``, ``"placeholder"``, ...)."""
    return Counter(op_kind(n) for n in gm.graph.nodes)


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
    ilp_max_nodes: int = 4_000,
    registry: PatternRegistry = DEFAULT_REGISTRY,
    strategy_options: dict | None = None,
    level: str | None = None,
    pre_grad_fusion_options: dict | None = None,
    post_grad_fusion_options: dict | None = None,
    pattern_options: dict | None = None,
) -> tuple[GraphModule, Report]:
    """Optimize a Torch-IR (or Aten-IR) FX graph with one search strategy over the registered pattern set.

    Args:
        gm: the graph, e.g. as dynamo hands it to a backend (parameters are placeholders). Nodes
            should carry FakeTensor meta (``example_value`` or ``val``); otherwise it is computed from
            ``example_inputs``.
        example_inputs: one tensor per placeholder (only needed when meta is missing).
        strategy: ``"eqsat"`` (equality saturation + cost-based extraction), ``"greedy"`` (Optimus-
            style destructive passes in a fixed order), ``"none"`` (unchanged), or for ablation studies
            ``"taso"`` (cost-based backtracking search, :mod:`optimus_eq.ablation.taso`) and ``"tensat"``
            (multi-pattern rules in the first k iterations, ILP extraction, :mod:`optimus_eq.ablation.tensat`).
        patterns: names of the patterns to use (default: all patterns of ``level``).
        limits: iteration and e-node limits of the search, and ``seconds``, a wall-clock limit of the whole
            call: no saturation iteration, horizontal round or exact extraction starts after it, and an
            exact solve running then stops with its best plan (the fast plan is always completed, so the
            call may overrun by that and by lowering). ``report.limits`` says which limit stopped what.
        extractor: ``"auto"``, ``"tree"`` or ``"ilp"`` (see :mod:`optimus_eq.extract`); ``"auto"`` lets a
            strategy that names its own extractor use it (``tensat``: ``"ilp"``).
        cost_model: the GPU cost model (microseconds per e-node).
        ilp_seconds: time budget of the exact (ILP) part of each extraction, seconds.
        ilp_max_nodes: ``"auto"`` solves a component of the choice core exactly only up to this many
            e-nodes; larger ones keep the fast plan (tree plus local search).
        registry: where patterns are looked up.
        strategy_options: keyword options of the strategy's search (``taso``: ``alpha``; ``tensat``:
            ``k_multi``).
        level: None (the default: :func:`ir_level` reads it off the graph), ``"pre_grad"`` (a Torch-IR graph,
            as dynamo hands it to a backend) or ``"post_grad"``
            (an Aten-IR graph from AOTAutograd, nodes calling aten OpOverloads; the result calls aten
            OpOverloads too, with ``val`` meta, as Inductor's post-grad passes expect).
        pre_grad_fusion_options: the built-in Optimus option dictionary (``{pass name: {option: value}}``,
            as ``torch._inductor.config.pre_grad_fusion_options``; README, "Options in the built-in Optimus
            format"): its keys choose the patterns instead of ``patterns``, its values are stored on them
            (:mod:`optimus_eq.options`).
        post_grad_fusion_options: likewise for the post-grad level (chooses the patterns when ``level`` is
            ``"post_grad"``); both are validated.
        pattern_options: pattern name -> options of that pattern (horizontal patterns:
            ``min_fuse_set_size``, ``max_fuse_set_size``, ``max_fuse_search_depth``).

    Returns:
        ``(graph, report)``: a new GraphModule with the same inputs and outputs (the input ``gm``
        itself for ``"none"`` or after a fallback) and a :class:`Report`. Like a Dynamo graph, it is
        specialized to the inputs it was optimized for: their shapes (unless symbolic) and which of them
        require grad (meta or ``example_inputs``). Run with an input that requires grad where that one did
        not, a batched GEMM or layer can give a parameter that reaches no loss a zero gradient where eager
        leaves it None (an optimizer with weight decay then updates it): optimize with the inputs you train
        with. ``torch.compile`` with :func:`backend` guards this by recompiling.

    Raises:
        ValueError: for an unknown strategy, level, pattern, extractor or option name, an option value
            out of range (the message lists the valid ones; :mod:`optimus_eq.validate`), or
            ``example_inputs`` whose count is not the graph's number of placeholders.
        TypeError: for a ``gm`` that is not a GraphModule, or an option of the wrong type (``limits`` as a
            dict, ``min_fuse_set_size="two"``, a ``cost_model`` that is not one).
        NotImplementedError: for a built-in Optimus pass name that optimus_eq does not implement yet.

    ``patterns`` may also be a single pattern name (a string).

    Any failure inside translation, search, extraction or lowering returns the original graph with
    one warning naming the cause (``report.fallback``); the user's model is never made wrong.
    """
    if not isinstance(gm, GraphModule):
        raise TypeError(f"optimize() takes a torch.fx.GraphModule (e.g. torch.fx.symbolic_trace(model), or the gm "
                        f"dynamo hands a backend), got {type(gm).__name__}"
                        + ("; for an ExportedProgram call optimus_eq.optimize_exported"
                           if type(gm).__name__ == "ExportedProgram" else ""))
    if example_inputs is not None and not isinstance(example_inputs, (list, tuple)):
        raise TypeError(f"example_inputs must be a list or tuple (one per placeholder), got {type(example_inputs).__name__}")
    if level is None:
        level = ir_level(gm)
    if strategy != "none":
        _check_example_inputs(gm, example_inputs)
    chosen, pattern_options = _prepare(strategy, patterns, limits, extractor, cost_model, ilp_seconds, ilp_max_nodes,
                                       registry, strategy_options, level, pre_grad_fusion_options,
                                       post_grad_fusion_options, pattern_options)
    report = Report(strategy=strategy, level=level)
    for lv, opts in (("pre_grad", pre_grad_fusion_options), ("post_grad", post_grad_fusion_options)):
        if lv == level:
            report.notes.extend(option_notes(registry, opts, lv))
    report.ops_before = count_ops(gm)
    report.nodes_before = len(gm.graph.nodes)
    start, cpu_start = time.perf_counter(), time.process_time()
    result = gm
    if strategy != "none":
        phases = ["translate"]
        try:
            with no_gc():  # ~10^5 short-lived objects per 50k nodes: collections would cost more than the work
                limits = limits or Limits()
                result = _run(gm, example_inputs, strategy, chosen, limits, extractor,
                              cost_model or GPUCostModel(), ilp_seconds, ilp_max_nodes, registry, report, phases,
                              dict(strategy_options or {}), level, pattern_options, start + limits.seconds)
        except BaseException as exc:  # fail-safe: never break the user's model
            if not isinstance(exc, Exception) and not is_rust_panic(exc):
                raise  # KeyboardInterrupt, SystemExit: the user's, not ours
            report.fallback = f"{phases[-1]} failed: {type(exc).__name__}: {exc}"
            warnings.warn(f"optimus_eq: {report.fallback}; returning the original graph", stacklevel=2)
            _counters()["fallback"] += 1
            result = gm
    report.times["total"] = time.perf_counter() - start
    report.cpu_times["total"] = time.process_time() - cpu_start
    report.ops_after = count_ops(result)
    report.nodes_after = len(result.graph.nodes)
    for name, n in report.rule_matches.items():  # as the built-in passes count: matches (greedy: applied)
        _counters()[name] += n
    log_report(report)
    last_reports.append(report)
    del last_reports[:-100]
    return result, report


def _prepare(strategy, patterns, limits, extractor, cost_model, ilp_seconds, ilp_max_nodes, registry, strategy_options,
             level, pre_grad_fusion_options, post_grad_fusion_options, pattern_options):
    """Every check :func:`optimize` makes of its options before it touches the graph; returns the chosen
    patterns and the pattern options as a dict. Raises as :func:`optimize` documents. ``level`` None (read off
    the graph, which a caller checking options ahead of the graph does not have yet) is checked as
    ``"pre_grad"``, the level of the graphs Dynamo hands a backend."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {STRATEGIES}")
    level = "pre_grad" if level is None else level
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; valid: {LEVELS}")
    patterns = validate.pattern_names(patterns)
    validate.check_search_options(limits=limits, extractor=extractor, cost_model=cost_model, ilp_seconds=ilp_seconds,
                                  ilp_max_nodes=ilp_max_nodes, registry=registry, strategy_options=strategy_options,
                                  pattern_options=pattern_options)
    chosen = select_patterns(registry, patterns, level, pre_grad_fusion_options=pre_grad_fusion_options,
                             post_grad_fusion_options=post_grad_fusion_options)
    pattern_options = dict(pattern_options or {})
    _check_pattern_options(chosen, pattern_options)
    if strategy != "none":
        _check_strategy_options(strategy, strategy_options or {})
    return chosen, pattern_options


def check_options(strategy: str = "eqsat", where: str = "optimize()", **options) -> None:
    """Validate ``options`` as :func:`optimize` would (names, types, ranges, pattern and pass names), for
    callers that take optimize's options now and call it later (``backend``, ``post_grad_pass``), so that a
    bad option fails at their call, not at the first compile inside Dynamo.

    Raises:
        TypeError: for a name that is not an option of :func:`optimize` (the message lists them; ``where``
            names the call), or a value of the wrong type.
        ValueError, NotImplementedError: as :func:`optimize`.
    """
    validate.check_names(options, validate.OPTIMIZE_OPTIONS, where)
    params = inspect.signature(optimize).parameters
    args = {name: options.get(name, params[name].default) for name in validate.OPTIMIZE_OPTIONS}
    _prepare(strategy, **args)


def _check_strategy_options(strategy: str, options: dict) -> None:
    """Raise ValueError for ``strategy_options`` the strategy's search does not take."""
    valid = list(strategies.get(strategy).options)
    unknown = [k for k in options if k not in valid]
    if unknown:
        raise ValueError(f"strategy {strategy!r} takes no option(s) {unknown}; valid: {valid}")


def _check_pattern_options(chosen, options: dict) -> None:
    """Raise ValueError for options of patterns not chosen, option names a pattern does not take, or values
    out of range; TypeError for values of the wrong type (``pattern_options`` here, and options stored on
    the patterns by ``pre_grad_fusion_options``; :mod:`optimus_eq.validate`)."""
    by_name = {p.name: p for p in chosen}
    unknown = [n for n in options if n not in by_name]
    if unknown:
        raise ValueError(f"options for pattern(s) not chosen {unknown}; chosen: {sorted(by_name)}")
    for p in chosen:
        if p.kind == "horizontal":
            validate.check_horizontal_values(p.name, horizontal_options(p, options))
        else:
            validate.check_vertical_options(p.name, p.options, options.get(p.name, {}))


def _counters():
    from torch._dynamo.utils import counters

    return counters["optimus_eq"]


def _roots_and_forced(view: EGraphView, tr) -> tuple[list, set]:
    """The e-classes a plan must compute (outputs, opaque terms) and the forced (opaque) e-nodes."""
    roots = list(dict.fromkeys(view.node_of[tr.node_id[n]] for n in dict.fromkeys(tr.roots)))
    forced = {nid for nid, en in view.nodes.items()
              if en.op in ("Leaf", "Apply") and en.literals and en.literals[0] in tr.opaque_keys}
    return roots, forced


def _objective(tr, cost_model, gradients=None, packable=frozenset()):
    """``egraph -> (DAG cost of its tree extraction, plan fingerprint)``, for searches that rank graphs."""
    def objective(egraph):
        view = EGraphView.from_egraph(egraph)
        view.gradients, view.op_kinds, view.packable = gradients, op_kinds(tr.recipes), packable
        roots, forced = _roots_and_forced(view, tr)
        ex = extract(view, roots, forced, cost_model, method="tree")
        return ex.dag_cost, fingerprint(view, roots, ex.choice)

    return objective


class _Plans:
    """Reads an e-graph and extracts its best plan, once per e-graph state: the horizontal round's plan and
    the final plan of ``optimize`` come from here, so when the round adds nothing and no rule fires
    afterwards (eqsat on a graph with no group worth fusing), the final extraction is the round's
    (this saves one e-graph read and one ILP extraction, about 1.5 s of 7 s at 50k FX nodes).

    Every read and extraction counts as the ``extract`` phase, wherever it runs: a failure in one reports
    ``extract failed`` (the fallback names the phase that failed) and its seconds go to
    ``report.times["extract"]``, not to ``search``.

    Args:
        tr: the bridge's Translation (roots, opaque keys).
        phases: ``optimize``'s phase stack (``"extract"`` is on top while a read or an extraction runs).
        cost_model, method, seconds, ilp_max_nodes: as :func:`optimus_eq.extract.extract`.
        gradients: :func:`optimus_bridge.grad_facts.gradient_info` of the graph (None: forward only), given to every view.

    Call with an :class:`EGraph` (and ``exact=False`` for a plan that only seeds a horizontal round: with
    ``method="auto"`` it is the fast plan, no exact stage; a later exact call on the same e-graph state runs only
    the exact stage on it, ``extract(resume=)``); returns ``(EGraphView, Extraction)``. Raises RuntimeError on an
    inconsistent e-graph (``EGraphView.inconsistent``) or when a root has no acyclic plan.
    ``deadline`` (a ``time.perf_counter()`` instant: the whole call's ``Limits.seconds``) is passed to every
    extraction.
    """

    def __init__(self, tr, phases: list, cost_model, method: str, seconds: float, ilp_max_nodes: int,
                 gradients=None, deadline: float | None = None, packable: frozenset = frozenset()) -> None:
        self.tr, self.phases, self.gradients, self.deadline = tr, phases, gradients, deadline
        self.packable = packable
        self.cost_model, self.method, self.seconds, self.ilp_max_nodes = cost_model, method, seconds, ilp_max_nodes
        self.spent = 0.0       # seconds spent reading and extracting
        self.cpu_spent = 0.0   # the same in CPU seconds of this process
        self.reads = 0         # e-graph reads done (the rest were reused)
        self._last = None      # ((id of the EGraph, its version), (view, extraction), extraction method)

    def __call__(self, egraph: EGraph, exact: bool = True):
        state = (id(egraph), egraph.version)
        method = self.method if exact or self.method != "auto" else "fast"
        if self._last is not None and self._last[0] == state and self._last[2] in (method, self.method):
            return self._last[1]
        self.phases.append("extract")
        t0, c0 = time.perf_counter(), time.process_time()
        for restore in (False, True, "all"):
            resume = None
            if restore is False and self._last is not None and self._last[0] == state:
                view, resume = self._last[1]  # the same e-graph state, extracted fast: only the exact stage left
            else:
                view = EGraphView.from_egraph(egraph, restore_subsumed=restore)
                view.gradients, view.op_kinds, view.packable = (self.gradients, op_kinds(self.tr.recipes),
                                                                self.packable)
            if view.inconsistent:
                raise RuntimeError(f"inconsistent e-graph ({view.inconsistent[0]})")
            roots, forced = _roots_and_forced(view, self.tr)
            try:
                ex = extract(view, roots, forced, self.cost_model, method=method, seconds=self.seconds,
                             ilp_max_nodes=self.ilp_max_nodes, deadline=self.deadline, resume=resume)
                break
            except NoAcyclicTerm:
                # greedy's destructive rewrites, then a merge, can leave a class nothing but removed
                # e-nodes (a view chain merged into its input), or close a cycle through a fused group whose members'
                # originals were removed (fuzz seed 1007226): read it again with those back, then with
                # every removed e-node back, as last resorts
                if restore == "all":
                    raise
        self.spent += time.perf_counter() - t0
        self.cpu_spent += time.process_time() - c0
        self.reads += resume is None
        self.phases.pop()
        self._last = (state, (view, ex), method)
        return view, ex


def _run(gm, example_inputs, strategy, patterns, limits, extractor, cost_model, ilp_seconds, ilp_max_nodes,
         registry, report, phases, strategy_options, level="pre_grad", pattern_options=None,
         deadline: float | None = None) -> GraphModule:
    if level == "pre_grad":
        gm = _ensure_meta(gm, example_inputs, level)
        segments = regions.split(gm)
        if segments is not None:
            return _run_segments(gm, segments, strategy, patterns, limits, extractor, cost_model, ilp_seconds,
                                 ilp_max_nodes, registry, report, phases, strategy_options, pattern_options, deadline)
    ir, translate_fn = (ATEN_IR, translate_aten) if level == "post_grad" else (None, translate)
    chosen = strategies.get(strategy)
    if extractor == "auto":
        extractor = chosen.extractor or extractor

    t0, c0 = time.perf_counter(), time.process_time()
    cpu = report.cpu_times
    gm = _ensure_meta(gm, example_inputs, level)
    tr = translate_fn(gm)
    with EGraph(patterns, subsume=chosen.destructive) as egraph:
        egraph.deadline = deadline
        egraph.insert(tr.rows)
        report.left_opaque = len(kept_ops(tr))
        report.kept_reasons = kept_reasons(tr, level)
        for canonical in (p.name for p in patterns if p.kind == "canonical" and level in p.levels):
            if tr.normalized:  # the translator's canonical forms: counted under the level's canonical pattern
                report.rule_matches[canonical] = report.patterns_fired[canonical] = tr.normalized
        report.times["translate"] = (t1 := time.perf_counter()) - t0
        cpu["translate"] = (c1 := time.process_time()) - c0

        phases.append("search")
        gradients = gradient_info(tr, level) if getattr(cost_model, "training", False) else None
        describe = getattr(cost_model, "describe", None)
        report.cost_model = describe(training=gradients is not None) if describe else type(cost_model).__name__
        report.training = gradients is not None
        packable = packable_leaves(tr, example_inputs, cost_model)
        plans = _Plans(tr, phases, cost_model, extractor, ilp_seconds, ilp_max_nodes, gradients, deadline, packable)
        # a round's plan only seeds its group search: the fast plan, no exact stage (the final plan gets it)
        hctx = HorizontalContext(tr, lambda eg: plans(eg, exact=False), pattern_options or {}, level=level,
                                 grad_facts=grad_facts, eager_terms=eager_terms)
        if chosen.needs_objective:
            strategy_options.setdefault("objective", _objective(tr, cost_model, gradients, packable))

        horizontal_s = [0.0, 0.0]  # wall, CPU

        def horizontal(eg, ps, destructive):
            t, c = time.perf_counter(), time.process_time()
            spent, cpu_spent = plans.spent, plans.cpu_spent
            try:
                return fuse_round(eg, ps, hctx, destructive)
            finally:  # the round's own work: its plan's read and extraction count as extract
                horizontal_s[0] += time.perf_counter() - t - (plans.spent - spent)
                horizontal_s[1] += time.process_time() - c - (plans.cpu_spent - cpu_spent)

        horizontal.reset = lambda: (hctx.fired.clear(), hctx.members.clear(), hctx.groups.clear())  # backtracking
        result = chosen.search(egraph, patterns, limits, **strategy_options, horizontal=horizontal)
        report.rule_matches.update(hctx.fired)
        report.iterations, report.stop_reason = result.iterations, result.stop_reason
        for rule, n in result.rule_matches.items():
            owner = registry.owner_of(rule)
            if owner is not None and n:
                report.rule_matches[owner] += n
        t2, c2 = time.perf_counter(), time.process_time()
        in_search, cpu_in_search = plans.spent, plans.cpu_spent  # the horizontal rounds' reads and extractions: extract phase time
        report.times["search"] = t2 - t1 - in_search
        report.times["horizontal"] = horizontal_s[0]
        cpu["search"], cpu["horizontal"] = c2 - c1 - cpu_in_search, horizontal_s[1]
        if result.stop_reason in ("time_limit", "iteration_limit", "node_limit"):
            what = {"time_limit": f"the time limit (Limits.seconds = {limits.seconds:g} s for the whole call)",
                    "iteration_limit": f"Limits.iterations = {limits.iterations}",
                    "node_limit": f"Limits.nodes = {limits.nodes}"}[result.stop_reason]
            report.limits.append(f"search stopped by {what} after {result.iterations} iterations")
        if hctx.skipped:
            report.limits.append(f"{hctx.skipped} horizontal rounds skipped: the time limit had passed")

        phases.append("extract")
        # the final plan; the last round's when the e-graph has not changed since (same version)
        view, ex = plans(egraph)
    report.egraph_nodes, report.egraph_classes = len(view.nodes), len(view.classes)
    report.node_fates = node_fates(tr, view.node_of, view.nodes, ex.choice)
    report.patterns_fired.update(credit_rewrites(rewritten_classes(tr, view.node_of, view.nodes, ex.choice), patterns))
    report.patterns_fired.update(groups_in_plan(hctx.groups, view.node_of, view.nodes, ex.choice))
    # the plan that keeps every original term (each FX node's term paid once), in the same cost model
    report.cost_before = input_cost(tr.rows, [tr.node_id[n] for n in dict.fromkeys(tr.roots)], tr.opaque_keys,
                                    cost_model, gradients, op_kinds(tr.recipes), packable)
    report.extractor, report.extract_note, report.cost_after = ex.method, ex.note, ex.dag_cost
    report.extraction = dict(ex.stats)
    report.limits.extend(limit_notes(ex.stats, ilp_max_nodes, ilp_seconds))
    report.times["extract"] = (t3 := time.perf_counter()) - t2 + in_search
    cpu["extract"] = (c3 := time.process_time()) - c2 + cpu_in_search

    phases.append("lower")
    out = lower(tr, view, ex.choice, ir)
    if chosen.by_cost and dearer_than_input(out, report, cost_model, level, example_inputs, translate_fn):
        out = gm
    report.times["lower"] = time.perf_counter() - t3
    cpu["lower"] = time.process_time() - c3
    return out


def _run_segments(gm, segments, strategy, patterns, limits, extractor, cost_model, ilp_seconds, ilp_max_nodes,
                  registry, report, phases, strategy_options, pattern_options, deadline) -> GraphModule:
    """Optimize a Torch-IR graph with ``no_grad`` / autocast regions one segment at a time, each inside its
    region's global state (:mod:`optimus_bridge.regions`), and stitch the results. A segment whose
    optimization fails keeps its original nodes (one warning); the others stay optimized."""
    optimized, largest = [], 0
    for i, seg in enumerate(segments):
        if not seg.nodes:
            optimized.append(seg.gm)
            continue
        sub, sub_phases = Report(strategy=strategy, level="pre_grad"), ["translate"]
        try:
            with seg.context():
                optimized.append(_run(seg.gm, None, strategy, patterns, limits, extractor, cost_model, ilp_seconds,
                                      ilp_max_nodes, registry, sub, sub_phases, dict(strategy_options), "pre_grad",
                                      pattern_options, deadline))
        except BaseException as exc:  # the segment stays as it was; the rest of the graph is still optimized
            if not isinstance(exc, Exception) and not is_rust_panic(exc):
                raise
            cause = f"segment {i} of {len(segments)} (between global-state switches): {sub_phases[-1]} failed: " \
                    f"{type(exc).__name__}: {exc}"
            report.notes.append(f"{cause}; that segment was left as it was")
            warnings.warn(f"optimus_eq: {cause}; leaving that segment as it was", stacklevel=4)
            _counters()["fallback"] += 1
            optimized.append(seg.gm)
            continue
        _merge_report(report, sub, i, largest=sub.egraph_nodes >= largest)
        largest = max(largest, sub.egraph_nodes)
    phases.append("lower")
    report.notes.append(f"optimized in {sum(1 for s in segments if s.nodes)} segments between "
                        f"{len(segments) - 1} global-state switches (no_grad / autocast regions)")
    return regions.stitch(gm, segments, optimized)


def _merge_report(report: Report, sub: Report, index: int, largest: bool) -> None:
    """Add one segment's report ``sub`` to the whole graph's ``report`` (``largest``: its e-graph is the
    largest so far, so its extraction is the one reported)."""
    report.patterns_fired.update(sub.patterns_fired)
    report.rule_matches.update(sub.rule_matches)
    for mine, theirs in ((report.times, sub.times), (report.cpu_times, sub.cpu_times)):
        for k, v in theirs.items():
            mine[k] = mine.get(k, 0.0) + v
    report.egraph_nodes += sub.egraph_nodes
    report.egraph_classes += sub.egraph_classes
    report.iterations += sub.iterations
    if report.stop_reason in (None, "saturated"):
        report.stop_reason = sub.stop_reason
    report.left_opaque += sub.left_opaque
    for attr in ("cost_before", "cost_after"):
        if getattr(sub, attr) is not None:
            setattr(report, attr, (getattr(report, attr) or 0.0) + getattr(sub, attr))
    if largest:  # the extraction that says most: the largest segment's
        report.extractor, report.extract_note, report.extraction = sub.extractor, sub.extract_note, sub.extraction
    report.kept_reasons.update(sub.kept_reasons)
    report.node_fates.update(sub.node_fates)
    report.limits.extend(f"segment {index}: {what}" for what in sub.limits)
    report.notes.extend(f"segment {index}: {what}" for what in sub.notes)  # which segment kept its input
    report.cost_model, report.training = report.cost_model or sub.cost_model, report.training or sub.training
