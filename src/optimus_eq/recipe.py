"""How a pure op term is called: the interface types of the translated program that the core reads.

The bridge's translator (:mod:`optimus_bridge.translate`) gives each pure ``Unary``/``Binary``/``Apply`` op
key a :class:`Recipe`; the horizontal builders (:mod:`optimus_eq.horizontal.recipes`) make new ones for the
fused ops they emit; lowering (:mod:`optimus_bridge.lower`) turns a recipe back into an FX call. Plain data:
no torch, no FX.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Recipe:
    """How to lower a pure ``Unary``/``Binary``/``Apply`` term: the FX call with tensor slots.

    ``args``/``kwargs`` hold :class:`Slot` markers where the term's tensor children go, in order.
    ``name`` is the vocabulary name (``"tanh"``, ``"linear"``), ``op`` the FX opcode.
    """

    name: str
    op: str
    target: Any
    args: tuple
    kwargs: dict


@dataclass(frozen=True)
class Slot:
    index: int


@dataclass(frozen=True)
class SymSize:
    """A recipe argument that is a symbolic size: lowering emits graph code for the token's expression
    (:mod:`optimus_eq.symbolic`, ``Lowerer.size_value``)."""

    token: int


def einsum_operands(args: tuple) -> tuple:
    """``(equation, operands)`` of the positional arguments of ``torch.einsum``, spelled
    ``(equation, a, b, ...)`` or ``(equation, [a, b, ...])`` (an FX node's or a Recipe's ``args``)."""
    if len(args) == 2 and isinstance(args[1], (list, tuple)):
        return args[0], tuple(args[1])
    return (args[0] if args else None), tuple(args[1:])
