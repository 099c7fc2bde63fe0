"""Extraction: choose one e-node per needed e-class, minimizing the cost model.

Two extractors behind one function (:func:`extract`):

* ``"tree"``: bottom-up tree cost with a priority queue (Knuth's generalization of Dijkstra to superior
  functions; egg's ``Extractor``). Fast, O(E log E), but a node shared by N users is paid N times.
* ``"ilp"``: DAG-aware 0-1 ILP solved by scipy's HiGHS ``milp``: one binary per e-node, each root class
  covered, a chosen e-node requires one chosen e-node in each child class; a shared e-node is paid once
  (../shared/EGGLOG_NOTES.md; TENSAT, MLSys 2021). Cycles are cut lazily: solve, find a cycle in the
  chosen plan, forbid it, solve again.

``"auto"`` runs the tree extractor, then the ILP when the reachable e-graph is small enough, keeping the
ILP plan only if it is acyclic and cheaper under the DAG cost.
"""

from __future__ import annotations

import heapq
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from optimus_eq.cost import GPUCostModel, numel
from optimus_eq.terms import CONSTRUCTORS


@dataclass
class ENode:
    op: str
    eclass: str
    children: list[str]          # child e-classes of term sorts, in order
    literals: list               # primitive arguments (ints, int vectors), in order
    cost: float = 0.0


@dataclass
class EGraphView:
    """A parsed egglog serialization restricted to term e-nodes (subsumed ones dropped).

    Attributes:
        nodes: e-node id -> :class:`ENode`.
        classes: e-class id -> ids of its e-nodes.
        shapes: e-class id -> static shape from the ``shape`` analysis (where known).
        node_of: FX node id (``NodeOf`` rows) -> e-class id.
        inconsistent: facts no sound rule of ours can derive (an op equal to its own argument, two
            opaque leaves in one e-class): evidence of a wrong merge, so the caller must not extract.
    """

    nodes: dict[str, ENode] = field(default_factory=dict)
    classes: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    node_of: dict[int, str] = field(default_factory=dict)
    inconsistent: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict) -> "EGraphView":
        raw = data["nodes"]
        view = cls()

        def literal(nid: str):
            node = raw[nid]
            if node["op"] == "vec-of":
                return tuple(int(raw[c]["op"]) for c in node["children"])
            return int(node["op"])

        for nid, node in raw.items():
            op = node["op"]
            if op == "NodeOf":
                view.node_of[int(raw[node["children"][0]]["op"])] = node["eclass"]
            if op not in CONSTRUCTORS or node.get("subsumed"):
                continue
            children, literals = [], []
            for c in node["children"]:
                if c.startswith("primitive-"):
                    literals.append(literal(c))
                else:
                    children.append(raw[c]["eclass"])
            if node["eclass"] in children:  # self loop: never part of an acyclic plan
                if op in ("Unary", "Binary", "Apply", "Leaf"):  # f(x) == x is never derivable here
                    view.inconsistent.append(f"{op}{tuple(literals)} in its own argument's e-class")
                continue
            view.nodes[nid] = ENode(op, node["eclass"], children, literals)
            view.classes[node["eclass"]].append(nid)
        for cls, nids in view.classes.items():
            leaves = [n for n in nids if view.nodes[n].op == "Leaf"]
            if len(leaves) > 1:
                view.inconsistent.append(f"two graph inputs or opaque leaves in e-class {cls}")
        vec_of_class = {n["eclass"]: n for n in raw.values() if n["op"] == "vec-of"}
        for node in raw.values():
            if node["op"] == "shape":
                target = raw[node["children"][0]]["eclass"]
                vec = vec_of_class.get(node["eclass"])
                if vec is not None:
                    view.shapes[target] = tuple(int(raw[c]["op"]) for c in vec["children"])
        return view

    def assign_costs(self, model: GPUCostModel, forced: set[str]) -> None:
        for nid, node in self.nodes.items():
            out = numel(self.shapes.get(node.eclass))
            ins = [numel(self.shapes.get(c)) for c in node.children]
            node.cost = model.node_cost(node.op, out, ins, nid in forced)


