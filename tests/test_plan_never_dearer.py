"""eqsat never returns a plan that its own cost model prices above the input graph.

Extraction prices the fusion credit per e-class, so on some graphs it priced the input plan dearer than
``input_cost`` does and picked a plan dearer than the input (GEMM fuzz seeds 7, 17, 28, 29, 33, 46, 51,
53 of 0-59; up to +89% under ``amortized(1)``), or reported a plan as dearer that is not (fuzz seeds 12, 138,
147, 185, 196). The lowered plan is now priced again as the input is; a plan still dearer gives way to the
input graph (``plan_check.dearer_than_input``). Checked here by the report, by eager (values, gradients) and, for a
plan kept, by what Inductor would emit (the kernel predictor, CUDA rules).

A plan dearer than the input by no more than float rounding is kept; taso and tensat are guarded as eqsat is
(greedy is not: it applies every rewrite, as Optimus does); a note says by how much the plan was dearer and, in a
graph optimized per segment, which segment kept its input; ``optimus-eq explain`` says so too."""

from __future__ import annotations

import warnings

import pytest
import torch

import fuzzing
import fuzzing_gemm
import optimus_eq
from conftest import check, dynamo_graph, rand, two_gemms_one_lhs as _two_gemms_one_lhs
from optimus_bridge.inductor_kernels import predict_module
from optimus_eq.cost import GPUCostModel

MODELS = {"per_call": GPUCostModel(), "amortized1": GPUCostModel().amortized(1)}


@pytest.mark.parametrize("seed", [7, 28, 46, 53])
@pytest.mark.parametrize("model", list(MODELS))
def test_gemm_programs_get_no_plan_dearer_than_their_input(seed, model):
    program = fuzzing_gemm.generate(seed)
    fn, make_inputs = program.compile()
    outcome = fuzzing.run_program(fn, make_inputs, ("eqsat",), level=program.level, dynamic=program.dynamic,
                                  pattern_options=program.pattern_options, cost_model=MODELS[model])["eqsat"]
    assert outcome.kind == "ok", (outcome.kind, outcome.cause, program.script("eqsat"))
    for r in outcome.reports:
        assert r.cost_after <= r.cost_before, (r.cost_before, r.cost_after, r.notes)


def _capture(program):
    fn, make_inputs = program.compile()
    return dynamo_graph(fn, *make_inputs()[0], dynamic=program.dynamic), make_inputs


