"""The ``tensat`` ablation strategy: eqsat with horizontal (multi-pattern) rounds only in the first k
iterations and ILP extraction (TENSAT, MLSys 2021). Differential checks against eager, plus what makes it
TENSAT: k_multi bounds the horizontal rounds, the ILP extracts, and the limits stop it."""

from __future__ import annotations

import pytest
import torch

import optimus_eq
from optimus_eq.cost import GPUCostModel
from conftest import check, dynamo_graph, junk_after, rand
from optimus_eq.egraph import ITERATION_LIMIT
from test_taso import CASES

SMALL = {"batch_tanh": {"min_fuse_set_size": 2}, "batch_linear": {"min_fuse_set_size": 2}}


@pytest.mark.parametrize("fn,shape", CASES, ids=[f.__name__ for f, _ in CASES])
def test_tensat_matches_eager_and_folds_like_eqsat(fn, shape):
    r = check(fn, [rand(*shape)], "tensat").report
    eqsat = check(fn, [rand(*shape)], "eqsat").report
    assert junk_after(r) == junk_after(eqsat)
    assert r.extractor.startswith("ilp") or "no choice" in r.extract_note


def per_field_linears(x, mods):
    return torch.cat([m(p) for m, p in zip(mods, torch.split(x, 4, 1))], 1)


def test_tensat_fuses_split_linears_cat_into_one_bmm():
    mods = [torch.nn.Linear(4, 3) for _ in range(6)]
    r = check(lambda x: per_field_linears(x, mods), [rand(5, 24)], "tensat").report
    assert r.rule_matches["batch_linear"] == 1
    assert r.ops_after["linear"] == 0 and r.ops_after["bmm_add"] == 1 and r.ops_after["baddbmm"] == 0
    assert r.ops_after["cat"] == r.ops_after["split"] == 0  # left: the stacks of weights and biases


def _tanh_pairs(a, b):
    return [torch.tanh(a), torch.tanh(b), torch.tanh(a * 2), torch.tanh(b * 2)]


@pytest.mark.parametrize("k_multi", [0, 1, 3])
def test_k_multi_bounds_the_horizontal_rounds(k_multi):
    # without the fusion credit: tanh(a * 2) is then a kernel of its own, so the one batched tanh pays
    # (with it, Inductor's fusion of tanh into the mul makes four tanhs as cheap, and the bound is not seen)
    c = check(_tanh_pairs, [rand(3, 4), rand(3, 4, seed=1)], "tensat", pattern_options=SMALL,
              strategy_options={"k_multi": k_multi}, cost_model=GPUCostModel(fusion=False))
    r = c.report
    if k_multi == 0:
        assert not r.rule_matches["batch_tanh"] and r.ops_after["tanh"] == 4
    else:
        assert 1 <= r.rule_matches["batch_tanh"] <= k_multi  # at most one fused alternative per round
        assert r.ops_after["tanh"] == 1


def test_iteration_limit_and_bad_k_multi():
    r = check(CASES[3][0], [rand(*CASES[3][1])], "tensat", limits=optimus_eq.Limits(iterations=1)).report
    assert r.stop_reason == ITERATION_LIMIT and r.iterations == 1
    gm, inputs = dynamo_graph(_tanh_pairs, rand(3, 4), rand(3, 4))
    with pytest.warns(UserWarning, match="k_multi"):
        _, report = optimus_eq.optimize(gm, inputs, strategy="tensat", strategy_options={"k_multi": -1})
    assert report.fallback
