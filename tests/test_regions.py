"""Global-state regions (``torch.no_grad()``, ``torch.autocast``): ops inside one region are optimized like
anywhere else, never together with ops of another region (bridge/optimus_bridge/regions.py)."""

from __future__ import annotations

import pytest
import torch

import optimus_eq
from optimus_eq import api
from conftest import check, rand

N = 6
BATCH2 = {"batch_linear": {"min_fuse_set_size": 2}}


def _linears(x, ws, bs):
    return [torch.nn.functional.linear(x[:, i], w, b) for i, (w, b) in enumerate(zip(ws, bs))]


def _weights(n=N, d=16):
    return [rand(d, d, seed=i) for i in range(n)], [rand(d, seed=100 + i) for i in range(n)]


def _batched(report) -> int:
    return sum(report.ops_after.get(k, 0) for k in ("baddbmm", "bmm", "bmm_add"))


@pytest.mark.slow
def test_linears_batched_inside_autocast(strategy):
    """Six Linears inside one autocast region become one bf16 baddbmm; the cat after the region reads it."""
    ws, bs = _weights()

    def f(x, *params):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ys = _linears(x, params[:N], params[N:])
        return torch.cat(ys, 1).float()

    got = check(f, [rand(4, N, 16), *ws, *bs], strategy)
    assert got.report.ops_after.get("linear", 0) == 0
    assert _batched(got.report) == 1


def test_pointwise_batched_inside_no_grad(strategy):
    """Six tanh inside ``no_grad`` make one group (greedy: one tanh; eqsat offers it and its cost model decides:
    Inductor fuses each mul -> tanh chain into the cat's kernel anyway); the result still needs no grad where
    eager's does not."""
    def f(x, y):
        with torch.no_grad():
            t = [torch.tanh(x[:, i] * y) for i in range(N)]
        return torch.cat(t, 1), x * 2

    got = check(f, [rand(4, N, 8), rand(4, 8)], strategy)
    assert got.report.rule_matches.get("batch_tanh", 0) == 1
    if strategy == "greedy":
        assert got.report.ops_after.get("tanh", 0) == 1


def test_never_batched_across_a_region_boundary(strategy):
    """Three Linears inside autocast and three outside make two groups, not one (one group would compute
    all six in one dtype)."""
    ws, bs = _weights()

    def f(x, *params):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            inside = _linears(x[:, :3], params[:3], params[N:N + 3])
        outside = [torch.nn.functional.linear(x[:, 3 + i], params[3 + i], params[N + 3 + i]) for i in range(3)]
        return torch.cat([y.float() for y in inside] + outside, 1)

    got = check(f, [rand(4, N, 16), *ws, *bs], strategy, pattern_options=BATCH2, trace_grad=True)
    # each batched op holds the three of one side (eqsat's cost model may keep a side's three Linears)
    assert got.report.ops_after.get("linear", 0) + 3 * _batched(got.report) == N
    if strategy == "greedy":
        assert _batched(got.report) == 2


def test_detached_member_keeps_none_gradient(strategy):
    """A Linear whose output is detached after the region gives its weight no gradient in eager (None);
    batching it with the others inside the region must keep None, not zeros."""
    ws, bs = _weights()

    def f(x, *params):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ys = _linears(x, params[:N], params[N:])
        ys[2] = ys[2].detach()
        return torch.cat(ys, 1).float()

    got = check(f, [rand(4, N, 16), *ws, *bs], strategy, trace_grad=True)
    assert got.report.ops_after.get("linear", 0) == 1  # the detached one stays apart


def test_nested_regions(strategy):
    """no_grad inside autocast: three segments with three states; values, dtypes and requires_grad."""
    ws, bs = _weights()

    def f(x, *params):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ys = _linears(x, params[:N], params[N:])
            with torch.no_grad():
                zs = [torch.nn.functional.linear(y, params[0]) for y in ys]
            a = torch.cat(ys, 1)
        return a.float(), torch.cat(zs, 1)

    check(f, [rand(4, N, 16), *ws, *bs], strategy, trace_grad=True)


def test_mutation_keeps_the_whole_span_frozen(strategy):
    """With an in-place write in the graph, regions are not optimized apart (a view made in one could see a
    write in another): the span between the switches stays as it was, and the result is eager's."""
    def f(x):
        a, b = x.split(2, 1)
        with torch.no_grad():
            c = torch.cat([a.tanh(), b.tanh()], 1)
        x.add_(1)
        return c + x

    got = check(f, [rand(3, 4)], strategy, grad=False)
    assert not any("segments between" in n for n in got.report.notes)


def test_failing_segment_is_left_alone(strategy, monkeypatch):
    """A segment whose optimization fails keeps its nodes (one warning); the other segments are still
    optimized and the result is eager's."""
    ws, bs = _weights()
    real, calls = api.lower, []

    def lower_failing_first(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected")
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "lower", lower_failing_first)

    def f(x, *params):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ys = _linears(x, params[:N], params[N:])
        return torch.cat([y.float().tanh() for y in ys], 1)

    got = check(f, [rand(4, N, 16), *ws, *bs], strategy, fallback_ok=True)  # check() swallows the warning
    assert [n for n in got.report.notes if "injected" in n and "left as it was" in n]
    assert got.report.fallback is None
    assert got.report.ops_after.get("tanh", 0) == 1  # the segment after the region was optimized
    assert got.report.ops_after.get("linear", 0) == N  # the failing one was left as it was


@pytest.mark.slow
def test_backend_trains_through_autocast():
    """The torch.compile backend on a model with an autocast region: one training step's loss and every
    parameter gradient match eager (float64 reference not needed: same bf16 ops, same order per member)."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(N))

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                ys = [m(x[:, i]) for i, m in enumerate(self.lin)]
            return torch.cat(ys, 1).float().sum()

    torch.manual_seed(0)
    eager, x = M(), rand(4, N, 16)
    ours = M()
    ours.load_state_dict(eager.state_dict())
    compiled = torch.compile(ours, backend=optimus_eq.backend("greedy"))
    eager(x).backward()
    compiled(x).backward()
    for (name, p), q in zip(eager.named_parameters(), ours.parameters()):
        assert q.grad is not None, name
        torch.testing.assert_close(q.grad, p.grad, rtol=2e-2, atol=2e-2, msg=name)
