"""FX (Torch-IR) -> e-graph terms: the translator's driver.

Each FX node becomes at most one term, shared by all its users (a DAG, never expanded as a tree). The
translator emits integer rows, one relation per constructor (``NarrowIn(id, x, d, s, l, n)``,
``ConsIn(list, d, elem, rest)``, ...), where every term is named by an integer handle ``(NodeOf id)``.
:class:`optimus_eq.egraph.EGraph` loads the rows with egglog's ``input`` command and one pass of the
``load`` rules of :mod:`optimus_eq.terms` builds the terms in bulk: about 0.3 s for 100k terms, where
one ``let`` per node, or one rule of 100k lets, takes tens of seconds (../shared/EGGLOG_NOTES.md).

The translation, one job per module:

* :mod:`optimus_bridge.translation`: the translated program (:class:`Translation`) and the writer of its rows;
* :mod:`optimus_bridge.normalize`: the op table (the pre-grad normalization: canonical forms of split / chunk /
  unbind / cat / stack / slicing / views, and the keys and recipes of pure ops);
* :mod:`optimus_bridge.aliasing`: the alias and mutation analysis that says which nodes stay as written;
* :mod:`optimus_bridge.fx_meta`: reading a node's meta and arguments;
* this module: :class:`Translator`, which walks the graph, asks the analyses, dispatches each node to the op
  table, and keeps what it cannot translate as an opaque term.

Symbolic sizes (a ``SymInt`` in the meta: the batch dim of a ``dynamic=True`` graph) become tokens of
:mod:`optimus_eq.symbolic`, one per expression; what the rules compute with must be static: the size of a
split, narrowed or indexed dim and the split sizes, the sizes of cat inputs along the cat dim. A node that
needs a symbolic size there, or whose size expression lowering could not rebuild from the graph's inputs
(:meth:`RowWriter._size <optimus_bridge.translation.RowWriter._size>`), stays opaque.

Left exactly as they are (opaque, their FX node is copied at lowering): ops outside the vocabulary,
nodes whose dims or sizes are not plain ints, and every node that
reads or writes a tensor that is mutated in place (or an alias of it; graph inputs may alias each other,
:func:`~optimus_bridge.aliasing.frozen_nodes`), so no rewrite changes what a mutation sees, the view chains of
outputs that overlap in eager (:func:`~optimus_bridge.aliasing.output_alias_nodes`), the view chains that
``as_strided`` reads (:func:`~optimus_bridge.aliasing.layout_reader_nodes`), and every node from the
first to the last global-state change (``no_grad``, autocast, inference mode), so no op moves into or out of
such a region or merges across it; values computed before the region are emitted before it
(``Translation.barriers``).
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from optimus_bridge import vocab
from optimus_bridge.aliasing import (eager_output_meta, eager_storage_map, frozen_nodes, hooked_nodes, layout_reader_nodes,
                                     output_alias_nodes, storage_id)
from optimus_bridge.fx_meta import Unsupported, is_static_tensor, meta_val
from optimus_bridge.kept_order import kept_epochs
from optimus_bridge.normalize import Normalization
from optimus_bridge.translation import RowWriter, Translation
from optimus_eq.recipe import Slot, SymSize
from optimus_eq.terms import MAX_RANK  # longest shape the rows can carry; longer ones stay opaque

#: the public names; ``Slot``, ``SymSize``, ``eager_output_meta``, ``eager_storage_map`` and ``storage_id`` are
#: re-exported for lowering (:mod:`optimus_bridge.lower` imports them from here)
__all__ = ["VISIBLE_OUTPUTS", "Slot", "SymSize", "Translation", "Translator", "eager_output_meta", "eager_storage_map",
           "meta_val", "storage_id", "translate"]

#: ``GraphModule.meta`` key of :meth:`Translator.visible_outputs` for graphs whose outputs are not all the
#: user's (the segments of :mod:`optimus_bridge.regions`)
VISIBLE_OUTPUTS = "optimus_eq_visible_outputs"


class Translator(Normalization, RowWriter):
    """Builds a :class:`Translation` for one Torch-IR GraphModule (see module docstring).

    ``vocab`` is the op vocabulary; :class:`optimus_bridge.aten.AtenTranslator` swaps in Aten-IR's.
    """

    vocab = vocab
    #: graph inputs may share storage (dynamo's Torch-IR graphs; see :func:`frozen_nodes`)
    inputs_may_alias = True
    #: keep the nodes that give the outputs eager's aliasing (:func:`output_alias_nodes`)
    keeps_output_aliasing = True
    #: under ``no_grad``, keep the views of tensors that require grad (:meth:`_no_grad_views`)
    keeps_no_grad_views = True

    def visible_outputs(self) -> frozenset | None:
        """Indices of the flat outputs whose aliasing among each other and with the inputs the user sees,
        or None for all of them (a dynamo graph's outputs are the user's; a segment of one between
        global-state switches says which of its outputs alias the graph's, :mod:`optimus_bridge.regions`)."""
        return self.gm.meta.get(VISIBLE_OUTPUTS)

    def __init__(self, gm: GraphModule) -> None:
        super().__init__(gm)
        self._deps: dict[Node, list[int]] = {}  # kept non-tensor node -> terms it depends on

    def run(self) -> Translation:
        t = self.t
        t.frozen = frozen_nodes(self.gm, self.vocab, self.inputs_may_alias) | self._global_state_region()
        if self.keeps_no_grad_views and not torch.is_grad_enabled():
            t.frozen |= self._no_grad_views()
        t.visible_outputs = self.visible_outputs()
        if VISIBLE_OUTPUTS in self.gm.meta:  # a segment: its other outputs are read by later nodes only
            out = next(n for n in reversed(self.gm.graph.nodes) if n.op == "output")
            flat: list = []
            torch.fx.node.map_aggregate(out.args[0], flat.append)
            t.internal_outputs = frozenset(range(len(flat))) - t.visible_outputs
        if self.keeps_output_aliasing:
            t.frozen |= output_alias_nodes(self.gm, self.vocab, t.visible_outputs)
        t.frozen |= layout_reader_nodes(self.gm, self.vocab) | hooked_nodes(self.gm)
        for node in self.gm.graph.nodes:
            if node.op == "output":
                self._output(node)
                continue
            val = meta_val(node)
            if node in t.frozen or node.op not in ("call_function", "call_method"):
                self._opaque(node, val)
                continue
            name = self.vocab.op_name(node)
            if name is None:
                self._opaque(node, val)
                continue
            try:
                if name in ("split", "chunk", "unbind"):
                    self._split(node, name, val)
                elif self._shaped(val):
                    self._bind(node, self._tensor_op(node, name, val), val)
                else:
                    raise Unsupported("not a tensor with static shape")
                if name not in self.vocab.APPLY_OPS and name not in self.vocab.UNARY_OPS | self.vocab.ARITH_OPS:
                    t.normalized += 1
            except (Unsupported, IndexError, TypeError, ValueError, KeyError):
                # a spelling this translator does not know: the node stays exactly as it was
                if not is_static_tensor(val) and isinstance(val, torch.Tensor):
                    t.symbolic += 1  # counted as before: a symbolic node left opaque
                self._opaque(node, val)
        # lowering emits the barriers' live values before the region (a value computed before a global-state
        # change stays before it): they must be extracted, even where their readers after the region were
        # rewritten not to need them (relu pieces of a split whose cat after an autocast region folded)
        t.roots.extend(n for live in t.barriers.values() for n in live if n in t.node_id)
        t.kept_order = kept_epochs(t.kept, t.frozen)
        return t

    def _no_grad_views(self) -> set[Node]:
        """Computed nodes whose value requires grad though the graph runs under ``no_grad`` (a segment of
        :mod:`optimus_bridge.regions`, or a graph compiled under ``torch.no_grad()``): only views of tensors
        that require grad do (fresh results do not). Such a view requires grad but has no ``grad_fn``, so
        no gradient flows through it to its base; folding ``x.view(x.shape)`` to ``x`` would make one flow
        (``u * x`` with ``u`` viewed under no_grad would get the gradient ``2x``). They stay as written."""
        keep = set()
        for n in self.gm.graph.nodes:
            if n.op in ("call_function", "call_method", "call_module"):
                val = meta_val(n)
                vals = val if isinstance(val, (tuple, list)) else (val,)
                if any(isinstance(v, torch.Tensor) and v.requires_grad for v in vals):
                    keep.add(n)
        return keep

    def _global_state_region(self) -> set[Node]:
        """Nodes from the first to the last global-state change, which all stay as they are."""
        nodes = list(self.gm.graph.nodes)
        marks = [i for i, n in enumerate(nodes) if self.vocab.changes_global_state(n)]
        if not marks:
            return set()
        first, last = marks[0], marks[-1]
        pos = {n: i for i, n in enumerate(nodes)}
        self.t.barriers[nodes[first]] = [
            n for n in nodes[:first] if any(pos[u] > first for u in n.users)
        ]
        return set(nodes[first:last + 1])

    def _opaque(self, node: Node, val) -> None:
        """Keep ``node`` verbatim; if it is a tensor, it becomes an opaque term (forced at extraction)."""
        t = self.t
        deps: list[int] = []
        for a in node.all_input_nodes:
            if a in t.node_id:
                deps.append(t.node_id[a])
            elif a in t.pieces:
                deps.extend(t.pieces[a])
                if a not in t.kept:  # the tuple itself is needed: copy the split verbatim too
                    self._keep_tuple(a)
            else:
                deps.extend(self._deps.get(a, []))
        deps = list(dict.fromkeys(deps))
        t.kept.append(node)  # after the tuples it reads, which _keep_tuple appended above
        if isinstance(val, torch.Tensor) and node.op != "output":
            key = self._key(f"opaque:{node.name}")
            t.opaque_keys[key] = node
            if deps:
                tid = self._new("ApplyIn", key, self._arglist(deps))
            else:
                tid = self._new("LeafIn", key)
            if self._shaped(val) and val.dim() <= MAX_RANK:
                self._bind(node, tid, val)
            else:
                t.node_id[node] = tid
            t.roots.append(node)
        else:
            self._deps[node] = deps
            # copied verbatim, but no forced e-node reads its tensor inputs: extract them as roots (a tuple
            # ``(relu(p[0]),) + p[1:]`` returned as an output had no e-node chosen for relu's class)
            t.roots.extend(a for a in node.all_input_nodes if a in t.node_id)

    def _keep_tuple(self, node: Node) -> None:
        """A split/unbind tuple used whole by an opaque op is copied verbatim (its pieces stay terms); the
        tensor it splits is extracted as a root, since lowering copies the split with it."""
        self.t.kept.append(node)
        self._deps[node] = [self.t.node_id[a] for a in node.all_input_nodes if a in self.t.node_id]
        self.t.roots.extend(a for a in node.all_input_nodes if a in self.t.node_id)

    def _output(self, node: Node) -> None:
        t = self.t
        for a in node.all_input_nodes:
            if a in t.node_id:
                t.roots.append(a)
            elif a in t.pieces and a not in t.kept:
                self._keep_tuple(a)



def translate(gm: GraphModule) -> Translation:
    """Translate a Torch-IR GraphModule whose nodes carry FakeTensor meta into e-graph insertion rows.

    Raises:
        ValueError: if a placeholder lacks tensor meta (run FakeTensorProp first; ``optimize`` does).
    """
    return Translator(gm).run()

