"""``Report.cost_before`` (:func:`optimus_eq.extract.input_cost`) and ``Report.cost_after`` (extraction) price
the same graph by the same rules. Found on DLRM (gpu preset, ``packed_parameters``): ``cost_before`` paid
~333 us of table copies (a stack of ``nn.Parameter``) that extraction prices as a view of the packed
buffer (``extract.grad.packed_cats``) and that the packed backend never runs.

A graph with nothing to rewrite: its plan is the input graph, so the two prices must be equal.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import optimus_eq
from optimus_eq.cost import GPUCostModel


class StackedWeights(nn.Module):
    """Four 256 x 256 weights stacked (one 1 MB copy unless packed), then one batched GEMM."""

    def __init__(self):
        super().__init__()
        self.ws = nn.ParameterList(nn.Parameter(torch.randn(256, 256) * 0.1) for _ in range(4))

    def forward(self, x):
        return torch.bmm(torch.stack(list(self.ws)), x).relu()


def _graph(model, args):
    seen = {}

    def grab(gm, example_inputs):
        seen["gm"], seen["inputs"] = gm, example_inputs
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=grab)(*args)
    return seen["gm"], seen["inputs"]


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
@pytest.mark.parametrize("training", [False, True])
def test_cost_before_prices_packed_parameter_stack_as_extraction_does(strategy, training):
    m, x = StackedWeights(), torch.randn(4, 256, 64)
    if training:
        gm, inputs = _graph(m, [x])
    else:
        with torch.no_grad():
            gm, inputs = _graph(m.eval(), [x])
    costs = {}
    for packed in (False, True):
        model = GPUCostModel.cudagraph(packed_parameters=packed, training=training)
        out, rep = optimus_eq.optimize(gm, inputs, strategy=strategy, cost_model=model)
        assert rep.cost_before == pytest.approx(rep.cost_after, rel=1e-9), (packed, rep.cost_before, rep.cost_after)
        costs[packed] = rep.cost_before
        got = out(*inputs)
        torch.testing.assert_close(got[0] if isinstance(got, (tuple, list)) else got, m(x))
    assert costs[True] < costs[False]  # the stack's copy is not paid


def test_plan_with_packed_tables_recaptured_costs_what_extraction_said():
    """The plan's own price (``cost_after``) equals the price of its lowered graph captured again and priced
    as an input graph: batch_embedding_bag's stack of eight tables is a view of the packed buffer on both
    sides (on DLRM, gpu preset, the re-captured plan paid 340 us more: the tables' copies)."""
    from test_packed_cost import Bags, _inputs

    m, ids = Bags().eval(), _inputs()
    with torch.no_grad():
        gm, inputs = _graph(m, ids)
    model = GPUCostModel.cudagraph(packed_parameters=True)
    out, rep = optimus_eq.optimize(gm, inputs, strategy="eqsat", cost_model=model)
    assert rep.patterns_fired.get("batch_embedding_bag", 0) == 1
    with torch.no_grad():
        g2, inputs2 = _graph(out, inputs)
    assert any(type(x) is nn.Parameter for x in inputs2)
    _, rep2 = optimus_eq.optimize(g2, inputs2, strategy="greedy", patterns=["normalization_pass"], cost_model=model)
    # what is left is a capture artifact, not packing: the plan's select_shifted_cat (the lookup's ids, one
    # FX call priced as one kernel) is re-traced by Dynamo into per-table index ops (ge, lt, where, add),
    # about one launch per table (18.28 us here); the eight tables' copies added 27.9 us more before the fix
    assert 0 <= rep2.cost_before - rep.cost_after < 8 * model.launch_us * 1.01
