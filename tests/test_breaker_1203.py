"""Breaker session 16 (2026-12-03): the shared-LHS GEMM merge ``batch_gemm_lhs`` in training and inference.

Hunted (both strategies, ``min_fuse_set_size`` 2, float64 where the dtype was free; ~150 programs): gradients
of both weights with one of them ``requires_grad=False`` or a buffer (None stays None), a weight shared by both
GEMMs (``x @ P`` with ``F.linear(x, P)`` and with ``F.linear(x, P.t())``), the LHS as a weight (``x @ x``), a
member whose weight is another member's output, transposed / expanded weights, 3-D and 4-D LHS, an expanded
(stride-0) LHS, K = 1, int64 and complex128, float16 / bfloat16, autocast around both or one member, no_grad
around one or two of three members, ``detach`` / ``sign`` / ``where`` / ``argmax`` consumers (gradient reach),
in-place ops on the LHS or a weight before, between and after the GEMMs, an output mutated inside the graph,
layout readers of the narrowed outputs (``view(-1)``, ``stride()``, ``is_contiguous``), outputs mutated by the
caller, symbolic batches (``dynamic=True``, static and marked-static weights, recompiles at size 1), the
``torch.compile`` backend with ``compile=False`` on ``nn.Module`` s with SGD steps (parameter packing on) and
with Inductor (static and ``dynamic=True``, frozen / buffer weights), ``torch.fx.symbolic_trace`` d modules
(weights as ``get_attr``), the bench Wukong model training with Adam, mixes with ``addmm`` / ``baddbmm`` /
biased linears / other horizontal patterns at ``min_fuse_set_size`` 2, channels-last / permuted / offset /
strided LHS, the matmul spellings (``@``, ``torch.matmul``, ``torch.mm``, ``Tensor.__rmatmul__``, methods,
keywords).

No wrong value, dtype, stride, ``requires_grad``, gradient or None-ness of a gradient found: the rewrite
declines every risky case (mutation anywhere in the alias group, members whose gradient signatures differ,
mixed dtypes, global-state switches between members) and fuses the rest correctly. The known layout
difference of the matmul weight's gradient seen by ``torch.autograd.grad`` is test_breaker_1202g's xfail.

The checks below are the riskiest of those, kept as differential tests that assert the merge happened (so
they test the rewrite, not its absence).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

import optimus_eq
from conftest import check, dynamo_graph

OPTS = {"batch_gemm_lhs": {"min_fuse_set_size": 2}}


def _rand(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def _copy(t, requires_grad):
    """A leaf copy of ``t`` with its strides and storage offset (``clone`` makes a non-dense tensor
    contiguous)."""
    size = t.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    c = torch.zeros(size, dtype=t.dtype).as_strided(t.shape, t.stride(), t.storage_offset()).copy_(t.detach())
    assert (c.stride(), c.storage_offset()) == (t.stride(), t.storage_offset())
    return c.requires_grad_(requires_grad)


def _optimize(fn, args, requires_grad, strategy, **options):
    """Dynamo's graph of ``fn`` traced with ``requires_grad`` per input, optimized: ``(gm, gm2, report, ex,
    traced inputs)``; no fallback, no warning of ours."""
    traced = [_copy(a, g) for a, g in zip(args, requires_grad)]
    gm, ex = dynamo_graph(fn, *traced)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm2, report = optimus_eq.optimize(gm, ex, strategy=strategy, pattern_options=OPTS, **options)
    ours = [str(w.message) for w in caught if "optimus_eq" in str(w.message)]
    assert report.fallback is None and not ours, (report.fallback, ours)
    return gm, gm2, report, ex, traced


def _same_run(gm, gm2, ex, traced, args, requires_grad):
    """Run both graphs on fresh copies; outputs (values, dtypes, strides, requires_grad) and the gradients of
    a weighted sum of the outputs (None-ness, values, dtypes) must agree (float64: reorderings are ~1e-15)."""
    def fresh():
        return [_copy(a, g) for a, g in zip(args, requires_grad)]

    def call(g, ins):
        by_id = {id(t): i for i, t in enumerate(traced)}
        return g(*[ins[by_id[id(e)]] if id(e) in by_id else e for e in ex])

    ref_in, opt_in = fresh(), fresh()
    want, got = call(gm, ref_in), call(gm2, opt_in)
    assert len(want) == len(got)
    for a, e in zip(got, want):
        assert (a.dtype, a.shape, a.requires_grad) == (e.dtype, e.shape, e.requires_grad)
        if e.numel() > 1:
            assert [s for s, n in zip(a.stride(), a.shape) if n > 1] == [s for s, n in zip(e.stride(), e.shape) if n > 1]
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)
    weights = [torch.randn(e.shape, generator=torch.Generator().manual_seed(i), dtype=e.dtype)
               for i, e in enumerate(want)]
    if any(e.requires_grad for e in want):
        sum((e * w).sum() for e, w in zip(want, weights) if e.requires_grad).backward()
        sum((a * w).sum() for a, w in zip(got, weights) if a.requires_grad).backward()
    for a, e in zip(opt_in, ref_in):
        assert (a.grad is None) == (e.grad is None), (a.grad, e.grad)
        if e.grad is not None:
            assert a.grad.dtype == e.grad.dtype
            torch.testing.assert_close(a.grad, e.grad, rtol=1e-12, atol=1e-12)


def _fmb_lcb(x, p, w):
    t = x.transpose(1, 2)
    return torch.cat([t @ p, F.linear(t, w)], -1).tanh()


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
@pytest.mark.parametrize("requires_grad", [(True, True, False), (True, False, True), (False, True, False),
                                           (False, False, True)], ids=["w_frozen", "p_frozen", "only_p", "only_w"])
def test_a_frozen_weight_keeps_a_none_gradient_through_the_fused_weight(strategy, requires_grad):
    """The fused weight ``cat([P.t(), W])`` requires grad when one member's weight does; the frozen one's
    gradient must still be None. With a frozen LHS too the members' outputs differ in requires_grad and
    are left apart."""
    args = [_rand(3, 8, 6), _rand(8, 5, seed=1), _rand(4, 8, seed=2)]
    gm, gm2, report, ex, traced = _optimize(_fmb_lcb, args, requires_grad, strategy)
    # without the LHS requiring grad, one member's output requires grad and the other's not: no group
    assert report.patterns_fired.get("batch_gemm_lhs") == (1 if requires_grad[0] else None), \
        dict(report.patterns_fired)
    _same_run(gm, gm2, ex, traced, args, requires_grad)


def _shared_weight(x, p):
    return torch.cat([x @ p, F.linear(x, p)], -1) * 2


def _shared_weight_transposed(x, p):
    # the fused weight is cat([P.t(), P.t()])
    return torch.cat([x @ p, F.linear(x, p.t())], -1) * 2


def _lhs_as_weight(x, w):
    return torch.cat([x @ x, F.linear(x, w)], -1) * 2


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
@pytest.mark.parametrize("fn", [_shared_weight, _shared_weight_transposed, _lhs_as_weight])
def test_a_weight_read_twice_or_as_the_lhs_accumulates_its_gradient(strategy, fn):
    """One tensor in the fused weight cat twice, or the LHS itself as a weight: its gradient is the sum over
    its uses, as in eager."""
    args = [_rand(8, 8), _rand(8, 8, seed=1)] if fn is not _lhs_as_weight else [_rand(8, 8), _rand(3, 8, seed=2)]
    gm, gm2, report, ex, traced = _optimize(fn, args, (True, True), strategy)
    assert report.patterns_fired.get("batch_gemm_lhs") == 1, dict(report.patterns_fired)
    _same_run(gm, gm2, ex, traced, args, (True, True))


def _one_member_under_no_grad(x, p, w, q):
    with torch.no_grad():
        z = x @ p
    return torch.cat([z, F.linear(x, w), x @ q], -1)


def _one_member_under_autocast(x, p, w, q):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = x @ p
    return torch.cat([z.float(), F.linear(x, w), x @ q], -1)


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
@pytest.mark.parametrize("fn", [_one_member_under_no_grad, _one_member_under_autocast])
def test_a_member_inside_a_region_stays_out_of_the_group_of_the_others(strategy, fn):
    """Three GEMMs of one input, one inside ``no_grad`` / autocast: the two outside merge, the one inside
    keeps its region's meaning (no gradient / bfloat16)."""
    dtype = torch.float32 if fn is _one_member_under_autocast else torch.float64
    args = [_rand(6, 8, dtype=dtype), _rand(8, 5, seed=1, dtype=dtype), _rand(3, 8, seed=2, dtype=dtype),
            _rand(8, 2, seed=3, dtype=dtype)]
    c = check(fn, args, strategy, trace_grad=True, pattern_options=OPTS)
    assert c.report.patterns_fired.get("batch_gemm_lhs") == 1, dict(c.report.patterns_fired)