@pytest.mark.slow
@pytest.mark.parametrize("model", list(MODELS))
def test_a_plan_extraction_overpriced_is_kept_and_emits_no_more_kernels(model):
    """Fuzz seed 185: extraction priced eqsat's plan 23.3 -> 46.6 us; as lowered it drops a
    ``slice_scatter`` kernel. It is kept, reported at no more than the input, and right."""
    program = fuzzing.generate(185)
    assert program.level == "pre_grad"
    (gm, example_inputs), make_inputs = _capture(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, report = optimus_eq.optimize(gm, example_inputs, "eqsat", cost_model=MODELS[model],
                                          pattern_options=program.pattern_options)
    assert out is not gm and not any("kept the input graph" in n for n in report.notes)
    assert report.cost_after <= report.cost_before
    training = any(getattr(x, "requires_grad", False) for x in example_inputs)
    before = predict_module(gm, example_inputs, "cuda", training)
    after = predict_module(out, example_inputs, "cuda", training)
    assert after.fused + after.extern <= before.fused + before.extern, (before, after)
    outcome = fuzzing.run_program(*program.compile(), ("eqsat",), level=program.level, dynamic=program.dynamic,
                                  pattern_options=program.pattern_options, cost_model=MODELS[model])["eqsat"]
    assert outcome.kind == "ok", (outcome.kind, outcome.cause)


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


# -- a plan priced as the input but for rounding; taso and tensat guarded; the notes; explain ----------------
# Differential runs against eager (tests/fuzzing.py seeds 0-400 under the launch, amortized(1), CUDA-graph and
# forward-only models, seeds 0-200 with grad regions forced; tests/fuzzing_gemm.py seeds 0-120 under five models,
# again forced dynamic and forced post-grad; taso and tensat on both) found no wrong value, gradient, stride, alias
# or requires_grad, and no second translation that raised (forced on the dlrm, launch_bound and dhen bench graphs,
# pre- and post-grad). What they did find is pinned below.

KEPT = "kept the input graph"


def _dynamo_graph_of(program):
    """Dynamo's graph of a generated program and its example inputs."""
    fn, make_inputs = program.compile()
    return dynamo_graph(fn, *make_inputs()[0], dynamic=program.dynamic)


def _optimize(gm, example_inputs, strategy, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return optimus_eq.optimize(gm, example_inputs, strategy, **options)


@pytest.mark.slow
def test_a_plan_priced_as_the_input_but_for_rounding_is_kept():
    """GEMM fuzz seed 0 (launch model, training): extraction has no choice, and its plan (the input without
    its dead nodes, normalized: 74 -> 38 FX nodes) costs what the input costs, 535.921578 us, summed in
    another order: 535.9215780000001. That was "dearer", the plan's price again 535.9215780000001, so the
    input graph was returned, with the note "costs 535.9 us by the cost model, the input 535.9 us". Now a
    price above the input's by no more than rounding (1e-9 relative) keeps the plan."""
    program = fuzzing_gemm.generate(0)
    gm, example_inputs = _dynamo_graph_of(program)
    out, report = _optimize(gm, example_inputs, "eqsat", cost_model=GPUCostModel(),
                            pattern_options=program.pattern_options)
    assert not any(KEPT in n for n in report.notes), report.notes
    assert out is not gm and report.nodes_after < report.nodes_before
    assert report.cost_after <= report.cost_before
    outcome = fuzzing.run_program(*program.compile(), ("eqsat",), level=program.level, dynamic=program.dynamic,
                                  pattern_options=program.pattern_options, cost_model=GPUCostModel())["eqsat"]
    assert outcome.kind == "ok", (outcome.kind, outcome.cause)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["taso", "tensat", "eqsat"])
def test_no_cost_based_strategy_reports_a_plan_dearer_than_the_input(strategy):
    """``Report.cost_after`` says: "for eqsat, taso and tensat never above cost_before", and DESIGN names taso
    among the guarded strategies, but the guard ran only for strategies that are not destructive, and taso's
    steps are (``taso.SUBSUME``): GEMM fuzz seed 15 under the launch model reported 116.501342 -> 116.501378
    us. Its search keeps the cheapest graph it saw, the input among them, so the input is now kept there too
    (``Strategy.by_cost``). The note says by how much the plan was dearer (it printed two equal numbers
    when the difference was below 0.05 us)."""
    program = fuzzing_gemm.generate(15)
    outcome = fuzzing.run_program(*program.compile(), (strategy,), level=program.level, dynamic=program.dynamic,
                                  pattern_options=program.pattern_options, cost_model=GPUCostModel())[strategy]
    assert outcome.kind == "ok", (outcome.kind, outcome.cause)
    for r in outcome.reports:
        assert r.cost_after <= r.cost_before, (r.cost_before, r.cost_after, r.notes)
    ins = [rand(1, 6, seed=1), rand(6, 2, seed=2), rand(6, 2, seed=3)]
    r = check(_two_gemms_one_lhs, ins, strategy, cost_model=GPUCostModel(training=False)).report
    assert r.cost_after <= r.cost_before, (r.cost_before, r.cost_after, r.notes)
    notes = [n for n in r.notes if KEPT in n]
    assert all("us more than the input" in n for n in notes), notes


def test_greedy_is_not_guarded():
    """Greedy applies every rewrite, as Optimus does: its plan is returned whatever it costs."""
    from optimus_eq import strategy

    assert not strategy.get("greedy").by_cost
    assert all(strategy.get(s).by_cost for s in ("eqsat", "taso", "tensat"))


def _segments(x, a, b, c):
    with torch.no_grad():
        d = c * 2
    y = torch.sigmoid(x @ a) * 2 + torch.sigmoid(x @ b) * 3
    with torch.no_grad():
        e = torch.sigmoid(x @ a) * 2 + torch.sigmoid(x @ b) * 3
    return y + d, e


@pytest.mark.slow
@pytest.mark.parametrize("trace_grad", [False, True])
def test_segments_that_keep_their_input_say_which(trace_grad):
    """A graph with ``no_grad`` regions is optimized per segment (``_run_segments``); two segments keep their
    input (amortized(1): the batched GEMM's cat kernel costs a compile), values and gradients as eager's. Their
    notes were two identical lines; now each names its segment, as ``report.limits`` does."""
    ins = [rand(1, 6, seed=1), rand(6, 2, seed=2), rand(6, 2, seed=3), rand(1, 2, seed=4)]
    r = check(_segments, ins, "eqsat", cost_model=GPUCostModel(training=False).amortized(1),
              trace_grad=trace_grad).report
    kept = [n for n in r.notes if KEPT in n]
    assert len(kept) == 2 and all(n.startswith("segment ") for n in kept), r.notes
    assert len(set(kept)) == 2
    assert not r.patterns_fired and r.cost_after <= r.cost_before


def test_explain_says_the_plan_gave_way_to_the_input():
    """``optimus-eq explain`` printed no word of it: every op "kept", and the horizontal groups the plan had
    batched listed as "not batched for a reason not read here". Its text now carries the note."""
    from optimus_eq.explain import explain, to_text
    from optimus_eq.modelrun import ModelSpec

    class Two(torch.nn.Module):
        def forward(self, x, a, b):
            return _two_gemms_one_lhs(x, a, b)

    spec = ModelSpec("two_gemms", Two(), (rand(1, 6, seed=1), rand(6, 2, seed=2), rand(6, 2, seed=3)))
    ex = explain(spec, ["eqsat"], options={"cost_model": GPUCostModel(training=False).amortized(1)},
                 credits=False, pictures=False)
    assert KEPT in to_text(ex)


@pytest.mark.slow
@pytest.mark.parametrize("gen, seed", [("gemm", 61), ("gemm", 7), ("gemm", 51)])
def test_an_input_kept_is_eagers_program(gen, seed):
    """Programs where the guard keeps the input, checked against eager (values, strides, aliasing, gradients,
    requires_grad): GEMM seed 61 (pre-grad), 7 (``dynamic=True``), 51 (post-grad, forward and backward
    graphs of AOTAutograd)."""
    program = (fuzzing_gemm if gen == "gemm" else fuzzing).generate(seed)
    outcome = fuzzing.run_program(*program.compile(), ("eqsat",), level=program.level, dynamic=program.dynamic,
                                  pattern_options=program.pattern_options, cost_model=GPUCostModel())["eqsat"]
    assert outcome.kind == "ok", (outcome.kind, outcome.cause)
    assert any(KEPT in n for r in outcome.reports for n in r.notes)
    for r in outcome.reports:
        assert r.cost_after <= r.cost_before
        if any(KEPT in n for n in r.notes):
            assert not r.patterns_fired and set(r.node_fates.values()) <= {"kept"}
            assert r.ops_after == r.ops_before
