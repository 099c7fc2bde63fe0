"""The translated program (:class:`Translation`: e-graph insertion rows and the maps lowering needs) and the
writer of its rows (:class:`RowWriter`: handles, lists, shape vectors, op keys, symbolic size tokens).

A term is named by an integer handle ``(NodeOf id)``; each row of a relation (``NarrowIn(id, x, d, s, l, n)``,
``ConsIn(list, d, elem, rest)``, ...) builds one term, list cell or vector when :class:`optimus_eq.egraph.EGraph`
loads the rows (:mod:`optimus_eq.terms`, the ``load`` rules).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch.fx import GraphModule, Node

from optimus_bridge.fx_meta import Unsupported, is_buildable, meta_val, sym_expr
from optimus_bridge.kept_order import KeptOrder
from optimus_eq.recipe import Recipe
from optimus_eq.symbolic import SizeTable
from optimus_eq.terms import MAX_RANK  # longest shape the rows can carry; longer ones stay opaque


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
        normalized: how many nodes were rewritten to a canonical form (counted under the level's canonical pattern).
        frozen: nodes left opaque because of in-place mutation or a global-state region.
        barriers: first global-state change -> term nodes computed before it and used after it.
        symbolic: nodes left opaque because of symbolic sizes.
        kept_order: which kept nodes keep their original relative order, and between which of those every
            other kept node stays (:class:`optimus_bridge.kept_order.KeptOrder`; set at the end of translation).
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
    kept_order: KeptOrder = field(default_factory=KeptOrder)
    types: dict[int, tuple] = field(default_factory=dict)
    visible_outputs: frozenset | None = None
    internal_outputs: frozenset = frozenset()
    sizes: SizeTable = field(default_factory=SizeTable)
    size_sources: dict = field(default_factory=dict)


class RowWriter:
    """Writes the rows of one :class:`Translation`: fresh term handles ``(NodeOf id)``, cons lists (``ConsIn``),
    argument lists (``AConsIn``), shape vectors (``Vec<k>In``, shared by value), interned op keys, and e-graph
    sizes (ints, or tokens of symbolic sizes). The base of :class:`optimus_bridge.translate.Translator`."""

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
        self._size_memo: dict = {}  # a SymInt's expression -> its token, or why it has none
        self._shape_memo: dict = {}  # an all-int shape -> :meth:`_shape` of it
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
                e = sym_expr(v)
                if e is not None and e.is_Symbol:
                    sources.setdefault(e, ("node", n))
        for n in placeholders:
            v = meta_val(n)
            if isinstance(v, torch.Tensor):
                for d, size in enumerate(v.shape):
                    e = sym_expr(size) if isinstance(size, torch.SymInt) else None
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
            e = sym_expr(s)
            hint = s.node.hint
            if e is None or hint is None:
                got = "a size without a hint (data-dependent)"
            elif not is_buildable(e, self.t.size_sources):
                got = f"symbolic size {e} not readable from the graph's inputs"
            else:
                got = self.t.sizes.token(e, int(hint))
            self._size_memo[raw] = got
        if isinstance(got, str):
            raise Unsupported(got)
        return got

    def _shape(self, sizes) -> tuple:
        """:meth:`_size` of each entry of a shape (or stride) tuple; memoized for all-int tuples (every node's
        shape is read twice or more, and most nodes share a few shapes)."""
        try:
            got = self._shape_memo.get(sizes)
        except TypeError:  # a symbolic SymInt is unhashable
            return tuple(self._size(s) for s in sizes)
        if got is None:
            got = tuple(self._size(s) for s in sizes)
            if all(type(s) is int for s in sizes):
                self._shape_memo[sizes] = got
        return got

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

    @staticmethod
    def _cells(start: int, elems: list[int]) -> list[tuple[int, int, int]]:
        """``(cell id, element, rest)`` of the cons list of ``elems``, its cells numbered from ``start`` last
        element first (the list's head is the last cell; cell 0 is the empty list)."""
        cells, rest = [], 0
        for k, e in enumerate(reversed(elems)):
            cells.append((start + k, e, rest))
            rest = start + k
        return cells

    def _list(self, dim: int, elems: list[int]) -> int:
        """The cons list along ``dim`` of the terms ``elems`` (``ConsIn`` rows), for a cat."""
        cells = self._cells(self._lists, elems)
        self._lists += len(cells)
        self.rows["ConsIn"].extend((lid, dim, e, rest) for lid, e, rest in cells)
        return cells[-1][0] if cells else 0

    def _arglist(self, elems: list[int]) -> int:
        """The argument list of the terms ``elems`` (``AConsIn`` rows), for an ``Apply``."""
        cells = self._cells(self._args, elems)
        self._args += len(cells)
        self.rows["AConsIn"].extend(cells)
        return cells[-1][0] if cells else 0

    def _bind(self, node: Node, tid: int, val) -> int:
        """Record term ``tid`` as the value of ``node``, with its static shape."""
        self.t.node_id[node] = tid
        self.rows["ShapeIn"].append((tid, self._vec(self._shape(val.shape))))
        return tid

    def _term(self, a) -> int:
        """The term of input ``a`` (a translated tensor node), or Unsupported."""
        if isinstance(a, Node) and a in self.t.node_id:
            return self.t.node_id[a]
        raise Unsupported(f"input {a!r} is not a translated tensor")
