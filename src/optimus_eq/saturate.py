"""The ``eqsat`` strategy: equality saturation over the whole pattern set at once.

Each iteration runs the analyses to a fixpoint, then every pattern's rules once; rules add
alternatives and remove nothing, so no rewrite can block a better one later and there is no pass
order to choose. The search stops at saturation or at a limit (:class:`optimus_eq.egraph.Limits`);
a cost model then extracts the cheapest graph.
"""

from __future__ import annotations

from typing import Sequence

from optimus_eq.egraph import EGraph, Limits, SearchResult
from optimus_eq.registry import Pattern
from optimus_eq.schedule import ANALYSES, one_pass

SUBSUME = False


def search(egraph: EGraph, patterns: Sequence[Pattern], limits: Limits, horizontal=None) -> SearchResult:
    """Saturate ``egraph`` with ``patterns`` within ``limits``.

    ``horizontal(egraph, patterns, destructive) -> groups`` (:func:`optimus_eq.horizontal.fuse_round`)
    adds one fused alternative per horizontal group found on the plan extracted after the first
    saturation; the vertical rules then saturate again (stacks of slices become views).
    """
    result = SearchResult()
    egraph.saturate(one_pass(patterns), limits, result)
    groups = [p for p in patterns if p.kind == "horizontal"]
    if horizontal is not None and groups:
        egraph.run(ANALYSES, result)
        if horizontal(egraph, groups, SUBSUME):
            egraph.saturate(one_pass(patterns), limits, result)
    # leave the analyses consistent for extraction (shapes of the last terms created)
    egraph.run(ANALYSES, result)
    return result
