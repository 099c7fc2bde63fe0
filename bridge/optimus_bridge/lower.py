"""Extracted term DAG -> FX GraphModule (Torch-IR), with the original calling convention.

Lowering is a table keyed by constructor (:data:`_VIEW_LOWERING` plus the recipe of each pure op).
Each chosen e-node is emitted once, so sharing is preserved. Kept (opaque) FX nodes are copied in
their original relative order, which keeps the order of in-place mutations and random ops.

Afterwards the outputs are checked against the original graph's: an output that used to own its
storage (a cat, say) but now aliases an input or another output gets a ``clone``; an output whose
strides differ from eager's gets ``.contiguous()`` when eager's was contiguous. Meta (``val`` and
``example_value`` FakeTensors) is filled by FakeTensorProp for Inductor.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

import torch
from torch.fx import Graph, GraphModule, Node
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from optimus_bridge import vocab
from optimus_bridge.translate import Slot, Translation, meta_val
from optimus_eq.extract import EGraphView, no_gc

_VIEW_LOWERING: dict[str, Callable] = {
    "Narrow": lambda g, x, lit: g.call_function(torch.narrow, (x, lit[0], lit[1], lit[2])),
    "Select": lambda g, x, lit: g.call_function(torch.select, (x, lit[0], lit[1])),
    "Unsqueeze": lambda g, x, lit: g.call_function(torch.unsqueeze, (x, lit[0])),
    "Reshape": lambda g, x, lit: g.call_function(torch.reshape, (x, tuple(lit[0]))),
    "Permute": lambda g, x, lit: g.call_function(torch.permute, (x, tuple(lit[0]))),
}

_VIEW_TARGETS = {torch.narrow, torch.select, torch.unsqueeze, torch.reshape, torch.permute}


@dataclass(frozen=True)
class IRLevel:
    """What lowering emits for one IR level: a table keyed by constructor plus the few ops it adds.

    Attributes:
        views: constructor (``"Narrow"``, ...) -> ``f(graph, x, literals) -> Node``.
        view_targets: FX targets of the view nodes ``views`` emits.
        is_view: does an original node return a view of its first input (output un-aliasing)?
        is_fresh: does an original node return new storage (a cat, a matmul)?
        cat: ``f(graph, tensors, dim) -> Node``; ``stack`` likewise, or None to emit a cat of unsqueezes.
        clone: ``f(graph, x, memory_format) -> Node``; ``contiguous``: ``f(graph, x) -> Node``.
    """

    views: dict
    view_targets: frozenset
    is_view: Callable
    is_fresh: Callable
    cat: Callable
    stack: Callable | None
    clone: Callable
    contiguous: Callable


class LoweringError(RuntimeError):
    """The extracted plan cannot be lowered faithfully (the caller falls back to the original graph)."""


class Lowerer:
    def __init__(self, t: Translation, view: EGraphView, choice: dict[str, str], level: "IRLevel | None" = None) -> None:
        self.t, self.view, self.choice = t, view, choice
        self.level = level or TORCH_IR
        self.graph = Graph()
        self.env: dict[Node, Node] = {}
        self.cval: dict[str, Node] = {}
        self.kept = set(t.kept)
        self._kept_pos = {n: i for i, n in enumerate(t.kept)}
        self._last_kept = -1

    def class_of(self, node: Node) -> str:
        return self.view.node_of[self.t.node_id[node]]

    # -- original nodes ------------------------------------------------------------------------
    def value_of_node(self, n: Node) -> Node:
        if n in self.env:
            return self.env[n]
        if n in self.kept:
            return self.emit_kept(n)
        if n in self.t.node_id:
            return self.emit_class(self.class_of(n))
        raise LoweringError(f"node {n.name} has no lowering")

    def emit_kept(self, n: Node) -> Node:
        if n in self.env:
            return self.env[n]
        for a in n.all_input_nodes:
            self.value_of_node(a)
        pos = self._kept_pos[n]
        if pos < self._last_kept:
            raise LoweringError(f"kept node {n.name} would move before an earlier kept node")
        self._last_kept = pos
        new = self.graph.node_copy(n, lambda a: self.value_of_node(a))
        self.env[n] = new
        return new

    # -- e-classes -------------------------------------------------------------------------------
    def _list(self, cls: str) -> list[str]:
        out = []
        while True:
            node = self.view.nodes[self.choice[cls]]
            if node.op in ("Nil", "ANil"):
                return out
            out.append(node.children[0])
            cls = node.children[1]

    def _deps(self, cls: str) -> list[str]:
        node = self.view.nodes[self.choice[cls]]
        if node.op in ("Cat", "Apply", "Binary"):
            kids = []
            for c in node.children:
                if self.view.nodes[self.choice[c]].op in ("Cons", "Nil", "ACons", "ANil"):
                    kids.extend(self._list(c))
                else:
                    kids.append(c)
            if node.op == "Apply" and node.literals[0] in self.t.opaque_keys:
                return []
            return kids
        if node.op == "Leaf":
            return []
        return list(node.children)

    def emit_class(self, root: str) -> Node:
        stack = [root]
        while stack:
            cls = stack[-1]
            if cls in self.cval:
                stack.pop()
                continue
            missing = [c for c in self._deps(cls) if c not in self.cval]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            self.cval[cls] = self._emit_node(cls)
        return self.cval[root]

    def _emit_node(self, cls: str) -> Node:
        g, node = self.graph, self.view.nodes[self.choice[cls]]
        op, lit = node.op, node.literals
        if op in ("Leaf", "Apply") and lit[0] in self.t.opaque_keys:
            return self.emit_kept(self.t.opaque_keys[lit[0]])
        if op in self.level.views:
            return self.level.views[op](g, self.cval[node.children[0]], lit)
        if op == "Cat":
            elems = self._list(node.children[0])
            first = self.view.nodes[self.choice[node.children[0]]]
            dim = first.literals[0]
            kids = [self.view.nodes[self.choice[e]] for e in elems]
            if self.level.stack is not None and all(k.op == "Unsqueeze" and k.literals[0] == dim for k in kids):
                inner = [self.cval[k.children[0]] for k in kids]  # the unsqueezes become dead
                return self.level.stack(g, inner, dim)
            return self.level.cat(g, [self.cval[e] for e in elems], dim)
        if op in ("Unary", "Binary", "Apply"):
            recipe = self.t.recipes[lit[0]]
            kids = self._deps(cls)
            vals = [self.cval[c] for c in kids]
            args = torch.fx.node.map_aggregate(recipe.args, lambda a: vals[a.index] if isinstance(a, Slot) else a)
            kwargs = torch.fx.node.map_aggregate(recipe.kwargs, lambda a: vals[a.index] if isinstance(a, Slot) else a)
            if recipe.op == "call_method":
                return g.call_method(recipe.target, tuple(args), dict(kwargs))
            return g.call_function(recipe.target, tuple(args), dict(kwargs))
        raise LoweringError(f"no lowering for e-node {op}")

    def run(self) -> GraphModule:
        old_limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old_limit, 20000))
        try:
            for n in self.t.kept:
                for live in self.t.barriers.get(n, ()):  # values computed before a global-state
                    self.value_of_node(live)              # change (no_grad, autocast) stay before it
                self.emit_kept(n)
            out_node = next(n for n in reversed(self.t.gm.graph.nodes) if n.op == "output")
            out_args = torch.fx.node.map_arg(out_node.args[0], self.value_of_node)
            new_out = self.graph.output(out_args)
            new_out.meta = dict(out_node.meta)
        finally:
            sys.setrecursionlimit(old_limit)
        self._unalias_outputs(out_node, new_out)
        self._remove_dead_terms()
        copies = set(self.env.values())
        _propagate_meta(self.graph, self.t.gm, self.t.gm, lambda n: n not in copies)
        added = _fix_strides(self.graph, out_node, self.level)
        if added:
            _propagate_meta(self.graph, self.t.gm, self.t.gm, lambda n: True, only=added)
        return GraphModule(self.t.gm, self.graph)

    def _remove_dead_terms(self) -> None:
        """Drop emitted term nodes nobody uses; kept (copied) nodes always stay."""
        copies = set(self.env.values())
        for n in reversed(list(self.graph.nodes)):
            if not n.users and n.op != "output" and n not in copies:
                self.graph.erase_node(n)

    def _unalias_outputs(self, old_out: Node, new_out: Node) -> None:
        old = _flat_nodes(old_out.args[0])
        new = _flat_nodes(new_out.args[0])
        if len(old) != len(new):
            raise LoweringError("output structure changed")
        level = self.level
        new_roots = [_storage_root(n, lambda x: x.op == "call_function" and x.target in level.view_targets
                                   or level.is_view(x)) for n in new]
        old_roots = [_storage_root(n, level.is_view) for n in old]
        copy_of = {v: k for k, v in self.env.items()}
        seen: dict[Node, Node] = {}
        for i, (o, n, oroot, nroot) in enumerate(zip(old, new, old_roots, new_roots)):
            if not isinstance(o, Node) or not isinstance(meta_val(o), torch.Tensor):
                continue
            fresh_before = oroot.op in ("call_function", "call_method") and level.is_fresh(oroot)
            foreign = (nroot.op in ("placeholder", "get_attr")
                       or (nroot in seen and seen[nroot] is not oroot)
                       or (nroot in copy_of and copy_of[nroot] is not oroot))
            if fresh_before and foreign:
                with self.graph.inserting_before(new_out):
                    fmt = torch.contiguous_format if meta_val(o).is_contiguous() else torch.preserve_format
                    clone = level.clone(self.graph, n, fmt)
                _replace_output_at(new_out, i, clone)
                nroot = clone
            seen.setdefault(nroot, oroot)


def _is_view(n: Node) -> bool:
    name = vocab.op_name(n)
    return name is not None and name not in vocab.FRESH_OPS and name not in ("dropout",) and \
        n.op in ("call_function", "call_method")


def _storage_root(n: Node, is_view) -> Node:
    while is_view(n) and n.all_input_nodes:
        n = n.all_input_nodes[0]
    return n


def _flat_nodes(args) -> list:
    out: list = []
    torch.fx.node.map_aggregate(args, lambda a: out.append(a) or a)
    return out


def _replace_output_at(out: Node, index: int, value: Node) -> None:
    counter = iter(range(10**9))

    def swap(a):
        return value if next(counter) == index else a

    out.args = (torch.fx.node.map_aggregate(out.args[0], swap),)


def _strides(t: torch.Tensor) -> tuple:
    return tuple(st for sz, st in zip(t.shape, t.stride()) if sz != 1)


def _fix_strides(graph: Graph, old_out: Node, level: IRLevel) -> list[Node]:
    """Make outputs contiguous where eager's were and ours are not. Returns the nodes added."""
    new_out = next(n for n in reversed(graph.nodes) if n.op == "output")
    old, new = _flat_nodes(old_out.args[0]), _flat_nodes(new_out.args[0])
    added = []
    for i, (o, n) in enumerate(zip(old, new)):
        ov, nv = meta_val(o), meta_val(n) if isinstance(n, Node) else None
        if not isinstance(ov, torch.Tensor) or not isinstance(nv, torch.Tensor):
            continue
        if tuple(ov.shape) != tuple(nv.shape) or ov.dtype != nv.dtype:
            raise LoweringError(f"output {i} changed shape or dtype: {tuple(ov.shape)} {ov.dtype} -> "
                                f"{tuple(nv.shape)} {nv.dtype}")
        # strides of size-1 dims are unobservable (any value addresses the same elements)
        if ov.numel() > 1 and _strides(ov) != _strides(nv):
            if not ov.is_contiguous():
                raise LoweringError(f"output {i} strides {nv.stride()} differ from eager's {ov.stride()}")
            with graph.inserting_before(new_out):
                c = level.contiguous(graph, n)
            _replace_output_at(new_out, i, c)
            added.append(c)
    return added


