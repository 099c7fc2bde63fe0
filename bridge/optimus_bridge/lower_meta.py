"""Meta propagation for lowered graphs: ``val`` and ``example_value`` FakeTensors on every node, for Inductor.

The values are FakeTensorProp's (:func:`fill_meta`), computed on faster paths where they are known to agree
(:func:`propagate_meta`): a view runs its plain meta kernel on a meta twin of its input, a cat or stack of
rank < 4 is a new contiguous tensor, a reshape that must copy likewise; everything else goes through
FakeTensorProp node by node. tests/test_lower.py compares every node's meta with FakeTensorProp's. The meta twins
of inputs that require grad require grad too, so that a fast result requires grad where FakeTensorProp's does
(a graph optimized again reads eager's gradient facts off this meta).
"""

from __future__ import annotations

import contextlib
import operator

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx import Graph, GraphModule, Node
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from optimus_bridge.effects import is_mutation
from optimus_bridge.fx_meta import meta_val
from optimus_bridge.overlap import static_layout


def _input_fakes(original: GraphModule) -> tuple[list, FakeTensorMode]:
    fakes = [meta_val(n) for n in original.graph.find_nodes(op="placeholder")]
    # the inputs' own mode: inside torch.compile the tracing context may hold another one
    modes = {id(f.fake_mode): f.fake_mode for f in fakes if isinstance(f, FakeTensor)}
    if len(modes) > 1:
        raise RuntimeError("graph inputs carry FakeTensors of several fake modes")
    mode = next(iter(modes.values())) if modes else FakeTensorMode(allow_non_fake_inputs=True)
    return fakes, mode


class AttrFakeTensorProp(FakeTensorProp):
    """FakeTensorProp whose ``get_attr`` hands out a tensor attribute as a FakeTensor of its mode (static
    sizes; the converter's memo gives every read of one attribute the same FakeTensor). FakeTensorMode runs an
    op whose tensor inputs are all real for real: an in-place op on a buffer (``ExportedProgram.module()``'s
    ``get_attr`` buffers, a traced ``self.count.add_(1)``) counted the user's buffer up once per
    optimization (the optimized program's first call then started from it)."""

    def get_attr(self, target, args, kwargs):
        val = super().get_attr(target, args, kwargs)
        if isinstance(val, torch.Tensor) and not isinstance(val, FakeTensor):
            return self._mode.from_tensor(val, static_shapes=True)
        return val


def fill_meta(gm: GraphModule, original: GraphModule) -> None:
    """Fill ``val`` / ``example_value`` on every node by FakeTensor propagation from the inputs' meta."""
    fakes, mode = _input_fakes(original)
    with mode:
        AttrFakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    for n in gm.graph.nodes:
        if "val" in n.meta:
            n.meta["example_value"] = n.meta["val"]


