"""Making the ILP small before it is solved: class reachability and strongly connected components (networkx's
graph routines on small graphs, scipy's sparse ones on large: :data:`SMALL_GRAPH`), e-nodes that can be in no
acyclic plan dropped (:func:`_prune_cycles`), and the classes every plan needs or has no choice in
(:func:`_prepare`).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass

import networkx as nx
import numpy as np

from optimus_eq.extract.tree import _Problem


#: classes up to which reachability and components run in networkx (which horizontal planning imports anyway)
#: rather than scipy.sparse.csgraph, whose import (scipy.sparse, scipy.sparse.linalg, scipy.linalg) was half of a
#: fresh process's first eqsat ``optimize`` call on Wukong (CPU: 0.36 -> 0.19 s without it). networkx
#: costs 5-10 us a class per call (2,000 classes: 9 ms to build the graph, 6 ms for its strong components)
#: where scipy takes about 1 ms in all: DHEN's 1,400-class graphs (6 calls an optimize) lost 0.04-0.08 s a warm
#: call to it, launch_bound's 2,400 (13 calls) 0.06-0.12 s; Wukong (180), Interformer and DLRM (700) stay below. Either way the results are the same (labels are canonical,
#: :func:`_canonical`): bench/results/eqsat_first_call_cpu_2026-12-02.
SMALL_GRAPH = 1000


def _scipy(n: int) -> bool:
    """Whether a graph of ``n`` classes goes to scipy.sparse.csgraph (large, or scipy already imported)."""
    return n > SMALL_GRAPH or "scipy.sparse.csgraph" in sys.modules


def _graph(n: int, src: np.ndarray, dst: np.ndarray):
    from scipy.sparse import csr_matrix

    return csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))


def _nx_graph(n: int, src: np.ndarray, dst: np.ndarray, directed: bool = True):
    g = nx.DiGraph() if directed else nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(src.tolist(), dst.tolist()))
    return g


def _canonical(label: np.ndarray) -> np.ndarray:
    """Component labels renumbered in the order of each component's smallest member (the component of class 0
    is 0, ...), so that they do not depend on the algorithm that found the components."""
    if not len(label):
        return label.astype(np.int64)
    uniq, first = np.unique(label, return_index=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(uniq))
    return rank[np.searchsorted(uniq, label)]


def _labels(n: int, components) -> np.ndarray:
    label = np.empty(n, dtype=np.int64)
    for k, members in enumerate(components):
        label[list(members)] = k
    return label


def _bfs(C: int, src: np.ndarray, dst: np.ndarray, roots: list[int]) -> np.ndarray:
    """Mask of the classes reachable from ``roots`` along the edges ``src -> dst``."""
    r = np.asarray(roots, dtype=np.int64)
    src, dst = np.concatenate([src, np.full(len(r), C)]), np.concatenate([dst, r])
    mask = np.zeros(C + 1, dtype=bool)
    if _scipy(C):
        from scipy.sparse.csgraph import breadth_first_order

        mask[breadth_first_order(_graph(C + 1, src, dst), C, directed=True, return_predecessors=False)] = True
    else:
        mask[list(nx.descendants(_nx_graph(C + 1, src, dst), C))] = True
    return mask[:C]


def _component_labels(C: int, src: np.ndarray, dst: np.ndarray, strong: bool) -> np.ndarray:
    """Canonical label of every class's strongly (``strong``) or weakly connected component."""
    if _scipy(C):
        from scipy.sparse.csgraph import connected_components

        _, label = connected_components(_graph(C, src, dst), directed=strong, connection="strong")
    elif strong:
        label = _labels(C, nx.strongly_connected_components(_nx_graph(C, src, dst)))
    else:
        label = _labels(C, nx.connected_components(_nx_graph(C, src, dst, directed=False)))
    return _canonical(label)


