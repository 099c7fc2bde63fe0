"""Which e-nodes are extern GEMMs, for pricing them by FLOPs (:meth:`optimus_eq.cost.GPUCostModel.gemm_cost`,
docs/DESIGN.md "Extraction and cost").

An ``Apply`` e-node is a GEMM when its op key's recipe name is in :data:`optimus_eq.cost.GEMM_OPS`
(``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``bmm_add``, ``linear``, ``matmul``); its tensor arguments are the
elements of its argument list (``ACons`` cells), whose e-classes carry the shapes the price needs.
"""

from __future__ import annotations

from optimus_eq.cost import GEMM_OPS


def gemm_keys(recipes: dict) -> dict:
    """Op key id -> GEMM name for the recipes (``Translation.recipes``: key id -> :class:`optimus_eq.recipe.Recipe`)
    whose name is an extern GEMM of :data:`optimus_eq.cost.GEMM_OPS`."""
    return {k: r.name for k, r in recipes.items() if getattr(r, "name", None) in GEMM_OPS}


def arg_classes(view, cls) -> list | None:
    """The tensor e-classes of argument-list e-class ``cls`` (``ACons`` ... ``ANil``), or None when a cell is
    missing or not unique."""
    out, seen = [], set()
    while cls not in seen:
        seen.add(cls)
        cells = [view.nodes[n] for n in view.classes.get(cls, ()) if view.nodes[n].op in ("ACons", "ANil")]
        if len(cells) != 1:
            return None
        if cells[0].op == "ANil":
            return out
        out.append(cells[0].children[0])
        cls = cells[0].children[1]
    return None


def gemm_nodes(view, gemms: dict | None, forced=frozenset()) -> dict:
    """E-node id -> ``(GEMM name, [tensor argument e-classes])`` for the ``Apply`` e-nodes of ``view`` whose key
    is in ``gemms`` (:func:`gemm_keys`); forced (opaque) e-nodes are left out (free in every plan)."""
    if not gemms:
        return {}
    memo: dict = {}
    out = {}
    for nid, node in view.nodes.items():
        if node.op != "Apply" or not node.literals or nid in forced or not node.children:
            continue
        name = gemms.get(node.literals[0])
        if name is None:
            continue
        a = node.children[0]
        if a not in memo:
            memo[a] = arg_classes(view, a)
        if memo[a] is not None:
            out[nid] = (name, memo[a])
    return out
