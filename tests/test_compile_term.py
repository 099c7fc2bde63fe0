"""The cost model's opt-in first-call compile term (src/optimus_eq/cost.py, "First-call compile"):
``GPUCostModel.amortized(calls)`` charges each kernel Inductor generates its compile time spread over the
calls, and never an extern GEMM. Real dynamo graphs, real saturation and extraction; every optimized graph
is compared with eager (values and gradients, conftest.check)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import check, rand
from optimus_eq.cost import COMPILE_S_PER_KERNEL, GPUCostModel


def test_amortized_charges_generated_kernels_and_never_an_extern_gemm():
    per_call, short = GPUCostModel(), GPUCostModel().amortized(1000)
    extra = COMPILE_S_PER_KERNEL * 1e6 / 1000
    assert short.compile_us == pytest.approx(extra) and per_call.compile_us == 0
    assert short.node_cost("Unary", 4096, [4096], False) == pytest.approx(per_call.node_cost("Unary", 4096, [4096], False) + extra)
    assert short.node_cost("Cat", 4096, [2048, 2048], False) == pytest.approx(per_call.node_cost("Cat", 4096, [2048, 2048], False) + extra)
    assert short.backward_cost("Binary", 64, [64, 64], 2, False) == pytest.approx(
        per_call.backward_cost("Binary", 64, [64, 64], 2, False) + 2 * extra)
    for model in (per_call, short):  # views and fused ops generate no kernel of their own
        assert model.node_cost("Permute", 64, [64], False) == per_call.node_cost("Permute", 64, [64], False)
        assert model.fused_cost(64, [64]) == per_call.fused_cost(64, [64])
    # cuBLAS compiled its GEMMs already: an mm and its backward's two mms pay the launch only; a bias's
    # gradient is a reduction Inductor generates
    shapes = ([256, 128], [[256, 64], [64, 128]])
    assert short.gemm_cost("mm", *shapes) == per_call.gemm_cost("mm", *shapes)
    assert short.gemm_backward_cost("mm", *shapes, [True, True]) == per_call.gemm_backward_cost("mm", *shapes, [True, True])
    addmm = ([256, 128], [[128], [256, 64], [64, 128]])
    assert short.gemm_backward_cost("addmm", *addmm, [True, True, True]) == pytest.approx(
        per_call.gemm_backward_cost("addmm", *addmm, [True, True, True]) + extra)
    assert short.grad_copy_cost(4096) == per_call.grad_copy_cost(4096)  # eager's AccumulateGrad copy
    assert GPUCostModel.cudagraph().amortized(10).execution == "cudagraph"
    assert "compile 200 us per generated kernel" in short.describe()
    for bad in (lambda: per_call.amortized(0), lambda: per_call.amortized(-5), lambda: per_call.amortized(10, -1.0),
                lambda: GPUCostModel(compile_us=-1.0), lambda: per_call.amortized(float("nan"))):
        with pytest.raises(ValueError, match="calls must be > 0|compile_us must be >= 0"):
            bad()


class _SharedLhs(torch.nn.Module):
    """``permute(x) @ P`` and ``linear(permute(x), W)``: a ``batch_gemm_lhs`` group (Wukong's FMB and LCB
    read one permuted input the same way)."""

    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(rand(64, 32, seed=1))
        self.w = torch.nn.Parameter(rand(48, 64, seed=2))

    def forward(self, x):
        x = x.permute(0, 2, 1)
        return (x @ self.p).relu().sum() + F.linear(x, self.w).tanh().sum()


def test_a_short_horizon_keeps_the_gemms_the_per_call_model_merges():
    """Per call, one GEMM on ``cat([P.T, W])`` and a split beat two GEMMs; the cat is a kernel Inductor
    generates, so with a first call spread over 100 calls the two cuBLAS calls win. Both plans match eager."""
    m, x = _SharedLhs(), rand(16, 64, 8, seed=3)
    plans = {}
    for name, model in (("per call", GPUCostModel()), ("1e9 calls", GPUCostModel().amortized(1e9)),
                        ("100 calls", GPUCostModel().amortized(100))):
        res = check(m, [x], "eqsat", trace_grad=True, cost_model=model)
        plans[name] = (res.report.patterns_fired.get("batch_gemm_lhs", 0), res.gm2.code)
    assert plans["per call"][0] > 0 and plans["100 calls"][0] == 0
    assert plans["1e9 calls"] == plans["per call"]  # a long horizon is the per-call model
