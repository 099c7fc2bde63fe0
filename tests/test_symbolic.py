"""Symbolic sizes (issue 10, item 1): graphs whose batch dim is symbolic are optimized as the static ones.

With ``torch.compile(dynamic=None)`` the first batch size gives a static graph and the second makes Dynamo
recompile with a symbolic batch (``s77``), which then serves every later batch; ``dynamic=True`` starts
symbolic. Each bench recommendation model (small sizes) is compiled through ``optimus_eq.backend(...,
compile=False)`` (the optimized GraphModule run eagerly: no C++ compile) and fed three batch sizes; every
graph it compiles must fire the same patterns, remove the same junk and end with the same compute ops as
the static compile, and every call must match eager (values, and parameter gradients, judged by the
float64 oracle of tests/oracle.py). One test goes through Inductor for real.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_leaves

import optimus_eq
import oracle
from conftest import dynamo_graph
from optimus_bench.models import build

REC_MODELS = ("dhen", "wukong", "interformer", "dlrm", "launch_bound")
#: the compute ops a rewrite of these models changes (junk is compared as junk removed)
COMPUTE = ("linear", "layer_norm", "baddbmm", "bmm", "addcmul", "tanh", "relu", "cat", "stack", "split", "unbind",
           "narrow", "select", "reshape", "permute")


def _resize(x, batch: int, size: int):
    """An input of the bench case at another batch size: its rows repeated (batch dim 0)."""
    if isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == batch:
        reps = -(-size // batch)
        return torch.cat([x] * reps)[:size].clone()
    return x


def _placeholder_vals(gm) -> list:
    return [n.meta.get("example_value", n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]


def _has_symbolic_input(gm) -> bool:
    """Whether Dynamo's graph has a symbolic size (a SymInt input or a tensor input with a SymInt dim)."""
    return any(isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor)
                                               and any(isinstance(s, torch.SymInt) for s in v.shape))
               for v in _placeholder_vals(gm))


def _compile(model, strategy: str, dynamic):
    """``torch.compile`` through the optimus_eq backend without Inductor; returns the compiled model and a
    list that collects ``(report, symbolic?)`` per graph compiled."""
    backend = optimus_eq.backend(strategy=strategy, compile=False)
    seen = []

    def wrapped(gm, example_inputs, **kwargs):
        n = len(optimus_eq.last_reports)
        fn = backend(gm, example_inputs, **kwargs)
        assert len(optimus_eq.last_reports) > n or n == 100
        seen.append((optimus_eq.last_reports[-1], _has_symbolic_input(gm)))
        return fn

    return torch.compile(model, backend=wrapped, dynamic=dynamic), seen


def _compare(compiled, model, inputs, grad: bool) -> None:
    """Outputs (and, with ``grad``, the parameters' gradients of a fixed weighted sum of the outputs) of the
    compiled model against eager, judged by the float64 oracle."""
    params = [p for p in model.parameters() if p.requires_grad] if grad else []
    ref64 = oracle.float64_reference(model, list(inputs))
    with torch.set_grad_enabled(grad):
        expected = model(*inputs)
        actual = compiled(*inputs)
    oracle.compare_runs(actual, expected, list(inputs), list(inputs), ref64, grad=False)
    if not grad:
        return
    exp_flat = [t for t in tree_leaves(expected) if isinstance(t, torch.Tensor) and t.requires_grad]
    act_flat = [t for t in tree_leaves(actual) if isinstance(t, torch.Tensor) and t.requires_grad]
    gen = torch.Generator().manual_seed(7)
    cots = [torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in exp_flat]

    def loss(outs):
        return sum((o.double() * c).sum() for o, c in zip(outs, cots))

    ge = torch.autograd.grad(loss(exp_flat), params, allow_unused=True)
    ga = torch.autograd.grad(loss(act_flat), params, allow_unused=True)
    floats = [t for t in (ref64.outputs or []) if isinstance(t, torch.Tensor) and t.requires_grad]
    g64 = ref64.grads(lambda outs: loss(floats), params) if len(floats) == len(exp_flat) else [None] * len(params)
    for i, (a, e, r) in enumerate(zip(ga, ge, g64)):
        assert (a is None) == (e is None), f"gradient {i}: None-ness differs from eager's"
        if e is not None:
            oracle.assert_values(a, e, r, f"gradient of parameter {i}", grad=True)


def _summary(report):
    before, after = report.junk_counts()
    return {"patterns": dict(report.rule_matches), "junk removed": before - after,
            "compute after": {k: report.ops_after.get(k, 0) for k in COMPUTE}}


