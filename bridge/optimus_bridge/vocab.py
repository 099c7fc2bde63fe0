"""The op vocabulary of Torch-IR (the FX graphs dynamo hands a backend): which FX targets are which op.

Every spelling maps to one op name: ``torch.split``, ``Tensor.split`` (a ``call_method`` "split") and
``torch.split_with_sizes`` are all ``"split"``; ``torch.concat`` and ``torch.concatenate`` are ``"cat"``.
Anything not listed is outside the vocabulary and becomes an opaque leaf that keeps its FX node.
"""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F
from torch.fx import Node

from optimus_bridge import aten_vocab
from optimus_bridge.effects import changes_global_state, is_mutation  # noqa: F401  (the vocabulary's interface)

_FUNCTIONS: dict[object, str] = {
    torch.split: "split",
    torch.split_with_sizes: "split",
    torch.chunk: "chunk",
    torch.unbind: "unbind",
    operator.getitem: "getitem",
    torch.cat: "cat",
    torch.concat: "cat",
    torch.concatenate: "cat",
    torch.stack: "stack",
    torch.narrow: "narrow",
    torch.reshape: "reshape",
    torch.flatten: "flatten",
    torch.unflatten: "unflatten",
    torch.squeeze: "squeeze",
    torch.unsqueeze: "unsqueeze",
    torch.permute: "permute",
    torch.transpose: "transpose",
    torch.swapaxes: "transpose",
    torch.swapdims: "transpose",
    torch.movedim: "movedim",
    torch.t: "t",
    torch.relu: "relu",
    F.relu: "relu",
    torch.tanh: "tanh",
    F.tanh: "tanh",
    torch.sigmoid: "sigmoid",
    F.sigmoid: "sigmoid",
    torch.detach: "detach",
    torch.clamp: "clamp",
    torch.clip: "clamp",
    torch.nan_to_num: "nan_to_num",
    torch.add: "add",
    operator.add: "add",
    torch.sub: "sub",
    torch.subtract: "sub",
    operator.sub: "sub",
    torch.mul: "mul",
    torch.multiply: "mul",
    operator.mul: "mul",
    torch.div: "div",
    torch.divide: "div",
    operator.truediv: "div",
    F.dropout: "dropout",
    torch.dropout: "dropout",
    F.linear: "linear",
    torch.mm: "mm",
    torch.addmm: "addmm",
    torch.bmm: "bmm",
    torch.baddbmm: "baddbmm",
    torch.matmul: "matmul",
    operator.matmul: "matmul",
    F.layer_norm: "layer_norm",
    torch.layer_norm: "layer_norm",
    torch.functional.einsum: "einsum",
    F.embedding_bag: "embedding_bag",
    F.embedding: "embedding",
}

_METHODS: dict[str, str] = {
    "split": "split", "split_with_sizes": "split", "chunk": "chunk", "unbind": "unbind", "narrow": "narrow",
    "view": "reshape", "reshape": "reshape", "flatten": "flatten", "unflatten": "unflatten",
    "squeeze": "squeeze", "unsqueeze": "unsqueeze", "permute": "permute", "transpose": "transpose",
    "swapaxes": "transpose", "swapdims": "transpose", "movedim": "movedim", "t": "t",
    "relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "detach": "detach", "clamp": "clamp", "clip": "clamp",
    "nan_to_num": "nan_to_num", "add": "add", "sub": "sub", "subtract": "sub", "mul": "mul", "multiply": "mul",
    "div": "div", "divide": "div", "mm": "mm", "addmm": "addmm", "bmm": "bmm", "baddbmm": "baddbmm",
    "matmul": "matmul", "contiguous": "contiguous",
}

#: Ops whose output never shares storage with an input (used by the alias analysis).
FRESH_OPS = frozenset(
    ["cat", "stack", "relu", "tanh", "sigmoid", "clamp", "nan_to_num", "add", "sub", "mul", "div", "linear",
     "mm", "addmm", "bmm", "baddbmm", "matmul", "layer_norm", "embedding_bag", "embedding"]
)

#: Pointwise ops of one tensor (a scalar second operand included): ``Unary`` terms.
UNARY_OPS = frozenset(["relu", "tanh", "sigmoid", "detach", "clamp", "nan_to_num"])
#: Arithmetic that is ``Unary`` with a scalar operand and ``Binary`` with two tensors.
ARITH_OPS = frozenset(["add", "sub", "mul", "div"])
#: Ops with tensor inputs and no rewrite rules yet (horizontal fusion will anchor on them): ``Apply``.
#: ``einsum`` only with two tensor operands (the translator leaves others opaque); not in FRESH_OPS, since
#: a one-operand einsum ("ij->ji") returns a view.
#: ``embedding_bag`` / ``embedding`` only without ``max_norm`` (which renormalizes the weight in place: a
#: mutation, :func:`is_mutation`).
APPLY_OPS = frozenset(["linear", "mm", "addmm", "bmm", "baddbmm", "matmul", "layer_norm", "einsum",
                       "embedding_bag", "embedding"])
#: Views of one tensor whose result shape comes from FX meta: ``Reshape``.
RESHAPE_OPS = frozenset(["reshape", "flatten", "unflatten", "squeeze"])

def op_name(node: Node) -> str | None:
    """The vocabulary name of ``node``'s op, or None when it is outside the vocabulary."""
    if node.op == "call_function":
        try:
            return _FUNCTIONS.get(node.target)
        except TypeError:  # unhashable target
            return None
    if node.op == "call_method":
        return _METHODS.get(node.target)
    return None


def op_kind(node: Node) -> str:
    """A short name of any node's op for reports (``"split"``, ``"cat"``, ``"cumsum"``, ``"placeholder"``)."""
    name = op_name(node)
    if name is not None:
        return name
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        # Aten-IR: the same names ("split", "cat", "slice", ...)
        return aten_vocab.op_name(node) or node.target.overloadpacket.__name__
    if node.op in ("call_function", "call_method"):
        target = node.target
        return target if isinstance(target, str) else getattr(target, "__name__", str(target))
    return node.op
