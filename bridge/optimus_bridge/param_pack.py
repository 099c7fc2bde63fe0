"""Parameter packing: a stack (or dim-0 cat) of parameters made free by making it a view.

The horizontal rewrites batch N branches' layers into one op that takes the branches' parameters stacked
(``torch.stack([w_0, ..., w_N-1])`` of N LayerNorm weights, Linear weights, biases). Those stacks depend
on parameters alone, yet the compiled graph recomputes them on every call: one copy kernel each, and
every parameter a separate graph input (thousands at the paper's scale: host work per call that grows
with the parameter count).

Packing moves the work to compile time and keeps it correct under every in-place update: the packed
parameters are re-homed (``p.data = buffer[i]``) as views of one contiguous buffer laid out exactly as
the stack's result, and the compiled graph takes that buffer in place of the stack. The stack then costs
nothing per call, and the buffer always holds the parameters' current values: an optimizer step,
``load_state_dict``, ``p.data.copy_(...)`` or ``with torch.no_grad(): p.add_(1)`` write into the
buffer itself. (A cache keyed by version counters would miss ``p.data.copy_``: ``.data`` is a new tensor
with its own version counter.) Values, shapes, dtypes and strides of the parameters do not change; their
storage does (``p.storage_offset()``, ``p.untyped_storage()``, ``p.data_ptr()``), as with the flat
parameters of FSDP.

Per call, :meth:`ParameterPacks.inputs` checks that each packed parameter still sits at its address in
its buffer (one ``data_ptr()`` per parameter). A parameter rebound elsewhere (``p.data = t``,
``load_state_dict(..., assign=True)``, another module instance reaching the same compiled code) is
re-packed when it qualifies (below), else its stack is computed from the call's arguments as before:
never a stale weight.

A stack is packed only when it cannot lose a gradient or another tensor's aliasing:
- its inputs are distinct ``nn.Parameter`` graph inputs (plain strided, contiguous, same shape, dtype and
  device), each the sole tensor on its storage (``torch._C._storage_Use_Count``) or already packed in the
  same layout by an earlier compile;
- nothing writes into the stack's result or a view of it, and neither is a graph output (the buffer
  would then be written or handed out where eager's stack is a fresh tensor), and nothing in the graph
  writes into one of its parameters (AOTAutograd would not know that the buffer input aliases it).

Where no gradient can flow (none of the parameters requires grad, or the graph is compiled with grad mode
off and sets no grad mode inside: inference, ``torch.no_grad()``, ``torch.inference_mode()``) the graph
reads the buffer itself. Dynamo guards the grad mode and each input's ``requires_grad``, so such a graph
never runs in training; :meth:`ParameterPacks.inputs` checks it again and raises rather than drop a
gradient. In a training graph the graph reads the buffer too, and each call passes in its place
:func:`packed_stack` of the buffer and the parameters, computed outside the compiled graph: an autograd
function whose value is the buffer (no copy) and whose backward gives each parameter its slice of the
stack's gradient, as ``stack``'s own backward (``unbind`` / ``split``) does, so AccumulateGrad still takes
each gradient without a copy. The graph handed to AOTAutograd and Inductor then has one input and one
gradient output per pack where it had one per parameter (at 128 branches x 2 layers: 1,036 inputs and
1,036 gradient outputs -> 12 each; forward 1,098 -> 74 FX nodes, backward 1,142 -> 110), and the stack's copy
kernels leave the training step.
"""

from __future__ import annotations

import operator
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import fx, nn

from optimus_bridge import vocab
from optimus_bridge.aliasing import storage_id
from optimus_bridge.effects import is_mutation
from optimus_bridge.param_pack_runtime import (_DATA_PTR, _RAW_APPLY_ALL, PackedStacks, SavedVersions,
                                               packed_stack)

#: serializes :meth:`ParameterPacks._refresh` (re-packs are rare: a parameter moved since the last call)
_REFRESH_LOCK = threading.RLock()

#: FX targets whose result a parameter buffer can stand for: ``torch.stack`` (dim 0) and ``torch.cat`` (dim 0)
PACKABLE = {torch.stack: "stack", torch.cat: "cat"}