def _sccs(C: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Strongly connected component of every class (canonical labels), and whether the class lies on a cycle."""
    label = _component_labels(C, src, dst, strong=True)
    return label, np.bincount(label, minlength=C)[label] > 1


def _prune_cycles(p: _Problem, valid: np.ndarray, scc: np.ndarray, cyclic: np.ndarray, reach: np.ndarray,
                  allow: np.ndarray | None = None) -> int:
    """Drop e-nodes whose every derivation needs their own class (they can be in no acyclic plan).

    Per strongly connected component S, ``need[c]`` (a bitset over S) under-approximates the classes of S
    that every acyclic derivation of ``c`` uses: the intersection over c's e-nodes of the union, over their
    children k in S, of ``{k} | need[k]``, iterated down from "underivable" to a fixpoint. An e-node of
    ``c`` whose union contains ``c`` itself closes a cycle in every plan. Returns how many were dropped.

    On split/cat graphs this removes every cycle of the e-graph we have seen (``x`` is ``view(cat(
    unsqueeze(select(view(x)))))``: the cat can only be computed from ``x`` itself).

    Only strongly connected components whose classes are all ``allow``ed (default: all) are pruned: the
    bitsets cost O(size^2) per component (0.5 s for the eight of 128 parallel branches x 2 layers, 4,342
    classes, which pruned 2 e-nodes), worth it only where the exact solver will run.
    """
    members: dict[int, list[int]] = defaultdict(list)
    for c in np.flatnonzero(cyclic & reach).tolist():
        members[int(scc[c])].append(c)
    kids, cnodes = p.kids, p.cnodes
    dropped = 0
    for ms in members.values():
        if allow is not None and not allow[ms].all():
            continue
        bit = {c: 1 << k for k, c in enumerate(ms)}
        inner = {c: [(i, [k for k in kids[i] if k in bit]) for i in cnodes[c] if valid[i]] for c in ms}
        parents: dict[int, set[int]] = defaultdict(set)
        for c, nodes in inner.items():
            for _, ks in nodes:
                for k in ks:
                    parents[k].add(c)
        need: dict[int, int] = {}
        work = list(ms)
        queued = set(ms)
        while work:
            c = work.pop()
            queued.discard(c)
            acc = None
            for _, ks in inner[c]:
                dep = 0
                for k in ks:
                    nk = need.get(k)
                    if nk is None:
                        break
                    dep |= bit[k] | nk
                else:
                    acc = dep if acc is None else acc & dep
            if acc is not None and need.get(c) != acc:
                need[c] = acc
                for q in parents[c]:
                    if q not in queued:
                        queued.add(q)
                        work.append(q)
        for c, nodes in inner.items():
            b = bit[c]
            for i, ks in nodes:
                dep = 0
                for k in ks:
                    dep |= bit[k] | need.get(k, 0)
                if dep & b:
                    valid[i] = False
                    dropped += 1
    return dropped


@dataclass
class _Prepared:
    """The pruned problem (see the module docstring). Arrays are indexed by class unless said otherwise."""

    valid: list[bool]          # per e-node: can be in an acyclic plan
    reach: np.ndarray          # bool: reachable from the roots through valid e-nodes
    nvalid: np.ndarray         # number of valid e-nodes
    mandatory: np.ndarray      # bool: needed by every plan
    fixed: np.ndarray          # bool: mandatory with one valid e-node (no variable)
    scc: np.ndarray            # strongly connected component of the pruned class graph
    cyclic: np.ndarray         # bool: lies on a cycle of the pruned class graph
    pruned: int                # e-nodes dropped because every derivation of them is cyclic
    cnodes: list[list[int]]

    def vnodes(self, c: int) -> list[int]:
        valid = self.valid
        return [i for i in self.cnodes[c] if valid[i]]


def _fixed(p: _Problem, valid: np.ndarray, ev: np.ndarray, rroots: list[int]):
    """Per class: valid e-nodes, needed by every plan (mandatory), and fixed (mandatory with one e-node)."""
    C = len(p.cids)
    nvalid = np.bincount(p.ncls_a[valid], minlength=C)
    single = ev & (nvalid[p.esrc] == 1)
    mandatory = _bfs(C, p.esrc[single], p.flat[single], rroots)
    return nvalid, mandatory, mandatory & (nvalid == 1)


def _components(p: _Problem, valid: np.ndarray, reach: np.ndarray, fixed: np.ndarray, cyclic: np.ndarray,
                scc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Independent components of the choice problem: classes linked by valid e-nodes, fixed acyclic classes
    left out, each strongly connected component kept whole (so that every cycle lies inside one). Returns
    (component label per class, mask of the classes inside some component)."""
    C = len(p.cids)
    inside = reach & ~(fixed & ~cyclic)  # a cyclic fixed class stays: it carries an order variable
    e = valid[p.enode] & inside[p.esrc] & inside[p.flat]
    src, dst = p.esrc[e], p.flat[e]
    cyc = np.flatnonzero(cyclic & inside)
    if len(cyc):
        _, first = np.unique(scc[cyc], return_index=True)
        rep = np.full(C, -1, dtype=np.int64)
        rep[scc[cyc[first]]] = cyc[first]
        src = np.concatenate([src, rep[scc[cyc]]])
        dst = np.concatenate([dst, cyc])
    return _component_labels(C, src, dst, strong=False), inside


def _prepare(p: _Problem, tree_pick: list[int], rroots: list[int], prune_max: int | None = None) -> _Prepared:
    """The pruned problem. With ``prune_max``, only cycles inside components of at most that many e-nodes
    (before pruning; pruning only splits components) are pruned: larger ones go to the local search, which
    keeps its plans acyclic by itself."""
    C, N = len(p.cids), len(p.kids)
    derivable = np.asarray(tree_pick, dtype=np.int64) >= 0
    bad_kid = np.bincount(p.enode, weights=~derivable[p.flat], minlength=N) > 0
    fnode = np.full(C, -1, dtype=np.int64)
    for c, i in p.forced.items():
        fnode[c] = i
    fc = fnode[p.ncls_a]
    valid = derivable[p.ncls_a] & ~bad_kid & ((fc == -1) | (fc == np.arange(N)))

    def structure(valid: np.ndarray):
        ev = valid[p.enode]
        src, dst = p.esrc[ev], p.flat[ev]
        reach = _bfs(C, src, dst, rroots)
        scc, cyclic = _sccs(C, src, dst)
        return ev, reach, scc, cyclic

    ev, reach, scc, cyclic = structure(valid)
    pruned = 0
    if (cyclic & reach).any():
        allow = None
        if prune_max is not None:
            nvalid, _, fixed = _fixed(p, valid, ev, rroots)
            comp, inside = _components(p, valid, reach, fixed, cyclic, scc)
            size = np.bincount(comp[inside], weights=np.where(fixed, 0, nvalid)[inside], minlength=C)
            allow = size[comp] <= prune_max
        pruned = _prune_cycles(p, valid, scc, cyclic, reach, allow)
        if pruned:
            ev, reach, scc, cyclic = structure(valid)
    nvalid, mandatory, fixed = _fixed(p, valid, ev, rroots)
    return _Prepared(valid.tolist(), reach, nvalid, mandatory, fixed, scc, cyclic, pruned, p.cnodes)