def propagate_meta(graph: Graph, root: torch.nn.Module, original: GraphModule, fast, only=None,
                   memo: dict | None = None) -> None:
    """Fill ``val`` / ``example_value`` like :func:`fill_meta`, without building a GraphModule, and fast.

    FakeTensor dispatch costs 0.1-5 ms per op (a narrow: ~0.2 ms), which made meta propagation most of the
    lowering time on large graphs. Nodes for which ``fast(node)`` holds (term nodes we emitted: views,
    cat/stack, pure ops) run their op on plain ``meta`` tensors that share storage with the inputs'
    FakeTensors (~2 us for a view) and the result is wrapped as a FakeTensor of the inputs' mode, on their
    device. Other nodes (copied opaque nodes), nodes whose inputs sit on several devices, graphs with
    symbolic sizes, and any op that fails on meta tensors go through FakeTensorProp, node by node.

    Args:
        only: propagate just these nodes (their inputs must have meta already).
        memo: a dict shared by the calls for one ``original``: its inputs' FakeTensors are read once.
    """
    memo = {} if memo is None else memo
    if "inputs" not in memo:
        fakes, mode = _input_fakes(original)
        memo["inputs"] = (fakes, mode, all(isinstance(f, FakeTensor) and static_layout(f)
                                           for f in fakes if isinstance(f, torch.Tensor)))
    fakes, mode, static_inputs = memo["inputs"]
    # the meta-device shortcut skips autocast's dispatch (a Linear in an autocast region is bfloat16)
    static = static_inputs and not torch._C._is_any_autocast_enabled()
    prop = AttrFakeTensorProp(_Attrs(root), mode)  # only its run_node is used: env in, attributes from root
    env = prop.env
    twins: dict[Node, torch.Tensor] = {}

    def twin_of(a: Node):
        t = twins.get(a)
        if t is None:
            v = env[a]
            if not isinstance(v, FakeTensor) or not static_layout(v):
                raise _NotFast
            t = twins[a] = torch.empty(0, device="meta", dtype=v.dtype).set_(
                v.untyped_storage(), v.storage_offset(), v.shape, v.stride())
            if v.requires_grad:  # so that an op on twins requires grad where autograd says it does
                t.requires_grad_(True)
        return t

    def slow(n: Node):
        if n.op == "call_function" and n.target is _REGISTER_HOOK and type(n.args[0]) is Node:
            # the tensor itself; registering the user's hook needs a FakeTensor that requires grad, which
            # the meta twins of emitted nodes are not (a hook on a batched linear's member failed the lowering)
            out = n.meta["val"] = env[n.args[0]]
            return out
        with mode, _writes_into_grad_leaves(n, env):
            out = prop.run_node(n)
        _keep_requires_grad(n.meta.get("val"), out)
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
        op = n.op
        if op == "placeholder":
            val = env[n] = next(placeholders)
            if val is not None:
                n.meta["val"] = n.meta["example_value"] = val
            continue
        if op == "output":
            continue
        val = None
        if static and (op == "call_function" or op == "call_method") and fast(n):
            target = n.target
            view = _VIEW_META.get(target) if op == "call_function" and type(target) is not str else None
            if view is not None and not n.kwargs and type(n.args[0]) is Node:
                val = _fast_view(n, env, twins, twin_of, FakeTensor, mode)
            elif view is None and _CAT_META.get(target) and not n.kwargs:
                val = _fast_cat(n, env, FakeTensor, mode)
            elif target is torch.reshape:
                val = _fast_reshape_copy(n, env, twin_of, FakeTensor, mode)
            elif target is torch.split:
                val = _fast_split(n, env, twins, twin_of, FakeTensor, mode)
            elif target is operator.getitem and type(n.args[0]) is Node and type(twins.get(n.args[0])) is tuple:
                val = env[n.args[0]][n.args[1]]
                twins[n] = twins[n.args[0]][n.args[1]]
            if val is None and not _slow_meta(target):
                try:
                    val = _fast_node(n, env, twins, twin_of, FakeTensor, mode)
                except _NotFast:
                    pass
        if val is None:
            env[n] = slow(n)
            if "val" in n.meta:
                n.meta["example_value"] = n.meta["val"]
        else:
            env[n] = n.meta["val"] = n.meta["example_value"] = val


#: Dynamo's ``tensor.register_hook(fn)`` inside a graph: ``register_hook(tensor, hook_body, *freevars)``
#: registers the hook and returns ``tensor``
try:
    from torch._higher_order_ops.register_hook import register_hook_op as _REGISTER_HOOK
except ImportError:  # a torch without the op: no graph holds it
    _REGISTER_HOOK = None


