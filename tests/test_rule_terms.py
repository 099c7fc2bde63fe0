"""Term-level ``before => after`` cases, one or more per rule of the registered patterns.

Each case states an algebraic fact in the term language of :mod:`optimus_eq.terms` with concrete shapes
(``cat(split(x)) == x``, ``x.narrow(d, s, l).narrow(d, t, m) == x.narrow(d, s + t, m)``, ...). The test
puts ``before`` into an e-graph, runs the named rule (or a pattern's whole rule set) with the analyses, and
asserts that the e-class of ``before`` holds ``after``. Independently of the rules, a small evaluator
computes both terms with torch on random leaves and asserts they are equal, so an ``after`` that the rules
produce but that is wrong fails too. A negative case (``fires=False``) names the equality that a guard
forbids (a permuted cat, a broadcast operand, a zero-length piece) and asserts it is not derived.

egg's ``start => goal`` tests and tinygrad's proof per rewrite are the models (../shared/STYLE.md, item 8).
The whole file runs in a few seconds: no FX, no Inductor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
import torch

from optimus_eq.egraph import EGraph, SearchResult
from optimus_eq.patterns import DEFAULT_REGISTRY
from optimus_eq.registry import Pattern, renamed
from optimus_eq.schedule import pattern_pass

#: op keys of the cases' pointwise terms (keys are opaque integers to the rules)
TANH, ADD = 7, 3
UNARY = {TANH: torch.tanh}
BINARY = {ADD: torch.add}


@dataclass(frozen=True)
class Case:
    """``run``: a rule name (that rule alone) or a pattern name (all its rules); ``leaves``: name -> shape."""

    run: str
    fact: str
    leaves: dict
    before: str
    after: str
    fires: bool = True


def _x(shape, **more):
    return {"x": shape, **more}


CASES = [
    # -- pointwise_through_slice: f(x[s]) == f(x)[s] ---------------------------------------------------
    Case("pointwise_through_slice/unary_narrow", "tanh(x[:, 2:5]) == tanh(x)[:, 2:5]", _x((4, 8)),
         f"(Unary {TANH} (Narrow x 1 2 3 8))", f"(Narrow (Unary {TANH} x) 1 2 3 8)"),
    Case("pointwise_through_slice/unary_select", "tanh(x[1]) == tanh(x)[1]", _x((4, 8)),
         f"(Unary {TANH} (Select x 0 1 4))", f"(Select (Unary {TANH} x) 0 1 4)"),
    Case("pointwise_through_slice/binary_narrow", "x[:, :4] + y[:, :4] == (x + y)[:, :4]", _x((4, 8), y=(4, 8)),
         f"(Binary {ADD} (Narrow x 1 0 4 8) (Narrow y 1 0 4 8))", f"(Narrow (Binary {ADD} x y) 1 0 4 8)"),
    Case("pointwise_through_slice/binary_narrow", "a broadcast operand is left alone", _x((4, 8), y=(1, 8)),
         f"(Binary {ADD} (Narrow x 1 0 4 8) (Narrow y 1 0 4 8))", f"(Narrow (Binary {ADD} x y) 1 0 4 8)",
         fires=False),
    Case("pointwise_through_slice/binary_narrow", "slices at different offsets are not one slice",
         _x((4, 8), y=(4, 8)), f"(Binary {ADD} (Narrow x 1 0 4 8) (Narrow y 1 4 4 8))",
         f"(Narrow (Binary {ADD} x y) 1 0 4 8)", fires=False),
    # -- fold_view_chain ---------------------------------------------------------------------------------
    Case("fold_view_chain/reshape_reshape", "x.view(2, 3, 4).view(6, 4) == x.view(6, 4)", _x((2, 12)),
         "(Reshape (Reshape x (vec-of 2 3 4)) (vec-of 6 4))", "(Reshape x (vec-of 6 4))"),
    Case("fold_view_chain/reshape_unsqueeze", "x.unsqueeze(1).view(24) == x.view(24)", _x((2, 12)),
         "(Reshape (Unsqueeze x 1) (vec-of 24))", "(Reshape x (vec-of 24))"),
    Case("fold_view_chain/reshape_same", "x.view(x.shape) == x", _x((2, 12)), "(Reshape x (vec-of 2 12))", "x"),
    Case("fold_view_chain/reshape_same", "a reshape to another shape is not x", _x((2, 12)),
         "(Reshape x (vec-of 12 2))", "x", fires=False),
    # -- move_reshape_out_of_split_stack_pass ------------------------------------------------------------
    Case("move_reshape_out_of_split_stack/rank2_unit1", "x.view(4, 1, 6) == x.unsqueeze(1)", _x((4, 6)),
         "(Reshape x (vec-of 4 1 6))", "(Unsqueeze x 1)"),
    Case("move_reshape_out_of_split_stack/rank2_unit1", "x.view(2, 1, 12) is no unsqueeze of x", _x((4, 6)),
         "(Reshape x (vec-of 2 1 12))", "(Unsqueeze x 1)", fires=False),
    Case("move_reshape_out_of_split_stack/dim1_whole",
         "stack([p.reshape(12) for p in x.split(3, 1)]) == x.view(4, 2, 3).movedim(1, 0).reshape(2, 12)",
         _x((4, 6)),
         "(Cat (Cons 0 (Unsqueeze (Reshape (Narrow x 1 0 3 6) (vec-of 12)) 0)"
         " (Cons 0 (Unsqueeze (Reshape (Narrow x 1 3 3 6) (vec-of 12)) 0) (Nil))))",
         "(Cat (Cons 0 (Reshape (Permute (Reshape x (vec-of 4 2 3)) (vec-of 1 0 2)) (vec-of 2 12)) (Nil)))"),
    Case("move_reshape_out_of_split_stack/dim0_moved",
         "stack([p.reshape(2, 4) for p in x[2:6].split(2)], 1) == x[2:6].view(2, 2, 4).reshape(2, 2, 4).movedim(0, 1)",
         _x((8, 4)),
         "(Cat (Cons 1 (Unsqueeze (Reshape (Narrow x 0 2 2 8) (vec-of 2 4)) 1)"
         " (Cons 1 (Unsqueeze (Reshape (Narrow x 0 4 2 8) (vec-of 2 4)) 1) (Nil))))",
         "(Cat (Cons 1 (Permute (Reshape (Reshape (Narrow x 0 2 4 8) (vec-of 2 2 4)) (vec-of 2 2 4)) (vec-of 1 0 2))"
         " (Nil)))"),
    Case("move_reshape_out_of_split_stack/dim1",
         "stack([p.reshape(12) for p in x[:, :6].split(3, 1)]) == x[:, :6].view(4, 2, 3).movedim(1, 0).reshape(2, 12)",
         _x((4, 9)),
         "(Cat (Cons 0 (Unsqueeze (Reshape (Narrow x 1 0 3 9) (vec-of 12)) 0)"
         " (Cons 0 (Unsqueeze (Reshape (Narrow x 1 3 3 9) (vec-of 12)) 0) (Nil))))",
         "(Cat (Cons 0 (Reshape (Permute (Reshape (Narrow x 1 0 6 9) (vec-of 4 2 3)) (vec-of 1 0 2)) (vec-of 2 12))"
         " (Nil)))"),
    Case("move_reshape_out_of_split_stack/dim0_whole_moved",
         "stack([p.reshape(12) for p in x.split(2)], 1) == x.view(2, 2, 6).reshape(2, 12).movedim(0, 1)", _x((4, 6)),
         "(Cat (Cons 1 (Unsqueeze (Reshape (Narrow x 0 0 2 4) (vec-of 12)) 1)"
         " (Cons 1 (Unsqueeze (Reshape (Narrow x 0 2 2 4) (vec-of 12)) 1) (Nil))))",
         "(Cat (Cons 1 (Permute (Reshape (Reshape x (vec-of 2 2 6)) (vec-of 2 12)) (vec-of 1 0)) (Nil)))"),
    Case("move_reshape_out_of_split_stack/dim1_whole", "pieces of unequal lengths do not move out", _x((4, 5)),
         "(Cat (Cons 0 (Unsqueeze (Reshape (Narrow x 1 0 3 5) (vec-of 12)) 0)"
         " (Cons 0 (Unsqueeze (Reshape (Narrow x 1 3 2 5) (vec-of 8)) 0) (Nil))))",
         "(Cat (Cons 0 (Reshape (Permute (Reshape x (vec-of 4 2 3)) (vec-of 1 0 2)) (vec-of 2 12)) (Nil)))",
         fires=False),
    # -- remove_split_with_size_one_pass -----------------------------------------------------------------
    Case("remove_split_with_size_one/narrow_full", "x.narrow(1, 0, x.size(1)) == x", _x((4, 8)),
         "(Narrow x 1 0 8 8)", "x"),
    Case("remove_split_with_size_one/narrow_full", "a part of x is not x", _x((4, 8)),
         "(Narrow x 1 0 4 8)", "x", fires=False),
    Case("remove_split_with_size_one/select_size_one", "x.unbind(1)[0] == x.reshape(4, 6) for x: [4, 1, 6]",
         _x((4, 1, 6)), "(Select x 1 0 1)", "(Reshape x (vec-of 4 6))"),
    Case("remove_split_with_size_one/squeezed_unit_piece", "x[:, 3:4].view(4) == x[:, 3]", _x((4, 8)),
         "(Reshape (Narrow x 1 3 1 8) (vec-of 4))", "(Select x 1 3 8)"),
    Case("remove_split_with_size_one/squeezed_unit_piece", "a unit piece viewed as [2, 2] is no select",
         _x((4, 8)), "(Reshape (Narrow x 1 3 1 8) (vec-of 2 2))", "(Select x 1 3 8)", fires=False),
    # -- merge_splits_pass -------------------------------------------------------------------------------
    Case("merge_splits/narrow_narrow", "x[:, 4:8][:, 1:4] == x[:, 5:8]", _x((4, 8)),
         "(Narrow (Narrow x 1 4 4 8) 1 1 3 4)", "(Narrow x 1 5 3 8)"),
    Case("merge_splits/select_narrow", "x[:, 4:8][:, 2] == x[:, 6]", _x((4, 8)),
         "(Select (Narrow x 1 4 4 8) 1 2 4)", "(Select x 1 6 8)"),
    Case("merge_splits/narrow_narrow", "slices along two dims do not merge", _x((4, 8)),
         "(Narrow (Narrow x 1 4 4 8) 0 1 2 4)", "(Narrow x 0 1 2 4)", fires=False),
    # -- split_of_cat_pass -------------------------------------------------------------------------------
    Case("split_of_cat/whole_input", "cat([a, b], 1)[:, 3:7] == b", {"a": (2, 3), "b": (2, 4)},
         "(Narrow (Cat (Cons 1 a (Cons 1 b (Nil)))) 1 3 4 7)", "b"),
    Case("split_of_cat/whole_input", "cat([a, b, c], 1)[:, :2] == a", {"a": (2, 2), "b": (2, 4), "c": (2, 1)},
         "(Narrow (Cat (Cons 1 a (Cons 1 b (Cons 1 c (Nil))))) 1 0 2 7)", "a"),
    Case("split_of_cat/whole_input", "a piece across two inputs is neither", {"a": (2, 3), "b": (2, 4)},
         "(Narrow (Cat (Cons 1 a (Cons 1 b (Nil)))) 1 2 4 7)", "b", fires=False),
    Case("split_of_cat/whole_input", "a zero-length piece is not the zero-length input",
         {"a": (2, 3), "z": (2, 0), "b": (2, 4)},
         "(Narrow (Cat (Cons 1 a (Cons 1 z (Cons 1 b (Nil))))) 1 3 0 7)", "z", fires=False),
    # -- unbind_stack_pass, unbind_stack_to_slices_pass --------------------------------------------------
    Case("unbind_stack/unsqueeze_select", "x.select(1, 2).unsqueeze(1) == x[:, 2:3]", _x((2, 4, 3)),
         "(Unsqueeze (Select x 1 2 4) 1)", "(Narrow x 1 2 1 4)"),
    Case("unbind_stack/unsqueeze_select", "unsqueezed along another dim it is no slice", _x((2, 4, 3)),
         "(Unsqueeze (Select x 1 2 4) 2)", "(Narrow x 1 2 1 4)", fires=False),
    Case("unbind_stack_to_slices/other_dim", "x.select(1, i) == x.movedim(1, 2).select(2, i)", _x((2, 3, 4)),
         "(Unsqueeze (Select x 1 1 3) 2)", "(Unsqueeze (Select (Permute x (vec-of 0 2 1)) 2 1 3) 2)"),
    Case("unbind_stack_to_slices/other_dim", "stacked along the unbind dim: no permute", _x((2, 3, 4)),
         "(Unsqueeze (Select x 1 1 3) 1)", "(Unsqueeze (Select (Permute x (vec-of 0 1 2)) 1 1 3) 1)", fires=False),
    # -- split_stack_to_cats_pass ------------------------------------------------------------------------
    Case("split_stack_to_cats/dim1", "x[:, 2:4].unsqueeze(1) == x.view(4, 3, 2)[:, 1:2]", _x((4, 6)),
         "(Unsqueeze (Narrow x 1 2 2 6) 1)", "(Narrow (Reshape x (vec-of 4 3 2)) 1 1 1 3)"),
    Case("split_stack_to_cats/dim1", "a piece off the grid of equal pieces is left alone", _x((4, 6)),
         "(Unsqueeze (Narrow x 1 1 2 6) 1)", "(Narrow (Reshape x (vec-of 4 3 2)) 1 0 1 3)", fires=False),
    Case("split_stack_to_cats/dim1_other", "x[:, 2:4].unsqueeze(0) == x.view(4, 3, 2).movedim(1, 0)[1:2]",
         _x((4, 6)), "(Unsqueeze (Narrow x 1 2 2 6) 0)",
         "(Narrow (Permute (Reshape x (vec-of 4 3 2)) (vec-of 1 0 2)) 0 1 1 3)"),
    # -- unbind_cat_to_view_pass -------------------------------------------------------------------------
    Case("unbind_cat_to_view/select_in_cat", "in a cat along 1, x[:, 1] == x.reshape(2, 12)[:, 4:8]",
         _x((2, 3, 4)), "(Cons 1 (Select x 1 1 3) (Nil))",
         "(Cons 1 (Narrow (Reshape x (vec-of 2 12)) 1 4 4 12) (Nil))"),
    Case("unbind_cat_to_view/other_dim", "in a cat along 0, x[:, 1] == x.movedim(1, 0)[1]", _x((2, 3, 4)),
         "(Cons 0 (Select x 1 1 3) (Nil))", "(Cons 0 (Select (Permute x (vec-of 1 0 2)) 0 1 3) (Nil))"),
    # -- split_cat_pass ----------------------------------------------------------------------------------
    Case("split_cat/full_run", "cat([y, *x.split([3, 5], 1)], 1) == cat([y, x], 1)", _x((2, 8), y=(2, 1)),
         "(Cat (Cons 1 y (Cons 1 (Narrow x 1 0 3 8) (Cons 1 (Narrow x 1 3 5 8) (Nil)))))",
         "(Cat (Cons 1 y (Cons 1 x (Nil))))"),
    Case("split_cat/full_run", "a permuted cat of the pieces is not x", _x((2, 8)),
         "(Cat (Cons 1 (Narrow x 1 3 5 8) (Cons 1 (Narrow x 1 0 3 8) (Nil))))", "(Cat (Cons 1 x (Nil)))",
         fires=False),
    Case("split_cat/full_run", "pieces of two tensors are not one tensor", _x((2, 8), y=(2, 8)),
         "(Cat (Cons 1 (Narrow x 1 0 3 8) (Cons 1 (Narrow y 1 3 5 8) (Nil))))", "(Cat (Cons 1 x (Nil)))",
         fires=False),
    Case("split_cat/other_dim1_whole", "cat(x.split(4, 1), 0) == x.view(2, 2, 4).movedim(1, 0).reshape(4, 4)",
         _x((2, 8)), "(Cat (Cons 0 (Narrow x 1 0 4 8) (Cons 0 (Narrow x 1 4 4 8) (Nil))))",
         "(Reshape (Permute (Reshape x (vec-of 2 2 4)) (vec-of 1 0 2)) (vec-of 4 4))"),
    Case("split_cat/other_dim0_whole", "cat(x.split(4), 1) == x.view(2, 4, 2).movedim(0, 1).reshape(4, 4)",
         _x((8, 2)), "(Cat (Cons 1 (Narrow x 0 0 4 8) (Cons 1 (Narrow x 0 4 4 8) (Nil))))",
         "(Reshape (Permute (Reshape x (vec-of 2 4 2)) (vec-of 1 0 2)) (vec-of 4 4))"),
    Case("split_cat/other_dim1", "cat(x.split(4, 1)[1:3], 0) == x[:, 4:12].view(2, 2, 4).movedim(1, 0).reshape(4, 4)",
         _x((2, 12)), "(Cat (Cons 0 (Narrow x 1 4 4 12) (Cons 0 (Narrow x 1 8 4 12) (Nil))))",
         "(Reshape (Permute (Reshape (Narrow x 1 4 8 12) (vec-of 2 2 4)) (vec-of 1 0 2)) (vec-of 4 4))"),
    # -- merge_getitem_cat_pass, mutate_cat_pass ---------------------------------------------------------
    Case("merge_getitem_cat/prefix_run", "cat([x[:, :2], x[:, 2:4], y], 1) == cat([x[:, :4], y], 1)",
         _x((2, 8), y=(2, 3)), "(Cat (Cons 1 (Narrow x 1 0 2 8) (Cons 1 (Narrow x 1 2 2 8) (Cons 1 y (Nil)))))",
         "(Cat (Cons 1 (Narrow x 1 0 4 8) (Cons 1 y (Nil))))"),
    Case("merge_getitem_cat/inner_run", "cat([x[:, 2:4], x[:, 4:6]], 1) == cat([x[:, 2:6]], 1)", _x((2, 8)),
         "(Cat (Cons 1 (Narrow x 1 2 2 8) (Cons 1 (Narrow x 1 4 2 8) (Nil))))",
         "(Cat (Cons 1 (Narrow x 1 2 4 8) (Nil)))"),
    Case("merge_getitem_cat/inner_run", "pieces with a gap between them do not merge", _x((2, 8)),
         "(Cat (Cons 1 (Narrow x 1 2 2 8) (Cons 1 (Narrow x 1 5 2 8) (Nil))))",
         "(Cat (Cons 1 (Narrow x 1 2 5 8) (Nil)))", fires=False),
    Case("mutate_cat/single_input", "cat([a], 1) == a", {"a": (2, 3)}, "(Cat (Cons 1 a (Nil)))", "a"),
    Case("split_cat_to_slices_pass", "cat([y, *x.split(2, 1)], 1) == cat([y, x], 1)", _x((2, 4), y=(2, 1)),
         "(Cat (Cons 1 y (Cons 1 (Narrow x 1 0 2 4) (Cons 1 (Narrow x 1 2 2 4) (Nil)))))",
         "(Cat (Cons 1 y (Cons 1 x (Nil))))"),
    Case("split_cat_to_slices_pass", "cat([x[:, 2:4], x[:, 4:6]], 1) == x[:, 2:6]", _x((2, 8)),
         "(Cat (Cons 1 (Narrow x 1 2 2 8) (Cons 1 (Narrow x 1 4 2 8) (Nil))))", "(Narrow x 1 2 4 8)"),
    # -- post-grad (Aten-IR) passes ----------------------------------------------------------------------
    Case("split_cat_aten_pass", "cat(split(x, 2, 1), 1).view(2, 2, 2) == x.view(2, 2, 2)", _x((2, 4)),
         "(Reshape (Cat (Cons 1 (Narrow x 1 0 2 4) (Cons 1 (Narrow x 1 2 2 4) (Nil)))) (vec-of 2 2 2))",
         "(Reshape x (vec-of 2 2 2))"),
    Case("select_cat_aten_pass", "cat([x.select(1, i) for i in range(3)], 1) == x.reshape(2, 12)", _x((2, 3, 4)),
         "(Cat (Cons 1 (Select x 1 0 3) (Cons 1 (Select x 1 1 3) (Cons 1 (Select x 1 2 3) (Nil)))))",
         "(Reshape x (vec-of 2 12))"),
    Case("select_cat_aten_pass", "selects out of order are no view", _x((2, 3, 4)),
         "(Cat (Cons 1 (Select x 1 1 3) (Cons 1 (Select x 1 0 3) (Cons 1 (Select x 1 2 3) (Nil)))))",
         "(Reshape x (vec-of 2 12))", fires=False),
    Case("unbind_stack_aten_pass", "cat([x.select(1, i).unsqueeze(1) for i in range(3)], 1) == x", _x((2, 3, 4)),
         "(Cat (Cons 1 (Unsqueeze (Select x 1 0 3) 1) (Cons 1 (Unsqueeze (Select x 1 1 3) 1)"
         " (Cons 1 (Unsqueeze (Select x 1 2 3) 1) (Nil)))))", "x"),
    Case("move_view_after_cat_aten/reshape_narrow_in_cat",
         "in a cat along 1, x[:, 4:8].view(2, 1, 4) == x.view(2, 2, 4)[:, 1:2]", _x((2, 8)),
         "(Cons 1 (Reshape (Narrow x 1 4 4 8) (vec-of 2 1 4)) (Nil))",
         "(Cons 1 (Narrow (Reshape x (vec-of 2 2 4)) 1 1 1 2) (Nil))"),
    Case("move_view_after_cat_aten/reshape_narrow_in_cat", "a view that mixes rows is left alone", _x((2, 8)),
         "(Cons 1 (Reshape (Narrow x 1 4 4 8) (vec-of 4 1 2)) (Nil))",
         "(Cons 1 (Narrow (Reshape x (vec-of 4 2 2)) 1 1 1 2) (Nil))", fires=False),
    Case("move_view_after_cat_aten_pass", "cat([p.view(2, 1, 4) for p in x.split(4, 1)], 1) == x.view(2, 2, 4)",
         _x((2, 8)),
         "(Cat (Cons 1 (Reshape (Narrow x 1 0 4 8) (vec-of 2 1 4)) (Cons 1 (Reshape (Narrow x 1 4 4 8) (vec-of 2 1 4))"
         " (Nil))))", "(Reshape x (vec-of 2 2 4))"),
]


# -- running a case in the e-graph ---------------------------------------------------------------------

def _rules(run: str):
    if run in DEFAULT_REGISTRY:
        return DEFAULT_REGISTRY[run].rules
    owner = DEFAULT_REGISTRY.owner_of(run)
    assert owner is not None, f"no pattern or rule named {run!r}"
    return tuple(r for r in DEFAULT_REGISTRY[owner].rules if r.name == run)


def _case_pattern(index: int, case: Case) -> Pattern:
    return Pattern(name=f"case{index}", levels=("pre_grad",), kind="vertical", doc="",
                   rules=renamed(f"case{index}", _rules(case.run)))


@pytest.fixture(scope="module")
def egraph():
    """One e-graph compiled with every case's rules, a ruleset per case (compiling is most of the time)."""
    with EGraph([_case_pattern(i, c) for i, c in enumerate(CASES)]) as eg:
        yield eg


