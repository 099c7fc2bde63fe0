"""The optimizer's fast paths give what the plain code they replace gives (issue 9: speed at scale).

No timings here (speed targets live in bench/scale.py); each test compares a fast path with its reference
on inputs where they could differ.
"""

from __future__ import annotations

import random

import networkx as nx
import pytest

from optimus_eq.horizontal.plan import _topological_order


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
