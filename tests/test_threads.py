"""Threads: egglog's e-graph is unsendable (pyo3 panics when a thread other than its maker touches it).

On the GPU, AOTAutograd compiles the backward lazily on autograd's device thread, so a post-grad pass
runs on a thread other than the one that ran the forward's; users also compile from worker threads.
Every thread must get a working optimizer, and a Rust panic must never escape ``optimize``.
"""

from __future__ import annotations

import gc
import threading
import warnings

import egglog.bindings as eb
import pytest
import torch

import optimus_eq
import optimus_eq.api
from optimus_eq.egraph import EGraph
from optimus_eq.patterns import DEFAULT_REGISTRY
from conftest import STRATEGIES, check, dynamo_graph, rand


def model(x):
    a, b, c = torch.split(x, [2, 3, 4], 1)
    return torch.cat([a.tanh(), b.tanh(), c.tanh()], 1) * 2


def _in_thread(fn):
    """Run ``fn`` on a new thread; return its result or re-raise what it raised (BaseException included)."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 -- a PanicException must reach the test
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_optimize_on_another_thread_after_the_main_thread(strategy):
    x = rand(4, 9)
    gm, inputs = dynamo_graph(model, x)
    _, first = optimus_eq.optimize(gm, inputs, strategy=strategy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback warning fails the test
        new_gm, report = _in_thread(lambda: optimus_eq.optimize(gm, inputs, strategy=strategy))
    assert report.fallback is None
    assert report.nodes_after == first.nodes_after < report.nodes_before
    out = new_gm(*inputs)
    torch.testing.assert_close(out[0] if isinstance(out, (tuple, list)) else out, model(x))
    # and back on the main thread: its own template still works
    _, again = optimus_eq.optimize(gm, inputs, strategy=strategy)
    assert again.fallback is None and again.nodes_after == first.nodes_after


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_differential_check_on_a_worker_thread(strategy):
    _in_thread(lambda: check(model, [rand(3, 9)], strategy))


@pytest.mark.slow
def test_egraph_closed_by_another_thread_is_not_lent_again():
    patterns = DEFAULT_REGISTRY.select(None)
    eg = EGraph(patterns)
    _in_thread(eg.close)  # what a garbage collection on another thread does: must not touch the e-graph
    with EGraph(patterns) as fresh:  # this thread's next e-graph works (a new template)
        assert fresh.egraph is not None
        fresh.egraph.run_program(eb.Push(1))
        fresh.egraph.run_program(eb.Pop(eb.PanicSpan(), 1))
    del eg
    gc.collect()


@pytest.mark.slow
def test_rust_panic_inside_optimize_falls_back_with_one_warning(monkeypatch):
    foreign = eb.EGraph()  # made on this thread, touched from another: pyo3 raises PanicException

    def panicking_run(*args, **kwargs):
        foreign.run_program(*foreign.parse_program("(datatype PanicProbe (Probe))"))

    monkeypatch.setattr(optimus_eq.api, "_run", panicking_run)
    x = rand(4, 9)
    gm, inputs = dynamo_graph(model, x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, report = _in_thread(lambda: optimus_eq.optimize(gm, inputs, strategy="eqsat"))
    assert out is gm
    assert "PanicException" in report.fallback
    assert len([w for w in caught if "optimus_eq" in str(w.message)]) == 1


@pytest.mark.slow
def test_post_grad_backward_compiled_on_another_thread(no_compile_cache):
    """The GPU case: the forward compiles on the main thread, AOTAutograd compiles the backward lazily on
    the thread that runs it (autograd's device thread on CUDA; here a worker thread calls backward)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    lin = torch.nn.Linear(9, 9)
    x = rand(4, 9, seed=3)

    def f(x):
        return lin(model(x))

    compiled = torch.compile(f, backend=optimus_eq.backend(strategy="eqsat", post_grad=True))
    before = counters["optimus_eq"]["fallback"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(x.clone().requires_grad_(True))
        _in_thread(lambda: out.sum().backward())
    assert counters["optimus_eq"]["fallback"] == before, [str(w.message) for w in caught]
    ours = (lin.weight.grad.clone(), lin.bias.grad.clone())
    lin.zero_grad(set_to_none=True)
    f(x.clone().requires_grad_(True)).sum().backward()
    torch.testing.assert_close(ours, (lin.weight.grad, lin.bias.grad))


_EXIT_SCRIPT = """
import threading, time, torch, optimus_eq
def f(x):
    a, b = torch.split(x, 2, 1)
    return torch.cat([a.tanh(), b.tanh()], 1)
done = threading.Event()
def work():
    optimus_eq.optimize(torch.fx.symbolic_trace(f), [torch.randn(3, 4)])
    done.set()
    time.sleep(1000)
threading.Thread(target=work, daemon=True).start()
done.wait()
"""


@pytest.mark.slow
def test_no_unsendable_message_at_exit_with_a_live_optimizing_thread():
    """A thread that optimized and still runs at exit (autograd's device thread on the GPU) leaves its
    templates to the exiting thread; pyo3 must not complain that they are dropped there."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "unsendable" not in done.stderr, done.stderr[-2000:]
