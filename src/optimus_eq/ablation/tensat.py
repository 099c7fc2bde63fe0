"""The ``tensat`` ablation strategy: equality saturation with multi-pattern rules in the first k iterations.

After TENSAT (Yang et al., "Equality Saturation for Tensor Graph Superoptimization", MLSys 2021):
single-pattern rewrites (here: the vertical patterns) run every iteration; multi-pattern rewrites (here:
the horizontal patterns, which match several independent ops at once) run only in the first
``k_multi`` iterations, because each application can add many e-nodes and applying them every
iteration blows the e-graph up; the search stops at saturation or at the iteration / e-node / time
limits; the graph is then extracted with the ILP (TENSAT's extractor, with its cycle constraints).

How it differs from ``eqsat`` here, which is what an ablation measures: eqsat saturates the vertical
rules first, then finds horizontal groups on the best plan of the saturated e-graph (once), then
saturates again. TENSAT interleaves: iteration i runs one pass of every vertical rule, then (i <
k_multi) one horizontal round on the current best plan. With ``k_multi=1`` the groups are found on the
input graph after a single vertical pass, so a group that only appears once split/cat junk is folded
(pieces that become adjacent slices, say) is missed, as TENSAT's early multi-pattern phase would miss it.
"""

from __future__ import annotations

from typing import Sequence

from optimus_eq.egraph import EGraph, Limits, SearchResult
from optimus_eq.registry import Pattern
from optimus_eq.schedule import ANALYSES, one_pass

SUBSUME = False
#: TENSAT extracts with an ILP; ``optimize`` uses this extractor unless the caller chose one.
EXTRACTOR = "ilp"
#: Iterations that apply multi-pattern (horizontal) rules; TENSAT's k_multi (the paper uses 1 or 2).
K_MULTI = 1


def search(egraph: EGraph, patterns: Sequence[Pattern], limits: Limits, k_multi: int = K_MULTI,
           horizontal=None) -> SearchResult:
    """Equality saturation of ``patterns`` with horizontal rounds in the first ``k_multi`` iterations.

    Args:
        egraph: holds the input graph (rules added without ``subsume``).
        patterns: vertical patterns run every iteration; horizontal ones only in the first ``k_multi``.
        limits: iterations, e-nodes and seconds (TENSAT's iteration and node limits).
        k_multi: iterations that run a horizontal round (>= 0).
        horizontal: ``(egraph, patterns, destructive) -> groups`` (:func:`optimus_eq.horizontal.fuse_round`).

    Returns:
        The :class:`SearchResult` (iterations, stop reason, rule matches).

    Raises:
        ValueError: if ``k_multi < 0``.
    """
    if k_multi < 0:
        raise ValueError(f"k_multi must be >= 0, got {k_multi}")
    result = SearchResult()
    groups = [p for p in patterns if p.kind == "horizontal"] if horizontal is not None else []

    def horizontal_round(egraph: EGraph, result: SearchResult) -> bool:
        """TENSAT's multi-pattern rules: a horizontal round in each of the first ``k_multi`` iterations."""
        if result.iterations >= k_multi or not groups:
            return False
        egraph.run(ANALYSES, result)
        return bool(horizontal(egraph, groups, SUBSUME))

    egraph.saturate(one_pass(patterns), limits, result, after=horizontal_round)
    egraph.run(ANALYSES, result)
    return result
