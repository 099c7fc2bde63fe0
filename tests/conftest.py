"""Shared test harness: differential testing of optimized FX graphs against eager PyTorch.

The backbone is :func:`check`: get an FX graph of ``fn`` (from dynamo, or from ``torch.fx.symbolic_trace``
which is much faster), optimize it with one strategy, and run it next to eager ``fn`` on fresh copies of
the same random inputs. It compares

* outputs: values (``torch.testing.assert_close``), dtypes, shapes and strides (dims of size 1 excluded:
  their stride is unobservable);
* inputs after the call (in-place mutations must happen the same way);
* aliasing: an optimized output may share storage with an input or another output only where eager's
  does (otherwise mutating a result later would write into the user's tensor), and is a view of an input,
  or overlaps another output, wherever eager's is (otherwise such a write would no longer reach it);
* gradients of every floating input through a random weighted sum of the outputs.

The eager reference is ``fn`` itself for symbolic_trace graphs, and for dynamo graphs the captured graph
run op by op, unoptimized (dynamo keeps duplicate outputs and outputs that are inputs out of the graph,
so ``fn``'s outputs need not line up with the graph's).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pytest
import torch
from hypothesis import HealthCheck, settings
import torch.fx
from torch.utils._pytree import tree_leaves

import optimus_eq

STRATEGIES = ("greedy", "eqsat")

# Each example traces and optimizes a graph (~0.05 s with symbolic_trace, ~0.3 s with dynamo): few
# examples, no deadline, derandomized so that the default run is reproducible. For a longer random
# search: pytest --hypothesis-profile=optimus-fuzz
_HC = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("optimus", max_examples=10, deadline=None, derandomize=True, suppress_health_check=_HC,
                          database=None)
settings.register_profile("optimus-fuzz", max_examples=300, deadline=None, suppress_health_check=_HC)
settings.load_profile("optimus")

# torch's structured-trace logger emits DEBUG records on every compile; they only bloat failure reports
logging.getLogger("torch.__trace").setLevel(logging.WARNING)

#: junk op kinds as :func:`optimus_eq.count_ops` names them
JUNK = ("split", "chunk", "unbind", "getitem", "cat", "stack")


# -- graph sources ---------------------------------------------------------------------------------

def dynamo_graph(fn: Callable, *inputs, dynamic: bool = False):
    """The single FX graph dynamo captures for ``fn(*inputs)``: ``(gm, example_inputs)``."""
    graphs = []

    def capture(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=capture, dynamic=dynamic, fullgraph=True)(*inputs)
    assert len(graphs) == 1, f"expected one graph, dynamo produced {len(graphs)}"
    return graphs[0]


def fx_graph(fn: Callable, *inputs):
    """``torch.fx.symbolic_trace(fn)`` (no meta: ``optimize`` computes it from the inputs)."""
    return torch.fx.symbolic_trace(fn), list(inputs)


# -- inputs ----------------------------------------------------------------------------------------

def rand(*shape, dtype=torch.float32, seed: int | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    return torch.randn(*shape, generator=g).to(dtype)


def _clone(t, requires_grad: bool = False):
    if isinstance(t, torch.Tensor):
        c = t.detach().clone()
        if requires_grad and c.is_floating_point():
            c.requires_grad_(True)
        return c
    return t


# -- comparisons -----------------------------------------------------------------------------------

def _observable_strides(t: torch.Tensor) -> tuple:
    return tuple(s for s, n in zip(t.stride(), t.shape) if n != 1)


def assert_same_tensor(actual, expected, what: str = "output") -> None:
    """Same type, shape, dtype, (observable) strides and values."""
    if not isinstance(expected, torch.Tensor):
        assert actual == expected, f"{what}: {actual!r} != {expected!r}"
        return
    assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual).__name__}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if expected.numel() > 1:
        assert _observable_strides(actual) == _observable_strides(expected), (
            f"{what}: strides {actual.stride()} != eager's {expected.stride()} (shape {tuple(expected.shape)})")
    torch.testing.assert_close(actual.detach(), expected.detach(), equal_nan=True, msg=lambda m: f"{what}: {m}")


def _storage(t):
    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return None
    return t.untyped_storage().data_ptr()


def _may_overlap(a, b) -> bool:
    from optimus_bridge.lower import _may_overlap as overlap

    return overlap(a, b)


def alias_pairs(outs: Sequence, ins: Sequence) -> set:
    """{("in", j, i)}: output i shares storage with input j; {("out", k, i)}: with output k < i."""
    pairs = set()
    for i, o in enumerate(outs):
        so = _storage(o)
        if so is None:
            continue
        for j, x in enumerate(ins):
            if _storage(x) == so:
                pairs.add(("in", j, i))
        for k in range(i):
            if _storage(outs[k]) == so:
                pairs.add(("out", k, i))
    return pairs


# -- the differential check ------------------------------------------------------------------------

@dataclass
class Checked:
    gm: torch.fx.GraphModule
    gm2: torch.fx.GraphModule
    report: Any
    outputs: list = field(default_factory=list)
    inputs: list = field(default_factory=list)


def _gm_args(example_inputs, trace_inputs, fresh):
    """Arguments for a dynamo graph: each placeholder that is one of ``trace_inputs`` gets the fresh
    copy of that input; anything else (parameters, buffers, ints) is passed as dynamo saw it."""
    args = []
    for e in example_inputs:
        for j, t in enumerate(trace_inputs):
            if e is t:
                args.append(fresh[j])
                break
        else:
            args.append(e)
    return args


def check(fn: Callable, inputs: Sequence, strategy: str, *, source: str = "dynamo", grad: bool = True,
          fallback_ok: bool = False, patterns=None, runs: int = 1, **options) -> Checked:
    """Optimize the graph of ``fn`` with ``strategy`` and compare it with eager ``fn`` (module docstring).

    ``grad``: also compare gradients of the floating inputs (set False when ``fn`` mutates an input).
    ``fallback_ok``: a fallback to the original graph is acceptable (otherwise it fails the test).
    Returns the graphs and report for structural assertions.
    """
    trace_inputs = [_clone(x) for x in inputs]
    if source == "dynamo":
        gm, example_inputs = dynamo_graph(fn, *trace_inputs)
    elif source == "fx":
        gm, example_inputs = fx_graph(fn, *trace_inputs)
    else:
        raise ValueError(source)
    before = str(gm.graph)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm2, report = optimus_eq.optimize(gm, example_inputs, strategy=strategy, patterns=patterns, **options)
    ours = [w for w in caught if "optimus_eq" in str(w.message)]
    if not fallback_ok:
        assert report.fallback is None, f"optimizer fell back: {report.fallback}"
        assert not ours, f"unexpected warning: {ours[0].message}"
    assert str(gm.graph) == before, "optimize() modified its input graph"
    gm2.graph.lint()

    result = Checked(gm, gm2, report)
    for run in range(runs):
        ref_in = [_clone(x, grad) for x in inputs]
        opt_in = [_clone(x, grad) for x in inputs]
        if source == "dynamo":
            # eager reference: the captured graph itself, run op by op (dynamo drops duplicate outputs and
            # outputs that are inputs from the graph, so ``fn``'s outputs need not line up with it)
            expected = gm(*_gm_args(example_inputs, trace_inputs, ref_in))
            actual = gm2(*_gm_args(example_inputs, trace_inputs, opt_in))
        else:
            expected = fn(*ref_in)
            actual = gm2(*opt_in)
        exp_flat, act_flat = tree_leaves(expected), tree_leaves(actual)
        assert len(act_flat) == len(exp_flat), f"{len(act_flat)} outputs, eager has {len(exp_flat)}"
        for i, (a, e) in enumerate(zip(act_flat, exp_flat)):
            assert_same_tensor(a, e, f"output {i}")
        for j, (a, e) in enumerate(zip(opt_in, ref_in)):
            assert_same_tensor(a, e, f"input {j} after the call")
        extra = alias_pairs(act_flat, opt_in) - alias_pairs(exp_flat, ref_in)
        assert not extra, f"optimized outputs alias where eager's do not: {sorted(extra)}"
        # a view of an input overlaps it: a write into the output must still reach the input (two outputs
        # that share a storage may not overlap, so losing that sharing is not observable)
        lost = {p for p in alias_pairs(exp_flat, ref_in) - alias_pairs(act_flat, opt_in)
                if p[0] == "in" or _may_overlap(exp_flat[p[1]], exp_flat[p[2]])}
        assert not lost, f"eager's outputs are views of inputs or overlap where the optimized ones do not: {sorted(lost)}"
        if grad:
            _check_grads(act_flat, exp_flat, opt_in, ref_in)
        result.outputs, result.inputs = act_flat, opt_in
    return result


def _check_grads(act_flat, exp_flat, opt_in, ref_in) -> None:
    leaves = [i for i, x in enumerate(ref_in) if isinstance(x, torch.Tensor) and x.requires_grad]
    diff = [i for i, e in enumerate(exp_flat) if isinstance(e, torch.Tensor) and e.requires_grad]
    if not leaves or not diff:
        return
    g = torch.Generator().manual_seed(1234)
    weights = [torch.randn(exp_flat[i].shape, generator=g).to(exp_flat[i].dtype) for i in diff]
    for i in diff:
        assert act_flat[i].requires_grad, f"output {i} lost requires_grad"
    loss_e = sum((exp_flat[i].float() * w.float()).sum() for i, w in zip(diff, weights))
    loss_a = sum((act_flat[i].float() * w.float()).sum() for i, w in zip(diff, weights))
    ge = torch.autograd.grad(loss_e, [ref_in[i] for i in leaves], allow_unused=True)
    ga = torch.autograd.grad(loss_a, [opt_in[i] for i in leaves], allow_unused=True)
    for i, a, e in zip(leaves, ga, ge):
        if e is None:
            assert a is None or not a.any(), f"grad of input {i}: eager has none"
            continue
        assert a is not None, f"grad of input {i} is missing"
        assert a.shape == e.shape and a.dtype == e.dtype, f"grad of input {i}: {a.shape} {a.dtype} vs {e.shape} {e.dtype}"
        # bf16/fp16 gradients summed in another order differ by an ulp or two
        tol = {"rtol": 4e-2, "atol": 1e-2} if e.dtype in (torch.bfloat16, torch.float16) else {}
        torch.testing.assert_close(a, e, **tol, msg=lambda m: f"grad of input {i}: {m}")


def junk_after(report) -> int:
    return sum(report.ops_after.get(k, 0) for k in JUNK)


@pytest.fixture
def no_compile_cache():
    """Inductor's FX graph cache and AOTAutograd's cache would replay an earlier run's compiled graph
    (keyed with the pass's uuid) without calling the pass: a test that reads the pass's counters or
    reports needs a real compile."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        yield


@pytest.fixture(params=STRATEGIES)
def strategy(request) -> str:
    return request.param


@pytest.fixture(autouse=True)
def _reset_dynamo():
    yield
    torch._dynamo.reset()
