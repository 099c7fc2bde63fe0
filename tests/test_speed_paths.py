"""The optimizer's fast paths give what the plain code they replace gives (issue 9: speed at scale).

No timings here (speed targets live in bench/scale.py); each test compares a fast path with its reference
on inputs where they could differ.
"""

from __future__ import annotations

import random

import networkx as nx
import pytest

from optimus_eq.horizontal.plan_order import topological_order as _topological_order


@pytest.mark.parametrize("seed", range(40))
def test_topological_order_is_networkx_s(seed):
    """The group search's topological order is networkx's, node for node (the subsets it walks, and so
    the groups fused, depend on the order), on random DAGs whose node and edge insertion orders are
    shuffled, with tuple and int nodes mixed as in a plan graph."""
    r = random.Random(seed)
    n = r.randint(1, 80)
    names = [i if r.random() < 0.7 else ("fused", i) for i in range(n)]
    g = nx.DiGraph()
    order = list(range(n))
    r.shuffle(order)
    g.add_nodes_from(names[i] for i in order)
    edges = [(a, b) for a in range(n) for b in range(a + 1, n) if r.random() < 3 / n]
    r.shuffle(edges)
    g.add_edges_from((names[a], names[b]) for a, b in edges)
    assert _topological_order(g) == list(nx.topological_sort(g))


def test_topological_order_raises_on_a_cycle():
    g = nx.DiGraph([(1, 2), (2, 3), (3, 2), (0, 1)])
    with pytest.raises(nx.NetworkXUnfeasible):
        _topological_order(g)


def _bare_plan(g: nx.DiGraph):
    """A PlanGraph holding only a dependency graph: what its topological-order upkeep reads."""
    from optimus_eq.horizontal.plan import PlanGraph

    plan = object.__new__(PlanGraph)
    plan.g, plan._pos, plan._seq, plan._keys, plan._fresh = g, None, [], [], 0
    return plan


@pytest.mark.parametrize("seed", range(30))
def test_fused_ops_keep_a_topological_order_without_a_re_sort(seed):
    """After each fused op (every member's inputs -> it -> every member), the kept positions are a
    topological order of the grown graph, ``_seq`` lists the nodes by position and ``_keys`` their
    positions, whether the fused op fit between its inputs and members or the order had to be repaired;
    the repair is exercised (no full re-sort) on most of these graphs."""
    from types import SimpleNamespace

    r = random.Random(seed)
    n = r.randint(10, 120)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from((a, b) for a in range(n) for b in range(a + 1, n) if r.random() < 2.5 / n)
    plan = _bare_plan(g)
    plan._positions()
    repaired = 0
    for _ in range(6):
        pool = list(g.nodes)
        r.shuffle(pool)
        group: list = []
        for v in pool:  # an independent set: no path between two members
            if len(group) == r.randint(2, 6):
                break
            if not any(nx.has_path(g, v, m) or nx.has_path(g, m, v) for m in group):
                group.append(v)
        if len(group) < 2:
            continue
        before = plan._pos
        plan.fused_op([SimpleNamespace(cls=c) for c in group])
        if plan._pos is None:  # the fallback re-sort
            plan._positions()
        elif before is not None and plan._pos is before:
            repaired += 1
        pos = plan._pos
        assert set(pos) == set(g.nodes)
        assert all(pos[u] < pos[v] for u, v in g.edges)
        assert plan._seq == sorted(g.nodes, key=pos.__getitem__)
        assert plan._keys == [pos[v] for v in plan._seq]
    assert repaired
