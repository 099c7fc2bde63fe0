"""Alias and mutation analysis of a Torch-IR or Aten-IR graph: which nodes must stay exactly as written.

* :func:`frozen_nodes`: every node that reads or writes a tensor mutated in place, or an alias of one (graph
  inputs may alias each other);
* :func:`output_alias_nodes`: the view chains of outputs that overlap in eager, so they keep eager's aliasing;
* :func:`layout_reader_nodes`: the view chains read by ``as_strided``, so it sees eager's storage and strides;
* :func:`hooked_nodes`: a tensor a gradient hook is registered on, and its readers, so they read that tensor;
  :func:`observed_owners`: kept nodes whose layout their kept views observe (lowering restores eager's);
* the storages eager shares where dynamo's meta does not (:func:`eager_storage_map`,
  :func:`eager_output_meta`: a dropout that draws nothing returns its input), and :func:`storage_id`, the
  storage identity of a FakeTensor, which lowering's output checks read too.

The translator (:mod:`optimus_bridge.translate`) leaves the nodes these functions name opaque.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import nullcontext as _nullcontext
from typing import Any

import torch
from torch.fx import GraphModule, Node

from optimus_bridge import vocab
from optimus_bridge.fx_meta import Unsupported, dropout_draws, is_static_tensor, meta_val
from optimus_bridge.effects import running_stats_written
from optimus_bridge.overlap import may_overlap


def _fresh_outside_vocab() -> frozenset:
    """Torch-IR ops outside the vocabulary whose result is always new storage (convolutions, norms,
    pooling, reductions, elementwise math, ``torch.Tensor`` methods of the same): the alias analysis does
    not join them with their inputs. Without them a mutated input, which may alias every other input, drew
    the whole of a BatchNorm network into its group (``num_batches_tracked.add_(1)``, then ``batch_norm``,
    ``conv2d``, ... each assumed to alias what it reads). In-place forms are mutations whatever this says."""
    import torch.nn.functional as F

    names = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
             "batch_norm", "instance_norm", "group_norm", "embedding", "embedding_bag", "max_pool1d",
             "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
             "adaptive_avg_pool2d", "adaptive_avg_pool3d", "gelu", "silu", "mish", "softplus", "elu",
             "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "softmax", "log_softmax",
             "cross_entropy", "mse_loss", "binary_cross_entropy_with_logits", "normalize"]
    fns = {getattr(F, n) for n in names if hasattr(F, n)} | {getattr(torch, n) for n in names if hasattr(torch, n)}
    math = ["exp", "log", "sqrt", "rsqrt", "pow", "neg", "abs", "sin", "cos", "erf", "sum", "mean", "amax",
            "amin", "softmax", "log_softmax", "where", "maximum", "minimum", "bitwise_and", "bitwise_or",
            "logical_and", "logical_or", "logical_not", "eq", "ne", "lt", "le", "gt", "ge", "cumsum", "sign"]
    fns |= {getattr(torch, n) for n in math}  # and the Tensor methods of these names (call_method)
    import operator

    fns |= {operator.neg, operator.pow, operator.mod, operator.floordiv, operator.and_, operator.or_,
            operator.xor, operator.invert, operator.eq, operator.ne, operator.lt, operator.le, operator.gt,
            operator.ge}
    return frozenset(fns) | frozenset(math)


_FRESH_FUNCTIONS = _fresh_outside_vocab()


def _returns_fresh(n: Node, voc) -> bool:
    """``n``'s result never shares storage with its inputs (for :func:`frozen_nodes`)."""
    if voc.op_name(n) in voc.FRESH_OPS:
        return True
    if n.op == "call_function":
        try:
            return n.target in _FRESH_FUNCTIONS
        except TypeError:  # unhashable target
            return False
    return n.op == "call_method" and n.target in _FRESH_FUNCTIONS