@dataclass
class Extraction:
    """The chosen e-node per needed e-class, and what extraction did."""

    choice: dict[str, str]
    dag_cost: float
    method: str
    seconds: float
    ilp_rounds: int = 0
    note: str = ""


def _tree(view: EGraphView, forced_class_node: dict[str, str]) -> dict[str, str]:
    """Bottom-up tree-cost choice for every class that has an acyclic derivation."""
    parents: dict[str, list[str]] = defaultdict(list)
    pending: dict[str, int] = {}
    heap: list[tuple[float, int, str]] = []
    tie = 0
    for nid, node in view.nodes.items():
        kids = set(node.children)
        pending[nid] = len(kids)
        for c in kids:
            parents[c].append(nid)
        if not kids:
            heap.append((node.cost, tie, nid))
            tie += 1
    heapq.heapify(heap)
    best: dict[str, float] = {}
    choice: dict[str, str] = {}
    while heap:
        cost, _, nid = heapq.heappop(heap)
        cls = view.nodes[nid].eclass
        if cls in choice:
            continue
        forced = forced_class_node.get(cls)
        if forced is not None and forced != nid:
            continue
        choice[cls], best[cls] = nid, cost
        for p in parents[cls]:
            pending[p] -= 1
            if pending[p] == 0:
                pn = view.nodes[p]
                tie += 1
                heapq.heappush(heap, (pn.cost + sum(best[c] for c in pn.children), tie, p))
    return choice


def _reachable(view: EGraphView, roots: list[str], choice: dict[str, str] | None) -> list[str]:
    """Classes reachable from ``roots`` through the chosen e-nodes (or through all e-nodes if None)."""
    seen: set[str] = set()
    order: list[str] = []
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        order.append(c)
        nids = [choice[c]] if choice is not None else view.classes[c]
        for nid in nids:
            stack.extend(view.nodes[nid].children)
    return order


def dag_cost(view: EGraphView, roots: list[str], choice: dict[str, str]) -> float:
    """Cost of a plan with each chosen e-node paid once."""
    return sum(view.nodes[choice[c]].cost for c in _reachable(view, roots, choice))


def find_cycle(view: EGraphView, roots: list[str], choice: dict[str, str]) -> list[str] | None:
    """An e-node cycle in the chosen plan (as e-node ids), or None when the plan is a DAG."""
    color: dict[str, int] = {}
    for root in roots:
        if color.get(root):
            continue
        stack = [(root, iter(view.nodes[choice[root]].children))]
        path = [root]
        color[root] = 1
        while stack:
            cls, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[cls] = 2
                stack.pop()
                path.pop()
                continue
            state = color.get(nxt, 0)
            if state == 1:
                cyc = path[path.index(nxt):]
                return [choice[c] for c in cyc]
            if state == 0:
                color[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(view.nodes[choice[nxt]].children)))
    return None


