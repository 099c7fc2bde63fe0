"""One round of horizontal fusion on an e-graph: extract the current best plan, find groups on it, add one
fused alternative per group (and, for greedy, remove the originals).

The eqsat strategy runs one round between two saturations of the vertical rules, with every horizontal
pattern; the final DAG-aware extraction decides whether each fused op pays off. The greedy strategy runs
one round per horizontal pattern, in pass order, destructively (Optimus' group_batch_fusion passes,
right after normalization and before the split/cat passes, as upstream pre_grad.py orders them).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

from optimus_eq.horizontal.plan import PlanGraph
from optimus_eq.horizontal.rows import IdAlloc, RowWriter

#: Options of every horizontal pattern: Optimus' graph_search_options names and upstream's defaults
#: (group_batch_fusion.py: MIN_FUSE_SET_SIZE 5, MAX_FUSE_SET_SIZE 300, MAX_FUSE_SEARCH_DEPTH 5), so a user's
#: pre_grad_fusion_options mean the same here. Smaller groups: ``{"min_fuse_set_size": 2}``.
DEFAULT_OPTIONS = {"min_fuse_set_size": 5, "max_fuse_set_size": 300, "max_fuse_search_depth": 5}
#: A non-destructive round (eqsat, tensat) adds groups from this many members when neither the pattern nor
#: the caller sets ``min_fuse_set_size``: the group is one more alternative and extraction decides with the
#: cost model whether it pays ("batch or leave it" decided by cost, not by upstream's
#: fixed minimum, which a destructive order needs because it commits blindly). DLRM's MLPs have groups of
#: 2-4 equal linears and relus; batched, the predicted CUDA kernels drop 54 -> 48 (inference) and
#: 168 -> 147 (training step), bench/cuda_meta.py.
COST_DECIDED_MIN_FUSE_SET_SIZE = 2
#: ... and up to this many members when neither sets ``max_fuse_set_size`` (upstream's 300 cuts the
#: launch-bound model's 512 branches into groups of 300 and 212: two GEMMs and two layer-norm kernels per
#: layer where one does; H200, greedy, 11 kernels in inference, bench/results/h200_2026-12-02).
COST_DECIDED_MAX_FUSE_SET_SIZE = 4096

#: Per-pattern options the built-in accepts (group_batch_fusion.py) that are taken and not read here:
#: ``require_fbgemm`` (the built-in's dependency, none here), ``fuse_nodes_with_same_parent`` /
#: ``fuse_nodes_with_same_users`` (the built-in's extra restriction of a group to one parent or one user
#: set: groups here are any independent set) and ``shape_broadcast_batch_linear`` (not built).
ACCEPTED_UNREAD_OPTIONS = frozenset(["require_fbgemm", "fuse_nodes_with_same_parent", "fuse_nodes_with_same_users",
                                     "shape_broadcast_batch_linear"])


@dataclass(frozen=True)
class EagerTerms:
    """Eager's values of a translated graph's terms, as the bridge reads them off FX meta
    (``optimus_bridge.eager_terms``): what a horizontal round needs of eager besides the e-graph.

    Attributes:
        values: ``(term handle id, FakeTensor)`` per translated FX node whose meta value is a tensor, in graph
            order.
        outputs: handle ids of the translated nodes the graph's output node reads, and of the nodes each of those
            views (its eager view chain).
    """

    values: tuple = ()
    outputs: tuple = ()


@dataclass
class HorizontalContext:
    """What a round needs besides the e-graph.

    Attributes:
        tr: the bridge's Translation (recipes, types, kept nodes; new keys are added to it).
        plan: ``egraph -> (EGraphView, Extraction)``, the caller's reading and extraction of the e-graph
            with its cost model and extractor (``optimize`` passes ``api._Plans``, cached by
            :attr:`optimus_eq.egraph.EGraph.version`, so that when a round adds nothing and no rule fires
            afterwards, the final extraction is this round's).
        options: pattern name -> option overrides (``min_fuse_set_size``, ...).
        fired: pattern name -> groups fused (greedy) or fused alternatives added (eqsat).
        members: pattern name -> ops in those groups.
        groups: ``(pattern name, handles of the ops its build made (the batched op), handles of the terms
            unioned into its members, {(op, key)} of the members)`` per group fused, for
            :func:`optimus_eq.plan_credit.groups_in_plan`.
        level: the graph's IR level (``"pre_grad"`` or ``"post_grad"``; gradient signatures are pre-grad only).
        eager_terms: ``tr -> EagerTerms`` (``optimus_bridge.eager_terms.eager_terms``, computed once per
            Translation); None: no eager values (no graph outputs known, every class taken as non-contiguous).
        grad_facts: ``(tr, level) -> (GradientInfo | None, GradientReach | None)``, the eager gradient facts the
            bridge reads off FX meta (``optimus_bridge.grad_facts.facts``); None: no gradient signatures.
        skipped: rounds not run because the e-graph's deadline (``Limits.seconds`` of the whole call) had
            passed.
        alternatives: a non-destructive round (eqsat, tensat) also draws members from the forms of the
            plan's e-classes that the plan did not choose (:meth:`PlanGraph.add_alternatives`); False: the
            plan's e-nodes only (the round before this existed).
    """

    tr: object
    plan: Callable
    options: dict = field(default_factory=dict)
    fired: Counter = field(default_factory=Counter)
    members: Counter = field(default_factory=Counter)
    groups: list = field(default_factory=list)
    alloc: IdAlloc | None = None
    level: str = "pre_grad"
    skipped: int = 0
    grad_facts: Callable | None = None
    eager_terms: Callable | None = None
    alternatives: bool = True


_OP_RELATIONS = ("ApplyIn", "UnaryIn", "BinaryIn")  # rows of compute ops: a group's batched op is one


def pattern_options(pattern, overrides: dict) -> dict:
    """DEFAULT_OPTIONS and the pattern's ``option_defaults``, then its own options, then the caller's
    overrides for it. The key of a pattern marked ``wants_options`` is called as ``group_key(member, options)``.

    Raises:
        ValueError: on an option name that horizontal patterns do not know.
    """
    own = dict(getattr(pattern, "option_defaults", {}))  # a pattern's own option names
    opts = {**DEFAULT_OPTIONS, **own}
    for src in (pattern.options, overrides.get(pattern.name, {})):
        unknown = set(src) - set(DEFAULT_OPTIONS) - ACCEPTED_UNREAD_OPTIONS - set(own)
        if unknown:
            raise ValueError(f"{pattern.name}: unknown option(s) {sorted(unknown)}; "
                             f"valid: {sorted(set(DEFAULT_OPTIONS) | ACCEPTED_UNREAD_OPTIONS | set(own))}")
        opts.update(src)
    return opts


def eager_terms(ctx: HorizontalContext) -> EagerTerms:
    """The round's :class:`EagerTerms` (empty without ``ctx.eager_terms``)."""
    return ctx.eager_terms(ctx.tr) if ctx.eager_terms is not None else EagerTerms()


def plan_of(egraph, ctx: HorizontalContext):
    """Extract the current best plan: ``(view, choice, output classes, eager contiguity per class)``.

    Raises:
        RuntimeError: when the e-graph holds facts no sound rule derives (``EGraphView.inconsistent``) or
            some root has no acyclic plan (from :func:`optimus_eq.extract.extract`).
    """
    view, ex = ctx.plan(egraph)
    eager = eager_terms(ctx)
    outputs = {view.node_of[h] for h in eager.outputs}
    contiguous: dict = {}
    for tid, val in eager.values:
        c = view.node_of.get(tid)
        if c is not None:
            try:
                ok = bool(val.is_contiguous())
            except Exception:  # symbolic strides
                ok = False
            contiguous[c] = contiguous.get(c, True) and ok
    return view, ex.choice, outputs, contiguous


def fuse_round(egraph, patterns: Sequence, ctx: HorizontalContext, destructive: bool) -> int:
    """Find groups for ``patterns`` on the current plan and add their fused alternatives to ``egraph``.

    ``destructive`` (greedy) also subsumes each member's original e-node. Returns the number of groups; 0
    without looking when the e-graph's deadline has passed (counted in ``ctx.skipped``).
    """
    past = getattr(egraph, "past_deadline", None)
    if past is not None and past():
        ctx.skipped += 1
        return 0
    if ctx.alloc is None:
        ctx.alloc = IdAlloc(ctx.tr.rows)
    view, choice, outputs, contiguous = plan_of(egraph, ctx)
    plan = PlanGraph(view, choice, ctx.tr, outputs, contiguous, ctx.level, ctx.grad_facts)
    if not plan.acyclic():
        # a plan whose kept FX nodes cannot keep their order: lowering rejects it anyway; fuse nothing
        return 0
    alternatives = not destructive and ctx.alternatives
    if alternatives:
        # members from any equivalent form of an e-class, not only the plan's (PlanGraph.add_alternatives);
        # a group of one plan kernel's pieces is not added (PlanGraph.worth_adding)
        plan.add_alternatives()
    writer = RowWriter(ctx.tr, view, plan.choice, ctx.alloc, eager_terms(ctx).values)
    fused: set = set()
    fused_by: dict = {}   # member class -> the patterns that fused it this round (for ``regroups``)
    groups_of: dict = {}  # pattern name -> its groups' member classes this round
    groups = 0
    for p in patterns:
        opts = pattern_options(p, ctx.options)
        flags = {f: getattr(p, f, False) for f in ("any_strides", "wants_options", "shared_input")}
        # the members this pattern may not take: every fused one, but (eqsat) those only its ``regroups`` fused
        taken, offered = fused, set()
        regroups = set(getattr(p, "regroups", ())) if not destructive else set()
        if regroups:
            taken = {c for c in fused if not fused_by[c] <= regroups}
            offered = {g for q in regroups for g in groups_of.get(q, ())}
        if alternatives:
            given = set(p.options or {}) | set(ctx.options.get(p.name) or {})
            if "min_fuse_set_size" not in given:
                opts["min_fuse_set_size"] = min(opts["min_fuse_set_size"], COST_DECIDED_MIN_FUSE_SET_SIZE)
            if "max_fuse_set_size" not in given:
                opts["max_fuse_set_size"] = max(opts["max_fuse_set_size"], COST_DECIDED_MAX_FUSE_SET_SIZE)
        for members in plan.groups(p.group_key, opts, taken, overlap=not destructive, **flags):
            if alternatives and not plan.worth_adding(members):
                continue
            if offered and frozenset(m.cls for m in members) in offered:
                continue  # the same group as a ``regroups`` pattern's, already an alternative
            joined, ops = len(writer.rows["UnionIn"]), {r: len(writer.rows[r]) for r in _OP_RELATIONS}
            p.build(writer, members)
            existing = writer.reinserted  # the plan's e-nodes the build named, re-inserted
            ctx.groups.append((p.name, [row[0] for r in _OP_RELATIONS for row in writer.rows[r][ops[r]:]
                                        if row[0] not in existing],
                               [t for _, t in writer.rows["UnionIn"][joined:]], {(m.op, m.key) for m in members}))
            if destructive:
                for m in members:
                    writer.subsume(m)
            plan.fused_op(members)
            fused.update(m.cls for m in members)
            if taken is not fused:
                taken.update(m.cls for m in members)
            groups_of.setdefault(p.name, []).append(frozenset(m.cls for m in members))
            for m in members:
                fused_by.setdefault(m.cls, set()).add(p.name)
            ctx.fired[p.name] += 1
            ctx.members[p.name] += len(members)
            groups += 1
    if groups:
        egraph.insert(writer.rows)
        if writer.subsume_rows:
            egraph.insert(writer.subsume_rows)
    return groups