def frozen_nodes(gm: GraphModule, voc=vocab, inputs_may_alias: bool = True) -> set[Node]:
    """Nodes that must stay exactly as they are because a tensor they touch is mutated in place.

    The alias groups join a node with its tensor inputs unless its op is known to return fresh
    storage (cat, linear, tanh, ...); unknown ops are assumed to alias. Graph inputs (placeholders and
    ``get_attr`` tensors) may alias each other: two views of one tensor reach dynamo's graph as two
    placeholders, and dynamo's guards compare tensor identity, not storage (``check_no_aliasing``; the
    ``StorageOverlap`` guard is AOTAutograd's, dynamic shapes only), so a graph traced with distinct inputs
    is reused for overlapping ones. So when a group with a mutated member holds a graph input, every
    graph input that could share its storage (:func:`_inputs_may_share`) joins that group. A group with a
    mutated member is frozen, and so is every reader of a frozen node. ``voc`` is the op vocabulary of
    the graph's IR (:mod:`optimus_bridge.vocab` or :mod:`optimus_bridge.aten_vocab`).
    ``inputs_may_alias=False`` skips the joining of graph inputs: for AOTAutograd's functional graphs,
    whose inputs are distinct by AOTAutograd's own contract (inputs it saw overlap are one synthetic base;
    reads there never follow a write, which is a ``copy_`` epilogue).
    """
    nodes = list(gm.graph.nodes)
    mutated = [n for n in nodes if voc.is_mutation(n, gm)]
    if not mutated:
        return set()
    parent: dict[Node, Node] = {}

    def find(n: Node) -> Node:
        while parent.get(n, n) is not n:
            parent[n] = parent.get(parent[n], parent[n])
            n = parent[n]
        return n

    def union(a: Node, b: Node) -> None:
        ra, rb = find(a), find(b)
        if ra is not rb:
            parent[ra] = rb

    for n in nodes:
        if n.op in ("placeholder", "get_attr", "output") or _returns_fresh(n, voc):
            continue
        if not n.users and n not in mutated:
            # nobody reads its result and it writes nothing: it joins nothing (``ExportedProgram.module()``'s
            # ``_guards_fn(x, y)``, an unknown op of every input, would put them all in one group: a write into
            # one input would freeze every reader of the others)
            continue
        for a in n.all_input_nodes:
            union(a, n)
    # a training-mode batch / instance norm writes only its running statistics, and returns new storage: those
    # are what it makes bad, and its readers need not stay as they are (it is frozen as their reader)
    stats_only = {n: running_stats_written(n) for n in mutated}
    stats_only = {n: w for n, w in stats_only.items() if w is not None}
    bad = {n for n in mutated if n not in stats_only}
    for n in mutated:
        bad.update(stats_only.get(n) or n.all_input_nodes)
    devices = {n: _input_device(gm, n) for n in nodes if inputs_may_alias and n.op in ("placeholder", "get_attr")}
    inputs = [n for n, d in devices.items() if d is not None]
    bad_roots = {find(n) for n in bad}
    written = {devices[p] for p in inputs if find(p) in bad_roots}  # devices of inputs a mutation may reach
    for q in inputs:
        if any(_inputs_may_share(d, devices[q]) for d in written):
            union(q, next(iter(bad)))  # one group: a merged group is frozen whole, the same as several
    bad_roots = {find(n) for n in bad}
    frozen = {n for n in nodes if find(n) in bad_roots}
    frozen.update(n for n in mutated if n not in stats_only)
    readers = {u for n in frozen for u in n.users if u.op != "output"}
    return frozen | readers | set(stats_only)


def _input_device(gm: GraphModule, node: Node):
    """The device of graph input ``node`` (a placeholder or ``get_attr``), ``"?"`` when it may be a
    tensor on an unknown device, None when it is not a tensor (an int, a SymInt, a module)."""
    val = meta_val(node)
    if val is None and node.op == "get_attr":
        val = gm
        for atom in str(node.target).split("."):
            val = getattr(val, atom, None)
    if val is None:
        return "?"
    if isinstance(val, torch.Tensor):
        return val.device
    return None