def _ilp(view: EGraphView, roots: list[str], forced: dict[str, str], seconds: float,
         max_rounds: int) -> tuple[dict[str, str] | None, int, str]:
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    classes = _reachable(view, roots, None)
    nids = [nid for c in classes for nid in view.classes[c]]
    index = {nid: i for i, nid in enumerate(nids)}
    cost = np.array([view.nodes[n].cost for n in nids]) + 1e-6  # break ties toward fewer nodes
    rows, cols, vals, lo = [], [], [], []
    r = 0
    for c in set(roots):
        for nid in view.classes[c]:
            rows.append(r), cols.append(index[nid]), vals.append(1.0)
        lo.append(1.0)
        r += 1
    for nid in nids:
        for child in set(view.nodes[nid].children):
            for m in view.classes[child]:
                rows.append(r), cols.append(index[m]), vals.append(1.0)
            rows.append(r), cols.append(index[nid]), vals.append(-1.0)
            lo.append(0.0)
            r += 1
    lb = np.zeros(len(nids))
    for nid in forced.values():
        if nid in index:
            lb[index[nid]] = 1.0
    cuts: list[list[str]] = []
    deadline = time.perf_counter() + seconds
    for rnd in range(1, max_rounds + 1):
        cr, cc, cv, clo, chi = list(rows), list(cols), list(vals), list(lo), [np.inf] * len(lo)
        for k, cyc in enumerate(cuts):
            for nid in cyc:
                cr.append(r + k), cc.append(index[nid]), cv.append(1.0)
            clo.append(-np.inf), chi.append(len(cyc) - 1.0)
        a = coo_matrix((cv, (cr, cc)), shape=(r + len(cuts), len(nids))).tocsr()
        left = deadline - time.perf_counter()
        if left <= 0:
            return None, rnd - 1, "ilp time limit"
        res = milp(cost, constraints=LinearConstraint(a, clo, chi), integrality=np.ones(len(nids)),
                   bounds=Bounds(lb, np.ones(len(nids))), options={"time_limit": left})
        if res.x is None or res.status not in (0,):
            return None, rnd, f"ilp status {res.status}: {res.message}"
        picked = {nid for nid, v in zip(nids, res.x) if v > 0.5}
        choice: dict[str, str] = {}
        for c in classes:
            cand = [n for n in view.classes[c] if n in picked]
            if cand:
                choice[c] = forced.get(c) or min(cand, key=lambda n: view.nodes[n].cost)
        cyc = find_cycle(view, roots, choice)
        if cyc is None:
            return choice, rnd, ""
        cuts.append(cyc)
    return None, max_rounds, "ilp cycle rounds exhausted"


def extract(view: EGraphView, roots: list[str], forced_nodes: set[str], model: GPUCostModel | None = None,
            method: str = "auto", seconds: float = 10.0, ilp_max_nodes: int = 40_000,
            max_rounds: int = 20) -> Extraction:
    """Choose one e-node for every e-class needed by ``roots``.

    Args:
        view: the parsed e-graph.
        roots: e-classes that must be computed (graph outputs, opaque terms).
        forced_nodes: e-node ids that must be chosen in their class (opaque ops kept verbatim).
        method: ``"tree"``, ``"ilp"`` or ``"auto"`` (see module docstring).
        seconds: time budget of the ILP.
        ilp_max_nodes: ``"auto"`` skips the ILP when more e-nodes than this are reachable.

    Raises:
        RuntimeError: when some root has no acyclic derivation (a bug in the rules or the bridge).
    """
    start = time.perf_counter()
    model = model or GPUCostModel()
    view.assign_costs(model, forced_nodes)
    forced = {view.nodes[n].eclass: n for n in forced_nodes if n in view.nodes}
    choice = _tree(view, forced)
    missing = [r for r in roots if r not in choice]
    if missing:
        raise RuntimeError(f"no acyclic term for e-classes {missing[:5]}")
    method_used, note, rounds = "tree", "", 0
    if method in ("ilp", "auto"):
        size = sum(len(view.classes[c]) for c in _reachable(view, roots, None))
        if method == "ilp" or size <= ilp_max_nodes:
            ilp_choice, rounds, note = _ilp(view, roots, forced, seconds, max_rounds)
            if ilp_choice is not None and dag_cost(view, roots, ilp_choice) <= dag_cost(view, roots, choice):
                choice, method_used = ilp_choice, "ilp"
        else:
            note = f"ilp skipped: {size} e-nodes > {ilp_max_nodes}"
    needed = _reachable(view, roots, choice)
    choice = {c: choice[c] for c in needed}
    return Extraction(choice, dag_cost(view, roots, choice), method_used, time.perf_counter() - start, rounds, note)
