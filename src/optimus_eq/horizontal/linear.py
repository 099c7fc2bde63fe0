"""Linear families: batch_linear (n linears of equal shapes -> one bmm/baddbmm), batch_linear_lhs (linears
reading one input -> one linear with concatenated weights) and batch_linear_post_grad (aten.mm / aten.addmm
-> aten.bmm / aten.baddbmm)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from optimus_eq.horizontal.recipes import (bound_call, check_one_input_type, expand_symbolic, prod_sizes, recipe,
                                           slot, slots)
from optimus_eq.registry import POST_GRAD, PRE_GRAD, horizontal

LINEAR_PARAMS = ("input", "weight", "bias")


def _linear_parts(m):
    """(x, w, b) input indices of a ``F.linear`` member (b None without bias), or raise."""
    bound = bound_call(m, "linear", LINEAR_PARAMS)
    x, wt, b = slot(bound, "input"), slot(bound, "weight"), slot(bound, "bias")
    if x is None or wt is None:
        raise ValueError("no input or weight")
    xs, ws = m.in_shapes[x], m.in_shapes[wt]
    ok = xs is not None and ws is not None and len(ws) == 2 and len(xs) >= 2 and xs[-1] == ws[1]
    _check_operands(m, ok, b, ((ws[0],),) if ok else ())
    return x, wt, b


def _check_operands(m, shapes_ok: bool, bias: int | None, bias_shapes) -> None:
    """Raise ValueError unless ``shapes_ok`` and the bias input (if any) has a shape in ``bias_shapes``; then
    :func:`check_one_input_type`."""
    if not shapes_ok:
        raise ValueError("shapes")
    if bias is not None and m.in_shapes[bias] not in bias_shapes:
        raise ValueError("bias shape")
    check_one_input_type(m)


def linear_key(m):
    """batch_linear: same input shape, weight shape, bias or not, dtypes and devices."""
    try:
        x, wt, b = _linear_parts(m)
    except ValueError:
        return None
    return ("batch_linear", m.in_shapes[x], m.in_shapes[wt], b is not None, m.types)


def _trains_weights(w, members, wt: int) -> bool:
    """True when some member's weight and output both require grad in eager's values (``node.meta``):
    the graph is a training step's forward that differentiates the weights. False when unknown."""
    for m in members:
        weight, y = w.eager_value(m.inputs[wt]), w.eager_value(m.cls)
        if weight is not None and y is not None and weight.requires_grad and y.requires_grad:
            return True
    return False


