"""Our backend starts Inductor's Triton compile workers when Dynamo hands it a graph, before our optimizer
runs, as Dynamo's own ``inductor`` backend does (``maybe_warm_pool``); Inductor compiles kernels in the
calling process, one at a time, until that pool has answered. Inductor's compile is a spy here: what is
checked is the order of the calls, that a failing start loses nothing, that a graph on the CPU starts no pool,
and that the pool starts under the compile's own Inductor config."""

from __future__ import annotations

import concurrent.futures
import warnings

import pytest
import torch
import torch._inductor.async_compile as async_compile
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


# -- graphs on the CPU; the compile's own Inductor config ----------------------------------------------------
# The pool started outside the compile's own Inductor config (``inductor_config={"compile_threads": 1}`` started a
# pool of the global size) and for graphs on the CPU, whose kernels never use it (with Triton installed, a CUDA
# build running a CPU model: a ~300 MB sidecar process and its workers that plain ``torch.compile`` never starts).

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
