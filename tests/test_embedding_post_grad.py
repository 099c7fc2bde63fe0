"""batch_aten_embedding (src/optimus_eq/horizontal/embedding_aten.py): post-grad (Aten-IR) embedding lookups
of the forward graph batched.

Compiled with AOTAutograd and Inductor's decompositions, optimized in place by the post-grad pass
(``test_aten.aot_check``: values, dtypes, strides and the tables' gradients against eager, judged by the
float64 oracle).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import STRATEGIES
from test_aten import aot_check

aten = torch.ops.aten
SMALL = {"batch_aten_embedding": {"min_fuse_set_size": 2}}


def _tables(rows, dim, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(r, dim, generator=g).to(dtype) for r in rows]


def _ids(rows, shapes, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, min(r, 4), s, generator=g) for r, s in zip(rows, shapes)]  # repeats


def count(c, target, which: int) -> int:
    return sum(1 for n in c.graphs[which].graph.nodes if n.op == "call_function" and n.target is target)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("variant", ["plain", "padding_idx", "scale_grad_by_freq", "bf16"])
def test_forward_lookups_batched(strategy, variant):
    """Four lookups (ids of different shapes, tables of different rows): one aten.embedding in the forward
    graph; values and the tables' gradients (through the backward graph, which keeps eager's per-table
    backward, padding_idx and scale_grad_by_freq included) as eager's."""
    rows = [7, 5, 9, 6]
    dtype = torch.bfloat16 if variant == "bf16" else torch.float32
    ws = _tables(rows, 3, 11, dtype)
    xs = _ids(rows, [(4, 2), (3,), (2, 2, 2), (5, 1)], 12)
    pad = 1 if variant == "padding_idx" else None
    freq = variant == "scale_grad_by_freq"

    def f(x0, x1, x2, x3, w0, w1, w2, w3):
        ys = [F.embedding(x, w, padding_idx=pad, scale_grad_by_freq=freq).sum(-1).reshape(-1)
              for x, w in zip((x0, x1, x2, x3), (w0, w1, w2, w3))]
        return torch.cat(ys)

    c = aot_check(f, [*xs, *ws], strategy, pattern_options=SMALL)
    assert c.reports[0].rule_matches["batch_aten_embedding"] == 1  # eqsat: the alternative was offered
    # eqsat's cost model prices each id shift as a kernel (Inductor fuses them into the cat): it keeps the
    # lookups apart; greedy batches
    assert count(c, aten.embedding.default, 0) == (1 if strategy == "greedy" else 4), c.graphs[0].code


def test_lookups_of_other_dims_stay_apart():
    """Tables of two embedding dims: two groups, one lookup each; an inference graph (no backward)."""
    rows = [6, 7, 8, 9]
    ws = _tables(rows[:2], 2, 31) + _tables(rows[2:], 3, 33)
    xs = _ids(rows, [(3, 2)] * 4, 32)

    def f(x0, x1, x2, x3, w0, w1, w2, w3):
        a = torch.cat([F.embedding(x0, w0), F.embedding(x1, w1)], -1)
        b = torch.cat([F.embedding(x2, w2), F.embedding(x3, w3)], -1)
        return torch.cat([a, b], -1)

    c = aot_check(f, [*xs, *ws], "greedy", grad=False, pattern_options=SMALL)
    assert count(c, aten.embedding.default, 0) == 2, c.graphs[0].code