def bmm_add(bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """``torch.bmm(mat1, mat2) + bias``: ``torch.baddbmm(bias, mat1, mat2)`` with the bias added after the
    product instead of as the GEMM's ``beta`` term (mat1 ``[n, M, K]``, mat2 ``[n, K, N]``, bias
    broadcastable to ``[n, M, N]``; result ``[n, M, N]``, the operands' dtype).

    batch_linear's fused op for float32/float64 (:func:`build_linear`). On CUDA ``at::baddbmm`` copies the
    broadcast bias into its output before the GEMM (one more kernel), and Inductor calls it as an extern
    kernel whose bias it does not unfuse (it does so only for ``addmm``: post_grad.py,
    ``unfuse_bias_add_to_pointwise``). Traced by AOTAutograd this is ``aten.bmm`` and ``aten.add``, and
    Inductor fuses the add into the kernel that reads the output (the activation, a residual add): one
    kernel per batched linear instead of two. One FX call, so the cost model prices it as one
    kernel, as it priced baddbmm (the add is fused away). Low-precision dtypes keep ``baddbmm``: rounding
    the product before the add would round twice where eager's linear rounds once.

    Under an autocast region active when the graph runs (a graph optimized from float32 example values and
    then called inside ``torch.autocast``), this is ``torch.baddbmm``: autocast would run the ``bmm`` in the
    low-precision type and the add would then promote the result back to the float32 bias's type, where
    eager's linear (and baddbmm) give the autocast type. (Under ``torch.fx.symbolic_trace``, which unpickling a
    GraphModule runs, ``mat1`` is a Proxy of unknown device: it traces as ``bmm`` and the add.)"""
    if isinstance(mat1, torch.Tensor) and _autocast_enabled(mat1.device.type):
        return torch.baddbmm(bias, mat1, mat2)
    return torch.bmm(mat1, mat2) + bias


def _autocast_enabled(device_type: str) -> bool:
    """``torch.is_autocast_enabled(device_type)``, False for a device type autocast does not know (``meta``:
    it raises there, and a model on the meta device fell back with "unknown device type for autocast")."""
    try:
        return torch.is_autocast_enabled(device_type)
    except RuntimeError:
        return False


def _add_after_bmm(types) -> bool:
    """True when batch_linear's fused op is :func:`bmm_add`: inputs and output of one dtype, float32 or
    float64 (not autocast's mixed types, not bf16/fp16)."""
    ins, out = types
    return all(t == out for t in ins) and out[0] in ("torch.float32", "torch.float64")


def build_linear(w, members) -> None:
    """``Y^T = bmm_add(stack(b).unsqueeze(2), stack(w), stack(x).permute(0, 2, 1))`` (``bmm`` without
    bias; x of rank > 2 flattened to ``[n, rows, in]``), ``y_i = Y^T.permute(0, 2, 1).select(0, i)``
    (viewed back to x's leading dims). :func:`bmm_add` is ``bmm`` then a bias add that Inductor fuses into
    the output's readers; bf16/fp16 and autocast's mixed types keep ``torch.baddbmm`` (see there).

    The weights are ``bmm``'s first operand, untransposed, so their gradient ``dY^T @ X`` (derivatives.yaml,
    ``bmm``: ``self: grad.bmm(mat2.transpose(1, 2))``) is a contiguous ``[n, out, in]`` whose slices have
    each weight's own layout: AccumulateGrad takes them without a copy (``Y = X @ W^T`` would give every
    weight a transposed gradient slice and one eager clone each, see extract/grad.py). The members are
    transposed views of ``Y^T``; pointwise readers read them in place, and a graph output gets eager's
    contiguous layout from the lowering's stride fix (bridge/optimus_bridge/lower.py, ``_fix_strides``).

    That form is for graphs that train the weights (:func:`_trains_weights`); without a backward there is
    no copy to save, so an inference graph gets ``Y = bmm_add(stack(b).unsqueeze(1), stack(x),
    stack(w).permute(0, 2, 1))``, whose members are contiguous as eager's linears (no output clone, no
    strided reads).
    """
    m0, n = members[0], len(members)
    x, wt, b = _linear_parts(m0)
    xs, (out, inp) = tuple(m0.in_shapes[x]), m0.in_shapes[wt]
    rows = prod_sizes(w, xs[:-1])  # a token when a leading dim is symbolic (the batch)
    X = w.stack([w.handle(m.inputs[x]) for m in members], xs)
    if len(xs) > 2:
        X = w.reshape(X, (n, rows, inp))
    W = w.stack([w.handle(m.inputs[wt]) for m in members], (out, inp))
    types = (tuple(m0.types[0][:1] * 3), m0.types[1])
    B = None
    if b is not None:
        B = w.stack([w.handle(m.inputs[b]) for m in members], (out,))
    if _trains_weights(w, members, wt):  # Y^T = W @ X^T: weight gradients in the weights' layout
        lhs, rhs, shape, bias_dim = W, w.permute(X, (0, 2, 1), (n, inp, rows)), (n, out, rows), 2
    else:                                 # Y = X @ W^T: members contiguous, as eager's
        lhs, rhs, shape, bias_dim = X, w.permute(W, (0, 2, 1), (n, inp, out)), (n, rows, out), 1
    if B is None:
        key = w.key("bmm", recipe("bmm", torch.bmm, slots(2)), types)
        Y = w.apply(key, [lhs, rhs], shape)
    else:
        B = w.unsqueeze(B, bias_dim, shape[:bias_dim] + (1,) + shape[bias_dim + 1:])
        if _add_after_bmm(types):
            key = w.key("bmm_add", recipe("bmm_add", bmm_add, slots(3)), types)
        else:
            B = expand_symbolic(w, B, shape, types[0][0])
            key = w.key("baddbmm", recipe("baddbmm", torch.baddbmm, slots(3)), types)
        Y = w.apply(key, [B, lhs, rhs], shape)
    if bias_dim == 2:
        Y = w.permute(Y, (0, 2, 1), (n, rows, out))
    for i, m in enumerate(members):
        y = w.select(Y, 0, i, n, (rows, out))
        if len(xs) > 2:
            y = w.reshape(y, xs[:-1] + (out,))
        w.union(m, y)


def linear_lhs_key(m):
    """batch_linear_lhs: linears reading the same input (e-class), bias or not, dtypes and devices."""
    try:
        x, wt, b = _linear_parts(m)
    except ValueError:
        return None
    if not m.in_shapes[wt] or m.in_shapes[wt][0] <= 0:
        # no output features: nothing to fuse, and the weight cat drops the empty weight (which then gets no
        # gradient where eager gives it an empty one); or a symbolic count (a token < 0, a weight that is a graph
        # input under dynamic=True): the narrows of the fused output need static starts and lengths
        return None
    return ("batch_linear_lhs", m.inputs[x], m.in_shapes[x], b is not None, m.types)


def build_linear_lhs(w, members) -> None:
    m0 = members[0]
    x, wt, b = _linear_parts(m0)
    xs = tuple(m0.in_shapes[x])
    outs = [m.in_shapes[wt][0] for m in members]
    total = sum(outs)
    W = w.cat([w.handle(m.inputs[wt]) for m in members], 0, (total, xs[-1]))
    args = [w.handle(m0.inputs[x]), W]
    if b is not None:
        args.append(w.cat([w.handle(m.inputs[b]) for m in members], 0, (total,)))
    linear = recipe("linear", F.linear, slots(len(args)))
    key = w.key(f"linear{len(args)}", linear, (tuple(m0.types[0][:1] * len(args)), m0.types[1]))
    Y = w.apply(key, args, xs[:-1] + (total,))
    start, d = 0, len(xs) - 1
    for m, o in zip(members, outs):
        w.union(m, w.narrow(Y, d, start, o, total, xs[:-1] + (o,)))
        start += o


# -- Aten-IR (post-grad) linear: aten.mm / aten.addmm -> aten.bmm / aten.baddbmm -----------------------

def mm_operands(m):
    """``(kind, bias, a, b)`` of a plain aten.mm / aten.addmm (beta = alpha = 1) / aten.bmm member (kind
    ``"mm"`` or ``"bmm"``, bias None or its input index, a and b the matrices' input indices), or raise
    ValueError."""
    aten = torch.ops.aten
    r = m.recipe
    if m.op != "Apply" or r.op != "call_function" or r.kwargs:
        raise ValueError("not a plain aten call")
    if r.target is aten.mm.default and r.args == slots(2):
        return "mm", None, 0, 1
    if r.target is aten.addmm.default and r.args == slots(3):
        return "mm", 0, 1, 2
    if r.target is aten.bmm.default and r.args == slots(2):
        return "bmm", None, 0, 1
    raise ValueError("not mm, addmm or bmm")


def _aten_mm_parts(m):
    """(bias, mat1, mat2) input indices of an ``aten.mm``/``aten.addmm`` member (bias None for mm), or
    raise. addmm must have beta = alpha = 1 and a bias of shape [N], [1, N] or [M, N]."""
    kind, bias, a, b = mm_operands(m)
    if kind != "mm":
        raise ValueError("not mm/addmm with default beta and alpha")
    sa, sb = m.in_shapes[a], m.in_shapes[b]
    ok = sa is not None and sb is not None and len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0]
    _check_operands(m, ok, bias, ((sb[1],), (1, sb[1]), (sa[0], sb[1])) if ok else ())
    return bias, a, b


