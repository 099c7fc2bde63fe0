"""The cost model's execution modes (CUDA graphs or not) and training pricing (src/optimus_eq/cost.py,
src/optimus_eq/extract/grad.py), and the backend's choice of model.

Real dynamo graphs, real saturation and extraction; each optimized graph is compared with eager (values
and gradients, conftest.check) where a plan changes.
"""

from __future__ import annotations

import pytest
import torch

import optimus_eq
from conftest import check, dynamo_graph, rand
import oracle
from optimus_eq.cost import CUDAGRAPH_LAUNCH_US, GPUCostModel
from optimus_eq.extract.grad import member_grad_is_strided

CALIBRATION = {"launch_us": 23.291, "bytes_per_us": 4014575.1, "launch_us_eager": 13.947,
               "launch_us_cudagraph": 2.283}
FORWARD = {"launch": GPUCostModel(training=False), "cudagraph": GPUCostModel.cudagraph(training=False)}


def _linears(n: int, k: int, bias: bool = True, one_output: bool = False):
    """``n`` linears of width ``k`` and a function applying one to each input. ``one_output``: return them
    stacked as one output (traced with grad, members of one fused op must reach the same outputs:
    tests/test_gradients.py), else as ``n`` outputs."""
    torch.manual_seed(0)
    lins = torch.nn.ModuleList(torch.nn.Linear(k, k, bias=bias) for _ in range(n))

    def f(*xs):
        ys = [lin(x) * (i + 1) for i, (lin, x) in enumerate(zip(lins, xs))]
        return torch.stack(ys) if one_output else ys

    return lins, f


def _batched(report) -> bool:
    return sum(report.ops_after.get(k, 0) for k in ("baddbmm", "bmm", "bmm_add")) > 0


# -- constants -----------------------------------------------------------------------------------------

def test_from_calibration_reads_the_mode_s_launch_cost():
    launch = GPUCostModel.from_calibration(CALIBRATION)
    graph = GPUCostModel.from_calibration(CALIBRATION, execution="cudagraph")
    assert (launch.execution, launch.launch_us) == ("launch", 23.291)
    assert (graph.execution, graph.launch_us) == ("cudagraph", 2.283)
    assert launch.eager_launch_us == graph.eager_launch_us == 13.947
    assert graph.bytes_per_us == launch.bytes_per_us == 4014575.1
    assert GPUCostModel.cudagraph().launch_us == CUDAGRAPH_LAUNCH_US == CALIBRATION["launch_us_cudagraph"]


def test_from_calibration_refuses_a_record_without_the_graph_figure():
    record = {k: v for k, v in CALIBRATION.items() if k != "launch_us_cudagraph"}
    GPUCostModel.from_calibration(record)  # the launch model needs only launch_us
    with pytest.raises(ValueError, match="launch_us_cudagraph"):
        GPUCostModel.from_calibration(record, execution="cudagraph")
    with pytest.raises(ValueError, match="execution"):
        GPUCostModel(execution="graphs")


def test_the_recorded_calibration_is_the_default_of_both_modes():
    from pathlib import Path

    path = Path(__file__).parents[1] / "bench/results/h200_matrix_2026-11-29/calibration.json"
    graph = GPUCostModel.from_calibration(path, execution="cudagraph")
    assert graph.launch_us == pytest.approx(GPUCostModel.cudagraph().launch_us)
    assert graph.eager_launch_us == pytest.approx(GPUCostModel().eager_launch_us, rel=0.01)


def test_backward_cost_follows_the_derivative_formulas():
    m = GPUCostModel()
    fwd = m.node_cost("Unary", 1000, [1000], False)
    # one gradient kernel per input that requires grad, each with the forward's traffic
    assert m.backward_cost("Unary", 1000, [1000], 1, False) == pytest.approx(fwd)
    assert m.backward_cost("Binary", 1000, [1000, 1000], 2, False) == pytest.approx(
        2 * m.node_cost("Binary", 1000, [1000, 1000], False))
    assert m.backward_cost("Binary", 1000, [1000, 1000], 0, False) == 0.0
    assert m.backward_cost("Cat", 1000, [], 3, False) == 0.0           # input grads are narrows: views
    assert m.backward_cost("Permute", 1000, [1000], 1, False) == 0.0   # a view's grad is a view
    assert m.backward_cost("Narrow", 1000, [4000], 1, False) == pytest.approx(2 * 4000 / m.bytes_per_us)
    assert m.backward_cost("Apply", 10, [10], 1, True) == 0.0          # opaque: the same in every plan


