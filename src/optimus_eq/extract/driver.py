"""The :func:`extract` entry: cost the e-nodes, take the tree plan, prune, solve the components by ILP or
local search, and keep the result only if it is acyclic and no dearer than the tree plan.
"""

from __future__ import annotations

import time

from optimus_eq.cost import GPUCostModel
from optimus_eq.extract.ilp import _ILP, BATCH, _plan_cycles
from optimus_eq.extract.plan import Extraction
from optimus_eq.extract.prune import _prepare
from optimus_eq.extract.refine import _refine
from optimus_eq.extract.tree import _Problem
from optimus_eq.extract.view import EGraphView, no_gc


class NoAcyclicTerm(RuntimeError):
    """Some root e-class has no acyclic derivation with the forced e-nodes (a RuntimeError)."""


def extract(view: EGraphView, roots: list, forced_nodes: set, model: GPUCostModel | None = None,
            method: str = "auto", seconds: float = 10.0, ilp_max_nodes: int = 40_000,
            max_rounds: int = 20) -> Extraction:
    """Choose one e-node for every e-class needed by ``roots``.

    Args:
        view: the parsed e-graph.
        roots: e-classes that must be computed (graph outputs, opaque terms).
        forced_nodes: e-node ids that must be chosen in their class (opaque ops kept verbatim); a class
            whose forced e-node is a self loop (``EGraphView.self_loops``) has no plan. Ids that are not
            e-nodes of ``view`` are ignored.
        method: ``"tree"``, ``"ilp"`` or ``"auto"`` (see module docstring).
        seconds: time budget of the ILP (all components together).
        ilp_max_nodes: ``"auto"`` leaves an independent component of the pruned ILP with more e-nodes than
            this to the tree choice and the local search.
        max_rounds: ILP solves per batch of components (each adds cuts for the cycles of the last plan).

    Raises:
        NoAcyclicTerm: (a RuntimeError) when some root has no acyclic derivation with the forced e-nodes (a
            bug in the rules or the bridge, or destructive rewrites applied in an order that subsumed every
            e-node of a class: the ``taso`` search meets such states and drops them).
    """
    if method not in ("tree", "ilp", "auto"):
        raise ValueError(f"unknown extraction method {method!r}; valid: 'tree', 'ilp', 'auto'")
    with no_gc():
        return _extract(view, roots, forced_nodes, model or GPUCostModel(), method, seconds, ilp_max_nodes,
                        max_rounds)


def _extract(view, roots, forced_nodes, model, method, seconds, ilp_max_nodes, max_rounds) -> Extraction:
    start = time.perf_counter()
    view.assign_costs(model, forced_nodes)
    p = _Problem(view, forced_nodes)
    if len(view.nodes) == len(view.classes):  # one e-node per class (greedy's e-graph): nothing to choose
        return _unique(view, p, roots, start)
    tree_pick = p.tree()
    missing = [r for r in roots if not p.has(r) or tree_pick[p.cid[r]] < 0]
    if missing:
        raise NoAcyclicTerm(f"no acyclic term for e-classes {missing[:5]}")
    rroots = list(dict.fromkeys(p.cid[r] for r in roots))
    pick = list(tree_pick)
    method_used, notes, rounds = "tree", [], 0
    prep = _prepare(p, tree_pick, rroots)
    if not (prep.reach & (prep.nvalid > 1)).any():
        notes.append("no choice")
    elif method in ("ilp", "auto"):
        ilp = _ILP(p, prep)
        limit = None if method == "ilp" else ilp_max_nodes
        deadline = start + seconds
        solved = failed = skipped = 0
        why: list[str] = []
        batch: list[int] = []
        batch_size = 0

        def flush() -> None:
            nonlocal solved, failed, rounds, batch, batch_size
            if batch:
                got, rnd, reason = ilp.solve(batch, deadline - time.perf_counter(), max_rounds)
                rounds = max(rounds, rnd)
                if got is None:
                    failed += 1
                    why.append(reason)
                else:
                    solved += 1
                    for c, i in got.items():
                        pick[c] = i
            batch, batch_size = [], 0

        for n, g in sorted(ilp.groups, key=lambda sg: sg[0]):
            if limit is not None and n > limit:
                skipped += 1
                continue
            if batch_size + n > BATCH:
                flush()
            batch.extend(g)
            batch_size += n
        flush()
        if solved:
            method_used = "ilp"
        if skipped:
            notes.append(f"{skipped} ilp components over {limit} e-nodes")
        if failed:
            notes.append(f"{failed} ilp batches failed ({why[0]})")
        if skipped or failed:
            if _refine(p, pick, rroots, prep, time.perf_counter() + max(1.0, seconds / 4)):
                method_used += "+refine"
    if prep.pruned:
        notes.append(f"{prep.pruned} cyclic e-nodes pruned")

    needed = p.plan_classes(pick, rroots)
    cost = sum(p.cost[pick[c]] for c in needed)
    if method_used != "tree":  # safety net: an acyclic plan, and no dearer than the tree plan
        tree_cost = sum(p.cost[tree_pick[c]] for c in p.plan_classes(tree_pick, rroots))
        if _plan_cycles(needed, {c: pick[c] for c in needed}, p.kids) or cost > tree_cost * (1 + 1e-9) + 1e-9:
            notes.append("ilp plan rejected (cyclic or dearer than the tree plan)")
            pick, method_used = tree_pick, "tree"
            needed = p.plan_classes(pick, rroots)
            cost = tree_cost
    cids, nids = p.cids, p.nids
    choice = {cids[c]: nids[pick[c]] for c in needed}
    return Extraction(choice, cost, method_used, time.perf_counter() - start, rounds, "; ".join(notes))


def _unique(view: EGraphView, p: _Problem, roots: list, start: float) -> Extraction:
    """The only plan of an e-graph with one e-node per class, if it is complete and acyclic."""
    bad = [r for r in roots if not p.has(r) or not p.cnodes[p.cid[r]]]
    pick = [ns[0] if ns else -1 for ns in p.cnodes]
    needed: list[int] = []
    if not bad:
        rroots = list(dict.fromkeys(p.cid[r] for r in roots))
        seen = set(rroots)
        needed = list(rroots)
        k = 0
        while k < len(needed) and not bad:
            i = pick[needed[k]]
            if i < 0 or p.forced.get(needed[k], i) != i:
                bad.append(p.cids[needed[k]])
                break
            for x in p.kids[i]:
                if x not in seen:
                    seen.add(x)
                    needed.append(x)
            k += 1
        if not bad and _plan_cycles(needed, pick, p.kids):
            bad = list(roots)
    if bad:
        raise NoAcyclicTerm(f"no acyclic term for e-classes {bad[:5]}")
    cids, nids = p.cids, p.nids
    choice = {cids[c]: nids[pick[c]] for c in needed}
    cost = sum(p.cost[pick[c]] for c in needed)
    return Extraction(choice, cost, "tree", time.perf_counter() - start, 0, "no choice")
