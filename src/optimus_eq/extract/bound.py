"""A lower bound on the DAG cost of one component of the choice core, cheap enough to run before the exact
solver: where the fast plan's cost meets it, the fast plan is optimal there and HiGHS need not run.

The bound shares each class's cost among the classes that may use it. For a class ``k`` of the component
that is not needed by every plan, ``s(k)`` is the most references to ``k`` a plan can make: over the
component's classes ``q``, the largest number of times one valid e-node of ``q`` lists ``k`` among its
children, summed. Then, bottom-up over an acyclic component (costs non-negative)::

    f(c) = min over valid e-nodes i of c:  cost(i) + sum over children k of i, in the component and not
                                                      mandatory, of f(k) / s(k)
    LB   = sum over the component's mandatory (non-fixed) classes m of f(m)

LB is at most the cost of every acyclic plan P on the component (the classes P uses, each paid once).
Proof: give each class c that P uses the weight W(c) = 1 if c is mandatory, else the sum over the
references r made to it by P's chosen e-nodes of W(user of r) / s(c). P is acyclic, so W is defined in
topological order, and W(c) <= (references to c in P) / s(c) <= 1 by induction. The same recursion as f,
along P's own choices, ``g(c) = cost(P(c)) + sum g(k) / s(k)``, satisfies ``sum_m g(m) = sum_c W(c) cost(P(c))
<= cost(P)`` (non-negative costs); and ``f(c) <= g(c)`` by induction, f taking the minimum over e-nodes.

On the synthetic rec graph most components are "pointwise through slices": N slices ``narrow(u(x), ..)``
that can each be ``u(narrow(x, ..))``; sharing one ``u`` among N users is what the bound prices, and the
fast plan meets it. Not used on components with cycles (their order is not defined; they go to HiGHS).
"""

from __future__ import annotations

import math


def component_bound(group: list[int], vnodes, kids: list, cost: list, fixed: list, mandatory: list,
                    cyclic: list) -> float | None:
    """The lower bound ``LB`` of the module docstring for the component ``group`` (class indices), or None
    when it does not apply (a class on a cycle, a negative cost, or a class with no finite value).

    Args:
        vnodes: class -> its valid e-nodes (``_Prepared.vnodes``).
        kids, cost: the :class:`optimus_eq.extract.tree._Problem`'s children (class indices) and cost per
            e-node (microseconds).
        fixed, mandatory, cyclic: per class, as ``_Prepared`` has them (lists of bool).
    """
    inside = set(group)
    nodes = {}
    share: dict[int, int] = {}
    for c in group:
        if cyclic[c]:
            return None
        vn = vnodes(c)
        nodes[c] = vn
        most: dict[int, int] = {}
        for i in vn:
            if cost[i] < 0:
                return None
            seen: dict[int, int] = {}
            for k in kids[i]:
                if k in inside and not mandatory[k]:
                    seen[k] = seen.get(k, 0) + 1
            for k, n in seen.items():
                if n > most.get(k, 0):
                    most[k] = n
        for k, n in most.items():
            share[k] = share.get(k, 0) + n
    f: dict[int, float] = {}
    for c0 in group:  # depth-first, children before parents (the component is acyclic)
        if c0 in f:
            continue
        stack = [(c0, False)]
        while stack:
            c, done = stack.pop()
            if c in f:
                continue
            if not done:
                stack.append((c, True))
                stack.extend((k, False) for i in nodes[c] for k in kids[i]
                             if k in inside and not mandatory[k] and k not in f)
                continue
            best = math.inf
            for i in nodes[c]:
                v = cost[i]
                for k in kids[i]:
                    if k in inside and not mandatory[k]:
                        v += f[k] / share[k]
                if v < best:
                    best = v
            f[c] = best
    lb = sum(f[c] for c in group if mandatory[c] and not fixed[c])
    return lb if math.isfinite(lb) else None