@pytest.mark.parametrize("shape, perm, dim, strided", [
    ((8, 32, 16), (0, 2, 1), 0, True),    # batch_linear's weight stack: [n, out, in] -> [n, in, out]
    ((8, 32, 16), (0, 1, 2), 0, False),   # identity
    ((8, 32), (0, 1), 0, False),          # bias / layer-norm weight stacks
    ((8, 1, 16), (0, 2, 1), 0, False),    # a unit dim moves: same layout
    ((32, 8, 16), (1, 0, 2), 1, False),   # the stacking dim moves, members stay row-major
])
def test_member_grad_layout(shape, perm, dim, strided):
    assert member_grad_is_strided(shape, perm, dim) is strided


# -- execution mode decides a batch ----------------------------------------------------------------

@pytest.mark.slow
def test_weight_traffic_rejects_a_batch_only_with_cuda_graphs():
    """Six 1536x1536 linears on 16 rows (inference): stacking the weights moves 2 x 54 MiB per call. At
    23.3 us per launch the five launches saved (116 us) pay for it (~28 us); inside a CUDA graph they save
    11 us and the batch is rejected."""
    lins, f = _linears(6, 1536)
    xs = [rand(16, 1536, seed=i) for i in range(6)]
    with torch.no_grad():
        gm, ex = dynamo_graph(f, *xs)
        _, launch = optimus_eq.optimize(gm, ex, cost_model=FORWARD["launch"])
        _, graph = optimus_eq.optimize(gm, ex, cost_model=FORWARD["cudagraph"])
    assert _batched(launch) and launch.rule_matches["batch_linear"] == 1
    assert not _batched(graph) and graph.rule_matches["batch_linear"] == 1  # offered, not extracted:
    assert launch.patterns_fired["batch_linear"] == 1 and not graph.patterns_fired["batch_linear"]
    assert graph.cost_model.startswith("cudagraph") and not graph.training
    assert launch.cost_model.startswith("launch")


def test_small_linears_still_batch_with_cuda_graphs():
    lins, f = _linears(8, 32)
    xs = [rand(64, 32, seed=i) for i in range(8)]
    with torch.no_grad():
        r = check(f, xs, "eqsat", cost_model=GPUCostModel.cudagraph()).report
    assert _batched(r) and not r.training


# -- training --------------------------------------------------------------------------------------

def test_training_is_detected_from_the_graph():
    lins, f = _linears(6, 32)
    xs = [rand(64, 32, seed=i) for i in range(6)]
    with torch.no_grad():
        gm, ex = dynamo_graph(f, *xs)
    assert optimus_eq.optimize(gm, ex)[1].training is False
    gm, ex = dynamo_graph(f, *xs)
    r = optimus_eq.optimize(gm, ex)[1]
    assert r.training is True and r.cost_model.endswith("training")
    assert optimus_eq.optimize(gm, ex, cost_model=GPUCostModel(training=False))[1].training is False


def test_views_of_parameters_under_no_grad_are_no_training():
    """Under ``torch.no_grad`` a view of a parameter (``seeds.expand``, ``w.t()``) still requires grad; the
    inference graph is not priced as training for it (the Interformer's PMA seeds were: eqsat then kept the
    head's addmm, pricing a backward that never runs)."""
    seeds = torch.nn.Parameter(torch.randn(4, 8))
    head = torch.nn.Linear(8, 1)

    def f(x):
        return head(torch.relu(x + seeds.expand(x.shape[0], -1, -1)).sum(1))

    x = rand(16, 4, 8, seed=1)
    with torch.no_grad():
        gm, ex = dynamo_graph(f, x)
        assert optimus_eq.optimize(gm, ex)[1].training is False
    gm, ex = dynamo_graph(f, x)
    assert optimus_eq.optimize(gm, ex)[1].training is True


@pytest.mark.slow
def test_training_with_cuda_graphs_keeps_a_batch_whose_weight_gradients_need_no_copy():
    """Eight 64x64 linears with CUDA graphs: the batch saves 7 launches for 3 stacks forward, and its
    backward launches too; batch_linear feeds the weight stack to ``bmm`` unpermuted, so no AccumulateGrad
    copy is charged and training keeps the batch, priced above forward alone (the backward is priced)."""
    lins, f = _linears(8, 64, one_output=True)
    xs = [rand(256, 64, seed=i) for i in range(8)]
    gm, ex = dynamo_graph(f, *xs)
    _, fwd = optimus_eq.optimize(gm, ex, cost_model=FORWARD["cudagraph"])
    train_model = GPUCostModel.cudagraph()
    _, train = optimus_eq.optimize(gm, ex, cost_model=train_model)
    assert _batched(fwd) and not fwd.training
    assert train.training and _batched(train)
    assert train.cost_before > fwd.cost_before  # the input graph's backward is priced too
    # the batch saves more in training than forward alone; no copy (8 x 13.9 us) eats it
    assert train.cost_before - train.cost_after > fwd.cost_before - fwd.cost_after
    r = check(f, xs, "eqsat", cost_model=train_model).report
    assert r.training and _batched(r)


