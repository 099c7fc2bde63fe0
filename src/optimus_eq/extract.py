"""Extraction: choose one e-node per needed e-class, minimizing the cost model.

One entry point, :func:`extract`, with three methods:

* ``"tree"``: bottom-up tree cost with a priority queue (Knuth's generalization of Dijkstra to superior
  functions; egg's ``Extractor``). O(E log E), but a node shared by N users is paid N times; on deep
  residual graphs tree costs grow like 2^depth and stop telling plans apart.
* ``"ilp"``: DAG-aware 0-1 ILP (HiGHS, the solver inside scipy): one binary per e-node, each root class
  covered, a chosen e-node requires one chosen e-node in each child class; a shared e-node is paid once
  (../shared/EGGLOG_NOTES.md; TENSAT, MLSys 2021).
* ``"auto"`` (default): the ILP on every independent component up to ``ilp_max_nodes`` e-nodes, the local
  search below for the rest; the plan is kept only if it is acyclic and no dearer than the tree plan.

The ILP is made small before it is solved:

1. e-nodes that can be in no acyclic plan are dropped: those with a child class that has no acyclic
   derivation, the other e-nodes of a class whose opaque e-node is forced, and those whose every
   derivation needs their own class (:func:`_prune_cycles`; on split/cat graphs this removes every cycle
   we have seen: ``x = view(stack(unbind(view(x))))`` can only be computed from ``x``);
2. *fixed* classes (needed by every plan, one possible e-node) get no variable, and a class needed by every
   plan needs no "is it covered" row in its users;
3. the rest falls apart into independent components (e-nodes linked through their class and the non-fixed
   classes they need; the classes of one strongly connected component of the class graph kept together, so
   that every cycle lies inside one component). Small components are solved together, a few hundred
   e-nodes per HiGHS call, LP relaxation first: it was integral on every batch we measured, and then it is
   the ILP's optimum (4x faster than the MIP solver, which runs only when it is not).

Cycles that survive the pruning are cut lazily: solve, find EVERY cycle of the chosen plan (each back edge
of one depth-first search), forbid each one, solve again; a strongly connected component that keeps
producing cycles gets topological-order variables (``t_c >= t_k + 1`` whenever a chosen e-node of ``c``
needs ``k``), which rule out all of its cycles at once.

The local search (:func:`_refine`, for components over ``ilp_max_nodes`` or when the ILP fails or runs out
of time) starts from the tree choice and applies moves while they lower the exact DAG cost, computed with
reference counts (e-nodes left unused are saved, classes newly used are paid once): re-choose one class;
or make every used class that can use one unused class ``s`` switch to it at once (one shared fused node
instead of many small ones, which no single move finds). Moves keep the plan acyclic.

Measured on the synthetic recommendation graphs (bench/scale.py), 50k FX nodes, 125k e-nodes: about 1 s,
the ILP optimum (cost 5424 against 86574 for the tree plan); the local search alone reaches the same cost.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from optimus_eq.cost import GPUCostModel, numel
from optimus_eq.terms import CONSTRUCTORS

ORDER_AFTER = 2
BATCH = 1500  # e-nodes per milp call (independent components solved together)
_TERM_SORTS = frozenset(["T", "TL", "Args"])


@contextlib.contextmanager
def no_gc():
    """Pause the cyclic garbage collector: building ~10^5 small objects next to a large FX graph otherwise
    triggers full collections that cost more than the work itself (measured: 0.40 s -> 0.03 s)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(slots=True)
class ENode:
    op: str
    eclass: object               # e-class id (str from JSON, int from a frozen e-graph)
    children: list               # child e-classes of term sorts, in order
    literals: list               # primitive arguments (ints, int vectors), in order
    cost: float = 0.0


