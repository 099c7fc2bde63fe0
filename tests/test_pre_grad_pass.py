"""Inductor's own pre-grad hook: ``torch._inductor.config.pre_grad_custom_pass = optimus_eq.pre_grad_pass()``
with plain ``backend="inductor"`` (a user who keeps every Inductor option)."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.config as inductor_config
from torch._dynamo.utils import counters

import optimus_eq
from conftest import STRATEGIES, rand


class Fields(torch.nn.Module):
    """Per-field Linear + LayerNorm + tanh between a split and a cat (six fields: batch_linear fires)."""

    def __init__(self, fields: int = 6, dim: int = 4) -> None:
        super().__init__()
        self.dim = dim
        self.lins = torch.nn.ModuleList([torch.nn.Linear(dim, dim) for _ in range(fields)])
        self.norms = torch.nn.ModuleList([torch.nn.LayerNorm(dim) for _ in range(fields)])

    def forward(self, x):
        xs = torch.split(x, self.dim, 1)
        return torch.cat([n(lin(v)).tanh() for v, lin, n in zip(xs, self.lins, self.norms)], 1)


def test_pre_grad_pass_checks_its_options_at_construction():
    with pytest.raises(ValueError, match="unknown strategy"):
        optimus_eq.pre_grad_pass("bogus")
    with pytest.raises(ValueError):
        optimus_eq.pre_grad_pass(patterns=["no_such_pass"])
    with pytest.raises(TypeError, match="pre_grad"):
        optimus_eq.pre_grad_pass(level="post_grad")


def test_pre_and_post_grad_passes_have_distinct_uuids():
    assert optimus_eq.pre_grad_pass("greedy").uuid() != optimus_eq.post_grad_pass("greedy").uuid()
    assert optimus_eq.pre_grad_pass("greedy").uuid() == optimus_eq.pre_grad_pass("greedy").uuid()


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_inductor_runs_the_pre_grad_pass(strategy, no_compile_cache):
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = Fields()
    x = rand(8, 24, seed=2)
    with inductor_config.patch(pre_grad_custom_pass=optimus_eq.pre_grad_pass(strategy),
                               pre_grad_fusion_options={}, post_grad_fusion_options={}):
        xo = x.clone().requires_grad_(True)
        out = torch.compile(model)(xo)
        out.sum().backward()
    ours = [p.grad.clone() for p in model.parameters()] + [xo.grad]
    model.zero_grad(set_to_none=True)
    xe = x.clone().requires_grad_(True)
    expected = model(xe)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    # the batched Linear reorders no sum along its rows; a float64 oracle is not needed at these sizes
    torch.testing.assert_close(ours, [p.grad for p in model.parameters()] + [xe.grad], rtol=1e-4, atol=1e-5)
    assert counters["optimus_eq"]["pre_grad_graphs"] == 1
    assert counters["optimus_eq"]["fallback"] == 0
    report = optimus_eq.last_reports[-1]
    assert report.level == "pre_grad" and report.fallback is None
    assert report.rule_matches.get("batch_linear", 0) >= 1
