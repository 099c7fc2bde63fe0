"""FX (Torch-IR) -> e-graph terms.

Each FX node becomes at most one term, shared by all its users (a DAG, never expanded as a tree). The
translator emits integer rows, one relation per constructor (``NarrowIn(id, x, d, s, l, n)``,
``ConsIn(list, d, elem, rest)``, ...), where every term is named by an integer handle ``(NodeOf id)``.
:class:`optimus_eq.egraph.EGraph` loads the rows with egglog's ``input`` command and one pass of the
``load`` rules of :mod:`optimus_eq.terms` builds the terms in bulk: about 0.3 s for 100k terms, where
one ``let`` per node, or one rule of 100k lets, takes tens of seconds (../shared/EGGLOG_NOTES.md).

Canonical forms (the ``normalization_pass``): split / chunk outputs and basic slices are
``Narrow(x, d, start, length, n)``, unbind outputs and integer indices are ``Select(x, d, i, n)``,
``stack`` is ``Cat`` of ``Unsqueeze``, every view-like reshape is ``Reshape(x, static_shape)``; dims are
normalized to be non-negative, sizes come from FakeTensor meta.

Symbolic sizes (a ``SymInt`` in the meta: the batch dim of a ``dynamic=True`` graph) become tokens of
:mod:`optimus_eq.symbolic`, one per expression; what the rules compute with must be static: the size of a
split, narrowed or indexed dim and the split sizes, the sizes of cat inputs along the cat dim. A node that
needs a symbolic size there, or whose size expression lowering could not rebuild from the graph's inputs
(:meth:`Translator._size`), stays opaque.

Left exactly as they are (opaque, their FX node is copied at lowering): ops outside the vocabulary,
nodes whose dims or sizes are not plain ints, and every node that
reads or writes a tensor that is mutated in place (or an alias of it; graph inputs may alias each other,
:func:`frozen_nodes`), so no rewrite changes what a mutation sees, the view chains of outputs that
overlap in eager (:func:`output_alias_nodes`), and every node from the first to the last global-state
change (``no_grad``, autocast, inference mode), so no op moves into or out of such a region or merges
across it; values computed before the region are emitted before it (``Translation.barriers``).
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import nullcontext as _nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx import GraphModule, Node

from optimus_bridge import vocab
from optimus_eq.recipe import Recipe, Slot, SymSize, einsum_operands  # SymSize: lower.py imports it from here
from optimus_eq.symbolic import SizeTable
from optimus_eq.terms import MAX_RANK  # longest shape the rows can carry; longer ones stay opaque


#: ``GraphModule.meta`` key of :meth:`Translator.visible_outputs` for graphs whose outputs are not all the
#: user's (the segments of :mod:`optimus_bridge.regions`)
VISIBLE_OUTPUTS = "optimus_eq_visible_outputs"


class Unsupported(Exception):
    """Raised inside a per-node translator: the node stays opaque."""


@dataclass
class Translation:
    """The e-graph insertion rows and the maps lowering needs.

    Attributes:
        gm: the input GraphModule.
        rows: relation name (``"NarrowIn"``, ``"ConsIn"``, ...) -> integer rows that insert the graph.
        node_id: FX node -> the handle id of its term, ``(NodeOf id)`` (tensor-valued nodes only).
        pieces: split/chunk/unbind node -> handle ids of its outputs.
        kept: nodes copied verbatim at lowering (opaque ops, non-tensor values they need, mutations).
        keys: op key string -> the integer that stands for it in the e-graph (interned).
        opaque_keys: opaque key id -> the FX node it stands for.
        recipes: pure op key id -> :class:`Recipe`.
        roots: nodes whose terms must be extracted (graph outputs and opaque terms).
        normalized: how many nodes were rewritten to a canonical form (normalization_pass firings).
        frozen: nodes left opaque because of in-place mutation or a global-state region.
        barriers: first global-state change -> term nodes computed before it and used after it.
        symbolic: nodes left opaque because of symbolic sizes.
        sizes: the tokens of symbolic sizes (:class:`optimus_eq.symbolic.SizeTable`: token <-> sympy
            expression).
        size_sources: free symbol -> where lowering reads it: ``("node", placeholder)`` for a SymInt input,
            ``("size", placeholder, dim)`` for a tensor input's size.
        types: pure op key id -> ``(((dtype, device) of each tensor input), (dtype, device) of the output)``
            as strings; part of the key, so fp32 and bf16 ops never share a key (horizontal fusion groups
            by it).
        visible_outputs: indices of the flat outputs whose aliasing the user sees, or None for all
            (:meth:`Translator.visible_outputs`).
        internal_outputs: indices of the flat outputs that only later nodes of the same program read (the
            outputs of a segment between global-state switches that do not alias the graph's outputs,
            :mod:`optimus_bridge.regions`): they may share storage where eager's do not.
    """

    gm: GraphModule
    rows: dict[str, list[tuple]] = field(default_factory=lambda: defaultdict(list))
    node_id: dict[Node, int] = field(default_factory=dict)
    pieces: dict[Node, list[int]] = field(default_factory=dict)
    kept: list[Node] = field(default_factory=list)
    keys: dict[str, int] = field(default_factory=dict)
    opaque_keys: dict[int, Node] = field(default_factory=dict)
    recipes: dict[int, Recipe] = field(default_factory=dict)
    roots: list[Node] = field(default_factory=list)
    normalized: int = 0
    frozen: set[Node] = field(default_factory=set)
    barriers: dict[Node, list[Node]] = field(default_factory=dict)
    symbolic: int = 0
    types: dict[int, tuple] = field(default_factory=dict)
    visible_outputs: frozenset | None = None
    internal_outputs: frozenset = frozenset()
    sizes: SizeTable = field(default_factory=SizeTable)
    size_sources: dict = field(default_factory=dict)


# -- meta helpers --------------------------------------------------------------------------------

def meta_val(node: Node):
    """The FakeTensor (or tuple of them) dynamo or FakeTensorProp stored on ``node``."""
    val = node.meta.get("val", None)
    if val is None:
        val = node.meta.get("example_value", None)
    return val


def is_static_tensor(val) -> bool:
    return isinstance(val, torch.Tensor) and all(isinstance(s, int) for s in val.shape)


def _norm_dim(dim, rank: int) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise Unsupported(f"dim {dim!r} is not an int")
    if not -rank <= dim < max(rank, 1):
        raise Unsupported(f"dim {dim} out of range for rank {rank}")
    return dim % rank if rank else 0


def _inputs(node: Node) -> list:
    """Positional inputs with ``self`` first for both ``torch.f(x, ...)`` and ``x.f(...)`` forms."""
    return list(node.args)


def _arg(node: Node, pos: int, name: str, default=None):
    args = node.args
    if len(args) > pos:
        return args[pos]
    return node.kwargs.get(name, default)


def dropout_draws(node: Node) -> bool:
    """True when a ``dropout`` node (``F.dropout(x, p, training)`` or ``torch.dropout(x, p, train)``) draws
    a random mask and so returns new storage: training mode and ``p != 0``. Otherwise eager returns its
    input unchanged (ATen ``_dropout_impl``), which translation treats as the identity."""
    p = _arg(node, 1, "p", 0.5)
    training = _arg(node, 2, "train" if node.target is torch.dropout else "training", True)
    return training is not False and p != 0


# -- alias and mutation analysis ----------------------------------------------------------------

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
        for a in n.all_input_nodes:
            union(a, n)
    bad = set(mutated)
    for n in mutated:
        bad.update(n.all_input_nodes)
    devices = {n: _input_device(gm, n) for n in nodes if inputs_may_alias and n.op in ("placeholder", "get_attr")}
    inputs = [n for n, d in devices.items() if d is not None]
    bad_roots = {find(n) for n in bad}
    written = {devices[p] for p in inputs if find(p) in bad_roots}  # devices of inputs a mutation may reach
    for q in inputs:
        if any(_inputs_may_share(d, devices[q]) for d in written):
            union(q, next(iter(bad)))  # one group: a merged group is frozen whole, the same as several
    bad_roots = {find(n) for n in bad}
    frozen = {n for n in nodes if find(n) in bad_roots}
    frozen.update(mutated)
    readers = {u for n in frozen for u in n.users if u.op != "output"}
    return frozen | readers


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
    from optimus_bridge.lower import _may_overlap  # lower imports this module

    out = next((n for n in reversed(gm.graph.nodes) if n.op == "output"), None)
    if out is None:
        return set()
    outs: list[Node] = []
    torch.fx.node.map_arg(out.args[0], outs.append)
    if visible is not None:
        outs = [o for i, o in enumerate(outs) if i in visible]

    remap = eager_storage_map(gm.graph, voc)

    def chain(o: Node) -> list[Node]:
        nodes, n = [o], o
        own = _storages(meta_val(o), remap)
        while n.op not in ("placeholder", "get_attr"):
            src = [a for a in n.all_input_nodes if own & _storages(meta_val(a), remap)]
            if len(src) != 1:
                break
            n = src[0]
            nodes.append(n)
        return nodes

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
            if any(eager[o] is None or eager[k] is None or _may_overlap(eager[o], eager[k]) for k in group[:i]):
                for m in (o, *group[:i]):
                    keep.update(m for m in chain(m) if m.op not in ("placeholder", "get_attr"))
    return keep


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


# -- the translator ------------------------------------------------------------------------------

class Translator:
    """Builds a :class:`Translation` for one Torch-IR GraphModule (see module docstring).

    ``vocab`` is the op vocabulary; :class:`optimus_bridge.aten.AtenTranslator` swaps in Aten-IR's.
    """

    vocab = vocab
    #: graph inputs may share storage (dynamo's Torch-IR graphs; see :func:`frozen_nodes`)
    inputs_may_alias = True
    #: keep the nodes that give the outputs eager's aliasing (:func:`output_alias_nodes`)
    keeps_output_aliasing = True
    #: under ``no_grad``, keep the views of tensors that require grad (:meth:`_no_grad_views`)
    keeps_no_grad_views = True

    def visible_outputs(self) -> frozenset | None:
        """Indices of the flat outputs whose aliasing among each other and with the inputs the user sees,
        or None for all of them (a dynamo graph's outputs are the user's; a segment of one between
        global-state switches says which of its outputs alias the graph's, :mod:`optimus_bridge.regions`)."""
        return self.gm.meta.get(VISIBLE_OUTPUTS)

    def __init__(self, gm: GraphModule) -> None:
        self.gm = gm
        self.t = Translation(gm=gm)
        self.rows = self.t.rows
        self._terms = 0
        self._lists = 1  # list 0 is the empty list
        self._args = 1   # argument list 0 is the empty list
        self._vecs: dict[tuple, int] = {}
        self.rows["NilIn"].append((0,))
        self.rows["ANilIn"].append((0,))
        self._deps: dict[Node, list[int]] = {}  # kept non-tensor node -> terms it depends on
        self._size_memo: dict = {}  # a SymInt's expression -> its token, or why it has none
        self._find_size_sources()

    # -- symbolic sizes (optimus_eq.symbolic) ---------------------------------------------------------
    def _find_size_sources(self) -> None:
        """Where each free symbol of the inputs can be read at run time: a SymInt placeholder (Dynamo's
        ``s77``), else a size of a tensor placeholder."""
        sources = self.t.size_sources
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for n in placeholders:
            v = meta_val(n)
            if isinstance(v, torch.SymInt):
                e = _sym_expr(v)
                if e is not None and e.is_Symbol:
                    sources.setdefault(e, ("node", n))
        for n in placeholders:
            v = meta_val(n)
            if isinstance(v, torch.Tensor):
                for d, size in enumerate(v.shape):
                    e = _sym_expr(size) if isinstance(size, torch.SymInt) else None
                    if e is not None and e.is_Symbol:
                        sources.setdefault(e, ("size", n, d))

    def _size(self, s) -> int:
        """An e-graph size: the int, or the token of a symbolic size (Unsupported when it has no hint,
        or lowering could not rebuild it from the sources)."""
        if isinstance(s, int):
            return s
        if not isinstance(s, torch.SymInt):
            raise Unsupported(f"size {s!r}")
        c = s.node.maybe_as_int()
        if c is not None:
            return int(c)
        raw = s.node.expr
        got = self._size_memo.get(raw)
        if got is None:
            e = _sym_expr(s)
            hint = s.node.hint
            if e is None or hint is None:
                got = "a size without a hint (data-dependent)"
            elif not _buildable(e, self.t.size_sources):
                got = f"symbolic size {e} not readable from the graph's inputs"
            else:
                got = self.t.sizes.token(e, int(hint))
            self._size_memo[raw] = got
        if isinstance(got, str):
            raise Unsupported(got)
        return got

    def _shape(self, sizes) -> tuple:
        """:meth:`_size` of each entry of a shape (or stride) tuple."""
        return tuple(self._size(s) for s in sizes)

    def _shaped(self, val) -> bool:
        """``val`` is a tensor whose sizes all have e-graph sizes (static, or symbolic tokens)."""
        if not isinstance(val, torch.Tensor):
            return False
        try:
            self._shape(val.shape)
        except Unsupported:
            return False
        return True

    def _static_size(self, s) -> int:
        """A size the rules compute with (a split dim, a cat dim): Unsupported unless it is static."""
        v = self._size(s)
        if v < 0:
            raise Unsupported("a symbolic size where the rules need a static one")
        return v

    def _key(self, text: str) -> int:
        return self.t.keys.setdefault(text, len(self.t.keys))

    def _new(self, relation: str, *cols) -> int:
        """A new term ``(NodeOf id)`` built by one row of ``relation``."""
        tid = self._terms
        self._terms += 1
        self.rows[relation].append((tid, *cols))
        return tid

    def _vec(self, values) -> int:
        values = tuple(int(v) for v in values)
        if len(values) > MAX_RANK:
            raise Unsupported(f"rank {len(values)} > {MAX_RANK}")
        vid = self._vecs.get(values)
        if vid is None:
            vid = self._vecs[values] = len(self._vecs)
            self.rows[f"Vec{len(values)}In"].append((vid, *values))
        return vid

    def _list(self, dim: int, elems: list[int]) -> int:
        rest = 0
        for e in reversed(elems):
            lid, self._lists = self._lists, self._lists + 1
            self.rows["ConsIn"].append((lid, dim, e, rest))
            rest = lid
        return rest

    def _arglist(self, elems: list[int]) -> int:
        rest = 0
        for e in reversed(elems):
            lid, self._args = self._args, self._args + 1
            self.rows["AConsIn"].append((lid, e, rest))
            rest = lid
        return rest

    def _bind(self, node: Node, tid: int, val) -> int:
        """Record term ``tid`` as the value of ``node``, with its static shape."""
        self.t.node_id[node] = tid
        self.rows["ShapeIn"].append((tid, self._vec(self._shape(val.shape))))
        return tid

    def run(self) -> Translation:
        t = self.t
        t.frozen = frozen_nodes(self.gm, self.vocab, self.inputs_may_alias) | self._global_state_region()
        if self.keeps_no_grad_views and not torch.is_grad_enabled():
            t.frozen |= self._no_grad_views()
        t.visible_outputs = self.visible_outputs()
        if VISIBLE_OUTPUTS in self.gm.meta:  # a segment: its other outputs are read by later nodes only
            out = next(n for n in reversed(self.gm.graph.nodes) if n.op == "output")
            flat: list = []
            torch.fx.node.map_aggregate(out.args[0], flat.append)
            t.internal_outputs = frozenset(range(len(flat))) - t.visible_outputs
        if self.keeps_output_aliasing:
            t.frozen |= output_alias_nodes(self.gm, self.vocab, t.visible_outputs)
        for node in self.gm.graph.nodes:
            if node.op == "output":
                self._output(node)
                continue
            val = meta_val(node)
            if node in t.frozen or node.op not in ("call_function", "call_method"):
                self._opaque(node, val)
                continue
            name = self.vocab.op_name(node)
            if name is None:
                self._opaque(node, val)
                continue
            try:
                if name in ("split", "chunk", "unbind"):
                    self._split(node, name, val)
                elif self._shaped(val):
                    self._bind(node, self._tensor_op(node, name, val), val)
                else:
                    raise Unsupported("not a tensor with static shape")
                if name not in self.vocab.APPLY_OPS and name not in self.vocab.UNARY_OPS | self.vocab.ARITH_OPS:
                    t.normalized += 1
            except (Unsupported, IndexError, TypeError, ValueError, KeyError):
                # a spelling this translator does not know: the node stays exactly as it was
                if not is_static_tensor(val) and isinstance(val, torch.Tensor):
                    t.symbolic += 1  # counted as before: a symbolic node left opaque
                self._opaque(node, val)
        # lowering emits the barriers' live values before the region (a value computed before a global-state
        # change stays before it): they must be extracted, even where their readers after the region were
        # rewritten not to need them (relu pieces of a split whose cat after an autocast region folded)
        t.roots.extend(n for live in t.barriers.values() for n in live if n in t.node_id)
        return t

    def _no_grad_views(self) -> set[Node]:
        """Computed nodes whose value requires grad though the graph runs under ``no_grad`` (a segment of
        :mod:`optimus_bridge.regions`, or a graph compiled under ``torch.no_grad()``): only views of tensors
        that require grad do (fresh results do not). Such a view requires grad but has no ``grad_fn``, so
        no gradient flows through it to its base; folding ``x.view(x.shape)`` to ``x`` would make one flow
        (breaker: ``u * x`` with ``u`` viewed under no_grad got the gradient ``2x``). They stay as written."""
        keep = set()
        for n in self.gm.graph.nodes:
            if n.op in ("call_function", "call_method", "call_module"):
                val = meta_val(n)
                vals = val if isinstance(val, (tuple, list)) else (val,)
                if any(isinstance(v, torch.Tensor) and v.requires_grad for v in vals):
                    keep.add(n)
        return keep

    def _global_state_region(self) -> set[Node]:
        """Nodes from the first to the last global-state change, which all stay as they are."""
        nodes = list(self.gm.graph.nodes)
        marks = [i for i, n in enumerate(nodes) if self.vocab.changes_global_state(n)]
        if not marks:
            return set()
        first, last = marks[0], marks[-1]
        pos = {n: i for i, n in enumerate(nodes)}
        self.t.barriers[nodes[first]] = [
            n for n in nodes[:first] if any(pos[u] > first for u in n.users)
        ]
        return set(nodes[first:last + 1])

    # the term of an input node, or Unsupported
    def _term(self, a) -> int:
        if isinstance(a, Node) and a in self.t.node_id:
            return self.t.node_id[a]
        raise Unsupported(f"input {a!r} is not a translated tensor")

    def _opaque(self, node: Node, val) -> None:
        """Keep ``node`` verbatim; if it is a tensor, it becomes an opaque term (forced at extraction)."""
        t = self.t
        deps: list[int] = []
        for a in node.all_input_nodes:
            if a in t.node_id:
                deps.append(t.node_id[a])
            elif a in t.pieces:
                deps.extend(t.pieces[a])
                if a not in t.kept:  # the tuple itself is needed: copy the split verbatim too
                    self._keep_tuple(a)
            else:
                deps.extend(self._deps.get(a, []))
        deps = list(dict.fromkeys(deps))
        t.kept.append(node)  # after the tuples it reads, which _keep_tuple appended above
        if isinstance(val, torch.Tensor) and node.op != "output":
            key = self._key(f"opaque:{node.name}")
            t.opaque_keys[key] = node
            if deps:
                tid = self._new("ApplyIn", key, self._arglist(deps))
            else:
                tid = self._new("LeafIn", key)
            if self._shaped(val) and val.dim() <= MAX_RANK:
                self._bind(node, tid, val)
            else:
                t.node_id[node] = tid
            t.roots.append(node)
        else:
            self._deps[node] = deps
            # copied verbatim, but no forced e-node reads its tensor inputs: extract them as roots (a tuple
            # ``(relu(p[0]),) + p[1:]`` returned as an output had no e-node chosen for relu's class)
            t.roots.extend(a for a in node.all_input_nodes if a in t.node_id)

    def _keep_tuple(self, node: Node) -> None:
        """A split/unbind tuple used whole by an opaque op is copied verbatim (its pieces stay terms); the
        tensor it splits is extracted as a root, since lowering copies the split with it."""
        self.t.kept.append(node)
        self._deps[node] = [self.t.node_id[a] for a in node.all_input_nodes if a in self.t.node_id]
        self.t.roots.extend(a for a in node.all_input_nodes if a in self.t.node_id)

    def _output(self, node: Node) -> None:
        t = self.t
        for a in node.all_input_nodes:
            if a in t.node_id:
                t.roots.append(a)
            elif a in t.pieces and a not in t.kept:
                self._keep_tuple(a)

    # -- split / chunk / unbind: a tuple of pieces ----------------------------------------------
    def _split(self, node: Node, name: str, val) -> None:
        kw = node.kwargs
        x = node.args[0] if node.args else kw.get("input", kw.get("self", kw.get("tensor")))  # torch.split(tensor=x)
        xv = self._term(x)
        x_val = meta_val(x)
        if not self._shaped(x_val) or not isinstance(val, (tuple, list)):
            raise Unsupported("split of a tensor without known shape")
        if not all(self._shaped(p) for p in val):
            raise Unsupported("split outputs without known shape")
        rank = x_val.dim()
        default_dim = 0
        dim = _norm_dim(_arg(node, 2 if name != "unbind" else 1, "dim", default_dim), rank)
        n = self._static_size(x_val.shape[dim])
        if name != "unbind":
            size_arg = _arg(node, 1, "split_size_or_sections" if name == "split" else "chunks")
            if size_arg is None:
                size_arg = node.kwargs.get("split_size", node.kwargs.get("split_sizes"))
            # a SymInt argument whose value Dynamo specialized (``x.size(2)`` of a static dim) is an int
            items = size_arg if isinstance(size_arg, (list, tuple)) else [size_arg]
            if any(not isinstance(s, int) and _concrete(s) is None for s in items):
                raise Unsupported("split sizes are not plain ints")
        vars_: list[int] = []
        start = 0
        for p in val:
            if name == "unbind":
                vars_.append(self._new("SelectIn", xv, dim, len(vars_), n))
            else:
                length = self._static_size(p.shape[dim])
                vars_.append(self._new("NarrowIn", xv, dim, start, length, n))
                start += length
        if name != "unbind" and start != n:
            raise Unsupported("split sections do not cover the tensor")
        self.t.pieces[node] = vars_

    # -- ops with one tensor result -------------------------------------------------------------
    def _tensor_op(self, node: Node, name: str, val) -> int:
        args = node.args
        if name == "getitem":
            return self._getitem(node, val)
        if name == "einsum":  # einsum(equation, a, b) or einsum(equation, [a, b]): a pure op of two tensors
            _, operands = einsum_operands(args)
            if node.kwargs or len(operands) != 2 or not all(isinstance(a, Node) for a in operands):
                raise Unsupported("einsum with other than two tensor operands")
            return self._pure(node, name, val)
        x = args[0] if args else None
        if name in ("cat", "stack"):
            return self._cat(node, name, val)
        xv = self._term(x)
        x_val = meta_val(x)
        if not self._shaped(x_val):
            raise Unsupported("input without known shape")
        if name not in self.vocab.FRESH_OPS and (val.dtype != x_val.dtype or val.device != x_val.device):
            raise Unsupported("a view that changes dtype or device (x.view(torch.int32))")
        rank = x_val.dim()
        if name == "narrow":
            dim = _norm_dim(_arg(node, 1, "dim"), rank)
            start, length = _arg(node, 2, "start"), _arg(node, 3, "length")
            if not isinstance(start, int) or not isinstance(length, int):
                raise Unsupported("narrow bounds are not ints")
            n = self._static_size(x_val.shape[dim])
            start = start % n if start < 0 else start
            return self._new("NarrowIn", xv, dim, start, length, n)
        if name == "unsqueeze":
            dim = _norm_dim(_arg(node, 1, "dim"), rank + 1)
            return self._new("UnsqueezeIn", xv, dim)
        if name in self.vocab.RESHAPE_OPS:
            shape = self._shape(val.shape)
            if shape == self._shape(x_val.shape):
                return xv
            return self._new("ReshapeIn", xv, self._vec(shape))
        if name in ("permute", "transpose", "movedim", "t"):
            perm = self._perm(node, name, rank)
            if perm == list(range(rank)):
                return xv
            return self._new("PermuteIn", xv, self._vec(perm))
        if name == "contiguous":
            if _arg(node, 1, "memory_format", torch.contiguous_format) is not torch.contiguous_format:
                raise Unsupported("contiguous with a memory format")
            return xv
        if name == "dropout":
            if not dropout_draws(node):
                return xv
            if _fallback_random():  # the user wants eager's random stream
                raise Unsupported("dropout in training mode with fallback_random")
            # random: a term with a key of its own (never merged with another dropout), which
            # batch_dropout may fuse (docs/DESIGN.md, "Horizontal fusion": random streams)
            return self._pure(node, name, val, unique=True)
        if name in self.vocab.UNARY_OPS or name in self.vocab.ARITH_OPS or name in self.vocab.APPLY_OPS:
            return self._pure(node, name, val)
        raise Unsupported(name)

    def _perm(self, node: Node, name: str, rank: int) -> list[int]:
        if name == "t":
            return list(range(rank))[::-1] if rank == 2 else list(range(rank))
        if name == "permute":
            dims = node.args[1:] if node.op == "call_method" else (_arg(node, 1, "dims"),)
            if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
                dims = dims[0]
            if not dims and "dims" in node.kwargs:
                dims = node.kwargs["dims"]
            perm = [_norm_dim(d, rank) for d in dims]
            if sorted(perm) != list(range(rank)):
                raise Unsupported("not a permutation")
            return perm
        if name == "transpose":
            d0, d1 = _norm_dim(_arg(node, 1, "dim0"), rank), _norm_dim(_arg(node, 2, "dim1"), rank)
            perm = list(range(rank))
            perm[d0], perm[d1] = perm[d1], perm[d0]
            return perm
        src, dst = _arg(node, 1, "source"), _arg(node, 2, "destination")
        if not isinstance(src, int) or not isinstance(dst, int):
            raise Unsupported("movedim with several dims")
        src, dst = _norm_dim(src, rank), _norm_dim(dst, rank)
        order = [d for d in range(rank) if d != src]
        order.insert(dst, src)
        return order

    def _getitem(self, node: Node, val) -> int:
        src, idx = node.args
        if src in self.t.pieces:
            if not isinstance(idx, int):
                raise Unsupported("tuple index is not an int")
            return self.t.pieces[src][idx]
        xv = self._term(src)
        x_val = meta_val(src)
        if not self._shaped(x_val):
            raise Unsupported("input without known shape")
        items = list(idx) if isinstance(idx, tuple) else [idx]
        if sum(1 for i in items if i is Ellipsis) > 1:
            raise Unsupported("two ellipses")
        consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
        if consumed > x_val.dim():
            raise Unsupported("too many indices")
        expanded: list = []
        for i in items:
            if i is Ellipsis:
                expanded.extend([slice(None)] * (x_val.dim() - consumed))
            else:
                expanded.append(i)
        cur, shape = xv, list(self._shape(x_val.shape))
        dim = 0
        for i in expanded:
            if i is None:
                cur = self._new("UnsqueezeIn", cur, dim)
                shape.insert(dim, 1)
                dim += 1
            elif isinstance(i, bool) or not isinstance(i, (int, slice)):
                raise Unsupported("advanced or symbolic index")
            elif isinstance(i, int):
                n = shape[dim]
                if n < 0:  # a symbolic dim: Dynamo's trace checked i < n; Select carries the token
                    if i < 0:
                        raise Unsupported("negative index into a symbolic dim")
                    cur = self._new("SelectIn", cur, dim, i, n)
                    shape.pop(dim)
                    continue
                if not -n <= i < n:
                    raise Unsupported("index out of range")
                cur = self._new("SelectIn", cur, dim, i % n, n)
                shape.pop(dim)
            else:
                if any(isinstance(v, Node) for v in (i.start, i.stop, i.step)):
                    raise Unsupported("symbolic slice")
                if i == slice(None):
                    dim += 1
                    continue
                n = shape[dim]
                if n < 0:
                    raise Unsupported("slice of a symbolic dim")
                start, stop, step = i.indices(n)
                if step != 1:
                    raise Unsupported("strided slice")
                length = max(0, stop - start)
                if (start, length) != (0, n):
                    cur = self._new("NarrowIn", cur, dim, start, length, n)
                    shape[dim] = length
                dim += 1
        if tuple(shape) != self._shape(val.shape):
            raise Unsupported("index result shape disagrees with meta")
        return cur

    def _cat(self, node: Node, name: str, val) -> int:
        tensors = _arg(node, 0, "tensors")
        dim_arg = _arg(node, 1, "dim", node.kwargs.get("axis", 0))
        if isinstance(tensors, Node) and tensors in self.t.pieces:
            elems = list(self.t.pieces[tensors])
            metas = list(meta_val(tensors))
        elif isinstance(tensors, (list, tuple)) and tensors:
            elems = [self._term(a) for a in tensors]
            metas = [meta_val(a) for a in tensors]
        else:
            raise Unsupported("cat of an unknown list")
        if any(m.dtype != val.dtype or m.device != val.device for m in metas):
            raise Unsupported("cat with type promotion")
        rank = val.dim()
        dim = _norm_dim(dim_arg, rank)
        if name == "cat" and any(m.dim() != rank for m in metas):
            raise Unsupported("legacy cat of 1-d empty tensors")
        if name == "cat":  # the rules add sizes along the cat dim (CatOffset): static there
            for m in metas:
                self._static_size(m.shape[dim])
        if name == "stack":
            elems = [self._new("UnsqueezeIn", e, dim) for e in elems]
        return self._new("CatIn", self._list(dim, elems))

    def _pure(self, node: Node, name: str, val, unique: bool = False) -> int:
        """Unary / Binary / Apply of a deterministic op; its key names the op, its constant args and the
        dtypes and devices of its inputs and output. ``unique``: a random op, an ``Apply`` whose key is
        unique to ``node`` (never merged with another node)."""
        slots: list[int] = []
        in_types: list[tuple[str, str]] = []

        def sub(a):
            if isinstance(a, Node):
                slots.append(self._term(a))
                m = meta_val(a)
                in_types.append((str(m.dtype), str(m.device)) if isinstance(m, torch.Tensor) else ("?", "?"))
                return Slot(len(slots) - 1)
            if isinstance(a, (list, tuple)):
                return type(a)(sub(x) for x in a)
            if isinstance(a, dict):
                return {k: sub(v) for k, v in a.items()}
            if isinstance(a, (int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format)):
                return a
            raise Unsupported(f"argument of type {type(a).__name__}")

        try:
            args, kwargs = sub(tuple(node.args)), sub(dict(node.kwargs))
        finally:
            del sub  # a recursive closure is a reference cycle: it would keep the Translator alive until a GC
        if not slots:
            raise Unsupported("no tensor input")
        types = (tuple(in_types), (str(val.dtype), str(val.device)))
        key = self._key(f"{name}|{node.op}|{_target_name(node.target)}|{args!r}|{sorted(kwargs.items())!r}|"
                        f"{types!r}" + (f"|node:{node.name}" if unique else ""))
        self.t.recipes[key] = Recipe(name, node.op, node.target, args, kwargs)
        self.t.types[key] = types
        if unique:
            return self._new("ApplyIn", key, self._arglist(slots))
        if len(slots) == 1 and (name in self.vocab.UNARY_OPS or name in self.vocab.ARITH_OPS):
            return self._new("UnaryIn", key, slots[0])
        if len(slots) == 2 and name in self.vocab.ARITH_OPS:
            return self._new("BinaryIn", key, slots[0], slots[1])
        return self._new("ApplyIn", key, self._arglist(slots))


def _sym_expr(s):
    """The sympy expression of a SymInt (after the shape environment's replacements), or None."""
    try:
        e = s.node.expr
        env = getattr(s.node, "shape_env", None)
        return env.simplify(e) if env is not None else e
    except Exception:  # not a SymInt of a shape environment
        return None


def _concrete(v) -> int | None:
    """The value of an FX argument that is an int, or a node whose meta is a SymInt Dynamo specialized."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    val = meta_val(v) if isinstance(v, Node) else v
    if isinstance(val, int) and not isinstance(val, bool):
        return val
    if isinstance(val, torch.SymInt):
        return val.node.maybe_as_int()
    return None


def buildable_kinds():
    """The sympy expression kinds lowering rebuilds as graph code: symbols, integers, sums, products,
    floor division (``optimus_bridge.lower``, ``Lowerer.size_value``)."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv

    return (sympy.Symbol, sympy.Integer, sympy.Add, sympy.Mul, FloorDiv)


def _buildable(e, sources: dict) -> bool:
    """Whether lowering can rebuild expression ``e`` from ``sources`` (see :func:`buildable_kinds`)."""
    kinds = buildable_kinds()
    if not isinstance(e, kinds):
        return False
    if e.is_Symbol:
        return e in sources
    return all(_buildable(a, sources) for a in e.args)


def _fallback_random() -> bool:
    """Inductor's ``fallback_random``: the user asked for eager's random numbers, so random ops stay put."""
    import torch._inductor.config as inductor_config

    return bool(inductor_config.fallback_random)


def _target_name(target) -> str:
    if isinstance(target, str):
        return target
    mod = getattr(target, "__module__", None) or ""
    return f"{mod}.{getattr(target, '__qualname__', getattr(target, '__name__', repr(target)))}"


def translate(gm: GraphModule) -> Translation:
    """Translate a Torch-IR GraphModule whose nodes carry FakeTensor meta into e-graph insertion rows.

    Raises:
        ValueError: if a placeholder lacks tensor meta (run FakeTensorProp first; ``optimize`` does).
    """
    return Translator(gm).run()
