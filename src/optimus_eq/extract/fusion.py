"""Which e-nodes Inductor computes inside another op's kernel (the cost model's fusion credit).

Inductor's scheduler fuses a pointwise node into the kernel of a pointwise producer with the same loop size,
and a pointwise producer into the reduction that reads it (torch/_inductor/scheduler.py ``Scheduler.fuse_nodes``;
``SIMDScheduling.can_fuse`` on CUDA, ``CppScheduling`` on CPU; the kernel predictor models it in detail,
:mod:`optimus_bridge.inductor_fusion`). Extraction prices e-nodes one at a time, so the credit must not depend
on the plan: an e-node is *fused* when one of its inputs is an e-class that every plan computes with a
pointwise or reduction kernel, that is an e-class all of whose e-nodes are pointwise or reduction ops (no
view, cat, extern GEMM, graph input or opaque op that a plan could pick instead), and

* the e-node is pointwise and that input has as many elements as its output (a chain, or the epilogue of a
  reduction), or
* the e-node is a reduction (``sum``, ``layer_norm``) and that input's e-nodes are all pointwise.

Every chain of fused e-nodes starts at an e-node that is not fused (in an acyclic plan, following fused
inputs down ends at an e-node none of whose inputs qualifies), so each chain still pays one launch.
"""

from __future__ import annotations

from optimus_eq.cost import fusion_kind
from optimus_eq.extract.gemm import gemm_keys

#: e-node ops that are always pointwise (their keys name relu, tanh, add, ...)
_ELEMENTWISE = frozenset(["Unary", "Binary"])


class OpKinds(dict):
    """:func:`op_kinds`' map, carrying ``gemms``: op key id -> GEMM name (:func:`optimus_eq.extract.gemm.gemm_keys`),
    the extern GEMMs the cost model prices by FLOPs."""

    gemms: dict = {}


def op_kinds(recipes: dict) -> OpKinds:
    """Op key id -> ``"pointwise"`` / ``"reduction"`` for the keys whose recipe Inductor fuses
    (:func:`optimus_eq.cost.fusion_kind` of the recipe's name); ``recipes`` maps key ids to
    :class:`optimus_eq.recipe.Recipe` (``Translation.recipes``). Its ``gemms`` names the GEMM keys."""
    out = OpKinds()
    out.gemms = gemm_keys(recipes)
    for key, r in recipes.items():
        kind = fusion_kind(getattr(r, "name", None))
        if kind is not None:
            out[key] = kind
    return out


def _kind(node, kinds: dict) -> str | None:
    if node.op in _ELEMENTWISE:
        return kinds.get(node.literals[0], "pointwise") if node.literals else "pointwise"
    if node.op == "Apply" and node.literals:
        return kinds.get(node.literals[0])
    return None


def _args(view, cls) -> list | None:
    """The tensor e-classes of an argument list e-class (``ACons`` cells), or None when a cell is not unique."""
    out, seen = [], set()
    while cls not in seen:
        seen.add(cls)
        cells = [view.nodes[n] for n in view.classes.get(cls, ())]
        if len(cells) != 1:
            return None
        cell = cells[0]
        if cell.op == "ANil":
            return out
        if cell.op != "ACons":
            return None
        out.append(cell.children[0])
        cls = cell.children[1]
    return None


def _self_cyclic(view, nid) -> bool:
    """Whether e-node ``nid`` reads its own e-class: as a child, or as an element of a list child whose cells
    are unique (``Cat(Cons(x, Nil))`` in ``x``'s class). Such an e-node is in no acyclic plan."""
    node = view.nodes[nid]
    own = node.eclass
    for c in node.children:
        seen = set()
        while c not in seen:
            if c == own:
                return True
            seen.add(c)
            cells = [view.nodes[n] for n in view.classes.get(c, ())]
            if len(cells) != 1 or cells[0].op not in ("Cons", "ACons") or not cells[0].children:
                break
            if cells[0].children[0] == own:
                return True
            c = cells[0].children[-1]
    return False


def fused_nodes(view, kinds: dict, sizes: dict, forced=frozenset()) -> dict:
    """E-node id -> ``(fused input e-class, [its other input e-classes])`` for every e-node the cost model
    credits with fusion (module doc). ``kinds``: :func:`op_kinds`; ``sizes``: e-class -> element count."""
    node_kind = {}
    for nid, node in view.nodes.items():
        # only pointwise ops and Apply have a kind: the op test first skips the call for the rest (views, list
        # cells: most of 10^5 e-nodes)
        if (node.op in _ELEMENTWISE or node.op == "Apply") and nid not in forced:
            k = _kind(node, kinds)
            if k is not None:
                node_kind[nid] = k
    class_kind: dict = {}  # e-class -> "pointwise" (all pointwise) / "reduction" (some reduction) / None

    def kind_of_class(c):
        if c not in class_kind:
            # an e-node reading its own e-class (``cat([x])``, a full ``narrow`` or same-shape ``reshape`` of
            # ``x``, merged with ``x``) is in no acyclic plan: it does not stop the class's kernel fusing
            ks = [node_kind.get(n) for n in view.classes.get(c, ()) if n in node_kind or not _self_cyclic(view, n)]
            if not ks or None in ks:
                class_kind[c] = None
            else:
                class_kind[c] = "pointwise" if all(k == "pointwise" for k in ks) else "reduction"
        return class_kind[c]

    args_memo: dict = {}
    out: dict = {}
    for nid, k in node_kind.items():
        node = view.nodes[nid]
        if node.op == "Apply":
            a = node.children[0] if node.children else None
            if a not in args_memo:
                args_memo[a] = _args(view, a) if a is not None else None
            inputs = args_memo[a]
            if inputs is None:
                continue
        else:
            inputs = node.children
        n_out = sizes.get(node.eclass)
        for i, c in enumerate(inputs):
            ck = kind_of_class(c)
            if ck is None:
                continue
            if (k == "pointwise" and n_out is not None and sizes.get(c) == n_out) or (
                    k == "reduction" and ck == "pointwise"):
                out[nid] = (c, list(inputs[:i]) + list(inputs[i + 1:]))
                break
    return out
