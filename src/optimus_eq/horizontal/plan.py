"""Group analysis on a plan: which ops of the current best graph can be fused horizontally.

A *plan* is one extraction of the e-graph (e-class -> chosen e-node). :class:`PlanGraph` turns it into a
networkx DiGraph of tensor values (an edge ``u -> v`` when v reads u; list cells are looked through, so a
cat of N pieces has N in-edges), plus *order edges* between the FX nodes that lowering copies verbatim
(opaque ops, mutations): they are emitted in their original order, so a fused op that needs a value
computed after an opaque op A must not feed A. Members of a group must be mutually independent in this
graph: no path between any two of them (otherwise the fused op would need its own output).

Candidates are gathered the Optimus way (upstream torch/_inductor/fx_passes/group_batch_fusion.py,
``get_fusion_candidates`` and ``find_independent_subset_greedy``; read for the rule, code our own): from
every value in reverse topological order, a breadth-first search over its inputs up to
``max_fuse_search_depth`` hops collects the ops a pattern matches (it does not search past a match); ops
with equal group keys form a candidate list; greedy independent subsets of it (:mod:`.subsets`), of
at most ``max_fuse_set_size`` members, are fused when they have at least ``min_fuse_set_size``.
Unlike upstream, which walks a candidate list in breadth-first order from its search root, the walk is
in topological order, so the subsets depend on the candidates and the graph only, not on which
search root found them in which breadth-first order (same rule, possibly other subsets). After
each fused subset the graph gets the fused op (inputs of all members -> fused op -> every member), so
later subsets are checked against the dependencies fusion created.

Independence is computed with ancestor bitsets (Python ints, one bit per remaining candidate) in one
topological pass per subset: O(E) big-int operations instead of one ``nx.ancestors`` search per
candidate. The topological order and its repair after a fused op are :mod:`optimus_eq.horizontal.plan_order`,
the alternative forms of the plan's values :mod:`optimus_eq.horizontal.plan_alternatives` (both parts of
:class:`PlanGraph`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import networkx as nx

from optimus_eq.extract.grad import grad_classes
from optimus_eq.extract.plan import chosen_list
from optimus_eq.horizontal.plan_alternatives import (ALT_DEPTH, ALT_OPS, ALT_VIEWS, LIST_OPS,
                                                     PlanAlternatives)
from optimus_eq.horizontal.plan_order import PlanOrder
from optimus_eq.horizontal.subsets import GroupOverlap

@dataclass
class Member:
    """One op of the plan that a horizontal pattern may fuse.

    Attributes:
        cls: its e-class.
        op: the constructor of its chosen e-node: ``"Unary"``, ``"Binary"`` or ``"Apply"``.
        key: the op key (see :mod:`optimus_bridge.translate`).
        recipe: the bridge's :class:`optimus_eq.recipe.Recipe` (FX target, constant arguments, slots).
        types: ``(((dtype, device) per tensor input), (dtype, device) of the output)`` as strings.
        inputs: e-classes of its tensor inputs, in slot order.
        in_shapes: static shapes of ``inputs`` (None where unknown).
        shape: its static output shape (None where unknown).
        signature: the recipe without its key: op name, opcode, target, constant args, kwargs. Two ops
            with equal signatures and types compute the same function of their inputs.
        is_output: the value is a graph output, or a graph output views it.
        eager_contiguous: eager's value was contiguous. Fused values are contiguous, so members whose
            eager value was not are only offered to the keys of patterns marked ``any_strides`` (the lowering
            restores eager's strides only for contiguous outputs).
    """

    cls: object
    op: str
    key: int
    recipe: object
    types: tuple
    inputs: list
    in_shapes: list
    shape: tuple | None
    signature: tuple
    is_output: bool = False
    eager_contiguous: bool = True


def _target_text(target) -> str:
    if isinstance(target, str):
        return target
    name = getattr(target, "__qualname__", getattr(target, "__name__", repr(target)))
    return f"{getattr(target, '__module__', '')}.{name}"


class PlanGraph(PlanAlternatives, PlanOrder):
    """The dependency graph of one plan (module docstring).

    Args:
        view: the e-graph (:class:`optimus_eq.extract.EGraphView`).
        choice: the plan, e-class -> chosen e-node id.
        tr: the bridge's Translation (recipes, types, kept nodes and their order).
        outputs: e-classes of graph outputs.
        eager_contiguous: e-class -> False when some FX node in it had non-contiguous strides in eager.
        level: ``"pre_grad"`` or ``"post_grad"`` (:meth:`grad_signature` is None at post-grad).
    """

    def __init__(self, view, choice: dict, tr, outputs: set, eager_contiguous: dict, level: str = "pre_grad",
                 grad_facts=None) -> None:
        self.view, self.choice, self.tr, self.level, self.grad_facts = view, choice, tr, level, grad_facts
        self.outputs = outputs
        self.eager_contiguous = eager_contiguous
        self.g = nx.DiGraph()
        self._members: dict = {}
        self._signatures: dict = {}  # op key -> Member.signature
        self._fresh = 0
        self._pos: dict | None = None   # topological positions (see _positions)
        self._seq: list = []
        self._keys: list = []
        self._op_classes: list | None = None
        self._sig: dict | None = None   # class -> grad signature (see grad_signature)
        self._reach = None
        self._grad: set | None = None
        self._plan = frozenset(choice)   # the plan's classes (``choice`` is extended by add_alternatives)
        self._form: dict = {}            # plan class -> its alternative member form (see add_alternatives)
        self._source: dict = {}          # member class -> its source (see source)
        self.alternatives = False        # add_alternatives ran and added something
        self.choice = dict(choice)
        nodes = view.nodes
        succ, pred, attrs = self.g._succ, self.g._pred, self.g._node
        for c, nid in choice.items():
            en = nodes[nid]
            if en.op in LIST_OPS:
                continue
            if c not in succ:  # g.add_node(c), then g.add_edge(k, c) per child, without networkx's per-call cost
                succ[c], pred[c], attrs[c] = {}, {}, {}
            into = pred[c]
            for k in self.term_children(en):
                if k not in succ:
                    succ[k], pred[k], attrs[k] = {}, {}, {}
                if c not in succ[k]:
                    succ[k][c] = into[k] = {}
        nx._clear_cache(self.g)
        self._order_edges()
        self.g.add_node(("output",))  # the graph's output node is a search root too, as upstream
        for c in outputs:
            if c in self.g:
                self.g.add_edge(c, ("output",))

    # -- structure ---------------------------------------------------------------------------------
    def elements(self, list_cls) -> list:
        """The element classes of a chosen list (``Cons``/``ACons`` chain)."""
        return chosen_list(self.view, self.choice, list_cls)

    def term_children(self, en) -> list:
        """Tensor inputs of a chosen e-node, list cells looked through."""
        if en.op in ("Cat", "Apply"):
            return self.elements(en.children[0]) if en.children else []
        return list(en.children)

    def _order_edges(self) -> None:
        """Order edges between the kept FX nodes, as lowering keeps their order (``tr.kept_order``), and from what
        a global-state region's first node needs computed before it."""
        tr, view, g = self.tr, self.view, self.g
        succ, pred, attrs = g._succ, g._pred, g._node

        def cls_of(n):
            tid = tr.node_id.get(n)
            return None if tid is None else view.node_of.get(tid)

        def add_edge(u, v):  # g.add_edge(u, v) of two nodes of g, without networkx's per-call cost
            if v not in succ[u]:
                succ[u][v] = pred[v][u] = {}

        # ordered kept nodes (barriers and random draws) form a chain; every other kept node goes after the
        # barrier before it and before the barrier after it (``tr.kept_order``): pure kept nodes between two
        # barriers commute with each other and with the draws, so no edge joins them
        ordered, barriers = tr.kept_order.ordered, tr.kept_order.barriers
        prev = None      # the last ordered node's class
        barrier = None   # the last barrier's class
        between = []     # classes of the kept nodes since it that are not barriers
        for i, n in enumerate(tr.kept):
            c = cls_of(n)
            if c is None or c not in succ:
                c = ("kept", i)
                succ[c], pred[c], attrs[c] = {}, {}, {}
                for a in n.all_input_nodes:
                    for tid in ([tr.node_id[a]] if a in tr.node_id else tr.pieces.get(a, [])):
                        ac = view.node_of.get(tid)
                        if ac in succ:
                            add_edge(ac, c)
            for live in tr.barriers.get(n, ()):
                lc = cls_of(live)
                if lc in succ and lc != c:
                    add_edge(lc, c)
            if n in ordered:
                if prev is not None and prev != c:
                    add_edge(prev, c)
                prev = c
            if n in barriers:
                for b in between:
                    if b != c:
                        add_edge(b, c)
                barrier, between = c, []
            else:
                if barrier is not None and barrier != c:
                    add_edge(barrier, c)
                between.append(c)
        nx._clear_cache(g)

    # -- members -------------------------------------------------------------------------------------
    def member(self, c) -> Member | None:
        """The plan's op in class ``c`` as a :class:`Member`, or None (a view, an opaque op, a list)."""
        if c in self._members:
            return self._members[c]
        m = None
        nid = self.choice.get(c) if not isinstance(c, tuple) else None
        if nid is not None and c in self._form and not self._is_op(nid):
            nid = self._form[c]  # the plan's e-node is a view: the class's op form is the candidate
        if nid is not None:
            en = self.view.nodes[nid]
            tr = self.tr
            if en.op in ("Unary", "Binary", "Apply") and en.literals and en.literals[0] in tr.recipes \
                    and en.literals[0] not in tr.opaque_keys and en.literals[0] in tr.types:
                key = en.literals[0]
                r = tr.recipes[key]
                inputs = self.term_children(en)
                shapes = self.view.shapes
                sig = self._signatures.get(key)
                if sig is None:  # one per op key (the ops of many classes share one): reprs of its recipe
                    sig = self._signatures[key] = (r.name, r.op, _target_text(r.target), repr(r.args),
                                                   repr(sorted(r.kwargs.items())))
                m = Member(c, en.op, key, r, tr.types[key], inputs, [shapes.get(i) for i in inputs],
                           shapes.get(c), sig, c in self.outputs, self.eager_contiguous.get(c, True))
        self._members[c] = m
        return m

    def _is_op(self, nid) -> bool:
        """E-node ``nid`` is a pure op with a recipe (what a member may be), not an opaque one."""
        en = self.view.nodes[nid]
        tr = self.tr
        return en.op in ALT_OPS and bool(en.literals) and en.literals[0] in tr.recipes \
            and en.literals[0] not in tr.opaque_keys

    # -- alternative forms: members drawn from any e-node of an e-class ----------------------------------
    def source(self, m: Member):
        """The plan's kernel that computes member ``m``'s value now: its own class when the plan computes it
        with its op, else the class of a plan op of the same name that ``m``'s class is a view of (a piece
        of a wide op the vertical rules folded it into: ``narrow(tanh(x))``), else ``m``'s class."""
        c = m.cls
        got = self._source.get(c)
        if got is None:
            got = self._source[c] = self._find_source(m)
        return got

    def _find_source(self, m: Member):
        c = m.cls
        choice, nodes, classes = self.choice, self.view.nodes, self.view.classes
        if c in self._plan and c not in self._form:
            return c
        name = m.recipe.name
        seen = {c}
        level = [c]
        for _ in range(ALT_DEPTH):
            nxt = []
            for x in level:
                for nid in classes.get(x, ()):
                    en = nodes[nid]
                    if en.op not in ALT_VIEWS:
                        continue
                    k = en.children[0]
                    if k in seen:
                        continue
                    seen.add(k)
                    if k in self._plan and k not in self._form and self._is_op(choice[k]):
                        km = self.member(k)
                        if km is not None and km.recipe.name == name:
                            return k
                    nxt.append(k)
            level = nxt
        return c

    def worth_adding(self, members: list) -> bool:
        """Whether a group can save a kernel: its members are computed by at least two of the plan's kernels
        (:meth:`source`). A group of pieces of one wide op (the plan computes ``relu(x)`` once and reads
        its narrows) would only add an alternative no plan takes, and e-graph growth with it. ``members``:
        Members or their classes."""
        if len(members) < 2:
            return True  # a rewrite of one op (max_fuse_set_size 1): not a group
        first = None
        for m in members:
            s = self.source(m if isinstance(m, Member) else self.member(m))
            if first is None:
                first = s
            elif s != first:
                return True
        return False

    # -- gradient facts ---------------------------------------------------------------------------------
    def grad_signature(self, c):
        """``(requires grad, mask of output positions reached along gradient paths)`` of class ``c``'s value
        in eager (:class:`optimus_eq.extract.grad.GradientReach`), or None when nothing requires grad.

        A fused op's output depends, in autograd, on every member's inputs: fusing members whose
        signatures differ would give an output gradient paths eager does not have (a parameter of a
        detached or unused member gets zeros instead of None; an output of a member that needs no grad
        comes back with ``requires_grad=True``; a parameter feeding one output gets zeros through
        another). Members with equal signatures reach the same outputs, each of which already has paths
        to every member's inputs that require grad. A class the rules made (no FX node in it) requires
        grad when it is in :func:`optimus_eq.extract.grad.grad_classes` and reaches what its readers in
        the plan reach; lowering checks the final graph against eager either way
        (``optimus_bridge.lower``, ``_keep_gradient_paths``).
        """
        if self._sig is None:
            info, reach = self.grad_facts(self.tr, self.level) if self.grad_facts else (None, None)
            self._reach = reach if reach is not None and reach.sources else None
            self._sig = self._reach.class_reach(self.tr, self.view) if self._reach else {}
            info = info if self._reach else None
            self._grad = set() if info is None else None  # computed on first use
        if self._reach is None:
            return None
        if c in self._sig:
            return self._sig[c]
        if self._grad is None:
            self._grad = grad_classes(self.view, self.grad_facts(self.tr, "pre_grad")[0])
        # iterative post-order over plan readers of classes without FX nodes
        stack = [c]
        while stack:
            v = stack[-1]
            if v in self._sig:
                stack.pop()
                continue
            todo = [s for s in self.g._succ.get(v, ()) if s not in self._sig and self._rule_made(s)]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            rg = v in self._grad if not isinstance(v, tuple) else True
            mask = 0
            if rg:
                for s in self.g._succ.get(v, ()):
                    mask |= self._succ_mask(s)
            self._sig[v] = (rg, mask)
        return self._sig[c]

    def _rule_made(self, v) -> bool:
        """A plan node whose signature is derived from its readers: a class with no FX node, or a fused op."""
        return (not isinstance(v, tuple)) or v[0] == "fused"

    def _succ_mask(self, s) -> int:
        if isinstance(s, tuple):
            if s[0] == "kept":
                return self._reach.reaches.get(self.tr.kept[s[1]], 0)
            if s[0] == "fused":
                return self._sig[s][1]
            return 0  # the output node: output classes carry their own bits
        rg, mask = self._sig[s]
        return mask if rg else 0

    # -- groups --------------------------------------------------------------------------------------
    def op_classes(self) -> list:
        """The classes of the plan whose op may be a member (:meth:`member` is not None), in graph order.
        Fused ops added later are never members, so the list is computed once."""
        if self._op_classes is None:
            self._op_classes = [c for c in self.g if not isinstance(c, tuple) and self.member(c) is not None]
        return self._op_classes

    def groups(self, group_key: Callable, options: dict, fused: set, *, any_strides: bool = False,
               wants_options: bool = False, shared_input: bool = False,
               overlap: bool = False) -> Iterator[list[Member]]:
        """Yield groups to fuse, Optimus' way (module docstring). The caller must call :meth:`fused_op`
        for each group it fuses before asking for the next one. ``any_strides``, ``wants_options``,
        ``shared_input``: the pattern's flags (:class:`optimus_eq.registry.HorizontalPattern`).

        ``overlap`` (a non-destructive round: each group is only an alternative): members of the groups this
        call yielded stay candidates of later lists; a list's subsets without them are yielded as before, then
        its subsets larger than every group of this call they share a member with
        (:class:`.subsets.GroupOverlap`): the union of two groups is offered too, so extraction can choose
        greedy's wider group (DLRM's gates, N 1, are found together by the search from their stack,
        its ``V`` linears, N 64, by their shared input; greedy's minimum of 5 keeps the 4 gates apart and fuses
        all 8 as one linear of N 260). Without it (greedy) a fused member is gone."""
        depth = options["max_fuse_search_depth"]
        lo = options["min_fuse_set_size"]
        # what a later candidate list leaves out: every fused member, or (overlap) those fused before this call
        skip = frozenset(fused) if overlap else fused
        made = GroupOverlap() if overlap else None
        # the group key of every op that has one; the rest (views, lists, opaque ops, ops of other patterns,
        # keys of None) are absent: not candidates, and the search goes past them
        keys: dict = {}
        for c in self.op_classes():
            m = self._members[c]
            k = None
            # fused outputs are contiguous; keep eager's strides where they were not (unless the key
            # function says strides do not matter to it: ``any_strides``)
            if m.eager_contiguous or any_strides:
                try:
                    k = group_key(m, options) if wants_options else group_key(m)
                except Exception:  # a user's key function failed on this op: leave it alone
                    k = None
            if k is not None:
                # members must agree on eager's gradient facts (requires grad, outputs reached), else the
                # fused op would give some output gradient paths to another member's inputs
                keys[c] = (k, self.grad_signature(c))

        # only keys with enough candidates matter, and only roots within reach of such candidates
        count: dict = {}
        for c, k in keys.items():
            if c not in fused:
                count[k] = count.get(k, 0) + 1
        viable = {k for k, n in count.items() if n >= lo}
        if not viable:
            return
        succ, pred = self.g._succ, self.g._pred  # networkx's adjacency dicts (read only; no view objects)
        near = {c for c, k in keys.items() if k in viable and c not in fused}
        frontier = list(near)
        for _ in range(depth if depth is not None else len(self.g)):
            frontier = list(dict.fromkeys(s for c in frontier for s in succ[c] if s not in near))
            if not frontier:
                break
            near.update(frontier)
        # a root with one input finds a subset of what that input finds: searching from join points (two or more
        # inputs) and the output finds the same groups (but groups of one, min_fuse_set_size 1: every value)
        self._positions()
        single = lo <= 1
        # an input with no inputs and no group key (a graph input: weights, biases) is neither collected nor
        # searched past, so it does not count: LayerNorm(x, w, b) and Linear(x, W, b) have one input here
        def joins(c) -> bool:  # two or more such inputs (stops counting at two: a cat may have 512)
            seen_one = False
            for p in pred[c]:
                if pred[p] or p in keys:
                    if seen_one:
                        return True
                    seen_one = True
            return False

        # a stack: the last root in graph order is searched first
        roots = [c for c in self._seq if c in near and (single or joins(c))]
        last_inputs: dict = {}  # node -> its inputs that are viable matches (see _search)
        while roots:
            root = roots.pop()
            if root in fused:  # it reads its fused op, which reads every member's inputs: upstream erases it
                continue
            made_before = self._fresh
            found = self._search(root, keys, viable, skip, depth, last_inputs)
            for k, cands in found.items():
                if len(cands) < lo or (self.alternatives and lo > 1 and not self.worth_adding(cands)):
                    continue
                yield from self._independent_subsets(cands, options, fused, made)
            # the fused ops the caller recorded for these groups are roots next (upstream's walk visits the batched
            # node it inserts): they read every member's input, so the layer below a fused layer is found there
            roots.extend(("fused", i) for i in range(self._fresh - 1, made_before - 1, -1))
        if shared_input:
            # the key names the one input all members read (the linears of one input): its members are found by
            # that input, wherever their users join. The search over inputs stops at every match, so
            # readers of x whose paths to a common user cross other matched ops (DLRM's cross net: each
            # expert's V linear reaches the experts' stack only through its C and U linears) are never in
            # one candidate list there. Not upstream's search (ours finds more); upstream's groups first.
            by_key: dict = {}
            for c in self._seq:
                k = keys.get(c)
                if k in viable and c not in skip:
                    by_key.setdefault(k, []).append(c)
            for cands in by_key.values():
                if len(cands) >= lo and not (self.alternatives and lo > 1 and not self.worth_adding(cands)):
                    yield from self._independent_subsets(cands, options, fused, made)

    def _search(self, root, keys: dict, viable: set, skip, depth, last_inputs: dict) -> dict:
        """Optimus' candidate search from one root (upstream ``get_fusion_candidates``): breadth-first over
        inputs, level by level, up to ``depth`` hops (None: unbounded); an op with a group key is a match
        (collected when its key is in ``viable``) and the search does not go past it; ops in ``skip`` are
        neither collected nor searched past. Returns group key -> matches in the order found.
        ``last_inputs`` caches, per node, its inputs that are viable matches (what the last level reads)."""
        pred = self.g._pred
        found: dict = {}
        seen = {root}
        level = [p for p in pred[root]]
        seen.update(level)
        d = 1
        while level:
            nxt = []
            tail = []  # the last level's matches, (key, node), collected after this level's
            go_on = depth is None or d < depth
            last = depth is not None and d + 1 == depth  # the inputs found now end the search
            for c in level:
                if c in skip:
                    continue
                k = keys.get(c)
                if k is not None:
                    if k in viable:
                        found.setdefault(k, []).append(c)
                elif last:
                    # what the next (last) level would do with c's inputs, in the same order: collect the
                    # unseen viable matches that are not skipped; the rest only fills ``seen``, which no later
                    # level reads
                    ins = last_inputs.get(c)
                    if ins is None:
                        ins = last_inputs[c] = [(keys[p], p) for p in pred[c] if keys.get(p) in viable]
                    for kp, p in ins:
                        if p not in seen:
                            seen.add(p)
                            if p not in skip:
                                tail.append((kp, p))
                elif go_on:
                    for p in pred[c]:
                        if p not in seen:
                            seen.add(p)
                            nxt.append(p)
            for kp, p in tail:
                found.setdefault(kp, []).append(p)
            level = nxt
            d += 1
        return found