def _keep_requires_grad(val, out) -> None:
    """FakeTensorProp stores a detached snapshot of ``out`` as the meta ``val``: give it ``out``'s
    ``requires_grad`` (as dynamo's ``example_value`` has it; a graph optimized again reads eager's gradient
    facts off this meta, and a lowered graph read as not requiring grad got its outputs detached)."""
    if isinstance(val, (tuple, list)) and isinstance(out, (tuple, list)) and len(val) == len(out):
        for v, o in zip(val, out):
            _keep_requires_grad(v, o)
    elif isinstance(val, torch.Tensor) and isinstance(out, torch.Tensor) and out.requires_grad \
            and not val.requires_grad and val.is_leaf:
        val.requires_grad_(True)


def _writes_into_grad_leaves(n: Node, env: dict):
    """``torch.no_grad()`` for an in-place node with an input whose FakeTensor is a leaf that requires grad,
    else a no-op context. Such a meta is not eager's: ``torch.export`` leaves a user input that the program
    writes a value requiring grad into (a KV cache filled from a Linear: ``cache[:, :b] = out``) with
    ``requires_grad`` set on its placeholder's leaf FakeTensor, where autograd refuses the in-place op
    (eager could only run it without grad). Without it every such exported program falls back."""
    if is_mutation(n) and any(isinstance(v := env.get(a), torch.Tensor) and v.requires_grad and v.is_leaf
                              for a in n.all_input_nodes):
        return torch.no_grad()
    return contextlib.nullcontext()


#: View ops whose plain meta kernel gives exactly FakeTensorProp's result (the ops lowering emits for the
#: canonical view terms); they take the shortest path: one call on the input's meta twin.
_VIEW_META = {torch.narrow: True, torch.select: True, torch.unsqueeze: True, torch.permute: True}


#: cat/stack, whose meta is a Python reference (~1-2 ms at 100 inputs): computed directly for inputs of
#: rank < 4, where the result is always a new contiguous tensor (no channels-last memory format).
_CAT_META = {torch.cat: "cat", torch.stack: "stack"}


def _fast_view(n: Node, env: dict, twins: dict, twin_of, fake_type, mode):
    """Meta of a view op on one tensor and constant ints (``torch.narrow(x, 1, 0, 4)``), or None."""
    a = n.args[0]
    v = env.get(a)
    if not isinstance(v, fake_type):
        return None
    try:
        out = n.target(twin_of(a), *n.args[1:])
    except Exception:  # _NotFast (symbolic twin) or an argument the kernel rejects: the general paths
        return None
    twins[n] = out
    return fake_type(mode, out, v.device)


def _fast_split(n: Node, env: dict, twins: dict, twin_of, fake_type, mode):
    """Meta of ``torch.split(x, sizes, dim)`` (static ints): a tuple of views, as narrows give them (their
    twins kept in ``twins[n]`` for the ``getitem`` nodes that read them), or None."""
    args = n.args
    if n.kwargs or len(args) != 3 or type(args[0]) is not Node:
        return None
    v = env.get(args[0])
    if not isinstance(v, fake_type):
        return None
    try:
        outs = torch.split(twin_of(args[0]), args[1], args[2])
    except Exception:  # _NotFast (symbolic twin) or sizes the kernel rejects: FakeTensorProp decides
        return None
    twins[n] = tuple(outs)
    return tuple(fake_type(mode, o, v.device) for o in outs)


