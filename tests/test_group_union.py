"""eqsat's horizontal round also offers the union of its groups, so it reaches greedy's wider group.

Issue 15 ("eqsat worse than greedy"): in each cross layer of DLRM, 4 expert gates (N 1) and 4 ``V`` linears read the
layer's input, with one ``batch_linear_lhs`` key. eqsat's round, which takes groups from 2 members, found the 4
gates together by the search from their stack and the ``V`` linears by their shared input, and offered only those
two groups; greedy's minimum of 5 skips the 4 gates and fuses all 8 as one linear. eqsat's plan was dearer than
greedy's by eqsat's own cost model. Now the round offers the union too (``PlanGraph.groups``, ``overlap``), and
extraction decides by cost. The module here is that layer in small: ranks differ, so no other rule batches the
experts, and the one useful group is the union.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import optimus_eq
from optimus_eq.cost import GPUCostModel

from conftest import dynamo_graph, rand


class CrossLayer(nn.Module):
    """A mixture-of-low-rank-experts cross layer: gates and ``V`` linears of different out-features on one input."""

    def __init__(self, width: int = 32, ranks=(4, 8, 12, 16)) -> None:
        super().__init__()
        self.gates = nn.ModuleList(nn.Linear(width, 1, bias=False) for _ in ranks)
        self.v = nn.ModuleList(nn.Linear(width, r, bias=False) for r in ranks)
        self.u = nn.ModuleList(nn.Linear(r, width, bias=False) for r in ranks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        experts = torch.stack([u(torch.relu(v(x))) for v, u in zip(self.v, self.u)], dim=2)   # [B, N, K]
        gating = torch.softmax(torch.stack([g(x) for g in self.gates], dim=1), dim=1)      # [B, K, 1]
        return torch.bmm(experts, gating).squeeze(2) + x


def _price(gm, example_inputs, train: bool, model: GPUCostModel) -> float:
    """``model``'s cost of ``gm`` as it stands: captured again by dynamo, priced as an input graph
    (``bench/cost_modes.py``'s ``price``)."""
    graphs = []

    def backend(g, ex):
        graphs.append((g, ex))
        return g.forward

    torch._dynamo.reset()
    with torch.set_grad_enabled(train):
        torch.compile(gm, backend=backend)(*example_inputs)
    assert len(graphs) == 1
    g2, ex2 = graphs[0]
    _, rep = optimus_eq.optimize(g2, ex2, strategy="greedy", patterns=["normalization_pass"], cost_model=model)
    return rep.cost_before


def _capture(fn, inputs, train: bool):
    with torch.set_grad_enabled(train):
        return dynamo_graph(fn, *inputs)


def _linears(gm) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target is torch._C._nn.linear)


@pytest.mark.slow
@pytest.mark.parametrize("train", [True, False], ids=["train", "inference"])
@pytest.mark.parametrize("mode", ["launch", "cudagraph"])
def test_eqsat_reaches_greedys_union_group(mode, train):
    torch.manual_seed(0)
    net = CrossLayer()
    x = rand(64, 32, seed=1).requires_grad_(train)
    gm, ex = _capture(lambda x: net(x).sum() if train else net(x), [x], train)
    model = (GPUCostModel.cudagraph if mode == "cudagraph" else GPUCostModel)(packed_parameters=True, training=train)
    plans = {}
    for strategy in ("greedy", "eqsat"):
        out, rep = optimus_eq.optimize(gm, ex, strategy=strategy, cost_model=model)
        assert not rep.fallback
        plans[strategy] = out, _price(out, ex, train, model)
        assert_matches_eager(net, out, ex, x, train)
    (greedy, g_cost), (eqsat, e_cost) = plans["greedy"], plans["eqsat"]
    # greedy fuses the 8 linears on x into one; eqsat reaches that plan and pays no more for it
    assert _linears(greedy) == 1 + 4
    assert e_cost <= g_cost + 1e-6
    assert _linears(eqsat) <= _linears(greedy)


def assert_matches_eager(net, out, ex, x, train: bool) -> None:
    """``out`` (``net`` optimized, captured with example inputs ``ex`` holding ``x``) gives eager's values, dtype and
    strides, and in training eager's gradients of ``x`` and of every weight of ``net``."""
    xe, xo = x.detach().clone().requires_grad_(train), x.detach().clone().requires_grad_(train)
    with torch.set_grad_enabled(train):
        want = net(xe).sum() if train else net(xe)
        res = out(*[xo if e is x else e for e in ex])
    got = res[0] if isinstance(res, (tuple, list)) else res
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got.dtype == want.dtype and got.stride() == want.stride()
    if train:
        weights = list(net.parameters())
        for w, g in zip(torch.autograd.grad(want, [xe, *weights]), torch.autograd.grad(got, [xo, *weights])):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
