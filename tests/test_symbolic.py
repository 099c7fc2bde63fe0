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

import functools
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_leaves

import optimus_eq
import oracle
from conftest import dynamo_graph, rand
from optimus_bench.models import build

REC_MODELS = ("dhen", "wukong", "interformer", "dlrm", "launch_bound")
#: the compute ops a rewrite of these models changes (junk is compared as junk removed)
COMPUTE = ("linear", "layer_norm", "baddbmm", "bmm", "addcmul", "tanh", "relu", "cat", "stack", "split", "unbind",
           "narrow", "select", "reshape", "permute")
_rand = functools.partial(rand, seed=0)  # conftest's rand, seeded: seed 0 unless given


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


@pytest.mark.slow
@pytest.mark.parametrize("name", REC_MODELS)
def test_dynamic_none_recompile_optimized_as_static(name):
    """dynamic=None: the static first graph and the symbolic recompile are optimized identically."""
    seen = _run(name, "greedy", None)
    assert [sym for _, sym in seen] == [False, True], "expected a static graph, then one symbolic recompile"
    static, symbolic = (_summary(r) for r, _ in seen)
    assert static["patterns"], "nothing fired on the static graph: the test would prove nothing"
    assert symbolic == static


@pytest.mark.slow
@pytest.mark.parametrize("name", ("dhen", "launch_bound", "dlrm"))
def test_dynamic_none_eqsat(name):
    seen = _run(name, "eqsat", None)
    assert [sym for _, sym in seen] == [False, True]
    static, symbolic = (_summary(r) for r, _ in seen)
    assert symbolic == static


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# -- symbolic output features, transposed outputs of rewritten values ----------------------------------------

def _optimize_quietly(gm, example_inputs, strategy, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm2, report = optimus_eq.optimize(gm, example_inputs, strategy=strategy, **options)
    ours = [str(w.message) for w in caught if "optimus_eq" in str(w.message)]
    assert report.fallback is None and not ours, (report.fallback, ours)
    return gm2, report


# Found: linears reading one input whose weights are graph inputs, compiled with ``dynamic=True``: Dynamo makes the
# weights' output-feature counts symbolic, batch_linear_lhs grouped them anyway and summed the symbolic tokens
# (negative integers) into the narrows' starts and lengths, and lowering failed ("narrow(): length must be
# non-negative"): the whole graph fell back to the original with a warning, every other rewrite lost.
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_linears_of_one_input_with_symbolic_output_features_do_not_make_the_graph_fall_back(strategy):
    def f(x, w0, w1, w2, b0, b1, b2):
        return torch.cat([F.linear(x, w, b) for w, b in ((w0, b0), (w1, b1), (w2, b2))], -1).tanh()

    args = [_rand(4, 5), _rand(3, 5, seed=1), _rand(4, 5, seed=2), _rand(2, 5, seed=3), _rand(3, seed=4),
            _rand(4, seed=5), _rand(2, seed=6)]
    gm, ex = dynamo_graph(f, *args, dynamic=True)
    gm2, _ = _optimize_quietly(gm, ex, strategy, pattern_options={"batch_linear_lhs": {"min_fuse_set_size": 2}})
    torch.testing.assert_close(gm2(*ex), gm(*ex))


def _transposed_outputs_of_fused_ops(x, w1, w2):
    """Two linears of one input (batch_linear_lhs) and tanhs of an unbind (pointwise_through_slice, batch_tanh):
    each output a transposed view of a value the rewrite computes as a narrow or select of a wider one."""
    a, b = x.unbind(1)
    return F.linear(a, w1).t(), F.linear(a, w2).t(), a.tanh().t(), b.tanh().t()


# Found: with a symbolic batch (the recompile ``torch.compile``'s default ``dynamic=None`` makes at the second batch
# size, ``mark_dynamic``, ``dynamic=True``) an output whose eager layout is a transposed new tensor (strides
# ``(1, s0)``) and whose rewritten value is a view of a wider one (``(1, 2 * s0)``) needs a copy with eager's
# strides; the stride fix took only static layouts and raised LoweringError: the whole graph fell back with a
# warning (static batch: optimized). Now a permuted contiguous layout is copied as permute, clone, permute back.
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_transposed_outputs_under_a_symbolic_batch_are_optimized_with_eager_strides(strategy):
    options = {name: {"min_fuse_set_size": 2} for name in ("batch_linear_lhs", "batch_tanh")}
    w1, w2 = _rand(3, 6, seed=1), _rand(2, 6, seed=2)
    optimus_eq.last_reports.clear()
    compiled = torch.compile(_transposed_outputs_of_fused_ops,
                             backend=optimus_eq.backend(strategy=strategy, compile=False, pattern_options=options))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in (5, 7, 9):  # 7: Dynamo recompiles with a symbolic batch, which 9 reuses
            x = _rand(batch, 2, 6, seed=batch)
            got, want = compiled(x, w1, w2), _transposed_outputs_of_fused_ops(x, w1, w2)
            for g, e in zip(got, want):
                assert g.stride() == e.stride()
                torch.testing.assert_close(g, e)
    assert not [w for w in caught if "optimus_eq" in str(w.message)], [str(w.message) for w in caught]
    assert len(optimus_eq.last_reports) == 2 and all(r.fallback is None for r in optimus_eq.last_reports)
    assert optimus_eq.last_reports[-1].patterns_fired["batch_linear_lhs"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_post_grad_transposed_outputs_under_a_symbolic_batch_are_optimized_with_eager_strides(strategy):
    """The same at Aten-IR: AOTAutograd's forward graph under ``dynamic=True`` (the post-grad pass)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table

    def f(x):
        a, b, c = x.unbind(1)
        return torch.cat([a, b, c], 1).t(), (a * 2).t(), (b * 2).t()

    pass_ = optimus_eq.post_grad_pass(strategy)
    fallbacks = []

    def compiler(gm, example_inputs):
        pass_(gm.graph)
        fallbacks.append(optimus_eq.last_reports[-1].fallback)
        gm.recompile()
        return make_boxed_func(gm)

    torch._dynamo.reset()
    compiled = torch.compile(f, dynamic=True, backend=aot_autograd(
        fw_compiler=compiler, bw_compiler=compiler, decompositions=select_decomp_table()))
    for batch in (5, 7):
        x = _rand(batch, 3, 4, seed=batch).requires_grad_()
        got, want = compiled(x), f(x)
        for g, e in zip(got, want):
            assert g.stride() == e.stride()
            torch.testing.assert_close(g, e)
        sum(o.sum() for o in got).backward()
    assert fallbacks and all(f is None for f in fallbacks), fallbacks
