"""torch.export: ``optimize(ep.module())`` at the default level, ``optimize_exported`` and AOTInductor.

An exported program is Aten-IR; the default level is read off the graph (:func:`optimus_eq.api.ir_level`),
so a user who passes ``ep.module()`` gets the post-grad patterns instead of a silent no-op.
"""

from __future__ import annotations

import pytest
import torch

import optimus_eq
from optimus_eq.api import ir_level
from conftest import STRATEGIES, dynamo_graph


class Fields(torch.nn.Module):
    """Per-field Linear + tanh between a split and a cat, and a second output in a dict (a pytree)."""

    def __init__(self, fields: int = 6, dim: int = 4) -> None:
        super().__init__()
        self.dim = dim
        self.lins = torch.nn.ModuleList([torch.nn.Linear(dim, dim) for _ in range(fields)])

    def forward(self, x):
        xs = torch.split(x, self.dim, 1)
        y = torch.cat([lin(v).tanh() for v, lin in zip(xs, self.lins)], 1)
        return {"y": y, "head": y[:, : self.dim] * 2}


def _model():
    torch.manual_seed(0)
    return Fields().eval()


def _same(actual, expected):
    assert type(actual) is type(expected)
    assert actual.keys() == expected.keys()
    for k in expected:
        torch.testing.assert_close(actual[k], expected[k])


def test_ir_level_is_read_off_the_graph():
    m, x = _model(), torch.randn(8, 24)
    assert ir_level(torch.export.export(m, (x,)).module()) == "post_grad"
    gm, _ = dynamo_graph(m, x)
    assert ir_level(gm) == "pre_grad"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_optimize_exported_module_at_the_default_level(strategy):
    m, x = _model(), torch.randn(8, 24)
    gm = torch.export.export(m, (x,)).run_decompositions().module()
    with torch.no_grad():
        new, report = optimus_eq.optimize(gm, None, strategy=strategy)
        assert report.level == "post_grad" and report.fallback is None
        assert report.rule_matches.get("batch_linear_post_grad", 0) >= 1
        _same(new(x), m(x))  # the pytree calling convention (a dict) is kept


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_optimize_exported_returns_a_program(strategy):
    m, x = _model(), torch.randn(8, 24)
    ep = torch.export.export(m, (x,))
    ep2, report = optimus_eq.optimize_exported(ep, strategy=strategy)
    assert isinstance(ep2, torch.export.ExportedProgram) and ep2 is not ep
    assert report.fallback is None and report.rule_matches.get("batch_linear_post_grad", 0) >= 1
    with torch.no_grad():
        x2 = torch.randn(8, 24)
        _same(ep2.module()(x2), m(x2))
    torch.export.export(ep2.module(), (x,))  # re-exports


def test_optimize_exported_keeps_dynamic_dims():
    m, x = _model(), torch.randn(8, 24)
    ep = torch.export.export(m, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    ep2, report = optimus_eq.optimize_exported(ep, strategy="greedy")
    assert report.fallback is None
    (ph,) = [n for n in ep2.graph.nodes if n.op == "placeholder" and n.name in ep2.graph_signature.user_inputs]
    assert not isinstance(ph.meta["val"].shape[0], int)
    with torch.no_grad():
        x3 = torch.randn(5, 24)
        _same(ep2.module()(x3), m(x3))


def test_optimize_exported_rejects_a_graph_module():
    gm = torch.export.export(_model(), (torch.randn(8, 24),)).module()
    with pytest.raises(TypeError, match="ExportedProgram"):
        optimus_eq.optimize_exported(gm)


@pytest.mark.slow
def test_aot_inductor_compiles_the_optimized_program(tmp_path, no_compile_cache):
    m, x = _model(), torch.randn(8, 24)
    ep2, report = optimus_eq.optimize_exported(torch.export.export(m, (x,)), strategy="eqsat")
    assert report.fallback is None
    path = torch._inductor.aoti_compile_and_package(ep2, package_path=str(tmp_path / "model.pt2"))
    runner = torch._inductor.aoti_load_package(path)
    with torch.no_grad():
        _same(runner(x), m(x))
