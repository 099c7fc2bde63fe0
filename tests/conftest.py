"""Shared test harness: differential testing of optimized FX graphs against eager PyTorch.

The backbone is :func:`check`: get an FX graph of ``fn`` (from dynamo, or from ``torch.fx.symbolic_trace``
which is much faster), optimize it with one strategy, and run it next to eager ``fn`` on fresh copies of
the same random inputs. The comparison is tests/oracle.py's :func:`oracle.compare_runs`:

* outputs: dtypes, shapes, strides (dims of size 1 excluded: their stride is unobservable) and
  ``requires_grad`` exactly; values against a float64 run of the eager function (ours no further from
  it than eager, by a small factor: fair to a rewrite that reorders a float sum);
* inputs after the call (in-place mutations must happen the same way);
* aliasing: an optimized output may share storage with an input or another output only where eager's
  does (otherwise mutating a result later would write into the user's tensor), and is a view of an input,
  or overlaps another output, wherever eager's is (otherwise such a write would no longer reach it);
* gradients of every floating input through a random weighted sum of the outputs: None exactly where
  eager's is None, values against the float64 run's gradients.

The eager reference is ``fn`` itself for symbolic_trace graphs, and for dynamo graphs the captured graph
run op by op, unoptimized (dynamo keeps duplicate outputs and outputs that are inputs out of the graph,
so ``fn``'s outputs need not line up with the graph's).
"""

from __future__ import annotations

import logging
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pytest
import torch
from hypothesis import HealthCheck, settings
import torch.fx
from torch.utils._pytree import tree_leaves

import optimus_eq
import oracle

# bench/'s scripts (phase_order, scale, synthetic) are imported by tests; the bench package is installed
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "bench"))

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


# -- comparisons (the oracle: tests/oracle.py) ------------------------------------------------------

def assert_same_tensor(actual, expected, what: str = "output", ref64=None) -> None:
    """Same type, shape, dtype, (observable) strides and values; values judged against ``ref64``, the
    float64 reference of ``expected`` (None: ``assert_close`` against eager). See tests/oracle.py."""
    oracle.assert_same_tensor(actual, expected, what, ref64)


alias_pairs = oracle.alias_pairs


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
          fallback_ok: bool = False, patterns=None, runs: int = 1, trace_grad: bool = False, **options) -> Checked:
    """Optimize the graph of ``fn`` with ``strategy`` and compare it with eager ``fn`` (module docstring).

    ``grad``: also compare gradients of the floating inputs (set False when ``fn`` mutates an input).
    ``fallback_ok``: a fallback to the original graph is acceptable (otherwise it fails the test).
    ``trace_grad``: trace with the floating inputs requiring grad (as a training step's graph, whose meta
    then says which values require grad), not only run with them.
    Returns the graphs and report for structural assertions.
    """
    trace_inputs = [_clone(x, trace_grad) for x in inputs]
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
            ref_args = _gm_args(example_inputs, trace_inputs, ref_in)
            ref64 = oracle.float64_reference(gm, ref_args)
            expected = gm(*ref_args)
            actual = gm2(*_gm_args(example_inputs, trace_inputs, opt_in))
        else:
            ref64 = oracle.float64_reference(fn, ref_in)
            expected = fn(*ref_in)
            actual = gm2(*opt_in)
        oracle.compare_runs(actual, expected, opt_in, ref_in, ref64, grad=grad)
        result.outputs, result.inputs = tree_leaves(actual), opt_in
    return result


def _check_grads(act_flat, exp_flat, opt_in, ref_in, ref64: "oracle.Reference | None" = None) -> None:
    """Gradients of the inputs that require grad through a weighted sum of the outputs
    (:func:`oracle.assert_same_grads`; ``ref64``: the float64 reference of the eager run)."""
    oracle.assert_same_grads(act_flat, exp_flat, opt_in, ref_in, ref64)


def junk_after(report) -> int:
    return sum(report.ops_after.get(k, 0) for k in JUNK)


# -- programs shared by several test files ---------------------------------------------------------

class FieldLinears(torch.nn.Module):
    """``FIELDS`` per-field ``Linear(DIM, DIM)`` + tanh between a split of a ``[B, FIELDS * DIM]`` input and a
    cat: one batch_linear group (whose weight and bias stacks parameter packing packs)."""

    DIM, FIELDS = 8, 5

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.ModuleList(torch.nn.Linear(self.DIM, self.DIM) for _ in range(self.FIELDS))

    def forward(self, x):
        xs = torch.split(x, self.DIM, 1)
        return torch.cat([torch.tanh(self.lin[i](xs[i])) for i in range(self.FIELDS)], 1)


def two_gemms_one_lhs(x, a, b):
    """Two GEMMs of one input (a batch_gemm_lhs group) with a pointwise chain after each."""
    return torch.sigmoid(x @ a) * 2 + torch.sigmoid(x @ b) * 3


@pytest.fixture
def no_compile_cache():
    """Inductor's FX graph cache and AOTAutograd's cache would replay an earlier run's compiled graph
    (keyed with the pass's uuid) without calling the pass: a test that reads the pass's counters or
    reports needs a real compile."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        yield


@pytest.fixture
def packings(monkeypatch) -> list:
    """Every ``(packed_gm, inputs, packs)`` (or None) that the backend's parameter packing returns while the test
    runs, in order (``optimus_bridge.param_pack.pack_parameters`` wrapped where the backend calls it)."""
    from optimus_bridge import backend as backend_module

    seen: list = []
    real = backend_module._param_pack.pack_parameters

    def spy(gm, example_inputs, **kw):
        seen.append(real(gm, example_inputs, **kw))
        return seen[-1]

    monkeypatch.setattr(backend_module._param_pack, "pack_parameters", spy)
    return seen


@pytest.fixture(params=STRATEGIES)
def strategy(request) -> str:
    return request.param


@pytest.fixture(autouse=True)
def _reset_dynamo():
    yield
    torch._dynamo.reset()


#: tiers of the suite by file (pytest -m <tier>); a test in no file here is in the ``fx`` tier. ``-m fast`` is the
#: fx and terms tiers without the tests marked ``slow`` (Inductor compiles, subprocesses, big graphs: anything over
#: about half a second), what a developer runs on every change (README)
FILE_TIERS = {"test_plan_gate.py": "gate", "test_fuzz.py": "fuzz", "test_fuzz_gemm.py": "fuzz",
              "test_fuzz_horizontal.py": "fuzz", "test_fuzz_profile.py": "fuzz", "test_fuzz_regressions.py": "fuzz",
              "test_rule_terms.py": "terms", "test_egraph.py": "terms", "test_registry.py": "terms",
              "test_extract.py": "terms", "test_extract_cycles.py": "terms", "test_saturate.py": "terms"}


def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier (:data:`FILE_TIERS`) and, when it is in the terms or fx tier and not slow,
    ``fast``."""
    for item in items:
        tier = FILE_TIERS.get(item.path.name, "fx")
        item.add_marker(getattr(pytest.mark, tier))
        if tier in ("terms", "fx") and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)


def pytest_sessionfinish(session):
    """Under pytest-xdist (``-n 2``) each worker hands its oracle figures to the controller, which prints them."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["oracle"] = (dict(oracle.FALLBACKS), list(oracle.CLOSEST))


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistOracle(), "optimus_xdist_oracle")


class _XdistOracle:
    """The controller's side of :func:`pytest_sessionfinish`: merges each finished worker's oracle figures."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        fallbacks, closest = getattr(node, "workeroutput", {}).get("oracle", ({}, [0.0, ""]))
        oracle.FALLBACKS.update(fallbacks)
        if closest[0] > oracle.CLOSEST[0]:
            oracle.CLOSEST[:] = closest


def pytest_terminal_summary(terminalreporter):
    """The oracle's fallbacks to assert_close and its closest call (tests/oracle.py), for tuning K/ULPS."""
    if oracle.FALLBACKS or oracle.CLOSEST[0]:
        terminalreporter.write_line(f"oracle: closest call {oracle.CLOSEST[0]:.2f} of the bound ({oracle.CLOSEST[1]}); "
                                    f"fallbacks to assert_close: {dict(oracle.FALLBACKS)}")