def _weight_grads(out, ex):
    """Run a training step of ``out`` on ``ex``: ``(params, {id(p): incoming grad contiguous?})``."""
    params = [a for a in ex if isinstance(a, torch.nn.Parameter)]
    layouts = {}
    handles = []
    for p in params:
        p.grad = None
        handles.append(p.register_hook(lambda g, p=p: layouts.__setitem__(id(p), g.is_contiguous())))
    sum(y.sum() for y in out(*ex)).backward()
    for h in handles:
        h.remove()
    return params, layouts


def test_the_layout_rule_matches_autograd():
    """What grad.py assumes, checked on the optimized graph: with batch_linear in the plan every weight's
    and bias's incoming gradient is contiguous in the parameter's own layout, so AccumulateGrad takes it
    without a copy: the weights' ``.grad`` are slices of the one ``[n, out, in]`` gradient of the stack."""
    lins, f = _linears(6, 16, one_output=True)
    xs = [rand(8, 16, seed=i) for i in range(6)]
    gm, ex = dynamo_graph(f, *xs)
    out, r = optimus_eq.optimize(gm, ex, cost_model=GPUCostModel(training=False))
    assert _batched(r)
    params, layouts = _weight_grads(out, ex)
    assert len(params) == 12 and len(layouts) == 12
    assert all(layouts.values())
    weights = [p for p in params if p.dim() == 2]
    assert all(p.grad.stride() == p.stride() for p in params)
    assert len({p.grad.untyped_storage().data_ptr() for p in weights}) == 1  # stolen, not cloned
    # and the gradients are eager's
    ref = [p.detach().clone().requires_grad_(True) for p in params]
    sub = dict(zip(map(id, params), ref))
    args = [sub.get(id(a), a) for a in ex]
    grads64 = oracle.float64_reference(gm, args).grads(lambda ys: sum(y.sum() for y in ys), ref)
    sum(y.sum() for y in gm(*args)).backward()
    for p, q, r in zip(params, ref, grads64):
        oracle.assert_values(p.grad, q.grad, r, "weight gradient", grad=True)  # batched: summed in another order


@pytest.mark.slow
def test_compiled_training_step_makes_no_accumulate_grad_copy():
    """Inductor end to end (CPU): the backward of the compiled optimized graph, profiled, launches no
    copy under AccumulateGrad (the earlier ``X @ stack(w)^T`` form made one per weight), and each weight's
    ``.grad`` has the parameter's strides."""
    from torch.profiler import ProfilerActivity, profile

    lins, f = _linears(6, 16, one_output=True)
    xs = [rand(8, 16, seed=i) for i in range(6)]
    gm, ex = dynamo_graph(f, *xs)
    out, r = optimus_eq.optimize(gm, ex, cost_model=GPUCostModel(training=False))
    assert _batched(r)
    params = [a for a in ex if isinstance(a, torch.nn.Parameter)]
    torch._dynamo.reset()
    step = torch.compile(out, backend="inductor")
    for p in params:
        p.grad = None
    loss = sum(y.sum() for y in step(*ex))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss.backward()

    def under_accumulate_grad(e):
        while e is not None:
            if "AccumulateGrad" in e.name:
                return True
            e = e.cpu_parent
        return False

    events = prof.events()
    assert sum(1 for e in events if e.name == "torch::autograd::AccumulateGrad") == len(params)
    assert not [e.name for e in events if under_accumulate_grad(e) and ("copy" in e.name or "clone" in e.name)]
    assert all(p.grad.stride() == p.stride() for p in params)
    torch._dynamo.reset()


# -- the backend picks the model -------------------------------------------------------------------

def _backend_report(**compile_kwargs):
    lins, f = _linears(6, 16)
    xs = [rand(8, 16, seed=i) for i in range(6)]
    backend_options = compile_kwargs.pop("backend_options", {})
    optimus_eq.last_reports.clear()
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(f, backend=optimus_eq.backend(compile=False, **backend_options), **compile_kwargs)(*xs)
    assert len(optimus_eq.last_reports) == 1
    return optimus_eq.last_reports[-1]