def _input_fakes(original: GraphModule) -> tuple[list, "torch._subclasses.fake_tensor.FakeTensorMode"]:
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    fakes = [meta_val(n) for n in original.graph.nodes if n.op == "placeholder"]
    # the inputs' own mode: inside torch.compile the tracing context may hold another one
    modes = {id(f.fake_mode): f.fake_mode for f in fakes if isinstance(f, FakeTensor)}
    if len(modes) > 1:
        raise RuntimeError("graph inputs carry FakeTensors of several fake modes")
    mode = next(iter(modes.values())) if modes else FakeTensorMode(allow_non_fake_inputs=True)
    return fakes, mode


def fill_meta(gm: GraphModule, original: GraphModule) -> None:
    """Fill ``val`` / ``example_value`` on every node by FakeTensor propagation from the inputs' meta."""
    fakes, mode = _input_fakes(original)
    with mode:
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    for n in gm.graph.nodes:
        if "val" in n.meta:
            n.meta["example_value"] = n.meta["val"]


def _propagate_meta(graph: Graph, root: torch.nn.Module, original: GraphModule, fast, only=None) -> None:
    """Fill ``val`` / ``example_value`` like :func:`fill_meta`, without building a GraphModule, and fast.

    FakeTensor dispatch costs 0.1-5 ms per op (a narrow: ~0.2 ms), which made meta propagation most of the
    lowering time on large graphs. Nodes for which ``fast(node)`` holds (term nodes we emitted: views,
    cat/stack, pure ops) run their op on plain ``meta`` tensors that share storage with the inputs'
    FakeTensors (~2 us for a view) and the result is wrapped as a FakeTensor of the inputs' mode, on their
    device. Other nodes (copied opaque nodes), nodes whose inputs sit on several devices, graphs with
    symbolic sizes, and any op that fails on meta tensors go through FakeTensorProp, node by node.

    Args:
        only: propagate just these nodes (their inputs must have meta already).
    """
    from torch._subclasses.fake_tensor import FakeTensor

    fakes, mode = _input_fakes(original)
    static = all(isinstance(f, FakeTensor) and _static(f) for f in fakes if isinstance(f, torch.Tensor))
    prop = FakeTensorProp(_Attrs(root), mode)  # only its run_node is used: env in, attributes from root
    env = prop.env
    twins: dict[Node, torch.Tensor] = {}

    def twin_of(a: Node):
        t = twins.get(a)
        if t is None:
            v = env[a]
            if not isinstance(v, FakeTensor) or not _static(v):
                raise _NotFast
            t = twins[a] = torch.empty(0, device="meta", dtype=v.dtype).set_(
                v.untyped_storage(), v.storage_offset(), v.shape, v.stride())
        return t

    def slow(n: Node):
        with mode:
            out = prop.run_node(n)
        for a in n.all_input_nodes:  # an in-place op may have changed its inputs' metadata
            twins.pop(a, None)
        return out

    placeholders = iter(fakes)
    nodes = list(graph.nodes) if only is None else list(only)
    if only is not None:
        for n in graph.nodes:
            if "val" in n.meta:
                env[n] = n.meta["val"]
    for n in nodes:
        if n.op == "placeholder":
            val = env[n] = next(placeholders)
            if val is not None:
                n.meta["val"] = val
        elif n.op == "output":
            continue
        elif static and n.op in ("call_function", "call_method") and not _slow_meta(n.target) and fast(n):
            try:
                val = env[n] = _fast_node(n, env, twins, twin_of, FakeTensor, mode)
                n.meta["val"] = val
            except _NotFast:
                env[n] = slow(n)
        else:
            env[n] = slow(n)
        if "val" in n.meta:
            n.meta["example_value"] = n.meta["val"]


