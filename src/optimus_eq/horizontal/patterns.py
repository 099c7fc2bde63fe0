"""The horizontal patterns (Optimus' pre-grad group/batch fusions, upstream
torch/_inductor/fx_passes/group_batch_fusion.py), declared as group keys plus builders.

Order is the greedy pass order; upstream registers batch_linear_lhs before batch_linear, so that linears
sharing their input become one wider linear before the rest are batched.
"""

from __future__ import annotations

from optimus_eq.horizontal import builders as b
from optimus_eq.registry import HorizontalPattern


def _pointwise(name: str, op: str, doc: str, exclude_outputs: bool = False,
               level: str = "pre_grad") -> HorizontalPattern:
    return HorizontalPattern(
        name=name,
        levels=(level,),
        doc=doc,
        group_key=b.pointwise_key(frozenset([op]), exclude_outputs),
        build=b.build_pointwise,
    )


batch_linear_lhs = HorizontalPattern(
    name="batch_linear_lhs",
    levels=("pre_grad",),
    doc="""Linears that read the same input become one linear with concatenated weights.

    y1 = F.linear(x, w1, b1); y2 = F.linear(x, w2, b2)          (w1: [o1, k], w2: [o2, k])
        =>  y = F.linear(x, cat([w1, w2]), cat([b1, b2])); y1 = y[..., :o1]; y2 = y[..., o1:]
    """,
    group_key=b.linear_lhs_key,
    build=b.build_linear_lhs,
)

batch_linear = HorizontalPattern(
    name="batch_linear",
    levels=("pre_grad",),
    doc="""Independent linears of equal shapes become one batched matmul.

    y_i = F.linear(x_i, w_i, b_i), i < n         (x_i: [B, k], w_i: [o, k], b_i: [o])
        =>  Y = bmm_add(stack(b).unsqueeze(1), stack(x), stack(w).permute(0, 2, 1)); y_i = Y[i]
    (bmm_add(b, x, w) = torch.bmm(x, w) + b, the add fused by Inductor into the readers; torch.baddbmm for
    bf16/fp16; torch.bmm without bias; a split -> n linears -> cat becomes one bmm_add between views)
    """,
    group_key=b.linear_key,
    build=b.build_linear,
)

batch_layernorm = HorizontalPattern(
    name="batch_layernorm",
    levels=("pre_grad",),
    doc="""Independent layer norms of equal shapes, normalized_shape and eps become one layer norm.

    y_i = F.layer_norm(x_i, (D,), w_i, b_i, eps)
        =>  Y = torch.addcmul(stack(b)[:, None], F.layer_norm(stack(x), (D,), eps=eps), stack(w)[:, None])
            y_i = Y[i]
    """,
    group_key=b.layer_norm_key,
    build=b.build_layer_norm,
)

batch_tanh = _pointwise("batch_tanh", "tanh", """Independent tanh of equal shapes become one.

    torch.tanh(a), torch.tanh(b)  =>  t = torch.tanh(torch.stack([a, b])); t[0], t[1]
    """)
batch_sigmoid = _pointwise("batch_sigmoid", "sigmoid", """Independent sigmoids of equal shapes become one.

    torch.sigmoid(a), torch.sigmoid(b)  =>  s = torch.sigmoid(torch.stack([a, b])); s[0], s[1]
    """)
batch_relu = _pointwise("batch_relu", "relu", """Independent relus of equal shapes become one.

    F.relu(a), F.relu(b)  =>  r = F.relu(torch.stack([a, b])); r[0], r[1]
    """)
batch_detach = _pointwise("batch_detach", "detach", """Independent detaches of equal shapes become one
    (not for graph outputs: eager's detach aliases its input).

    a.detach(), b.detach()  =>  d = torch.stack([a, b]).detach(); d[0], d[1]
    """, exclude_outputs=True)
batch_nan_to_num = _pointwise("batch_nan_to_num", "nan_to_num", """Independent nan_to_num with the same
    replacement values become one.

    torch.nan_to_num(a, 0.0), torch.nan_to_num(b, 0.0)  =>  n = torch.nan_to_num(torch.stack([a, b]), 0.0); n[0], n[1]
    """)
batch_clamp = _pointwise("batch_clamp", "clamp", """Independent clamps with the same bounds become one.

    torch.clamp(a, 0, 1), torch.clamp(b, 0, 1)  =>  c = torch.clamp(torch.stack([a, b]), 0, 1); c[0], c[1]
    """)
batch_dropout = _pointwise("batch_dropout", "dropout", """Independent training-mode dropouts with the same
    p become one. Each element still gets its own Bernoulli draw, but from another place in the random
    stream than in eager: results match eager in distribution, not bit for bit under a fixed seed (as with
    Inductor's own dropout). With ``torch._inductor.config.fallback_random`` dropouts are left alone.

    F.dropout(a, 0.1), F.dropout(b, 0.1)  =>  d = F.dropout(torch.stack([a, b]), 0.1); d[0], d[1]
    """)

# -- post-grad (Aten-IR): upstream's PostGradBatchLinearFusion and BatchPointwise*PostGradFusion --------
# Members are aten OpOverload calls; the fused op keeps the members' OpOverload (pointwise) or is
# aten.bmm / aten.baddbmm (linear); stacks and selects lower to aten.cat / aten.unsqueeze / aten.select.

