"""Reproducers of bugs found by breaking what landed on 2026-12-01 (bmm_add, decompose_gemv_pass, the lowering's
and translation's module split, greedy's restore_subsumed retry). One test per bug; the docstring names the
symptom."""

from __future__ import annotations

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
    assert report.patterns_fired["batch_linear"] == 1 and "bmm_add" in gm2.code
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, actual = gm(*ex)[0], gm2(*ex)[0]
    assert actual.dtype == expected.dtype == torch.bfloat16
    ref = gm(*ex)[0].double()  # float32 run: bf16 rounding is the error both sides carry
    assert (actual.double() - ref).abs().max() <= 2 * (expected.double() - ref).abs().max() + 1e-2