def _fast_cat(n: Node, env: dict, fake_type, mode):
    """Meta of ``torch.cat(tensors, dim)`` / ``torch.stack(tensors, dim)`` of same-dtype, same-device tensors
    of static rank-r shapes, r < 4 (a fresh contiguous tensor), or None when another path must decide."""
    args = n.args
    if not 1 <= len(args) <= 2 or not isinstance(args[0], (list, tuple)):  # FX stores an immutable_list
        return None
    vals = [env.get(a) if type(a) is Node else None for a in args[0]]
    if not vals or not all(isinstance(v, fake_type) for v in vals):
        return None
    first = vals[0]
    dtype, device, shape = first.dtype, first.device, first.shape
    rank = len(shape)
    stack = _CAT_META[n.target] == "stack"
    dim = args[1] if len(args) > 1 else 0
    out_rank = rank + 1 if stack else rank
    if type(dim) is not int or not 0 < rank < 4 or not -out_rank <= dim < out_rank:
        return None
    dim %= out_rank
    try:
        if stack:
            if any(v.dtype != dtype or v.device != device or v.shape != shape for v in vals):
                return None
            out_shape = [*shape[:dim], len(vals), *shape[dim:]]
        else:
            rest = (shape[:dim], shape[dim + 1:])
            if any(v.dtype != dtype or v.device != device or len(v.shape) != rank
                   or (v.shape[:dim], v.shape[dim + 1:]) != rest for v in vals):
                return None
            out_shape = list(shape)
            out_shape[dim] = sum(v.shape[dim] for v in vals)
    except Exception:  # a data-dependent symbolic size: FakeTensorProp decides
        return None
    if not all(type(d) is int for d in out_shape):
        return None
    grad = torch.is_grad_enabled() and any(v.requires_grad for v in vals)
    return fake_type(mode, torch.empty(out_shape, dtype=dtype, device="meta", requires_grad=grad), device)


def _fast_reshape_copy(n: Node, env: dict, twin_of, fake_type, mode):
    """Meta of ``torch.reshape(x, shape)`` (static ints) when x cannot be viewed as ``shape``: reshape then
    copies, and FakeTensor's reference returns a new contiguous tensor (checked with size-1 dims), which is
    what this returns. None when x can be viewed: the view's strides of size-1 dims are FakeTensorProp's
    to decide (``_SLOW_META``). Greedy's batched pointwise ops end in ``reshape(permute(op(stack)))``, one
    per group: 788 of them at 50k nodes went through FakeTensor dispatch, about 0.7 ms each."""
    args = n.args
    if n.kwargs or len(args) != 2 or type(args[0]) is not Node or not isinstance(args[1], (tuple, list)) \
            or not all(type(d) is int for d in args[1]):
        return None
    v = env.get(args[0])
    if not isinstance(v, fake_type):
        return None
    try:
        t = twin_of(args[0])
    except _NotFast:
        return None
    try:
        t.view(args[1])
        return None  # a view
    except (RuntimeError, ValueError):  # ValueError: the Python reference (_refs.view), which meta tensors take
        pass                            # under the Python dispatcher, as inside Inductor's pre-grad passes
    try:
        shape = t.reshape(args[1]).shape  # the meta kernel's copy: the shape (-1 inferred)
    except Exception:  # a wrong shape: FakeTensorProp raises the user's error
        return None
    grad = torch.is_grad_enabled() and v.requires_grad
    return fake_type(mode, torch.empty(shape, dtype=t.dtype, device="meta", requires_grad=grad), v.device)


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


def _twin_arg(a, env: dict, twin_of, devices: set):
    """``a`` with each tensor-valued node replaced by its meta twin (devices seen added to ``devices``). A
    plain recursive function: a recursive closure is a reference cycle that keeps the whole environment
    alive until the next garbage collection."""
    if type(a) is Node:
        v = env[a]
        if isinstance(v, torch.Tensor):
            devices.add(v.device)
            return twin_of(a)
        return v
    if isinstance(a, (tuple, list)):
        return type(a)([_twin_arg(x, env, twin_of, devices) for x in a])
    if isinstance(a, dict):
        return {k: _twin_arg(x, env, twin_of, devices) for k, x in a.items()}
    if isinstance(a, Node):  # a Node subclass
        raise _NotFast
    return a


def _fast_node(n: Node, env: dict, twins: dict, twin_of, fake_type, mode):
    """Run ``n`` on meta twins of its inputs; wrap the result as a FakeTensor (or raise _NotFast)."""
    devices: set = set()
    try:
        args = [_twin_arg(a, env, twin_of, devices) for a in n.args]
        kwargs = {k: _twin_arg(a, env, twin_of, devices) for k, a in n.kwargs.items()} if n.kwargs else {}
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
