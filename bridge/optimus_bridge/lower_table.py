"""What lowering emits per term constructor: an :class:`IRLevel`, a table keyed by op, and its Torch-IR
instance :data:`TORCH_IR` (``optimus_bridge.aten.ATEN_IR`` is the Aten-IR one).

Also the spelling choices the table serves: a ``Reshape`` that only drops size-1 dims is a squeeze
(:func:`squeezed_dims`), and chosen narrows that tile a range of one tensor's dim are one split
(:func:`split_groups`).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.fx import Graph, Node

#: True while lowering inside Inductor's post-grad pass (set by :class:`optimus_bridge.post_grad.PostGradPass`):
#: the graph is then compiled by Inductor, whose kernels' outputs never require grad, so ``grad_mode_blind``
#: respellings are not needed there, and Inductor has no lowering for them (``aten._to_copy`` is one of its
#: decompositions: a graph that holds it fails with "both a fallback and a decomp for same op"; BERT
#: inference on the H200).
INSIDE_INDUCTOR: contextvars.ContextVar[bool] = contextvars.ContextVar("optimus_inside_inductor", default=False)


def call_function(g: Graph, target, args: tuple, kwargs: dict | None = None, name: str | None = None) -> Node:
    """``g.call_function(target, args, kwargs)``, with the arguments set after the node is created: the
    same node, without ``create_node``'s walk over the arguments looking for raw SymInts (ours are ints and
    nodes), which was a fifth of lowering at 20k nodes. ``name`` saves deriving it from the target."""
    n = g.create_node("call_function", target, name=name)
    if kwargs:
        n.kwargs = kwargs
    n.args = args
    return n


_VIEW_LOWERING: dict[str, Callable] = {
    "Narrow": lambda g, x, lit: call_function(g, torch.narrow, (x, lit[0], lit[1], lit[2]), name="narrow"),
    "Select": lambda g, x, lit: call_function(g, torch.select, (x, lit[0], lit[1]), name="select"),
    "Unsqueeze": lambda g, x, lit: call_function(g, torch.unsqueeze, (x, lit[0]), name="unsqueeze"),
    "Reshape": lambda g, x, lit: call_function(g, torch.reshape, (x, tuple(lit[0])), name="reshape"),
    "Permute": lambda g, x, lit: call_function(g, torch.permute, (x, tuple(lit[0])), name="permute"),
}


@dataclass(frozen=True)
class IRLevel:
    """What lowering emits for one IR level: a table keyed by constructor plus the few ops it adds.

    Attributes:
        views: constructor (``"Narrow"``, ...) -> ``f(graph, x, literals) -> Node``.
        cat: ``f(graph, tensors, dim) -> Node``; ``stack`` likewise, or None to emit a cat of unsqueezes.
        clone: ``f(graph, x, memory_format) -> Node``.
        restride: ``f(graph, x, shape, strides) -> [Node, ...]``, a copy of x with exactly these strides (for
            outputs whose eager layout is not contiguous), or None: such outputs fall back.
        squeeze: ``f(graph, x, dims) -> Node`` for a ``Reshape`` that only drops size-1 dims, or None: such
            reshapes are emitted as reshapes. A squeeze and a reshape are the same view, but AOTAutograd
            traces them (and their backward: unsqueeze against view) differently, and Inductor's fusion
            follows: on DLRM's cross net (``bmm(experts, gating).squeeze(2)``), the reshape
            spelling costs CPU Inductor extra kernels per training step.
        alias: ``f(graph, x) -> Node``, a new view of all of x (a distinct tensor object), or None.
        split: ``f(graph, x, sizes, dim) -> Node``, the pieces of x along ``dim`` (a tuple-valued node read
            with ``operator.getitem``), or None: narrows are always emitted one by one. Used for chosen
            narrows that tile a range of one tensor's dim (:func:`split_groups`): the same views, but
            AOTAutograd traces one split's backward as one cat where N narrows give N slice_backwards
            summed, and Inductor's fusion follows (DLRM's cross net, docs/DESIGN.md, "Kernel counts after lowering").
        grad_mode_blind: targets of ops that set ``requires_grad`` from their input even under ``no_grad``
            (``prims.convert_element_type``), each with ``f(graph, node, args, kwargs) -> Node``, an op of the
            same result that respects the grad mode. Used for a kept node whose input is a graph input or a
            view of one: AOTAutograd runs inference graphs under ``no_grad``, where eager's result does not
            require grad, but the op's does when the input does, and so does every view of it (a rewrite
            that drops a copy after it, ``stack([v])`` as ``v.unsqueeze``, lets that reach an output).
        sym_size: ``f(graph, x, dim) -> Node``, x's size at ``dim`` read at run time (a SymInt), for symbolic
            sizes (:mod:`optimus_eq.symbolic`) that lowering rebuilds; None: such graphs fall back.
    """

    views: dict
    cat: Callable
    stack: Callable | None
    clone: Callable
    restride: Callable | None = None
    squeeze: Callable | None = None
    alias: Callable | None = None
    split: Callable | None = None
    grad_mode_blind: dict = field(default_factory=dict)
    sym_size: Callable | None = None


def squeezed_dims(src, dst) -> tuple[int, ...] | None:
    """The dims of shape ``src`` that a reshape to ``dst`` drops, if it only drops size-1 dims; else None.

    ``squeezed_dims((4, 3, 1), (4, 3)) == (2,)``; ``squeezed_dims((4, 1, 3), (4, 3, 1))`` is None (a move).
    """
    if src is None or len(dst) >= len(src):
        return None
    dims, j = [], 0
    for i, n in enumerate(src):
        if j < len(dst) and n == dst[j]:
            j += 1
        elif n == 1:
            dims.append(i)
        else:
            return None
    return tuple(dims) if j == len(dst) else None


@dataclass
class SplitGroup:
    """Chosen narrows of one tensor along one dim that are emitted as one split.

    Attributes:
        source: the e-class of the tensor x being split.
        dim: the (non-negative) dim.
        sizes: the split's piece sizes along ``dim``; they sum to x's size there.
        piece: narrow e-class -> index of its piece in the split's outputs (pieces not in it are never read).
        node: the emitted split node, once emitted.
    """

    source: str
    dim: int
    sizes: list[int]
    piece: dict[str, int]
    node: Node | None = field(default=None, repr=False)


def split_groups(narrows: dict[str, tuple[str, int, int, int, int]]) -> dict[str, SplitGroup]:
    """Group narrows of one tensor along one dim whose pieces tile a contiguous range of it.

    Args:
        narrows: narrow e-class -> ``(source class, dim, start, length, n)``, the literals of
            ``Narrow(x, dim, start, length, n)`` (n: x's size along dim; dim non-negative).

    Returns:
        narrow e-class -> its :class:`SplitGroup`, for every group of at least two narrows of the same
        ``(source, dim)`` that are non-empty, pairwise disjoint and leave no gap between the first start and
        the last end; what lies before and after that range becomes a piece nobody reads. Groups where two
        pieces overlap or leave a gap are left out (their narrows stay narrows), as are pieces of x's whole
        length (an alias, not a split).
    """
    by_key: dict[tuple[str, int], list[tuple[int, int, int, str]]] = {}
    for cls, (src, dim, start, length, n) in narrows.items():
        if length > 0 and length < n and 0 <= start and start + length <= n:
            by_key.setdefault((src, dim), []).append((start, length, n, cls))
    out: dict[str, SplitGroup] = {}
    for (src, dim), pieces in by_key.items():
        if len(pieces) < 2 or len({p[2] for p in pieces}) != 1:
            continue
        pieces.sort()
        n = pieces[0][2]
        if any(a[0] + a[1] != b[0] for a, b in zip(pieces, pieces[1:])):  # an overlap or a gap
            continue
        sizes, piece = ([pieces[0][0]] if pieces[0][0] else []), {}
        for start, length, _, cls in pieces:
            piece[cls] = len(sizes)
            sizes.append(length)
        end = pieces[-1][0] + pieces[-1][1]
        if end < n:
            sizes.append(n - end)
        group = SplitGroup(src, dim, sizes, piece)
        for cls in piece:
            out[cls] = group
    return out


class LoweringError(RuntimeError):
    """The extracted plan cannot be lowered faithfully (the caller falls back to the original graph)."""


def restride_torch(g: Graph, x: Node, shape: tuple, stride: tuple) -> list[Node]:
    """``x.new_empty_strided(shape, stride).copy_(x)``: Torch-IR's ``IRLevel.restride``."""
    buf = g.call_method("new_empty_strided", (x, shape, stride))
    return [buf, g.call_method("copy_", (buf, x))]


#: Torch-IR lowering: ``torch.*`` functions and Tensor methods, as dynamo graphs spell them.
TORCH_IR = IRLevel(
    views=_VIEW_LOWERING,
    cat=lambda g, xs, d: call_function(g, torch.cat, (xs, d), name="cat"),
    stack=lambda g, xs, d: call_function(g, torch.stack, (xs, d), name="stack"),
    squeeze=lambda g, x, dims: call_function(g, torch.squeeze, (x, dims), name="squeeze"),
    clone=lambda g, x, fmt: g.call_method("clone", (x,), {"memory_format": fmt}),
    restride=restride_torch,
    alias=lambda g, x: g.call_method("view_as", (x, x)),
    split=lambda g, x, sizes, d: call_function(g, torch.split, (x, sizes, d), name="split"),
    sym_size=lambda g, x, d: g.call_method("size", (x, d)),
)
