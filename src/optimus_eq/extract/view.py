"""Reading an egglog e-graph into an :class:`EGraphView` (term e-nodes, e-classes, shapes, FX handles),
from egglog's frozen tables (fast) or its JSON serialization, and costing its e-nodes with the cost model.
"""

from __future__ import annotations

import contextlib
import gc
from collections import defaultdict
from dataclasses import dataclass, field

from optimus_eq.cost import FREE, VIEWS, GPUCostModel, numel
from optimus_eq.extract.fusion import fused_nodes
from optimus_eq.extract.gemm import gemm_nodes
from optimus_eq.extract.grad import packed_cats, training_costs
from optimus_eq.terms import CONSTRUCTORS

_TERM_SORTS = frozenset(["T", "TL", "Args"])


@contextlib.contextmanager
def no_gc():
    """Pause the cyclic garbage collector: building ~10^5 small objects next to a large FX graph otherwise
    triggers full collections that cost more than the work itself (0.40 s -> 0.03 s)."""
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


def _restore_subsumed(classes, subsumed: list, at: int = 1, everything: bool = False) -> list:
    """The subsumed e-nodes (tuples whose e-class is item ``at``) of the e-classes left with no other
    e-node, or with ``everything`` all of them. Greedy's destructive rewrites remove (subsume) an e-node, but a
    later merge can make a live e-node congruent to a removed one, which removes it too: ``x.view(4, -1).view(4,
    3, 6).view(4, -1)`` with x [4, 3, 6] (the middle view merges with x, the last view's removed e-node becomes
    the first view's) left the first view's class with only a self loop, and greedy fell back with NoAcyclicTerm.
    A later merge can also close a cycle through a fused group whose members' originals
    were removed: ``tanh(cat([v]))`` batched with ``tanh(relu(tanh(v)))`` (independent when fused), then
    ``cat([v]) -> v`` makes the first member's input congruent to the second's (fuzz seed 1007226); only the
    members' removed e-nodes give an acyclic plan back (``everything``). A subsumed e-node is still an
    equality the rules proved, so it is a sound last resort for such a class."""
    if everything:
        return list(subsumed)
    return [t for t in subsumed if not classes.get(t[at])]


