"""einsum_to_pointwise_pass, a rewrite of one op done by the horizontal machinery (groups of one):
``einsum("P i, Q i o -> P o", x, w)`` -> ``(x.unsqueeze(-1) * w).sum(-2)``, in eager's layout."""

from __future__ import annotations

import torch

from optimus_eq.horizontal.recipes import UPCAST, method, recipe, slots, to_type
from optimus_eq.recipe import einsum_operands
from optimus_eq.terms import MAX_RANK
from optimus_eq.registry import PRE_GRAD, horizontal


def einsum_parts(m):
    """``(x, w, P, i, Q, o)`` of an einsum member ``einsum("P i, Q i o -> P o", x, w)`` with Q a suffix of P
    (so ``x.unsqueeze(-1) * w`` broadcasts P against Q from the right), or raise ValueError.

    Every letter appears once per operand (no diagonal), no ellipsis, i and o are not in P, the
    static sizes of the letters shared by x, w and the output agree, and the dtype is floating or int64
    (``torch.sum`` turns narrower integers into int64).
    """
    r = m.recipe
    if m.op != "Apply" or r.name != "einsum" or r.op != "call_function" or r.kwargs or len(m.inputs) != 2:
        raise ValueError("not a two-operand einsum")
    eq, operands = einsum_operands(r.args)
    if not isinstance(eq, str) or operands != slots(2):
        raise ValueError("spelling")
    eq = eq.replace(" ", "")
    if "." in eq or "->" not in eq:
        raise ValueError("implicit output or ellipsis")
    lhs, out = eq.split("->")
    specs = lhs.split(",")
    if len(specs) != 2 or not all(s.isalpha() for s in specs + [out]):
        raise ValueError("not two operands")
    xs, ws = specs
    if len(xs) < 1 or len(ws) < 2 or any(len(set(s)) != len(s) for s in (xs, ws, out)):
        raise ValueError("repeated letters")
    P, i = xs[:-1], xs[-1]
    Q, wi, o = ws[:-2], ws[-2], ws[-1]
    if wi != i or out != P + o or i in P or o in P or i == o or not P.endswith(Q):
        raise ValueError("not a broadcast multiply and a sum over the last input letter")
    sx, sw = m.in_shapes
    if sx is None or sw is None or len(sx) != len(xs) or len(sw) != len(ws):
        raise ValueError("shapes")
    size = dict(zip(xs, sx))
    if any(size[c] != s for c, s in zip(ws[:-1], sw[:-1])) or m.shape != tuple(sx[:-1]) + (sw[-1],):
        raise ValueError("sizes disagree (broadcast einsum)")
    if len(xs) + 1 > MAX_RANK or len(set(m.types[0])) != 1:
        raise ValueError("rank or mixed dtypes")
    if not sum_keeps_dtype(m.types[0][0][0]):
        raise ValueError("an integer dtype that torch.sum promotes")
    return 0, 1, P, i, Q, o


def sum_keeps_dtype(name: str) -> bool:
    """Whether ``torch.sum`` / ``aten.sum`` of a tensor of dtype ``name`` (``"torch.int32"``) keeps that
    dtype: floating dtypes and int64 do; bool and narrower integers are summed into int64 (the einsum and
    matmul that a multiply + sum replaces keep the operands' dtype)."""
    dtype = getattr(torch, name.removeprefix("torch."), None)
    return isinstance(dtype, torch.dtype) and (dtype.is_floating_point or dtype == torch.int64)


def einsum_key(m):
    """einsum_to_pointwise_pass: every matching einsum is its own group (a rewrite, not a fusion).

    Eager's einsum often returns a permuted view of a bmm (non-contiguous), and pointwise readers keep
    that layout up to the graph's outputs: such einsums are taken (``any_strides``) and the builder
    gives the pointwise result eager's strides (:func:`build_einsum`).
    """
    try:
        einsum_parts(m)
    except ValueError:
        return None
    return ("einsum_to_pointwise_pass", m.cls)