batch_linear_post_grad = HorizontalPattern(
    name="batch_linear_post_grad",
    levels=("post_grad",),
    doc="""Independent aten.mm / aten.addmm of equal shapes become one aten.bmm / aten.baddbmm.

    y_i = aten.addmm(b_i, x_i, aten.permute(w_i, [1, 0])), i < n      (x_i: [M, K], w_i: [N, K], b_i: [N])
        =>  Y = aten.baddbmm(stack(b).unsqueeze(1), stack(x), stack(permute(w))); y_i = aten.select(Y, 0, i)
    (addmm only with beta = alpha = 1; bias [N], [1, N] or [M, N]; aten.bmm for aten.mm)
    """,
    group_key=b.aten_linear_key,
    build=b.build_aten_linear,
)


def _aten_pointwise(op: str, extra: str = "") -> HorizontalPattern:
    return _pointwise(f"batch_aten_{op}", op, f"""Independent aten.{op} of equal shapes (and equal constant
    arguments{extra}) become one aten.{op} of the stacked operands; dtypes and devices are in the group key,
    so fp32 and bf16 ops are never fused together.

    aten.{op}(a1{', b1' if extra else ''}), aten.{op}(a2{', b2' if extra else ''})
        =>  f = aten.{op}(aten.cat([a1[None], a2[None]]){', aten.cat([b1[None], b2[None]])' if extra else ''}); f[0], f[1]
    """, level="post_grad")


_BINARY = (": alpha, rounding_mode, a scalar operand's value; a scalar operand and a tensor operand are "
           "different ops, and operands that broadcast are not fused")
batch_aten_tanh = _aten_pointwise("tanh")
batch_aten_sigmoid = _aten_pointwise("sigmoid")
batch_aten_relu = _aten_pointwise("relu")
batch_aten_add = _aten_pointwise("add", _BINARY)
batch_aten_sub = _aten_pointwise("sub", _BINARY)
batch_aten_mul = _aten_pointwise("mul", _BINARY)
batch_aten_div = _aten_pointwise("div", _BINARY)

decompose_mm_pass = HorizontalPattern(
    name="decompose_mm_pass",
    levels=("post_grad",),
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
    """,
    group_key=b.decompose_mm_key,
    build=b.build_decompose_mm,
    options={"min_fuse_set_size": 1, "max_fuse_set_size": 1},
)

POST_GRAD_PATTERNS = (decompose_mm_pass, batch_linear_post_grad, batch_aten_tanh, batch_aten_sigmoid, batch_aten_relu, batch_aten_add,
                      batch_aten_sub, batch_aten_div, batch_aten_mul)

einsum_to_pointwise_pass = HorizontalPattern(
    name="einsum_to_pointwise_pass",
    levels=("pre_grad",),
    doc="""An einsum that is a broadcast multiply and a sum over x's last letter becomes pointwise ops
    (upstream split_cat.py ``replace_einsum_to_pointwise``, tested by test_kernel_optimization.py).

    torch.einsum("bni,nio->bno", x, w)   (also "bni,bnio->bno": "P i, Q i o -> P o", Q a suffix of P)
        =>  (x.unsqueeze(-1) * w).sum(-2)

    A rewrite of one op, run by the horizontal machinery with groups of one (so greedy replaces it and
    eqsat adds it as an alternative). Upstream also asks for an ``add`` user (so that Inductor fuses
    mul, sum and add into one kernel); here every matching einsum within the group search's reach is
    rewritten in greedy, and in eqsat the cost model decides (it does not credit Inductor's fusion of
    the mul into the sum yet, so it keeps the einsum).
    """,
    group_key=b.einsum_key,
    build=b.build_einsum,
    options={"min_fuse_set_size": 1, "max_fuse_set_size": 1},
)

decompose_gemv_pass = HorizontalPattern(
    name="decompose_gemv_pass",
    levels=("pre_grad",),
    doc="""On CUDA/XPU, a linear with one output feature (a matrix-vector product) becomes a multiply and a
    sum, which Inductor fuses into the kernel that produced its input (ours, not upstream's: see
    ``horizontal/gemv.py``; an extern addmm with one output column is two kernels on CUDA).

    F.linear(x, w, b)        (x: [..., K], w: [1, K], b: [1]; float32/float64, bf16/fp16 in float32)
        =>  torch.sum(x * w, -1, keepdim=True) + b

    A rewrite of one op, run by the horizontal machinery with groups of one (greedy replaces it; in eqsat
    the cost model decides, and it does not credit Inductor's fusion of the multiply and sum into the
    producer, so it keeps the linear).
    """,
    group_key=b.gemv_key,
    build=b.build_gemv,
    options={"min_fuse_set_size": 1, "max_fuse_set_size": 1},
)

PATTERNS = (batch_linear_lhs, batch_linear, batch_layernorm, batch_tanh, batch_sigmoid, batch_relu,
            batch_detach, batch_nan_to_num, batch_clamp, batch_dropout, einsum_to_pointwise_pass,
            decompose_gemv_pass)
