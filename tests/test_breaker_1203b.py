"""Breaker 1203b (session 17, brk17): the opt-in first-call compile term (``GPUCostModel.compile_us``,
``amortized(calls)``) and the bench's ``<s>-amortized<N>`` / ``<s>-without-<p>`` strategy names."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import optimus_eq
from conftest import check, rand
from optimus_bench import strategies
from optimus_eq.cost import GPUCostModel


# -- the model: an infinite term makes every plan cost inf ------------------------------------------

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


# -- the strategy names ---------------------------------------------------------------------------

def test_amortized_and_without_names_compose_in_either_order_alone():
    """``eqsat-without-p-amortized5`` failed ("not pre-grad pattern(s) ['p-amortized5']") and
    ``eqsat-amortized5-without-p`` resolved only when ``eqsat-amortized5`` was named before it."""
    for name in ("eqsat-without-batch_gemm_lhs-amortized5", "eqsat-amortized5-without-batch_gemm_lhs",
                 "greedy-cudagraphs-without-batch_gemm_lhs+batch_linear_lhs-amortized7"):
        (s,) = strategies.resolve([name])
        model = s.backend_options["cost_model"]
        calls = 7 if name.startswith("greedy") else 5
        expect = (GPUCostModel.cudagraph() if s.cudagraphs else GPUCostModel()).amortized(calls)
        assert model == expect, name
        assert "batch_gemm_lhs" not in s.backend_options["patterns"] and s.backend_options["patterns"]
        assert s.optimus_strategy == name.split("-")[0]


def test_amortized_names_take_plain_ascii_counts_only():
    """``\\d`` took Arabic-Indic digits (``eqsat-amortized١٠`` ran as N = 10), ``eqsat-amortized01`` was a
    second name of ``eqsat-amortized1`` (results are keyed by name), and an N too large for a float raised an
    OverflowError instead of the ValueError ``resolve`` documents."""
    with pytest.raises(ValueError, match="unknown strategy"):
        strategies.resolve(["eqsat-amortized\u0661\u0660"])
    with pytest.raises(ValueError, match="leading zeros"):
        strategies.resolve(["eqsat-amortized01"])
    (s,) = strategies.resolve(["eqsat-amortized" + "9" * 400])
    assert s.backend_options["cost_model"].compile_us == 0.0
    with pytest.raises(ValueError, match="N > 0"):
        strategies.resolve(["eqsat-without-batch_gemm_lhs-amortized0"])


def test_a_calibrated_cost_model_keeps_the_amortized_strategys_compile_term(monkeypatch, tmp_path):
    """``optimus-eq bench --cost-model cal.json --strategies eqsat-amortized1000``: the runner hands the
    calibrated model to ``Strategy.compile``, whose ``{**backend_options, **optimus_options}`` replaced the
    strategy's amortized model: the cell ran the per-call model under the amortized name."""
    seen = []
    monkeypatch.setattr(strategies.optimus_eq, "backend", lambda **kw: seen.append(kw) or "backend")
    monkeypatch.setattr(strategies.torch, "compile", lambda m, **kw: m)
    cal = {"launch_us": 10.0, "bytes_per_us": 1e6, "launch_us_cudagraph": 1.5}
    opts = {"cost_model": GPUCostModel.from_calibration(cal),
            "cost_model_cudagraph": GPUCostModel.from_calibration(cal, execution="cudagraph")}
    plain, graphs, per_call = strategies.resolve(["eqsat-amortized1000", "eqsat-cudagraphs-amortized10", "eqsat"])
    for s in (plain, graphs, per_call):
        s.compile(torch.nn.Linear(2, 2), dict(opts))
    assert seen[0]["cost_model"] == GPUCostModel.from_calibration(cal).amortized(1000)
    assert seen[1]["cost_model"] == GPUCostModel.from_calibration(cal, execution="cudagraph").amortized(10)
    assert seen[2]["cost_model"] == GPUCostModel.from_calibration(cal)  # no compile term where none was asked


# -- extraction under the term ---------------------------------------------------------------------

def _identity_cat(x):
    v = x.clamp(-0.5, 0.5)
    return v + x, torch.cat([v], -2)


@pytest.mark.parametrize("trace_grad", [False, True])
def test_a_self_cyclic_e_node_does_not_cost_a_fused_chain_its_credit(trace_grad):
    """``cat([v])`` merges into ``v``'s e-class as an e-node reading its own class (in no acyclic plan). The
    fusion credit asks that every e-node of the input class be pointwise, so it denied ``v + x`` its credit:
    the plan (the input minus the cat) cost one kernel more than the input graph, 46.6 -> 69.9 us per call in
    training, 600k -> 1,000k us under ``amortized(1)`` (fuzzing seed 75). Self-cyclic e-nodes are now
    ignored there (extract/fusion.py ``_self_cyclic``)."""
    for model in (GPUCostModel(), GPUCostModel().amortized(1), GPUCostModel.cudagraph().amortized(1000)):
        r = check(_identity_cat, [rand(4, 6, 3, seed=1)], "eqsat", trace_grad=trace_grad, cost_model=model).report
        assert r.cost_after < r.cost_before, (model.describe(), r.cost_before, r.cost_after)
        assert r.ops_after.get("cat", 0) == 0


def _two_gemms_one_lhs(x, a, b):
    return torch.sigmoid(x @ a) * 2 + torch.sigmoid(x @ b) * 3


def test_a_short_horizon_never_returns_a_plan_dearer_than_the_input_by_its_own_model():
    """Was a strict xfail: the fusion credit is per e-class; once pointwise_through_slice puts
    narrow(sigmoid(cat-GEMM)) into sigmoid(x @ a)'s class, `* 2` lost its credit in every plan, the input plan
    was priced a kernel dearer than ``input_cost`` prices it, and eqsat picked the batch_gemm_lhs plan (a cat
    kernel more) that its own model prices 400k -> 600k us under amortized(1). Now such a plan is priced again
    as the input is, and the input graph is kept (plan_check.dearer_than_input)."""
    model = GPUCostModel(training=False).amortized(1)
    ins = [rand(1, 6, seed=1), rand(6, 2, seed=2), rand(6, 2, seed=3)]
    r = check(_two_gemms_one_lhs, ins, "eqsat", cost_model=model).report
    assert r.cost_after <= r.cost_before, (r.cost_before, r.cost_after, dict(r.patterns_fired))


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