def aten_linear_key(m):
    """batch_linear_post_grad: aten.mm or aten.addmm of equal operand shapes, dtypes and devices."""
    try:
        bias, a, b = _aten_mm_parts(m)
    except ValueError:
        return None
    return ("batch_linear_post_grad", bias is not None, tuple(tuple(s) for s in m.in_shapes), m.types)


def build_aten_linear(w, members) -> None:
    """``Y = aten.baddbmm(stack(bias) (viewed to [n, 1|M, N]), stack(mat1), stack(mat2))`` (``aten.bmm``
    without bias), ``y_i = Y.select(0, i)``. The stacks are cats of unsqueezes, which the vertical rules
    turn into views where the operands are slices of one tensor."""
    aten = torch.ops.aten
    m0, n = members[0], len(members)
    bias, a, b = _aten_mm_parts(m0)
    (M, K), (_, N) = m0.in_shapes[a], m0.in_shapes[b]
    A = w.stack([w.handle(m.inputs[a]) for m in members], (M, K))
    B = w.stack([w.handle(m.inputs[b]) for m in members], (K, N))
    t = m0.types[0][0]
    if bias is None:
        key = w.key("aten.bmm", recipe("bmm", aten.bmm.default, slots(2)), ((t, t), m0.types[1]))
        Y = w.apply(key, [A, B], (n, M, N))
    else:
        bs = tuple(m0.in_shapes[bias])
        C = w.stack([w.handle(m.inputs[bias]) for m in members], bs)
        if len(bs) == 1:
            C = w.unsqueeze(C, 1, (n, 1, N))
        if tuple(bs) != (M, N):
            C = expand_symbolic(w, C, (n, M, N), t, aten_ir=True)
        key = w.key("aten.baddbmm", recipe("baddbmm", aten.baddbmm.default, slots(3)), ((t, t, t), m0.types[1]))
        Y = w.apply(key, [C, A, B], (n, M, N))
    for i, m in enumerate(members):
        w.union(m, w.select(Y, 0, i, n, (M, N)))


