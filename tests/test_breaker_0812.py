"""Reproducers of bugs found by breaking what landed on 2026-12-01 (bmm_add, decompose_gemv_pass, the lowering's
and translation's module split, greedy's restore_subsumed retry). One test per bug; the docstring names the
symptom."""

from __future__ import annotations

import pickle

import pytest
import torch

import optimus_eq
from conftest import dynamo_graph, rand

#: batch_linear fires from two members
SMALL = {"pattern_options": {"batch_linear": {"min_fuse_set_size": 2}, "batch_linear_lhs": {"min_fuse_set_size": 2},
                             "batch_relu": {"min_fuse_set_size": 2}}}


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_bmm_add_under_runtime_autocast_keeps_the_autocast_dtype(strategy):
    """Symptom: a float32 graph optimized with batch_linear (bias, so bmm_add) and then run inside
    ``torch.autocast("cpu", bfloat16)`` returned float32 where eager's linears return bfloat16: the bmm ran
    in bf16 and ``+ bias`` (float32) promoted it back. baddbmm, which bmm_add replaced, keeps bf16."""
    torch.manual_seed(0)
    lins = [torch.nn.Linear(8, 6) for _ in range(3)]

    def f(a, b, c):
        return lins[0](a).relu() + lins[1](b).relu() + lins[2](c).relu()

    xs = [rand(4, 8, seed=i) for i in range(3)]
    gm, ex = dynamo_graph(f, *xs)
    gm2, report = optimus_eq.optimize(gm, ex, strategy=strategy, **SMALL)
    assert report.rule_matches["batch_linear"] == 1 and "bmm_add" in gm2.code
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, actual = gm(*ex)[0], gm2(*ex)[0]
    assert actual.dtype == expected.dtype == torch.bfloat16
    ref = gm(*ex)[0].double()  # float32 run: bf16 rounding is the error both sides carry
    assert (actual.double() - ref).abs().max() <= 2 * (expected.double() - ref).abs().max() + 1e-2


def test_graph_with_bmm_add_pickles_and_traces():
    """Symptom (of the first fix of the test above, which read ``mat1.device`` unconditionally): pickling an
    optimized GraphModule with a bmm_add call, or ``torch.fx.symbolic_trace`` of it, raised ``RuntimeError:
    unpackString`` (the device of a Proxy passed to ``torch.is_autocast_enabled``)."""
    torch.manual_seed(0)
    lins = [torch.nn.Linear(8, 6) for _ in range(2)]

    def f(a, b):
        return lins[0](a).relu() * lins[1](b)

    xs = [rand(4, 8, seed=i) for i in range(2)]
    gm, ex = dynamo_graph(f, *xs)
    gm2, report = optimus_eq.optimize(gm, ex, strategy="greedy", **SMALL)
    assert "bmm_add" in gm2.code
    for again in (pickle.loads(pickle.dumps(gm2)), torch.fx.symbolic_trace(gm2)):
        torch.testing.assert_close(again(*ex)[0], gm(*ex)[0])


@pytest.mark.xfail(strict=True, reason="decompose_gemv_pass emits torch.mul/sum/add nodes, which autocast leaves "
                   "in float32; a fix needs one call that is F.linear under a runtime autocast (as bmm_add does)")
def test_gemv_under_runtime_autocast_keeps_the_autocast_dtype():
    """Symptom: a float32 graph whose ``Linear(16, 1)`` became ``sum(x * w, -1, keepdim=True) + b``
    (decompose_gemv_pass; CUDA/XPU by default, CPU here through tests/test_gemv.py's registry), run inside
    ``torch.autocast(bfloat16)``, returns float32 where eager's linear returns bfloat16 (mul and sum are not
    autocast ops). Same class as the bmm_add test above."""
    from test_gemv import _cpu_registry

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 1)

    def f(x):
        return head(torch.tanh(x))

    gm, ex = dynamo_graph(f, rand(4, 16, seed=3))
    gm2, report = optimus_eq.optimize(gm, ex, strategy="greedy", registry=_cpu_registry())
    assert report.rule_matches["decompose_gemv_pass"] == 1
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert gm2(*ex)[0].dtype == gm(*ex)[0].dtype == torch.bfloat16
