"""Breaker 1203c (session 18, brk18): the two changes of 2026-12-03.

1. ``plan_check.dearer_than_input``: a plan that extraction prices above the input graph is priced again as the
   input is, and the input graph is kept if it is still dearer. Differential runs against eager
   (tests/fuzzing.py seeds 0-400 under launch, amortized(1), CUDA-graph and forward-only models, seeds 0-200
   with grad regions forced; tests/fuzzing_gemm.py seeds 0-120 under five models, again forced dynamic and
   forced post-grad; taso and tensat on both) found no wrong value, gradient, stride, alias or requires_grad,
   and no second translation that raised (forced on the dlrm, launch_bound and dhen bench graphs, pre- and
   post-grad). What broke:
   a plan priced as the input but for float rounding gave way to the input (its note read "costs 535.9 us,
   the input 535.9 us"); taso, which the report's documentation covers, was never guarded (its steps are
   destructive), so its ``cost_after`` could exceed ``cost_before``; the segments' notes did not say which
   segment kept its input; ``optimus-eq explain`` did not say the plan was dropped.
2. ``backend._start_compile_workers``: the pool started outside the compile's own Inductor config
   (``inductor_config={"compile_threads": 1}`` started a pool of the global size) and for graphs on the
   CPU, whose kernels never use it (with Triton installed, a CUDA build running a CPU model: a ~300 MB
   sidecar process and its workers that plain ``torch.compile`` never starts).
"""

from __future__ import annotations

import concurrent.futures
import warnings

import pytest
import torch
import torch._inductor.async_compile as async_compile
import torch._inductor.compile_fx

import fuzzing
import fuzzing_gemm
import optimus_eq
from conftest import check, dynamo_graph, rand
from optimus_bridge import backend as backend_module
from optimus_eq.cost import GPUCostModel

KEPT = "kept the input graph"


def _capture(program):
    """Dynamo's graph of a generated program and its example inputs."""
    fn, make_inputs = program.compile()
    return dynamo_graph(fn, *make_inputs()[0], dynamic=program.dynamic)


def _optimize(gm, example_inputs, strategy, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return optimus_eq.optimize(gm, example_inputs, strategy, **options)


# -- 1. the plan dearer than the input ---------------------------------------------------------------

def test_a_plan_priced_as_the_input_but_for_rounding_is_kept():
    """GEMM fuzz seed 0 (launch model, training): extraction has no choice, and its plan (the input without
    its dead nodes, normalized: 74 -> 38 FX nodes) costs what the input costs, 535.921578 us, summed in
    another order: 535.9215780000001. That was "dearer", the plan's price again 535.9215780000001, so the
    input graph was returned, with the note "costs 535.9 us by the cost model, the input 535.9 us". Now a
    price above the input's by no more than rounding (1e-9 relative) keeps the plan."""
    program = fuzzing_gemm.generate(0)
    gm, example_inputs = _capture(program)
    out, report = _optimize(gm, example_inputs, "eqsat", cost_model=GPUCostModel(),
                            pattern_options=program.pattern_options)
    assert not any(KEPT in n for n in report.notes), report.notes
    assert out is not gm and report.nodes_after < report.nodes_before
    assert report.cost_after <= report.cost_before
    outcome = fuzzing.run_program(*program.compile(), ("eqsat",), level=program.level, dynamic=program.dynamic,
                                  pattern_options=program.pattern_options, cost_model=GPUCostModel())["eqsat"]
    assert outcome.kind == "ok", (outcome.kind, outcome.cause)


def _two_gemms_one_lhs(x, a, b):
    return torch.sigmoid(x @ a) * 2 + torch.sigmoid(x @ b) * 3


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


# -- 2. the compile-worker pool ----------------------------------------------------------------------

def _two_linears(x, w1, w2):
    return torch.relu(torch.nn.functional.linear(x, w1)) + torch.nn.functional.linear(x, w2)


def _compile(monkeypatch, backend, warm, **compile_kwargs):
    """Compile ``_two_linears`` with ``backend``, Inductor's compile a spy, ``maybe_warm_pool`` ``warm``."""
    monkeypatch.setattr(async_compile, "maybe_warm_pool", warm)
    monkeypatch.setattr(torch._inductor.compile_fx, "compile_fx",
                        lambda gm, example_inputs, config_patches=None, **kw: gm.forward)
    torch._dynamo.reset()
    args = [rand(5, 4, seed=0), rand(3, 4, seed=1), rand(3, 4, seed=2)]
    torch.testing.assert_close(torch.compile(_two_linears, backend=backend, **compile_kwargs)(*args),
                               _two_linears(*args))


def test_no_compile_workers_for_a_graph_on_the_cpu(monkeypatch):
    """Inductor compiles a CPU graph's C++ kernels in a thread pool; its Triton worker pool is for CUDA and
    XPU kernels, and ``compile_fx`` wakes it only for inputs there. The backend started it for any graph:
    where Triton is installed (a CUDA build running a model on the CPU) that was a sidecar process of ~300 MB
    and its workers, which plain ``torch.compile`` never starts (measured here with ``has_triton_package``
    made True: 2.2 s first call, the sidecar and 2 workers left running)."""
    started = []
    _compile(monkeypatch, optimus_eq.backend("greedy"), lambda: started.append(True))
    assert not started


@pytest.mark.parametrize("how", ["inductor_config", "torch.compile options"])
def test_compile_workers_start_under_the_compiles_inductor_config(monkeypatch, how):
    """``compile_threads`` given for this compile (``inductor_config``, or ``torch.compile(options=...)``)
    was not in force when the pool started (it started before the patches were applied), so
    ``compile_threads=1`` still started a pool of the global size. Now the pool starts under them, as
    ``compile_fx`` wakes it."""
    monkeypatch.setattr(backend_module, "TRITON_DEVICES", ("cpu",))  # the graph here is on the CPU
    seen = []

    def warm():
        seen.append(torch._inductor.config.compile_threads)

    if how == "inductor_config":
        _compile(monkeypatch, optimus_eq.backend("greedy", inductor_config={"compile_threads": 1}), warm)
    else:
        _compile(monkeypatch, optimus_eq.backend("greedy"), warm, options={"compile_threads": 1})
    assert seen == [1]


def test_the_real_pool_start_honours_compile_threads_one(monkeypatch):
    """Inductor's own ``maybe_warm_pool`` (Triton made present), the pool's creation a spy: under
    ``compile_threads=1`` no pool is made; under 2 one is."""
    monkeypatch.setattr(backend_module, "TRITON_DEVICES", ("cpu",))
    monkeypatch.setattr(async_compile, "has_triton_package", lambda: True)
    monkeypatch.setattr(async_compile.AsyncCompile, "_ready_future", None)
    made = []

    class Pool:
        def submit(self, fn, *args):
            f = concurrent.futures.Future()
            f.set_result(fn(*args))
            return f

    def process_pool():
        made.append(torch._inductor.config.compile_threads)
        return Pool()

    monkeypatch.setattr(async_compile.AsyncCompile, "process_pool", staticmethod(process_pool))
    real = async_compile.maybe_warm_pool
    _compile(monkeypatch, optimus_eq.backend("greedy", inductor_config={"compile_threads": 1}), real)
    assert made == []
    _compile(monkeypatch, optimus_eq.backend("greedy", inductor_config={"compile_threads": 2}), real)
    assert made and set(made) == {2}