#: call targets that change grad mode inside a Dynamo graph (a region of it may record gradients)
_GRAD_MODE_TARGETS = tuple(t for t in (getattr(torch._C, "_set_grad_enabled", None), torch.set_grad_enabled,
                                       torch.enable_grad, getattr(torch._C, "_enter_inference_mode", None))
                           if t is not None)


def _storage_uses(t: torch.Tensor) -> int:
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


#: the use count of the storage of a tensor that shares it with nothing (the tensor and the Python
#: storage object that asked)
_LONE_USES = _storage_uses(torch.empty(1))


@dataclass
class Pack:
    """One packed stack.

    Attributes:
        name: the name of the FX node it replaces (for reports).
        kind: ``"stack"`` or ``"cat"`` (dim 0).
        positions: where its parameters are among the graph's inputs, in stack order.
        buffer: the contiguous tensor equal to the stack's result; the parameters are views of it.
        ptrs: each parameter's ``data_ptr()`` inside ``buffer``.
        grad: whether gradients flow through the stack (each call passes :func:`packed_stack` of the buffer
            and the parameters in the buffer's place).
        sizes: for a cat, each parameter's dim-0 size (:func:`packed_stack`'s ``sizes``); None for a stack.
    """

    name: str
    kind: str
    positions: tuple[int, ...]
    buffer: torch.Tensor
    ptrs: list[int] = field(default_factory=list)
    grad: bool = False  # the graph differentiates the stack: each call passes packed_stack(buffer, params)
    sizes: tuple[int, ...] | None = None

    def compute(self, params: Sequence[torch.Tensor]) -> torch.Tensor:
        """The stack from the parameters themselves (the graph's own computation)."""
        return torch.stack(list(params)) if self.kind == "stack" else torch.cat(list(params))


def _offsets(kind: str, params: Sequence[torch.Tensor]) -> list[int]:
    """Element offset of each parameter inside the buffer."""
    out, at = [], 0
    for p in params:
        out.append(at)
        at += p.numel()
    return out


