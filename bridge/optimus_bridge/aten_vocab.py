"""The op vocabulary of Aten-IR (the graphs AOTAutograd produces and Inductor's post-grad passes see).

Aten nodes are ``call_function`` nodes whose target is an ``OpOverload`` (``torch.ops.aten.split.Tensor``);
tuple results are read with ``operator.getitem``. Every overload listed here maps to the same vocabulary
name the Torch-IR vocabulary (:mod:`optimus_bridge.vocab`) uses, so both levels share one term language:
``aten.split.Tensor`` and ``aten.split_with_sizes.default`` are ``"split"``; ``aten.view``,
``aten._unsafe_view``, ``aten.reshape`` and every ``aten.squeeze`` overload are ``"reshape"``-like views.
``aten.slice.Tensor`` is ``"slice"`` and ``aten.select.int`` is ``"select"`` (Torch-IR spells them as
indexing). Anything not listed stays opaque (its FX node is copied as it is).

This module has the same interface as :mod:`optimus_bridge.vocab` (``op_name``, ``is_mutation``,
``changes_global_state``, ``FRESH_OPS``, ``UNARY_OPS``, ``ARITH_OPS``, ``APPLY_OPS``, ``RESHAPE_OPS``), so
the translator and the alias analysis take either module. Overloads missing from an older torch are
skipped (the GPU machine runs torch 2.11).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Node

from optimus_bridge.effects import changes_global_state, is_mutation  # noqa: F401  (same at both levels)

_aten = torch.ops.aten

_SPELLINGS: dict[str, list[str]] = {
    "split": ["split.Tensor", "split_with_sizes.default"],
    "chunk": ["chunk.default"],
    "unbind": ["unbind.int"],
    "slice": ["slice.Tensor"],
    "narrow": ["narrow.default"],
    "select": ["select.int"],
    "cat": ["cat.default"],
    "stack": ["stack.default"],
    "unsqueeze": ["unsqueeze.default"],
    "squeeze": ["squeeze.default", "squeeze.dim", "squeeze.dims"],
    "reshape": ["view.default", "_unsafe_view.default", "reshape.default"],
    "expand": ["expand.default"],
    "alias": ["alias.default"],
    "permute": ["permute.default"],
    "transpose": ["transpose.int"],
    "t": ["t.default"],
    "clone": ["clone.default"],
    "mm": ["mm.default"],
    "addmm": ["addmm.default"],
    "bmm": ["bmm.default"],
    "baddbmm": ["baddbmm.default"],
    "tanh": ["tanh.default"],
    "relu": ["relu.default"],
    "sigmoid": ["sigmoid.default"],
    "detach": ["detach.default"],
    "clamp": ["clamp.default"],
    "nan_to_num": ["nan_to_num.default"],
    "add": ["add.Tensor", "add.Scalar"],
    "sub": ["sub.Tensor", "sub.Scalar"],
    "mul": ["mul.Tensor", "mul.Scalar"],
    "div": ["div.Tensor", "div.Scalar", "div.Tensor_mode", "div.Scalar_mode"],
    "native_layer_norm": ["native_layer_norm.default"],
    "embedding": ["embedding.default"],
}


def _overload(spelling: str):
    packet, _, overload = spelling.partition(".")
    return getattr(getattr(_aten, packet, None), overload, None)


#: OpOverload -> vocabulary name.
OVERLOADS: dict[Any, str] = {
    op: name for name, spellings in _SPELLINGS.items() for s in spellings if (op := _overload(s)) is not None
}
OVERLOADS[operator.getitem] = "getitem"

#: Ops whose output never shares storage with an input (the alias analysis and output un-aliasing).
FRESH_OPS = frozenset(["cat", "stack", "relu", "tanh", "sigmoid", "clamp", "nan_to_num", "add", "sub", "mul",
                       "div", "mm", "addmm", "bmm", "baddbmm", "clone", "native_layer_norm", "embedding"])
#: Pointwise ops of one tensor: ``Unary`` terms (a scalar second operand included).
UNARY_OPS = frozenset(["relu", "tanh", "sigmoid", "detach", "clamp", "nan_to_num"])
#: Arithmetic: ``Unary`` with a scalar operand, ``Binary`` with two tensors.
ARITH_OPS = frozenset(["add", "sub", "mul", "div"])
#: Ops with tensor inputs and no rewrite rules yet: ``Apply``. ``native_layer_norm`` returns a tuple
#: (output, mean, rstd) and stays opaque; it is named so that the alias analysis knows it is fresh.
APPLY_OPS = frozenset(["mm", "addmm", "bmm", "baddbmm", "embedding"])
#: Views of one tensor whose result shape comes from FX meta: ``Reshape``.
RESHAPE_OPS = frozenset(["reshape", "squeeze"])


def op_name(node: Node) -> str | None:
    """The vocabulary name of an Aten-IR ``node``'s op, or None when it is outside the vocabulary."""
    if node.op != "call_function":
        return None
    try:
        return OVERLOADS.get(node.target)
    except TypeError:  # unhashable target
        return None


def bind(node: Node) -> dict[str, Any]:
    """The arguments of an OpOverload call by schema name, defaults filled in.

    ``aten.slice.Tensor(x, 1, 0, 4)`` -> ``{"self": x, "dim": 1, "start": 0, "end": 4, "step": 1}``.

    Raises:
        TypeError: if an argument without a default is missing, or an unknown keyword is given.
    """
    schema = node.target._schema
    out: dict[str, Any] = {}
    known = set()
    for i, arg in enumerate(schema.arguments):
        known.add(arg.name)
        if i < len(node.args) and not arg.kwarg_only:
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            raise TypeError(f"{node.target}: argument {arg.name!r} missing")
    unknown = set(node.kwargs) - known
    if unknown:
        raise TypeError(f"{node.target}: unknown keyword(s) {sorted(unknown)}")
    return out