class _NotFast(Exception):
    pass


#: Ops whose FakeTensor result differs from the plain meta kernel's: ``reshape``/``view`` decompose to a
#: Python reference under FakeTensorMode that picks other strides for size-1 dims than the C++ kernel. Kept
#: on the FakeTensor path so that meta is exactly what FakeTensorProp gives (checked over the test suite).
_SLOW_META = frozenset([torch.reshape, torch.Tensor.reshape, torch.Tensor.view, "reshape", "view", "view_as",
                        torch.flatten, "flatten", torch.unflatten, "unflatten", torch.ops.aten.reshape.default,
                        torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default])


def _slow_meta(target) -> bool:
    try:
        return target in _SLOW_META
    except TypeError:  # an unhashable target
        return True


def _static(t: torch.Tensor) -> bool:
    return (all(type(d) is int for d in t.shape) and all(type(d) is int for d in t.stride())
            and type(t.storage_offset()) is int)


class _Attrs(torch.nn.Module):
    """The attributes and submodules of ``root`` behind an empty graph: what FakeTensorProp's ``run_node``
    needs (``get_attr``, ``call_module``), without its constructor walking the original graph (~0.15 s at
    50k nodes) for a garbage-collection plan that ``run_node`` never uses."""

    def __init__(self, root: torch.nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "_root", root)  # not a registered submodule
        object.__setattr__(self, "graph", Graph())

    def __getattr__(self, name: str):
        return getattr(object.__getattribute__(self, "_root"), name)


