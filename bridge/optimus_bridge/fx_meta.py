"""Reading one FX node for translation: its FakeTensor meta, its arguments, dims, and symbolic sizes.

Shared by the translator (:mod:`optimus_bridge.translate`, :mod:`optimus_bridge.normalize`), the alias analysis
(:mod:`optimus_bridge.aliasing`) and the rest of the bridge. A node that cannot be read as the translator needs
raises :class:`Unsupported`, and stays opaque.
"""

from __future__ import annotations

import torch
from torch.fx import Node


class Unsupported(Exception):
    """Raised inside a per-node translator: the node stays opaque."""


def meta_val(node: Node):
    """The FakeTensor (or tuple of them) dynamo or FakeTensorProp stored on ``node``."""
    val = node.meta.get("val", None)
    if val is None:
        val = node.meta.get("example_value", None)
    return val


def is_static_tensor(val) -> bool:
    """``val`` is a tensor whose sizes are all plain ints."""
    return isinstance(val, torch.Tensor) and all(isinstance(s, int) for s in val.shape)


def norm_dim(dim, rank: int) -> int:
    """``dim`` made non-negative for a tensor of ``rank`` dims (a rank-0 tensor takes dim 0 or -1); Unsupported
    when it is not an int or out of range."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise Unsupported(f"dim {dim!r} is not an int")
    if not -rank <= dim < max(rank, 1):
        raise Unsupported(f"dim {dim} out of range for rank {rank}")
    return dim % rank if rank else 0


def node_arg(node: Node, pos: int, name: str, default=None):
    """Argument ``pos`` of ``node``, or its keyword ``name``, or ``default``."""
    args = node.args
    if len(args) > pos:
        return args[pos]
    return node.kwargs.get(name, default)


def dropout_draws(node: Node) -> bool:
    """True when a ``dropout`` node (``F.dropout(x, p, training)`` or ``torch.dropout(x, p, train)``) draws
    a random mask and so returns new storage: training mode and ``p != 0``. Otherwise eager returns its
    input unchanged (ATen ``_dropout_impl``), which translation treats as the identity."""
    p = node_arg(node, 1, "p", 0.5)
    training = node_arg(node, 2, "train" if node.target is torch.dropout else "training", True)
    return training is not False and p != 0


def sym_expr(s):
    """The sympy expression of a SymInt (after the shape environment's replacements), or None."""
    try:
        e = s.node.expr
        env = getattr(s.node, "shape_env", None)
        return env.simplify(e) if env is not None else e
    except Exception:  # not a SymInt of a shape environment
        return None


def concrete_int(v) -> int | None:
    """The value of an FX argument that is an int, or a node whose meta is a SymInt Dynamo specialized."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    val = meta_val(v) if isinstance(v, Node) else v
    if isinstance(val, int) and not isinstance(val, bool):
        return val
    if isinstance(val, torch.SymInt):
        return val.node.maybe_as_int()
    return None


def buildable_kinds():
    """The sympy expression kinds lowering rebuilds as graph code: symbols, integers, sums, products,
    floor division (``optimus_bridge.lower``, ``Lowerer.size_value``)."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv

    return (sympy.Symbol, sympy.Integer, sympy.Add, sympy.Mul, FloorDiv)


def is_buildable(e, sources: dict) -> bool:
    """Whether lowering can rebuild expression ``e`` from ``sources`` (see :func:`buildable_kinds`)."""
    kinds = buildable_kinds()
    if not isinstance(e, kinds):
        return False
    if e.is_Symbol:
        return e in sources
    return all(is_buildable(a, sources) for a in e.args)

