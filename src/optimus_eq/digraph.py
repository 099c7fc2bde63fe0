"""Reachability and connected components of a directed graph given as edge arrays, without importing scipy.

The extraction's pruning (:mod:`optimus_eq.extract.prune`) asks three questions of the class graph: which
classes the roots reach, the strongly connected components, and the weakly connected ones, and the exact stage
(:mod:`optimus_eq.extract.ilp`) wants its constraint matrix in compressed-column form. ``scipy.sparse.csgraph``
answers them in microseconds, but importing it costs a process 0.2-0.35 s of its first eqsat call (it imports
scipy.sparse, scipy.sparse.linalg and scipy.linalg; measured on the 2-core CPU machine, scipy 1.17.1,
bench/results/coldstart_cpu_2026-12-02), more than the rest of the call on a bench model (Wukong: 0.07 s warm).
These functions give the same answers with numpy and a little Python, with scipy's own labels (the callers
iterate over components and sets of labels in label order, so the numbering is part of the plan):

* :func:`reachable`: the classes reachable from the roots (a mask: any traversal gives it);
* :func:`strong_components`: scipy's ``connected_components(directed=True, connection="strong")`` labels: an
  iterative Pearce-style search (D. J. Pearce, "A space-efficient algorithm for finding strongly connected
  components", IPL 116(1), 2016) visiting the nodes from 0 up, each node's unvisited successors pushed on the
  search stack in index order (the last pushed is searched first), a component labelled when its root is
  finished, 0 first;
* :func:`weak_components`: ``connected_components(directed=False)`` labels: components numbered by their
  smallest node;
* :func:`compressed`: the arrays of ``scipy.sparse.csc_matrix((vals, (rows, cols)))`` / ``csr_matrix``
  (duplicates summed, indices sorted).

Above :data:`SCIPY_ABOVE` nodes plus edges the strong components come from scipy itself (its import then costs
less than this module's Python loop would); where scipy.sparse.csgraph is loaded already it is used at any size.
tests/test_digraph.py checks every function against scipy on random graphs.
"""

from __future__ import annotations

import sys

import numpy as np

#: nodes + edges above which :func:`strong_components` calls scipy (the Python search costs ~0.3 us per node and
#: edge: ~0.1 s at this size, less than scipy.sparse.csgraph's import)
SCIPY_ABOVE = 300_000


