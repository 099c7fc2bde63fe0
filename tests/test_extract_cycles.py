"""The exact solver's cycle handling and batching (``extract/ilp.py``, ``extract/driver.py``), against brute force.

- ``feedback_classes``: every cycle of a class graph passes through the returned classes (random digraphs).
- hub rows (the default: every cyclic SCC gets them in the first solve) and the lazy path (class-cycle cuts,
  hub rows from round ``ORDER_AFTER``): the ILP reaches the brute-force optimum of random cyclic e-graphs.
- a batch of components whose LP relaxation is fractional is halved until each component is solved alone
  (with the MIP): the plan is still the optimum of the union (brute force over each part).
"""

from __future__ import annotations

import random

import networkx as nx
import torch
import pytest

from optimus_eq.extract import ilp
from optimus_eq.extract.cycles import feedback_classes
from test_extract import SynthEGraph, _feasible_parts, brute_force, check_plan, disjoint_union, random_egraph


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_feedback_classes_break_every_cycle(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 40)
    members = list(range(100, 100 + n))
    kids: list[list[int]] = []
    vnodes: dict[int, list[int]] = {}
    edges = set()
    for c in members:
        vnodes[c] = []
        for _ in range(rng.randint(1, 3)):
            ks = [rng.choice(members) for _ in range(rng.randint(0, 3))] + [7]  # 7: a class outside
            vnodes[c].append(len(kids))
            kids.append(ks)
            edges.update((c, k) for k in ks if k != 7)
    hubs = feedback_classes(members, vnodes, kids)
    assert len(set(hubs)) == len(hubs) and set(hubs) <= set(members)
    rest = nx.DiGraph([(a, b) for a, b in edges if a not in hubs and b not in hubs])
    assert nx.is_directed_acyclic_graph(rest)
    if nx.is_directed_acyclic_graph(nx.DiGraph(list(edges))):
        assert hubs == []


def _cyclic_seeds(n: int) -> list[int]:
    out, seed = [], 0
    while len(out) < n:
        g = random_egraph(random.Random(seed))
        classes = nx.DiGraph((x.eclass, k) for x in g.nodes for k in x.children if k != x.eclass)
        if not nx.is_directed_acyclic_graph(classes) and brute_force(g)[0] is not None:
            out.append(seed)
        seed += 1
    return out


@pytest.mark.parametrize("order_after,max_hubs", [(0, 8), (1, 8), (99, 8), (0, 0), (1, 0)])
def test_hub_rows_and_lazy_cuts_reach_the_optimum(order_after, max_hubs, monkeypatch):
    """0: hub rows up front (the default); 1: after one round of class-cycle cuts; 99: class-cycle cuts only.
    ``max_hubs`` 0: every SCC gets topological-order variables instead of hub rows (the fallback for SCCs
    with many hubs)."""
    monkeypatch.setattr(ilp, "ORDER_AFTER", order_after)
    monkeypatch.setattr(ilp, "MAX_HUBS", max_hubs)
    rounds = []
    for seed in _cyclic_seeds(60):
        g = random_egraph(random.Random(seed))
        opt, _ = brute_force(g)
        ex = g.extract("ilp")
        if order_after == 99 and ex.method != "ilp" and "no choice" not in ex.note:
            # cuts only may run out of rounds: the fast plan answers
            assert "cycle rounds exhausted" in ex.note and check_plan(g, ex) >= opt - 1e-9
            continue
        assert check_plan(g, ex) == pytest.approx(opt, abs=1e-6), (seed, ex.note)
        assert ex.method == "ilp" or "no choice" in ex.note, (seed, ex.method, ex.note)
        rounds.append(ex.ilp_rounds)
    if order_after == 0:
        assert max(rounds) == 1  # hub rows (or order variables) rule out every cycle: no round cuts one
    else:
        assert max(rounds) >= 2


