"""What became of each FX node of an input graph, read off the Translation and the extracted plan: for the
report and ``optimus-eq explain``.

* :func:`node_fates`: per translated FX node, ``"kept"`` (its term is computed as written), ``"rewritten"``
  (its value is computed by another e-node of its e-class: an equal term the rewrites found) or
  ``"removed"`` (the plan needs its value nowhere: a split piece folded into a view, a cat that became its
  input's e-class ...). Both strategies are read the same way, so the counts compare greedy with eqsat.
* :func:`kept_reasons`: per op node copied verbatim (``Translation.kept``), why the translator left it alone.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.fx import Node

from optimus_bridge import aten_vocab, vocab
from optimus_bridge.aliasing import hooked_nodes
from optimus_bridge.effects import changes_global_state, is_mutation
from optimus_bridge.fx_meta import is_static_tensor, meta_val
from optimus_bridge.translation import Translation

#: FX node kinds that compute something (placeholders, get_attr and the output are not ops)
OP_KINDS = ("call_function", "call_method", "call_module")

#: the constructors of tensor terms (their rows start with the term's handle; list and shape rows have ids of
#: their own)
_TENSOR_CTORS = frozenset(["Leaf", "Apply", "Narrow", "Select", "Cat", "Unsqueeze", "Reshape", "Permute", "Unary",
                           "Binary"])
#: the keyed constructors: an e-node of one is the node as written only with the same op key
_KEYED = frozenset(["Unary", "Binary", "Apply", "Leaf"])


def kept_ops(tr: Translation) -> list[Node]:
    """The op nodes the translator left opaque (copied verbatim at lowering), inputs and parameters excluded."""
    return [n for n in tr.kept if n.op in OP_KINDS]


def kept_reasons(tr: Translation, level: str = "pre_grad") -> dict[str, str]:
    """FX node name -> why that op node was kept verbatim.

    Reasons, checked in this order, for nodes the translator froze (``Translation.frozen``): ``in-place op``
    (it writes into an input), ``grad-mode/autocast region`` (from the first to the last global-state change:
    ``with torch.no_grad()`` and the like), ``gradient hook`` (a tensor a hook is registered on, or a reader
    of it), ``touches a mutated tensor or a user-visible alias`` (reads or is a
    view of a tensor written in place, or an output whose aliasing the user sees); then ``unsupported op
    <target>`` (outside the vocabulary of the IR level), ``symbolic size`` (a size the rewrites would compute on
    is not static), ``not a tensor`` (a tuple or scalar other kept ops read), ``unsupported arguments`` (a
    spelling of a known op the translator does not read).
    """
    op_name = aten_vocab.op_name if level == "post_grad" else vocab.op_name
    nodes = list(tr.gm.graph.nodes)
    marks = [i for i, n in enumerate(nodes) if changes_global_state(n)]
    region = set(nodes[marks[0]:marks[-1] + 1]) if marks else set()
    hooked = hooked_nodes(tr.gm)
    out = {}
    for n in kept_ops(tr):
        val = meta_val(n)
        if n in tr.frozen and is_mutation(n, tr.gm):
            why = "in-place op"
        elif n in tr.frozen and n in region:
            why = "grad-mode/autocast region (kept in order)"
        elif n in tr.frozen and n in hooked:
            why = "gradient hook (the hooked tensor, or a reader of it)"
        elif n in tr.frozen:
            why = "touches a mutated tensor or a user-visible alias"
        elif op_name(n) is None:
            why = f"unsupported op {getattr(n.target, '__name__', n.target)}"
        elif isinstance(val, torch.Tensor) and not is_static_tensor(val):
            why = "symbolic size"
        elif not isinstance(val, torch.Tensor):
            why = "not a tensor (a value other kept ops read)"
        else:
            why = "unsupported arguments (a spelling of this op the translator does not read)"
        out[n.name] = why
    return out


def _written(tr: Translation) -> dict[int, tuple[str, int | None]]:
    """Term handle of each translated op node -> (constructor, op key or None), from the rows that inserted it."""
    written = {}
    wanted = {tid for n, tid in tr.node_id.items() if n.op in OP_KINDS}
    for relation, rows in tr.rows.items():
        ctor = relation[:-2]
        if not relation.endswith("In") or ctor not in _TENSOR_CTORS:
            continue
        for row in rows:
            if row and row[0] in wanted:
                written[row[0]] = (ctor, row[1] if ctor in _KEYED and len(row) > 1 else None)
    return written


def rewritten_classes(tr: Translation, node_of: Mapping, nodes: Mapping, choice: Mapping) -> dict:
    """The plan's e-classes where an input op is computed another way: e-class -> ``(input constructor,
    chosen e-node's constructor)``, one entry per e-class (the first translated op in graph order), for the
    ops :func:`node_fates` calls ``"rewritten"``. Arguments as for :func:`node_fates`."""
    written = _written(tr)
    kept = set(tr.kept)
    out = {}
    for n, tid in tr.node_id.items():
        if n.op not in OP_KINDS or n in kept or tid not in written:
            continue
        cls = node_of.get(tid)
        if cls is None or cls not in choice or cls in out:
            continue
        en = nodes[choice[cls]]
        ctor, key = written[tid]
        if not (en.op == ctor and (key is None or (en.literals and en.literals[0] == key))):
            out[cls] = (ctor, en.op)
    return out


def node_fates(tr: Translation, node_of: Mapping, nodes: Mapping, choice: Mapping) -> dict[str, str]:
    """FX node name -> ``"kept"``, ``"rewritten"`` or ``"removed"`` for every op node not kept verbatim: the
    translated ones by their term, the others (non-tensor values such as ``x.size()`` that no kept op reads,
    so lowering drops them) ``"removed"``.

    Args:
        tr: the Translation of the input graph.
        node_of: term handle -> e-class (:attr:`optimus_eq.extract.EGraphView.node_of`).
        nodes: e-node id -> e-node with ``op`` and ``literals`` (:attr:`EGraphView.nodes`).
        choice: e-class -> chosen e-node id (:attr:`optimus_eq.extract.Extraction.choice`).
    """
    written = _written(tr)
    kept = set(tr.kept)
    out = {}
    for n, tid in tr.node_id.items():
        if n.op not in OP_KINDS or n in kept:
            continue
        cls = node_of.get(tid)
        if cls is None or cls not in choice:
            out[n.name] = "removed"
            continue
        en = nodes[choice[cls]]
        ctor, key = written.get(tid, (None, None))
        same = en.op == ctor and (key is None or (en.literals and en.literals[0] == key))
        out[n.name] = "kept" if same else "rewritten"
    for n, tids in tr.pieces.items():  # split/chunk/unbind tuples: removed when no piece is computed
        if n.op in OP_KINDS and n not in kept and n.name not in out:
            live = [t for t in tids if node_of.get(t) in choice]
            out[n.name] = "kept" if live and len(live) == len(tids) else ("rewritten" if live else "removed")
    for n in tr.gm.graph.nodes:  # values no op needs any more (x.size() and its items, with static sizes)
        if n.op in OP_KINDS and n not in kept and n.name not in out:
            out[n.name] = "removed"
    return out
