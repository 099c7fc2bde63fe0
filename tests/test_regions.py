"""Global-state regions (issue 10, item 6): ops inside ``torch.autocast`` and ``torch.no_grad`` blocks are
batched within their region, never across its boundary; values, dtypes and gradients equal eager's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import STRATEGIES, check, rand

TWO = {"pattern_options": {"batch_linear": {"min_fuse_set_size": 2}, "batch_tanh": {"min_fuse_set_size": 2}}}


def _ws(n=6, seed=10):
    return [rand(4, 4, seed=seed + i) for i in range(n)]


def autocast_linears(x, *ws):
    y = x.relu()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = torch.cat([F.linear(v, w) for v, w in zip(torch.split(y, 4, 1), ws)], 1)
    return z.float() + 1


def linears_inside_and_outside(x, *ws):
    xs = torch.split(x, 4, 1)
    outside = [F.linear(v, w) for v, w in zip(xs[:3], ws[:3])]  # fp32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = [F.linear(v, w) for v, w in zip(xs[3:], ws[3:])]  # bf16
    return torch.cat(outside, 1), torch.cat(inside, 1)


def no_grad_tanhs(x, y):
    a = x * 2
    with torch.no_grad():
        t = torch.cat([p.tanh() for p in torch.split(y, 3, 1)], 1)
    return a + t


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_linears_inside_autocast_are_batched(strategy):
    r = check(autocast_linears, [rand(8, 24, seed=1), *_ws()], strategy).report
    assert r.patterns_fired.get("batch_linear", 0) >= 1
    assert r.ops_after.get("linear", 0) == 0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_no_batch_across_the_region_boundary(strategy):
    r = check(linears_inside_and_outside, [rand(8, 24, seed=2), *_ws()], strategy, **TWO).report
    assert r.patterns_fired.get("batch_linear", 0) == 2  # one group inside, one outside: never one of six


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_pointwise_inside_no_grad_is_batched(strategy):
    r = check(no_grad_tanhs, [rand(4, 12, seed=3), rand(4, 12, seed=4)], strategy, **TWO).report
    assert r.ops_after.get("tanh", 0) == 1
