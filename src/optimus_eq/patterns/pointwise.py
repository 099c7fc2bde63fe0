"""Pointwise ops commute with slicing: ``f(x[s]) == f(x)[s]``.

With these, split -> the same pointwise op on every piece -> cat becomes one pointwise op on the whole
tensor (the slices of ``f(x)`` are adjacent and fold). Whether computing ``f`` on all of ``x`` pays off
when only some pieces are used is left to the cost model (eqsat); greedy always pushes.
"""

from __future__ import annotations

from optimus_eq.registry import BOTH_LEVELS, Rule, vertical

pointwise_through_slice = vertical("pointwise_through_slice", BOTH_LEVELS, rules=(
    Rule("pointwise_through_slice/unary_narrow", "(Unary f (Narrow x d s l n))", "(Narrow (Unary f x) d s l n)",
         ("(= sh (shape x))",)),
    Rule("pointwise_through_slice/unary_select", "(Unary f (Select x d i n))", "(Select (Unary f x) d i n)",
         ("(= sh (shape x))",)),
    Rule("pointwise_through_slice/binary_narrow", "(Binary f (Narrow x d s l n) (Narrow y d s l n))",
         "(Narrow (Binary f x y) d s l n)",
         ("(= sh (shape x))", "(= sh (shape y))")),
), doc="""Slices move out of pointwise ops (same-shape operands only, so broadcasting never changes).

    a, b = torch.split(x, 4, 1); torch.cat([torch.tanh(a), torch.tanh(b)], 1)  =>  torch.tanh(x)
    """)

PATTERNS = (pointwise_through_slice,)
