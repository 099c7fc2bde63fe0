"""Output fix-ups of a lowered graph: its outputs checked against the original graph's, from the FakeTensors
of both, and copied where they differ from eager's.

An output that shares storage with an input or another output where eager's did not (a cat of every piece of
x folded to x) gets a copy (:func:`unalias_outputs`); an output whose strides differ from eager's gets a copy
with eager's strides (:func:`fix_strides`: a contiguous clone, or ``IRLevel.restride`` for other layouts: a
view into a cat that folded away keeps its gaps); outputs that became one node get a view each
(:func:`distinct_outputs`). Only layouts no copy can have (expanded, overlapping) fall back
(:class:`~optimus_bridge.lower_table.LoweringError`).
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import guard_or_false, guard_or_true

from optimus_bridge.aliasing import eager_output_meta, eager_storage_map, observed_owners, storage_id
from optimus_bridge.fx_meta import is_static_tensor, meta_val
from optimus_bridge.lower_table import IRLevel, LoweringError, restride_torch
from optimus_bridge.overlap import may_overlap, non_overlapping, static_layout


def _aliases(values: list, graph: Graph, remap: dict | None = None, empty: bool = True,
             memo: dict | None = None) -> list[set]:
    """Per output value: the inputs (``("in", target)``: placeholders and attributes of ``graph``) and earlier
    outputs (``("out", k)``) it shares storage with (``remap``: :func:`~optimus_bridge.translate.eager_storage_map`;
    ``empty``: tensors of no elements count, :func:`~optimus_bridge.translate.storage_id`). ``memo``: a dict
    shared by the calls of one check on graphs whose inputs do not change meanwhile, so each input's storage
    is read once (22k weights at 50k FX nodes; the lowered graph's inputs carry the original's FakeTensors)."""
    memo = {} if memo is None else memo
    key = (id(graph), empty, tuple(sorted(remap.items())) if remap else ())
    ins = memo.get(key)
    if ins is None:
        ins = memo[key] = {}
        for op in ("placeholder", "get_attr"):
            for n in graph.find_nodes(op=op, sort=False):
                s = _storage(meta_val(n), remap, empty, memo)
                if s is not None:
                    ins.setdefault(s, set()).add(("in", str(n.target)))
    outs = [storage_id(v, remap, empty=empty) for v in values]
    return [(ins.get(s, set()) | {("out", k) for k in range(i) if outs[k] == s}) if s is not None else set()
            for i, s in enumerate(outs)]


def _storage(val, remap: dict | None, empty: bool, memo: dict):
    """:func:`storage_id` of ``val``, its storage read once per ``memo`` (keyed by the object)."""
    got = memo.get(id(val))
    if got is None:
        raw, no_data = storage_id(val, empty=True), False
        if raw is not None:  # as storage_id(empty=False): None for a static tensor of no elements
            try:
                no_data = is_static_tensor(val) and val.numel() == 0
            except Exception:
                no_data = True
        got = memo[id(val)] = (val, raw, no_data)
    _, raw, no_data = got
    if raw is None or (no_data and not empty):
        return None
    return remap.get(raw, raw) if remap else raw


def unalias_outputs(graph: Graph, old_out: Node, level: IRLevel, visible: frozenset | None = None,
                    internal: frozenset = frozenset(), memo: dict | None = None) -> list[Node]:
    """Copy each output that shares storage with an input or another output where eager's does not (a cat
    of every piece of x folds to x itself, but eager returned a new tensor). The copy has eager's layout
    (:func:`_copy_like`). Aliasing is read from the FakeTensor meta of both graphs (views share storage).
    Returns the nodes added. ``visible``: the outputs whose overlap the user sees (None: all;
    :attr:`~optimus_bridge.translate.Translation.visible_outputs`); ``internal``: outputs only later nodes of
    the same program read, left as they are (:attr:`~optimus_bridge.translate.Translation.internal_outputs`).
    ``memo``: as for :func:`_aliases`.

    Raises:
        LoweringError: the output structure changed, or an output that eager returns as a view of an input
            is a new tensor here (a later in-place change of it would no longer reach the input), or two
            outputs that overlap in eager (one a view of the other) would not here.
    """
    new_out = next(n for n in reversed(graph.nodes) if n.op == "output")
    old, new = _flat_nodes(old_out.args[0]), _flat_nodes(new_out.args[0])
    if len(old) != len(new):
        raise LoweringError("output structure changed")
    old_vals = _eager_vals(old_out, old)
    new_vals = [meta_val(n) if isinstance(n, Node) else None for n in new]
    # eager's aliasing: the original graph's meta, where an eval-mode dropout is its input (as eager runs it)
    remap, memo = eager_storage_map(old_out.graph), ({} if memo is None else memo)
    eager = _aliases(old_vals, old_out.graph, remap, memo=memo)
    ours = _aliases(new_vals, graph, memo=memo)
    tensor_out = [i for i, n in enumerate(new)
                  if isinstance(old_vals[i], torch.Tensor) and isinstance(n, Node) and i not in internal]
    # a lost view of an input matters where a write through it could reach the input: not for empty tensors
    eager_data = _aliases(old_vals, old_out.graph, remap, empty=False, memo=memo)
    ours_data = _aliases(new_vals, graph, empty=False, memo=memo)
    for i in tensor_out:
        lost = {a for a in eager_data[i] - ours_data[i] if a[0] == "in"}
        if lost:
            raise LoweringError(f"output {i} is a view of {min(lost)[1]} in eager, a new tensor here")
    copy = _outputs_to_copy(tensor_out, old, eager, ours)
    added: list[Node] = []
    copied = {("out", i) for i in copy}  # fresh storage, which other outputs no longer share
    made: dict = {}  # (original output node, lowered node) -> its copy
    for i in sorted(copy):
        key = (old[i], new[i])
        if key not in made:  # eager returns one tensor twice: so must we (one copy)
            with graph.inserting_before(new_out):
                nodes = _copy_like(graph, new[i], old_vals[i], level)
            made[key] = nodes[-1]
            added.extend(nodes)
        replace_output_at(new_out, i, made[key])
    # every level: AOTAutograd regenerates only the outputs that alias an input or an intermediate; the
    # others (``non_alias``, ``unsafe_view_alias``) reach the user as the graph returns them
    for i in range(len(old)) if visible is None else sorted(visible):
        for k in sorted(a[1] for a in eager_data[i] if a[0] == "out" and (visible is None or a[1] in visible)):
            kept = ("out", k) in ours[i] and ("out", k) not in copied and ("out", i) not in copied
            if not kept and may_overlap(old_vals[k], old_vals[i]):
                # eager's output i is a view into output k (``y, y[:, 1:]``): two separate copies would
                # no longer see each other's in-place changes
                raise LoweringError(f"output {i} overlaps output {k} in eager; here they would not")
    return added


def _outputs_to_copy(outs: list[int], old: list, eager: list[set], ours: list[set]) -> set[int]:
    """Which outputs get a copy so that ours share storage only where eager's do (``eager``, ``ours``: per
    output, the inputs and earlier outputs it shares storage with, :func:`_aliases`). An output that shares
    with an input where eager's does not is copied. Of two outputs that share here but not in eager, the
    one that shares with fewer other outputs in eager is copied (ties: the later one), so that a group of
    outputs that overlap in eager keeps its storage and a lone output that a rewrite made a view of them
    (``stack([x])`` as ``x.unsqueeze``) gets the copy."""
    def eager_partners(i: int) -> int:
        return sum(1 for k in outs if k != i and old[k] is not old[i]
                   and (("out", k) in eager[i] or ("out", i) in eager[k]))

    copy = {i for i in outs if any(a[0] == "in" for a in ours[i] - eager[i])}
    considered = set(outs)
    for i in outs:
        for a in sorted(ours[i] - eager[i]):
            k = a[1]
            # an output not considered (a segment's internal output) may share anything: the copy goes to the
            # other one only if it needs one for itself (fuzz seed 905020: a view of an input was copied)
            if a[0] != "out" or k not in considered or i in copy or k in copy or old[k] is old[i]:
                continue
            copy.add(k if eager_partners(k) < eager_partners(i) else i)
    return copy


def _eager_vals(old_out: Node, old: list) -> list:
    """FakeTensors of the original graph's flat outputs ``old`` as eager has them
    (:func:`~optimus_bridge.translate.eager_output_meta`: an eval-mode dropout is its input).

    Raises:
        LoweringError: an output's eager layout could not be worked out.
    """
    vals = eager_output_meta(old_out.graph, old)
    for i, (o, v) in enumerate(zip(old, vals)):
        if v is None and isinstance(o, Node) and isinstance(meta_val(o), torch.Tensor):
            raise LoweringError(f"output {i}: eager's layout is unknown (a view of an eval-mode dropout)")
    return vals


def distinct_outputs(graph: Graph, old_out: Node, level: IRLevel) -> list[Node]:
    """Outputs that were different nodes but are now one node (``v.detach()`` and ``v`` of Aten-IR, where
    ``aten.alias`` is its input) get a view of their own: one tensor object returned twice lets a change of
    one (AOTAutograd detaches the non-differentiable output) reach the other, which then lost its
    gradient. Returns the nodes added."""
    if level.alias is None:
        return []
    new_out = next(n for n in reversed(graph.nodes) if n.op == "output")
    old, new = _flat_nodes(old_out.args[0]), _flat_nodes(new_out.args[0])
    first: dict = {}
    added = []
    for i, (o, n) in enumerate(zip(old, new)):
        if not isinstance(n, Node) or not isinstance(meta_val(n), torch.Tensor):
            continue
        j = first.setdefault(n, i)
        if j != i and old[j] is not o:
            with graph.inserting_before(new_out):
                a = level.alias(graph, n)
            replace_output_at(new_out, i, a)
            added.append(a)
    return added


def _flat_nodes(args) -> list:
    out: list = []
    torch.fx.node.map_aggregate(args, lambda a: out.append(a) or a)
    return out


def replace_output_at(out: Node, index: int, value: Node) -> None:
    """Make ``value`` the ``index``-th flat output of the output node ``out`` (its pytree kept)."""
    counter = iter(range(10**9))

    def swap(a):
        return value if next(counter) == index else a

    out.args = (torch.fx.node.map_aggregate(out.args[0], swap),)


def _observable_strides(t: torch.Tensor) -> tuple:
    """Strides of the dims of size > 1 (a size-1 dim's stride changes no address)."""
    return tuple(st for st, n in zip(t.stride(), t.shape) if guard_or_true(n != 1))  # unbacked size: observable


def _restridable(like: torch.Tensor, level: IRLevel) -> bool:
    return level.restride is not None and static_layout(like) and non_overlapping(like)


def _hint(n):
    """An int, or a backed SymInt's example value (None when it has none: an unbacked size)."""
    return n if type(n) is int else getattr(n.node, "hint", None)


def dense_order(like: torch.Tensor) -> list[int] | None:
    """The dims of ``like``, outermost first, when its layout is a permutation of a contiguous one (each
    stride of a dim of size > 1 the product of the sizes of the dims inside it: no gap, no overlap), for
    symbolic sizes too (decided without guards: ``statically_known_true``); else None. A symbolic batch makes
    a transposed output's layout symbolic, which ``restride`` cannot take (``x.t()`` of a new tensor: eager's
    strides ``(1, s0)``)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    sizes, strides = list(like.shape), list(like.stride())
    units = [d for d in range(len(sizes)) if statically_known_true(sizes[d] == 1)]
    rest = [d for d in range(len(sizes)) if d not in units]
    hints = [_hint(strides[d]) for d in rest]
    if any(h is None for h in hints) or len(set(hints)) != len(hints):
        return None
    order = [d for _, d in sorted(zip(hints, rest), reverse=True)]
    inner = 1
    for d in reversed(order):
        if not statically_known_true(strides[d] == inner):
            return None
        inner = inner * sizes[d]
    return units + order


def _copy_like(graph: Graph, value: Node, like: torch.Tensor, level: IRLevel) -> list[Node]:
    """Nodes computing a fresh tensor equal to ``value`` laid out like ``like`` (eager's output): a contiguous
    clone, or ``level.restride`` (Torch-IR: ``value.new_empty_strided(shape, strides).copy_(value)``) for any
    other non-overlapping layout (gaps included: a view into a larger buffer); a symbolic layout that permutes a
    contiguous one (:func:`dense_order`), a permuted contiguous clone permuted back. Other expanded or symbolic
    layouts, and levels without ``restride``, get a ``preserve_format`` clone (the caller checks the strides).
    Inserted at the graph's insert point; returns the new nodes, the result last."""
    if like.is_contiguous():
        return [level.clone(graph, value, torch.contiguous_format)]
    if not _restridable(like, level):
        order = dense_order(like)
        if order is None:
            return [level.clone(graph, value, torch.preserve_format)]
        # a permutation of a contiguous layout (symbolic sizes): permute, contiguous clone, permute back
        inverse = [order.index(d) for d in range(len(order))]
        moved = level.views["Permute"](graph, value, (order,))
        copied = level.clone(graph, moved, torch.contiguous_format)
        return [moved, copied, level.views["Permute"](graph, copied, (inverse,))]
    return level.restride(graph, value, tuple(like.shape), tuple(like.stride()))


def fix_strides(graph: Graph, old_out: Node, level: IRLevel, copies: frozenset = frozenset(),
                visible: frozenset | None = None, memo: dict | None = None) -> list[Node]:
    """Give each output eager's strides where ours differ (see :func:`_copy_like`), and a Torch-IR output that
    is a new node (not in ``copies``, the verbatim copies of original nodes) with size-1 dims eager's
    contiguous layout for sure. Returns the nodes added. ``visible``: the outputs the user sees (None: all;
    sharing storage with an output the user does not see, a tensor saved for backward, is not kept).
    ``memo``: as for :func:`_aliases`.

    Raises:
        LoweringError: an output changed shape or dtype, or its layout cannot be reproduced (eager's is
            expanded or overlapping, or symbolic other than a permuted contiguous layout, or the level has no
            ``restride``, or the output shares storage with an input or another output in eager, which a copy
            would lose).
    """
    new_out = next(n for n in reversed(graph.nodes) if n.op == "output")
    old, new = _flat_nodes(old_out.args[0]), _flat_nodes(new_out.args[0])
    added = []
    made: dict = {}  # (original output node, lowered node) -> its copy
    old_vals = _eager_vals(old_out, old)
    eager = _aliases(old_vals, old_out.graph, eager_storage_map(old_out.graph), memo=memo)
    # storage shared with an input, or with another output that overlaps this one (two disjoint slices of one
    # tensor share storage too, but no write through one reaches the other: a copy of one loses nothing)
    # (and only between outputs the user sees: a tensor saved for backward is not the user's, ``visible``)
    shares = [{a for a in eager[i] if a[0] == "in" or (
        old[a[1]] is not old[i] and (visible is None or i in visible and a[1] in visible) and (
            old_vals[i] is None or old_vals[a[1]] is None or may_overlap(old_vals[i], old_vals[a[1]])))}
        for i in range(len(old))]
    for i in range(len(old)):
        for a in list(shares[i]):
            if a[0] == "out":
                shares[a[1]].add(("out", i))
    for i, (o, n) in enumerate(zip(old, new)):
        # None outputs (a backward graph's gradient of an input that needs none) have no meta
        ov = old_vals[i]
        nv = meta_val(n) if isinstance(n, Node) else None
        if not isinstance(ov, torch.Tensor) or not isinstance(nv, torch.Tensor):
            continue
        if tuple(ov.shape) != tuple(nv.shape) or ov.dtype != nv.dtype:
            raise LoweringError(f"output {i} changed shape or dtype: {tuple(ov.shape)} {ov.dtype} -> "
                                f"{tuple(nv.shape)} {nv.dtype}")
        # guard_or_*: a data-dependent (unbacked) size, e.g. after nonzero, is never guarded on (it raised)
        if guard_or_true(ov.numel() > 1) and _observable_strides(ov) != _observable_strides(nv):
            if not ov.is_contiguous() and not _restridable(ov, level) and dense_order(ov) is None:
                raise LoweringError(f"output {i} strides {nv.stride()} differ from eager's {ov.stride()}")
            if shares[i]:  # a copy would no longer share storage with them (a view of an input, y and y[1:])
                raise LoweringError(f"output {i} strides {nv.stride()} differ from eager's {ov.stride()}, and it "
                                    f"shares storage with {min(shares[i])} in eager")
            if (o, n) in made:  # eager returns this one tensor twice: so must we (one copy)
                replace_output_at(new_out, i, made[(o, n)])
                continue
            with graph.inserting_before(new_out):
                nodes = _copy_like(graph, n, ov, level)
            replace_output_at(new_out, i, nodes[-1])
            made[(o, n)] = nodes[-1]
            added.extend(nodes)
        elif (level.restride is restride_torch and n not in copies and n.op in ("call_function", "call_method")
              and guard_or_false(ov.numel() > 1) and any(guard_or_false(d == 1) for d in ov.shape)
              and static_layout(ov) and ov.is_contiguous() and not shares[i]):
            # size-1 dims: FakeTensor's Python view references pick other strides for them than the C++
            # kernels, and cat/stack/clone follow the memory format those strides suggest, so the real
            # layout can differ from the meta that says it matches; ``contiguous()`` is eager's layout for
            # sure and returns the tensor itself when it is already contiguous (fuzz seed 803065)
            with graph.inserting_before(new_out):
                c = graph.call_method("contiguous", (n,))
            replace_output_at(new_out, i, c)
            added.append(c)
    return added



def fix_kept_layouts(graph: Graph, original: torch.fx.GraphModule, env: dict, level: IRLevel) -> bool:
    """Give each kept owner of a storage whose layout a kept view or ``as_strided`` observes
    (:func:`~optimus_bridge.aliasing.observed_owners`) eager's layout. The owner is copied verbatim, but its
    inputs may have been rewritten into another layout, which an elementwise owner follows (``x.t() * 3`` where
    eager's input was a contiguous cat): then ``reshape`` copies where eager's viewed (an in-place write through
    it no longer reached the owner) and ``as_strided`` reads other elements. Such an owner gets a copy laid out
    as eager's (a storage of the same elements, as eager's own), which all its users read. ``env``: original
    node -> its copy. Returns whether it added a copy (the caller propagates the meta again).

    Raises:
        LoweringError: eager's layout of such an owner is one no copy can have.
    """
    changed = False
    for owner in observed_owners(original, env):
        new = env[owner]
        ov, nv = meta_val(owner), meta_val(new)
        if not isinstance(nv, torch.Tensor) or (
                tuple(ov.stride()) == tuple(nv.stride()) and ov.storage_offset() == nv.storage_offset()):
            continue
        if not (ov.is_contiguous() or _restridable(ov, level) or dense_order(ov) is not None):
            raise LoweringError(f"{owner.name}'s layout is observed by a kept view and changed")
        with graph.inserting_after(new):
            nodes = _copy_like(graph, new, ov, level)
        new.replace_all_uses_with(nodes[-1], delete_user_cb=lambda u: u not in nodes)
        changed = True
    return changed
