"""Breaker findings of 2026-12-02 (fifth session): inputs that gave wrong results or crashed where eager works,
each compared with eager."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import optimus_eq
from conftest import dynamo_graph


def _rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _optimize_quietly(gm, example_inputs, strategy, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm2, report = optimus_eq.optimize(gm, example_inputs, strategy=strategy, **options)
    ours = [str(w.message) for w in caught if "optimus_eq" in str(w.message)]
    assert report.fallback is None and not ours, (report.fallback, ours)
    return gm2, report


# Found: linears reading one input whose weights are graph inputs, compiled with ``dynamic=True``: Dynamo makes the
# weights' output-feature counts symbolic, batch_linear_lhs grouped them anyway and summed the symbolic tokens
# (negative integers) into the narrows' starts and lengths, and lowering failed ("narrow(): length must be
# non-negative"): the whole graph fell back to the original with a warning, every other rewrite lost.
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_linears_of_one_input_with_symbolic_output_features_do_not_make_the_graph_fall_back(strategy):
    def f(x, w0, w1, w2, b0, b1, b2):
        return torch.cat([F.linear(x, w, b) for w, b in ((w0, b0), (w1, b1), (w2, b2))], -1).tanh()

    args = [_rand(4, 5), _rand(3, 5, seed=1), _rand(4, 5, seed=2), _rand(2, 5, seed=3), _rand(3, seed=4),
            _rand(4, seed=5), _rand(2, seed=6)]
    gm, ex = dynamo_graph(f, *args, dynamic=True)
    gm2, _ = _optimize_quietly(gm, ex, strategy, pattern_options={"batch_linear_lhs": {"min_fuse_set_size": 2}})
    torch.testing.assert_close(gm2(*ex), gm(*ex))