def _egglog(text: str, case: Case) -> str:
    """egglog spelling: the leaves are globals ``$name``."""
    return re.sub(r"(?<![\w$])(" + "|".join(case.leaves) + r")(?![\w])", r"$\1", text)


def _derives(eg: EGraph, case: Case) -> bool:
    """Whether ``before``'s e-class holds ``after`` once the rules of ``case.run`` have run (alone)."""
    pattern = _case_pattern(CASES.index(case), case)
    leaves = "".join(f"(let ${name} (Leaf {i}))(set (shape ${name}) (vec-of {' '.join(map(str, shape))}))"
                     for i, (name, shape) in enumerate(case.leaves.items()))
    eg.push()
    try:
        eg.egraph.run_program(*eg.egraph.parse_program(f"{leaves}(let $before {_egglog(case.before, case)})"))
        for _ in range(8):
            if not eg.run(pattern_pass(pattern), SearchResult()):
                break
        try:
            eg.egraph.run_program(*eg.egraph.parse_program(f"(check (= $before {_egglog(case.after, case)}))"))
        except Exception:  # egglog: the check failed
            return False
        return True
    finally:
        eg.pop()


# -- evaluating a term with torch ----------------------------------------------------------------------

def _parse(text: str):
    tokens = re.findall(r"\(|\)|[^\s()]+", text)

    def read(i):
        if tokens[i] != "(":
            return (int(tokens[i]) if re.fullmatch(r"-?\d+", tokens[i]) else tokens[i]), i + 1
        out, i = [], i + 1
        while tokens[i] != ")":
            item, i = read(i)
            out.append(item)
        return out, i + 1

    term, end = read(0)
    assert end == len(tokens), text
    return term


