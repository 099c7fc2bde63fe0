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


class _NormedFields(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.ModuleList(torch.nn.Linear(3, 3) for _ in range(3))
        self.ln = torch.nn.ModuleList(torch.nn.LayerNorm(3) for _ in range(3))

    def forward(self, x):
        xs = torch.split(x, 3, 1)
        return torch.cat([self.ln[k](self.lin[k](xs[k]).tanh()) for k in range(3)], 1)


# Found (a fallback with a warning, values right): with ``optimus_eq.pre_grad_pass`` set as Inductor's
# ``pre_grad_custom_pass`` under ``optimus_eq.backend(pack_parameters=True)``, compile_fx runs the pass on the packed
# graph, whose buffer placeholder carries a FakeTensor of another fake mode than the other inputs: "lower failed:
# graph inputs carry FakeTensors of several fake modes; returning the original graph". compile_fx is replaced here
# by what it does first with that config (the custom pre-grad pass), so no Inductor compile runs.
@pytest.mark.xfail(strict=True, reason="the packed graph's buffer placeholder has a FakeTensor of another fake mode "
                   "(lower_meta._input_fakes refuses several modes): a pre_grad_pass on it falls back")
def test_a_pre_grad_pass_on_a_packed_graph_does_not_fall_back(monkeypatch):
    import copy
    import warnings

    import torch._inductor.compile_fx as cfx

    import optimus_eq

    po = {p: {"min_fuse_set_size": 2} for p in ("batch_linear", "batch_tanh", "batch_layernorm")}
    seen = []

    def compile_fx_runs_the_custom_pass(gm, inputs, config_patches=None):
        optimus_eq.pre_grad_pass("greedy", pattern_options=po)(gm.graph)
        seen.append(optimus_eq.last_reports[-1])
        gm.recompile()
        return gm.forward

    monkeypatch.setattr(cfx, "compile_fx", compile_fx_runs_the_custom_pass)
    torch.manual_seed(0)
    m = _NormedFields()
    m2 = copy.deepcopy(m)
    torch._dynamo.reset()
    cm = torch.compile(m, backend=optimus_eq.backend("greedy", pack_parameters=True, pattern_options=po))
    x = torch.randn(4, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback warns
        out = cm(x)
    torch.testing.assert_close(out, m2(x))
    assert seen and seen[-1].fallback is None, seen[-1].fallback