def _inputs_may_share(d1, d2) -> bool:
    """Two graph inputs on devices ``d1`` and ``d2`` (from :func:`_input_device`) may share storage: a
    storage lives on one device, and views of it may have any dtype (``Tensor.view(dtype)``), shape or
    offset, so nothing but the device tells two inputs apart before the call."""
    return d1 == "?" or d2 == "?" or d1 == d2


def output_alias_nodes(gm: GraphModule, voc=vocab, visible: frozenset | None = None) -> set[Node]:
    """Nodes kept verbatim so that the graph's outputs alias each other and the inputs as eager's do.

    Each output's *view chain* is walked back through the storages of the FakeTensor meta
    (:func:`eager_storage_map`): from a node to its one tensor input of the same storage, until the node
    that owns the storage (a fresh result, or a graph input). Outputs that overlap in eager (``y[:3],
    y[1:]`` of ``y = cat([a, b])``, or ``y`` and ``y[:, 1:]``) could each get storage of their own from a
    rewrite (the first folds to ``a``); so their chains and their common owner (unless a graph input) are
    kept: they stay views of one tensor, and an in-place change of one still reaches the other.

    ``voc`` is the op vocabulary; ``visible`` the indices of the flat outputs the user sees (None: all). At
    Aten-IR too: AOTAutograd regenerates only the outputs that alias an input or an intermediate base; a
    ``non_alias`` or ``unsafe_view_alias`` output reaches the user as the graph returns it, so its overlap
    with another output is the graph's own. The forward graph's other outputs (tensors saved for backward:
    ``relu`` and ``alias(relu)``) are not the user's, and keeping their chains would freeze every op whose
    result is saved (:meth:`optimus_bridge.aten.AtenTranslator.visible_outputs`).
    """

    out = next((n for n in reversed(gm.graph.nodes) if n.op == "output"), None)
    if out is None:
        return set()
    outs: list[Node] = []
    torch.fx.node.map_arg(out.args[0], outs.append)
    if visible is not None:
        outs = [o for i, o in enumerate(outs) if i in visible]

    remap = eager_storage_map(gm.graph, voc)

    def chain(o: Node) -> list[Node]:
        return view_chain(o, remap)

    keep: set[Node] = set()
    by_storage: dict[int, list[Node]] = defaultdict(list)
    eager = dict(zip(outs, eager_output_meta(gm.graph, outs, voc)))  # layouts as eager's (dropout)
    for o in dict.fromkeys(outs):
        val = eager[o] if eager[o] is not None else meta_val(o)
        own = _storages(val, remap)
        if len(own) == 1 and isinstance(val, torch.Tensor):
            by_storage[next(iter(own))].append(o)
    for group in by_storage.values():
        for i, o in enumerate(group):
            if any(eager[o] is None or eager[k] is None or may_overlap(eager[o], eager[k]) for k in group[:i]):
                for m in (o, *group[:i]):
                    keep.update(m for m in chain(m) if m.op not in ("placeholder", "get_attr"))
    return keep


def view_chain(o: Node, remap: dict[int, int] | None = None) -> list[Node]:
    """``o`` and the nodes it views, walked back through the storages of the FakeTensor meta: from a node to its
    one tensor input of the same storage, until the node that owns the storage (a fresh result, or an input)."""
    nodes, n = [o], o
    own = _storages(meta_val(o), remap)
    while n.op not in ("placeholder", "get_attr"):
        src = [a for a in n.all_input_nodes if own & _storages(meta_val(a), remap)]
        if len(src) != 1:
            break
        n = src[0]
        nodes.append(n)
    return nodes


#: ops whose values depend on their input's storage, strides and storage offset, not only on its values:
#: ``as_strided`` reads the storage at explicit strides, ``as_strided_scatter`` writes a copy of it there;
#: ``view(dtype)`` of another element size needs the storage offset and strides divisible (a narrow of a wider
#: tensor may not be: lowering failed, and the whole graph fell back)
_LAYOUT_READERS = (torch.as_strided, torch.ops.aten.as_strided.default, torch.as_strided_scatter,
                   torch.ops.aten.as_strided_scatter.default, torch.ops.aten.view.dtype)
