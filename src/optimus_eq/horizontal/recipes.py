"""Recipes of the fused ops the horizontal builders emit: how a new pure op is called (target, constant
arguments, :class:`Slot` markers for its tensor inputs), reading a member's call by parameter name, and the
dtype casts around ops computed in float32.

The recipe types are the core's (:mod:`optimus_eq.recipe`: ``Recipe``, ``Slot``, ``SymSize``), shared with the
bridge's translator and lowering.
"""

from __future__ import annotations

import math

import torch

from optimus_eq.recipe import Recipe, Slot, SymSize
from optimus_eq.symbolic import is_static


#: tensor methods that are their function with ``self`` as the first parameter and the same keywords
#: (``x.matmul(other=p)`` is ``torch.matmul(x, other=p)``, ``x.mm(p)`` is ``torch.mm(x, p)``: the Tensor
#: method signatures in ``torch/_C/_VariableFunctions.pyi`` and ``torch/_C/__init__.pyi``): :func:`bind` reads
#: their calls as the function's
SAME_AS_FUNCTION = frozenset({"matmul", "mm"})


def bind(recipe, params: tuple[str, ...]) -> dict | None:
    """The recipe's arguments by parameter name (``Slot`` markers for tensor inputs); None if they do not
    fit ``params`` (an unknown keyword, a method call other than those of :data:`SAME_AS_FUNCTION`, whose
    ``self`` binds the first parameter)."""
    method_ok = recipe.op == "call_method" and recipe.target in SAME_AS_FUNCTION
    if (recipe.op != "call_function" and not method_ok) or len(recipe.args) > len(params):
        return None
    out = dict(zip(params, recipe.args))
    for k, v in recipe.kwargs.items():
        if k not in params or k in out:
            return None
        out[k] = v
    return out


def bound_call(m, name: str, params: tuple[str, ...]) -> dict:
    """The arguments of member ``m``'s ``Apply`` call of the op ``name``, by parameter name; ValueError when
    ``m`` is another op or calls it with arguments that do not fit ``params``."""
    if m.recipe.name != name or m.op != "Apply":
        raise ValueError(f"not a {name}")
    bound = bind(m.recipe, params)
    if bound is None:
        raise ValueError("unknown spelling")
    return bound


def check_one_input_type(m) -> None:
    """ValueError unless every tensor input of member ``m`` has one dtype and device (a batched op computes
    in one)."""
    if len(set(m.types[0])) != 1:
        raise ValueError("mixed input dtypes")


def slot(bound: dict, name: str):
    """The input index bound to ``name`` (a Slot), None when the argument is None/absent, or raises."""
    v = bound.get(name)
    if v is None:
        return None
    if isinstance(v, Slot):
        return v.index
    raise ValueError(f"{name} is a constant")


def recipe(name: str, target, args: tuple, kwargs: dict | None = None):
    return Recipe(name, "call_function", target, args, kwargs or {})


def method(name: str, *consts):
    return Recipe(name, "call_method", name, (Slot(0),) + consts, {})


def slots(n: int) -> tuple:
    return tuple(Slot(i) for i in range(n))


#: dtypes whose eager layer norm computes in float32 and rounds once (CPU and CUDA kernels): the fused
#: form does the same, so results are bit-identical to eager (bf16 and fp16, 600 draws each).
UPCAST = {"torch.bfloat16": torch.bfloat16, "torch.float16": torch.float16}


def to_type(w, h, shape, src, dst):
    """``h.to(dtype)`` (Torch-IR) from the (dtype, device) type ``src`` to ``dst``; ``h`` when they are equal."""
    if src == dst:
        return h
    dtype = torch.float32 if dst[0] == "torch.float32" else UPCAST[dst[0]]
    return w.apply(w.key(f"to:{dst[0]}", method("to", dtype), ((src,), dst)), [h], shape)


def prod_sizes(w, sizes) -> int:
    """The product of e-graph sizes (a symbolic token when one is: :class:`optimus_eq.symbolic.SizeTable`)."""
    table = getattr(w.tr, "sizes", None)
    if table is None:
        return math.prod(sizes)
    return table.prod(sizes)


def expand_symbolic(w, h: int, shape, t, aten_ir: bool = False) -> int:
    """``h`` (a broadcasting operand of static shape, dtype and device ``t``) expanded to ``shape`` when
    ``shape`` has a symbolic size, else ``h``. The meta kernels of baddbmm and addcmul cannot broadcast a
    static operand over a symbolic batch (torch 2.13: "SymIntArrayRef expected to contain only concrete
    integers"), so the operand is expanded first: a view, which Inductor folds into the kernel."""
    if is_static(shape):
        return h
    shape = tuple(shape)
    if aten_ir:
        r = recipe("expand", torch.ops.aten.expand.default, (slots(1)[0], list(sym_sizes(shape))))
    else:
        r = method("expand", *sym_sizes(shape))
    return w.apply(w.key(f"expand{shape}{aten_ir}", r, ((t,), t)), [h], shape)


def sym_sizes(shape) -> tuple:
    """Recipe arguments for an e-graph shape: ints, and ``SymSize`` markers for symbolic tokens."""
    return tuple(SymSize(s) if s < 0 else s for s in shape)


def union_row_blocks(w, Y: int, members, shapes, counts, total, dim) -> None:
    """Each member equals its block of rows of the fused lookup ``Y`` [total, dim], in member order: rows
    ``start_i : start_i + counts[i]``, viewed as ``shapes[i]`` (the member's output shape, ``[..., dim]``) where
    that is not ``(counts[i], dim)``. Used by the batched embedding lookups (pre- and post-grad)."""
    start = 0
    for m, shape, c in zip(members, shapes, counts):
        y = w.narrow(Y, 0, start, c, total, (c, dim))
        if shape != (c, dim):
            y = w.reshape(y, shape)
        w.union(m, y)
        start += c