def _both_under_autocast(x, p, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.cat([x @ p, F.linear(x, w)], -1)
    return y.float() * 2


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_both_members_under_autocast_merge_in_the_region_s_dtype(strategy):
    args = [_rand(6, 8, dtype=torch.float32), _rand(8, 5, seed=1, dtype=torch.float32),
            _rand(3, 8, seed=2, dtype=torch.float32)]
    c = check(_both_under_autocast, args, strategy, trace_grad=True, pattern_options=OPTS)
    assert c.report.patterns_fired.get("batch_gemm_lhs") == 1, dict(c.report.patterns_fired)
    (lin,) = [n for n in c.gm2.graph.nodes if n.op == "call_function" and n.target is F.linear]
    assert lin.meta["val"].dtype == torch.bfloat16


def _write_between(x, p, w):
    z = x @ p
    x.add_(1)
    return z, F.linear(x, w)


def _write_weight_after(x, p, w):
    z, y = x @ p, F.linear(x, w)
    w.mul_(2)
    p.add_(1)
    return torch.cat([z, y], -1)


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
@pytest.mark.parametrize("fn", [_write_between, _write_weight_after])
def test_writes_to_the_lhs_or_a_weight_around_the_gemms_are_respected(strategy, fn):
    """A GEMM before a write to its LHS or weight and one after cannot be one GEMM; after both, the fused
    weight would have to be read before the write. Values and the written inputs as in eager."""
    c = check(fn, [_rand(6, 8), _rand(8, 5, seed=1), _rand(3, 8, seed=2)], strategy, grad=False,
              pattern_options=OPTS)
    assert not c.report.patterns_fired.get("batch_gemm_lhs"), dict(c.report.patterns_fired)


class _Wukong(torch.nn.Module):
    """FMB and LCB GEMMs on one transposed input, the LCB weight frozen or a buffer, and an unused weight."""

    def __init__(self, frozen: str) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.p = torch.nn.Parameter(torch.randn(8, 5, generator=g, dtype=torch.float64))
        w = torch.randn(3, 8, generator=g, dtype=torch.float64)
        if frozen == "buffer":
            self.register_buffer("w", w)
        else:
            self.w = torch.nn.Parameter(w, requires_grad=frozen != "param")
        self.unused = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))

    def forward(self, x):
        t = x.transpose(1, 2)
        return torch.cat([t @ self.p, F.linear(t, self.w)], -1) * self.p.sum()


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
@pytest.mark.parametrize("frozen", ["none", "param", "buffer"])
def test_modules_train_like_eager_under_a_symbolic_batch(strategy, frozen):
    """Through the backend (no Inductor, parameter packing on), ``dynamic=True``, SGD with momentum over
    batches 4, 5, 3: outputs, input and parameter gradients (None kept None), parameters after each step."""
    model = _Wukong(frozen)
    eager = copy.deepcopy(model)
    optimus_eq.last_reports.clear()
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=True,
                             backend=optimus_eq.backend(strategy=strategy, compile=False, pattern_options=OPTS))
    opt_m = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    for b in (4, 5, 3):
        x = _rand(b, 8, 6, seed=b).requires_grad_()
        x2 = x.detach().clone().requires_grad_()
        got, want = compiled(x), eager(x2)
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        weights = _rand(*want.shape, seed=10 + b)
        (got * weights).sum().backward()
        (want * weights).sum().backward()
        torch.testing.assert_close(x.grad, x2.grad, rtol=1e-12, atol=1e-12)
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            assert (p.grad is None) == (q.grad is None), name
            if q.grad is not None:
                assert p.grad.stride() == q.grad.stride(), name
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-12, atol=1e-12)
        opt_m.step(), opt_e.step(), opt_m.zero_grad(), opt_e.zero_grad()
        for p, q in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-12)
    reports = optimus_eq.last_reports
    assert reports and all(r.fallback is None for r in reports)
    assert all(r.patterns_fired.get("batch_gemm_lhs") == 1 for r in reports), [dict(r.patterns_fired) for r in reports]