def _run(name: str, strategy: str, dynamic, grad: bool = False):
    case = build(name, "cpu")
    model = case.model.eval()
    B = case.batch_size
    compiled, seen = _compile(model, strategy, dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a fallback warns: fail on it
        warnings.filterwarnings("ignore", message=".*(?<!optimus_eq).*", category=UserWarning)
        for size in (B, 2 * B + 1, B + 3):
            _compare(compiled, model, [_resize(x, B, size) for x in case.inputs], grad)
    for report, _ in seen:
        assert report.fallback is None, report.fallback
    return seen


def _static_summary(name: str, strategy: str):
    case = build(name, "cpu")
    compiled, seen = _compile(case.model.eval(), strategy, False)
    with torch.no_grad():
        compiled(*case.inputs)
    assert len(seen) == 1 and not seen[0][1]
    return _summary(seen[0][0])


@pytest.mark.parametrize("name", REC_MODELS)
def test_dynamic_none_recompile_optimized_as_static(name):
    """dynamic=None: the static first graph and the symbolic recompile are optimized identically."""
    seen = _run(name, "greedy", None)
    assert [sym for _, sym in seen] == [False, True], "expected a static graph, then one symbolic recompile"
    static, symbolic = (_summary(r) for r, _ in seen)
    assert static["patterns"], "nothing fired on the static graph: the test would prove nothing"
    assert symbolic == static


@pytest.mark.parametrize("name", ("dhen", "launch_bound", "dlrm"))
def test_dynamic_none_eqsat(name):
    seen = _run(name, "eqsat", None)
    assert [sym for _, sym in seen] == [False, True]
    static, symbolic = (_summary(r) for r, _ in seen)
    assert symbolic == static


@pytest.mark.parametrize("name", REC_MODELS)
def test_dynamic_true_optimized_as_static(name):
    """dynamic=True: every graph compiled (symbolic from the start) is optimized as the static compile.

    ``specialize_float``: under dynamic=True Dynamo passes a float attribute (LayerNorm's eps) as a
    tensor and ``.item()``; Inductor then asks Dynamo to trace again with it specialized
    (TensorifyScalarRestartAnalysis), which a backend without Inductor never does. The flag gives the
    graph Inductor ends up with."""
    static = _static_summary(name, "greedy")
    torch._dynamo.reset()
    with torch._dynamo.config.patch(specialize_float=True):
        seen = _run(name, "greedy", True)
    assert any(sym for _, sym in seen)
    for report, _ in seen:
        assert _summary(report) == static


@pytest.mark.parametrize("name", ("dhen", "launch_bound", "dlrm"))
def test_dynamic_training_gradients(name):
    """Gradients of the parameters through the symbolic graphs equal eager's (float64 oracle), where the
    symbolic graph is optimized as the static one (DLRM: its embedding bags batched in both)."""
    seen = _run(name, "greedy", None, grad=True)
    assert seen[-1][1] and seen[-1][0].rule_matches
    assert _summary(seen[-1][0]) == _summary(seen[0][0])


def _batched_linears(x, ws, bs):
    """Rank-3 input [B, T, 4 * 8] split in four, a linear each, concatenated: batch_linear flattens the
    leading dims [B, T] (two symbols) to B*T and views the outputs back to [B, T, 8]."""
    pieces = torch.split(x, 8, dim=2)
    return torch.cat([F.linear(p, w, b) for p, w, b in zip(pieces, ws, bs)], dim=2)


def test_two_symbolic_dims_rebuilt_at_run_time():
    """With two symbolic dims a reshape target has two tokens: lowering reads the sizes from the graph's
    inputs (SymInt placeholders) and the optimized graph runs at other sizes than it was traced with."""
    torch.manual_seed(0)
    ws = [torch.randn(8, 8) for _ in range(4)]
    bs = [torch.randn(8) for _ in range(4)]
    x = torch.randn(3, 5, 32)
    gm, example_inputs = dynamo_graph(_batched_linears, x, ws, bs, dynamic=True)
    assert _has_symbolic_input(gm)
    gm2, report = optimus_eq.optimize(gm, example_inputs, strategy="greedy",
                                      pattern_options={"batch_linear": {"min_fuse_set_size": 2}})
    assert report.fallback is None, report.fallback
    assert report.rule_matches["batch_linear"] == 1
    assert report.ops_after["linear"] == 0
    vals = _placeholder_vals(gm)
    xval = next(v for v in vals if isinstance(v, torch.Tensor) and v.dim() == 3)
    dim_of = {str(s): d for d, s in enumerate(xval.shape) if isinstance(s, torch.SymInt) and s.node.maybe_as_int() is None}
    assert len(dim_of) == 2
    for shape in ((3, 5, 32), (7, 2, 32), (2, 9, 32)):
        xi = torch.randn(*shape)
        args = [shape[dim_of[str(v)]] if isinstance(v, torch.SymInt) else (xi if v is xval else a)
                for v, a in zip(vals, example_inputs)]
        ref64 = oracle.float64_reference(gm, args)
        expected, actual = gm(*args), gm2(*args)
        oracle.compare_runs(actual, expected, args, args, ref64, grad=False)


def test_symbolic_narrow_stays_opaque():
    """A slice of the symbolic dim itself cannot be reasoned about statically: left as it is, no fallback."""
    def fn(x):
        a, b = x[:2], x[2:]
        return torch.cat([a, b]) * 2

    gm, example_inputs = dynamo_graph(fn, torch.randn(6, 4), dynamic=True)
    gm2, report = optimus_eq.optimize(gm, example_inputs, strategy="eqsat")
    assert report.fallback is None
    vals = _placeholder_vals(gm)
    for n in (4, 9):
        x = torch.randn(n, 4)
        args = [n if isinstance(v, torch.SymInt) else x for v in vals]
        torch.testing.assert_close(gm2(*args)[0], fn(x), rtol=0, atol=0)


def test_inductor_dynamic_true():
    """One real compile: launch_bound through Inductor with a symbolic batch, against eager."""
    case = build("launch_bound", "cpu")
    model = case.model.eval()
    B = case.batch_size
    compiled = torch.compile(model, backend=optimus_eq.backend(strategy="greedy"), dynamic=True)
    optimus_eq.last_reports.clear()  # it keeps the last 100: an index into it is stale in a long session
    with torch.no_grad():
        for size in (B, B + 5):
            inputs = [_resize(x, B, size) for x in case.inputs]
            ref64 = oracle.float64_reference(model, inputs)
            oracle.compare_runs(compiled(*inputs), model(*inputs), inputs, inputs, ref64, grad=False)
    reports = list(optimus_eq.last_reports)
    assert reports and all(r.fallback is None for r in reports)
    assert reports[-1].rule_matches["batch_linear"] and reports[-1].rule_matches["split_cat_pass"]