def test_class_cycle_cut_forbids_every_e_node_sequence_of_the_cycle():
    """Classes a, b with two e-nodes each that need the other class (and a leaf each): the cut from one
    cyclic plan forbids all four 2-cycles; the optimum is one leaf and one op."""
    g = SynthEGraph()
    a, b = g.eclass(), g.eclass()
    for c, d in ((a, b), (b, a)):
        g.node(c, "Leaf", [], 10)
        g.node(c, "Unary", [d], 1)
        g.node(c, "Neg", [d], 1.5)
    g.roots = [a, b]
    opt, _ = brute_force(g)
    assert opt == 11
    ex = g.extract("ilp")
    assert check_plan(g, ex) == opt and ex.method == "ilp"


def test_a_batch_with_a_fractional_relaxation_is_split(monkeypatch):
    """Force every batch's relaxation to count as fractional: each is halved down to single components,
    each solved with the MIP, and the plan is the optimum of the union."""
    real = ilp._milp
    calls = []

    def milp(cost, rows, cols, vals, lo, hi, n_int, ub, seconds, start=None, lp_only=False, relax_first=True):
        calls.append(lp_only)
        return (ilp.FRACTIONAL if lp_only else
                real(cost, rows, cols, vals, lo, hi, n_int, ub, seconds, start, relax_first=relax_first))

    monkeypatch.setattr(ilp, "_milp", milp)
    monkeypatch.setattr("optimus_eq.extract.driver.component_bound", lambda *a, **k: None)  # no bound closes
    parts, opt = _feasible_parts(7000, 6)
    g = disjoint_union(parts)
    ex = g.extract("auto")
    st = ex.stats
    assert st["exact_split"] >= 1 and True in calls and False in calls
    assert "fractional LP relaxation halved" in ex.note
    assert st["exact_components"] + len(st["exact_failed"]) == st["components"]
    assert not st["exact_failed"] and st["exact_optimal"] == st["exact_components"]
    assert check_plan(g, ex) == pytest.approx(opt, abs=1e-6)


def test_exact_budgets_stretch_with_the_load(monkeypatch):
    from optimus_eq.extract import driver

    monkeypatch.setattr(driver.os, "cpu_count", lambda: 2)
    for load, want in ((0.3, 1.0), (2.0, 1.0), (9.0, 4.5), (100.0, driver.MAX_LOAD_SHARE)):
        monkeypatch.setattr(driver.os, "getloadavg", lambda load=load: (load, load, load))
        assert driver.wall_per_cpu_second() == want
    budgets = []
    real = ilp._ILP.solve

    def solve(self, group, seconds, *args, **kw):
        budgets.append(seconds)
        return real(self, group, seconds, *args, **kw)

    monkeypatch.setattr(ilp._ILP, "solve", solve)
    monkeypatch.setattr("optimus_eq.extract.driver.component_bound", lambda *a, **k: None)
    parts, _ = _feasible_parts(7000, 2)
    g = disjoint_union(parts)
    monkeypatch.setattr(driver.os, "getloadavg", lambda: (2.0, 2.0, 2.0))
    g.extract("auto")
    quiet = list(budgets)
    budgets.clear()
    monkeypatch.setattr(driver.os, "getloadavg", lambda: (8.0, 8.0, 8.0))
    g.extract("auto")
    assert quiet and budgets == pytest.approx([4 * b for b in quiet])


