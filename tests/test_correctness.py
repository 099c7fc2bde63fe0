"""Differential correctness: every tricky split/cat case, both strategies, forward and backward.

Each test builds a small function, lets :func:`conftest.check` compare the optimized graph with eager
(values, dtypes, shapes, strides, mutated inputs, aliasing, gradients), then asserts the structural
effect where it is the point of the case (a fold happened, or a wrong fold did not).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import optimus_eq
from conftest import assert_same_tensor, check, dynamo_graph, junk_after, rand


def ops(report, kind: str) -> int:
    return report.ops_after.get(kind, 0)


# -- folds that must happen ------------------------------------------------------------------------

def test_split_cat_in_order_folds_to_identity(strategy):
    def f(x):
        a, b, c = torch.split(x, [2, 3, 4], 1)
        return torch.cat([a, b, c], 1) * 2

    r = check(f, [rand(4, 9)], strategy).report
    assert junk_after(r) == 0
    assert ops(r, "mul") == 1


def test_split_tanh_cat_becomes_one_tanh(strategy):
    def f(x):
        return torch.cat([torch.tanh(p) for p in torch.split(x, 3, dim=1)], dim=1)

    r = check(f, [rand(5, 12)], strategy).report
    assert junk_after(r) == 0
    assert ops(r, "tanh") == 1
    assert r.rule_matches["pointwise_through_slice"] > 0


def test_unbind_stack_in_order_folds(strategy):
    def f(x):
        return torch.stack(torch.unbind(x, 1), 1) + 1

    r = check(f, [rand(3, 4, 5)], strategy).report
    assert junk_after(r) == 0


def test_unbind_stack_negative_dim_folds(strategy):
    def f(x):
        return torch.stack(x.unbind(-2), dim=-2).relu()

    r = check(f, [rand(3, 4, 5)], strategy).report
    assert junk_after(r) == 0


def test_output_cat_of_all_pieces_does_not_alias_input(strategy):
    def f(x):
        a, b = x.split(2, 1)
        return torch.cat([a, b], 1)

    x = rand(3, 4)
    c = check(f, [x], strategy)
    assert ops(c.report, "cat") == 0 and ops(c.report, "split") == 0
    out, inp = c.outputs[0], c.inputs[0]
    saved = inp.detach().clone()
    with torch.no_grad():
        out.add_(100.0)
    torch.testing.assert_close(inp.detach(), saved)


def test_two_outputs_cat_of_same_pieces_do_not_alias_each_other(strategy):
    def f(x):
        a, b = x.split(2, 1)
        return torch.cat([a, b], 1), torch.cat([a, b], 1)

    c = check(f, [rand(3, 4)], strategy)
    o1, o2 = c.outputs
    with torch.no_grad():
        o1.add_(1.0)
    assert not torch.equal(o1, o2)


# -- folds that must NOT happen (order, sources, duplicates) -----------------------------------------

def test_permuted_cat_is_not_folded(strategy):
    def f(x):
        a, b, c = torch.split(x, [1, 2, 3], 1)
        return torch.cat([b, a, c], 1)

    r = check(f, [rand(4, 6)], strategy).report
    assert ops(r, "cat") == 1


def test_permuted_stack_is_not_folded(strategy):
    def f(x):
        a, b, c = torch.unbind(x, 1)
        return torch.stack([c, a, b], 1)

    check(f, [rand(2, 3, 4)], strategy)


def test_pieces_of_two_tensors_in_one_cat(strategy):
    def f(x, y):
        a, b = torch.split(x, 2, 1)
        c, d = torch.split(y, 2, 1)
        return torch.cat([a, d], 1), torch.cat([c, b], 1)

    check(f, [rand(3, 4), rand(3, 4)], strategy)


def test_pieces_of_two_same_shaped_tensors_interleaved(strategy):
    def f(x, y):
        a, b = torch.split(x, 2, 1)
        c, d = torch.split(y, 2, 1)
        return torch.cat([a, b, c, d], 1)  # foldable: cat([x, y])

    r = check(f, [rand(3, 4), rand(3, 4)], strategy).report
    assert ops(r, "split") == 0 and ops(r, "cat") == 1


def test_same_piece_twice(strategy):
    def f(x):
        a, b = torch.split(x, 2, 1)
        return torch.cat([a, a, b], 1), torch.cat([a, b, b], 1)

    check(f, [rand(3, 4)], strategy)


def test_same_split_twice_in_one_cat(strategy):
    def f(x):
        a, b = torch.split(x, 2, 1)
        return torch.cat([a, b, a, b], 1)  # == cat([x, x])

    check(f, [rand(3, 4)], strategy)


def test_only_some_pieces_used(strategy):
    def f(x):
        a, b, c, d = torch.split(x, 2, 1)
        return torch.cat([b, c], 1)

    r = check(f, [rand(3, 8)], strategy).report
    assert junk_after(r) <= 1  # at most a narrow-producing op, no split+getitem+cat chain
    assert ops(r, "cat") == 0


def test_prefix_and_suffix_of_pieces_with_other_input(strategy):
    def f(x, y):
        a, b, c, d = torch.split(x, [1, 2, 3, 4], -1)
        return torch.cat([y, a, b, c, y], -1), torch.cat([b, c, d, y], -1)

    check(f, [rand(2, 10), rand(2, 3)], strategy)


def test_split_outputs_with_other_users(strategy):
    def f(x):
        a, b = torch.split(x, 3, 1)
        return torch.cat([a, b], 1) + a.sum(), b * 2

    check(f, [rand(4, 6)], strategy)


def test_split_outputs_returned_as_graph_outputs(strategy):
    def f(x):
        a, b, c = torch.split(x, [1, 2, 1], 1)
        return torch.cat([a, b, c], 1), a, c

    check(f, [rand(4, 4)], strategy)


def test_split_tuple_returned_as_graph_output(strategy):
    def f(x):
        pieces = torch.split(x, 2, 1)
        return torch.cat(pieces, 1), pieces

    check(f, [rand(4, 6)], strategy)


def test_split_of_input_returned_views(strategy):
    # a split piece returned directly is a view of the input in eager; it may stay one
    def f(x):
        a, b = torch.split(x, 2, 0)
        return b, torch.cat([a, b], 0).tanh()

    check(f, [rand(4, 3)], strategy)


# -- mutation --------------------------------------------------------------------------------------

def test_split_output_mutated_then_cat(strategy):
    def f(x):
        a, b = x.split(2, 1)
        a.add_(1)
        return torch.cat([a, b], 1)

    check(f, [rand(3, 4)], strategy, grad=False, fallback_ok=False)


def test_cat_before_mutation_of_piece(strategy):
    def f(x):
        a, b = x.split(2, 1)
        y = torch.cat([a, b], 1)
        a.mul_(3)
        return y  # x itself is checked after the call

    check(f, [rand(3, 4)], strategy, grad=False)


def test_cat_before_mutation_of_input(strategy):
    def f(x):
        a, b = x.split(2, 1)
        y = torch.cat([a, b], 1)
        x.add_(1)
        return y + 0

    check(f, [rand(3, 4)], strategy, grad=False)


def test_mutation_of_cat_result(strategy):
    def f(x):
        a, b = x.split(2, 1)
        y = torch.cat([a, b], 1)
        y.add_(1)
        return y, a * 1

    check(f, [rand(3, 4)], strategy, grad=False)


def test_mutation_via_setitem_then_cat(strategy):
    def f(x):
        a, b = x.split(2, 1)
        b[:, 0] = 0.0
        return torch.cat([a, b], 1).tanh()

    check(f, [rand(3, 4)], strategy, grad=False)


def test_mutation_of_nonleaf_slice_with_grad(strategy):
    # split outputs may not be mutated under autograd; basic slices may
    def f(x):
        y = x * 2
        a, b = y[:, :2], y[:, 2:]
        a.add_(1)
        return torch.cat([a, b], 1), torch.cat([y[:, :2], y[:, 2:]], 1)

    check(f, [rand(3, 4)], strategy)


def test_unrelated_mutation_does_not_block_fold(strategy):
    """A mutation of a fresh tensor (no view of any input) leaves the inputs' readers free. (A mutated
    input is another matter: any other input may be a view of it, tests/test_aliasing.py.)"""

    def f(x, z):
        w = z * 2
        w.add_(1)
        a, b = x.split(2, 1)
        return torch.cat([a.tanh(), b.tanh()], 1), w

    r = check(f, [rand(3, 4), rand(2)], strategy, grad=False).report
    assert ops(r, "cat") == 0


# -- dims, sizes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2, -3])
def test_negative_and_positive_dims(strategy, dim):
    n = (4, 6, 2)[dim] // 2

    def f(x):
        pieces = torch.split(x, 2, dim)
        return torch.cat([pieces[i].sigmoid() for i in range(n)], dim)

    r = check(f, [rand(4, 6, 2)], strategy, source="fx").report
    assert junk_after(r) == 0


def test_cat_dim_differs_from_split_dim(strategy):
    def f(x):
        a, b = torch.split(x, 2, 1)
        return torch.cat([a, b], 0)

    r = check(f, [rand(3, 4)], strategy).report
    # equal pieces, the whole cat: x.view(3, 2, 2).permute(1, 0, 2).reshape(6, 2), one copy for the cat
    assert ops(r, "cat") == 0 and r.rule_matches["split_cat_pass"] > 0, dict(r.ops_after)


def test_cat_of_pieces_along_another_dim_out_of_order_stays(strategy):
    """Pieces in another order, or with a gap, are no view of one unflatten of x."""
    def f(x):
        a, b, c, d = torch.split(x, 1, 1)
        return torch.cat([b, a], 0), torch.cat([a, c], 0)

    r = check(f, [rand(3, 4)], strategy).report
    assert ops(r, "cat") == 2 and not r.rule_matches["split_cat_pass"], dict(r.rule_matches)


def test_cat_negative_dim_matches_positive_split_dim(strategy):
    def f(x):
        a, b = torch.split(x, [3, 1], 2)
        return torch.cat([a, b], -1)

    r = check(f, [rand(2, 3, 4)], strategy).report
    assert junk_after(r) == 0


def test_zero_size_sections(strategy):
    def f(x):
        a, b, c, d = torch.split(x, [0, 3, 0, 2], 1)
        return torch.cat([a, b, c, d], 1).tanh(), torch.cat([b, c], 1)

    check(f, [rand(3, 5)], strategy)


def test_zero_size_section_returned(strategy):
    def f(x):
        a, b = torch.split(x, [0, 4], 1)
        return a, torch.cat([a, b], 1) * 1

    check(f, [rand(3, 4)], strategy)


def test_uneven_split_last_piece_smaller(strategy):
    def f(x):
        pieces = torch.split(x, 3, 1)  # 3, 3, 1
        return torch.cat([p.relu() for p in pieces], 1), pieces[-1]

    r = check(f, [rand(2, 7)], strategy).report
    assert ops(r, "cat") == 0


def test_uneven_chunk_last_piece_smaller(strategy):
    def f(x):
        pieces = torch.chunk(x, 3, 0)  # 3, 3, 2
        return torch.cat(pieces[::-1], 0), torch.cat(pieces, 0) - 1

    check(f, [rand(8, 3)], strategy)


def test_chunk_fewer_pieces_than_asked(strategy):
    def f(x):
        pieces = x.chunk(4, 1)  # size 6 -> 3 pieces of 2
        return torch.cat([p * 3 for p in pieces], 1)

    r = check(f, [rand(2, 6)], strategy).report
    assert junk_after(r) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_dtypes(strategy, dtype):
    def f(x):
        a, b = torch.split(x, [3, 5], 1)
        return torch.cat([a.tanh(), b.tanh()], 1), torch.cat([b, a], 1)

    check(f, [rand(4, 8, dtype=dtype)], strategy)


def test_bf16_and_fp32_side_by_side(strategy):
    def f(x, y):
        a, b = torch.split(x, 2, 1)
        c, d = torch.split(y, 2, 1)
        return torch.cat([a.relu(), b.relu()], 1), torch.cat([c.relu(), d.relu()], 1), torch.cat([a, b], 1).float() + y

    c = check(f, [rand(3, 4, dtype=torch.bfloat16), rand(3, 4)], strategy)
    assert c.outputs[0].dtype == torch.bfloat16 and c.outputs[1].dtype == torch.float32


def test_cat_with_type_promotion(strategy):
    def f(x, y):
        a, b = torch.split(x, 2, 1)
        return torch.cat([a, y, b], 1)

    check(f, [rand(3, 4, dtype=torch.bfloat16), rand(3, 2)], strategy)


# -- spellings -------------------------------------------------------------------------------------

SPELLINGS = {
    "torch_split_int": lambda x: torch.cat(torch.split(x, 2, 1), 1),
    "torch_split_list": lambda x: torch.cat(torch.split(x, [1, 3, 2], 1), 1),
    "method_split_int": lambda x: torch.cat(x.split(2, 1), 1),
    "method_split_list": lambda x: torch.cat(x.split([4, 2], dim=1), dim=1),
    "kwargs_split": lambda x: torch.cat(torch.split(x, split_size_or_sections=3, dim=1), dim=1),
    "method_kwargs_split": lambda x: torch.cat(x.split(split_size=3, dim=-1), dim=-1),
    "split_with_sizes": lambda x: torch.cat(x.split_with_sizes([2, 4], 1), 1),
    "torch_concat": lambda x: torch.concat(torch.split(x, 2, 1), 1),
    "torch_concatenate": lambda x: torch.concatenate(torch.split(x, 2, 1), axis=1),
    "torch_chunk": lambda x: torch.cat(torch.chunk(x, 3, 1), 1),
    "method_chunk_kwargs": lambda x: torch.cat(x.chunk(chunks=2, dim=1), dim=1),
    "unbind_stack_kwargs": lambda x: torch.stack(torch.unbind(x, dim=0), dim=0),
    "getitem_slices": lambda x: torch.cat([x[:, :2], x[:, 2:5], x[:, 5:]], 1),
    "narrow": lambda x: torch.cat([x.narrow(1, 0, 4), torch.narrow(x, 1, 4, 2)], 1),
    "cat_tuple": lambda x: torch.cat(tuple(x.split(3, 1)), 1),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_spellings_fold(strategy, spelling):
    fn = SPELLINGS[spelling]

    def f(x):
        return fn(x) + 1

    r = check(f, [rand(3, 6)], strategy).report
    assert junk_after(r) == 0, f"{spelling}: junk left {dict(r.ops_after)}"


# -- dims or sizes given as tensors / symbolic sizes -------------------------------------------------

def test_dynamic_shapes_never_crash(strategy):
    def f(x):
        a, b = torch.split(x, [2, x.shape[1] - 2], 1)
        return torch.cat([a.tanh(), b.tanh()], 1), torch.cat([b, a], 1)

    optimus_eq.last_reports.clear()
    torch._dynamo.reset()
    cf = torch.compile(f, backend=optimus_eq.backend(strategy=strategy, compile=False), dynamic=True, fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for shape in [(3, 5), (4, 7), (2, 9)]:
            x = rand(*shape)
            for a, e in zip(cf(x), f(x)):
                torch.testing.assert_close(a, e)
    assert optimus_eq.last_reports and all(r.fallback is None for r in optimus_eq.last_reports)


def test_dynamic_dynamo_graph_direct(strategy):
    def f(x):
        a, b = torch.chunk(x, 2, 0)
        return torch.cat([a, b], 0) * 2, torch.cat([b, a], 0)

    x = rand(6, 3)
    gm, ex = dynamo_graph(f, x, dynamic=True)
    assert any(not isinstance(e, torch.Tensor) for e in ex)  # the symbolic size is an input
    gm2, report = optimus_eq.optimize(gm, ex, strategy=strategy)
    assert report.fallback is None
    for a, e in zip(gm2(*ex), f(x)):
        torch.testing.assert_close(a, e)


def test_split_sizes_from_tensor_values(strategy):
    # sizes computed from data: dynamo can't keep it in one graph without graph breaks; in FX they are nodes
    def f(x, n):
        k = int(n)
        a, b = torch.split(x, [k, x.shape[1] - k], 1)
        return torch.cat([a, b], 1)

    torch._dynamo.reset()
    optimus_eq.last_reports.clear()
    cf = torch.compile(f, backend=optimus_eq.backend(strategy=strategy, compile=False))
    x = rand(3, 5)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="optimus_eq")
        torch.testing.assert_close(cf(x, torch.tensor(2)), f(x, torch.tensor(2)))
    assert optimus_eq.last_reports and all(r.fallback is None for r in optimus_eq.last_reports)


def test_dynamic_batch_dim_never_crashes(strategy):
    def f(x):
        return torch.cat([p.tanh() for p in torch.split(x, 2, 1)], 1), torch.stack(x.unbind(1), 1)

    optimus_eq.last_reports.clear()
    torch._dynamo.reset()
    cf = torch.compile(f, backend=optimus_eq.backend(strategy=strategy, compile=False), fullgraph=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="optimus_eq")
        for b in (4, 7):
            x = rand(b, 6)
            torch._dynamo.mark_dynamic(x, 0)
            for a, e in zip(cf(x), f(x)):
                assert_same_tensor(a, e)
    assert optimus_eq.last_reports and all(r.fallback is None for r in optimus_eq.last_reports)


def test_split_size_from_size_node_symbolic_trace(strategy):
    def f(x):
        n = x.size(1) // 2
        a, b = torch.split(x, n, 1)
        return torch.cat([b.tanh(), a.tanh()], 1)

    check(f, [rand(3, 6)], strategy, source="fx")


def test_cat_dim_from_ndim(strategy):
    def f(x):
        a, b = torch.split(x, 2, x.dim() - 1)
        return torch.cat([a, b], x.dim() - 1) + 1

    check(f, [rand(3, 4)], strategy, source="fx")


# -- global state regions (grad mode, autocast) and dtype views ---------------------------------------

def test_no_grad_region_is_respected(strategy):
    """Ops inside ``torch.no_grad()`` must stay inside it (dynamo marks the region with
    ``_set_grad_enabled`` calls; a pure op lowered after the region would get a gradient)."""
    def f(x):
        with torch.no_grad():
            y = x.tanh()
        return y * x

    check(f, [rand(3, 4)], strategy)


def test_no_grad_op_is_not_merged_with_grad_op(strategy):
    """The same op inside and outside ``no_grad`` are two different values for autograd (no CSE)."""
    def f(x):
        with torch.no_grad():
            y = x * 2
        z = x * 2
        return y + z

    check(f, [rand(3, 4)], strategy)


def test_no_grad_region_with_split_cat(strategy):
    def f(x):
        a, b = x.split(2, 1)
        with torch.no_grad():
            c = torch.cat([a.tanh(), b.tanh()], 1)
        return c + x.tanh()

    check(f, [rand(3, 4)], strategy)


def test_autocast_region_is_respected(strategy):
    """An op inside ``torch.autocast`` runs in bf16; moving it out (or merging it with the same op
    outside the region) changes the result."""
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.mm(x, w)
        return y.float() + torch.mm(x, w)

    check(f, [rand(8, 16), rand(16, 8)], strategy)


def test_view_as_dtype_is_not_a_reshape(strategy):
    """``x.view(torch.int32)`` reinterprets the bits; it is not a same-shape reshape."""
    def f(x):
        return (x.view(torch.int32) + 1).float()

    check(f, [rand(3, 4)], strategy, grad=False)


# -- symbolic_trace graphs: a split tuple used whole -------------------------------------------------

TUPLE_SLICES = {
    "reversed": lambda x: torch.cat(x.split(1, 1)[::-1], 1),
    "tail": lambda x: torch.cat(x.split(1, 1)[1:], 1) + 1,
    "tail_and_head": lambda x: (lambda p: torch.cat(p[1:], 1) + p[0])(x.split(1, 1)),
}


@pytest.mark.parametrize("case", sorted(TUPLE_SLICES))
def test_tuple_slice_of_split_is_sound(strategy, case):
    """``pieces[1:]`` in a symbolic_trace graph is a getitem of the whole tuple (opaque); still sound."""
    check(TUPLE_SLICES[case], [rand(3, 4)], strategy, source="fx", fallback_ok=True)


@pytest.mark.parametrize("case", sorted(TUPLE_SLICES))
def test_tuple_slice_of_split_does_not_fall_back(strategy, case):
    check(TUPLE_SLICES[case], [rand(3, 4)], strategy, source="fx")
