"""Plans (one chosen e-node per needed e-class): the :class:`Extraction` result, a plan's DAG cost and
cycles, and the cost of the input graph (:func:`input_cost`, the plan that keeps every original term).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from optimus_eq.cost import GPUCostModel
from optimus_eq.extract.grad import member_grad_is_strided
from optimus_eq.symbolic import numel
from optimus_eq.extract.view import EGraphView, no_gc


@dataclass
class Extraction:
    """The chosen e-node per needed e-class, and what extraction did.

    Attributes:
        choice: e-class id -> chosen e-node id, for every e-class the plan needs.
        dag_cost: the plan's cost (microseconds, each chosen e-node paid once).
        method: ``"tree"`` (the tree plan), ``"tree+refine"`` (improved by local search: the fast plan),
            ``"ilp"`` (every component of the choice core proven optimal: by HiGHS, or by the lower bound
            of :mod:`optimus_eq.extract.bound` where the fast plan meets it), or the fast
            method's name plus ``"+ilp"`` (some components solved exactly).
        seconds: wall-clock seconds of the extraction.
        ilp_rounds: most ILP solves of one batch (cycle cuts).
        note: what happened, for people (components left to the fast plan and why, gaps, pruning).
        stats: the same as data: ``e_nodes``, ``e_classes``, ``choice_classes`` (reachable e-classes with more
            than one possible e-node), ``tree_cost``, ``fast_cost`` (after local search), ``refine_moves``,
            ``components`` (of the choice core) and ``largest_component`` (e-nodes), ``exact_components``
            (solved by HiGHS), ``exact_optimal``, ``exact_improved``, ``exact_max_gap`` (relative, of those
            stopped at their time budget), ``over_limit`` (sizes of components left to the fast plan by
            ``ilp_max_nodes``, or by ``cyclic_limit``: the size limit of components with a cycle,
            ``driver.EXACT_MAX_CYCLIC_NODES``),
            ``deadline_skipped`` (components the deadline left to the fast plan), ``exact_s``, ``cost``,
            ``bound_closed`` (components where the fast plan meets the lower bound of
            :mod:`optimus_eq.extract.bound`: proven optimal, no solver run), ``fast_max_gap`` (the largest
            relative gap of the fast plan to that bound on components over the limit; inf where a cycle
            left it unbounded), ``stage_s`` (CPU seconds: costs, tree, prepare, refine, exact, check).
        resume: the ``"fast"`` method's problem and plan, which :func:`optimus_eq.extract.extract` continues
            from when given it as ``resume`` (None for the other methods).
    """

    choice: dict
    dag_cost: float
    method: str
    seconds: float
    ilp_rounds: int = 0
    note: str = ""
    stats: dict = field(default_factory=dict)
    resume: dict | None = field(default=None, repr=False, compare=False)  # "fast": its state, for extract(resume=)


def chosen_list(view: EGraphView, choice: dict, list_cls) -> list:
    """The element classes of a chosen list e-class (a ``Cons``/``ACons`` chain ending in ``Nil``/``ANil``),
    in order."""
    out = []
    nodes = view.nodes
    while True:
        en = nodes[choice[list_cls]]
        if en.op in ("Nil", "ANil"):
            return out
        out.append(en.children[0])
        list_cls = en.children[1]


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


def input_cost(rows: dict, root_ids: list[int], opaque_keys, model: GPUCostModel | None = None,
               gradients=None, kinds: dict | None = None, packable=frozenset()) -> float:
    """The cost model's estimate of the input graph: the DAG cost of the terms the translator inserted.

    ``rows`` are the translator's insertion rows (``optimus_bridge.translate.Translation.rows``: one relation
    per constructor, ``NarrowIn(id, x, d, s, l, n)``, ``ConsIn(list, d, x, rest)``, shapes in ``ShapeIn``);
    ``root_ids`` the term ids of the roots (``Translation.node_id`` of ``Translation.roots``). Every term
    is costed exactly as :meth:`EGraphView.assign_costs` costs the same e-node (opaque terms are free), and
    each term reachable from the roots is paid once, like ``Extraction.dag_cost``. Two FX nodes computing
    the same value are two terms here (the input graph computes both), which the e-graph would merge.
    With ``gradients`` (:class:`optimus_eq.extract.grad.GradientInfo`) and a model that prices training,
    the backward is added as :func:`optimus_eq.extract.grad.training_costs` adds it to e-nodes. With
    ``kinds`` (:func:`optimus_eq.extract.fusion.op_kinds`) and a model that credits fusion, a term is fused
    by the rule of :func:`optimus_eq.extract.fusion.fused_nodes`, each term being its own e-class.
    With ``packable`` (:func:`optimus_eq.extract.grad.packable_leaves`: parameter leaf term ids) and a model
    with ``packed_parameters``, a ``Cat`` of them (or of their ``Unsqueeze(p, 0)``) along dim 0 costs
    ``view_us``, forward and backward, by the rule of :func:`optimus_eq.extract.grad.packed_cats`.
    """
    with no_gc():
        return _input_cost(rows, root_ids, opaque_keys, model or GPUCostModel(), gradients, kinds, packable)


def _fused_terms(terms: dict, keys: dict, kinds: dict, size: dict) -> dict:
    """Term id -> its other input terms, for the input graph's terms that the fusion credit applies to."""
    kind = {}
    for tid, (op, _, _, opaque) in terms.items():
        if opaque or tid not in keys:
            continue
        k = "pointwise" if op in ("Unary", "Binary") else kinds.get(keys[tid])
        if k is not None:
            kind[tid] = k
    out = {}
    for tid, k in kind.items():
        kids = terms[tid][1]
        for i, c in enumerate(kids):
            if c in kind and ((k == "pointwise" and size.get(tid) is not None and size.get(c) == size.get(tid))
                              or (k == "reduction" and kind[c] == "pointwise")):
                out[tid] = kids[:i] + kids[i + 1:]
                break
    return out


