"""The strategy table (optimus_eq.strategy): each record agrees with its search function, and ``optimize``
reads it for the strategy names, the options it accepts and the e-graph's subsume flag."""

from __future__ import annotations

import inspect

import pytest

import optimus_eq
from optimus_eq import strategy
from optimus_eq.egraph import Limits

#: what every search takes besides its own options
COMMON = {"egraph", "patterns", "limits", "horizontal", "objective"}


@pytest.mark.parametrize("name", [n for n, s in strategy.TABLE.items() if s.search is not None])
def test_a_record_declares_exactly_the_options_its_search_takes(name):
    s = strategy.TABLE[name]
    params = inspect.signature(s.search).parameters
    assert set(s.options) == set(params) - COMMON
    assert ("objective" in params) == s.needs_objective


def test_optimize_knows_the_table_s_strategies_and_their_options():
    assert optimus_eq.STRATEGIES == tuple(strategy.TABLE)
    with pytest.raises(ValueError, match=r"unknown strategy 'nope'; valid: \('none', 'greedy', 'eqsat'"):
        strategy.get("nope")
    with pytest.raises(ValueError, match=r"strategy 'tensat' takes no option\(s\) \['alpha'\]; valid: \['k_multi'\]"):
        optimus_eq.api.check_options("tensat", strategy_options={"alpha": 1.1})
    optimus_eq.api.check_options("taso", strategy_options={"alpha": 1.1}, limits=Limits(iterations=2))

