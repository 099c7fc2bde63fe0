"""Ruling out the cycles of a strongly connected component in the extraction ILP (:mod:`.ilp`) without big-M
order variables: a feedback set of its classes (the *hubs*, :func:`feedback_classes`) and one reach variable per
hub and class (:func:`hub_rows`, warm-started by :func:`hub_values`). See the package docstring for figures.
"""

from __future__ import annotations

import numpy as np

#: An SCC whose feedback set has more classes than this gets topological-order variables instead (one per
#: class, big-M rows): hub rows grow with hubs x e-nodes. DLRM and launch_bound need 1-2 hubs per SCC.
MAX_HUBS = 8


def feedback_classes(members: list[int], vnodes: dict, kids: list) -> list[int]:
    """A small feedback vertex set of the class graph on ``members`` (edge ``c -> k`` when a valid e-node of
    ``c`` needs ``k``): every cycle passes through one of the returned classes. Greedy: strip classes with no
    edge in or out inside what is left, take the class of most in x out edges (a self loop first), repeat."""
    inside = set(members)
    succ = {c: {k for i in vnodes[c] for k in kids[i] if k in inside} for c in members}
    pred: dict[int, set[int]] = {c: set() for c in members}
    for c, ks in succ.items():
        for k in ks:
            pred[k].add(c)
    left = set(members)
    out: list[int] = []

    def drop(c: int) -> None:
        left.discard(c)
        for k in succ[c]:
            pred[k].discard(c)
        for q in pred[c]:
            succ[q].discard(c)

    while left:
        todo = [c for c in left if not succ[c] or not pred[c]]
        while todo:
            c = todo.pop()
            if c not in left:
                continue
            nbrs = succ[c] | pred[c]
            drop(c)
            todo.extend(k for k in nbrs if k in left and (not succ[k] or not pred[k]))
        if not left:
            break
        best = max(left, key=lambda c: (c in succ[c], len(succ[c]) * len(pred[c]), -c))
        out.append(best)
        drop(best)
    return out


def hub_rows(kids: list, members, hubs, vnodes, index, tvar, rows, cols, vals, lo, hi, r) -> int:
    """Rows that rule out every cycle through the hub classes ``hubs`` (a feedback set of ``members``: every
    cycle of the SCC passes through one), with one reach variable ``d[h, c]`` in [0, 1] per hub and class:
    a chosen e-node of ``c`` that needs ``h`` sets ``d[h, c] >= x``; one that needs ``k`` passes it on,
    ``d[h, c] >= x + d[h, k] - 1``; a chosen e-node of ``h`` may not need a class that reaches it,
    ``x + d[h, k] <= 1``. An acyclic plan satisfies them (``d``: does ``c`` reach ``h``); a plan with a
    cycle through ``h`` does not (``d`` is forced to 1 back along it). No big-M: the LP relaxation is
    tighter than topological-order variables' (``t_c >= t_k + 1 - n (1 - x)``)."""
    inside = set(members)
    for h in hubs:
        for c in members:
            for i in vnodes[c]:
                xi = index.get(i)  # None: a fixed e-node (always chosen)
                for k in set(kids[i]):
                    if k not in inside:
                        continue
                    if c == h:      # x_i + d[h, k] <= 1 (k == h: a self loop, x_i <= 0)
                        rc, rv, b = ([], [], 1.0) if k == h else ([tvar[(h, k)]], [1.0], 1.0)
                        if xi is None:
                            b -= 1.0
                        else:
                            rc, rv = rc + [xi], rv + [1.0]
                        lo.append(-np.inf)
                        hi.append(b)
                    else:           # d[h, c] - d[h, k] - x_i >= -1 (k == h: d[h, c] - x_i >= 0)
                        rc, rv = [tvar[(h, c)]], [1.0]
                        b = 0.0 if k == h else -1.0
                        if k != h:
                            rc, rv = rc + [tvar[(h, k)]], rv + [-1.0]
                        if xi is None:
                            b += 1.0
                        else:
                            rc, rv = rc + [xi], rv + [-1.0]
                        lo.append(b)
                        hi.append(np.inf)
                    if rc:
                        rows.extend([r] * len(rc))
                        cols.extend(rc)
                        vals.extend(rv)
                    r += 1
    return r


def hub_values(kids: list, tvar: dict, start: list[int], used: set) -> dict[int, float]:
    """Reach variables that make the acyclic plan ``start`` satisfy the hub rows: ``d[h, c]`` (key ``(h, c)`` of
    ``tvar``) is 1 when ``c`` is used and its chosen e-node reaches the hub ``h`` through chosen e-nodes, else 0.
    Returns column -> value for the hub keys of ``tvar`` (order keys ``("t", c)`` are :func:`order_values`')."""
    keys = [(h, c) for h, c in tvar if h != "t"]
    inside = {c for _, c in keys} | {h for h, _ in keys}
    back: dict[int, list[int]] = {}
    for c in inside:
        if c in used:
            for k in set(kids[start[c]]):
                if k in inside:
                    back.setdefault(k, []).append(c)
    out = {tvar[key]: 0.0 for key in keys}
    for h in {h for h, _ in keys}:
        seen = {h}
        todo = [h]
        while todo:
            for c in back.get(todo.pop(), ()):
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
                    if (h, c) in tvar:
                        out[tvar[(h, c)]] = 1.0
    return out


def order_rows(kids: list, members, vnodes, index, tvar, rows, cols, vals, lo, hi, r) -> int:
    """Topological-order rows for an SCC with more than ``MAX_HUBS`` hubs: ``t_c - t_k >= 1`` for every e-node
    of ``c`` needing ``k`` (both in the SCC) when chosen (big-M ``n``: ``t_c - t_k - n x_i >= 1 - n``); columns
    ``tvar[("t", c)]`` in [0, n]."""
    big = float(len(members))
    inside = set(members)
    for c in members:
        for i in vnodes[c]:
            for k in kids[i]:
                if k not in inside:
                    continue
                rows.extend([r, r])
                cols.extend([tvar[("t", c)], tvar[("t", k)]])
                vals.extend([1.0, -1.0])
                if i in index:
                    rows.append(r), cols.append(index[i]), vals.append(-big)
                    lo.append(1.0 - big)
                else:  # a fixed e-node: always chosen
                    lo.append(1.0)
                hi.append(np.inf)
                r += 1
    return r


def order_values(kids: list, tvar: dict, start: list[int], used: set) -> dict[int, float]:
    """Order variables that make the acyclic plan ``start`` satisfy :func:`order_rows`: one more than the largest
    value among the chosen e-node's children in the SCC (0 for an unused class). Returns column -> value."""
    tcls = {c for h, c in tvar if h == "t"}
    t = {c: 0.0 for c in tcls}
    done: set = set()
    for c0 in tcls:
        if c0 in done or c0 not in used:
            continue
        stack = [(c0, False)]
        while stack:
            c, post = stack.pop()
            if post:
                t[c] = 1.0 + max((t[k] for k in kids[start[c]] if k in tcls), default=-1.0)
                continue
            if c in done:
                continue
            done.add(c)
            stack.append((c, True))
            stack.extend((k, False) for k in kids[start[c]] if k in tcls and k not in done)
    return {tvar[("t", c)]: v for c, v in t.items()}