def _packed_terms(rows: dict, lists: dict, cons_dim: dict, packable) -> set:
    """Ids of the ``Cat`` terms that :func:`optimus_eq.extract.grad.packed_cats` would price as packed."""
    unsq = {row[0]: (row[1], row[2]) for row in rows.get("UnsqueezeIn", ())}
    out = set()
    for tid, lid in rows.get("CatIn", ()):
        members = []
        while lid in lists:
            members.append((cons_dim[lid], lists[lid][0]))
            lid = lists[lid][1]
        if len(members) >= 2 and all(d == 0 and (x in packable or (x in unsq and unsq[x][1] == 0
                                                                    and unsq[x][0] in packable))
                                     for d, x in members):
            out.add(tid)
    return out


def _input_cost(rows: dict, root_ids: list[int], opaque_keys, model: GPUCostModel, gradients=None,
                kinds: dict | None = None, packable=frozenset()) -> float:
    shape_of_vec = {}
    for rel, table in rows.items():
        if rel.startswith("Vec") and rel.endswith("In"):
            for row in table:
                shape_of_vec[row[0]] = tuple(row[1:])
    shapes = {tid: shape_of_vec.get(vid) for tid, vid in rows.get("ShapeIn", ())}
    size = {tid: numel(s) for tid, s in shapes.items()}  # tokens at their hints
    lists = {lid: (x, rest) for lid, _, x, rest in rows.get("ConsIn", ())}
    cons_dim = {lid: d for lid, d, _, _ in rows.get("ConsIn", ())}
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
    cat_dims: dict[int, set] = {}
    for tid, l in rows.get("CatIn", ()):
        terms[tid] = ("Cat", elems(lists, l), [None], False)
        lid, dims = l, set()
        while lid in lists:
            dims.add(cons_dim[lid])
            lid = lists[lid][1]
        cat_dims[tid] = dims
    for rel, op in (("NarrowIn", "Narrow"), ("SelectIn", "Select"), ("UnsqueezeIn", "Unsqueeze"),
                    ("ReshapeIn", "Reshape"), ("PermuteIn", "Permute")):
        for row in rows.get(rel, ()):
            terms[row[0]] = (op, [row[1]], [size.get(row[1])], False)
    for tid, _, x in rows.get("UnaryIn", ()):
        terms[tid] = ("Unary", [x], [size.get(x)], False)
    for tid, _, x, y in rows.get("BinaryIn", ()):
        terms[tid] = ("Binary", [x, y], [size.get(x), size.get(y)], False)
    fused: dict = {}
    if kinds is not None and getattr(model, "fusion", False):
        keys = {tid: k for tid, k, _ in rows.get("ApplyIn", ())}
        keys.update((tid, k) for tid, k, _ in rows.get("UnaryIn", ()))
        keys.update((tid, k) for tid, k, _, _ in rows.get("BinaryIn", ()))
        fused = _fused_terms(terms, keys, kinds, size)
    gemms: dict = {}  # term id -> GEMM name: priced by FLOPs, as EGraphView.assign_costs prices the e-node
    if getattr(kinds, "gemms", None) and getattr(model, "gemm_flops", False):
        gemms = {tid: kinds.gemms[k] for tid, k, _ in rows.get("ApplyIn", ())
                 if k in kinds.gemms and not terms[tid][3]}
    packed = _packed_terms(rows, lists, cons_dim, packable) if packable and getattr(
        model, "packed_parameters", False) else set()
    seen: set[int] = set()
    stack = [r for r in root_ids if r in terms]
    total = 0.0
    memo: dict = {}  # (op, numel, children's numels, opaque) -> cost: a few hundred distinct among 10^5 terms
    while stack:
        tid = stack.pop()
        if tid in seen:
            continue
        seen.add(tid)
        op, kids, ins, opaque = terms[tid]
        if tid in packed:  # a view of the packed buffer (EGraphView.assign_costs overrides it last)
            total += model.view_us
            stack.extend(k for k in kids if k in terms and k not in seen)
            continue
        if tid in fused:
            total += model.fused_cost(size.get(tid), [size.get(k) for k in fused[tid]])
            stack.extend(k for k in kids if k in terms and k not in seen)
            continue
        cost = model.gemm_cost(gemms[tid], shapes.get(tid), [shapes.get(k) for k in kids]) if tid in gemms else None
        if cost is None:
            key = (op, size.get(tid), tuple(ins), opaque)
            cost = memo.get(key)
            if cost is None:
                cost = memo[key] = model.node_cost(op, key[1], ins, opaque)
        total += cost
        stack.extend(k for k in kids if k in terms and k not in seen)
    if gradients and getattr(model, "training", False):
        total += _input_backward(rows, terms, seen - packed, shapes, size, shape_of_vec, cat_dims, gradients, model, fused,
                                 gemms, packed)
    return total