@dataclass
class EGraphView:
    """A parsed egglog e-graph restricted to term e-nodes (subsumed ones dropped).

    Attributes:
        nodes: e-node id -> :class:`ENode`.
        classes: e-class id -> ids of its e-nodes.
        shapes: e-class id -> static shape from the ``shape`` analysis (where known).
        node_of: FX node id (``NodeOf`` rows) -> e-class id.
        inconsistent: facts no sound rule of ours can derive (an op equal to its own argument, two
            opaque leaves in one e-class): evidence of a wrong merge, so the caller must not extract.
        self_loops: e-node id -> e-class of the self-loop e-nodes left out of ``nodes`` (only
            :meth:`from_json` names them; :meth:`from_egraph` gives them no id). Forcing one makes its
            e-class underivable.
    """

    nodes: dict = field(default_factory=dict)
    classes: dict = field(default_factory=lambda: defaultdict(list))
    shapes: dict = field(default_factory=dict)
    node_of: dict[int, object] = field(default_factory=dict)
    inconsistent: list[str] = field(default_factory=list)
    self_loops: dict = field(default_factory=dict)

    def _add(self, nid, op: str, eclass, children: list, literals: list) -> None:
        if eclass in children:  # self loop: never part of an acyclic plan
            if op in ("Unary", "Binary", "Apply", "Leaf"):  # f(x) == x is never derivable here
                self.inconsistent.append(f"{op}{tuple(literals)} in its own argument's e-class")
            self.self_loops[nid] = eclass
            return
        self.nodes[nid] = ENode(op, eclass, children, literals)
        self.classes[eclass].append(nid)

    def _check_leaves(self) -> None:
        for cls, nids in self.classes.items():
            if sum(1 for n in nids if self.nodes[n].op == "Leaf") > 1:
                self.inconsistent.append(f"two graph inputs or opaque leaves in e-class {cls}")

    @classmethod
    def from_egraph(cls, egraph) -> "EGraphView":
        """Read the e-graph straight from egglog's frozen tables (``egglog.bindings.EGraph.freeze``).

        ``egraph`` is an :class:`optimus_eq.egraph.EGraph` or an ``egglog.bindings.EGraph``. Much faster
        than serializing to JSON and parsing it (0.5 s instead of 7 s at 125k e-nodes, 2 cores). E-node
        ids are 0..N-1 and e-class ids 0..C-1 (ints), which lets :func:`extract` skip re-indexing.
        """
        with no_gc():
            return cls._from_frozen(getattr(egraph, "egraph", egraph))

    @classmethod
    def _from_frozen(cls, g) -> "EGraphView":
        functions = g.freeze().functions
        i64, to_vec = g.value_to_i64, g.value_to_vec
        view = cls()
        nodes, classes, inconsistent = view.nodes, view.classes, view.inconsistent
        ids: dict = {}          # egglog Value of an e-class -> dense int
        intern = ids.setdefault
        vecs: dict = {}         # egglog Value of an IVec -> tuple of ints

        def vec(v) -> tuple:
            t = vecs.get(v)
            if t is None:
                t = vecs[v] = tuple(i64(x) for x in to_vec(v))
            return t

        nid = 0
        leaves: dict[int, int] = {}
        for op, fn in functions.items():
            if op not in CONSTRUCTORS:
                continue
            kinds = [0 if s in _TERM_SORTS else 1 if s == "i64" else 2 for s in fn.input_sorts]
            tpos = [k for k, kind in enumerate(kinds) if kind == 0]
            lpos = [(k, kind == 1) for k, kind in enumerate(kinds) if kind != 0]
            ints = [k for k, is_int in lpos] if all(is_int for _, is_int in lpos) else None
            for row in fn.rows:
                if row.subsumed:
                    continue
                ins = row.inputs
                children = [intern(ins[k], len(ids)) for k in tpos]
                if ints is not None:
                    literals = [i64(ins[k]) for k in ints]
                else:
                    literals = [i64(ins[k]) if is_int else vec(ins[k]) for k, is_int in lpos]
                c = intern(row.output, len(ids))
                if c in children:  # self loop: never part of an acyclic plan
                    if op in ("Unary", "Binary", "Apply", "Leaf"):  # f(x) == x is never derivable here
                        inconsistent.append(f"{op}{tuple(literals)} in its own argument's e-class")
                    continue
                nodes[nid] = ENode(op, c, children, literals)
                classes[c].append(nid)
                nid += 1
                if op == "Leaf":
                    leaves[c] = leaves.get(c, 0) + 1
        if "NodeOf" in functions:
            for row in functions["NodeOf"].rows:
                view.node_of[i64(row.inputs[0])] = intern(row.output, len(ids))
        if "shape" in functions:
            for row in functions["shape"].rows:
                c = ids.get(row.inputs[0])
                if c is not None:
                    view.shapes[c] = vec(row.output)
        for c, n in leaves.items():
            if n > 1:
                inconsistent.append(f"two graph inputs or opaque leaves in e-class {c}")
        view._num_classes = len(ids)
        return view

    @classmethod
    def from_json(cls, data: dict) -> "EGraphView":
        """Parse egglog's JSON serialization (slower than :meth:`from_egraph`; same result, str ids).

        ``data`` may also be an e-graph, which is then read with :meth:`from_egraph`.
        """
        if not isinstance(data, dict):
            return cls.from_egraph(data)
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
            view._add(nid, op, node["eclass"], children, literals)
        view._check_leaves()
        vec_of_class = {n["eclass"]: n for n in raw.values() if n["op"] == "vec-of"}
        for node in raw.values():
            if node["op"] == "shape":
                target = raw[node["children"][0]]["eclass"]
                vec = vec_of_class.get(node["eclass"])
                if vec is not None:
                    view.shapes[target] = tuple(int(raw[c]["op"]) for c in vec["children"])
        return view

    def assign_costs(self, model: GPUCostModel, forced: set) -> None:
        sizes = {c: numel(s) for c, s in self.shapes.items()}
        memo: dict = {}
        for nid, node in self.nodes.items():
            get = sizes.get
            key = (node.op, get(node.eclass), tuple([get(c) for c in node.children]), nid in forced)
            cost = memo.get(key)
            if cost is None:
                cost = memo[key] = model.node_cost(key[0], key[1], list(key[2]), key[3])
            node.cost = cost


@dataclass
class Extraction:
    """The chosen e-node per needed e-class, and what extraction did."""

    choice: dict
    dag_cost: float
    method: str
    seconds: float
    ilp_rounds: int = 0
    note: str = ""


# -- public helpers on (view, choice) ---------------------------------------------------------------

