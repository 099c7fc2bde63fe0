"""Cases ported from pytorch test/inductor/test_split_cat_fx_aten_passes.py (TestSplitCatAten,
TestSplitCatAtenNormalizationPasses), in our own words. The modules call aten ops directly, as upstream;
they run at the post-grad level (the AOTAutograd forward and backward graphs)."""

from __future__ import annotations

import torch

from conformance import Case, rand

A = "test_split_cat_fx_aten_passes.py"
aten = torch.ops.aten


class SplitCat(torch.nn.Module):
    """Upstream ``_TestSplitCat``: cat -> split into 8 -> all pieces cat again, and piece 0 with z."""

    def forward(self, x, y, z):
        split = aten.split.Tensor(aten.cat.default([x, y], 1), 32, 1)
        cat_1 = aten.cat.default([split[i] for i in range(8)], 1)
        cat_2 = aten.cat.default([split[0], z], 1)
        return aten.cat.default([cat_1, cat_2], 1)


class SplitCatSingular(torch.nn.Module):
    """Upstream ``_TestSplitCatSingular``: a cat of one split piece."""

    def forward(self, x, y, z):
        split = aten.split.Tensor(aten.cat.default([x, y], 1), 32, 1)
        cat_1 = aten.cat.default([split[0]], 1)
        cat_2 = aten.cat.default([split[0], z], 1)
        return aten.cat.default([cat_1, cat_2], 1)


class SplitCatPartial(torch.nn.Module):
    """Upstream ``_TestSplitCatPartial``: runs of pieces of two splits between other inputs (width 8 here)."""

    def forward(self, x1, x2, y, z):
        s1 = aten.split_with_sizes.default(x1, [8] * 21, 1)
        s2 = aten.split_with_sizes.default(x2, [8] * 4, 1)
        return aten.cat.default([z, *[s1[i] for i in (0, 1, 2, 3, 4, 5, 15, 16, 17)], y,
                                 *[s1[i] for i in (10, 11, 12, 13, 14)], y, *[s2[i] for i in range(4)], z], 1)


class MoveViewAfterCat(torch.nn.Module):
    """Upstream ``_TestMoveViewAferCat``: unit split pieces viewed, then concatenated."""

    def forward(self, x):
        pieces = aten.split_with_sizes.default(x, [1] * 7)
        views = [aten.view.default(p, [8, 96]) for p in pieces]
        clone = aten.clone.default(views[0])
        cat_1 = aten.cat.default([clone, aten.cat.default(views, 1)], 1)
        return torch.cat([clone, cat_1], 1)


class SelectCat(torch.nn.Module):
    """Upstream ``_TestSelectCat``: selects of x concatenated in full, partial and strided runs."""

    def forward(self, x, y):
        s = [aten.select.int(x, 1, i) for i in range(6)]
        t = [aten.select.int(y, 1, i) for i in range(5)]
        return (aten.cat.default(s, 1), aten.cat.default(s[:5], 1), aten.cat.default([s[0], s[2], s[4]], 1),
                aten.cat.default(t, 1))


class AtenSplit(torch.nn.Module):
    """Upstream ``test_split_aten_normalization``: an aten split by ``size`` (300: one piece; 320: one)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def forward(self, x):
        return aten.split.Tensor(x, self.size, 1)


def _a(name, test, build, inputs, post, fires=(), **kw) -> Case:
    return Case(name=name, upstream=f"{A}::{test}", build=build, inputs=inputs, post_grad=post, fires=tuple(fires), **kw)


def _inputs(*shapes):
    return lambda: [rand(*s, seed=i) for i, s in enumerate(shapes)]


SPLIT_CAT_OPTS = {"normalization_aten_pass": {}, "split_cat_aten_pass": {"threshold_to_cat": 5}}
CASES = [
    _a("aten_split_cat", "TestSplitCatAten::test_split_cat_post_grad", SplitCat, _inputs((64, 128), (64, 128), (64, 32)),
       SPLIT_CAT_OPTS, fires=("split_cat_aten_pass",)),
    _a("aten_split_cat_partial", "TestSplitCatAten::test_split_cat_post_grad", SplitCatPartial,
       _inputs((64, 8 * 21), (64, 8 * 4), (64, 8), (64, 8)), SPLIT_CAT_OPTS, fires=("split_cat_aten_pass",)),
    _a("aten_split_cat_singular", "TestSplitCatAten::test_split_cat_post_grad_singular", SplitCatSingular,
       _inputs((64, 128), (64, 128), (64, 32)), SPLIT_CAT_OPTS),
    _a("aten_select_cat", "TestSplitCatAten::test_select_cat_post_grad", SelectCat, _inputs((64, 6, 32), (64, 6, 32)),
       {"normalization_aten_pass": {}, "select_cat_aten_pass": {}}, fires=("select_cat_aten_pass",)),
    _a("aten_move_view_after_cat", "TestSplitCatAten::test_move_view_after_cat_aten", MoveViewAfterCat,
       _inputs((7, 8, 96)), {"normalization_aten_pass": {}, "move_view_after_cat_aten_pass": {}},
       fires=("move_view_after_cat_aten_pass",)),
    _a("aten_split_size_same", "TestSplitCatAtenNormalizationPasses::test_split_aten_normalization",
       lambda: AtenSplit(300), _inputs((64, 300)), {"normalization_aten_pass": {}}, fires=("normalization_aten_pass",)),
    _a("aten_split_size_different", "TestSplitCatAtenNormalizationPasses::test_split_aten_normalization",
       lambda: AtenSplit(320), _inputs((64, 300)), {"normalization_aten_pass": {}}, fires=("normalization_aten_pass",)),
]
