"""Split pieces concatenated or stacked along another dim than the split dim, and general reshapes of
split pieces in a stack (split_cat_pass' other-dim rules, move_reshape_out_of_split_stack_pass' run rules).

Differential tests against eager (:func:`conftest.check`: values, dtypes, shapes, observable strides,
aliasing with inputs and between outputs, gradients) on random shapes, split sizes, split dims, cat/stack
dims (negative spellings too), partial runs, other cat inputs and permuted orders, both strategies, each
pattern alone and with the whole set. Where the pieces can fold, the fold is asserted (the pass fired,
no cat left); where folding would cost a copy more (other cat inputs) or is wrong (permuted pieces),
that nothing folded.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import STRATEGIES, check, junk_after

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _x(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _neg(draw, dim, rank):
    return dim - rank if draw(st.booleans()) else dim


def _patterns(draw, name):
    """``name`` alone (with normalization), or the whole pattern set (None)."""
    return [name, "normalization_pass"] if draw(st.booleans()) else None


# -- cat along another dim ------------------------------------------------------------------------------

@st.composite
def cat_other_dim(draw):
    """x split along d into k equal pieces of l (plus, sometimes, an unequal tail piece); a run lo:hi of
    the equal pieces concatenated along c != d; sometimes permuted, or with another cat input."""
    rank = draw(st.integers(2, 4))
    shape = [draw(st.integers(1, 3)) for _ in range(rank)]
    d = draw(st.integers(0, rank - 1))
    c = draw(st.sampled_from([j for j in range(rank) if j != d]))
    l, k = draw(st.integers(1, 3)), draw(st.integers(2, 5))
    tail = draw(st.sampled_from([0, 0, 1, 2]))
    shape[d] = k * l + tail
    sizes = [l] * k + ([tail] if tail else [])
    lo = draw(st.integers(0, k - 2))
    hi = draw(st.integers(lo + 2, k))
    order = list(range(lo, hi))
    kind = draw(st.sampled_from(["run", "run", "run", "permuted", "extra"]))
    if kind == "permuted":
        order = order[::-1]
    dtype, seed = draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**16))
    dd, cc = _neg(draw, d, rank), _neg(draw, c, rank)
    yshape = list(shape)
    yshape[d] = l
    yshape[c] = draw(st.integers(1, 3))
    direct = draw(st.booleans())  # the cat is the graph output (aliasing, strides) or feeds an op

    def fn(x, y):
        ps = torch.split(x, sizes, dd)
        items = [ps[i] for i in order] + ([y] if kind == "extra" else [])
        out = torch.cat(items, cc)
        return out if direct else out * 2

    note = f"shape={shape} sizes={sizes} split={dd} cat={cc} run={lo}:{hi} {kind} direct={direct} {dtype}"
    return fn, [_x(shape, dtype, seed), _x(yshape, dtype, seed + 1)], kind, note


@pytest.mark.parametrize("strategy", STRATEGIES)
@given(data=st.data())
def test_cat_of_split_pieces_along_another_dim(strategy, data):
    fn, inputs, kind, note = data.draw(cat_other_dim(), label="case")
    patterns = _patterns(data.draw, "split_cat_pass")
    r = check(fn, inputs, strategy, source="fx", patterns=patterns).report
    fired = r.rule_matches["split_cat_pass"]
    if kind == "run":
        assert fired > 0, note
        assert junk_after(r) == 0, (note, dict(r.ops_after))
    else:  # a permuted run is not a view of x; with another input the flatten would be one copy more
        assert r.ops_after.get("cat", 0) == 1 and not r.ops_after.get("permute"), (note, dict(r.ops_after))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_cat_along_another_dim_is_unflatten_movedim_flatten(strategy):
    """Upstream's test_split_cat_merge argspec3 (the conformance case), on a dynamo graph: the cat becomes
    x.unflatten(1, (8, 4)).movedim(1, 2).flatten(2, 3): reshape, permute, reshape."""
    def f(x):
        return torch.cat(torch.split(x, 4, dim=1), -2)

    c = check(f, [torch.randn(2, 32, 32, 16)], strategy)
    targets = [n.target for n in c.gm2.graph.nodes if n.op == "call_function"]
    assert targets == [torch.reshape, torch.permute, torch.reshape], c.gm2.code


# -- general reshapes of split pieces in a stack --------------------------------------------------------

def _factor(draw, numel):
    """A shape with ``numel`` elements, of rank 1 to 3."""
    rank = draw(st.integers(1, 3))
    dims, left = [], numel
    for _ in range(rank - 1):
        a = draw(st.sampled_from([f for f in range(1, left + 1) if left % f == 0]))
        dims.append(a)
        left //= a
    return dims + [left]


@st.composite
def stack_of_reshaped_pieces(draw):
    """x split along d into k equal pieces of l (plus, sometimes, an unequal tail); the run lo:hi of the
    equal pieces, each reshaped to one random shape v, stacked along c, with other cells before/after
    (clones of a piece, or y) or permuted."""
    rank = draw(st.integers(2, 3))
    shape = [draw(st.integers(1, 4)) for _ in range(rank)]
    d = draw(st.integers(0, rank - 1))
    l, k = draw(st.integers(1, 3)), draw(st.integers(2, 5))
    tail = draw(st.sampled_from([0, 0, 1]))
    shape[d] = k * l + tail
    sizes = [l] * k + ([tail] if tail else [])
    piece = list(shape)
    piece[d] = l
    v = _factor(draw, math.prod(piece))
    assume(v != piece)  # no reshape at all (the translator drops it): split_stack_to_cats_pass' case
    c = draw(st.integers(0, len(v)))
    cc = c - len(v) - 1 if draw(st.booleans()) else c
    lo = draw(st.integers(0, k - 2))
    hi = draw(st.integers(lo + 2, k))
    order = list(range(lo, hi))
    permuted = draw(st.integers(0, 4)) == 0
    if permuted:
        order = order[::-1]
    before, after = draw(st.booleans()), draw(st.booleans())
    dtype, seed = draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**16))
    dd = _neg(draw, d, rank)
    direct = draw(st.booleans())

    def fn(x, y):
        ps = torch.split(x, sizes, dd)
        rs = [ps[i].reshape(v) for i in order]
        cells = ([rs[0].clone()] if before else []) + rs + ([y] if after else [])
        out = torch.stack(cells, cc)
        return out if direct else out.tanh()

    note = (f"shape={shape} sizes={sizes} split={dd} v={v} stack={cc} run={lo}:{hi} permuted={permuted} "
            f"before={before} after={after} direct={direct} {dtype}")
    alone_in_stack = not (before or after or permuted)
    return fn, [_x(shape, dtype, seed), _x(v, dtype, seed + 1)], permuted, alone_in_stack, note


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
@given(data=st.data())
def test_stack_of_reshaped_split_pieces(strategy, data):
    fn, inputs, permuted, alone_in_stack, note = data.draw(stack_of_reshaped_pieces(), label="case")
    patterns = _patterns(data.draw, "move_reshape_out_of_split_stack_pass")
    r = check(fn, inputs, strategy, source="fx", patterns=patterns).report
    if patterns and not permuted:
        assert r.rule_matches["move_reshape_out_of_split_stack_pass"] > 0, (note, dict(r.rule_matches))
    if patterns is None and alone_in_stack:  # with the whole set, another pass may take a unit-dim case
        assert junk_after(r) == 0, (note, dict(r.ops_after))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_stack_of_reshaped_pieces_is_one_view(strategy):
    """Upstream's test_split_cat_new_patterns (move_reshape_out_of_split_stack): [N, 1] pieces reshaped to
    [N/5, 5] and stacked between clones become one view of x inside the stack."""
    def f(x):
        s = torch.split(x.view(50000, 5), [1, 1, 1, 1, 1], dim=1)
        r = [p.reshape(-1, 5) for p in s]
        return torch.stack((r[0].clone(), r[1].clone(), r[2].clone(), *r, r[3].clone()), dim=0)

    c = check(f, [torch.randn(500, 500)], strategy)
    assert c.report.rule_matches["move_reshape_out_of_split_stack_pass"] > 0
    (cat,) = [n for n in c.gm2.graph.nodes if n.target in (torch.cat, torch.stack)]
    assert len(cat.args[0]) == 5, c.gm2.code  # 4 clones and one [5, 10000, 5] view of x


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_single_reshaped_piece_is_left_alone(strategy):
    """One reshaped piece in a stack is no run: moving the reshape would reshape all of x (a copy of all
    of it where the piece's reshape copies only the piece)."""
    def f(x, y):
        return torch.stack([torch.split(x, 4, 1)[1].reshape(-1), y], 0)

    r = check(f, [torch.randn(3, 12), torch.randn(12)], strategy).report
    assert not r.rule_matches["move_reshape_out_of_split_stack_pass"], dict(r.rule_matches)
