"""Greedy anchor search, the way Optimus applies its passes (torch/_inductor/fx_passes/split_cat.py).

Passes run once each, in the registry's fixed order. A pass matches its patterns at every anchor (the
root op of a rule's left-hand side: a narrow, a cat list cell, a pointwise op, ...) and replaces at
once: rules are added with egglog's ``:subsume``, so a rewritten term is removed and nothing later can
choose it again. Each pass runs to its own fixpoint before the next starts; nothing revisits an
earlier pass, so an opportunity that an earlier pass would have needed is missed, as in Optimus.
"""

from __future__ import annotations

import itertools
from typing import Sequence

from optimus_eq.egraph import SATURATED, EGraph, Limits, SearchResult
from optimus_eq.registry import Pattern
from optimus_eq.schedule import ANALYSES, pattern_pass

SUBSUME = True


def search(egraph: EGraph, patterns: Sequence[Pattern], limits: Limits, horizontal=None) -> SearchResult:
    """Run each pattern's pass to its fixpoint, in order, destructively.

    A horizontal pattern's pass is ``horizontal(egraph, [pattern], True)``
    (:func:`optimus_eq.horizontal.fuse_round`): its groups are fused at once, the originals removed.
    """
    result = SearchResult()
    for i, p in enumerate(patterns):
        if p.kind == "horizontal":
            # adjacent horizontal passes share one plan: each fused group updates it before the next
            # pass looks (the same as one plan per pass, without re-extracting)
            if horizontal is not None and (i == 0 or patterns[i - 1].kind != "horizontal"):
                run = [q for q in itertools.takewhile(lambda q: q.kind == "horizontal", patterns[i:])]
                egraph.run(ANALYSES, result)
                horizontal(egraph, run, SUBSUME)
            continue
        if not p.rules:
            continue
        egraph.saturate(pattern_pass(p), limits, result)
        if result.stop_reason != SATURATED:
            break
    egraph.run(ANALYSES, result)
    return result
