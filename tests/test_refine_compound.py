"""The local search alone reaches the union of a horizontal round's groups (``refine.py``'s compound move).

eqsat's horizontal round offers the 4 gates (N 1), the 4 ``V`` linears and their union as groups
(tests/test_group_union.py, DESIGN "Unions of a round's groups"). Choosing the union takes two moves together:
the ``V`` members switch to the union's narrows (a little dearer alone: the union GEMM is paid while the ``V``
GEMM goes), and only then can the gates switch too and leave their own group GEMM. One-class, group and drop
moves each make one of them, so with the exact solver off (``ilp_max_nodes=0``: every component is left to the
fast plan, as one over the limit is) the fast plan kept the two groups; the compound move makes both as one and
reaches the plan the ILP finds. Values and gradients are checked against eager.
"""

from __future__ import annotations

import pytest
import torch

import optimus_eq
from optimus_eq.cost import GPUCostModel

from conftest import rand
from test_group_union import CrossLayer, _capture, _linears, assert_matches_eager


@pytest.mark.parametrize("train", [True, False], ids=["train", "inference"])
@pytest.mark.parametrize("mode", ["launch", "cudagraph"])
def test_local_search_alone_reaches_the_union(mode, train):
    torch.manual_seed(0)
    net = CrossLayer()
    x = rand(64, 32, seed=1).requires_grad_(train)
    gm, ex = _capture(lambda x: net(x).sum() if train else net(x), [x], train)
    model = (GPUCostModel.cudagraph if mode == "cudagraph" else GPUCostModel)(packed_parameters=True, training=train)
    exact, rep_exact = optimus_eq.optimize(gm, ex, strategy="eqsat", cost_model=model)
    fast, rep_fast = optimus_eq.optimize(gm, ex, strategy="eqsat", cost_model=model, ilp_max_nodes=0)
    assert not rep_fast.fallback and not rep_exact.fallback
    # the exact solver did not run: the plan is the fast one (tree plan + local search)
    assert rep_fast.extractor == "tree+refine", rep_fast.extract_note
    assert rep_fast.extraction.get("fast_cost") == pytest.approx(rep_fast.cost_after)
    # ... and it is the union plan: one linear for the 8 on x (plus the 4 ``U``), at the ILP's cost
    assert _linears(exact) == 1 + 4
    assert _linears(fast) == 1 + 4
    assert rep_fast.cost_after == pytest.approx(rep_exact.cost_after, rel=1e-9)
    assert rep_fast.cost_after < rep_fast.extraction["tree_cost"]
    assert_matches_eager(net, fast, ex, x, train)  # values, and in training every gradient