@pytest.mark.parametrize("compile_kwargs, execution", [
    ({}, "launch"),
    ({"mode": "reduce-overhead"}, "cudagraph"),
    ({"mode": "max-autotune-no-cudagraphs"}, "launch"),
    ({"options": {"triton.cudagraphs": True}}, "cudagraph"),
    ({"backend_options": {"mode": "reduce-overhead"}}, "cudagraph"),
    ({"backend_options": {"inductor_config": {"triton.cudagraphs": True}}}, "cudagraph"),
    ({"mode": "reduce-overhead", "backend_options": {"cost_model": GPUCostModel(launch_us=7.0)}}, "launch"),
])
def test_backend_prices_with_the_cudagraph_model_under_reduce_overhead(compile_kwargs, execution, monkeypatch):
    """The mode and options reach the choice of model (the inputs taken to be on CUDA: this machine has none)."""
    import optimus_bridge.backend as backend_module

    monkeypatch.setattr(backend_module, "_on_cuda", lambda example_inputs: True)
    explicit = compile_kwargs.get("backend_options", {}).get("cost_model")
    r = _backend_report(**compile_kwargs)
    assert r.cost_model.split(" ")[0] == execution
    if explicit is not None:
        assert "launch 7 us" in r.cost_model  # the user's model, untouched


def test_cudagraph_model_only_for_graphs_on_cuda():
    """Inductor records CUDA graphs for CUDA graphs only: under reduce-overhead a CPU graph is priced with
    launches (a real compile here), a graph with CUDA inputs (fake tensors) with the CUDA-graph model."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from optimus_bridge.backend import cost_model_for

    assert _backend_report(mode="reduce-overhead").cost_model.split(" ")[0] == "launch"
    with FakeTensorMode():
        on_gpu = [torch.empty(4, 4, device="cuda")]
    patches = {"triton.cudagraphs": True}
    assert cost_model_for(patches, on_gpu).describe().startswith("cudagraph")
    assert cost_model_for(patches, [torch.ones(4)]).describe().startswith("launch")
    assert cost_model_for({"triton.cudagraphs": False}, on_gpu).describe().startswith("launch")


def test_a_user_s_own_stack_of_weights_is_priced_with_its_gradient_copies():
    """The input graph is priced by the same rules (``input_cost``): a model that itself stacks six
    weights and feeds the transposed stack to ``bmm`` pays six AccumulateGrad copies, and the e-graph's
    pricing of that same plan agrees with the input graph's."""
    torch.manual_seed(0)
    ws = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(24, 16)) for _ in range(6))

    def f(x):
        return torch.bmm(x, torch.stack(list(ws)).permute(0, 2, 1))

    x = rand(6, 8, 16, seed=1)
    gm, ex = dynamo_graph(f, x)
    train = GPUCostModel.cudagraph()
    _, fwd = optimus_eq.optimize(gm, ex, cost_model=GPUCostModel.cudagraph(training=False))
    _, r = optimus_eq.optimize(gm, ex, cost_model=train)
    assert r.training
    copies = 6 * train.grad_copy_cost(24 * 16)
    # only the weights require grad: one GEMM, priced by FLOPs (GPUCostModel.gemm_backward_cost)
    bmm_backward = train.gemm_backward_cost("bmm", (6, 8, 24), [(6, 8, 16), (6, 16, 24)], [False, True])
    assert r.cost_before - fwd.cost_before == pytest.approx(copies + bmm_backward, rel=1e-6)
    assert r.cost_after == pytest.approx(r.cost_before, rel=1e-6)


@pytest.mark.slow
def test_dhen_plans_follow_the_h200_measurements():
    """bench/cost_modes.py on the DHEN bench model (cpu preset): with CUDA graphs the batched per-field
    linears are kept in inference (measured faster on the H200); in training too, now that their weight
    gradients need no AccumulateGrad copy (the earlier form, measured 1.3x slower than the input graph on
    the H200 with 64 copies outside the graph, was dropped); without CUDA graphs training batches
    (measured 2.2x faster)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "bench" / "cost_modes.py"
    spec = importlib.util.spec_from_file_location("cost_modes", path)
    cost_modes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cost_modes)
    rows = {(r["mode"], r["cost_model"]): r for r in cost_modes.run(["dhen"], "cpu")}
    assert rows["inference", "cudagraph"]["batched"].get("bmm_add") == 2
    train = rows["train", "cudagraph+train"]
    assert train["training_priced"] and train["batched"].get("bmm_add") == 2
    assert train["cost_plan_us"] < train["cost_input_us"]
    assert rows["train", "launch+train"]["batched"].get("bmm_add") == 2
