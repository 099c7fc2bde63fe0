"""egglog schedules as values: the searches compose these instead of writing schedule text.

A :class:`Schedule` is egglog's ``run-schedule`` language (``run``, ``seq``, ``saturate``); ``str()`` gives its
text, which :meth:`optimus_eq.egraph.EGraph.run` runs. Every search begins an application of rules with
:data:`ANALYSES` (the always-on analyses of :mod:`optimus_eq.terms` to a fixpoint: shapes, run ends, offsets),
so that guards read facts of the current e-graph, and ends with it, so extraction reads consistent shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from optimus_eq.egraph import ruleset_name
from optimus_eq.registry import Pattern


@dataclass(frozen=True)
class Schedule:
    """One egglog schedule; ``text`` is its egglog spelling."""

    text: str

    def __str__(self) -> str:
        return self.text


def run(ruleset: str) -> Schedule:
    """One pass of a ruleset's rules: every match found, then applied."""
    return Schedule(f"(run {ruleset})")


def seq(*parts: Schedule) -> Schedule:
    """``parts`` one after the other."""
    return Schedule(f"(seq {' '.join(p.text for p in parts)})")


def saturate(part: Schedule) -> Schedule:
    """``part`` repeated until the e-graph stops changing."""
    return Schedule(f"(saturate {part.text})")


#: The analyses to a fixpoint.
ANALYSES = saturate(run("analysis"))


def one_pass(patterns: Sequence[Pattern]) -> Schedule:
    """The analyses, then one pass of every pattern that has rules (an eqsat or tensat iteration)."""
    return seq(ANALYSES, *(run(ruleset_name(p)) for p in patterns if p.rules))


def pattern_pass(pattern: Pattern) -> Schedule:
    """The analyses, then one pass of ``pattern``'s rules (a step of greedy's pass to its fixpoint)."""
    return seq(ANALYSES, run(ruleset_name(pattern)))
