"""decompose_gemv_pass, a rewrite of one op (groups of one, pre-grad): a linear with one output feature (a
matrix-vector product) on a GPU -> a multiply and a sum over the last dim, plus the bias.

Ours, not upstream's (upstream's mm decomposition is post-grad and needs K, N < 32; Inductor decomposes an
``mm`` with N = 1 into a multiply and a sum only under ``coordinate_descent_tuning``, torch/_inductor/
decomposition.py ``mm``, and never an ``addmm`` with a bias). Why: ``F.linear(x, w[1, K], b)`` reaches
Inductor as ``addmm``, an extern call that ATen runs as two kernels on CUDA (the bias copied into the
output, then the GEMV; cuBLASLt's bias epilogue is not used for a single output column), and Inductor can
fuse nothing into it. As a multiply and a sum, Inductor computes it as a reduction fused with the kernel
that produced ``x`` (the launch-bound model's head after its last residual add): no kernel of
its own. A GEMV is memory-bound either way (it reads ``x`` once).
"""

from __future__ import annotations

import torch

from optimus_eq.horizontal.einsum import sum_keeps_dtype
from optimus_eq.horizontal.linear import _linear_parts
from optimus_eq.horizontal.recipes import UPCAST, recipe, slots, to_type
from optimus_eq.symbolic import is_static
from optimus_eq.registry import PRE_GRAD, horizontal

#: devices whose linears with one output feature are rewritten (an extern addmm costs two kernels there)
GEMV_DEVICES = ("cuda", "xpu")


def gemv_key(m, devices: tuple = GEMV_DEVICES):
    """decompose_gemv_pass: every ``F.linear`` with a ``[1, K]`` weight on one of ``devices`` is its own group
    (floating dtypes only; static K)."""
    try:
        x, wt, _ = _linear_parts(m)
    except ValueError:
        return None
    ws = m.in_shapes[wt]
    if m.shape is None or ws[0] != 1 or not is_static(ws) or not sum_keeps_dtype(m.types[0][0][0]):
        return None
    if m.types[0][0][0] not in ("torch.float32", "torch.float64") and m.types[0][0][0] not in UPCAST:
        return None
    if m.types[0][0] != m.types[1] or m.types[1][1].split(":")[0] not in devices:
        return None  # autocast's mixed types stay a linear
    return ("decompose_gemv_pass", m.cls)


def build_gemv(w, members) -> None:
    """``F.linear(x, w, b) == (x * w[0]).sum(-1, keepdim=True) + b`` for ``w: [1, K]`` (``x: [..., K]``,
    result ``[..., 1]``): ``torch.mul`` with the weight broadcast over x's leading dims, ``torch.sum`` over
    the last dim with keepdim, ``torch.add`` of the bias. bf16/fp16 are computed in float32 and rounded
    once, as eager's GEMV accumulates (rounding the products would lose digits under cancellation:
    :func:`optimus_eq.horizontal.einsum.build_einsum`)."""
    for m in members:
        x, wt, b = _linear_parts(m)
        xs, ws, out = tuple(m.in_shapes[x]), tuple(m.in_shapes[wt]), tuple(m.shape)
        t = m.types[0][0]
        c = ("torch.float32", t[1]) if t[0] in UPCAST else t  # computing type
        X = to_type(w, w.handle(m.inputs[x]), xs, t, c)
        W = to_type(w, w.handle(m.inputs[wt]), ws, t, c)
        mul = w.key("decompose_gemv:mul", recipe("mul", torch.mul, slots(2)), ((c, c), c))
        prod = w.apply(mul, [X, W], xs)  # [..., K] * [1, K]: the weight row broadcast over x's rows
        red = w.key("decompose_gemv:sum", recipe("sum", torch.sum, (slots(1)[0], -1), {"keepdim": True}),
                    ((c,), c))
        y = w.apply(red, [prod], out)
        if b is not None:
            add = w.key("decompose_gemv:add", recipe("add", torch.add, slots(2)), ((c, t), c))
            y = w.apply(add, [y, w.handle(m.inputs[b])], out)
        w.union(m, to_type(w, y, out, c, t))


decompose_gemv_pass = horizontal(
    "decompose_gemv_pass", PRE_GRAD, gemv_key, build_gemv,
    options={"min_fuse_set_size": 1, "max_fuse_set_size": 1},
    doc="""On CUDA/XPU, a linear with one output feature (a matrix-vector product) becomes a multiply and a
    sum, which Inductor fuses into the kernel that produced its input (ours, not upstream's: see
    ``horizontal/gemv.py``; an extern addmm with one output column is two kernels on CUDA).

    F.linear(x, w, b)        (x: [..., K], w: [1, K], b: [1]; float32/float64, bf16/fp16 in float32)
        =>  torch.sum(x * w, -1, keepdim=True) + b

    A rewrite of one op, run by the horizontal machinery with groups of one (greedy replaces it; in eqsat
    the cost model decides, and it does not credit Inductor's fusion of the multiply and sum into the
    producer, so it keeps the linear).
    """)

PATTERNS = (decompose_gemv_pass,)
