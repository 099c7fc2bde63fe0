"""decompose_mm_pass, a rewrite of one op (Aten-IR, groups of one): memory-bound aten.mm / addmm / bmm ->
aten.mul + aten.sum.dim_IntList (+ aten.add), under upstream's size guards."""

from __future__ import annotations

import torch

from optimus_eq.horizontal.einsum import sum_keeps_dtype
from optimus_eq.horizontal.linear import mm_operands
from optimus_eq.horizontal.recipes import UPCAST, recipe, slots
from optimus_eq.symbolic import is_static
from optimus_eq.terms import MAX_RANK
from optimus_eq.registry import POST_GRAD, horizontal


#: upstream torch/_inductor/fx_passes/decompose_mem_bound_mm.py (torch 2.13): MIN_FIRST_DIMENSION_DECOMPOSITION,
#: MAX_OTHER_DIMENSION_DECOMPOSITION (CUDA/XPU), CPU_MAX_FIRST_DIMENSION_DECOMPOSITION,
#: CPU_MAX_OTHER_DIMENSION_DECOMPOSITION (CPU); the same option names override them.
DECOMPOSE_MM_OPTIONS = {"min_first_dimension_decomposition": 10240, "max_other_dimension_decomposition": 32,
                        "cpu_max_first_dimension_decomposition": 1, "cpu_max_other_dimension_decomposition": 2048}


def should_decompose(m, options: dict) -> bool:
    """Upstream's size guards (``should_decompose_mm`` / ``should_decompose_bmm``): on CUDA/XPU, mm
    [M, K] x [K, N] when M >= min_first (10240) and K, N < max_other (32); bmm [b, M, K] x [b, K, N] when
    b >= min_first and two of M, K, N < max_other. On CPU, mm when M <= cpu_max_first (1) and K, N <=
    cpu_max_other (2048); bmm when b <= cpu_max_first. Other devices: never."""
    kind, _, a, b = mm_operands(m)
    sa, sb = m.in_shapes[a], m.in_shapes[b]
    rank = 2 if kind == "mm" else 3
    if sa is None or sb is None or len(sa) != rank or len(sb) != rank or len(set(m.types[0])) != 1:
        return False
    if not (is_static(sa) and is_static(sb)):  # upstream's guards compare sizes: static ones only
        return False
    if not sum_keeps_dtype(m.types[0][0][0]):  # an int32 mm would come back as int64
        return False
    device = m.types[1][1].split(":")[0]
    o = {**DECOMPOSE_MM_OPTIONS, **{k: v for k, v in options.items() if k in DECOMPOSE_MM_OPTIONS}}
    lo, hi = o["min_first_dimension_decomposition"], o["max_other_dimension_decomposition"]
    cpu_first, cpu_other = o["cpu_max_first_dimension_decomposition"], o["cpu_max_other_dimension_decomposition"]
    if device in ("cuda", "xpu"):
        if kind == "mm":
            return sa[0] >= lo and sb[0] < hi and sb[1] < hi
        return sa[0] >= lo and (sa[1] < hi) + (sa[2] < hi) + (sb[2] < hi) >= 2
    if device == "cpu":
        if kind == "mm":
            return sa[0] <= cpu_first and sb[0] <= cpu_other and sb[1] <= cpu_other
        return sa[0] <= cpu_first and sb[0] <= cpu_first
    return False


def decompose_mm_key(m, options: dict):
    """decompose_mm_pass: every mm/addmm/bmm within upstream's size guards is its own group."""
    try:
        if m.shape is None or len(m.shape) + 2 > MAX_RANK or not should_decompose(m, options):
            return None
    except ValueError:
        return None
    return ("decompose_mm_pass", m.cls)


def build_decompose_mm(w, members) -> None:
    """mm: ``sum(A[:, :, None] * B[None], -2)`` (+ bias for addmm); bmm: ``sum(A[..., None] * B[:, None], -2)``,
    as aten.unsqueeze / aten.mul.Tensor / aten.sum.dim_IntList (/ aten.add.Tensor). bf16/fp16 operands are
    computed in float32 and rounded once (prims.convert_element_type), as eager's matmul kernels
    accumulate: upstream rounds the products and the sum to the input dtype, which loses digits under
    cancellation (a relative error of 0.1 on a bf16 addmm element)."""
    aten = torch.ops.aten
    convert = torch.ops.prims.convert_element_type.default
    for m in members:
        kind, bias, a, b = mm_operands(m)
        sa, sb = tuple(m.in_shapes[a]), tuple(m.in_shapes[b])
        t, out = m.types[0][0], m.types[1]
        low = t[0] in UPCAST
        c = ("torch.float32", t[1]) if low else t

        def cast(h, shape, src, dst):
            if src == dst:
                return h
            dtype = torch.float32 if dst[0] == "torch.float32" else UPCAST[dst[0]]
            key = w.key(f"decompose_mm:convert:{dst[0]}", recipe("convert_element_type", convert,
                                                                  (slots(1)[0], dtype)), ((src,), dst))
            return w.apply(key, [h], shape)

        A = w.unsqueeze(cast(w.handle(m.inputs[a]), sa, t, c), len(sa), sa + (1,))
        B = w.unsqueeze(cast(w.handle(m.inputs[b]), sb, t, c), len(sb) - 2, sb[:-2] + (1,) + sb[-2:])
        prod_shape = sa + (sb[-1],)
        mul = w.key("decompose_mm:mul", recipe("mul", aten.mul.Tensor, slots(2)), ((c, c), c))
        red = w.key("decompose_mm:sum", recipe("sum", aten.sum.dim_IntList, (slots(1)[0], [-2])), ((c,), c))
        y = w.apply(red, [w.apply(mul, [A, B], prod_shape)], tuple(m.shape))
        if bias is not None:
            add = w.key("decompose_mm:add", recipe("add", aten.add.Tensor, slots(2)), ((c, t), c))
            y = w.apply(add, [y, w.handle(m.inputs[bias])], tuple(m.shape))
        w.union(m, cast(y, tuple(m.shape), c, out))


decompose_mm_pass = horizontal(
    "decompose_mm_pass", POST_GRAD, decompose_mm_key, build_decompose_mm,
    options={"min_fuse_set_size": 1, "max_fuse_set_size": 1}, builtin=POST_GRAD, builtin_optimus=False,
    wants_options=True, option_defaults=DECOMPOSE_MM_OPTIONS,
    doc="""Memory-bound aten.mm / aten.addmm / aten.bmm with tiny dimensions become a multiply and a sum
    (upstream torch/_inductor/fx_passes/decompose_mem_bound_mm.py, with its size guards and option names:
    see ``decompose_mm.should_decompose``).

    aten.mm(A, B)            (A: [M, K], B: [K, N]; CUDA: M >= 10240, K, N < 32; CPU: M <= 1, K, N <= 2048)
        =>  aten.sum.dim_IntList(aten.mul.Tensor(A.unsqueeze(2), B.unsqueeze(0)), [-2])
    aten.addmm(C, A, B)  =>  the same, then aten.add.Tensor(_, C)
    aten.bmm(A, B)           (A: [b, M, K]; CUDA: b >= 10240 and two of M, K, N < 32; CPU: b <= 1)
        =>  aten.sum.dim_IntList(aten.mul.Tensor(A.unsqueeze(3), B.unsqueeze(1)), [-2])

    A rewrite of one op, run by the horizontal machinery with groups of one (greedy replaces it; in eqsat
    the cost model decides, and it does not credit Inductor's fusion of the multiply into the sum yet).
    """)

PATTERNS = (decompose_mm_pass,)
