"""A dtype cast of a graph input inside Inductor's post-grad pass (found on BERT inference, H200 2026-12-02:
``optimus_eq.backend(post_grad=True)`` failed with Inductor's "both a fallback and a decomp for same op:
aten._to_copy.default", then the fallback compile of the original graph failed the same way).

Lowering respells a kept ``prims.convert_element_type`` of an input as ``aten._to_copy`` for graphs run
eagerly (``IRLevel.grad_mode_blind``); inside Inductor there is no lowering for ``_to_copy`` and no need for
the respelling, so the post-grad pass must not emit it. Differential against eager."""

from __future__ import annotations

import pytest
import torch

import optimus_eq


def _masked(x, mask):
    """BERT's extended attention mask: an integer mask cast to float, around a split/cat our patterns fold."""
    bias = (1.0 - mask[:, None, :].to(torch.float32)) * -10000.0
    y = torch.cat(torch.split(x, 4, dim=2), dim=2)
    return torch.softmax(y + bias, dim=-1)


@pytest.mark.parametrize("strategy", ["greedy"])
def test_post_grad_pass_keeps_an_input_cast_inductor_can_lower(strategy, no_compile_cache):
    x = torch.randn(2, 3, 8)
    mask = torch.randint(0, 2, (2, 8))
    torch._dynamo.reset()
    optimus_eq.last_reports.clear()
    f = torch.compile(_masked, backend=optimus_eq.backend(strategy=strategy, post_grad=True))
    with torch.no_grad():
        got = f(x, mask)
    torch.testing.assert_close(got, _masked(x, mask))
    assert not any(r.fallback for r in optimus_eq.last_reports)
    assert any(r.level == "post_grad" and r.patterns_fired for r in optimus_eq.last_reports)