def _already_packed(kind: str, params: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The buffer the parameters already are views of, laid out as the stack's result, or None."""
    first = params[0]
    storage = first.untyped_storage()
    if any(p.untyped_storage().data_ptr() != storage.data_ptr() for p in params):
        return None
    base = first.storage_offset()
    for p, off in zip(params, _offsets(kind, params)):
        if p.storage_offset() != base + off:
            return None
    if kind == "stack":
        shape = (len(params), *first.shape)
    else:
        shape = (sum(p.shape[0] for p in params), *first.shape[1:])
    total = sum(p.numel() for p in params)
    if (base + total) * first.element_size() > storage.nbytes():
        return None
    buf = torch.empty(0, dtype=first.dtype, device=first.device)
    buf.set_(storage, base, shape)  # contiguous strides for `shape`
    return buf


def _qualifies(params: Sequence[Any], kind: str, need_no_grad: bool) -> bool:
    """Whether these example inputs may be re-homed into one buffer (see the module docstring)."""
    if not params or not all(type(p) is nn.Parameter for p in params):
        return False
    if len({id(p) for p in params}) != len(params):
        return False
    first = params[0]
    for p in params:
        if (p.layout != torch.strided or not p.is_contiguous() or p.dtype != first.dtype
                or p.device != first.device or p.device.type == "meta" or p.numel() == 0
                or p.is_conj() or p.is_neg() or p._base is not None):
            return False
        if need_no_grad and p.requires_grad:
            return False
        if kind == "stack" and p.shape != first.shape:
            return False
        if kind == "cat" and (p.dim() == 0 or p.shape[1:] != first.shape[1:]):
            return False
    if _already_packed(kind, params) is not None:
        return True
    return all(_storage_uses(p) == _LONE_USES for p in params)


def _pack(kind: str, params: Sequence[torch.Tensor]) -> torch.Tensor:
    """Re-home ``params`` as views of one new buffer (or find the one they are views of); the buffer."""
    buf = _already_packed(kind, params)
    if buf is not None:
        return buf
    with torch.inference_mode(False), torch.no_grad():
        buf = torch.stack([p.detach() for p in params]) if kind == "stack" else torch.cat([p.detach() for p in params])
        flat = buf.view(-1)
        for p, off in zip(params, _offsets(kind, params)):
            p.data = flat[off:off + p.numel()].view(p.shape)
    return buf


def _dim_zero(node: fx.Node, kind: str, rank: int) -> bool:
    """Whether the stack/cat node joins along dim 0 (``rank``: the parameters' rank)."""
    if len(node.args) > 2 or set(node.kwargs) - {"dim"}:
        return False
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if not isinstance(dim, int):
        return False
    out_rank = rank + 1 if kind == "stack" else rank
    return dim == 0 or dim == -out_rank


def _read_only(node: fx.Node, output_ok: bool = False) -> bool:
    """Whether no node writes into ``node``'s result or a view of it and (unless ``output_ok``) neither is a
    graph output (views found by the storage of Dynamo's ``example_value`` meta; without meta, a user
    counts as a view unless its op always returns new storage, ``vocab.FRESH_OPS``). A node that mutates
    one of them counts as a write whichever argument it writes (conservative)."""
    root = storage_id(node.meta.get("example_value"))
    todo, seen = [node], {node}
    while todo:
        n = todo.pop()
        for u in n.users:
            if u.op == "output":
                if output_ok:
                    continue
                return False
            if is_mutation(u):
                return False
            if u in seen:
                continue
            val = u.meta.get("example_value")
            vals = val if isinstance(val, (tuple, list)) else (val,)
            if (val is None or root is None) and vocab.op_name(u) not in vocab.FRESH_OPS or any(
                    root is not None and storage_id(v) == root for v in vals):
                seen.add(u)
                todo.append(u)
    return True


class ParameterPacks:
    """What packing did to one graph, and how its calls are served.

    The packed graph's inputs are the original graph's inputs at ``keep`` followed by one buffer per pack.
    """

    def __init__(self, packs: list[Pack], keep: list[int], grad_mode: bool, sets_grad_mode: bool = False) -> None:
        self.packs, self.keep, self.grad_mode = packs, keep, grad_mode
        # the graph switches grad mode itself (``with torch.enable_grad()`` inside): a call with grad mode off
        # may still differentiate the stack, so its packs with gradients get packed_stack (under enable_grad)
        self.sets_grad_mode = sets_grad_mode
        self._keep = operator.itemgetter(*keep) if keep else (lambda args: ())
        self._single = len(keep) == 1
        self._no_grad = [i for p in packs if not p.grad for i in p.positions]  # read as plain buffers
        self._layout()

    def _layout(self) -> None:
        """The per-call tables of the packs' current buffers (at construction and after a re-pack)."""
        # per pack: (buffer, sizes for packed_stack or None, its parameters' getter, their data_ptr()s, grad)
        self._calls = [(p.buffer, p.sizes, operator.itemgetter(*p.positions), p.ptrs, p.grad) for p in self.packs]
        # PackedStacks' layout: (sizes, parameter count) of each pack with gradients, in pack order
        self._stacks = tuple((p.sizes, len(p.positions)) for p in self.packs if p.grad)
        self._versions = None  # SavedVersions' table, built at the first grad call

    @property
    def parameters(self) -> int:
        """How many parameters are packed."""
        return sum(len(p.positions) for p in self.packs)

    def inputs(self, args: Sequence[Any]) -> list[Any]:
        """The packed graph's inputs for a call of the original graph with ``args``: the kept inputs, then per
        pack its buffer (in a call with grad mode on, a pack with gradients gives ``packed_stack(buffer,
        sizes, *params)``: the buffer's value, each parameter's gradient its slice of the buffer's; all such
        packs of a call through one :class:`PackedStacks` node).

        Per call and parameter the only work is its ``data_ptr()`` (whether it still sits in its buffer) and
        autograd's own edge to it.

        Raises:
            RuntimeError: a parameter packed without gradient requires grad in a call with grad mode on
                (the packed graph was compiled without its gradient; Dynamo's guards should have
                recompiled).
        """
        if self.sets_grad_mode and not torch.is_grad_enabled():
            with torch.enable_grad():  # the graph's own enable_grad region may differentiate the stacks
                return self.inputs(args)
        kept = self._keep(args)
        out = [kept] if self._single else list(kept)
        grad_on = torch.is_grad_enabled()
        if self._no_grad and grad_on and any(args[i].requires_grad for i in self._no_grad):
            raise RuntimeError("optimus_eq parameter packing: a packed parameter requires grad in a call with "
                               "grad mode on; the graph was compiled without its gradient")
        flat, slots = [], []  # PackedStacks' arguments, and where its views go in ``out``
        for buffer, sizes, get, ptrs, grad in self._calls:
            params = get(args)
            if list(map(_DATA_PTR, params)) != ptrs:
                return out[:len(self.keep)] + self._refresh(args, grad_on)
            if grad and grad_on:
                slots.append(len(out))
                flat.append(buffer)
                flat.extend(params)
            out.append(buffer)
        if slots:  # one autograd node for every pack with gradients
            apply = PackedStacks.apply if torch._C._are_functorch_transforms_active() else _RAW_APPLY_ALL
            for i, view in zip(slots, apply(self._stacks, *flat)):
                out[i] = view
        return out

    def unpacked_inputs(self, example_inputs: Sequence[Any]) -> list[Any]:
        """Example inputs for compiling the graph before packing (the backend's fallback when Inductor fails on
        the packed one): each packed parameter a detached alias, as :func:`pack_parameters` gives a kept one
        (it moved into its buffer after Dynamo fakified it; AOTAutograd's check of its storage offset fails)."""
        moved = {i for p in self.packs for i in p.positions}
        return [_fresh_example(x) if i in moved else x for i, x in enumerate(example_inputs)]

    def _refresh(self, args: Sequence[Any], grad_on: bool) -> list[torch.Tensor]:
        """Inputs for a call whose parameters moved: re-pack those that qualify, compute the rest.

        One thread at a time (:data:`_REFRESH_LOCK`): module instances that share the compiled code, called
        from several threads, re-pack the same :class:`Pack` in turn; without the lock a call could read the buffer
        another thread's re-pack had just set (another instance's weights)."""
        out = []
        with _REFRESH_LOCK:
            for pack in self.packs:
                params = [args[i] for i in pack.positions]
                if [p.data_ptr() for p in params] == pack.ptrs:
                    buffer = pack.buffer
                elif _qualifies(params, pack.kind, need_no_grad=self.grad_mode and not pack.grad):
                    buffer = pack.buffer = _pack(pack.kind, params)
                    pack.ptrs = [p.data_ptr() for p in params]
                else:  # the graph's own stack (differentiable where gradients flow)
                    with torch.set_grad_enabled(grad_on and pack.grad):
                        out.append(pack.compute(params))
                    continue
                out.append(packed_stack(buffer, pack.sizes, *params) if grad_on and pack.grad else buffer)
            self._layout()
        return out

    def _version_table(self) -> tuple[list[int], list[int], list[int], list[Callable], list[list[int]]]:
        """:class:`SavedVersions`' table for the current buffers: each pack's buffer's start and end address
        (sorted by start), the address of the storage it is on, the getter of the pack's parameters, and their
        start addresses (``Pack.ptrs``: ascending, the buffer holds them in stack order).

        Per buffer, not per storage: packs may share one storage (an earlier compile packed their union, e.g. an
        inference graph that batched every branch where the training graph batches two groups), and per storage a saved
        view of one pack would read the versions of the other's parameters too: a write into a parameter whose
        value no saved tensor holds would raise where eager does not. The buffers of one graph's
        packs are disjoint (distinct parameters, each buffer exactly its parameters)."""
        order = sorted(self.packs, key=lambda p: p.buffer.data_ptr())
        starts = [p.buffer.data_ptr() for p in order]
        return (starts, [s + p.buffer.numel() * p.buffer.element_size() for s, p in zip(starts, order)],
                [p.buffer.untyped_storage().data_ptr() for p in order],
                [operator.itemgetter(*p.positions) for p in order],  # >= 2 positions: a tuple
                [list(p.ptrs) for p in order])

    def saved_versions(self, args: Sequence[Any]) -> "SavedVersions":
        """The saved-tensor hooks of one call with grad mode on (:class:`SavedVersions`); their table of
        buffers and parameters is built once per layout (after a re-pack, again).

        ``self._versions`` is read once: a re-pack in another thread (``_layout``) may set it to None between two
        reads, and the call would then fail unpacking None."""
        table = self._versions
        if table is None:
            table = self._versions = self._version_table()
        return SavedVersions(table, args)

    def wrap(self, compiled: Callable) -> Callable:
        """``compiled`` (of the packed graph) as a callable of the original graph's inputs."""
        inputs, saved_versions = self.inputs, self.saved_versions

        def packed_call(*args):  # Dynamo calls a backend's callable with the graph's inputs as arguments
            packed = inputs(args)
            if (not torch.is_grad_enabled() and not self.sets_grad_mode
                    or torch._C._autograd._top_saved_tensors_default_hooks(False) is not None):
                return compiled(*packed)  # no gradient, or the user's saved-tensor hooks: eager checks no versions
            disabled = torch._C._autograd._saved_tensors_hooks_get_disabled_error_message()
            if disabled is None:
                with saved_versions(args):
                    return compiled(*packed)
            # the user disabled saved-tensor hooks (``torch.autograd.graph.disable_saved_tensors_hooks``): eager
            # still checks versions, so ours is pushed with them enabled for this call only (the user's own
            # pushes inside the compiled graph cannot happen: Dynamo traced none)
            torch._C._autograd._saved_tensors_hooks_enable()
            try:
                with saved_versions(args):
                    return compiled(*packed)
            finally:
                torch._C._autograd._saved_tensors_hooks_disable(disabled)

        packed_call._optimus_packs = self  # for tests and reports
        return packed_call


def pack_parameters(gm: fx.GraphModule, example_inputs: Sequence[Any],
                    gradients: bool | Callable[[list[list[torch.Tensor]]], bool] = True
                    ) -> tuple[fx.GraphModule, list[Any], ParameterPacks] | None:
    """Replace the parameter stacks of a Dynamo (Torch-IR) graph by buffer inputs; None when none qualify.

    Args:
        gm: the graph to compile (left untouched; the result is a new GraphModule).
        example_inputs: its real example inputs, one per placeholder (Dynamo's: parameters are the
            module's ``nn.Parameter`` objects).
        gradients: also pack the stacks that gradients flow through: True, False (only those without, which
            each call reads as the buffer itself), or a function given every such qualifying stack's
            parameters that says whether to pack them all (a stack with gradients costs each call
            :class:`PackedStacks` and the saved-tensor hooks, host time a CUDA-graph replay may not buy back:
            :func:`optimus_bridge.backend.grad_packing_pays`).

    Returns ``(packed_gm, packed_example_inputs, packs)``; call the compiled ``packed_gm`` through
    ``packs.wrap``. Re-homes the qualifying parameters (see the module docstring) as a side effect.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return None
    position = {n: i for i, n in enumerate(placeholders)}
    sets_grad_mode = any(n.op == "call_function" and n.target in _GRAD_MODE_TARGETS for n in gm.graph.nodes)
    grad_mode = torch.is_grad_enabled() or sets_grad_mode
    chosen: list[tuple[fx.Node, str, tuple[int, ...], bool]] = []
    taken: set[int] = set()
    for node in gm.graph.nodes:
        kind = PACKABLE.get(node.target) if node.op == "call_function" else None
        if kind is None or not node.args or not isinstance(node.args[0], (list, tuple)):
            continue
        items = node.args[0]
        if len(items) < 2 or not all(isinstance(a, fx.Node) and a in position for a in items):
            continue
        positions = tuple(position[a] for a in items)
        params = [example_inputs[i] for i in positions]
        if taken.intersection(positions) or not isinstance(params[0], torch.Tensor):
            continue
        if not _dim_zero(node, kind, params[0].dim()) or not _qualifies(params, kind, need_no_grad=False):
            continue
        if not _read_only(node) or not all(_read_only(items[k], output_ok=True) for k in range(len(items))):
            continue  # a write into the stack would reach the parameters; one into a parameter, a stale buffer
        chosen.append((node, kind, positions, grad_mode and any(p.requires_grad for p in params)))
        taken.update(positions)
    with_grad = [[example_inputs[i] for i in c[2]] for c in chosen if c[3]]
    if with_grad and not (gradients(with_grad) if callable(gradients) else gradients):
        chosen = [c for c in chosen if not c[3]]
        taken = {i for c in chosen for i in c[2]}  # the declined stacks' parameters stay where they are
    if not chosen:
        return None

    packs = []
    for node, kind, positions, grad in chosen:
        params = [example_inputs[i] for i in positions]
        buf = _pack(kind, params)
        sizes = None if kind == "stack" else tuple(int(p.shape[0]) for p in params)
        packs.append(Pack(node.name, kind, positions, buf, [p.data_ptr() for p in params], grad, sizes))

    # the packed graph: a copy, each packed stack replaced by a new placeholder after the last input. Where
    # gradients flow, each call passes packed_stack(buffer, sizes, *params) there (ParameterPacks.inputs): the
    # graph handed to AOTAutograd and Inductor then has one input and one gradient output per pack, not one
    # per parameter (at 512 branches x 2 layers, 16 in place of some 4,100)
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in gm.graph.nodes:
        env[n] = graph.node_copy(n, lambda a: env[a])
        if n.op == "placeholder" and hasattr(n, "_dynamo_source"):
            env[n]._dynamo_source = n._dynamo_source
    last = env[placeholders[-1]]
    fake_mode = _fake_mode(placeholders)
    examples = []
    for (node, kind, positions, grad), pack in zip(chosen, packs):
        with graph.inserting_after(last):
            ph = graph.placeholder(f"optimus_packed_{node.name}")
        ph.meta["tensor_dict"] = {"_dynamo_static_input_type": "unguarded"}  # a static input for CUDA graphs
        example = _fresh_example(pack.buffer, requires_grad=True) if grad else pack.buffer
        examples.append(example)
        if fake_mode is not None:
            ph.meta["example_value"] = fake_mode.from_tensor(example, static_shapes=True)
        ph._dynamo_source = None
        last = ph
        env[node].replace_all_uses_with(ph)
        graph.erase_node(env[node])
    removed = set()
    for i, n in enumerate(placeholders):
        if i in taken and not env[n].users:
            graph.erase_node(env[n])
            removed.add(i)
    packed = fx.GraphModule(gm, graph)
    for key, value in gm.meta.items():
        packed.meta.setdefault(key, value)
    for attr in ("_param_name_to_source", "_source_to_user_stacks"):
        if hasattr(gm, attr):
            setattr(packed, attr, getattr(gm, attr))
    keep = [i for i in range(len(placeholders)) if i not in removed]
    # a packed parameter that stays an input (another node reads it) has moved into its buffer since Dynamo
    # fakified it (its storage offset): its example is a detached alias, which AOTAutograd fakifies afresh
    # (Dynamo's symbolic context of the parameter holds the old offset and fails its hint check)
    moved = taken
    inputs = [_fresh_example(example_inputs[i]) if i in moved else example_inputs[i] for i in keep]
    inputs += examples
    return packed, inputs, ParameterPacks(packs, keep, grad_mode, sets_grad_mode)


def _fresh_example(p: torch.Tensor, requires_grad: bool | None = None) -> torch.Tensor:
    """An alias of ``p`` (same data and layout; ``requires_grad``, default ``p``'s) that is not ``p`` itself."""
    with torch.no_grad():
        t = p.detach()
    return t.requires_grad_(p.requires_grad if requires_grad is None else requires_grad)


def _fake_mode(placeholders: list[fx.Node]):
    """The FakeTensorMode of Dynamo's placeholder meta, if any."""
    from torch._guards import detect_fake_mode

    vals = [n.meta.get("example_value") for n in placeholders]
    try:
        return detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    except Exception:
        return None
