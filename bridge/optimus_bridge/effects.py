"""Side effects of an FX node that no rewrite may move across: writes into an input (in-place ops, ``out=``,
``setitem``, ``x += y``) and switches of global state (grad mode, autocast, inference mode). The same at
both IR levels, so :mod:`optimus_bridge.vocab` and :mod:`optimus_bridge.aten_vocab` both give these."""

from __future__ import annotations

import functools
import inspect
import operator

import torch
import torch.nn.functional as F
from torch.fx import Node

_INPLACE_OPERATORS = frozenset(
    [operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
     operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift,
     operator.irshift, operator.imatmul]
)


#: Tensor methods that write into ``self`` when called by name (``x.__iadd__(y)``, ``x.__setitem__(i, v)``)
_INPLACE_DUNDERS = frozenset(f"__{op.__name__.strip('_')}__" for op in _INPLACE_OPERATORS)

_GLOBAL_STATE_NAMES = frozenset(
    ["_set_grad_enabled", "set_grad_enabled", "_enter_autocast", "_exit_autocast", "_set_autocast_enabled",
     "set_autocast_enabled", "_enter_inference_mode", "_exit_inference_mode", "_set_deterministic_algorithms"]
)


def changes_global_state(node: Node) -> bool:
    """True for nodes that switch grad mode, autocast or inference mode for the nodes after them
    (dynamo records ``with torch.no_grad():`` as ``torch._C._set_grad_enabled`` calls)."""
    if node.op != "call_function":
        return False
    name = getattr(node.target, "__name__", "")
    module = getattr(node.target, "__module__", "") or ""
    return name in _GLOBAL_STATE_NAMES or "autocast" in module and name.startswith(("_enter", "_exit"))


@functools.lru_cache(maxsize=None)
def _inplace_position(target) -> int | None:
    """Position of an ``inplace`` parameter of a Python function (F.relu(x, True)), or None."""
    try:
        params = list(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return None
    return params.index("inplace") if "inplace" in params else None


def embedding_max_norm(node: Node):
    """The ``max_norm`` argument of an ``F.embedding`` / ``F.embedding_bag`` call (None for other nodes)."""
    if node.op != "call_function":
        return None
    try:
        pos = {F.embedding: 3, F.embedding_bag: 3}.get(node.target)
    except TypeError:  # unhashable target
        return None
    if pos is None:
        return None
    return node.args[pos] if len(node.args) > pos else node.kwargs.get("max_norm")


def _running_stats_targets() -> dict:
    """Norm ops that write their running statistics in place when they normalize by the batch's own
    (``training`` / ``use_input_stats``): target -> (position of ``running_mean``, position and name of that
    flag, its default). torch/nn/functional.py: ``F.batch_norm`` / ``F.instance_norm``; the builtins and aten
    ops of the same names take ``(input, weight, bias, running_mean, running_var, flag, ...)``, whose schemas
    do not mark the running statistics as written."""
    table = {F.batch_norm: (1, 5, "training", False), F.instance_norm: (1, 5, "use_input_stats", True),
             torch.batch_norm: (3, 5, "training", None), torch.instance_norm: (3, 5, "use_input_stats", None)}
    aten = torch.ops.aten
    for name, flag in (("batch_norm", "training"), ("native_batch_norm", "training"),
                       ("instance_norm", "use_input_stats")):
        op = getattr(aten, name, None)
        if op is not None:
            table[op.default] = (3, 5, flag, None)
    return table


_RUNNING_STATS = _running_stats_targets()


def running_stats_written(node: Node) -> list[Node] | None:
    """The running statistics (FX nodes) that a batch / instance norm call writes in place: it is given them
    and (possibly) normalizes by the batch's own (``nn.BatchNorm*`` / ``nn.InstanceNorm*`` in training
    mode). None for any other node, or a norm that writes nothing. Its result is new storage."""
    if node.op != "call_function":
        return None
    try:
        spec = _RUNNING_STATS.get(node.target)
    except TypeError:  # unhashable target
        return None
    if spec is None:
        return None
    at, flag_at, flag_name, default = spec
    mean = node.args[at] if len(node.args) > at else node.kwargs.get("running_mean")
    var = node.args[at + 1] if len(node.args) > at + 1 else node.kwargs.get("running_var")
    flag = node.args[flag_at] if len(node.args) > flag_at else node.kwargs.get(flag_name, default)
    stats = [t for t in (mean, var) if isinstance(t, Node)]
    return stats if stats and flag is not False else None


def updates_running_stats(node: Node) -> bool:
    """True for a batch / instance norm call that writes its running statistics (:func:`running_stats_written`)."""
    return running_stats_written(node) is not None


def is_mutation(node: Node, gm: torch.fx.GraphModule | None = None) -> bool:
    """True when ``node`` writes into one of its inputs (in-place op, ``out=``, setitem, ``x += y``,
    ``F.embedding``/``F.embedding_bag`` with ``max_norm``, which renormalizes the looked-up rows of the
    weight in place: torch/nn/functional.py, ``torch.embedding_renorm_``; a batch / instance norm that
    updates its running statistics, :func:`updates_running_stats`)."""
    if node.kwargs.get("inplace") is True or "out" in node.kwargs:
        return True
    if embedding_max_norm(node) is not None or updates_running_stats(node):
        return True
    if node.op == "call_function" and callable(node.target):
        try:
            pos = _inplace_position(node.target)
        except TypeError:  # unhashable target
            pos = None
        if pos is not None and len(node.args) > pos and node.args[pos] is True:
            return True
    if node.op == "call_method":
        name = node.target
        return (name.endswith("_") and not name.startswith("__")) or name in _INPLACE_DUNDERS
    if node.op == "call_function":
        if node.target in _INPLACE_OPERATORS:
            return True
        if getattr(node.target, "__module__", None) in ("_operator", "operator"):
            return False  # operator.and_ / or_ / not_ are the non-in-place ``&``, ``|``, ``not``
        schema = getattr(node.target, "_schema", None)
        if schema is not None:
            return bool(schema.is_mutable)
        name = getattr(node.target, "__name__", "")
        return name.endswith("_") and not name.startswith("__")
    if node.op == "call_module" and gm is not None:
        try:
            return bool(getattr(gm.get_submodule(node.target), "inplace", False))
        except AttributeError:
            return True
    return False
