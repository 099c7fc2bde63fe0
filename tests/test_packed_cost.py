"""Pricing packed parameters (``GPUCostModel.packed_parameters``): the backend packs a stack or cat of
parameters into one buffer (bridge/optimus_bridge/param_pack.py), so the cost model must not charge that
stack's copy. Found on the H200 (bench/results/h200_2026-12-02d): under the CUDA-graph cost model, where a
kernel costs 2.3 us and bytes weigh ten times more, eqsat left DLRM's 26 embedding bags unbatched because
it priced a copy of every table on every call, a copy the packed backend never runs: 1,065 kernels per
training step against greedy's 229, 8.1 ms against 4.3 ms.

Differential: the optimized module against eager, and the decision read from the optimized graph.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import optimus_eq
from optimus_eq.cost import GPUCostModel
import pytest


class Bags(nn.Module):
    """Eight embedding-bag tables of 100,000 x 16 (6.4 MB each) read by eight id tensors [batch, 4]."""

    def __init__(self, tables: int = 8, rows: int = 100_000, dim: int = 16):
        super().__init__()
        self.tables = nn.ParameterList(nn.Parameter(torch.randn(rows, dim) * 0.1) for _ in range(tables))

    def forward(self, *ids):
        return torch.cat([F.embedding_bag(i, t, mode="sum") for i, t in zip(ids, self.tables)], dim=1)


def _inputs(tables: int = 8, batch: int = 32):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 100_000, (batch, 4), generator=g) for _ in range(tables)]


def _graph(model, ids):
    seen = {}

    def grab(gm, example_inputs):
        seen["gm"], seen["inputs"] = gm, example_inputs
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=grab)(*ids)
    return seen["gm"], seen["inputs"]


def _bag_calls(gm) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and "embedding" in str(n.target))


@pytest.mark.slow
def test_cudagraph_model_batches_packed_tables_and_not_copied_ones():
    m, ids = Bags().eval(), _inputs()
    gm, inputs = _graph(m, ids)
    want = m(*ids)
    unpacked, _ = optimus_eq.optimize(gm, inputs, strategy="eqsat", cost_model=GPUCostModel.cudagraph())
    packed, rep = optimus_eq.optimize(gm, inputs, strategy="eqsat",
                                      cost_model=GPUCostModel.cudagraph(packed_parameters=True))
    # a copy of 51 MB of tables (25.6 us at 4 TB/s) costs more than eight launches inside a CUDA graph
    # (18 us): not batched; with the tables packed (no copy), one lookup wins
    assert _bag_calls(unpacked) == 8
    assert _bag_calls(packed) == 1
    assert "packed parameters" in rep.cost_model
    for g in (unpacked, packed):
        got = g(*inputs)
        torch.testing.assert_close(got[0] if isinstance(got, (tuple, list)) else got, want)


def test_backend_prices_its_own_packing_in_a_users_cost_model():
    """``optimus_eq.backend`` packs by default, so it sets ``packed_parameters`` in the cost model it is
    given; with ``pack_parameters=False`` the user's model is used as it is."""
    m, ids = Bags().eval(), _inputs()
    want = m(*ids)
    for pack in (True, False):
        optimus_eq.last_reports.clear()
        torch._dynamo.reset()
        f = torch.compile(m, backend=optimus_eq.backend(strategy="eqsat", compile=False, pack_parameters=pack,
                                                        cost_model=GPUCostModel.cudagraph()))
        with torch.no_grad():
            torch.testing.assert_close(f(*ids), want)
        (rep,) = optimus_eq.last_reports
        assert ("packed parameters" in rep.cost_model) == pack
        assert (rep.patterns_fired.get("batch_embedding_bag", 0) == 1) == pack
        assert any(n.startswith("parameter packing: 8 parameters") for n in rep.notes) == pack
