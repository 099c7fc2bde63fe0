"""Regressions found by fuzzing (session fuzz3): each test is the smallest input that went wrong, with the
symptom it had. Differential checks against eager (conftest.check, test_aten.aot_check)."""

from __future__ import annotations

import pytest
import torch

from conftest import STRATEGIES
from test_aten import _x, aot_check


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_backward_graph_with_none_gradient_output(strategy):
    """An integer input gets no gradient: the backward graph returns None for it. Lowering's output
    stride check read ``None.meta`` and every such backward graph fell back (AttributeError)."""

    def f(a, i):
        return torch.cat([t * j for t, j in zip(a.split(2, 1), i.split(2, 1))], 1)

    aot_check(f, [_x((3, 6)), torch.randint(-3, 3, (3, 6))], strategy)
