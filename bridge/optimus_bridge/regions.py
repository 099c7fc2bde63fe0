"""Global-state regions of a Torch-IR graph: ``with torch.no_grad():`` and ``with torch.autocast(...):``.

Dynamo records a region as calls that switch global state for the nodes after them
(``torch._C._set_grad_enabled(False)`` ... ``(True)``; ``_enter_autocast('cuda', torch.bfloat16, True, None)``
... ``_exit_autocast(mode)``). An op means something else inside a region (a Linear under autocast runs in
bfloat16; a view under ``no_grad`` does not require grad), so no op may move into or out of a region or merge
across its boundary, while ops inside one region are as free as anywhere.

:func:`split` cuts the graph at every switch into *segments*, each the nodes between two switches, as a
GraphModule of its own (values from outside become placeholders carrying the original meta; values read after
the segment become its outputs) plus the global state it runs under (:class:`Segment.context`). Each segment
is optimized on its own, inside that state, so the FakeTensor meta of new nodes is what the region computes.
:func:`stitch` puts the optimized segments back between the original switches, in order.

Splitting is refused (None: the caller then keeps the whole span from the first to the last switch as it is,
:func:`optimus_bridge.translate.Translator._global_state_region`) where segment-local reasoning would not be
sound or the state cannot be rebuilt: a graph with an in-place mutation (a write in one segment can change what
a view made in another sees, and the mutation analysis of :func:`~optimus_bridge.aliasing.frozen_nodes` sees
one graph), a switch other than grad mode and autocast (inference mode, deterministic algorithms), a switch
whose arguments are not constants, or unbalanced autocast enter/exit pairs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from torch.fx import Graph, GraphModule, Node

from optimus_bridge import vocab
from optimus_bridge.effects import changes_global_state
from optimus_bridge.grad_facts import OUTPUT_REACH, eager_reach
from optimus_bridge.aliasing import storage_id
from optimus_bridge.fx_meta import meta_val
from optimus_bridge.translate import VISIBLE_OUTPUTS

_SWITCHES = {"_set_grad_enabled", "set_grad_enabled", "_enter_autocast", "_exit_autocast"}


@dataclass
class Segment:
    """The nodes between two global-state switches (or the graph's ends).

    Attributes:
        nodes: the original graph's computing nodes of this segment, in graph order.
        gm: those nodes as a GraphModule: one placeholder per value read from outside (original meta), one
            output tuple with every value read after the segment (``outputs``).
        inputs: the original nodes behind ``gm``'s placeholders, in order.
        outputs: the original nodes behind ``gm``'s outputs, in order.
        grad_enabled: the grad mode the segment runs under (None: as the caller's, no switch before it).
        autocast: ``torch.autocast`` arguments ``(device_type, dtype, enabled, cache_enabled)`` of each
            autocast region the segment is inside, outermost first.
    """

    nodes: list
    gm: GraphModule | None = None
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    grad_enabled: bool | None = None
    autocast: tuple = ()

    def context(self) -> contextlib.ExitStack:
        """The global state of the region, entered for optimizing the segment (FakeTensor meta of new nodes
        under autocast has the region's dtypes; under ``no_grad`` it does not require grad)."""
        stack = contextlib.ExitStack()
        if self.grad_enabled is not None:
            stack.enter_context(torch.set_grad_enabled(self.grad_enabled))
        for args in self.autocast:
            stack.enter_context(torch.amp.autocast(*args))
        return stack


def _name(node: Node) -> str:
    return getattr(node.target, "__name__", "")


def _const(a) -> bool:
    return a is None or isinstance(a, (bool, int, float, str, torch.dtype))


def split(gm: GraphModule) -> list[Segment] | None:
    """Cut ``gm`` into segments at its global-state switches.

    Returns:
        The segments in graph order (the first runs before the first switch, the last after the last one),
        or None: no switch, or splitting refused (see the module docstring).
    """
    nodes = list(gm.graph.nodes)
    switches = {n for n in nodes if changes_global_state(n)}
    if not switches:
        return None
    if any(_name(n) not in _SWITCHES for n in switches):
        return None
    if any(vocab.is_mutation(n, gm) for n in nodes):
        return None
    segments = [Segment([])]
    grad: bool | None = None
    autocast: list[tuple[Node, tuple]] = []
    for n in nodes:
        if n.op in ("placeholder", "get_attr", "output"):
            continue
        if n in switches:
            name = _name(n)
            if name in ("_set_grad_enabled", "set_grad_enabled"):
                if len(n.args) != 1 or n.kwargs or not isinstance(n.args[0], bool):
                    return None
                grad = n.args[0]
            elif name == "_enter_autocast":
                if n.kwargs or not all(_const(a) for a in n.args):
                    return None
                autocast.append((n, tuple(n.args)))
            else:  # _exit_autocast(mode)
                if not autocast or n.args != (autocast[-1][0],):
                    return None
                autocast.pop()
            segments.append(Segment([], grad_enabled=grad, autocast=tuple(a for _, a in autocast)))
            continue
        if any(a in switches for a in n.all_input_nodes):
            return None  # reads what a switch returns (the autocast mode object): leave it all alone
        segments[-1].nodes.append(n)
    if autocast:
        return None
    reach = _output_reach(gm)
    for seg in segments:
        _build(gm, seg)
        seg.gm.meta[OUTPUT_REACH] = tuple(reach.get(n, 0) for n in seg.outputs)
    return segments


def _output_reach(gm: GraphModule) -> dict:
    """FX node -> mask of the graph's flat output positions it reaches along gradient paths (eager's, from
    the meta: :func:`optimus_bridge.grad_facts.eager_reach` of the whole graph)."""
    return eager_reach(list(gm.graph.nodes))[3]


def _build(gm: GraphModule, seg: Segment) -> None:
    """Fill ``seg.gm``, ``seg.inputs``, ``seg.outputs``."""
    inside = set(seg.nodes)
    graph = Graph()
    env: dict[Node, Node] = {}
    for n in seg.nodes:
        for a in n.all_input_nodes:
            if a not in inside and a not in env:
                p = graph.placeholder(a.name)
                p.meta = dict(a.meta)
                env[a] = p
                seg.inputs.append(a)
        env[n] = graph.node_copy(n, env.__getitem__)
    seg.outputs = [n for n in seg.nodes if any(u not in inside for u in n.users)]
    graph.output(tuple(env[n] for n in seg.outputs))
    seg.gm = GraphModule(gm, graph, class_name=type(gm).__name__)
    # only the outputs that share storage with the graph's own outputs need eager's aliasing: the graph
    # mutates nothing (split() refuses it), so aliasing among values read by later segments is unseen
    seen = set().union(*(_storages(a) for a in _flat_outputs(gm)))
    seg.gm.meta[VISIBLE_OUTPUTS] = frozenset(i for i, n in enumerate(seg.outputs) if _storages(n) & seen)


def _flat_outputs(gm: GraphModule) -> list:
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    flat: list = []
    torch.fx.node.map_aggregate(out.args[0], flat.append)
    return [a for a in flat if isinstance(a, Node)]


def _storages(node: Node) -> set:
    val = meta_val(node)
    vals = val if isinstance(val, (tuple, list)) else (val,)
    return {s for s in (storage_id(v, empty=True) for v in vals) if s is not None}


def stitch(gm: GraphModule, segments: list[Segment], optimized: list[GraphModule]) -> GraphModule:
    """The graph of ``gm`` with segment ``i``'s nodes replaced by ``optimized[i]``'s (same placeholders and
    outputs as ``segments[i].gm``), the switches, placeholders and ``get_attr`` nodes kept where they were.
    Each segment's nodes go where its last original node was: after every value it reads (its inputs come from
    earlier segments, placeholders or ``get_attr`` nodes), before every reader.

    Raises:
        ValueError: an optimized segment whose outputs are not one per ``segments[i].outputs``, or that reads
            an attribute ``gm`` does not hold (lowering reuses the original root's attributes).
    """
    graph = Graph()
    env: dict[Node, Node] = {}
    seg_of = {n: i for i, seg in enumerate(segments) for n in seg.nodes}
    last = {i: seg.nodes[-1] for i, seg in enumerate(segments) if seg.nodes}

    def add_segment(i: int) -> None:
        seg, new = segments[i], optimized[i]
        local: dict[Node, Node] = {}
        holders = iter(seg.inputs)
        for n in new.graph.nodes:
            if n.op == "placeholder":
                local[n] = env[next(holders)]
            elif n.op == "output":
                outs = n.args[0]
                if not isinstance(outs, (tuple, list)) or len(outs) != len(seg.outputs):
                    raise ValueError(f"segment {i} returned {outs!r}, not {len(seg.outputs)} values")
                for old, value in zip(seg.outputs, outs):
                    env[old] = local[value] if isinstance(value, Node) else value
            else:
                if n.op in ("get_attr", "call_module") and _get(gm, n.target) is not _get(new, n.target):
                    raise ValueError(f"segment {i} reads attribute {n.target!r}, which the graph does not hold")
                local[n] = graph.node_copy(n, local.__getitem__)

    for n in gm.graph.nodes:
        if n in seg_of:
            if n is last[seg_of[n]]:
                add_segment(seg_of[n])
            continue
        env[n] = graph.node_copy(n, env.__getitem__)
    return GraphModule(gm, graph, class_name=type(gm).__name__)


def _get(module, target: str):
    obj = module
    for part in target.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj
