"""Our backend starts Inductor's Triton compile workers when Dynamo hands it a graph, before our optimizer
runs, as Dynamo's own ``inductor`` backend does (``maybe_warm_pool``); Inductor compiles kernels in the
calling process, one at a time, until that pool has answered. Inductor's compile is a spy here: what is
checked is the order of the calls and that a failing start loses nothing."""

from __future__ import annotations

import warnings

import torch
import torch._inductor.async_compile
import torch._inductor.compile_fx

import optimus_eq
from optimus_bridge import backend as backend_module
from optimus_eq import api
from conftest import rand


def _two_linears(x, w1, w2):
    return torch.relu(torch.nn.functional.linear(x, w1)) + torch.nn.functional.linear(x, w2)


def _args():
    return [rand(5, 4, seed=0), rand(3, 4, seed=1), rand(3, 4, seed=2)]


def _run(monkeypatch, backend, warm=None):
    """Compile ``_two_linears`` with ``backend``; the calls of the pool start, the optimizer and compile_fx,
    in order."""
    calls = []
    optimize = api.optimize

    def spy_optimize(*args, **kwargs):
        calls.append("optimize")
        return optimize(*args, **kwargs)

    def spy_compile_fx(gm, example_inputs, config_patches=None, **kwargs):
        calls.append("compile_fx")
        return gm.forward

    monkeypatch.setattr(torch._inductor.async_compile, "maybe_warm_pool", warm or (lambda: calls.append("pool")))
    monkeypatch.setattr(backend_module, "TRITON_DEVICES", ("cpu",))  # the graph here is on the CPU
    monkeypatch.setattr(api, "optimize", spy_optimize)
    monkeypatch.setattr(torch._inductor.compile_fx, "compile_fx", spy_compile_fx)
    torch._dynamo.reset()
    args = _args()
    torch.testing.assert_close(torch.compile(_two_linears, backend=backend)(*args), _two_linears(*args))
    return calls


def test_the_pool_starts_before_the_optimizer_runs(monkeypatch):
    assert _run(monkeypatch, optimus_eq.backend("eqsat")) == ["pool", "optimize", "compile_fx"]


def test_no_pool_without_inductor(monkeypatch):
    """``compile=False`` runs the optimized graph eagerly: no Triton kernel is ever compiled."""
    assert "pool" not in _run(monkeypatch, optimus_eq.backend("greedy", compile=False))


def test_a_failing_pool_start_loses_nothing(monkeypatch):
    """``maybe_warm_pool`` is private to Inductor: if it fails (moved, or a process that may not fork),
    the graph is still optimized and compiled, with no warning (Inductor starts its pool later itself)."""
    def broken():
        raise RuntimeError("Inductor async compile process pools are disabled in daemonic processes")

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        calls = _run(monkeypatch, optimus_eq.backend("greedy"), warm=broken)
    assert calls == ["optimize", "compile_fx"]
    assert optimus_eq.last_reports[-1].fallback is None