@pytest.mark.slow
def test_dlrm_cycles_are_ruled_out_in_one_solve(monkeypatch):
    """DLRM (cpu preset, inference): the pooled embeddings' cat, the narrows of that cat and the list cells form
    a cyclic SCC that pruning keeps (a piece is a narrow of the cat, or the bag itself). With hub rows the ILP
    proves its plan optimal in one round; the lazy cuts (hub rows from round 3) reach the same cost in more."""
    import optimus_eq
    import optimus_eq.api as api
    from optimus_bench.models import build
    from optimus_eq.cost import GPUCostModel
    from optimus_eq.extract import extract
    from optimus_eq.extract.prune import _prepare
    from optimus_eq.extract.tree import _Problem

    from conftest import dynamo_graph

    case = build("dlrm", "cpu")
    with torch.no_grad():
        gm, ex_in = dynamo_graph(case.model.eval(), *case.inputs)
    calls = []
    real = api.extract

    def spy(view, roots, forced, model=None, **kw):
        calls.append((view, roots, forced))
        return real(view, roots, forced, model, **kw)

    monkeypatch.setattr(api, "extract", spy)
    optimus_eq.optimize(gm, ex_in, strategy="eqsat", cost_model=GPUCostModel(training=False))
    view, roots, forced = calls[-1]
    model = GPUCostModel(training=False)
    view.assign_costs(model, forced)
    p = _Problem(view, forced)
    tree = p.tree()
    prep = _prepare(p, tree, list(dict.fromkeys(p.cid[r] for r in roots)), 4000)
    assert (prep.cyclic & prep.reach & ~prep.fixed).any()  # a cycle the ILP must rule out
    got = extract(view, roots, forced, model, method="ilp", seconds=120)
    assert got.method == "ilp" and got.ilp_rounds == 1, got.note
    monkeypatch.setattr(ilp, "ORDER_AFTER", 3)
    lazy = extract(view, roots, forced, model, method="ilp", seconds=120)
    assert lazy.method == "ilp" and lazy.ilp_rounds >= 2, lazy.note
    assert lazy.dag_cost == pytest.approx(got.dag_cost, abs=1e-6)


@pytest.mark.parametrize("seed", [7000, 7100, 7200])
def test_components_with_a_cycle_over_their_limit_keep_the_fast_plan(seed, monkeypatch):
    """``EXACT_MAX_CYCLIC_NODES`` (0 here): every component with a cycle and no lower bound keeps the fast
    plan (listed in ``over_limit``, never solved); the others are still solved, and the plan is valid, no
    dearer than the fast plan and no cheaper than the optimum (brute force over each part)."""
    from optimus_eq.extract import driver

    parts, opt = _feasible_parts(seed, 6)
    g = disjoint_union(parts)
    whole = g.extract("auto").stats
    solved: list[int] = []
    real = ilp._ILP.solve

    def solve(self, group, *args, **kw):
        solved.append(any(self.cyclic[c] for c in group))
        return real(self, group, *args, **kw)

    monkeypatch.setattr(ilp._ILP, "solve", solve)
    monkeypatch.setattr(driver, "EXACT_MAX_CYCLIC_NODES", 0)
    ex = g.extract("auto")
    st = ex.stats
    assert not any(solved), "a component with a cycle went to HiGHS"
    assert st["components"] == whole["components"] and not whole["over_limit"]
    assert len(st["over_limit"]) + st["exact_components"] + st["bound_closed"] == st["components"]
    assert opt - 1e-9 <= check_plan(g, ex) <= st["fast_cost"] + 1e-9
    if st["over_limit"]:
        assert "with a cycle" in ex.note


@pytest.mark.parametrize("seed", range(6))
def test_graph_routines_give_the_same_labels_in_networkx_and_scipy(monkeypatch, seed):
    """prune's reachability, strong components (with the cycle mask) and weak components: networkx (small graphs)
    and scipy.sparse.csgraph (large ones) give identical canonical labels on random sparse digraphs with cycles,
    self loops, duplicate edges and isolated classes."""
    import numpy as np

    from optimus_eq.extract import prune

    rng = np.random.default_rng(seed)
    C = int(rng.integers(1, 60))
    E = int(rng.integers(0, 3 * C))
    src, dst = rng.integers(0, C, E), rng.integers(0, C, E)
    roots = sorted(set(rng.integers(0, C, 3).tolist()))

    def run(use_scipy):
        monkeypatch.setattr(prune, "_scipy", lambda n: use_scipy)
        reach = prune._bfs(C, src, dst, roots)
        scc, cyclic = prune._sccs(C, src, dst)
        return reach, scc, cyclic, prune._component_labels(C, src, dst, strong=False)

    for a, b in zip(run(True), run(False)):
        np.testing.assert_array_equal(a, b)
    scc = run(False)[1]
    assert scc[0] == 0 and all(scc[: k + 1].max() + 1 >= scc[k + 1] for k in range(C - 1))  # canonical order
