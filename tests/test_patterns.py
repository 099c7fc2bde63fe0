"""One randomized soundness test per registered pattern.

For every pattern there is a case builder: a hypothesis strategy that draws shapes, split sizes, dims
(negative ones too) and a dtype (fp32 / bf16 / fp16) and returns a small function that contains the
pattern's left-hand side. The test optimizes the function's graph (with the pattern alone and with the
whole set), asserts that the pattern fired, and compares with eager: values, dtypes, shapes, strides
and gradients (:func:`conftest.check`).

Most examples use ``torch.fx.symbolic_trace`` (fast: ``optimize`` computes FakeTensor meta from the
inputs); one fixed example per pattern goes through dynamo. A meta-test fails when a registered pattern
has no case here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import optimus_eq
from conftest import STRATEGIES, check, junk_after
import oracle
from horizontal_cases import CASES as HORIZONTAL_CASES

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass
class Case:
    fn: Callable
    inputs: list
    note: str = ""


def _x(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _sizes(draw, n, min_pieces=2, allow_zero=False):
    """Split sizes (a list summing to n, at least ``min_pieces`` entries)."""
    cuts = sorted(draw(st.lists(st.integers(1, n - 1), min_size=min_pieces - 1, max_size=min(4, n - 1),
                                unique=True)))
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [n])]
    if allow_zero and draw(st.booleans()):
        sizes.insert(draw(st.integers(0, len(sizes))), 0)
    return sizes


def _neg(draw, dim, rank):
    """``dim`` or its negative spelling."""
    return dim - rank if draw(st.booleans()) else dim


def _common(draw, rank_min=2, rank_max=3, size_min=1, size_max=5):
    rank = draw(st.integers(rank_min, rank_max))
    shape = [draw(st.integers(size_min, size_max)) for _ in range(rank)]
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**16))
    return rank, shape, dtype, seed


# -- case builders, one per pattern -----------------------------------------------------------------

@st.composite
def normalization_case(draw) -> Case:
    rank, shape, dtype, seed = _common(draw)
    d = draw(st.integers(0, rank - 1))
    shape[d] = draw(st.integers(2, 7))
    n = shape[d]
    dd = _neg(draw, d, rank)
    spelling = draw(st.sampled_from(["split_int", "split_list", "method_split", "chunk", "narrow", "slice",
                                     "unbind", "concat"]))
    if spelling == "split_int":
        k = draw(st.integers(1, n))
        count = -(-n // k)
        pieces = lambda x: torch.split(x, k, dd)  # noqa: E731
    elif spelling in ("split_list", "concat"):
        sizes = _sizes(draw, n)
        count = len(sizes)
        pieces = lambda x: x.split(sizes, dim=dd)  # noqa: E731
    elif spelling == "method_split":
        k = draw(st.integers(1, n))
        count = -(-n // k)
        pieces = lambda x: x.split(k, dd)  # noqa: E731
    elif spelling == "chunk":
        c = draw(st.integers(1, n))
        count = len(torch.chunk(torch.empty(n), c))
        pieces = lambda x: torch.chunk(x, c, dim=dd)  # noqa: E731
    elif spelling == "narrow":
        sizes = _sizes(draw, n)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        count = len(sizes)
        pieces = lambda x: [x.narrow(dd, s, l) for s, l in zip(starts, sizes)]  # noqa: E731
    elif spelling == "slice":
        sizes = _sizes(draw, n)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        count = len(sizes)
        pre = (slice(None),) * d
        pieces = lambda x: [x[pre + (slice(s, s + l),)] for s, l in zip(starts, sizes)]  # noqa: E731
    else:  # unbind
        count = n
        pieces = lambda x: torch.unbind(x, dd)  # noqa: E731
    order = draw(st.permutations(list(range(count))))
    cat = torch.concat if spelling == "concat" else torch.cat

    def fn(x):
        ps = pieces(x)
        if spelling == "unbind":
            return torch.stack([ps[i] for i in order], dd) * 2
        return cat([ps[i] for i in order], dd) * 2

    return Case(fn, [_x(shape, dtype, seed)], f"{spelling} dim={dd} order={order}")


@st.composite
def remove_split_with_size_one_case(draw) -> Case:
    rank, shape, dtype, seed = _common(draw)
    d = draw(st.integers(0, rank - 1))
    dd = _neg(draw, d, rank)
    n = shape[d]
    kind = draw(st.sampled_from(["split_int", "split_list", "chunk", "unbind1", "squeezed_piece"]))
    if kind == "unbind1":
        shape[d] = 1
    i = draw(st.integers(0, n - 1))

    def fn(x):
        if kind == "split_int":
            p = torch.split(x, n, dd)[0]
        elif kind == "split_list":
            p = x.split([n], dd)[0]
        elif kind == "chunk":
            p = torch.chunk(x, 1, dd)[0]
        elif kind == "squeezed_piece":
            p = torch.split(x, 1, dd)[i].squeeze(dd)
        else:
            p = torch.unbind(x, dd)[0]
        return p.tanh()

    return Case(fn, [_x(shape, dtype, seed)], f"{kind} dim={dd}")


@st.composite
def merge_splits_case(draw) -> Case:
    rank, shape, dtype, seed = _common(draw)
    d = draw(st.integers(0, rank - 1))
    shape[d] = n = draw(st.integers(3, 8))
    dd = _neg(draw, d, rank)
    outer = _sizes(draw, n)
    if max(outer) < 2:
        outer = [1, n - 1]
    # a piece of size >= 2 (a size-1 piece is removed by remove_split_with_size_one_pass first in greedy)
    i = draw(st.sampled_from([j for j, s in enumerate(outer) if s >= 2]))
    m = outer[i]
    use_unbind = draw(st.booleans())
    inner = None if use_unbind else _sizes(draw, m)
    pick = draw(st.integers(0, (m if use_unbind else len(inner)) - 1))

    def fn(x):
        piece = torch.split(x, outer, dd)[i]
        sub = piece.unbind(dd)[pick] if use_unbind else torch.split(piece, inner, dd)[pick]
        return sub * 3

    return Case(fn, [_x(shape, dtype, seed)], f"outer={outer}[{i}] inner={inner or 'unbind'}[{pick}] dim={dd}")


@st.composite
def fold_view_chain_case(draw) -> Case:
    _, _, dtype, seed = _common(draw)
    b, n, k = draw(st.integers(1, 4)), draw(st.integers(2, 4)), draw(st.integers(1, 4))  # n > 1: a real reshape
    kind = draw(st.sampled_from(["view_flatten", "reshape_reshape", "unsqueeze_reshape", "view_view_same"]))

    def fn(x):
        if kind == "view_flatten":
            y = x.view(b, n, k).flatten(1)
        elif kind == "reshape_reshape":
            y = x.reshape(b * n, k).reshape(b, n * k)
        elif kind == "unsqueeze_reshape":
            y = x.unsqueeze(1).reshape(b, n * k)
        else:
            y = x.view(b, n, k).view(b, n * k)
        return y + 1

    return Case(fn, [_x((b, n * k), dtype, seed)], kind)


@st.composite
def move_reshape_out_of_split_stack_case(draw) -> Case:
    _, _, dtype, seed = _common(draw)
    b, n, k = draw(st.integers(1, 4)), draw(st.integers(2, 4)), draw(st.integers(1, 4))

    def fn(x):
        ps = torch.split(x, k, 1)
        return torch.cat([ps[i].reshape(b, 1, k) for i in range(n)], 1).sigmoid()

    return Case(fn, [_x((b, n * k), dtype, seed)], f"b={b} n={n} k={k}")


@st.composite
def pointwise_through_slice_case(draw) -> Case:
    rank, shape, dtype, seed = _common(draw)
    d = draw(st.integers(0, rank - 1))
    shape[d] = n = draw(st.integers(2, 7))
    dd = _neg(draw, d, rank)
    sizes = _sizes(draw, n)
    op = draw(st.sampled_from(["tanh", "relu", "sigmoid", "mul2", "clamp", "add_y", "mul_y", "sub_y", "unbind_tanh"]))
    y = _x(shape, dtype, seed + 1)

    def fn(x, y):
        if op == "unbind_tanh":
            ps = torch.unbind(x, dd)
            return torch.stack([ps[i].tanh() for i in range(n)], dd)
        xs, ys = torch.split(x, sizes, dd), torch.split(y, sizes, dd)
        out = []
        for i in range(len(sizes)):
            a, b = xs[i], ys[i]
            out.append({"tanh": lambda: torch.tanh(a), "relu": lambda: a.relu(), "sigmoid": lambda: torch.sigmoid(a),
                        "mul2": lambda: a * 2, "clamp": lambda: a.clamp(-0.5, 0.5), "add_y": lambda: a + b,
                        "mul_y": lambda: torch.mul(a, b), "sub_y": lambda: b - a}[op]())
        return torch.cat(out, dd)

    return Case(fn, [_x(shape, dtype, seed), y], f"{op} sizes={sizes} dim={dd}")


@st.composite
def unbind_stack_to_slices_case(draw) -> Case:
    rank, shape, dtype, seed = _common(draw, 2, 3, 1, 4)
    d = draw(st.integers(0, rank - 1))
    shape[d] = n = draw(st.integers(2, 4))  # a size-1 dim is remove_split_with_size_one_pass' case
    c = draw(st.sampled_from([j for j in range(rank) if j != d]))  # the stack's result has rank dims
    dd, cc = _neg(draw, d, rank), _neg(draw, c, rank)

    def fn(x):
        ps = torch.unbind(x, dd)
        return torch.stack([ps[i] for i in range(n)], cc) * 1.5

    return Case(fn, [_x(shape, dtype, seed)], f"unbind {dd} stack {cc} shape={shape}")


@st.composite
def unbind_stack_case(draw) -> Case:
    rank, shape, dtype, seed = _common(draw)
    d = draw(st.integers(0, rank - 1))
    shape[d] = n = draw(st.integers(2, 5))  # a size-1 dim is remove_split_with_size_one_pass' case
    dd = _neg(draw, d, rank)
    order = draw(st.permutations(list(range(n)))) if draw(st.booleans()) else list(range(n))

    def fn(x):
        ps = x.unbind(dd)
        return torch.stack([ps[i] for i in order], dim=dd) - 1

    return Case(fn, [_x(shape, dtype, seed)], f"dim={dd} order={order}")


@st.composite
def split_stack_to_cats_case(draw) -> Case:
    rank, shape, dtype, seed = _common(draw, 2, 3, 1, 3)
    d = draw(st.integers(0, rank - 1))
    k, m = draw(st.integers(1, 3)), draw(st.integers(2, 4))
    shape[d] = k * m
    dd = _neg(draw, d, rank)
    ds = _neg(draw, d, rank + 1)  # stack's dim counts the new dim

    def fn(x):
        ps = torch.split(x, k, dd)
        return torch.stack([ps[i] for i in range(m)], ds).relu()

    return Case(fn, [_x(shape, dtype, seed)], f"k={k} m={m} split dim={dd} stack dim={ds} shape={shape}")


@st.composite
def unbind_cat_to_view_case(draw) -> Case:
    rank, shape, dtype, seed = _common(draw, 3, 4, 1, 4)
    d = draw(st.integers(0, rank - 1))
    shape[d] = draw(st.integers(2, 4))  # a size-1 dim is remove_split_with_size_one_pass' case
    dd = _neg(draw, d, rank)
    # the cat dim, in the pieces' dims: the unbind dim, or another one
    c = d if d < rank - 1 and draw(st.booleans()) else draw(st.integers(0, rank - 2))
    dc = _neg(draw, c, rank - 1)
    n = shape[d]
    order = draw(st.permutations(list(range(n)))) if draw(st.booleans()) else list(range(n))

    def fn(x):
        ps = torch.unbind(x, dd)
        return torch.cat([ps[i] for i in order], dc) * 2

    return Case(fn, [_x(shape, dtype, seed)], f"unbind dim={dd} cat dim={dc} order={order}")


@st.composite
def merge_getitem_cat_case(draw) -> Case:
    rank, shape, dtype, seed = _common(draw)
    d = draw(st.integers(0, rank - 1))
    shape[d] = n = draw(st.integers(3, 8))
    dd = _neg(draw, d, rank)
    sizes = _sizes(draw, n, min_pieces=3)
    k = len(sizes)
    lo = draw(st.integers(0, k - 2))
    hi = draw(st.integers(lo + 2, k))
    if (lo, hi) == (0, k):  # a partial run: drop one end
        hi -= 1
    if draw(st.booleans()):  # a zero-size section somewhere (inside or outside the run)
        p = draw(st.integers(0, k))
        sizes.insert(p, 0)
        lo, hi = (lo + 1, hi + 1) if p <= lo else (lo, hi + 1) if p < hi else (lo, hi)
    yshape = list(shape)
    yshape[d] = 2
    before, after = draw(st.booleans()), draw(st.booleans())

    def fn(x, y):
        ps = torch.split(x, sizes, dd)
        items = ([y] if before else []) + [ps[i] for i in range(lo, hi)] + ([y.tanh()] if after else [])
        if len(items) == hi - lo:
            items.append(y)
        return torch.cat(items, dd)

    return Case(fn, [_x(shape, dtype, seed), _x(yshape, dtype, seed + 1)], f"sizes={sizes} run={lo}:{hi} dim={dd}")


@st.composite
def split_cat_case(draw) -> Case:
    rank, shape, dtype, seed = _common(draw)
    d = draw(st.integers(0, rank - 1))
    shape[d] = n = draw(st.integers(2, 8))
    dd = _neg(draw, d, rank)
    sizes = _sizes(draw, n, allow_zero=True)
    yshape = list(shape)
    yshape[d] = 1
    before, after = draw(st.booleans()), draw(st.booleans())

    def fn(x, y):
        ps = torch.split(x, sizes, dd)
        items = ([y] if before else []) + [ps[i] for i in range(len(sizes))] + ([y * 2] if after else [])
        return torch.cat(items, dd) + 1

    return Case(fn, [_x(shape, dtype, seed), _x(yshape, dtype, seed + 1)], f"sizes={sizes} dim={dd} {before} {after}")


@st.composite
def split_cat_to_slices_case(draw) -> Case:
    """Runs of split pieces in a cat: the whole split, a partial run, or the only input (cat removed);
    other inputs and out-of-order pieces of a second split of the same tensor stay."""
    rank, shape, dtype, seed = _common(draw)
    d = draw(st.integers(0, rank - 1))
    shape[d] = n = draw(st.integers(3, 8))
    dd = _neg(draw, d, rank)
    sizes = _sizes(draw, n, min_pieces=3)
    k = len(sizes)
    lo = draw(st.integers(0, k - 2))
    hi = draw(st.integers(lo + 2, k))
    kind = draw(st.sampled_from(["with_others", "alone", "two_splits"]))
    yshape = list(shape)
    yshape[d] = 2

    def fn(x, y):
        ps = torch.split(x, sizes, dd)
        run = [ps[i] for i in range(lo, hi)]
        if kind == "alone":
            return torch.cat(run, dd) * 2
        if kind == "two_splits":  # a second split of the same tensor, pieces reversed: never merged
            qs = torch.split(x, [1, n - 1], dd)
            return torch.cat(run + [qs[1], qs[0]], dd)
        return torch.cat([y] + run + [y.tanh()], dd)

    return Case(fn, [_x(shape, dtype, seed), _x(yshape, dtype, seed + 1)], f"{kind} sizes={sizes} run={lo}:{hi} dim={dd}")


@st.composite
def mutate_cat_case(draw) -> Case:
    rank, shape, dtype, seed = _common(draw)
    d = draw(st.integers(0, rank - 1))
    shape[d] = n = draw(st.integers(2, 6))
    dd = _neg(draw, d, rank)
    sizes = _sizes(draw, n)
    i = draw(st.integers(0, len(sizes) - 1))
    kind = draw(st.sampled_from(["piece", "tensor", "tanh"]))

    def fn(x):
        if kind == "piece":
            t = torch.split(x, sizes, dd)[i]
        elif kind == "tensor":
            t = x
        else:
            t = x.tanh()
        return torch.cat([t], dd)

    return Case(fn, [_x(shape, dtype, seed)], f"{kind} sizes={sizes}[{i}] dim={dd}")


@st.composite
def split_of_cat_case(draw) -> Case:
    rank, shape, dtype, seed = _common(draw)
    d = draw(st.integers(0, rank - 1))
    dd = _neg(draw, d, rank)
    k = draw(st.integers(2, 4))
    stack = draw(st.booleans())  # DLRM's KeyedTensor: cat, split per feature, stack with another tensor
    sizes = [draw(st.integers(1, 4))] * k if stack else [draw(st.integers(1, 4)) for _ in range(k)]
    c = draw(st.integers(-rank - 1, rank))  # the stack's dim
    xs = [_x(shape[:d] + [m] + shape[d + 1:], dtype, seed + i) for i, m in enumerate(sizes)]

    def body(y, xs):
        pieces = torch.split(torch.cat(xs, dd), sizes, dd)
        if stack:
            return torch.stack([y] + [pieces[i] for i in range(k)], c) * 2  # indexed: fx cannot unpack
        return tuple(pieces[i] * (i + 2) for i in range(k))

    fn = {2: lambda y, a, b: body(y, [a, b]), 3: lambda y, a, b, e: body(y, [a, b, e]),  # fx: one
          4: lambda y, a, b, e, g: body(y, [a, b, e, g])}[k]                            # placeholder each

    return Case(fn, [_x(shape[:d] + [sizes[0]] + shape[d + 1:], dtype, seed + k), *xs],
                f"sizes={sizes} dim={dd} stack={stack} at {c}")


CASES = {
    "normalization_pass": normalization_case,
    "remove_split_with_size_one_pass": remove_split_with_size_one_case,
    "merge_splits_pass": merge_splits_case,
    "split_of_cat_pass": split_of_cat_case,
    "fold_view_chain": fold_view_chain_case,
    "move_reshape_out_of_split_stack_pass": move_reshape_out_of_split_stack_case,
    "pointwise_through_slice": pointwise_through_slice_case,
    "unbind_stack_to_slices_pass": unbind_stack_to_slices_case,
    "unbind_stack_pass": unbind_stack_case,
    "split_stack_to_cats_pass": split_stack_to_cats_case,
    "unbind_cat_to_view_pass": unbind_cat_to_view_case,
    "merge_getitem_cat_pass": merge_getitem_cat_case,
    "split_cat_pass": split_cat_case,
    "split_cat_to_slices_pass": split_cat_to_slices_case,
    "mutate_cat_pass": mutate_cat_case,
}
CASES.update(HORIZONTAL_CASES)  # tests/horizontal_cases.py

# post-grad-only patterns have their cases in tests/test_aten.py (Aten-IR graphs)
REGISTERED = [name for name, levels, _ in optimus_eq.list_patterns() if "pre_grad" in levels]


#: patterns whose key takes GPU ops only (never fire on this CPU suite): their differential tests register
#: them again with a key that accepts CPU, in their own file
GPU_ONLY = {"decompose_gemv_pass": "tests/test_gemv.py"}


def test_every_registered_pattern_has_a_case():
    missing = [n for n in REGISTERED if n not in CASES and n not in GPU_ONLY]
    assert not missing, f"registered patterns without a soundness case in tests/test_patterns.py: {missing}"


def _run(case: Case, name: str, strategy: str, source: str, alone: bool):
    patterns = None
    if alone and name != "normalization_pass":
        patterns = [name, "normalization_pass"]
    c = check(case.fn, case.inputs, strategy, source=source, patterns=patterns)
    # an alias pattern (same rules as others, e.g. split_cat_to_slices_pass) fires under its own name
    # when alone; with all patterns on, greedy's earlier pass with the same rules may take the match
    owners = {name} if alone else _same_rules(name)
    assert any(c.report.rule_matches[n] > 0 for n in owners), (
        f"{name} did not fire ({case.note}); fired: {dict(c.report.rule_matches)}")
    return c


def _same_rules(name: str) -> set[str]:
    """``name`` and every registered pattern that shares a rule body (lhs, rhs, guards) with it."""
    bodies = {(r.lhs, r.rhs, r.when) for r in optimus_eq.DEFAULT_REGISTRY[name].rules}
    return {name} | {p.name for p in optimus_eq.DEFAULT_REGISTRY
                     if any((r.lhs, r.rhs, r.when) in bodies for r in p.rules)}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", sorted(CASES))
@given(data=st.data())
def test_pattern_soundness(name, strategy, data):
    if name not in REGISTERED:
        pytest.skip(f"{name} is not registered")
    case = data.draw(CASES[name](), label="case")
    alone = data.draw(st.booleans(), label="pattern alone")
    _run(case, name, strategy, "fx", alone)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_pattern_fires_on_dynamo_graph(name, strategy):
    """One fixed example per pattern through dynamo (the graphs users get), all patterns on."""
    if name not in REGISTERED:
        pytest.skip(f"{name} is not registered")
    case = _fixed_example(name)
    _run(case, name, strategy, "dynamo", alone=False)


def _fixed_example(name: str) -> Case:
    """A deterministic draw: hypothesis' ``find`` with a trivial predicate returns the simplest case."""
    from hypothesis import find, settings

    return find(CASES[name](), lambda c: True, settings=settings(database=None, max_examples=1))