def _reachable(view: EGraphView, roots: list, choice: dict | None) -> list:
    """Classes reachable from ``roots`` through the chosen e-nodes (or through all e-nodes if None)."""
    seen: set = set()
    order: list = []
    stack = list(roots)
    nodes, classes = view.nodes, view.classes
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        order.append(c)
        if choice is not None:
            stack.extend(nodes[choice[c]].children)
        else:
            for nid in classes[c]:
                stack.extend(nodes[nid].children)
    return order


def dag_cost(view: EGraphView, roots: list, choice: dict) -> float:
    """Cost of a plan with each chosen e-node paid once."""
    return sum(view.nodes[choice[c]].cost for c in _reachable(view, roots, choice))


def find_cycle(view: EGraphView, roots: list, choice: dict) -> list | None:
    """An e-node cycle in the chosen plan (as e-node ids), or None when the plan is a DAG."""
    color: dict = {}
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


def input_cost(rows: dict, root_ids: list[int], opaque_keys, model: GPUCostModel | None = None) -> float:
    """The cost model's estimate of the input graph: the DAG cost of the terms the translator inserted.

    ``rows`` are the translator's insertion rows (``optimus_bridge.translate.Translation.rows``: one relation
    per constructor, ``NarrowIn(id, x, d, s, l, n)``, ``ConsIn(list, d, x, rest)``, shapes in ``ShapeIn``);
    ``root_ids`` the term ids of the roots (``Translation.node_id`` of ``Translation.roots``). Every term
    is costed exactly as :meth:`EGraphView.assign_costs` costs the same e-node (opaque terms are free), and
    each term reachable from the roots is paid once, like ``Extraction.dag_cost``. Two FX nodes computing
    the same value are two terms here (the input graph computes both), which the e-graph would merge.
    """
    with no_gc():
        return _input_cost(rows, root_ids, opaque_keys, model or GPUCostModel())


def _input_cost(rows: dict, root_ids: list[int], opaque_keys, model: GPUCostModel) -> float:
    numel_of_vec = {}
    for rel, table in rows.items():
        if rel.startswith("Vec") and rel.endswith("In"):
            for row in table:
                numel_of_vec[row[0]] = math.prod(row[1:])
    size = {tid: numel_of_vec.get(vid) for tid, vid in rows.get("ShapeIn", ())}
    lists = {lid: (x, rest) for lid, _, x, rest in rows.get("ConsIn", ())}
    arglists = {lid: (x, rest) for lid, x, rest in rows.get("AConsIn", ())}

    def elems(table: dict, lid: int) -> list[int]:
        out = []
        while lid in table:
            x, lid = table[lid]
            out.append(x)
        return out

    # term id -> (op, tensor children, numels of the e-node's children as the e-graph sees them, opaque)
    terms: dict[int, tuple] = {}
    for tid, key in rows.get("LeafIn", ()):
        terms[tid] = ("Leaf", [], [], key in opaque_keys)
    for tid, key, a in rows.get("ApplyIn", ()):
        terms[tid] = ("Apply", elems(arglists, a), [None], key in opaque_keys)
    for tid, l in rows.get("CatIn", ()):
        terms[tid] = ("Cat", elems(lists, l), [None], False)
    for rel, op in (("NarrowIn", "Narrow"), ("SelectIn", "Select"), ("UnsqueezeIn", "Unsqueeze"),
                    ("ReshapeIn", "Reshape"), ("PermuteIn", "Permute")):
        for row in rows.get(rel, ()):
            terms[row[0]] = (op, [row[1]], [size.get(row[1])], False)
    for tid, _, x in rows.get("UnaryIn", ()):
        terms[tid] = ("Unary", [x], [size.get(x)], False)
    for tid, _, x, y in rows.get("BinaryIn", ()):
        terms[tid] = ("Binary", [x, y], [size.get(x), size.get(y)], False)
    seen: set[int] = set()
    stack = [r for r in root_ids if r in terms]
    total = 0.0
    while stack:
        tid = stack.pop()
        if tid in seen:
            continue
        seen.add(tid)
        op, kids, ins, opaque = terms[tid]
        total += model.node_cost(op, size.get(tid), ins, opaque)
        stack.extend(k for k in kids if k in terms and k not in seen)
    return total


# -- the indexed problem -------------------------------------------------------------------------------