def _separate_views(x, p, w):
    t = x.transpose(1, 2)
    return (t @ p).transpose(1, 2), F.linear(t, w).flatten(1)


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_separate_layout_sensitive_outputs_under_a_symbolic_batch_in_inference(strategy):
    """Inference (one gradient signature): the members' outputs, narrows of the fused GEMM, returned
    transposed and flattened under a symbolic batch: eager's values and strides at every batch size."""
    p, w = _rand(8, 5, seed=1), _rand(3, 8, seed=2)
    torch._dynamo.mark_static(p), torch._dynamo.mark_static(w)  # else their output features are symbolic
    optimus_eq.last_reports.clear()
    torch._dynamo.reset()
    compiled = torch.compile(_separate_views, dynamic=True,
                             backend=optimus_eq.backend(strategy=strategy, compile=False, pattern_options=OPTS))
    for b in (4, 5, 3):
        x = _rand(b, 8, 6, seed=b)
        for g, e in zip(compiled(x, p, w), _separate_views(x, p, w)):
            assert g.stride() == e.stride()
            torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)
    assert optimus_eq.last_reports[0].patterns_fired.get("batch_gemm_lhs") == 1


def _lhs(layout):
    if layout == "channels_last":
        return _rand(2, 3, 4, 8).to(memory_format=torch.channels_last)
    if layout == "permuted":
        return _rand(2, 8, 3, 4).permute(0, 2, 3, 1)
    if layout == "offset":
        return _rand(50)[2:42].view(5, 8)
    return _rand(8, 12)[:, ::2].t()  # strided and transposed


def _separate(x, p, w):
    return x @ p, F.linear(x, w)


def _joined(x, p, w):
    return torch.cat([x @ p, F.linear(x, w)], -1)


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
@pytest.mark.parametrize("layout", ["channels_last", "permuted", "offset", "strided"])
def test_lhs_layouts_in_training_and_with_separate_outputs_in_inference(strategy, layout):
    """A channels-last, permuted, offset or strided LHS: the fused GEMM's narrows give eager's values and
    strides (separate outputs, inference) and gradients (one output, training)."""
    x = _lhs(layout)
    args = [x, _rand(x.shape[-1], 5, seed=1), _rand(3, x.shape[-1], seed=2)]
    for fn, rg in ((_separate, (False, False, False)), (_joined, (True, True, True))):
        gm, gm2, report, ex, traced = _optimize(fn, args, rg, strategy)
        if fn is _joined or strategy == "greedy":  # eqsat may price the separate outputs' copies too high
            assert report.patterns_fired.get("batch_gemm_lhs") == 1, dict(report.patterns_fired)
        _same_run(gm, gm2, ex, traced, args, rg)
