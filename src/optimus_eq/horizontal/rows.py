"""Rows that add fused alternatives to an e-graph that already holds the program.

New terms are integer rows of the same ``...In`` relations the bridge's translator emits (see
:mod:`optimus_bridge.translate` and :mod:`optimus_eq.terms`), with fresh handle, list and vector ids.
``UnionIn(a, b)`` unions two handles: that is how a fused alternative joins a member's e-class (nothing
is removed). Greedy also emits ``Subsume...In`` rows that remove the member's original e-node
(destructive replacement, as Optimus does).

To refer to an existing e-class, a row needs a handle ``(NodeOf id)`` in it. Classes of translated FX
nodes have one; for a class the rules created, the plan's e-node of that class is inserted again (with
handles for its children, recursively): hash-consing puts the copy in the same class.
"""

from __future__ import annotations

from collections import defaultdict

from optimus_eq.terms import MAX_RANK

_TERM_RELATIONS = ("LeafIn", "ApplyIn", "NarrowIn", "SelectIn", "CatIn", "UnsqueezeIn", "ReshapeIn",
                   "PermuteIn", "UnaryIn", "BinaryIn")


class IdAlloc:
    """Fresh handle, list, argument-list and vector ids above those a Translation's rows use."""

    def __init__(self, rows: dict) -> None:
        def top(names, col=0):
            return max((r[col] for n in names for r in rows.get(n, ())), default=-1) + 1

        self.term = top(_TERM_RELATIONS)
        self.list = top(["ConsIn", "NilIn"])
        self.args = top(["AConsIn", "ANilIn"])
        self.vec = top([f"Vec{k}In" for k in range(MAX_RANK + 1)])