class _Problem:
    """The e-graph as dense integers: e-nodes 0..N-1, e-classes 0..C-1, plus CSR arrays of the children."""

    def __init__(self, view: EGraphView, forced_nodes: set) -> None:
        nodes = view.nodes
        C = getattr(view, "_num_classes", None)
        if C is not None and len(nodes) and next(reversed(nodes)) == len(nodes) - 1:
            # ids from from_egraph: e-nodes 0..N-1 in order, e-classes 0..C-1
            self.nids: range | list = range(len(nodes))
            self.cids: range | list = range(C)
            self.cid: range | dict = self.cids
            ens = list(nodes.values())
            self.cnodes: list[list[int]] = [[] for _ in range(C)]
            for c, ns in view.classes.items():
                self.cnodes[c] = ns
            self.kids: list[list[int]] = [en.children for en in ens]
            nidx = None
        else:
            self.nids = list(nodes)
            cid: dict = {}
            for c in view.classes:
                cid[c] = len(cid)
            ens = [nodes[n] for n in self.nids]
            for en in ens:
                for c in en.children:
                    if c not in cid:  # a class without term e-nodes
                        cid[c] = len(cid)
            self.cids, self.cid = list(cid), cid
            nidx = {n: i for i, n in enumerate(self.nids)}
            self.cnodes = [[] for _ in cid]
            for c, ns in view.classes.items():
                self.cnodes[cid[c]] = [nidx[n] for n in ns]
            self.kids = [[cid[c] for c in en.children] for en in ens]
        # a repeated child is repeated in kids: harmless everywhere below
        self.ncls: list[int] = [self.cid[en.eclass] for en in ens]
        self.cost: list[float] = [en.cost for en in ens]
        self.forced: dict[int, int] = {}  # class -> its forced e-node
        for n in forced_nodes:
            i = (n if isinstance(n, int) and 0 <= n < len(ens) else None) if nidx is None else nidx.get(n)
            if i is not None:
                self.forced[self.ncls[i]] = i
        for n in forced_nodes:  # a forced self loop: no e-node of its class may be chosen (-2 matches none)
            c = view.self_loops.get(n)
            if c is not None and self.has(c):
                self.forced[self.cid[c]] = -2
        self._edges = None

    def _csr(self):
        if self._edges is None:
            N = len(self.kids)
            counts = np.fromiter(map(len, self.kids), dtype=np.int64, count=N)
            flat = np.fromiter(itertools.chain.from_iterable(self.kids), dtype=np.int64, count=int(counts.sum()))
            enode = np.repeat(np.arange(N, dtype=np.int64), counts)
            ncls_a = np.asarray(self.ncls, dtype=np.int64)
            self._edges = (flat, enode, ncls_a, ncls_a[enode])
        return self._edges

    # the children as edge arrays (built on first use)
    flat = property(lambda self: self._csr()[0], doc="edge -> child class")
    enode = property(lambda self: self._csr()[1], doc="edge -> its e-node")
    ncls_a = property(lambda self: self._csr()[2], doc="e-node -> its class, as an array")
    esrc = property(lambda self: self._csr()[3], doc="edge -> its e-node's class")

    def has(self, c) -> bool:
        if isinstance(self.cid, range):
            return isinstance(c, (int, np.integer)) and 0 <= c < len(self.cid)
        return c in self.cid

    def tree(self) -> list[int]:
        """Tree-cost choice per class (-1: no acyclic derivation), forced e-nodes respected."""
        C = len(self.cids)
        parents: list[list[int]] = [[] for _ in range(C)]
        pending = list(map(len, self.kids))
        heap: list[tuple[float, int]] = []
        cost, kids, ncls, forced = self.cost, self.kids, self.ncls, self.forced
        for i, ks in enumerate(kids):
            if ks:
                for c in ks:
                    parents[c].append(i)
            else:
                heap.append((cost[i], i))
        heapq.heapify(heap)
        pop, push = heapq.heappop, heapq.heappush
        best = [0.0] * C
        choice = [-1] * C
        while heap:
            cst, i = pop(heap)
            c = ncls[i]
            if choice[c] >= 0:
                continue
            f = forced.get(c)
            if f is not None and f != i:
                continue
            choice[c], best[c] = i, cst
            for q in parents[c]:
                pending[q] -= 1
                if pending[q] == 0:
                    push(heap, (cost[q] + sum([best[k] for k in kids[q]]), q))
        return choice

    def plan_classes(self, pick: list[int], rroots: list[int]) -> list[int]:
        """Classes a plan needs, from the roots through the chosen e-nodes."""
        seen = set(rroots)
        order = list(seen)
        kids = self.kids
        k = 0
        while k < len(order):
            for x in kids[pick[order[k]]]:
                if x not in seen:
                    seen.add(x)
                    order.append(x)
            k += 1
        return order


def _graph(n: int, src: np.ndarray, dst: np.ndarray):
    from scipy.sparse import csr_matrix

    return csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))


def _bfs(C: int, src: np.ndarray, dst: np.ndarray, roots: list[int]) -> np.ndarray:
    """Mask of the classes reachable from ``roots`` along the edges ``src -> dst``."""
    from scipy.sparse.csgraph import breadth_first_order

    r = np.asarray(roots, dtype=np.int64)
    g = _graph(C + 1, np.concatenate([src, np.full(len(r), C)]), np.concatenate([dst, r]))
    mask = np.zeros(C + 1, dtype=bool)
    mask[breadth_first_order(g, C, directed=True, return_predecessors=False)] = True
    return mask[:C]


