"""The e-graph wrapper: the rule program is compiled once per pattern set and lent out above a ``push``;
whatever a user leaves in it (rows, unbalanced pushes) is gone for the next user."""

from __future__ import annotations

import pytest

from optimus_eq import egraph as E
from optimus_eq.patterns import DEFAULT_REGISTRY

PATTERNS = DEFAULT_REGISTRY.select(None, "pre_grad")


def _leaf(g: E.EGraph, i: int) -> None:
    g.egraph.run_program(*g.egraph.parse_program(f"(LeafIn {i} {i + 100})\n(run-schedule (run load))"))


def test_next_user_gets_an_empty_egraph_from_the_template():
    with E.EGraph(PATTERNS) as g:
        _leaf(g, 1)
        g.push()
        _leaf(g, 2)
        g.push()  # left unbalanced
        assert g.size() == 2
    with E.EGraph(PATTERNS) as g:
        assert g._close is not None, "the template was not lent again"
        assert g.size() == 0


def test_two_live_egraphs_are_independent():
    a = E.EGraph(PATTERNS)
    b = E.EGraph(PATTERNS)
    try:
        _leaf(a, 1)
        assert b.size() == 0
        assert (a._close is None) != (b._close is None)  # one borrowed the template, one is its own
    finally:
        a.close()
        b.close()


def test_garbage_collected_egraph_gives_the_template_back():
    g = E.EGraph(PATTERNS, subsume=True)
    _leaf(g, 1)
    del g
    g2 = E.EGraph(PATTERNS, subsume=True)
    assert g2._close is not None and g2.size() == 0
    g2.close()


def test_pop_without_push_is_refused():
    with E.EGraph(PATTERNS) as g:
        with pytest.raises(RuntimeError):
            g.pop()
