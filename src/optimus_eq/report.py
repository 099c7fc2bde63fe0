"""The report of one optimization, shared by every strategy (egg-style: one Report type)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Report:
    """What an optimization did.

    Attributes:
        strategy: ``"none"``, ``"greedy"`` or ``"eqsat"``.
        level: the IR level optimized: ``"pre_grad"`` (Torch-IR) or ``"post_grad"`` (Aten-IR).
        patterns_fired: pattern name -> rewrites the extracted plan uses, read off the plan the same way for
            every strategy, so greedy's and eqsat's figures compare (:mod:`optimus_eq.plan_credit`): horizontal
            patterns: groups the plan uses; vertical patterns: the plan's e-classes where an input op is computed
            another way, each credited to one pattern by the shape of its rules; canonical patterns: nodes the
            translator normalized. ``optimus-eq explain`` credits patterns exactly, by leaving each out.
        rule_matches: pattern name -> egglog matches of its rules summed over iterations (horizontal patterns:
            groups fused or offered; canonical: nodes normalized): what ``patterns_fired`` was before. For greedy
            these are rewrites applied, chain steps included; for eqsat, alternatives offered whether the plan
            uses them or not. ``torch._dynamo.utils.counters["optimus_eq"]`` adds these up.
        nodes_before, nodes_after: FX node counts (placeholders and output included).
        ops_before, ops_after: op kind (``"split"``, ``"cat"``, ``"tanh"``, ...) -> FX node count.
        egraph_nodes, egraph_classes: size of the e-graph after the search (term e-nodes, e-classes).
        iterations: saturation iterations run (all passes together for greedy).
        stop_reason: ``"saturated"``, ``"iteration_limit"``, ``"node_limit"`` or ``"time_limit"``.
        extractor: how the final plan was found (:attr:`optimus_eq.extract.Extraction.method`: ``"tree"``,
            ``"tree+refine"`` (the fast plan: tree plan and local search), ``"ilp"`` (every component of the
            choice core proven optimal: solved by HiGHS, or the fast plan meets its lower bound), or the fast
            method plus ``"+ilp"``), with ``extract_note`` for
            people and ``extraction`` as data.
        extraction: the final extraction's ``stats`` (:class:`optimus_eq.extract.Extraction`): tree, fast and
            final cost, choice classes, components, those solved exactly, their sizes and gaps.
        limits: which limit stopped what, one line each (the search's ``Limits``, the horizontal round, the
            exact solver's size limit, time budget and deadline); empty when none did.
        cost_before: the cost model's estimate (microseconds) of the input graph: the plan that keeps
            every original term, each paid once (two FX nodes computing one value are paid twice, as the
            input graph computes both). None for ``"none"``.
        cost_after: the cost model's estimate (microseconds) of the extracted plan (DAG cost). For eqsat, taso
            and tensat never above ``cost_before``: where extraction prices its plan above the input, the
            lowered plan is priced again as ``cost_before`` is, and the input graph is returned if it is still
            dearer (a note says so; ``optimus_bridge.plan_check.dearer_than_input``).
        times: seconds per phase: ``translate``, ``search``, ``extract``, ``lower``, ``total``. ``extract``
            is every read and extraction of the e-graph, the horizontal rounds' plans included (they run
            inside the search; ``search`` is the rest of it: rules, group analysis, insertion);
            ``horizontal`` is the part of ``search`` spent in horizontal rounds (group analysis, insertion).
        cpu_times: the same phases in CPU seconds of the optimizing process (``time.process_time``: steadier
            than ``times`` when other jobs share the cores; threads of egglog and HiGHS included).
        cost_model: the cost model the search and extraction used (:meth:`GPUCostModel.describe`: execution
            mode ``launch`` or ``cudagraph``, constants, and ``training`` when the backward was priced).
        training: whether the graph will be differentiated and its backward was priced.
        fallback: the cause when the original graph was returned because something failed.
        left_opaque: op nodes kept verbatim (outside the vocabulary, symbolic sizes, mutation); inputs,
            parameters and the output node are not ops and not counted.
        kept_reasons: FX node name -> why that op was kept verbatim (``optimus_bridge.provenance.kept_reasons``).
        node_fates: FX node name -> ``"kept"`` (computed as written), ``"rewritten"`` (computed by an equal
            term the rewrites found) or ``"removed"`` (not needed by the plan), for every translated op node of
            the input graph, read off the extracted plan the same way for every strategy (comparable).
        notes: what the caller changed around the optimization (the backend: Inductor's built-in Optimus
            options read as ours, the built-in passes switched off).
    """

    strategy: str
    level: str = "pre_grad"
    patterns_fired: Counter = field(default_factory=Counter)
    rule_matches: Counter = field(default_factory=Counter)
    nodes_before: int = 0
    nodes_after: int = 0
    ops_before: Counter = field(default_factory=Counter)
    ops_after: Counter = field(default_factory=Counter)
    egraph_nodes: int = 0
    egraph_classes: int = 0
    iterations: int = 0
    stop_reason: str | None = None
    extractor: str | None = None
    extract_note: str = ""
    extraction: dict = field(default_factory=dict)
    limits: list = field(default_factory=list)
    cost_before: float | None = None
    cost_after: float | None = None
    times: dict = field(default_factory=dict)
    cpu_times: dict = field(default_factory=dict)
    cost_model: str | None = None
    training: bool = False
    fallback: str | None = None
    left_opaque: int = 0
    kept_reasons: dict = field(default_factory=dict)
    node_fates: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    JUNK = ("split", "chunk", "unbind", "cat", "stack", "getitem")

    def junk_counts(self) -> tuple[int, int]:
        """split/chunk/unbind/cat/stack/getitem nodes before and after."""
        return (sum(self.ops_before.get(k, 0) for k in self.JUNK),
                sum(self.ops_after.get(k, 0) for k in self.JUNK))

    def fate_counts(self) -> Counter:
        """``"kept"`` / ``"rewritten"`` / ``"removed"`` -> input op nodes (:attr:`node_fates`)."""
        return Counter(self.node_fates.values())

    def summary(self) -> str:
        """A short multi-line text for people."""
        lines = [f"optimus_eq[{self.strategy}, {self.level}]: FX nodes {self.nodes_before} -> {self.nodes_after}"]
        kinds = sorted(set(self.ops_before) | set(self.ops_after))
        changed = [k for k in kinds if self.ops_before.get(k, 0) != self.ops_after.get(k, 0)]
        if changed:
            lines.append("  ops changed: " + ", ".join(
                f"{k} {self.ops_before.get(k, 0)}->{self.ops_after.get(k, 0)}" for k in changed))
        if self.patterns_fired:
            lines.append("  patterns (rewrites in the plan): " + ", ".join(f"{k} x{v}" for k, v in sorted(self.patterns_fired.items())))
        if self.strategy != "none":
            lines.append(f"  e-graph: {self.egraph_nodes} e-nodes, {self.egraph_classes} e-classes, "
                         f"{self.iterations} iterations, stop: {self.stop_reason}; extractor: {self.extractor}"
                         + (f" ({self.extract_note})" if self.extract_note else ""))
            x = self.extraction
            if x.get("choice_classes"):
                line = (f"  extraction: {x['choice_classes']} e-classes with a choice in {x.get('components', '?')} "
                        f"components (largest {x.get('largest_component', '?')} e-nodes); cost: tree "
                        f"{x.get('tree_cost', 0):.1f}")
                if "fast_cost" in x:
                    line += f", fast {x['fast_cost']:.1f}"
                line += f", final {x.get('cost', 0):.1f} us"
                if x.get("exact_components"):
                    line += f"; exact: {x['exact_components']} components, {x.get('exact_optimal', 0)} proven optimal"
                if x.get("bound_closed"):
                    line += f"; {x['bound_closed']} components proven optimal by the lower bound (no solver)"
                lines.append(line)
            for what in self.limits:
                lines.append(f"  limit: {what}")
            if self.cost_before is not None and self.cost_after is not None:
                lines.append(f"  cost model: {self.cost_before:.1f} us -> {self.cost_after:.1f} us"
                             + (f" [{self.cost_model}]" if self.cost_model else ""))
            lines.append("  times (s): " + ", ".join(f"{k} {v:.3f}" for k, v in self.times.items()))
        for note in self.notes:
            lines.append(f"  note: {note}")
        if self.fallback:
            lines.append(f"  FELL BACK to the original graph: {self.fallback}")
        return "\n".join(lines)