class RowWriter:
    """Builds the rows of fused alternatives for one plan.

    Args:
        tr: the Translation (its ``keys``, ``recipes`` and ``types`` get the new ops' keys).
        view, choice: the e-graph and the plan (to find or re-insert handles of existing classes).
        alloc: the id allocator, shared by every round of one optimization.
        eager_values: ``(term handle id, eager's value)`` per translated FX node, in graph order
            (:attr:`optimus_eq.horizontal.driver.EagerTerms.values`).
    """

    def __init__(self, tr, view, choice: dict, alloc: IdAlloc, eager_values=()) -> None:
        self.tr, self.view, self.choice, self.alloc = tr, view, choice, alloc
        self.eager_values = eager_values
        self.rows: dict[str, list[tuple]] = defaultdict(list)
        self.subsume_rows: dict[str, list[tuple]] = defaultdict(list)
        self._handle: dict = {}
        #: handles :meth:`handle` made by re-inserting a plan e-node (every other handle is a term id below the
        #: allocator's start, never a row this writer adds)
        self.reinserted: set = set()
        for tid, c in view.node_of.items():
            self._handle.setdefault(c, tid)
        self._vecs: dict[tuple, int] = {}
        self._eager: dict | None = None

    def eager_value(self, cls):
        """Eager's value (a FakeTensor) of the first translated FX node in e-class ``cls``, or None. One pass over
        ``eager_values``, on the first call."""
        if self._eager is None:
            self._eager = {}
            for tid, val in self.eager_values:
                c = self.view.node_of.get(tid)
                if c is not None:
                    self._eager.setdefault(c, val)
        return self._eager.get(cls)

    # -- primitives ------------------------------------------------------------------------------------
    def _new(self, relation: str, *cols) -> int:
        tid = self.alloc.term
        self.alloc.term += 1
        self.rows[relation].append((tid, *cols))
        return tid

    def vec(self, values) -> int:
        values = tuple(int(v) for v in values)
        if len(values) > MAX_RANK:
            raise ValueError(f"rank {len(values)} > {MAX_RANK}")
        vid = self._vecs.get(values)
        if vid is None:
            vid = self._vecs[values] = self.alloc.vec
            self.alloc.vec += 1
            self.rows[f"Vec{len(values)}In"].append((vid, *values))
        return vid

    def shape(self, tid: int, shape) -> int:
        """Seed the static shape of term ``tid``; returns ``tid``."""
        self.rows["ShapeIn"].append((tid, self.vec(shape)))
        return tid

    def _list(self, dim: int, elems: list[int]) -> int:
        rest = 0
        for e in reversed(elems):
            lid = self.alloc.list
            self.alloc.list += 1
            self.rows["ConsIn"].append((lid, dim, e, rest))
            rest = lid
        return rest

    def arglist(self, elems: list[int]) -> int:
        rest = 0
        for e in reversed(elems):
            lid = self.alloc.args
            self.alloc.args += 1
            self.rows["AConsIn"].append((lid, e, rest))
            rest = lid
        return rest

    # -- handles of existing classes ---------------------------------------------------------------
    def handle(self, cls) -> int:
        """A handle id whose ``(NodeOf id)`` lies in e-class ``cls`` (re-inserting the plan's e-node)."""
        h = self._handle.get(cls)
        if h is not None:
            return h
        en = self.view.nodes[self.choice[cls]]
        lit, kids = en.literals, en.children
        op = en.op
        if op == "Leaf":
            h = self._new("LeafIn", lit[0])
        elif op == "Apply":
            h = self._new("ApplyIn", lit[0], self.arglist([self.handle(k) for k in self._elements(kids[0])]))
        elif op == "Narrow":
            h = self._new("NarrowIn", self.handle(kids[0]), *lit)
        elif op == "Select":
            h = self._new("SelectIn", self.handle(kids[0]), *lit)
        elif op == "Unsqueeze":
            h = self._new("UnsqueezeIn", self.handle(kids[0]), *lit)
        elif op in ("Reshape", "Permute"):
            h = self._new(f"{op}In", self.handle(kids[0]), self.vec(lit[0]))
        elif op == "Unary":
            h = self._new("UnaryIn", lit[0], self.handle(kids[0]))
        elif op == "Binary":
            h = self._new("BinaryIn", lit[0], self.handle(kids[0]), self.handle(kids[1]))
        elif op == "Cat":
            cells = self._cells(kids[0])
            rest = 0
            for d, e in reversed([(d, self.handle(e)) for d, e in cells]):
                lid = self.alloc.list
                self.alloc.list += 1
                self.rows["ConsIn"].append((lid, d, e, rest))
                rest = lid
            h = self._new("CatIn", rest)
        else:
            raise ValueError(f"cannot name e-class {cls} through a {op} e-node")
        self._handle[cls] = h
        self.reinserted.add(h)
        return h

    def _elements(self, list_cls) -> list:
        return [e for _, e in self._cells(list_cls)]

    def _cells(self, list_cls) -> list:
        out = []
        nodes, choice = self.view.nodes, self.choice
        while True:
            en = nodes[choice[list_cls]]
            if en.op in ("Nil", "ANil"):
                return out
            out.append((en.literals[0] if en.op == "Cons" else None, en.children[0]))
            list_cls = en.children[1]

    # -- terms for builders -------------------------------------------------------------------------
    def key(self, text: str, recipe, types: tuple) -> int:
        """Intern a new op key with its lowering recipe and dtypes (``types`` as in Translation.types)."""
        k = self.tr.keys.setdefault(f"horizontal|{text}|{types!r}", len(self.tr.keys))
        self.tr.recipes[k] = recipe
        self.tr.types[k] = types
        return k

    def stack(self, handles: list[int], shape) -> int:
        """``torch.stack(xs, 0)`` of terms of shape ``shape``: ``Cat`` of ``Unsqueeze(x, 0)``."""
        shape = tuple(shape)
        us = [self.shape(self._new("UnsqueezeIn", h, 0), (1,) + shape) for h in handles]
        return self.cat(us, 0, (len(handles),) + shape)

    def cat(self, handles: list[int], dim: int, shape) -> int:
        return self.shape(self._new("CatIn", self._list(dim, handles)), shape)

    def unsqueeze(self, h: int, dim: int, shape) -> int:
        return self.shape(self._new("UnsqueezeIn", h, dim), shape)

    def select(self, h: int, dim: int, i: int, n: int, shape) -> int:
        return self.shape(self._new("SelectIn", h, dim, i, n), shape)

    def narrow(self, h: int, dim: int, start: int, length: int, n: int, shape) -> int:
        return self.shape(self._new("NarrowIn", h, dim, start, length, n), shape)

    def reshape(self, h: int, shape) -> int:
        return self.shape(self._new("ReshapeIn", h, self.vec(shape)), shape)

    def permute(self, h: int, perm, shape) -> int:
        return self.shape(self._new("PermuteIn", h, self.vec(perm)), shape)

    def unary(self, key: int, h: int, shape) -> int:
        return self.shape(self._new("UnaryIn", key, h), shape)

    def binary(self, key: int, a: int, b: int, shape) -> int:
        return self.shape(self._new("BinaryIn", key, a, b), shape)

    def apply(self, key: int, handles: list[int], shape) -> int:
        return self.shape(self._new("ApplyIn", key, self.arglist(handles)), shape)

    # -- joining members -------------------------------------------------------------------------
    def union(self, member, term: int) -> None:
        """``member``'s value equals ``term`` (adds the alternative to the member's e-class)."""
        self.rows["UnionIn"].append((self.handle(member.cls), term))

    def subsume(self, member) -> None:
        """Remove ``member``'s original e-node (greedy's destructive replacement)."""
        hs = [self.handle(c) for c in member.inputs]
        if member.op == "Unary":
            self.subsume_rows["SubsumeUnaryIn"].append((member.key, hs[0]))
        elif member.op == "Binary":
            self.subsume_rows["SubsumeBinaryIn"].append((member.key, hs[0], hs[1]))
        else:
            self.subsume_rows["SubsumeApplyIn"].append((member.key, self.arglist(hs)))
