"""Eager's values of a translated graph's terms, read off its FX nodes' meta once per Translation, for the
horizontal round (:class:`optimus_eq.horizontal.driver.EagerTerms`)."""

from __future__ import annotations

import torch

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
        outputs = tuple(tr.node_id[a] for a in out_node.all_input_nodes if a in tr.node_id)
        cached = tr.__dict__["_eager_terms"] = EagerTerms(tuple(values), outputs)
    return cached
