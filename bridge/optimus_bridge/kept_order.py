"""Which copied (kept) FX nodes must keep their original order, and the order a plan must keep.

Lowering copies an opaque node verbatim (``Translation.kept``). A node with an effect (a write into an input,
a switch of global state, a collective, an assert, a module call: a *barrier*) must stay where it was relative
to every other kept node with an effect, and every kept node stays between the barriers it sat between: a pure
op that read a tensor before an in-place write still reads it before, one after still after. Random draws keep
their order among themselves and the barriers, and a pure node may move across a draw (it reads nothing a draw
writes). Two pure kept nodes between the same two barriers commute, so they need no order between them: the plan may compute a fused op
that needs one of them and feeds the other (a tower's backward at Aten-IR keeps ``le``/``where`` per feature;
chained in their original order they made every feature's GEMMs of one layer depend on each other, and no
layer but the last could be batched).

* :func:`is_functional`: the node reads only its inputs and writes nothing (it may draw random numbers: then it
  is ordered among the draws);
* :func:`kept_epochs` (:class:`KeptOrder`): the *barriers* (kept nodes that are not functional), the *ordered*
  nodes (barriers and random draws, which keep their relative order: the generator's state is consumed in
  order), and per kept node its *epoch*, the last barrier at or before it; for the plan's order edges
  (``optimus_eq.horizontal.plan.PlanGraph``) and lowering's check (``optimus_bridge.lower``).

A node this module cannot prove functional is a barrier: the rule only ever frees nodes known to be functional.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field

import torch
from torch.fx import Node

from optimus_bridge.effects import changes_global_state, is_mutation
from optimus_bridge.fx_meta import node_arg
from optimus_bridge.lower_random import draws_random

#: modules of Torch-IR callables that compute a tensor from their inputs (graph-breaking side effects such as
#: ``torch.manual_seed`` live in other modules: ``torch.random``, ``torch.cuda``, ``torch.distributed``)
_PURE_MODULES = frozenset(["torch", "torch.nn.functional", "torch.functional", "torch._C._nn", "torch._C._linalg",
                           "torch._C._special", "torch._C._fft", "torch._C._VariableFunctions", "torch.special",
                           "torch.linalg", "torch.fft", "_operator", "operator", "math", "builtins"])
#: Tensor methods that register, record or run something beyond their value
_EFFECT_METHODS = frozenset(["register_hook", "register_post_accumulate_grad_hook", "retain_grad", "record_stream",
                             "backward", "share_memory_", "set_", "copy_", "resize_", "untyped_storage"])
#: aten ops (by name prefix) that check, print or constrain at run time: their place is their meaning
_EFFECT_ATEN_PREFIXES = ("_assert", "sym_constrain", "_print", "_record", "_functional_assert",
                         "_functional_sym_constrain")
_PURE_OP_NAMESPACES = frozenset(["aten", "prims"])
#: Torch-IR callables that draw random numbers though no aten op of their name is tagged
#: ``nondeterministic_seeded`` (composites that call one): Gumbel noise, fractional pooling's samples, the
#: recurrent layers' dropout
_COMPOSITE_RANDOM = frozenset(["gumbel_softmax", "fractional_max_pool2d", "fractional_max_pool3d",
                               "fractional_max_pool2d_with_indices", "fractional_max_pool3d_with_indices",
                               "lstm", "gru", "rnn_tanh", "rnn_relu"])


@functools.lru_cache(maxsize=None)
def _seeded_aten_name(name: str) -> bool:
    """Whether an aten op of this name (any overload) is tagged ``nondeterministic_seeded`` (``torch.randn``,
    ``torch.multinomial``, ``torch._standard_gamma``, ``torch._C._nn.rrelu_with_noise``, ...)."""
    try:
        packet = getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        return False
    return any(torch.Tag.nondeterministic_seeded in getattr(packet, o).tags for o in packet.overloads())


def _draws_random(node: Node) -> bool:
    """:func:`optimus_bridge.lower_random.draws_random`, or a Torch-IR call whose aten op of the same name is
    seeded, a composite of :data:`_COMPOSITE_RANDOM`, or attention with dropout."""
    if draws_random(node):
        return True
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return False
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if name in _COMPOSITE_RANDOM or _seeded_aten_name(name):
        return True
    if "scaled_dot_product" in name:
        return node_arg(node, 4, "dropout_p", 0.0) != 0
    return False


def is_functional(node: Node) -> bool:
    """Whether ``node`` reads only its inputs and writes nothing: a ``get_attr``, or a ``call_function`` or
    ``call_method`` that writes no input (:func:`optimus_bridge.effects.is_mutation`), switches no global state
    and is a functional aten/prims overload (schema not mutable, not an assert), a ``getitem``, an ``operator``
    function, or a callable of torch's functional modules (:data:`_PURE_MODULES`). Everything else (module
    calls, collectives, higher-order ops, user code Dynamo kept as a call) is not. A functional node may still
    draw random numbers (``torch.randn``, dropout): it is then ordered among the other draws (the generator's
    state is consumed in order) but not a barrier to pure nodes."""
    if node.op == "get_attr":
        return True
    if node.op not in ("call_function", "call_method"):
        return False  # placeholders keep the signature's order; module calls may hold state
    if is_mutation(node) or changes_global_state(node):
        return False
    target = node.target
    if node.op == "call_method":
        return isinstance(target, str) and target not in _EFFECT_METHODS
    if target is operator.getitem:
        return True
    if isinstance(target, torch._ops.OpOverload):
        if target.namespace not in _PURE_OP_NAMESPACES:
            return False
        schema = target._schema
        return not schema.is_mutable and bool(schema.returns) \
            and not schema.name.split("::")[-1].startswith(_EFFECT_ATEN_PREFIXES)
    if isinstance(target, (torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)):
        return False
    name = getattr(target, "__name__", "")
    if name.startswith(("_assert", "_check", "assert")):
        return False
    return getattr(target, "__module__", None) in _PURE_MODULES


@dataclass(frozen=True)
class KeptOrder:
    """The order lowering keeps among copied nodes.

    Attributes:
        ordered: the kept nodes that keep their relative order: the barriers and the random draws.
        barriers: the ordered nodes no other kept node may cross (not :func:`is_functional`, or frozen by the
            translator: in-place mutation, global-state regions, aliasing that a move would change). A random
            draw is ordered, not a barrier: a pure node may move across it, another draw may not.
        rank: ordered node -> its index among ``ordered`` (original order, from 0).
        epoch: kept node -> the index among ``barriers`` (original order, from 0) of the last barrier at or before
            it; -1 before the first. A kept node that is not a barrier goes after barrier ``epoch`` and before
            barrier ``epoch + 1``; a barrier's epoch is its own index.
    """

    ordered: frozenset = frozenset()
    barriers: frozenset = frozenset()
    rank: dict = field(default_factory=dict)
    epoch: dict = field(default_factory=dict)


def kept_epochs(kept: list, frozen: set) -> KeptOrder:
    """The :class:`KeptOrder` of ``kept`` (a Translation's kept nodes, in original order), with ``frozen`` (nodes
    the translator froze) barriers whatever their op."""
    ordered, barriers, rank, epoch = [], 0, {}, {}
    barrier_set = set()
    for n in kept:
        functional = n not in frozen and is_functional(n)
        if not functional:
            barrier_set.add(n)
            barriers += 1
        if not functional or _draws_random(n):
            rank[n] = len(ordered)
            ordered.append(n)
        epoch[n] = barriers - 1
    return KeptOrder(frozenset(ordered), frozenset(barrier_set), rank, epoch)
