"""The conformance suite: every ported upstream Optimus case (cases_*.py), both strategies.

For each case and strategy: our outputs and gradients equal eager's; the patterns the upstream test
expects to fire fire here under the Optimus names; and our graph has no more split/cat/stack/unbind/
linear/layer_norm/pointwise nodes than the built-in passes of the installed torch leave on the same
graph (measured in the same run; where the built-in's result differs from eager in values, strides or
aliasing, or it crashes, there is no bar, and ours must still be right). Cases whose patterns are not registered yet skip themselves (the
reason names the missing patterns) until those names appear in ``optimus_eq.list_patterns()``.
``bench/conformance_table.py`` writes the same measurements to docs/conformance.md.
"""

from __future__ import annotations

import functools

import pytest

import conformance as C
from all_cases import ALL_CASES

STRATEGIES = ("greedy", "eqsat")


@functools.lru_cache(maxsize=None)
def _builtin(name: str):
    """The built-in's outcome, once per case (shared by both strategies)."""
    case = BY_NAME[name]
    cap = C.capture(case) if case.level == "pre_grad" else None
    return cap, C.builtin(case, cap)


BY_NAME = {c.name: c for c in ALL_CASES}


def _params():
    for case in ALL_CASES:
        marks = [C.requires_patterns(*case.required)] if C.missing_patterns(case) else []
        for s in STRATEGIES:
            yield pytest.param(case.name, s, id=f"{case.name}-{s}", marks=marks)


def test_case_names_are_unique():
    names = [c.name for c in ALL_CASES]
    assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]


@pytest.mark.slow
@pytest.mark.parametrize("name,strategy", list(_params()))
def test_conformance(name, strategy):
    case = BY_NAME[name]
    cap, theirs = _builtin(name)
    mine = C.ours(case, strategy, cap)  # raises on any difference from eager
    assert mine.fallback is None, f"optimizer fell back: {mine.fallback}"
    for pattern in case.fires:
        if not C.fired_names(mine.fired, pattern, case.done_by.get(pattern, ())):
            if case.gap:
                pytest.xfail(f"known gap: {case.gap}; {pattern} did not fire")
            pytest.fail(f"{pattern} did not fire; fired: {dict(mine.fired)}")
    if not case.pre_grad and not case.post_grad:
        assert not mine.fired, f"no options, yet patterns fired: {dict(mine.fired)}"
    if not theirs.ok:
        return  # a built-in result that differs from eager (values, strides, aliasing) or crashed sets no bar
    if theirs.counts and mine.total > theirs.total:
        detail = (f"ours ({strategy}) leaves {mine.total} counted nodes {dict(mine.counts)}, the built-in "
                  f"{theirs.total} {dict(theirs.counts)}")
        if case.gap:
            pytest.xfail(f"known gap: {case.gap}; {detail}")
        pytest.fail(detail)
