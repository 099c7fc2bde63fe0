"""Port of pytorch test/inductor/test_group_batch_fusion.py::TestFindIndependentSubsetGreedy, in our own
words: Optimus' greedy grouping of candidate nodes into mutually independent subsets.

The rule (upstream ``find_independent_subset_greedy``): walk the candidates in order; a candidate joins
the current subset when it neither depends on nor is depended on by any member (no path in the
graph either way), until ``max_fuse_set_size`` members; the subset is yielded when it has at least
``min_fuse_set_size`` members; the candidates not taken are walked again for the next subset.

Each case is data: a DAG (node -> its inputs), the candidates in order, min/max, and the expected
subsets. The data is checked against the installed torch's function (so the port is right) and against
``optimus_eq.horizontal.find_independent_subset_greedy`` (:mod:`optimus_eq.horizontal.subsets`), which
takes ``(candidates, options)`` like upstream's and shares its walk (``greedy_subsets``, one
``greedy_round`` per subset) with the plan's group analysis. Where ours differs on purpose it is asserted below: no subsets at all when
``max_fuse_set_size < 1`` (upstream loops forever), and duplicate candidates count once.
"""

from __future__ import annotations

import pytest
import torch

from optimus_eq.horizontal import find_independent_subset_greedy
from optimus_eq.horizontal.subsets import greedy_round

# (DAG, candidates, min_fuse_set_size, max_fuse_set_size, expected subsets); DAG: node -> its inputs
CASES = [
    ({"n0": (), "n1": ()}, ["n0"], 0, 100, [["n0"]]),
    ({"n0": (), "n1": (), "n2": ("n0",)}, ["n1", "n2"], 0, 100, [["n1", "n2"]]),
    ({"n0": (), "n1": (), "n2": ("n0",), "n3": (), "n4": ("n0", "n1", "n2"), "n5": ("n0", "n2", "n4"), "n6": ("n3",),
      "n7": ("n4", "n5", "n6", "n1", "n3"), "n8": ("n7", "n1", "n3", "n5", "n0"),
      "n9": ("n3", "n4", "n8", "n6", "n5", "n2", "n0", "n7"), "n10": ("n0",), "n11": ("n4", "n0", "n2", "n3", "n1", "n9"),
      "n12": ("n2", "n3", "n10", "n6", "n9")},
     ["n10", "n5", "n3", "n4", "n9"], 0, 100, [["n10", "n5", "n3"], ["n4"], ["n9"]]),
    ({"n0": (), "n1": (), "n2": ("n0",)}, ["n2"], 0, 100, [["n2"]]),
    ({"n0": (), "n1": (), "n2": (), "n3": ("n2", "n1"), "n4": ("n2", "n3", "n1"), "n5": ("n3", "n1"), "n6": ("n1",),
      "n7": ("n5", "n4"), "n8": ("n6", "n2")},
     ["n4", "n3", "n1", "n8", "n5", "n6", "n2"], 0, 100, [["n4", "n8", "n5"], ["n3", "n6"], ["n1", "n2"]]),
    ({"n0": (), "n1": (), "n2": (), "n3": (), "n4": ("n3", "n1", "n0"), "n5": ("n1", "n2", "n4", "n0"),
      "n6": ("n0", "n3", "n2"), "n7": ("n6", "n1", "n5", "n4", "n3", "n0"), "n8": ("n2", "n7", "n3"),
      "n9": ("n3", "n5", "n6", "n7", "n2", "n1"), "n10": ("n8", "n0", "n2", "n4", "n6", "n3"),
      "n11": ("n6", "n5", "n8", "n1", "n3", "n10", "n2"), "n12": ("n7", "n4")},
     ["n7"], 0, 100, [["n7"]]),
    ({"n0": (), "n1": (), "n2": (), "n3": ("n0",), "n4": ("n3",)}, ["n1", "n2", "n4"], 0, 100, [["n1", "n2", "n4"]]),
    ({"n0": (), "n1": (), "n2": ("n1",), "n3": (), "n4": ("n0", "n2", "n3"), "n5": ("n2", "n3"), "n6": ("n3",)},
     ["n6", "n2", "n3", "n1"], 0, 100, [["n6", "n2"], ["n3", "n1"]]),
    ({"n0": (), "n1": (), "n2": (), "n3": ("n2",), "n4": ("n1",), "n5": (), "n6": ("n1", "n4"), "n7": ("n5", "n1"),
      "n8": ("n6",), "n9": ("n6", "n1", "n2", "n0"), "n10": ("n0", "n7"), "n11": ("n0", "n4", "n3", "n5"),
      "n12": ("n9", "n8", "n7", "n4", "n0")},
     ["n8", "n9", "n11", "n2", "n4", "n0", "n7", "n5", "n1"], 0, 100,
     [["n8", "n9", "n11", "n7"], ["n2", "n4", "n0", "n5"], ["n1"]]),
    ({"n0": (), "n1": (), "n2": (), "n3": ("n2",), "n4": ("n0",), "n5": ("n1", "n2"), "n6": ("n2", "n3", "n1", "n0", "n5"),
      "n7": ("n6", "n2", "n0", "n4", "n5", "n1"), "n8": ("n4",), "n9": ("n4", "n6", "n7", "n1", "n2")},
     ["n8", "n6", "n2", "n4", "n7", "n5", "n3", "n9"], 0, 100, [["n8", "n6"], ["n2", "n4"], ["n7"], ["n5", "n3"], ["n9"]]),
]

