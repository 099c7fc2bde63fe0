"""One owner of the Optimus passes: inside our backend, Inductor's built-in Optimus passes do not run again
on our output; a global ``pre_grad_fusion_options`` is read as our own pattern selection."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.compile_fx
import torch._inductor.config as inductor_config

import optimus_eq
from conftest import rand


def _six_linears(x, *ws):
    return torch.cat([torch.nn.functional.linear(v, w) for v, w in zip(torch.split(x, 4, 1), ws)], 1)


def _compile_capturing_patches(monkeypatch, backend, args):
    """Run ``backend`` through torch.compile with Inductor's compile_fx replaced by a spy: the config patches
    our backend hands Inductor, and the report of the pre-grad optimize."""
    seen = []

    def spy(gm, example_inputs, config_patches=None, **kwargs):
        seen.append(dict(config_patches or {}))
        return gm.forward

    monkeypatch.setattr(torch._inductor.compile_fx, "compile_fx", spy)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(_six_linears, backend=backend)(*args), _six_linears(*args))
    assert len(seen) == 1
    return seen[0], optimus_eq.last_reports[-1]


def _args(n=3):
    return [rand(5, 4 * n, seed=0)] + [rand(4, 4, seed=i + 1) for i in range(n)]


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_global_options_become_ours_and_the_builtin_passes_are_off(monkeypatch, strategy):
    with inductor_config.patch(pre_grad_fusion_options={"batch_linear": {"min_fuse_set_size": 2}}):
        backend = optimus_eq.backend(strategy=strategy)
        patches, report = _compile_capturing_patches(monkeypatch, backend, _args(3))
        assert inductor_config.pre_grad_fusion_options  # the user's global config is not changed
    assert patches["pre_grad_fusion_options"] == {}
    assert "post_grad_fusion_options" not in patches  # not ours: post_grad=False
    assert report.rule_matches.get("batch_linear", 0) >= 1  # three linears, min_fuse_set_size 2 (default 5)
    assert any("read as" in n for n in report.notes) and any("switched off" in n for n in report.notes)


def test_explicit_patterns_win_over_the_global_options(monkeypatch):
    with inductor_config.patch(pre_grad_fusion_options={"batch_linear": {"min_fuse_set_size": 2}}):
        backend = optimus_eq.backend(strategy="greedy", patterns=["split_cat_pass"])
        patches, report = _compile_capturing_patches(monkeypatch, backend, _args(3))
    assert patches["pre_grad_fusion_options"] == {}
    assert "batch_linear" not in report.rule_matches
    assert not any("read as" in n for n in report.notes)


def test_strategy_none_keeps_inductors_own_passes(monkeypatch):
    with inductor_config.patch(pre_grad_fusion_options={"batch_linear": {}}):
        patches, _ = _compile_capturing_patches(monkeypatch, optimus_eq.backend(strategy="none"), _args(3))
    assert "pre_grad_fusion_options" not in patches


def test_post_grad_backend_owns_the_post_grad_options_too(monkeypatch):
    with inductor_config.patch(post_grad_fusion_options={"batch_aten_tanh": {}}):
        backend = optimus_eq.backend(strategy="greedy", post_grad=True)
        patches, _ = _compile_capturing_patches(monkeypatch, backend, _args(3))
    assert patches["post_grad_fusion_options"] == {}
    assert patches["pre_grad_fusion_options"] == {}
