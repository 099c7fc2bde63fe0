"""The Report: the cost model's value of the input graph (``cost_before``) next to the chosen plan's
(``cost_after``), and the summary that shows them."""

from __future__ import annotations

import pytest
import torch

import optimus_eq
from optimus_eq.cost import GPUCostModel
from conftest import check, dynamo_graph, rand


def _junk(x, y):
    parts = torch.split(x, 2, dim=1)
    h = torch.cat([torch.tanh(p) for p in parts], dim=1)           # split -> tanh per piece -> cat
    s = torch.stack(torch.unbind(y, 1), 1)                           # unbind -> stack: y itself
    return h * 2, s + 1


def _nothing_to_do(x, w):
    return torch.relu(x @ w) + torch.sigmoid(x).sum(1, keepdim=True)


def test_cost_after_below_cost_before_on_junk(strategy):
    r = check(_junk, [rand(4, 8), rand(3, 5, 2)], strategy).report
    assert r.cost_before is not None and r.cost_after is not None
    assert r.cost_after < r.cost_before
    # the input plan launches at least: 4 tanh, 1 cat, 1 mul, 1 stack, 1 add (4 us each in the default model)
    assert r.cost_before >= 8 * GPUCostModel().launch_us
    assert f"{r.cost_before:.1f} us -> {r.cost_after:.1f} us" in r.summary()


def test_costs_equal_when_nothing_to_do(strategy):
    r = check(_nothing_to_do, [rand(4, 8), rand(8, 3)], strategy).report
    assert r.rule_matches.get("pointwise_through_slice", 0) == 0
    assert r.cost_before == pytest.approx(r.cost_after, rel=1e-9, abs=1e-9)
    assert r.cost_before > 0


def test_cost_before_counts_the_input_plan_not_the_merged_one():
    """Two FX nodes computing one value are paid twice before (the input graph runs both), once after."""
    def f(x):
        return torch.tanh(x) + torch.tanh(x)

    r = check(f, [rand(4, 8)], "eqsat").report
    # exactly one tanh e-node of the [4, 8] input fewer: its price under the default model
    assert r.cost_before - r.cost_after == pytest.approx(GPUCostModel().node_cost("Unary", 32, [32], False))


def test_strategy_none_has_no_costs():
    gm, ex = dynamo_graph(_junk, rand(4, 8), rand(3, 5, 2))
    _, r = optimus_eq.optimize(gm, ex, strategy="none")
    assert r.cost_before is None and r.cost_after is None
    assert "cost model" not in r.summary()


def test_a_spent_time_limit_stops_the_search_and_says_so(strategy):
    """``Limits.seconds`` bounds the whole call: with almost none of it, the search stops before its first
    iteration, the report names the limit, and the plan (the input's terms, extracted) is still correct."""
    from optimus_eq.egraph import Limits

    r = check(_junk, [rand(4, 8), rand(3, 5, 2)], strategy, limits=Limits(seconds=1e-9)).report
    assert r.stop_reason == "time_limit"
    assert any("search stopped by the time limit" in line for line in r.limits), r.limits
    assert "limit: search stopped by the time limit" in r.summary()
    assert r.cost_after is not None and r.cost_after <= r.cost_before + 1e-9


def test_the_report_says_how_the_plan_was_found():
    """eqsat on the junk graph has real choices: the report gives the choice core, the tree / fast / final
    costs (each no dearer than the one before) and the components solved exactly, and prints them."""
    r = check(_junk, [rand(4, 8), rand(3, 5, 2)], "eqsat").report
    x = r.extraction
    assert x["choice_classes"] > 0 and x["components"] >= 1
    assert x["cost"] <= x["fast_cost"] + 1e-9 <= x["tree_cost"] + 2e-9
    assert x["cost"] == pytest.approx(r.cost_after)
    # every component proven optimal: by HiGHS, or the fast plan meets its lower bound (extract.bound)
    assert x["exact_optimal"] == x["exact_components"]
    assert x["exact_components"] + x["bound_closed"] == x["components"]
    assert r.extractor == "ilp" and r.limits == []
    assert f"{x['choice_classes']} e-classes with a choice" in r.summary()


class _Kept(torch.nn.Module):
    """A Linear (its weight and bias are graph inputs, not ops), an op outside the vocabulary, and junk."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.cumsum(self.lin(x), 1)                          # cumsum: not in the vocabulary
        return torch.cat(torch.split(torch.tanh(h), 2, dim=1), 1)  # split -> cat round trip


def test_left_opaque_counts_ops_not_inputs_or_parameters(strategy):
    r = check(_Kept(), [rand(4, 8)], strategy).report
    assert r.left_opaque == 1
    assert list(r.kept_reasons.values()) == ["unsupported op cumsum"]


def test_node_fates_read_both_strategies_the_same_way(strategy):
    r = check(_Kept(), [rand(4, 8)], strategy).report
    kinds = {name.rstrip("_0123456789"): fate for name, fate in r.node_fates.items()}
    assert kinds["split"] == "removed" and kinds["tanh"] == "kept" and kinds["linear"] == "kept"
    assert kinds["cat"] in ("removed", "rewritten")   # the cat's e-class is tanh's: computed by tanh's e-node
    assert "cumsum" not in kinds                        # kept verbatim: in kept_reasons, not a translated term
    assert r.fate_counts()["kept"] == 2


def _effects(x):
    h = x * 2
    h.add_(1.0)                    # in-place: kept, and what reads h after it
    with torch.no_grad():          # a grad-mode region: kept in order
        g = torch.tanh(x * 3)
    return h + 1, g


def test_kept_reasons_name_in_place_ops_readers_and_grad_mode_regions():
    x = rand(4, 8).requires_grad_()
    gm, inputs = dynamo_graph(_effects, x)
    _, r = optimus_eq.optimize(gm, inputs, strategy="greedy")
    from optimus_eq.explain import source_of

    by_line = {source_of(n).code: r.kept_reasons[n.name] for n in gm.graph.nodes
               if n.name in r.kept_reasons and source_of(n)}
    assert by_line["h.add_(1.0)                    # in-place: kept, and what reads h after it"] == "in-place op"
    assert by_line["g = torch.tanh(x * 3)"] == "grad-mode/autocast region (kept in order)"
    assert by_line["return h + 1, g"] == "touches a mutated tensor or a user-visible alias"
    assert r.left_opaque == len(r.kept_reasons)