def _input_backward(rows, terms, seen, shapes, size, shape_of_vec, cat_dims, gradients, model, fused,
                    gemms=None, packed=frozenset()) -> float:
    """The backward's cost of the input graph's terms (``seen``), priced as
    :func:`optimus_eq.extract.grad.training_costs` prices e-nodes; a ``packed`` Cat (priced whole as a view,
    as ``EGraphView.assign_costs`` overrides it) adds no transposed-gradient copies."""
    perms = {row[0]: shape_of_vec.get(row[2]) for row in rows.get("PermuteIn", ())}
    unsq = {row[0]: (row[1], row[2]) for row in rows.get("UnsqueezeIn", ())}
    grad = set(gradients.requires_grad) & set(terms)
    changed = True
    while changed:  # forward propagation to a fixpoint (terms are not sorted)
        changed = False
        for tid, (op, kids, _, _) in terms.items():
            if tid not in grad and tid not in gradients.no_grad and op != "Leaf" and any(k in grad for k in kids):
                grad.add(tid)
                changed = True
    total = 0.0
    for tid in seen:
        op, kids, _, opaque = terms[tid]
        if tid not in grad or opaque:
            continue
        extra = None
        if gemms and tid in gemms:
            extra = model.gemm_backward_cost(gemms[tid], shapes.get(tid), [shapes.get(k) for k in kids],
                                             [k in grad for k in kids])
        if extra is not None:
            total += extra
        elif tid in fused:
            total += model.fused_backward_cost(size.get(tid), [size.get(k) for k in kids if k in grad])
        else:
            total += model.backward_cost(op, size.get(tid), [size.get(k) for k in kids],
                                         sum(1 for k in kids if k in grad), False)
        if (op == "Permute" and kids and terms.get(kids[0], ("",))[0] == "Cat" and len(cat_dims[kids[0]]) == 1
                and kids[0] not in packed):
            members = [unsq.get(e) for e in terms[kids[0]][1]]
            dim = next(iter(cat_dims[kids[0]]))
            if (members and all(m is not None and m[1] == dim and m[0] in gradients.params for m in members)
                    and shapes.get(kids[0]) and perms.get(tid)
                    and member_grad_is_strided(shapes[kids[0]], perms[tid], dim)):
                total += sum(model.grad_copy_cost(gradients.params[m[0]]) for m in members)
    return total