def _eager_layout(w, m):
    """The permutation ``perm`` with ``value == value.permute(perm).contiguous().permute(inverse)`` in
    eager's layout (dims by decreasing stride), None when eager's value is contiguous; raise ValueError
    when it is not dense (overlapping or with gaps) or unknown."""
    val = w.eager_value(m.cls)
    if val is None:
        raise ValueError("no eager strides")
    shape, stride = tuple(val.shape), tuple(val.stride())
    if m.eager_contiguous:
        return None
    perm = sorted(range(len(shape)), key=lambda d: (-stride[d], d))
    expect = 1
    for d in reversed(perm):
        if shape[d] != 1 and stride[d] != expect:
            raise ValueError("not a dense layout")
        expect *= shape[d]
    return perm


def build_einsum(w, members) -> None:
    """``einsum("P i, Q i o -> P o", x, w) == (x.unsqueeze(-1) * w).sum(-2)``; where eager's einsum
    returned a permuted layout (it computes through bmm), the result is copied into that layout
    (``.permute(perm).contiguous()`` viewed back), so eager's strides reach the graph's outputs.

    bf16/fp16 operands are computed in float32 and rounded once, as eager's einsum (a bmm) accumulates:
    rounding the products first, as upstream's ``replace_einsum_to_pointwise`` does, loses digits under
    cancellation (6.6% relative error on one element of a 5x5 bf16 ``m @ m.t()``;
    tests/test_horizontal.py::test_einsum_to_pointwise_bf16_matches_eager_under_cancellation)."""
    for m in members:
        try:
            perm = _eager_layout(w, m)
        except ValueError:
            continue
        x, wt, P, i, Q, o = einsum_parts(m)
        sx, sw = tuple(m.in_shapes[x]), tuple(m.in_shapes[wt])
        t, out = m.types[0][0], m.types[1]
        c = ("torch.float32", t[1]) if t[0] in UPCAST else t  # computing type

        X = w.unsqueeze(to_type(w, w.handle(m.inputs[x]), sx, t, c), len(sx), sx + (1,))
        W = to_type(w, w.handle(m.inputs[wt]), sw, t, c)
        prod_shape = sx + (sw[-1],)
        mul = w.key("einsum_to_pointwise:mul", recipe("mul", torch.mul, slots(2)), ((c, c), c))
        prod = w.apply(mul, [X, W], prod_shape)
        red = w.key("einsum_to_pointwise:sum", recipe("sum", torch.sum, (slots(1)[0], -2)), ((c,), c))
        y = to_type(w, w.apply(red, [prod], m.shape), tuple(m.shape), c, out)
        if perm is not None:
            pshape = tuple(m.shape[d] for d in perm)
            inv = [perm.index(d) for d in range(len(perm))]
            copy = w.key("einsum_to_pointwise:contiguous", method("contiguous"), ((m.types[1],), m.types[1]))
            y = w.permute(w.apply(copy, [w.permute(y, perm, pshape)], pshape), inv, m.shape)
        w.union(m, y)


einsum_to_pointwise_pass = horizontal(
    "einsum_to_pointwise_pass", PRE_GRAD, einsum_key, build_einsum,
    options={"min_fuse_set_size": 1, "max_fuse_set_size": 1}, builtin=PRE_GRAD, any_strides=True,
    doc="""An einsum that is a broadcast multiply and a sum over x's last letter becomes pointwise ops
    (upstream split_cat.py ``replace_einsum_to_pointwise``, tested by test_kernel_optimization.py).

    torch.einsum("bni,nio->bno", x, w)   (also "bni,bnio->bno": "P i, Q i o -> P o", Q a suffix of P)
        =>  (x.unsqueeze(-1) * w).sum(-2)

    A rewrite of one op, run by the horizontal machinery with groups of one (so greedy replaces it and
    eqsat adds it as an alternative). Upstream also asks for an ``add`` user (so that Inductor fuses
    mul, sum and add into one kernel); here every matching einsum within the group search's reach is
    rewritten in greedy, and in eqsat the cost model decides (it does not credit Inductor's fusion of
    the mul into the sum yet, so it keeps the einsum).
    """)

PATTERNS = (einsum_to_pointwise_pass,)
