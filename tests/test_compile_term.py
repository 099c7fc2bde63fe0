"""The cost model's opt-in first-call compile term (src/optimus_eq/cost.py, "First-call compile"):
``GPUCostModel.amortized(calls)`` charges each kernel Inductor generates its compile time spread over the
calls, and never an extern GEMM. Real dynamo graphs, real saturation and extraction; every optimized graph
is compared with eager (values and gradients, conftest.check)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from conftest import check, rand, two_gemms_one_lhs as _two_gemms_one_lhs
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


@pytest.mark.slow
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


def test_amortized_rejects_a_compile_term_that_is_not_finite():
    """``amortized(1e-310)`` gave ``compile_us = inf`` (accepted: ``inf >= 0``); every plan then cost inf, the
    ILP gave up ("ilp status Unknown") and any plan was "optimal". Now a ValueError, like calls <= 0."""
    for bad in (lambda: GPUCostModel().amortized(1e-310), lambda: GPUCostModel().amortized(1, float("inf")),
                lambda: GPUCostModel(compile_us=float("inf")), lambda: GPUCostModel.cudagraph(compile_us=float("inf"))):
        with pytest.raises(ValueError, match="finite"):
            bad()
    # an int too large for a float (a strategy name's N): the per-call model, not an OverflowError
    assert GPUCostModel().amortized(10 ** 400).compile_us == 0.0
    assert GPUCostModel().amortized(float("inf")).compile_us == 0.0
    m = GPUCostModel().amortized(10)
    assert dataclasses.replace(m, packed_parameters=True).compile_us == m.compile_us == 20000.0


def test_a_tensor_or_numpy_count_gives_a_float_compile_term():
    """``amortized(torch.tensor(10))`` (a step count read off a tensor) and ``GPUCostModel(compile_us=tensor)``
    kept the tensor: every generated kernel's cost, and ``report.cost_after``, became a float32 tensor
    (1400260.75 for a 1400260.7x us plan)."""
    import numpy as np

    for model in (GPUCostModel().amortized(torch.tensor(10)), GPUCostModel().amortized(np.int64(10)),
                  GPUCostModel(compile_us=torch.tensor(20000.0))):
        assert type(model.compile_us) is float and model == GPUCostModel().amortized(10)
    ins = [rand(1, 6, seed=1), rand(6, 2, seed=2), rand(6, 2, seed=3)]
    r = check(_two_gemms_one_lhs, ins, "eqsat", cost_model=GPUCostModel(compile_us=torch.tensor(200000.0))).report
    assert type(r.cost_after) is float and type(r.cost_before) is float
    with pytest.raises(TypeError, match="a number"):
        GPUCostModel(compile_us="5")


def test_grad_packing_prices_the_copy_kernel_it_saves_with_the_compile_term():
    """Under CUDA graphs the backend packs stacks with gradients only where their copy kernels cost more than
    packing's host time (``grad_packing_pays``); the copy is a kernel Inductor generates, so with
    ``compile_us`` it costs its first-call compile too, as extraction prices it (it used ``launch_us``)."""
    from optimus_bridge.backend import PACK_HOST_US_CUDAGRAPH, grad_packing_pays

    small = [[torch.nn.Parameter(torch.zeros(4, 4)) for _ in range(3)]]
    assert not grad_packing_pays(small, GPUCostModel.cudagraph())
    assert GPUCostModel.cudagraph().amortized(100).compile_us > PACK_HOST_US_CUDAGRAPH
    assert grad_packing_pays(small, GPUCostModel.cudagraph().amortized(100))
    assert not grad_packing_pays(small, GPUCostModel.cudagraph().amortized(1e9))