def _eval(term, env):
    """A term as a tensor (a list term: its cells concatenated along the list's dim)."""
    if isinstance(term, str):
        return env[term]
    head, *args = term
    if head == "vec-of":
        return list(args)
    if head in ("Cons", "Nil"):
        cells, dims = [], set()
        while term[0] == "Cons":
            dims.add(term[1])
            cells.append(_eval(term[2], env))
            term = term[3]
        (d,) = dims
        return torch.cat(cells, d)
    a = [_eval(x, env) if isinstance(x, (list, str)) else x for x in args]
    if head == "Narrow":
        assert a[0].shape[a[1]] == a[4]
        return a[0].narrow(a[1], a[2], a[3])
    if head == "Select":
        assert a[0].shape[a[1]] == a[3]
        return a[0].select(a[1], a[2])
    ops = {"Cat": lambda t: t, "Unsqueeze": torch.unsqueeze, "Reshape": torch.reshape, "Permute": torch.permute,
           "Unary": lambda k, t: UNARY[k](t), "Binary": lambda k, t, u: BINARY[k](t, u)}
    return ops[head](*a)


def _ids(case: Case) -> str:
    return f"{case.run}: {case.fact}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_rule_case(egraph, case: Case):
    if case.fires:
        g = torch.Generator().manual_seed(0)
        env = {name: torch.randn(*shape, generator=g, dtype=torch.float64) for name, shape in case.leaves.items()}
        torch.testing.assert_close(_eval(_parse(case.after), env), _eval(_parse(case.before), env), rtol=0, atol=0)
    assert _derives(egraph, case) == case.fires, (f"{case.run}: {case.before} => {case.after} "
                                          f"{'not derived' if case.fires else 'derived, but a guard forbids it'}")


def _own_rule_families() -> set[str]:
    """Rule names (digits as N) of the rules a pattern declares itself, not those it reuses (renamed)."""
    out = set()
    for p in DEFAULT_REGISTRY:
        for r in p.rules:
            if r.name.count("/") == 1 and r.name.split("/")[0] == p.name.removesuffix("_pass"):
                out.add(re.sub(r"\d+", "N", r.name))
    return out


def test_every_rule_has_a_case():
    """A registered pattern with rules has a case, and so has each family of rules it declares itself."""
    covered = {c.run for c in CASES if c.fires}
    owners = {c.run if c.run in DEFAULT_REGISTRY else DEFAULT_REGISTRY.owner_of(c.run) for c in CASES if c.fires}
    missing = [p.name for p in DEFAULT_REGISTRY if p.rules and p.name not in owners]
    assert not missing, f"patterns without a term case: {missing}"
    families = {re.sub(r"\d+", "N", name) for name in covered}
    assert not _own_rule_families() - families, f"rule families without a case: {_own_rule_families() - families}"
