"""Eager's values of a translated graph's terms, read off its FX nodes' meta once per Translation, for the
horizontal round (:class:`optimus_eq.horizontal.driver.EagerTerms`)."""

from __future__ import annotations

import torch

from optimus_bridge.aliasing import view_chain
from optimus_eq.horizontal.driver import EagerTerms


def eager_terms(tr) -> EagerTerms:
    """:class:`EagerTerms` of ``tr`` (an ``optimus_bridge.translate.Translation``): the tensor in each translated
    node's meta (``val``, else ``example_value``) by term handle, in graph order, and the handles of the nodes
    the output node reads. Computed once per Translation (cached on it)."""
    cached = tr.__dict__.get("_eager_terms")
    if cached is None:
        values = []
        for n, tid in tr.node_id.items():
            val = n.meta.get("val", n.meta.get("example_value"))
            if isinstance(val, torch.Tensor):
                values.append((tid, val))
        out_node = next(n for n in reversed(tr.gm.graph.nodes) if n.op == "output")
        # an output's view chain counts as output too: a value an output views (``d = a.detach()`` returned as
        # ``d.view(-1)``) computed by a batched op is a new tensor where eager's output viewed an input, and
        # lowering failed (the whole graph fell back) where the batched detach leaves outputs alone
        chains = (n for o in out_node.all_input_nodes for n in view_chain(o))
        outputs = tuple(tr.node_id[a] for a in dict.fromkeys(chains) if a in tr.node_id)
        cached = tr.__dict__["_eager_terms"] = EagerTerms(tuple(values), outputs)
    return cached
