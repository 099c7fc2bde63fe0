"""``Report.patterns_fired`` counts the rewrites the extracted plan uses, the same way for every strategy:
greedy and eqsat report the same counts when they reach the same plan, and different ones when their plans
differ; egglog's match counts (``rule_matches``, the old figure) do neither."""

from __future__ import annotations

import torch

import optimus_eq
from conftest import dynamo_graph
from optimus_eq.horizontal import builders
from optimus_eq.patterns import PatternRegistry


def _fields(x, ws):
    h = torch.cat(list(torch.split(x, 8, dim=1)), dim=1)                 # split -> cat: junk
    ys = [torch.nn.functional.linear(p, w) for p, w in zip(torch.split(h, 8, dim=1), ws)]
    return torch.relu(torch.cat(ys, dim=1))                              # six linears to batch


def _both(f, *args, **options):
    gm, ex = dynamo_graph(f, *args)
    out = {}
    for s in ("greedy", "eqsat"):
        gm2, r = optimus_eq.optimize(gm, ex, strategy=s, **options)
        assert r.fallback is None, r.fallback
        torch.testing.assert_close(list(gm2(*ex)), list(gm(*ex)))
        out[s] = r
    return out["greedy"], out["eqsat"]


def test_same_plan_same_counts():
    x = torch.randn(4, 48)
    ws = [torch.randn(8, 8) for _ in range(6)]
    with torch.no_grad():
        g, e = _both(lambda x, *ws: _fields(x, ws), x, *ws)
    # the same plan: the same ops, cost and fate for every input op
    assert g.ops_after == e.ops_after and g.node_fates == e.node_fates
    assert abs(g.cost_after - e.cost_after) < 1e-6
    assert g.patterns_fired == e.patterns_fired
    assert g.patterns_fired["batch_linear"] == 1                          # one group of six, in both plans
    assert sum(g.patterns_fired.values()) > 1                             # the split/cat rewrites too
    assert g.rule_matches != e.rule_matches                               # what the old figure said


def _sub_registry():
    def sub_key(m):
        if m.recipe.name != "sub" or m.op != "Binary" or any(s != m.shape for s in m.in_shapes):
            return None
        return ("sub", m.signature, m.types, m.shape)

    registry = PatternRegistry()
    for pattern in optimus_eq.DEFAULT_REGISTRY:
        registry.register(pattern)
    registry.register(optimus_eq.HorizontalPattern(
        name="batch_sub", levels=("pre_grad",), doc="sub(x_i, y_i) => one sub of the stacks",
        group_key=sub_key, build=builders.build_pointwise, options={"min_fuse_set_size": 2}))
    return registry


def test_different_plans_different_counts():
    """Two subs batched cost more than they save (README, "Adding a pattern"): greedy fuses them all the same;
    eqsat offers the group and extraction keeps the subs. Both matched the group once."""
    xs = [torch.randn(8, 4) for _ in range(4)]
    g, e = _both(lambda a, b, c, d: [torch.sub(a, b).relu(), torch.sub(c, d).relu()], *xs,
                 registry=_sub_registry())
    assert g.cost_after > e.cost_after and g.ops_after != e.ops_after    # the plans differ
    assert g.rule_matches["batch_sub"] == e.rule_matches["batch_sub"] == 1
    assert g.patterns_fired["batch_sub"] == 1 and e.patterns_fired["batch_sub"] == 0
