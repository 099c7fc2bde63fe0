"""Global-state regions: optimize the inside of ``torch.autocast`` and ``torch.no_grad`` blocks.

Dynamo records ``with torch.autocast(...)`` as ``_enter_autocast`` / ``_exit_autocast`` calls and
``with torch.no_grad()`` as ``_set_grad_enabled`` calls. The translator keeps every node from the first
to the last such change verbatim (a rewrite must not move an op across a change of dtype or grad mode).
This module optimizes each stretch between two consecutive changes as a graph of its own, under the same
global state as at run time (the changes before it are replayed around the call, so FakeTensor meta of new
ops gets autocast's dtypes), and splices the result back in place: ops are batched inside a region,
never across its boundary. The whole graph is optimized afterwards as before, with the regions opaque.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch
from torch.fx import Graph, GraphModule, Node

from optimus_bridge.vocab import changes_global_state

#: the global-state changes that can be replayed around a region's optimization
_REPLAYABLE = ("_enter_autocast", "_exit_autocast", "_set_grad_enabled")


def optimize_regions(gm: GraphModule, optimize_one: Callable[[GraphModule], GraphModule | None]) -> int:
    """Optimize, in place, each stretch of ``gm`` between two consecutive global-state changes.

    Args:
        gm: a Torch-IR GraphModule with FakeTensor meta on its nodes (as Dynamo hands it over).
        optimize_one: ``f(region_gm) -> optimized GraphModule, or None to leave the region as it is``;
            called with the global state of the region active. ``region_gm`` takes the region's inputs as
            placeholders (meta copied) and returns its live-out values as a tuple.

    Returns:
        the number of regions replaced. Regions after a change that cannot be replayed (inference mode,
        deterministic algorithms) are left alone; so are regions that read a non-tensor value made outside.
    """
    nodes = list(gm.graph.nodes)
    marks = [i for i, n in enumerate(nodes) if changes_global_state(n)]
    replaced = 0
    with _Replay() as replay:
        for a, b in zip(marks, marks[1:]):
            if not replay.step(nodes[a]):
                break
            body = [n for n in nodes[a + 1:b] if n.op in ("call_function", "call_method", "call_module", "get_attr")]
            if not any(n.op != "get_attr" for n in body):
                continue
            region = _region_module(gm, body)
            if region is None:
                continue
            sub, inputs, outputs = region
            new = optimize_one(sub)
            if new is None or new is sub:
                continue
            _splice(gm, body, inputs, outputs, new, before=nodes[b])
            replaced += 1
    if replaced:
        gm.graph.lint()
        gm.recompile()
    return replaced


class _Replay(contextlib.AbstractContextManager):
    """Replays global-state changes in graph order and undoes them all on exit."""

    def __init__(self) -> None:
        self.grad = torch.is_grad_enabled()
        self.entered: dict[Node, object] = {}
        self.ok = True

    def step(self, mark: Node) -> bool:
        name = getattr(mark.target, "__name__", "")
        if not self.ok or name not in _REPLAYABLE or mark.kwargs:
            self.ok = False
            return False
        if name == "_set_grad_enabled":
            torch._C._set_grad_enabled(bool(mark.args[0]))
        elif name == "_enter_autocast":
            if any(isinstance(a, Node) for a in mark.args):
                self.ok = False
                return False
            self.entered[mark] = mark.target(*mark.args)
        else:  # _exit_autocast(the enter node)
            ctx = self.entered.pop(mark.args[0], None) if mark.args else None
            if ctx is None:
                self.ok = False
                return False
            mark.target(ctx)
        return True

    def __exit__(self, *exc) -> None:
        for ctx in reversed(list(self.entered.values())):
            torch.amp.autocast_mode._exit_autocast(ctx)
        torch._C._set_grad_enabled(self.grad)


def _region_module(gm: GraphModule, body: list[Node]):
    """``(GraphModule, inputs, outputs)`` of the nodes ``body``: inputs are the values made outside that
    ``body`` reads (tensors only, else None), outputs the values of ``body`` read outside."""
    inside = set(body)
    inputs: list[Node] = []
    for n in body:
        for a in n.all_input_nodes:
            if a not in inside and a not in inputs:
                inputs.append(a)
    if any(not isinstance(a.meta.get("example_value", a.meta.get("val")), torch.Tensor) for a in inputs):
        return None
    outputs = [n for n in body if any(u not in inside for u in n.users)]
    if not outputs:
        return None
    graph = Graph()
    env: dict[Node, Node] = {}
    for a in inputs:
        p = graph.placeholder(a.name)
        p.meta.update(a.meta)
        env[a] = p
    for n in body:
        env[n] = graph.node_copy(n, lambda x: env[x])
    graph.output(tuple(env[o] for o in outputs))
    return GraphModule(gm, graph), inputs, outputs


def _splice(gm: GraphModule, body: list[Node], inputs: list[Node], outputs: list[Node], new: GraphModule,
            before: Node) -> None:
    """Put ``new``'s nodes before ``before`` (the change that ends the region), re-point the readers of
    ``outputs`` to its results and erase ``body``."""
    env: dict[Node, Node] = {}
    placeholders = [n for n in new.graph.nodes if n.op == "placeholder"]
    env.update(zip(placeholders, inputs))
    out_node = next(n for n in new.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(before):
        for n in new.graph.nodes:
            if n.op in ("placeholder", "output"):
                continue
            if n.op == "get_attr" and not hasattr(gm, n.target):
                setattr(gm, n.target, getattr(new, n.target))
            env[n] = gm.graph.node_copy(n, lambda x: env[x])
    results = out_node.args[0]
    for old, value in zip(outputs, results):
        old.replace_all_uses_with(env[value] if isinstance(value, Node) else value,
                                  delete_user_cb=lambda u: u not in set(body))
    for n in reversed(body):
        gm.graph.erase_node(n)
