"""Breaker session 14 (dynamic shapes, threads, export with dynamic dims / buffers / input writes, grad and
autocast modes, dtypes, odd input layouts, shared / frozen parameters, hooks, double backward, the Inductor
pass entry points): what it found. One test per bug, each against eager."""

from __future__ import annotations

import warnings

import pytest
import torch

import optimus_eq

F = torch.nn.functional
D, N = 8, 5


class _CacheWrite(torch.nn.Module):
    """Per-field Linear + tanh between a split and a cat, whose result is also written into a user input
    (a KV cache), as exported decoders do."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.ModuleList(torch.nn.Linear(D, D) for _ in range(N))

    def forward(self, x, cache):
        xs = torch.split(x, D, 1)
        out = torch.cat([torch.tanh(self.lin[i](xs[i])) for i in range(N)], 1)
        cache[:, :out.shape[0]] = out.t()
        return out * 2


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_exported_program_writing_a_parameter_dependent_value_into_an_input_is_optimized(strategy):
    """torch.export (outside no_grad) leaves the written input's placeholder a leaf FakeTensor that requires
    grad; lowering's meta propagation ran the ``copy_`` on it and autograd refused ("a leaf Variable that
    requires grad is being used in an in-place operation"): every such program fell back."""
    torch.manual_seed(0)
    ep = torch.export.export(_CacheWrite().eval(), (torch.randn(4, N * D), torch.zeros(N * D, 16)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a fallback warns
        ep2, report = optimus_eq.optimize_exported(ep, strategy=strategy)
    assert report.fallback is None and ep2 is not ep
    assert report.patterns_fired.get("batch_aten_tanh") == 1
    x, c1 = torch.randn(4, N * D), torch.randn(N * D, 16)
    c2 = c1.clone()
    want, got = ep.module()(x, c1), ep2.module()(x, c2)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(c2, c1)