# -- folds that the set of patterns must reach together ----------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_split_stack_folds_to_view(strategy):
    def f(x):
        return torch.stack(torch.split(x, 4, 1), 1) + 1

    r = check(f, [torch.randn(2, 12)], strategy).report
    assert junk_after(r) == 0, dict(r.ops_after)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_unbind_stack_other_dim_becomes_permute(strategy):
    def f(x):
        return torch.stack(torch.unbind(x, 1), 2) + 1

    r = check(f, [torch.randn(2, 3, 4)], strategy).report
    assert junk_after(r) == 0, dict(r.ops_after)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_split_unit_reshape_cat_folds_to_view(strategy):
    def f(x):
        return torch.cat([p.reshape(2, 1, 4) for p in x.split(4, 1)], 1).relu()

    r = check(f, [torch.randn(2, 12)], strategy).report
    assert junk_after(r) == 0, dict(r.ops_after)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_keyed_tensor_split_stack_reads_the_bags(strategy):
    """DLRM's interaction input (bench/optimus_bench/models/dlrm.py): pooled embeddings concatenated,
    split per feature and stacked with the bottom MLP's output. The stack must read the EmbeddingBag
    outputs themselves, with no cat or split left. Before split_of_cat_pass it became a cat of the bags
    plus a cat of d with a view of it: one copy more per step, and on CPU Inductor one kernel more in
    the forward (the cat of the bags is no longer inlined into the stack)."""
    from conftest import dynamo_graph

    torch.manual_seed(0)
    bags = torch.nn.ModuleList(torch.nn.EmbeddingBag(50, 4, mode="sum") for _ in range(6))
    bottom = torch.nn.Linear(5, 4)

    def f(dense, sparse):
        d = bottom(dense)
        pooled = torch.cat([bag(sparse[:, i]) for i, bag in enumerate(bags)], dim=1)
        t = torch.stack([d, *torch.split(pooled, 4, dim=1)], dim=1)
        return torch.bmm(t, t.transpose(1, 2))

    dense, sparse = torch.randn(3, 5), torch.randint(0, 50, (3, 6, 2))
    check(f, [dense, sparse], strategy)  # outputs and the dense input's gradient equal eager
    gm, ex = dynamo_graph(f, dense, sparse)
    # the six bags alone (batch_embedding_bag, which would batch them, has its own tests: test_embedding_bag.py)
    gm2, report = optimus_eq.optimize(gm, ex, strategy=strategy,
                                      pattern_options={"batch_embedding_bag": {"min_fuse_set_size": 7}})
    assert report.rule_matches["split_of_cat_pass"] >= 6, dict(report.rule_matches)  # eqsat: more
    targets = [n.target for n in gm2.graph.nodes]
    assert torch.cat not in targets and torch.functional.split not in targets and torch.split not in targets, \
        gm2.code
    (stack,) = [n for n in gm2.graph.nodes if n.target is torch.stack]
    assert ["embedding_bag" in str(a.target) for a in stack.args[0]] == [False] + [True] * 6, gm2.code
    # every parameter's gradient (the bags' weights through the stack's backward) equals eager's
    params = [p for p in ex if isinstance(p, torch.nn.Parameter)]
    assert len(params) == 8
    w = torch.randn(3, 7, 7)
    grads64 = oracle.float64_reference(gm, ex).grads(lambda ys: (ys[0] * w.double()).sum(), params)
    expected = torch.autograd.grad((gm(*ex)[0] * w).sum(), params)
    actual = torch.autograd.grad((gm2(*ex)[0] * w).sum(), params)
    for a, e, r in zip(actual, expected, grads64):
        oracle.assert_values(a, e, r, "bag weight gradient", grad=True)
