"""Gradient facts of a translated pre-grad graph, read once per Translation from its FX nodes' FakeTensor
meta: :class:`~optimus_eq.extract.grad.GradientInfo` (which terms require grad, for training costs) and
:class:`~optimus_eq.extract.grad.GradientReach` (eager's gradient paths from every source to every output,
kept by horizontal fusion's grouping and checked by lowering; docs/DESIGN.md, "Safety")."""

from __future__ import annotations

import torch
from torch.fx import Node

from optimus_bridge.fx_meta import meta_val
from optimus_eq.extract.grad import GradientInfo, GradientReach


#: ``GraphModule.meta`` key: per flat output position, the mask of the *whole* graph's output positions it
#: reaches along gradient paths, for a segment between global-state switches (:mod:`optimus_bridge.regions`),
#: whose outputs are read by later segments: members reaching the same final outputs may be batched
OUTPUT_REACH = "optimus_eq_output_reach"


def _requires_grad(node) -> bool:
    """Whether eager's value of ``node`` (a tensor, or a tuple/list of them) requires grad (meta)."""
    val = meta_val(node)
    if isinstance(val, torch.Tensor):
        return bool(val.requires_grad)
    if isinstance(val, (tuple, list)):
        return any(isinstance(v, torch.Tensor) and v.requires_grad for v in val)
    return False


def output_nodes(out_node) -> list:
    """The flattened arguments of an FX output node, one per output position (None where not a node)."""
    flat: list = []
    torch.fx.node.map_aggregate(out_node.args[0], lambda a: flat.append(a if isinstance(a, Node) else None))
    return flat


def propagate_reach(nodes, carries_grad, source_bit, out_node=None, out_masks=None):
    """One forward and one backward pass of gradient paths over FX ``nodes`` (in graph order).

    Args:
        carries_grad: ``f(node, mask of its inputs) -> bool``, whether the node's value requires grad
            given the sources its inputs carry.
        source_bit: ``f(node) -> mask``, the node's own source bit (0 for non-sources).
        out_node: the output node; with it the reverse pass runs too.
        out_masks: per flat output position, the mask it stands for (default: bit i for position i).

    Returns:
        ``(carries, reaches)``: node -> source mask; node -> output-position mask (empty without
        ``out_node``).
    """
    carries: dict = {}
    for n in nodes:
        if n.op == "output":
            continue
        m = 0
        for a in n.all_input_nodes:
            m |= carries.get(a, 0)
        own = source_bit(n)
        carries[n] = (m | own) if (own or carries_grad(n, m)) else 0
    reaches: dict = {}
    if out_node is not None:
        for i, a in enumerate(output_nodes(out_node)):
            if a is not None and carries.get(a, 0):
                reaches[a] = reaches.get(a, 0) | (1 << i if out_masks is None else out_masks[i])
        for n in reversed(list(nodes)):
            r = reaches.get(n, 0)
            if not r or not carries.get(n, 0):
                continue
            for a in n.all_input_nodes:
                if carries.get(a, 0):
                    reaches[a] = reaches.get(a, 0) | r
    return carries, reaches


def eager_reach(nodes: list, out_masks=None) -> tuple:
    """Eager's gradient paths over FX ``nodes`` (a whole graph, in order), from the FakeTensor meta:
    ``(requires grad per node, sources, carries, reaches)`` (:func:`propagate_reach`; a source is a node that
    requires grad while none of its inputs does, bit i for ``sources[i]``)."""
    rg = {n: _requires_grad(n) for n in nodes if n.op != "output"}
    sources = [n for n in nodes if rg.get(n) and not any(rg.get(a) for a in n.all_input_nodes)]
    if not sources:
        return rg, sources, {}, {}
    bit = {n: 1 << i for i, n in enumerate(sources)}
    out_node = next(n for n in reversed(nodes) if n.op == "output")
    carries, reaches = propagate_reach(nodes, lambda n, m: rg[n], lambda n: bit.get(n, 0), out_node, out_masks)
    return rg, sources, carries, reaches


def _compute_facts(tr, level: str):
    """One walk over ``tr``'s graph for :class:`GradientInfo` and :class:`GradientReach`."""
    if level != "pre_grad":
        return None, None
    grad, no_grad, params = set(), set(), {}
    computed = False
    for node, h in tr.node_id.items():
        val = meta_val(node)
        if not isinstance(val, torch.Tensor):
            continue
        if not val.requires_grad:
            no_grad.add(h)
            continue
        grad.add(h)
        if node.op == "placeholder" or node.op == "get_attr":
            if val.is_leaf:
                params[h] = val.numel() if all(isinstance(s, int) for s in val.shape) else None
        elif not val._is_view():
            # a view of a parameter requires grad even under torch.no_grad (an inference graph reading
            # `w.t()` or `seeds.expand(...)`): only a computed value makes the graph one that trains
            computed = True
    info = GradientInfo(frozenset(grad), frozenset(no_grad), params) if computed else None

    nodes = list(tr.gm.graph.nodes)
    rg, sources, carries, reaches = eager_reach(nodes, tr.gm.meta.get(OUTPUT_REACH))
    if not sources:
        return info, GradientReach()
    out_node = next(n for n in reversed(nodes) if n.op == "output")
    # pure op keys whose eager nodes drop gradient: a term of that key carries none (lowering's check)
    key_of = {}
    for rel in ("UnaryIn", "BinaryIn", "ApplyIn"):
        for row in tr.rows.get(rel, ()):
            if row[1] in tr.recipes:
                key_of[row[0]] = row[1]
    nondiff = set()
    for node, h in tr.node_id.items():
        k = key_of.get(h)
        if k is not None and not rg.get(node) and any(rg.get(a) for a in node.all_input_nodes):
            nondiff.add(k)
    at_output = tuple(carries.get(a, 0) if a is not None else 0 for a in output_nodes(out_node))
    return info, GradientReach(tuple(sources), carries, reaches, at_output, frozenset(nondiff))


def _facts(tr, level: str):
    """:func:`_compute_facts`, computed once per Translation and level (cached on it)."""
    cache = tr.__dict__.setdefault("_gradient_facts", {})
    if level not in cache:
        cache[level] = _compute_facts(tr, level)
    return cache[level]


def facts(tr, level: str = "pre_grad") -> tuple:
    """``(gradient_info(tr, level), gradient_reach(tr, level))``, computed once per Translation and level: what
    the horizontal round's gradient signatures read (``HorizontalContext.grad_facts``)."""
    return _facts(tr, level)


def gradient_info(tr, level: str = "pre_grad"):
    """Which terms of a translated graph (``optimus_bridge.translate.Translation``) require grad
    (:class:`GradientInfo`, from the FX nodes' FakeTensor meta), or
    None when the graph will not be differentiated: no computed node's value requires grad (views of
    parameters, which require grad even under ``torch.no_grad``, are not computed values; traced under
    ``torch.no_grad``, or no input requires grad), or an Aten-IR graph (``post_grad``: AOTAutograd has
    already split off the backward, which is optimized as a graph of its own). Computed once per
    Translation, with :func:`gradient_reach`."""
    return _facts(tr, level)[0]


def gradient_reach(tr, level: str = "pre_grad"):
    """Eager's gradient paths (:class:`GradientReach`) of a translated Torch-IR graph, or None for an
    Aten-IR graph (``post_grad``). Its ``sources`` are empty when no value requires grad. Computed once per
    Translation, with :func:`gradient_info`."""
    return _facts(tr, level)[1]
