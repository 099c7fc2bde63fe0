"""The pattern set, declared once; both strategies read :data:`DEFAULT_REGISTRY`.

Order is the greedy pass order (Optimus' pre-grad order where the passes exist upstream: normalization,
then the group/batch fusions, then the split/cat passes, as in upstream pre_grad.py); the post-grad
patterns (:mod:`optimus_eq.patterns.aten`) follow, in Optimus' post-grad order.
"""

from __future__ import annotations

from optimus_eq.patterns import aten, gemm_lhs, pointwise, split_cat
from optimus_eq.registry import HorizontalPattern, Pattern, PatternRegistry, Rule
from optimus_eq.horizontal import patterns as horizontal
from optimus_eq.horizontal import embedding, embedding_aten  # noqa: E402

DEFAULT_REGISTRY = PatternRegistry()
for _p in (
    *split_cat.NORMALIZE,
    *horizontal.PATTERNS,
    *gemm_lhs.PATTERNS,
    *embedding.PATTERNS,
    *split_cat.EARLY,
    *pointwise.PATTERNS,
    *split_cat.LATE,
    *aten.NORMALIZE,
    *horizontal.POST_GRAD_PATTERNS,
    *embedding_aten.PATTERNS,
    *aten.PATTERNS,
):
    DEFAULT_REGISTRY.register(_p)

__all__ = ["DEFAULT_REGISTRY", "HorizontalPattern", "Pattern", "PatternRegistry", "Rule"]
