"""Ops whose result depends on their input's layout, not only its values, of a value a rewrite changed.

``as_strided`` reads its input's storage at explicit strides from its storage offset, ``as_strided_scatter``
writes at them, ``view(dtype)`` of another element size needs a storage offset it divides, and ``reshape`` is a
view or a copy depending on the strides: a batched or folded value hands them a narrow of a wider tensor, or
another layout, where eager's was a fresh tensor. The translator keeps the view chain such an op reads as written
(``aliasing.layout_reader_nodes``), and lowering gives a kept owner whose layout a kept view observes a copy laid
out as eager's (``lower_outputs.fix_kept_layouts``). Differential against eager (conftest.check).
"""

from __future__ import annotations

import functools

import pytest
import torch

from conftest import check, rand

_rand = functools.partial(rand, seed=0)  # conftest's rand, seeded: seed 0 unless given


# Found: ``as_strided`` reads its input's storage at explicit strides from its storage offset, so its values depend
# on the input's layout, not only its values; the translator kept it as an opaque op but let its input be rewritten:
# ``a.tanh()`` of a split piece became a narrow of one batched tanh of the whole input, ``x @ q`` a narrow of one
# fused GEMM, and ``as_strided`` then read other elements (silently wrong values, both strategies). Now the view
# chain as_strided reads stays as written (``aliasing.layout_reader_nodes``).
def _as_strided_of_a_rewritten_piece(x):
    a, b = x.split(3, 1)
    return a.tanh().as_strided((2, 2), (3, 1), 1), b.tanh() * 2


def _as_strided_of_a_fused_gemm(x, p, q):
    return torch.matmul(x, p) * 2, torch.matmul(x, q).as_strided((2, 2), (4, 1))


def _as_strided_of_an_op_whose_input_changed_layout(x):
    # the cat of x.t()'s pieces folds to x.t(): eager's ``a * 3`` is contiguous, the kept mul of the folded
    # input follows its transposed layout; lowering gives the owner of the storage as_strided reads a copy laid
    # out as eager's (``lower_outputs.fix_kept_layouts``)
    p, q = x.t().split(2, 0)
    return (torch.cat([p, q], 0) * 3).as_strided((2, 2), (6, 1))


def _as_strided_scatter_into_a_rewritten_piece(x, s):
    # as_strided_scatter writes ``s`` into a copy of its input at explicit strides: the same layout dependence
    a, b = x.split(3, 1)
    return torch.as_strided_scatter(a.tanh(), s, (2, 2), (3, 1), 1), b.tanh() * 2


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_as_strided_scatter_into_a_rewritten_value_writes_eagers_layout(strategy):
    check(_as_strided_scatter_into_a_rewritten_piece, [_rand(5, 6), _rand(2, 2, seed=1)], strategy,
          pattern_options={"batch_tanh": {"min_fuse_set_size": 2}})


@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
@pytest.mark.parametrize("case", ["piece", "gemm", "owner"])
def test_as_strided_of_a_rewritten_value_reads_eagers_layout(strategy, case):
    options = {name: {"min_fuse_set_size": 2} for name in ("batch_tanh", "batch_gemm_lhs")}
    if case == "piece":
        check(_as_strided_of_a_rewritten_piece, [_rand(5, 6)], strategy, pattern_options=options)
    elif case == "gemm":
        check(_as_strided_of_a_fused_gemm, [_rand(5, 6), _rand(6, 4, seed=1), _rand(6, 4, seed=2)], strategy,
              pattern_options=options)
    else:
        c = check(_as_strided_of_an_op_whose_input_changed_layout, [_rand(6, 4)], strategy)
        assert not c.report.ops_after.get("cat"), dict(c.report.ops_after)  # the fold happened


def _view_as_another_dtype_of_a_rewritten_piece(x):
    a, b, c = x.split([1, 2, 3], 1)
    return a.tanh() * 2, b.tanh().view(torch.float32), c.tanh() * 2


# Found: ``view(dtype)`` of another element size needs its input's storage offset divisible; the rewrite made
# ``b.tanh()`` a narrow at offset 1 of a batched tanh, and lowering failed: the whole graph fell back with a warning.
# Now a layout reader too (its input stays as written).
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_view_as_another_dtype_of_a_rewritten_piece_does_not_fall_back(strategy):
    check(_view_as_another_dtype_of_a_rewritten_piece, [_rand(4, 6, dtype=torch.float16)], strategy, grad=False,
          pattern_options={"batch_tanh": {"min_fuse_set_size": 2}})


def _write_through_a_reshape_of_an_op_whose_input_changed_layout(x):
    p, q = x.t().split(2, 0)
    t = torch.cat([p, q], 0) * 3
    y = t.reshape(-1)
    y.add_(1)
    return t


# Found: ``reshape`` is a view only for some layouts. The mutation kept ``t``'s alias group as written, but ``t``'s
# input, the cat of x.t()'s pieces, folded to ``x.t()``: the kept ``* 3`` came out transposed, ``reshape`` copied
# where eager's viewed, and ``y.add_(1)`` no longer reached ``t`` (silently wrong values, both strategies). Now a
# kept owner whose layout a kept view observes gets a copy laid out as eager's (``lower_outputs.fix_kept_layouts``).
@pytest.mark.parametrize("strategy", ["greedy", "eqsat"])
def test_a_write_through_a_reshape_reaches_its_base_as_in_eager(strategy):
    c = check(_write_through_a_reshape_of_an_op_whose_input_changed_layout, [_rand(6, 4)], strategy, grad=False)
    assert not c.report.ops_after.get("cat"), dict(c.report.ops_after)  # the fold happened
