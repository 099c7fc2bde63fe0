"""The e-graph as dense integers (:class:`_Problem`: e-nodes 0..N-1, e-classes 0..C-1, CSR arrays of the
children) and the tree-cost extractor on it: bottom-up with a priority queue (Knuth's generalization of
Dijkstra to superior functions; egg's ``Extractor``), O(E log E); a node shared by N users is paid N times.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np

from optimus_eq.extract.view import EGraphView


class _Problem:
    """The e-graph as dense integers: e-nodes 0..N-1, e-classes 0..C-1, plus CSR arrays of the children."""

    def __init__(self, view: EGraphView, forced_nodes: set) -> None:
        nodes = view.nodes
        C = getattr(view, "_num_classes", None)
        if C is not None and len(nodes) and next(reversed(nodes)) == len(nodes) - 1:
            # ids from from_egraph: e-nodes 0..N-1 in order, e-classes 0..C-1
            self.nids: range | list = range(len(nodes))
            self.cids: range | list = range(C)
            self.cid: range | dict = self.cids
            ens = list(nodes.values())
            self.cnodes: list[list[int]] = [[] for _ in range(C)]
            for c, ns in view.classes.items():
                self.cnodes[c] = ns
            self.kids: list[list[int]] = [en.children for en in ens]
            nidx = None
        else:
            self.nids = list(nodes)
            cid: dict = {}
            for c in view.classes:
                cid[c] = len(cid)
            ens = [nodes[n] for n in self.nids]
            for en in ens:
                for c in en.children:
                    if c not in cid:  # a class without term e-nodes
                        cid[c] = len(cid)
            self.cids, self.cid = list(cid), cid
            nidx = {n: i for i, n in enumerate(self.nids)}
            self.cnodes = [[] for _ in cid]
            for c, ns in view.classes.items():
                self.cnodes[cid[c]] = [nidx[n] for n in ns]
            self.kids = [[cid[c] for c in en.children] for en in ens]
        # a repeated child is repeated in kids: harmless everywhere below
        self.ncls: list[int] = [self.cid[en.eclass] for en in ens]
        self.cost: list[float] = [en.cost for en in ens]
        self.forced: dict[int, int] = {}  # class -> its forced e-node
        for n in forced_nodes:
            i = (n if isinstance(n, int) and 0 <= n < len(ens) else None) if nidx is None else nidx.get(n)
            if i is not None:
                self.forced[self.ncls[i]] = i
        for n in forced_nodes:  # a forced self loop: no e-node of its class may be chosen (-2 matches none)
            c = view.self_loops.get(n)
            if c is not None and self.has(c):
                self.forced[self.cid[c]] = -2
        self._edges = None

    def _csr(self):
        if self._edges is None:
            N = len(self.kids)
            counts = np.fromiter(map(len, self.kids), dtype=np.int64, count=N)
            flat = np.fromiter(itertools.chain.from_iterable(self.kids), dtype=np.int64, count=int(counts.sum()))
            enode = np.repeat(np.arange(N, dtype=np.int64), counts)
            ncls_a = np.asarray(self.ncls, dtype=np.int64)
            self._edges = (flat, enode, ncls_a, ncls_a[enode])
        return self._edges

    # the children as edge arrays (built on first use)
    flat = property(lambda self: self._csr()[0], doc="edge -> child class")
    enode = property(lambda self: self._csr()[1], doc="edge -> its e-node")
    ncls_a = property(lambda self: self._csr()[2], doc="e-node -> its class, as an array")
    esrc = property(lambda self: self._csr()[3], doc="edge -> its e-node's class")

    def has(self, c) -> bool:
        if isinstance(self.cid, range):
            return isinstance(c, (int, np.integer)) and 0 <= c < len(self.cid)
        return c in self.cid

    def tree(self) -> list[int]:
        """Tree-cost choice per class (-1: no acyclic derivation), forced e-nodes respected."""
        C = len(self.cids)
        cost, kids, ncls, forced = self.cost, self.kids, self.ncls, self.forced
        # the e-nodes reading each class, in e-node order (a repeated child repeats its reader), as one flat
        # list and offsets: sorted with numpy rather than appended to C lists one edge at a time
        flat, enode = self.flat, self.enode
        by_child = np.argsort(flat, kind="stable")
        parents = enode[by_child].tolist()
        start = np.searchsorted(flat[by_child], np.arange(C + 1)).tolist()
        pending = list(map(len, kids))
        heap: list[tuple[float, int]] = [(cost[i], i) for i, n in enumerate(pending) if not n]
        heapq.heapify(heap)
        pop, push = heapq.heappop, heapq.heappush
        best = [0.0] * C
        choice = [-1] * C
        while heap:
            cst, i = pop(heap)
            c = ncls[i]
            if choice[c] >= 0:
                continue
            f = forced.get(c)
            if f is not None and f != i:
                continue
            choice[c], best[c] = i, cst
            for q in parents[start[c]:start[c + 1]]:
                pending[q] -= 1
                if not pending[q] and choice[ncls[q]] < 0:  # (a decided class would skip it when popped)
                    push(heap, (cost[q] + sum([best[k] for k in kids[q]]), q))
        return choice

    def plan_classes(self, pick: list[int], rroots: list[int]) -> list[int]:
        """Classes a plan needs, from the roots through the chosen e-nodes."""
        seen = set(rroots)
        order = list(seen)
        kids = self.kids
        k = 0
        while k < len(order):
            for x in kids[pick[order[k]]]:
                if x not in seen:
                    seen.add(x)
                    order.append(x)
            k += 1
        return order