# upstream's min_fuse and max_fuse cases share one DAG
_DAG13 = {"n0": (), "n1": (), "n2": (), "n3": ("n1", "n2"), "n4": ("n1",), "n5": (), "n6": ("n5",),
          "n7": ("n1", "n6", "n5", "n2", "n3", "n0"), "n8": ("n5", "n7", "n2", "n6"), "n9": ("n1",), "n10": ("n9",),
          "n11": ("n3", "n4", "n0", "n2"), "n12": ("n8", "n9", "n5", "n1"), "n13": ("n11", "n4", "n12", "n1", "n9", "n3", "n0")}
_CAND13 = ["n9", "n2", "n8", "n10", "n5", "n6", "n13", "n7", "n3", "n0", "n4"]
CASES += [
    (_DAG13, _CAND13, 0, 100, [["n9", "n2", "n5", "n0", "n4"], ["n8", "n10"], ["n6", "n3"], ["n13"], ["n7"]]),
    (_DAG13, _CAND13, 2, 10, [["n9", "n2", "n5", "n0", "n4"], ["n8", "n10"], ["n6", "n3"]]),  # min_fuse drops singles
    (_DAG13, _CAND13, 0, 3, [["n9", "n2", "n5"], ["n8", "n10", "n4"], ["n6", "n3", "n0"], ["n13"], ["n7"]]),  # max_fuse
]

# ours, beyond upstream's tests (checked against upstream's function too): walk order decides the subsets
# (the plan walks in topological order), and a dependency through a non-candidate node (n0 -> x -> n1) counts
CASES += [
    ({"n0": (), "n1": ("n0",), "n2": ()}, ["n0", "n1", "n2"], 0, 100, [["n0", "n2"], ["n1"]]),
    ({"n0": (), "n1": ("n0",), "n2": ()}, ["n1", "n0", "n2"], 0, 100, [["n1", "n2"], ["n0"]]),
    ({"n0": (), "x": ("n0",), "n1": ("x",), "n2": ()}, ["n1", "n2", "n0"], 2, 100, [["n1", "n2"]]),
]


def build_graph(dag: dict) -> dict:
    """An FX graph with one placeholder per DAG node, its args the node's inputs; name -> node."""
    g = torch.fx.Graph()
    nodes: dict = {}
    pending = list(dag.items())
    while pending:
        name, inputs = pending.pop(0)
        if any(i not in nodes for i in inputs):
            pending.append((name, inputs))
            continue
        nodes[name] = g.create_node("placeholder", "target", name=name, args=tuple(nodes[i] for i in inputs))
    return nodes


def _run(fn, dag, candidates, lo, hi):
    nodes = build_graph(dag)
    out = fn([nodes[c] for c in candidates], {"min_fuse_set_size": lo, "max_fuse_set_size": hi})
    return [[n.name for n in subset] for subset in out]


@pytest.mark.parametrize("dag,candidates,lo,hi,expected", CASES)
def test_upstream_function_agrees_with_the_ported_data(dag, candidates, lo, hi, expected):
    from torch._inductor.fx_passes.group_batch_fusion import find_independent_subset_greedy

    assert _run(find_independent_subset_greedy, dag, candidates, lo, hi) == expected


@pytest.mark.parametrize("dag,candidates,lo,hi,expected", CASES)
def test_ours_matches_upstream_grouping(dag, candidates, lo, hi, expected):
    assert _run(find_independent_subset_greedy, dag, candidates, lo, hi) == expected


def test_no_subsets_when_max_fuse_set_size_is_zero():
    """Upstream's loop never ends with ``max_fuse_set_size=0``; ours yields nothing."""
    assert _run(find_independent_subset_greedy, {"n0": (), "n1": ()}, ["n0", "n1"], 0, 0) == []


def test_duplicate_candidates_count_once():
    assert _run(find_independent_subset_greedy, {"n0": (), "n1": ()}, ["n0", "n1", "n0"], 0, 100) == [["n0", "n1"]]


def test_empty_candidates_yield_nothing_even_with_min_zero():
    assert _run(find_independent_subset_greedy, {"n0": ()}, [], 0, 100) == []


def test_greedy_round_on_bitsets():
    """One round: c1 depends on c0 (bit 0), so c1 waits; c3 is an input of c2 (bit 3 in c2's bitset),
    so c3 waits too; at most ``max_size`` members."""
    cands = ["c0", "c1", "c2", "c3"]
    anc = [0, 0b0001, 0b1000, 0]
    assert greedy_round(cands, anc, 10) == (["c0", "c2"], ["c1", "c3"])
    assert greedy_round(cands, anc, 1) == (["c0"], ["c1", "c2", "c3"])


def test_candidates_from_two_graphs_are_refused():
    a, b = build_graph({"n0": ()}), build_graph({"n0": ()})
    with pytest.raises(ValueError):
        list(find_independent_subset_greedy([a["n0"], b["n0"]], {"min_fuse_set_size": 0, "max_fuse_set_size": 9}))
