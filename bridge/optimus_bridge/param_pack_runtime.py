"""What a packed graph runs with at each call (:mod:`optimus_bridge.param_pack` decides what to pack):
:func:`packed_stack`, the stack of packed parameters as a view of their buffer with the stack's own backward,
and :class:`SavedVersions`, the saved-tensor hooks that give packed parameters eager's version check."""

from __future__ import annotations

import bisect
import operator
from typing import Any, Callable, Sequence

import torch


class PackedStack(torch.autograd.Function):
    """The stack (or dim-0 cat) of parameters that are views of ``buffer``, laid out as the stack's result:
    forward is a view of ``buffer`` (no copy); backward is ``stack``'s / ``cat``'s own (derivatives.yaml:
    ``unbind`` of the gradient along dim 0, ``split`` by the parameters' dim-0 sizes for a cat)."""

    @staticmethod
    def forward(buffer, sizes, *params):
        return buffer.view(buffer.shape)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.sizes = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        parts = grad.unbind(0) if ctx.sizes is None else grad.split(list(ctx.sizes), 0)
        return (None, None, *parts)


class PackedStacks(torch.autograd.Function):
    """:class:`PackedStack` of several packs in one autograd node: one ``apply`` per call and one backward, where a
    node per pack cost each call a Python forward and a Python backward (about 12 us each, host time a
    synchronized training step waits for before its first kernel: 9 packs on BERT, hundreds at 128 branches).

    ``forward(layout, *flat)``: ``layout`` holds per pack ``(sizes, n)`` (:class:`PackedStack`'s ``sizes``; ``n``
    parameters) and ``flat`` per pack its buffer followed by its ``n`` parameters; the result is per pack a view
    of its buffer. Backward gives each parameter its slice of its pack's gradient; a pack whose view got no
    gradient gives its parameters none (as a pack's own node would not run)."""

    @staticmethod
    def forward(layout, *flat):
        out, k = [], 0
        for _, n in layout:
            out.append(flat[k].view(flat[k].shape))
            k += 1 + n
        return tuple(out)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.layout = inputs[0]
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, *grads):
        out: list = [None]
        for (sizes, n), grad in zip(ctx.layout, grads):
            out.append(None)  # the buffer
            if grad is None:
                out.extend([None] * n)
            else:
                out.extend(grad.unbind(0) if sizes is None else grad.split(list(sizes), 0))
        return tuple(out)


#: PackedStacks' apply without ``Function.apply``'s Python layer (``torch/autograd/function.py``), which binds
#: the forward's signature (``inspect``) and walks every argument for dead functorch wrappers on each call:
#: 1,024 parameters per call at 128 branches. Used only while no functorch transform is active (the layer's
#: own condition for that walk; no default argument to bind); else ``PackedStacks.apply``.
_RAW_APPLY_ALL = super(torch.autograd.Function, PackedStacks).apply


def packed_stack(buffer: torch.Tensor, sizes: tuple[int, ...] | None, *params: torch.Tensor) -> torch.Tensor:
    """``torch.stack(params)`` (``sizes`` None) or ``torch.cat(params)`` (``sizes``: each parameter's dim-0
    size) where the parameters are views of ``buffer`` laid out as that result and ``buffer`` holds their
    values: a view of ``buffer`` whose gradient goes to each parameter (:class:`PackedStack`). The caller
    (:meth:`optimus_bridge.param_pack.ParameterPacks.inputs`) guarantees the layout; the result must not be
    written (a write would reach the parameters; autograd raises on an in-place write into a custom
    function's view output)."""
    return PackedStack.apply(buffer, sizes, *params)


#: a tensor's version counter and address, read through ``map`` without a Python frame per tensor
_VERSION = operator.attrgetter("_version")
_DATA_PTR = torch.Tensor.data_ptr


class SavedVersions(torch.autograd.graph.saved_tensors_hooks):
    """Saved-tensor hooks for one call of a packed graph: a tensor saved for backward that lives in a packed
    buffer records its parameters' version counters, and unpacking it in backward raises where one of them
    changed, as eager's own check does.

    Packing makes each parameter a view of the buffer by ``p.data = buffer[i]``, which leaves the parameter its
    own version counter: without these hooks an in-place update of a parameter between forward and backward
    would reach the saved buffer unseen and backward would use the new weights. Used only where no other
    saved-tensor hooks are active: under the user's own (activation offloading, checkpointing) eager checks
    no versions, the user's hook holds what was saved, and the packed graph's tensors go to it unchanged
    (:meth:`optimus_bridge.param_pack.ParameterPacks.wrap`).

    Per call the work is one bisection per saved tensor (``data_ptr()`` against the buffers' address ranges;
    a hit is confirmed by the storage's own address, and two more find the parameters whose bytes it spans)
    and, per buffer that the graph saves, one read of its parameters' versions (shared by every saved tensor
    of that buffer), so no Python runs per parameter.

    Args:
        table: :meth:`optimus_bridge.param_pack.ParameterPacks._version_table`: the buffers' start addresses
            (sorted), their end addresses, the addresses of their storages, per buffer the getter of the
            parameters that are views of it from the call's arguments, and their start addresses (ascending:
            the buffer is laid out in their order). A saved tensor checks only the parameters whose bytes it
            spans (per buffer, not per storage: a saved view of one pack checks none of another's), as eager
            checks only what it saved.
        args: the call's arguments (the original graph's inputs).
    """

    def __init__(self, table: tuple[list[int], list[int], list[int], list[Callable], list[list[int]]],
                 args: Sequence[Any]) -> None:
        starts, ends, storages, getters, firsts = table
        seen: dict[int, tuple[tuple, tuple]] = {}  # buffer index -> (its parameters, their versions at forward)

        def pack(t):
            try:
                ptr = t.data_ptr()
            except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, nested)
                return t, None
            k = bisect.bisect_right(starts, ptr) - 1
            if k < 0 or ptr >= ends[k] or t.untyped_storage().data_ptr() != storages[k] or not t.numel():
                return t, None
            if k not in seen:
                params = getters[k](args)
                seen[k] = (params, tuple(map(_VERSION, params)))
            # only the parameters whose bytes the saved tensor spans, as eager checks only what it saved (a
            # parameter the graph also reads unstacked is saved as itself, inside its buffer)
            end = ptr + (1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))) * t.element_size()
            first = firsts[k]
            lo, hi = bisect.bisect_right(first, ptr) - 1, bisect.bisect_left(first, end)
            if lo == 0 and hi == len(first):
                return t, seen[k]
            params, versions = seen[k]
            return t, (params[lo:hi], versions[lo:hi])

        def unpack(saved):
            held, versions = saved
            if versions is not None and tuple(map(_VERSION, versions[0])) != versions[1]:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an inplace "
                    "operation: a parameter that optimus_eq packed into one buffer was written between forward "
                    "and backward (eager raises the same error)")
            return held

        super().__init__(pack, unpack)