_LAYOUT_READER_METHODS = ("as_strided", "as_strided_scatter")


def _reads_layout(n: Node) -> bool:
    if n.op == "call_function":
        return n.target in _LAYOUT_READERS
    return n.op == "call_method" and (n.target in _LAYOUT_READER_METHODS or n.target == "view" and len(n.args) == 2
                                      and isinstance(n.args[1], torch.dtype))


def layout_reader_nodes(gm: GraphModule, voc=vocab) -> set[Node]:
    """Nodes kept verbatim so that an op that reads its input's storage at explicit strides (``as_strided``)
    sees eager's storage and layout: the input's view chain back to the node that owns the storage. A rewrite
    may compute an equal value in another layout (a narrow of a wider tensor: a batched tanh, a fused
    linear), where ``as_strided`` reads other elements (silently wrong values)."""
    keep: set[Node] = set()
    for chain in layout_reader_chains(gm, voc).values():
        keep.update(m for m in chain if m.op not in ("placeholder", "get_attr"))
    return keep


def registers_hook(n: Node) -> bool:
    """Whether ``n`` registers a gradient hook on its first argument: Dynamo's ``register_hook`` higher-order op
    (``tensor.register_hook(fn)`` inside a compiled region), or the method call."""
    if n.op == "call_method":
        return n.target == "register_hook"
    return n.op == "call_function" and getattr(n.target, "__name__", None) == "register_hook" \
        and getattr(n.target, "namespace", None) == "higher_order"


def hooked_nodes(gm: GraphModule) -> set[Node]:
    """Nodes kept verbatim for the gradient hooks the graph registers: each hooked tensor and every node that
    reads it. A hook fires with the gradient that reaches that tensor object through all its readers; a
    rewrite that made a reader compute from an equal value elsewhere (the linear of a split piece batched
    from a view of the whole input) would send its gradient past the hook (the gradient of
    ``xs[0].register_hook(lambda g: 2 * g)`` would come back undoubled). Readers of the op's own result (the same
    tensor) need nothing: it is opaque."""
    keep: set[Node] = set()
    for n in gm.graph.nodes:
        if registers_hook(n) and n.args and isinstance(n.args[0], Node):
            hooked = n.args[0]
            if hooked.op not in ("placeholder", "get_attr"):
                keep.add(hooked)
            keep.update(hooked.users)
    return keep


def layout_reader_chains(gm: GraphModule, voc=vocab) -> dict[Node, list[Node]]:
    """Each ``as_strided`` / ``as_strided_scatter`` node of ``gm`` -> the view chain of its input
    (:func:`view_chain`; its owner last)."""
    remap = eager_storage_map(gm.graph, voc)
    out = {}
    for n in gm.graph.nodes:
        if _reads_layout(n) and n.args and isinstance(n.args[0], Node):
            out[n] = view_chain(n.args[0], remap)
    return out


def eager_storage_map(graph: torch.fx.Graph, voc=vocab) -> dict[int, int]:
    """Storage identities of the FakeTensor meta that eager shares: ``{storage of a node: storage of the
    input eager returns}`` for each dropout that draws nothing (``F.dropout(x, training=False)``, or
    ``p=0``). Eager returns ``x`` itself there (ATen ``_dropout_impl``) where dynamo's meta has new
    storage, so an output ``dropout(x)`` (or a view of it) aliases the input ``x`` in eager. For
    :func:`storage_id` and lowering's output checks."""
    remap: dict[int, int] = {}
    for n in graph.nodes:
        if voc.op_name(n) == "dropout" and not dropout_draws(n) and n.all_input_nodes:
            own, src = storage_id(meta_val(n), remap), storage_id(meta_val(n.all_input_nodes[0]), remap)
            if own is not None and src is not None and own != src:
                remap[own] = src
    return remap