def _fast_node(n: Node, env: dict, twins: dict, twin_of, fake_type, mode):
    """Run ``n`` on meta twins of its inputs; wrap the result as a FakeTensor (or raise _NotFast)."""
    devices = set()

    def arg(a):
        if type(a) is Node:
            v = env[a]
            if isinstance(v, torch.Tensor):
                devices.add(v.device)
                return twin_of(a)
            return v
        if isinstance(a, (tuple, list)):
            return type(a)([arg(x) for x in a])
        if isinstance(a, dict):
            return {k: arg(x) for k, x in a.items()}
        if isinstance(a, Node):  # a Node subclass
            raise _NotFast
        return a

    try:
        args = [arg(a) for a in n.args]
        kwargs = {k: arg(a) for k, a in n.kwargs.items()} if n.kwargs else {}
        if len(devices) != 1:  # no tensor input, or inputs on several devices: FakeTensor's rules
            raise _NotFast
        if n.op == "call_method":
            out = getattr(args[0], n.target)(*args[1:], **kwargs)
        else:
            out = n.target(*args, **kwargs)
    except Exception as exc:  # no meta kernel, symbolic sizes, mixed devices: take the FakeTensor path
        raise _NotFast from exc
    if type(out) is not torch.Tensor or out.device.type != "meta":
        raise _NotFast
    twins[n] = out
    return fake_type(mode, out, next(iter(devices)))


