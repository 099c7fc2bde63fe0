"""The ``eqsat`` strategy: equality saturation over the whole pattern set at once.

Each iteration runs the analyses to a fixpoint, then every pattern's rules once; rules add
alternatives and remove nothing, so no rewrite can block a better one later and there is no pass
order to choose; a pattern whose rules all belong to other patterns run (an alias) is not run again.
The search stops at saturation or at a limit (:class:`optimus_eq.egraph.Limits`); a cost model then
extracts the cheapest graph.
"""

from __future__ import annotations

from typing import Sequence

from optimus_eq.egraph import EGraph, Limits, SearchResult
from optimus_eq.registry import Pattern
from optimus_eq.schedule import ANALYSES, one_pass

SUBSUME = False


def distinct_rulesets(patterns: Sequence[Pattern]) -> list[Pattern]:
    """``patterns`` less the aliases: a pattern is left out when each of its rule bodies (lhs, rhs, guards) is
    owned by another pattern selected, the owner of a body being the pattern whose rule for it has the shortest
    name (:func:`optimus_eq.registry.renamed` prefixes a copy's name), the first on a tie.

    An alias (a pattern of the split/cat family that holds the run algebra's rules of three others, renamed,
    as upstream has a pass of its own for them) adds nothing to a saturation that runs the patterns it copies:
    the same rewrites reach the same e-graph, and run twice per iteration they cost the second saturation of
    ``branches:50000`` 1.2 CPU s of egglog's search. An alias selected without the patterns it
    copies keeps its rules, and its firings."""
    owner: dict = {}
    for i, p in enumerate(patterns):
        for r in p.rules:
            body, rank = (r.lhs, r.rhs, r.when), (r.name.count("/"), i)
            if body not in owner or rank < owner[body]:
                owner[body] = rank
    keep = {i for _, i in owner.values()}
    return [p for i, p in enumerate(patterns) if i in keep or not p.rules]


def search(egraph: EGraph, patterns: Sequence[Pattern], limits: Limits, horizontal=None) -> SearchResult:
    """Saturate ``egraph`` with ``patterns`` within ``limits``.

    ``horizontal(egraph, patterns, destructive) -> groups`` (:func:`optimus_eq.horizontal.fuse_round`)
    adds one fused alternative per horizontal group found on the plan extracted after the first
    saturation; the vertical rules then saturate again (stacks of slices become views).
    """
    result = SearchResult()
    schedule = one_pass(distinct_rulesets(patterns))
    egraph.saturate(schedule, limits, result)
    groups = [p for p in patterns if p.kind == "horizontal"]
    if horizontal is not None and groups:
        egraph.run(ANALYSES, result)
        if horizontal(egraph, groups, SUBSUME):
            egraph.saturate(schedule, limits, result)
    # leave the analyses consistent for extraction (shapes of the last terms created)
    egraph.run(ANALYSES, result)
    return result