def eager_output_meta(graph: torch.fx.Graph, outs: list, voc=vocab) -> list:
    """The FakeTensor of each of ``outs`` (``graph``'s flat outputs) as eager has it: dynamo's meta,
    except that a view chain that starts at a dropout that draws nothing (:func:`eager_storage_map`) is
    replayed on the dropout's input, so the value has the input's storage and strides, as eager's
    (``dropout(b)[:, 1:]`` of a ``b`` with row stride 8 has row stride 8 in eager, 6 in dynamo's meta).
    None where an output is not a node or the replay fails (lowering then falls back)."""
    remap = eager_storage_map(graph, voc)
    if not remap:
        return [meta_val(o) if isinstance(o, Node) else None for o in outs]
    memo: dict[Node, Any] = {}

    def real(n: Node):
        if n in memo:
            return memo[n]
        val = meta_val(n)
        if not (_storages(val, remap) - _storages(val, None)):
            memo[n] = val  # nothing eager shares differently
        elif voc.op_name(n) == "dropout" and not dropout_draws(n):
            memo[n] = real(n.all_input_nodes[0])
        else:
            own = _storages(val, remap)
            src = [a for a in n.all_input_nodes if own & _storages(meta_val(a), remap)]
            if len(src) != 1 or n.op not in ("call_function", "call_method"):
                raise Unsupported(f"cannot replay {n.name}")
            base = real(src[0])
            args = torch.fx.node.map_arg(n.args, lambda a: base if a is src[0] else meta_val(a))
            kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: base if a is src[0] else meta_val(a))
            first = base if isinstance(base, torch.Tensor) else next(iter(base), None)
            mode = getattr(first, "fake_mode", None)  # run the view on FakeTensors in their own mode
            with mode if mode is not None else _nullcontext():
                if n.op == "call_function":
                    memo[n] = n.target(*args, **kwargs)
                else:
                    memo[n] = getattr(args[0], n.target)(*args[1:], **kwargs)
        return memo[n]

    vals = []
    for o in outs:
        try:
            vals.append(real(o) if isinstance(o, Node) else None)
        except Exception:  # any failure: no trustworthy meta for it
            vals.append(None)
    return vals


def storage_id(val, remap: dict[int, int] | None = None, *, empty: bool = False) -> int | None:
    """Identity of the storage behind a FakeTensor (views share it; :func:`eager_storage_map`'s ``remap``
    applied), or None for no tensor data (not a tensor, zero elements unless ``empty``, a subclass without
    storage). ``empty=True`` for output aliasing: a view of an empty input is still a view to autograd
    (it inherits ``requires_grad``), though no write through it can reach anything."""
    if not isinstance(val, torch.Tensor):
        return None
    try:
        if not empty and is_static_tensor(val) and val.numel() == 0:
            return None
        s = val.untyped_storage()._cdata
    except Exception:  # a tensor subclass without a storage: assume it aliases nothing
        return None
    return remap.get(s, s) if remap else s


def _storages(val, remap: dict[int, int] | None) -> set[int]:
    """:func:`storage_id` of a FakeTensor or of each one of a tuple of them."""
    vals = val if isinstance(val, (tuple, list)) else (val,)
    return {s for s in (storage_id(v, remap) for v in vals) if s is not None}



def observed_owners(gm: GraphModule, kept, voc=vocab) -> list[Node]:
    """Nodes of ``kept`` (copied verbatim by lowering) that own their storage in eager and whose layout a kept user
    observes: one that shares that storage (a view; ``reshape`` is one only for some layouts, so a rewrite of the
    owner's inputs into another layout made it a copy, and an in-place write through it no longer reached the
    owner), or reads it at explicit strides (``as_strided``). Lowering gives such an owner eager's layout."""
    remap = eager_storage_map(gm.graph, voc)
    out = []
    for n in gm.graph.nodes:
        if n not in kept or n.op not in ("call_function", "call_method", "call_module"):
            continue
        val = meta_val(n)
        own = _storages(val, remap)
        if not isinstance(val, torch.Tensor) or len(own) != 1:
            continue
        if any(own & _storages(meta_val(a), remap) for a in n.all_input_nodes):
            continue  # a view of its input, not the owner
        if any(u in kept and (own & _storages(meta_val(u), remap) or _reads_layout(u)) for u in n.users):
            out.append(n)
    return out
