"""The pattern set, declared once; both strategies read :data:`DEFAULT_REGISTRY`.

Order is the greedy pass order (Optimus' pre-grad order where the passes exist upstream: normalization,
then the group/batch fusions, then the split/cat passes, as in upstream pre_grad.py); the post-grad
patterns (:mod:`optimus_eq.patterns.aten`) follow, in Optimus' post-grad order.
"""

from __future__ import annotations

from optimus_eq.patterns import aten, pointwise, split_cat, views
from optimus_eq.registry import HorizontalPattern, Pattern, PatternRegistry, Rule
from optimus_eq.horizontal import patterns as horizontal
from optimus_eq.horizontal import embedding, embedding_aten  # noqa: E402

DEFAULT_REGISTRY = PatternRegistry()
for _p in (
    split_cat.normalization_pass,
    *horizontal.PATTERNS,
    *embedding.PATTERNS,
    split_cat.remove_split_with_size_one_pass,
    split_cat.merge_splits_pass,
    split_cat.split_of_cat_pass,
    *views.PATTERNS,
    *pointwise.PATTERNS,
    split_cat.unbind_stack_to_slices_pass,
    split_cat.unbind_stack_pass,
    split_cat.split_stack_to_cats_pass,
    split_cat.unbind_cat_to_view_pass,
    split_cat.merge_getitem_cat_pass,
    split_cat.split_cat_pass,
    split_cat.split_cat_to_slices_pass,
    split_cat.mutate_cat_pass,
    aten.PATTERNS[0],
    *horizontal.POST_GRAD_PATTERNS,
    *embedding_aten.PATTERNS,
    *aten.PATTERNS[1:],
):
    DEFAULT_REGISTRY.register(_p)

__all__ = ["DEFAULT_REGISTRY", "HorizontalPattern", "Pattern", "PatternRegistry", "Rule"]