def lower(t: Translation, view: EGraphView, choice: dict[str, str], level: IRLevel | None = None) -> GraphModule:
    """Lower the extracted plan ``choice`` (e-class -> e-node id) to a GraphModule.

    ``level`` says which ops to emit (default :data:`TORCH_IR`; Aten-IR: ``optimus_bridge.aten.ATEN_IR``).

    Raises:
        LoweringError: when the plan would reorder kept nodes or change an output's shape, dtype or
            (non-contiguous) strides.
    """
    with no_gc():
        return Lowerer(t, view, choice, level).run()


#: Torch-IR lowering: ``torch.*`` functions and Tensor methods, as dynamo graphs spell them.
TORCH_IR = IRLevel(
    views=_VIEW_LOWERING,
    view_targets=frozenset(_VIEW_TARGETS),
    is_view=_is_view,
    is_fresh=lambda n: vocab.op_name(n) in vocab.FRESH_OPS,
    cat=lambda g, xs, d: g.call_function(torch.cat, (xs, d)),
    stack=lambda g, xs, d: g.call_function(torch.stack, (xs, d)),
    clone=lambda g, x, fmt: g.call_method("clone", (x,), {"memory_format": fmt}),
    contiguous=lambda g, x: g.call_method("contiguous", (x,)),
)