def compressed(n_major: int, major: np.ndarray, minor: np.ndarray, vals: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr, indices, data)`` of the compressed matrix with entries ``vals`` at ``(major, minor)``
    (``major`` the rows for CSR, the columns for CSC), as scipy builds it: duplicates summed, indices sorted
    within each major line. ``vals`` None: ones (a graph's structure). ``indptr`` has ``n_major + 1`` entries;
    both index arrays are int32 where the sizes allow (as scipy's, and as HiGHS takes them)."""
    major = np.asarray(major, dtype=np.int64)
    minor = np.asarray(minor, dtype=np.int64)
    vals = np.ones(len(major)) if vals is None else np.asarray(vals)
    order = np.lexsort((minor, major))
    major, minor, vals = major[order], minor[order], vals[order]
    if len(major):
        new = np.ones(len(major), dtype=bool)
        new[1:] = (major[1:] != major[:-1]) | (minor[1:] != minor[:-1])
        starts = np.flatnonzero(new)
        vals = np.add.reduceat(vals, starts) if len(vals) else vals
        major, minor = major[starts], minor[starts]
    indptr = np.zeros(n_major + 1, dtype=np.int64)
    np.cumsum(np.bincount(major, minlength=n_major), out=indptr[1:])
    index = np.int32 if max(len(minor), n_major) < 2**31 else np.int64  # scipy's choice of index dtype
    return indptr.astype(index), minor.astype(index), vals


def reachable(n: int, src: np.ndarray, dst: np.ndarray, roots) -> np.ndarray:
    """Mask (length ``n``) of the nodes reachable from ``roots`` (themselves included) along the edges
    ``src[i] -> dst[i]``. Breadth first, one numpy step per level."""
    indptr, indices, _ = compressed(n, src, dst)
    seen = np.zeros(n, dtype=bool)
    frontier = np.unique(np.asarray(roots, dtype=np.int64))
    seen[frontier] = True
    while len(frontier):
        lo, hi = indptr[frontier], indptr[frontier + 1]
        counts = hi - lo
        if not counts.sum():
            break
        # the successors of every frontier node: one arange per node, concatenated
        offs = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        nxt = indices[offs + np.arange(counts.sum())]
        nxt = np.unique(nxt[~seen[nxt]])
        seen[nxt] = True
        frontier = nxt
    return seen


def weak_components(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Labels (int32, length ``n``) of the weakly connected components, numbered in the order of their smallest
    node (scipy's ``connected_components(directed=False)``)."""
    label = np.arange(n, dtype=np.int64)  # each node's label: a node of its component, finally the smallest
    a, b = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    while True:
        low = np.minimum(label[a], label[b])
        new = label.copy()
        np.minimum.at(new, a, low)
        np.minimum.at(new, b, low)
        new = new[new]  # pointer jumping: a label's label is in the same component, and not larger
        if np.array_equal(new, label):
            break
        label = new
    _, labels = np.unique(label, return_inverse=True)  # smallest nodes in increasing order -> 0, 1, ...
    return labels.astype(np.int32)


def strong_components(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Labels (int32, length ``n``) of the strongly connected components, numbered as scipy's
    ``connected_components(directed=True, connection="strong")`` numbers them (module doc)."""
    if n + len(src) > SCIPY_ABOVE or "scipy.sparse.csgraph" in sys.modules:
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components

        g = csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))
        return connected_components(g, directed=True, connection="strong")[1]
    indptr, indices, _ = compressed(n, src, dst)
    ptr, idx = indptr.tolist(), indices.tolist()
    VOID, END = -1, -2
    rindex = [VOID] * n          # visit index, then (counting down from n - 1) the component label
    on_s = [VOID] * n            # the stack of visited nodes not yet in a component (linked through this)
    up = [VOID] * n              # the search stack, doubly linked so that a node pushed again moves to the top
    down = [VOID] * n
    s_head, index, label = END, 0, n - 1
    for start in range(n):
        if rindex[start] != VOID:
            continue
        head = start
        up[start] = down[start] = END
        while head != END:
            v = head
            if rindex[v] == VOID:  # first visit: number it, push its unvisited successors
                rindex[v] = index
                index += 1
                for j in range(ptr[v], ptr[v + 1]):
                    w = idx[j]
                    if rindex[w] != VOID:
                        continue
                    if up[w] != VOID:  # on the search stack already: take it out, it goes on top
                        u, d = up[w], down[w]
                        if d != END:
                            up[d] = u
                        if u != END:
                            down[u] = d
                    up[w], down[w] = head, END
                    down[head] = w
                    head = w
                continue
            head = up[v]  # finished: pop it
            if head >= 0:
                down[head] = END
            up[v] = down[v] = VOID
            low, root = rindex[v], True
            for j in range(ptr[v], ptr[v + 1]):
                lw = rindex[idx[j]]
                if lw < low:
                    low, root = lw, False
            rindex[v] = low
            if root:  # v roots a component: it and the visited nodes above it on the stack
                index -= 1
                while s_head != END and rindex[v] <= rindex[s_head]:
                    w = s_head
                    s_head = on_s[w]
                    on_s[w] = VOID
                    rindex[w] = label
                    index -= 1
                rindex[v] = label
                label -= 1
            else:
                on_s[v] = s_head
                s_head = v
    return ((n - 1) - np.asarray(rindex, dtype=np.int64)).astype(np.int32)
