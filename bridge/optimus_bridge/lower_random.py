"""Random ops the plan keeps draw over eager's layout: a step of lowering (:mod:`optimus_bridge.lower`).

A random op draws its numbers in the memory order of the tensor it makes, and ``F.dropout`` / ``rand_like`` /
``bernoulli`` make it like their input (``empty_like``, which keeps a dense layout): the same seed gives another
mask for a transposed input than for a contiguous one. A plan can hand a kept op an input of another layout (the
selects of a batched linear's permuted output), so :func:`fix_random_inputs` gives each tensor input of a kept,
non-mutating random op eager's strides where the lowered value's differ (a copy, :func:`_copy_like`). Kept
random ops are copied in their original order, so with ``torch._inductor.config.fallback_random`` (training-mode
dropouts kept too) the optimized graph draws what eager draws.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import guard_or_false

from optimus_bridge.effects import is_mutation
from optimus_bridge.fx_meta import dropout_draws, meta_val, node_arg
from optimus_bridge.lower_outputs import _copy_like, _observable_strides, _restridable
from optimus_bridge.lower_table import IRLevel

#: Torch-IR ops (functions and methods, by name) that draw random numbers shaped like a tensor input
_RANDOM_NAMES = frozenset(["dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
                           "rand_like", "randn_like", "randint_like", "bernoulli", "rrelu", "normal", "poisson",
                           "native_dropout"])


def draws_random(node: Node) -> bool:
    """Does ``node`` draw random numbers (an aten op tagged ``nondeterministic_seeded``, or a Torch-IR op of
    :data:`_RANDOM_NAMES`; a dropout only in training mode with ``p != 0``: in eval mode it returns its input
    itself, whose aliasing a copy would lose)?"""
    if node.op not in ("call_function", "call_method"):
        return False
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return torch.Tag.nondeterministic_seeded in target.tags
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if name not in _RANDOM_NAMES:
        return False
    if name == "dropout":
        return dropout_draws(node)
    if name.endswith("dropout") and name != "native_dropout":  # eval mode returns its input itself: no draw
        training = node_arg(node, 2, "training", node_arg(node, 2, "train", name.startswith("dropout")))
        return training is not False and node_arg(node, 1, "p", 0.5) != 0
    return True


def fix_random_inputs(graph: Graph, env: dict, level: IRLevel) -> list[Node]:
    """Give each tensor input of a kept random op (``env``: original node -> its copy in ``graph``) eager's
    strides (the original input's meta) where the lowered value's differ and eager's layout is contiguous or
    reproducible (:func:`_copy_like`). Mutating ops (``bernoulli_``) are left as they are: a copy would take
    their write. Returns the nodes added (without meta: the caller propagates it)."""
    added: list[Node] = []
    for old, new in env.items():
        if not draws_random(old) or is_mutation(old):
            continue
        olds: list = []
        news: list = []
        torch.fx.node.map_arg((old.args, old.kwargs), olds.append)
        torch.fx.node.map_arg((new.args, new.kwargs), news.append)
        if len(olds) != len(news):  # respelled (lower_table's grad_mode_blind): not a copy of the call
            continue
        for a, na in zip(olds, news):
            ov, nv = meta_val(a), meta_val(na)
            if not (isinstance(ov, torch.Tensor) and isinstance(nv, torch.Tensor) and guard_or_false(ov.numel() > 1)):
                continue
            if tuple(ov.shape) != tuple(nv.shape) or _observable_strides(ov) == _observable_strides(nv):
                continue
            if not ov.is_contiguous() and not _restridable(ov, level):
                continue
            with graph.inserting_before(new):
                nodes = _copy_like(graph, na, ov, level)
            new.replace_input_with(na, nodes[-1])
            added.extend(nodes)
    return added