batch_linear_lhs = horizontal(
    "batch_linear_lhs", PRE_GRAD, linear_lhs_key, build_linear_lhs, builtin=PRE_GRAD, batches=("linear",),
    shared_input=True,  # members are gathered by their input too (PlanGraph.groups)
    doc="""Linears that read the same input become one linear with concatenated weights.

    y1 = F.linear(x, w1, b1); y2 = F.linear(x, w2, b2)          (w1: [o1, k], w2: [o2, k])
        =>  y = F.linear(x, cat([w1, w2]), cat([b1, b2])); y1 = y[..., :o1]; y2 = y[..., o1:]
    """)
#: the linear-lhs batching, as other modules refer to it (patterns/gemm_lhs.py regroups its members; a pattern's
#: name is written in its own module only)
SHARED_INPUT_LINEARS = batch_linear_lhs

batch_linear = horizontal(
    "batch_linear", PRE_GRAD, linear_key, build_linear, builtin=PRE_GRAD, batches=("linear",),
    doc="""Independent linears of equal shapes become one batched matmul.

    y_i = F.linear(x_i, w_i, b_i), i < n         (x_i: [B, k], w_i: [o, k], b_i: [o])
        =>  Y = bmm_add(stack(b).unsqueeze(1), stack(x), stack(w).permute(0, 2, 1)); y_i = Y[i]
    (bmm_add(b, x, w) = torch.bmm(x, w) + b, the add fused by Inductor into the readers; torch.baddbmm for
    bf16/fp16; torch.bmm without bias; a split -> n linears -> cat becomes one bmm_add between views)
    """)

batch_linear_post_grad = horizontal(
    "batch_linear_post_grad", POST_GRAD, aten_linear_key, build_aten_linear, builtin=POST_GRAD,
    aliases={"group_linear": "(groups of equal shapes as one bmm; no fbgemm); groups of different shapes are "
                             "left"},
    doc="""Independent aten.mm / aten.addmm of equal shapes become one aten.bmm / aten.baddbmm.

    y_i = aten.addmm(b_i, x_i, aten.permute(w_i, [1, 0])), i < n      (x_i: [M, K], w_i: [N, K], b_i: [N])
        =>  Y = aten.baddbmm(stack(b).unsqueeze(1), stack(x), stack(permute(w))); y_i = aten.select(Y, 0, i)
    (addmm only with beta = alpha = 1; bias [N], [1, N] or [M, N]; aten.bmm for aten.mm)
    """)

#: The family in greedy's pass order: upstream registers batch_linear_lhs before batch_linear, so that linears
#: sharing their input become one wider linear before the rest are batched.
PRE_GRAD_PATTERNS = (batch_linear_lhs, batch_linear)
POST_GRAD_PATTERNS = (batch_linear_post_grad,)