class _Dense(dict):
    """A dict that gives each new key the next int (0, 1, ...): ``d[k]`` interns ``k``."""

    def __missing__(self, key) -> int:
        v = self[key] = len(self)
        return v


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
        gradients: a :class:`optimus_eq.extract.grad.GradientInfo` when the graph will be differentiated
            (set by the caller); :meth:`assign_costs` then adds the backward's costs.
        op_kinds: op key id -> ``"pointwise"`` / ``"reduction"`` (:func:`optimus_eq.extract.fusion.op_kinds`
            of the translation's recipes; set by the caller): with a model that credits fusion,
            :meth:`assign_costs` prices the e-nodes Inductor computes inside another kernel without a launch
            (:mod:`optimus_eq.extract.fusion`). None: no credit.
        packable: FX node ids (term ids) of the graph's ``nn.Parameter`` inputs (set by the caller): with a
            model whose ``packed_parameters`` is set, :meth:`assign_costs` prices a ``Cat`` of them along
            dim 0 (a stack or a cat of parameters, which the backend packs into one buffer) as a view.
    """

    nodes: dict = field(default_factory=dict)
    classes: dict = field(default_factory=lambda: defaultdict(list))
    shapes: dict = field(default_factory=dict)
    node_of: dict[int, object] = field(default_factory=dict)
    inconsistent: list[str] = field(default_factory=list)
    self_loops: dict = field(default_factory=dict)
    gradients: object = None
    op_kinds: dict | None = None
    packable: frozenset = frozenset()

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
    def from_egraph(cls, egraph, restore_subsumed: bool | str = False) -> "EGraphView":
        """Read the e-graph straight from egglog's frozen tables (``egglog.bindings.EGraph.freeze``).

        ``egraph`` is an :class:`optimus_eq.egraph.EGraph` or an ``egglog.bindings.EGraph``. Much faster
        than serializing to JSON and parsing it (0.5 s instead of 7 s at 125k e-nodes, 2 cores). E-node
        ids are 0..N-1 and e-class ids 0..C-1 (ints), which lets :func:`extract` skip re-indexing.
        ``restore_subsumed``: True gives an e-class left with no e-node but subsumed ones those e-nodes back,
        ``"all"`` gives every subsumed e-node back (:func:`_restore_subsumed`; the retries of an extraction
        that found no acyclic term).
        """
        with no_gc():
            return cls._from_frozen(getattr(egraph, "egraph", egraph), restore_subsumed)

    @classmethod
    def _from_frozen(cls, g, restore_subsumed: bool | str = False) -> "EGraphView":
        functions = g.freeze().functions
        i64, to_vec = g.value_to_i64, g.value_to_vec
        view = cls()
        nodes, classes, inconsistent = view.nodes, view.classes, view.inconsistent
        ids = _Dense()          # egglog Value of an e-class -> dense int (0, 1, ... in order of first sight)
        vecs: dict = {}         # egglog Value of an IVec -> tuple of ints

        def vec(v) -> tuple:
            t = vecs.get(v)
            if t is None:
                t = vecs[v] = tuple(i64(x) for x in to_vec(v))
            return t

        nid = 0
        leaves: dict[int, int] = {}
        subsumed: list = []     # (op, e-class, children, literals) of subsumed rows, for _restore_subsumed
        make = ENode
        for op, fn in functions.items():
            if op not in CONSTRUCTORS:
                continue
            kinds = [0 if s in _TERM_SORTS else 1 if s == "i64" else 2 for s in fn.input_sorts]
            tpos = [k for k, kind in enumerate(kinds) if kind == 0]
            lpos = [(k, kind == 1) for k, kind in enumerate(kinds) if kind != 0]
            ints = [k for k, is_int in lpos] if all(is_int for _, is_int in lpos) else None
            checked = op in ("Unary", "Binary", "Apply", "Leaf")  # f(x) == x is never derivable for these
            leaf = op == "Leaf"
            # the children and literals read with one comprehension each (no per-row closure or len() call):
            # ~40% of this loop's time at 10^5 rows
            for row in fn.rows:
                ins = row.inputs
                children = [ids[ins[k]] for k in tpos]
                if ints is not None:
                    literals = [i64(ins[k]) for k in ints]
                else:
                    literals = [i64(ins[k]) if is_int else vec(ins[k]) for k, is_int in lpos]
                c = ids[row.output]
                if row.subsumed:
                    if restore_subsumed and c not in children:
                        subsumed.append((op, c, children, literals))
                    continue
                if c in children:  # self loop: never part of an acyclic plan
                    if checked:
                        inconsistent.append(f"{op}{tuple(literals)} in its own argument's e-class")
                    continue
                nodes[nid] = make(op, c, children, literals)
                classes[c].append(nid)
                nid += 1
                if leaf:
                    leaves[c] = leaves.get(c, 0) + 1
        if "NodeOf" in functions:
            for row in functions["NodeOf"].rows:
                view.node_of[i64(row.inputs[0])] = ids[row.output]
        if "shape" in functions:
            get, shapes = ids.get, view.shapes
            for row in functions["shape"].rows:
                c = get(row.inputs[0])
                if c is not None:
                    shapes[c] = vec(row.output)
        for c, n in leaves.items():
            if n > 1:
                inconsistent.append(f"two graph inputs or opaque leaves in e-class {c}")
        for op, c, children, literals in _restore_subsumed(classes, subsumed, 1, restore_subsumed == "all"):
            nodes[nid] = ENode(op, c, children, literals)
            classes[c].append(nid)
            nid += 1
        view._num_classes = len(ids)
        return view

    @classmethod
    def from_json(cls, data: dict, restore_subsumed: bool | str = False) -> "EGraphView":
        """Parse egglog's JSON serialization (slower than :meth:`from_egraph`; same result, str ids).

        ``data`` may also be an e-graph, which is then read with :meth:`from_egraph`.
        """
        if not isinstance(data, dict):
            return cls.from_egraph(data, restore_subsumed)
        raw = data["nodes"]
        view = cls()
        subsumed: list = []

        def literal(nid: str):
            node = raw[nid]
            if node["op"] == "vec-of":
                return tuple(int(raw[c]["op"]) for c in node["children"])
            return int(node["op"])

        for nid, node in raw.items():
            op = node["op"]
            if op == "NodeOf":
                view.node_of[int(raw[node["children"][0]]["op"])] = node["eclass"]
            if op not in CONSTRUCTORS:
                continue
            children, literals = [], []
            for c in node["children"]:
                if c.startswith("primitive-"):
                    literals.append(literal(c))
                else:
                    children.append(raw[c]["eclass"])
            if node.get("subsumed"):
                if restore_subsumed and node["eclass"] not in children:
                    subsumed.append((nid, op, node["eclass"], children, literals))
                continue
            view._add(nid, op, node["eclass"], children, literals)
        for nid, op, c, children, literals in _restore_subsumed(view.classes, subsumed, 2, restore_subsumed == "all"):
            view._add(nid, op, c, children, literals)
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
        """Set every e-node's ``cost``: its forward cost, plus its backward's (:mod:`optimus_eq.extract.grad`)
        when ``gradients`` is set and the model prices training; e-nodes Inductor fuses into another op's
        kernel (:mod:`optimus_eq.extract.fusion`, when ``op_kinds`` is set and the model's ``fusion``) pay
        :meth:`GPUCostModel.fused_cost` instead (and ``fused_backward_cost``)."""
        by_shape: dict = {}  # shape -> numel: a few hundred distinct shapes among 10^5 classes
        by_id: dict = {}     # id of a shape tuple -> numel (from_egraph shares one tuple per egglog vector)
        sizes: dict = {}
        for c, s in self.shapes.items():
            n = by_id.get(id(s))
            if n is None:
                n = by_shape.get(s)
                if n is None:
                    n = by_shape[s] = numel(s)
                by_id[id(s)] = n
            sizes[c] = n
        memo: dict = {}
        get = sizes.get
        # GPUCostModel prices a list cell, a leaf or a view by its op alone (FREE, VIEWS): those e-nodes (most of
        # an e-graph's, 70% at 287k) need no size lookups; a subclass that overrides node_cost gets them all
        unsized = FREE | VIEWS if type(model).node_cost is GPUCostModel.node_cost else frozenset()
        for nid, node in self.nodes.items():
            op = node.op
            if op in unsized:
                key = (op, nid in forced)
                cost = memo.get(key)
                if cost is None:
                    cost = memo[key] = model.node_cost(op, None, [], key[1])
            else:
                key = (op, get(node.eclass), tuple(map(get, node.children)), nid in forced)
                cost = memo.get(key)
                if cost is None:
                    cost = memo[key] = model.node_cost(op, key[1], list(key[2]), key[3])
            node.cost = cost
        gemms = gemm_nodes(self, getattr(self.op_kinds, "gemms", None), forced) if getattr(model, "gemm_flops", False) else {}
        for nid, (name, args) in gemms.items():  # extern GEMMs by FLOPs (GPUCostModel.gemm_cost), where shapes are known
            node = self.nodes[nid]
            cost = model.gemm_cost(name, self.shapes.get(node.eclass), [self.shapes.get(a) for a in args])
            if cost is not None:
                node.cost = cost
        fused: dict = {}
        if self.op_kinds is not None and getattr(model, "fusion", False):
            fused = fused_nodes(self, self.op_kinds, sizes, forced)
            for nid, (_, others) in fused.items():
                node = self.nodes[nid]
                node.cost = model.fused_cost(sizes.get(node.eclass), [sizes.get(c) for c in others])
        if self.gradients and getattr(model, "training", False):
            for nid, extra in training_costs(self, self.gradients, model, forced, fused, gemms).items():
                self.nodes[nid].cost += extra
        if self.packable and getattr(model, "packed_parameters", False):
            for nid in packed_cats(self, {self.node_of[h] for h in self.packable if h in self.node_of}):
                self.nodes[nid].cost = model.view_us
