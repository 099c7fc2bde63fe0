"""Symbolic sizes in the algebra: one integer token per symbolic size expression.

Dynamo and AOTAutograd give graphs whose batch dim is symbolic (a ``SymInt`` in the FakeTensor meta:
``s77``, ``8*s77``) while split sizes and feature dims stay static. The e-graph's sizes are ``i64``, so a
symbolic size is carried as a *token*: a negative integer, one per distinct expression (equal expressions
get equal tokens, so shape equality in the rules is symbolic equality). Rules compare tokens for equality
and copy them into new shape vectors; every rule that does arithmetic on a size guards it static (``>= 0``):
split sizes along the split dim, the cat dim, the products of ``prefix``. Lowering turns a token back into
graph code that reads the size at run time (:mod:`optimus_bridge.lower`), so the graph stays dynamic.

A token also encodes the size's *hint* (the example value, as Inductor's ``size_hint``) so that the cost
model prices a symbolic shape like the static shape of the example inputs, without a side table:
``token = -(hint * SPAN + index) - 1``.
"""

from __future__ import annotations

import math

#: Distinct symbolic expressions one table can hold (the low bits of a token).
SPAN = 1 << 20


def is_symbolic(size: int) -> bool:
    """Whether ``size`` (an e-graph size) is a symbolic token."""
    return size < 0


def hint(size: int) -> int:
    """The example value of an e-graph size: itself when static, the encoded hint of a token."""
    return size if size >= 0 else (-size - 1) // SPAN


def numel(shape) -> int | None:
    """Element count of an e-graph shape (tokens at their hints), None for an unknown shape."""
    return None if shape is None else math.prod(hint(s) for s in shape)


def is_static(shape) -> bool:
    """Whether every size of ``shape`` is a plain int (no token)."""
    return all(s >= 0 for s in shape)


class SizeTable:
    """Tokens of one optimization: token <-> sympy expression (the ``SymInt``'s ``node.expr``).

    Attributes:
        exprs: index -> expression; ``by_expr``: expression -> token.
    """

    def __init__(self) -> None:
        self.exprs: list = []
        self.by_expr: dict = {}

    def __bool__(self) -> bool:
        return bool(self.exprs)

    def token(self, expr, hint_value: int) -> int:
        """The token of ``expr`` (a sympy expression whose example value is ``hint_value`` >= 0)."""
        tok = self.by_expr.get(expr)
        if tok is None:
            if len(self.exprs) >= SPAN:
                raise ValueError("too many symbolic sizes")
            tok = -(int(hint_value) * SPAN + len(self.exprs)) - 1
            self.exprs.append(expr)
            self.by_expr[expr] = tok
        return tok

    def expr(self, token: int):
        """The sympy expression of ``token`` (an int for a static size)."""
        if token >= 0:
            return token
        return self.exprs[(-token - 1) % SPAN]

    def prod(self, sizes) -> int:
        """The product of e-graph sizes: an int when all are static, else the token of the product's
        expression (its hint the product of the hints)."""
        sizes = list(sizes)
        if is_static(sizes):
            return math.prod(sizes)
        import sympy

        expr = sympy.Integer(1)
        for s in sizes:
            expr = expr * (sympy.Integer(s) if s >= 0 else self.expr(s))
        expr = sympy.expand(expr)
        if expr.is_Integer:
            return int(expr)
        return self.token(expr, math.prod(hint(s) for s in sizes))