def _sccs(C: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Strongly connected component of every class, and whether the class lies on a cycle."""
    from scipy.sparse.csgraph import connected_components

    _, label = connected_components(_graph(C, src, dst), directed=True, connection="strong")
    return label, np.bincount(label, minlength=C)[label] > 1


def _prune_cycles(p: _Problem, valid: np.ndarray, scc: np.ndarray, cyclic: np.ndarray, reach: np.ndarray) -> int:
    """Drop e-nodes whose every derivation needs their own class (they can be in no acyclic plan).

    Per strongly connected component S, ``need[c]`` (a bitset over S) under-approximates the classes of S
    that every acyclic derivation of ``c`` uses: the intersection over c's e-nodes of the union, over their
    children k in S, of ``{k} | need[k]``, iterated down from "underivable" to a fixpoint. An e-node of
    ``c`` whose union contains ``c`` itself closes a cycle in every plan. Returns how many were dropped.

    On split/cat graphs this removes every cycle of the e-graph we have seen (``x`` is ``view(cat(
    unsqueeze(select(view(x)))))``: the cat can only be computed from ``x`` itself).
    """
    members: dict[int, list[int]] = defaultdict(list)
    for c in np.flatnonzero(cyclic & reach).tolist():
        members[int(scc[c])].append(c)
    kids, cnodes = p.kids, p.cnodes
    dropped = 0
    for ms in members.values():
        bit = {c: 1 << k for k, c in enumerate(ms)}
        inner = {c: [(i, [k for k in kids[i] if k in bit]) for i in cnodes[c] if valid[i]] for c in ms}
        parents: dict[int, set[int]] = defaultdict(set)
        for c, nodes in inner.items():
            for _, ks in nodes:
                for k in ks:
                    parents[k].add(c)
        need: dict[int, int] = {}
        work = list(ms)
        queued = set(ms)
        while work:
            c = work.pop()
            queued.discard(c)
            acc = None
            for _, ks in inner[c]:
                dep = 0
                for k in ks:
                    nk = need.get(k)
                    if nk is None:
                        break
                    dep |= bit[k] | nk
                else:
                    acc = dep if acc is None else acc & dep
            if acc is not None and need.get(c) != acc:
                need[c] = acc
                for q in parents[c]:
                    if q not in queued:
                        queued.add(q)
                        work.append(q)
        for c, nodes in inner.items():
            b = bit[c]
            for i, ks in nodes:
                dep = 0
                for k in ks:
                    dep |= bit[k] | need.get(k, 0)
                if dep & b:
                    valid[i] = False
                    dropped += 1
    return dropped


@dataclass
class _Prepared:
    """The pruned problem (see the module docstring). Arrays are indexed by class unless said otherwise."""

    valid: list[bool]          # per e-node: can be in an acyclic plan
    reach: np.ndarray          # bool: reachable from the roots through valid e-nodes
    nvalid: np.ndarray         # number of valid e-nodes
    mandatory: np.ndarray      # bool: needed by every plan
    fixed: np.ndarray          # bool: mandatory with one valid e-node (no variable)
    scc: np.ndarray            # strongly connected component of the pruned class graph
    cyclic: np.ndarray         # bool: lies on a cycle of the pruned class graph
    pruned: int                # e-nodes dropped because every derivation of them is cyclic
    cnodes: list[list[int]]

    def vnodes(self, c: int) -> list[int]:
        valid = self.valid
        return [i for i in self.cnodes[c] if valid[i]]


def _prepare(p: _Problem, tree_pick: list[int], rroots: list[int]) -> _Prepared:
    C, N = len(p.cids), len(p.kids)
    derivable = np.asarray(tree_pick, dtype=np.int64) >= 0
    bad_kid = np.bincount(p.enode, weights=~derivable[p.flat], minlength=N) > 0
    fnode = np.full(C, -1, dtype=np.int64)
    for c, i in p.forced.items():
        fnode[c] = i
    fc = fnode[p.ncls_a]
    valid = derivable[p.ncls_a] & ~bad_kid & ((fc == -1) | (fc == np.arange(N)))

    def structure(valid: np.ndarray):
        ev = valid[p.enode]
        src, dst = p.esrc[ev], p.flat[ev]
        reach = _bfs(C, src, dst, rroots)
        scc, cyclic = _sccs(C, src, dst)
        return ev, reach, scc, cyclic

    ev, reach, scc, cyclic = structure(valid)
    pruned = 0
    if (cyclic & reach).any():
        pruned = _prune_cycles(p, valid, scc, cyclic, reach)
        if pruned:
            ev, reach, scc, cyclic = structure(valid)
    nvalid = np.bincount(p.ncls_a[valid], minlength=C)
    single = ev & (nvalid[p.esrc] == 1)
    mandatory = _bfs(C, p.esrc[single], p.flat[single], rroots)
    fixed = mandatory & (nvalid == 1)
    return _Prepared(valid.tolist(), reach, nvalid, mandatory, fixed, scc, cyclic, pruned, p.cnodes)


# -- the ILP -----------------------------------------------------------------------------------------------

def _plan_cycles(members: list[int], pick: dict[int, int], kids: list) -> list[list[int]]:
    """Every cycle closed by a back edge of one DFS over the chosen e-nodes of ``members`` (classes)."""
    inside = set(members)
    color: dict[int, int] = {}
    cycles = []
    for start in members:
        if start in color:
            continue
        color[start] = 1
        path = [start]
        stack = [iter(kids[pick[start]])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                color[path.pop()] = 2
                stack.pop()
                continue
            if nxt not in inside:
                continue
            state = color.get(nxt, 0)
            if state == 1:
                cycles.append([pick[c] for c in path[path.index(nxt):]])
            elif state == 0:
                color[nxt] = 1
                path.append(nxt)
                stack.append(iter(kids[pick[nxt]]))
    return cycles


class _ILP:
    """Independent 0-1 ILPs over the pruned problem (see the module docstring)."""

    def __init__(self, p: _Problem, prep: _Prepared) -> None:
        from scipy.sparse.csgraph import connected_components

        self.p, self.prep = p, prep
        self.order_after = ORDER_AFTER
        C = len(p.cids)
        fixed, cyclic, scc, reach = prep.fixed, prep.cyclic, prep.scc, prep.reach
        # a class joins the ILP unless it is fixed (a cyclic fixed class stays: it carries an order variable)
        inside = reach & ~(fixed & ~cyclic)
        valid_edge = np.asarray(prep.valid, dtype=bool)[p.enode]
        e = valid_edge & inside[p.esrc] & inside[p.flat]
        src, dst = p.esrc[e], p.flat[e]
        cyc = np.flatnonzero(cyclic & inside)
        if len(cyc):  # keep each strongly connected component in one ILP, so that every cycle is inside one
            _, first = np.unique(scc[cyc], return_index=True)
            rep = np.full(C, -1, dtype=np.int64)
            rep[scc[cyc[first]]] = cyc[first]
            src = np.concatenate([src, rep[scc[cyc]]])
            dst = np.concatenate([dst, cyc])
        _, comp = connected_components(_graph(C, src, dst), directed=False)
        members = np.flatnonzero(inside)
        order = members[np.argsort(comp[members], kind="stable")]
        labels = comp[order]
        starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])
        choice = prep.nvalid[order] > 1
        size = np.where(fixed[order], 0, prep.nvalid[order])
        has_choice = np.logical_or.reduceat(choice, starts) if len(order) else np.zeros(0, bool)
        sizes = np.add.reduceat(size, starts) if len(order) else np.zeros(0, np.int64)
        bounds = np.r_[starts, len(order)]
        self.groups = [(int(sizes[g]), order[bounds[g]:bounds[g + 1]].tolist())
                       for g in np.flatnonzero(has_choice)]
        self.fixed = fixed.tolist()
        self.mandatory = prep.mandatory.tolist()
        self.cyclic = cyclic.tolist()
        self.scc = scc.tolist()

    def solve(self, group: list[int], seconds: float, max_rounds: int) -> tuple[dict[int, int] | None, int, str]:
        """Choose an e-node for the classes of ``group`` (several independent components at once)."""
        p, prep, fixed, mandatory = self.p, self.prep, self.fixed, self.mandatory
        vnodes = {c: prep.vnodes(c) for c in group}
        var_nodes = [i for c in group if not fixed[c] for i in vnodes[c]]
        index = {i: k for k, i in enumerate(var_nodes)}
        nx = len(var_nodes)
        cost = np.array([p.cost[i] for i in var_nodes]) + 1e-6  # break ties toward fewer e-nodes
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        lo: list[float] = []
        r = 0
        for c in group:
            if mandatory[c] and not fixed[c]:  # needed by every plan: cover it
                vn = vnodes[c]
                rows.extend([r] * len(vn))
                cols.extend([index[i] for i in vn])
                vals.extend([1.0] * len(vn))
                lo.append(1.0)
                r += 1
        kids = p.kids
        for k_self, i in enumerate(var_nodes):
            for k in kids[i]:
                if mandatory[k]:
                    continue  # in every plan anyway
                vn = vnodes[k]  # a chosen e-node needs one chosen e-node in each child class
                rows.extend([r] * (len(vn) + 1))
                cols.extend([index[m] for m in vn])
                cols.append(k_self)
                vals.extend([1.0] * len(vn))
                vals.append(-1.0)
                lo.append(0.0)
                r += 1
        hi = [np.inf] * r
        ordered: set[int] = set()  # SCCs that got topological-order variables
        tvar: dict[int, int] = {}   # class -> column of its order variable
        tub: list[float] = []
        deadline = time.perf_counter() + seconds
        pick: dict[int, int] = {c: vnodes[c][0] for c in group if fixed[c]}

        def order(sccs) -> None:
            nonlocal r
            for s in sccs:
                ordered.add(s)
                members = [c for c in group if self.cyclic[c] and self.scc[c] == s]
                for c in members:
                    tvar[c] = nx + len(tvar)
                    tub.append(float(len(members)))
                r = self._order_rows(members, vnodes, index, tvar, rows, cols, vals, lo, hi, r)

        if self.order_after == 0:
            order({self.scc[c] for c in group if self.cyclic[c]})
        for rnd in range(1, max_rounds + 1):
            left = deadline - time.perf_counter()
            if left <= 0:
                return None, rnd - 1, "ilp time limit"
            x = _milp(np.concatenate([cost, np.zeros(len(tvar))]), rows, cols, vals, lo, hi, nx,
                      np.concatenate([np.ones(nx), tub]), left)
            if isinstance(x, str):
                return None, rnd, x
            chosen: dict[int, int] = {}
            for k in np.flatnonzero(x[:nx] > 0.5).tolist():
                i = var_nodes[k]
                c = p.ncls[i]
                cur = chosen.get(c)
                if cur is None or p.cost[i] < p.cost[cur]:
                    chosen[c] = i
            for c in group:
                if not fixed[c]:
                    if c in chosen:
                        pick[c] = chosen[c]
                    else:
                        pick.pop(c, None)
            members = [c for c in group if c in pick]
            cycles = _plan_cycles(members, pick, kids)
            if not cycles:
                return {c: pick[c] for c in members if not fixed[c]}, rnd, ""
            for cyc in cycles:  # forbid every cycle of this plan
                free = [index[i] for i in cyc if i in index]
                if not free:
                    return None, rnd, "cycle among fixed e-nodes"
                rows.extend([r] * len(free))
                cols.extend(free)
                vals.extend([1.0] * len(free))
                lo.append(-np.inf)
                hi.append(len(free) - 1.0)
                r += 1
            if rnd >= self.order_after:  # an SCC that keeps cycling gets order variables
                order({self.scc[p.ncls[cyc[0]]] for cyc in cycles} - ordered)
        return None, max_rounds, "ilp cycle rounds exhausted"

    def _order_rows(self, members, vnodes, index, tvar, rows, cols, vals, lo, hi, r) -> int:
        """Rows ``t_c - t_k >= 1`` for every e-node of ``c`` needing ``k`` (both in one SCC), when chosen."""
        big = float(len(members))
        inside = set(members)
        for c in members:
            for i in vnodes[c]:
                for k in self.p.kids[i]:
                    if k not in inside:
                        continue
                    rows.extend([r, r])
                    cols.extend([tvar[c], tvar[k]])
                    vals.extend([1.0, -1.0])
                    if i in index:  # t_c - t_k - big * x_i >= 1 - big
                        rows.append(r), cols.append(index[i]), vals.append(-big)
                        lo.append(1.0 - big)
                    else:           # a fixed e-node: always chosen
                        lo.append(1.0)
                    hi.append(np.inf)
                    r += 1
        return r


def _milp(cost, rows, cols, vals, lo, hi, n_int, ub, seconds):
    """Solve min cost.x, lo <= A x <= hi, 0 <= x <= ub, the first n_int columns binary. Returns x or a
    reason (str)."""
    from scipy.sparse import csc_matrix

    n = len(cost)
    a = csc_matrix((vals, (rows, cols)), shape=(len(lo), n))
    if _highs() is not None:
        try:
            return _highs_direct(cost, a, np.asarray(lo, dtype=float), np.asarray(hi, dtype=float), n_int, ub,
                                 seconds)
        except _HighsUnavailable:
            pass
    from scipy.optimize import Bounds, LinearConstraint, milp

    integrality = np.zeros(n)
    integrality[:n_int] = 1
    res = milp(cost, constraints=LinearConstraint(a, lo, hi), integrality=integrality,
               bounds=Bounds(np.zeros(n), ub), options={"time_limit": seconds})
    if res.x is None or res.status != 0:
        return f"ilp status {res.status}: {res.message}"
    return res.x


class _HighsUnavailable(Exception):
    pass


_HIGHS: list = []  # the bindings, loaded on first use (importing scipy.optimize takes ~0.5 s)


def _highs():
    if not _HIGHS:
        try:
            import scipy.optimize._highspy._core as core  # the HiGHS that scipy.optimize.milp wraps

            core.HighsLp, core._Highs, core.HighsVarType.kInteger, core.MatrixFormat.kColwise  # noqa: B018
        except Exception:  # another scipy: use the public milp
            core = None
        _HIGHS.append(core)
    return _HIGHS[0]


def _highs_direct(cost, a, lo, hi, n_int, ub, seconds):
    """HiGHS through the bindings scipy ships (what ``milp`` does, minus ~1 ms of Python per call).

    The LP relaxation is solved first: on these problems it is almost always integral (every batch of the
    synthetic benchmarks), and then it is the ILP's optimum, found 4x faster than by the MIP solver.
    """
    h = _highs()
    n = len(cost)
    lp = h.HighsLp()
    lp.num_col_, lp.num_row_ = n, a.shape[0]
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n, a.shape[0]
    lp.a_matrix_.format_ = h.MatrixFormat.kColwise
    lp.col_cost_ = np.asarray(cost, dtype=float)
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.asarray(ub, dtype=float)
    lp.row_lower_ = lo
    lp.row_upper_ = hi
    lp.a_matrix_.start_ = a.indptr
    lp.a_matrix_.index_ = a.indices
    lp.a_matrix_.value_ = a.data
    deadline = time.perf_counter() + seconds
    for relaxed in (True, False):
        if not relaxed:
            lp.integrality_ = [h.HighsVarType.kInteger] * n_int + [h.HighsVarType.kContinuous] * (n - n_int)
        highs = h._Highs()
        try:
            highs.setOptionValue("output_flag", False)
            highs.setOptionValue("time_limit", float(max(deadline - time.perf_counter(), 1e-3)))
            if highs.passModel(lp) == h.HighsStatus.kError:
                raise _HighsUnavailable
            highs.run()
        except _HighsUnavailable:
            raise
        except Exception as exc:  # an API difference: fall back to milp
            raise _HighsUnavailable from exc
        status = highs.getModelStatus()
        if status != h.HighsModelStatus.kOptimal:
            return f"ilp status {highs.modelStatusToString(status)}"
        x = np.asarray(highs.getSolution().col_value)
        if not relaxed or np.all(np.abs(x[:n_int] - np.round(x[:n_int])) <= 1e-7):
            return x
    raise AssertionError("unreachable")


# -- local search ---------------------------------------------------------------------------------------------

def _refine(p: _Problem, pick: list[int], rroots: list[int], prep: _Prepared, deadline: float,
            passes: int = 3) -> int:
    """DAG-aware local search on ``pick`` (class -> e-node, in place). Returns the number of moves.

    Reference counts say which classes the plan uses; a move re-chooses one used class when the exact
    change of the DAG cost is negative (e-nodes left unused are saved, classes newly used are paid once)
    and the new e-node's sub-plan does not reach the class (checked only inside its strongly connected
    component, where all cycles lie). ``pick`` must be acyclic over all classes (the tree choice is), and
    stays so.
    """
    C = len(p.cids)
    kids, cost = p.kids, p.cost
    scc, cyclic = prep.scc.tolist(), prep.cyclic.tolist()
    refs = [0] * C
    for c in p.plan_classes(pick, rroots):
        for k in kids[pick[c]]:
            refs[k] += 1
    for r in set(rroots):
        refs[r] += 1
    candidates = np.flatnonzero(prep.reach & (prep.nvalid > 1)).tolist()

    def release(c: int, undo: list) -> float:
        saved = 0.0
        st = [c]
        while st:
            x = st.pop()
            refs[x] -= 1
            undo.append((x, 1))
            if refs[x] == 0:
                saved += cost[pick[x]]
                st.extend(kids[pick[x]])
        return saved

    def acquire(c: int, undo: list) -> float:
        paid = 0.0
        st = [c]
        while st:
            x = st.pop()
            refs[x] += 1
            undo.append((x, -1))
            if refs[x] == 1:
                paid += cost[pick[x]]
                st.extend(kids[pick[x]])
        return paid

    def reaches(srcs, target: int) -> bool:
        comp = scc[target]
        st = [k for k in srcs if cyclic[k] and scc[k] == comp]
        vis: set[int] = set()
        while st:
            x = st.pop()
            if x == target:
                return True
            if x in vis:
                continue
            vis.add(x)
            st.extend(k for k in kids[pick[x]] if scc[k] == comp)
        return False

    def single(c: int) -> bool:
        """Re-choose class ``c`` alone, if that lowers the DAG cost."""
        cur = pick[c]
        for alt in prep.vnodes(c):
            if alt == cur:
                continue
            undo: list = []
            delta = cost[alt] - cost[cur]
            for k in kids[alt]:
                delta += acquire(k, undo)
            for k in kids[cur]:
                delta -= release(k, undo)
            if delta < -1e-9 and not (cyclic[c] and reaches(kids[alt], c)):
                pick[c] = alt
                return True
            for x, d in reversed(undo):
                refs[x] += d
        return False

    # users[s]: valid e-nodes that need class s (for group moves)
    valid_edge = np.asarray(prep.valid, dtype=bool)[p.enode]
    order = np.argsort(p.flat[valid_edge], kind="stable")
    user_nodes = p.enode[valid_edge][order]
    user_ptr = np.searchsorted(p.flat[valid_edge][order], np.arange(C + 1))

    def group(s: int) -> bool:
        """Make every used class that has an e-node needing the unused class ``s`` switch to it, if the
        moves together lower the DAG cost (one shared e-node replacing many: what single moves miss)."""
        best: dict[int, int] = {}
        for i in user_nodes[user_ptr[s]:user_ptr[s + 1]].tolist():
            q = ncls[i]
            if refs[q] > 0 and pick[q] != i and (q not in best or cost[i] < cost[best[q]]):
                best[q] = i
        if len(best) < 2:
            return False
        undo: list = []
        switched: list[tuple[int, int]] = []
        delta = acquire(s, undo)  # a temporary reference: s is paid once, up front
        for q, i in best.items():
            cur = pick[q]
            if cyclic[q] and reaches(kids[i], q):
                continue
            mark = len(undo)
            d = cost[i] - cost[cur]
            for k in kids[i]:
                d += acquire(k, undo)
            for k in kids[cur]:
                d -= release(k, undo)
            if d < 0:
                pick[q] = i
                switched.append((q, cur))
                delta += d
            else:
                for x, dd in reversed(undo[mark:]):
                    refs[x] += dd
                del undo[mark:]
        delta -= release(s, undo)
        if switched and delta < -1e-9:
            return True
        for x, dd in reversed(undo):
            refs[x] += dd
        for q, cur in reversed(switched):
            pick[q] = cur
        return False

    ncls = p.ncls
    moves = 0
    for _ in range(passes):
        improved = False
        for c in candidates:
            if time.perf_counter() > deadline:
                return moves
            if refs[c] > 0 and single(c):
                moves += 1
                improved = True
        shared = np.flatnonzero(prep.reach & (np.diff(user_ptr) > 1)).tolist()
        for s_cls in shared:
            if time.perf_counter() > deadline:
                return moves
            if refs[s_cls] == 0 and group(s_cls):
                moves += 1
                improved = True
        if not improved:
            break
    return moves


# -- entry point ----------------------------------------------------------------------------------------------

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
        RuntimeError: when some root has no acyclic derivation with the forced e-nodes (a bug in the rules
            or the bridge).
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
        raise RuntimeError(f"no acyclic term for e-classes {missing[:5]}")
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
        raise RuntimeError(f"no acyclic term for e-classes {bad[:5]}")
    cids, nids = p.cids, p.nids
    choice = {cids[c]: nids[pick[c]] for c in needed}
    cost = sum(p.cost[pick[c]] for c in needed)
    return Extraction(choice, cost, "tree", time.perf_counter() - start, 0, "no choice")
